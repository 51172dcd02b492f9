// Webhook subscriptions over HTTP (issue 14, item 1): every status code of the four routes,
// the secret shown once and invisible afterwards, project scoping rules, the cap of 20, one
// subscription per url and member (issue 25, 409), and the URL rules of a production
// configuration (WEBHOOK_ALLOW_PRIVATE off).
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'

let world: TestWorld
let alice: CreatedUser
let bob: CreatedUser
let aliceProject: { id: string }
let bobPrivate: { id: string }
let bobPublic: { id: string }

const HTTPS = 'https://hooks.example.com/todo'

beforeAll(async () => {
  world = await startWorld()
  alice = await world.createUser('alice')
  bob = await world.createUser('bob')
  aliceProject = await world.admin('create-project', '--owner', 'alice', '--name', 'Alpha', '--hashtag', 'alpha')
  bobPrivate = await world.admin('create-project', '--owner', 'bob', '--name', 'Secret', '--hashtag', 'secret', '--privacy', 'private')
  bobPublic = await world.admin('create-project', '--owner', 'bob', '--name', 'Open', '--hashtag', 'open')
})
afterAll(() => world.close())

async function subscribe(user: CreatedUser, json: Record<string, unknown> = { url: HTTPS, event_type: 'new_todo' }) {
  return world.post('/v1/webhooks/subscriptions', { auth: user.api_key, json })
}

describe('POST /v1/webhooks/subscriptions', () => {
  it('201 with the resource and its whsec_ secret, shown only in this response', async () => {
    const res = await subscribe(alice, { url: HTTPS, event_type: 'new_todo', project_ids: [aliceProject.id] })
    expect(res.status, res.text).toBe(201)
    expect(res.body).toMatchObject({ url: HTTPS, event_type: 'new_todo', project_ids: [aliceProject.id], active: true })
    expect(res.body.id).toMatch(/^hook_[0-9a-f]{32}$/)
    expect(res.body.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/)
    expect(Object.keys(res.body).sort()).toEqual(['active', 'created_at', 'event_type', 'id', 'project_ids', 'secret', 'updated_at', 'url'])

    const list = await world.get('/v1/webhooks/subscriptions', { auth: alice.api_key })
    expect(list.status).toBe(200)
    expect(Array.isArray(list.body)).toBe(true)
    const { secret, ...resource } = res.body
    expect(list.body).toContainEqual(resource)
    expect(list.text).not.toContain(secret)
    await world.delete(`/v1/webhooks/subscriptions/${res.body.id}`, { auth: alice.api_key })
  })

  it('the url is stored as parsed: scheme and host lower-cased, surrounding whitespace gone', async () => {
    const res = await subscribe(alice, { url: ' HTTPS://Hooks.Example.COM/In \n', event_type: 'new_todo' })
    expect(res.status, res.text).toBe(201)
    expect(res.body.url).toBe('https://hooks.example.com/In')
    await world.delete(`/v1/webhooks/subscriptions/${res.body.id}`, { auth: alice.api_key })
  })

  it('omitted or empty project_ids mean all projects; another member’s public project may be named', async () => {
    const omitted = await subscribe(alice)
    expect(omitted.status).toBe(201)
    expect(omitted.body.project_ids).toEqual([])
    const other = await subscribe(alice, { url: `${HTTPS}/other`, event_type: 'new_todo', project_ids: [bobPublic.id, bobPublic.id] })
    expect(other.status, other.text).toBe(201)
    expect(other.body.project_ids).toEqual([bobPublic.id])
    for (const created of [omitted, other]) await world.delete(`/v1/webhooks/subscriptions/${created.body.id}`, { auth: alice.api_key })
  })

  it.each([
    ['an event_type other than new_todo', { url: HTTPS, event_type: 'new_comment' }],
    ['a missing event_type', { url: HTTPS }],
    ['a missing url', { event_type: 'new_todo' }],
    ['a relative url', { url: '/hooks', event_type: 'new_todo' }],
    ['not a url', { url: 'hooks.example.com', event_type: 'new_todo' }],
    ['plain http without WEBHOOK_ALLOW_PRIVATE', { url: 'http://hooks.example.com/', event_type: 'new_todo' }],
    ['another scheme', { url: 'ftp://hooks.example.com/', event_type: 'new_todo' }],
    ['credentials in the url', { url: 'https://user:pass@hooks.example.com/', event_type: 'new_todo' }],
    ['a loopback literal', { url: 'https://127.0.0.1/', event_type: 'new_todo' }],
    ['a decimal loopback literal', { url: 'https://2130706433/', event_type: 'new_todo' }],
    ['an octal loopback literal', { url: 'https://0177.0.0.1/', event_type: 'new_todo' }],
    ['an IPv4-mapped IPv6 loopback', { url: 'https://[::ffff:127.0.0.1]/', event_type: 'new_todo' }],
    ['IPv6 loopback', { url: 'https://[::1]/', event_type: 'new_todo' }],
    ['0.0.0.0', { url: 'https://0.0.0.0/', event_type: 'new_todo' }],
    ['the cloud metadata address', { url: 'https://169.254.169.254/latest/meta-data', event_type: 'new_todo' }],
    ['a private network', { url: 'https://10.1.2.3/', event_type: 'new_todo' }],
    ['an IPv4-compatible IPv6 loopback', { url: 'https://[::127.0.0.1]/', event_type: 'new_todo' }],
    ['localhost by name', { url: 'https://localhost/', event_type: 'new_todo' }],
    ['a name under .internal', { url: 'https://metadata.google.internal/', event_type: 'new_todo' }],
    ['an unknown project', { url: HTTPS, event_type: 'new_todo', project_ids: ['proj_00000000000000000000000000000000'] }],
    ['not a project id', { url: HTTPS, event_type: 'new_todo', project_ids: ['alpha'] }],
    ['another member’s private project', { url: HTTPS, event_type: 'new_todo', project_ids: [() => bobPrivate.id] }],
    ['21 project ids', { url: HTTPS, event_type: 'new_todo', project_ids: Array.from({ length: 21 }, () => () => aliceProject.id) }],
    ['project_ids not an array', { url: HTTPS, event_type: 'new_todo', project_ids: 'all' }],
  ])('422 for %s', async (_name, input) => {
    const json = { ...input } as Record<string, unknown>
    if (Array.isArray(json.project_ids)) json.project_ids = json.project_ids.map((p) => (typeof p === 'function' ? p() : p))
    const res = await subscribe(alice, json)
    expect(res.status, res.text).toBe(422)
    expect(res.body).toEqual({ error: expect.any(String) })
    if (json.project_ids === undefined || !Array.isArray(json.project_ids)) return
    expect(res.text).not.toContain('Secret')
  })

  it('403 for a read-only key and for a token without write; the 21st subscription is 422', async () => {
    expect((await world.post('/v1/webhooks/subscriptions', { auth: bob.read_only_api_key, json: { url: HTTPS, event_type: 'new_todo' } })).status).toBe(403)
    const reader = await world.token('bob', 'public')
    expect((await world.post('/v1/webhooks/subscriptions', { auth: reader, json: { url: HTTPS, event_type: 'new_todo' } })).status).toBe(403)
    for (let i = 0; i < 20; i++) expect((await subscribe(bob, { url: `${HTTPS}/${i}`, event_type: 'new_todo' })).status).toBe(201)
    const over = await subscribe(bob, { url: `${HTTPS}/20`, event_type: 'new_todo' })
    expect(over.status).toBe(422)
    expect(over.body.error).toMatch(/20/)
    const list = await world.get('/v1/webhooks/subscriptions', { auth: bob.api_key })
    expect(list.body).toHaveLength(20)
    for (const s of list.body) expect((await world.delete(`/v1/webhooks/subscriptions/${s.id}`, { auth: bob.api_key })).status).toBe(204)
  })
})

describe('one subscription per url and member (issue 25)', () => {
  it('409 {error} naming the subscription for a url the member already subscribes to, however it was spelled; another member may subscribe to it', async () => {
    const first = await subscribe(alice, { url: 'https://hooks.example.com/once', event_type: 'new_todo' })
    expect(first.status, first.text).toBe(201)
    const again = await subscribe(alice, { url: 'https://hooks.example.com/once', event_type: 'new_todo', project_ids: [aliceProject.id] })
    expect(again.status, again.text).toBe(409)
    expect(again.body).toEqual({ error: expect.stringContaining(first.body.id) })
    // The same url in another spelling (scheme and host case, whitespace) is the same url.
    const respelled = await subscribe(alice, { url: ' HTTPS://Hooks.Example.COM/once', event_type: 'new_todo' })
    expect(respelled.status, respelled.text).toBe(409)
    expect(respelled.body).toEqual({ error: expect.any(String) })
    // A different path or query is a different url; another member's subscription is theirs.
    const other = await subscribe(alice, { url: 'https://hooks.example.com/once?team=2', event_type: 'new_todo' })
    expect(other.status, other.text).toBe(201)
    const bobs = await subscribe(bob, { url: 'https://hooks.example.com/once', event_type: 'new_todo' })
    expect(bobs.status, bobs.text).toBe(201)
    const list = (await world.get('/v1/webhooks/subscriptions', { auth: alice.api_key })).body as { url: string }[]
    expect(list.filter((s) => s.url === 'https://hooks.example.com/once')).toHaveLength(1)
    for (const id of [first.body.id, other.body.id]) await world.delete(`/v1/webhooks/subscriptions/${id}`, { auth: alice.api_key })
    await world.delete(`/v1/webhooks/subscriptions/${bobs.body.id}`, { auth: bob.api_key })
  })

  it('PATCH to the url of another of the member\'s subscriptions is 409 and changes nothing; to its own url, 200', async () => {
    const one = (await subscribe(alice, { url: 'https://hooks.example.com/one', event_type: 'new_todo' })).body
    const two = (await subscribe(alice, { url: 'https://hooks.example.com/two', event_type: 'new_todo' })).body
    const clash = await world.patch(`/v1/webhooks/subscriptions/${two.id}`, { auth: alice.api_key, json: { url: 'https://hooks.example.com/one', active: false } })
    expect(clash.status, clash.text).toBe(409)
    expect(clash.body).toEqual({ error: expect.stringContaining(one.id) })
    const [unchanged] = (await world.get('/v1/webhooks/subscriptions', { auth: alice.api_key })).body.filter((s: { id: string }) => s.id === two.id)
    expect(unchanged).toMatchObject({ url: 'https://hooks.example.com/two', active: true })
    const same = await world.patch(`/v1/webhooks/subscriptions/${one.id}`, { auth: alice.api_key, json: { url: 'https://hooks.example.com/one' } })
    expect(same.status, same.text).toBe(200)
    // Two PATCHes racing each other to one url: one wins, the other is 409 (never two rows).
    const three = (await subscribe(alice, { url: 'https://hooks.example.com/three', event_type: 'new_todo' })).body
    const raced = await Promise.all([two.id, three.id].map((id) =>
      world.patch(`/v1/webhooks/subscriptions/${id}`, { auth: alice.api_key, json: { url: 'https://hooks.example.com/four' } })))
    expect(raced.map((r) => r.status).sort()).toEqual([200, 409])
    for (const id of [one.id, two.id, three.id]) await world.delete(`/v1/webhooks/subscriptions/${id}`, { auth: alice.api_key })
  })

  it('creates racing each other to one url: one 201, the others 409', async () => {
    const raced = await Promise.all(Array.from({ length: 4 }, () => subscribe(alice, { url: 'https://hooks.example.com/race', event_type: 'new_todo' })))
    expect(raced.map((r) => r.status).sort()).toEqual([201, 409, 409, 409])
    for (const r of raced.filter((r) => r.status === 409)) expect(r.body).toEqual({ error: expect.any(String) })
    await world.delete(`/v1/webhooks/subscriptions/${raced.find((r) => r.status === 201)!.body.id}`, { auth: alice.api_key })
  })
})

describe('GET /v1/webhooks/subscriptions', () => {
  it('a plain array of your own subscriptions; a read-only key and a public-only token get 403, a write token 200', async () => {
    const created = await subscribe(alice)
    const bobs = await subscribe(bob)
    const mine = await world.get('/v1/webhooks/subscriptions', { auth: alice.api_key })
    expect(mine.body.map((s: { id: string }) => s.id)).toContain(created.body.id)
    expect(mine.body.map((s: { id: string }) => s.id)).not.toContain(bobs.body.id)
    expect((await world.get('/v1/webhooks/subscriptions', { auth: alice.read_only_api_key })).status).toBe(403)
    expect((await world.get('/v1/webhooks/subscriptions', { auth: await world.token('alice', 'public') })).status).toBe(403)
    const writer = await world.get('/v1/webhooks/subscriptions', { auth: await world.token('alice', 'write') })
    expect(writer.status).toBe(200)
    expect(writer.body).toEqual(mine.body)
    await world.delete(`/v1/webhooks/subscriptions/${created.body.id}`, { auth: alice.api_key })
    await world.delete(`/v1/webhooks/subscriptions/${bobs.body.id}`, { auth: bob.api_key })
  })
})

describe('PATCH and DELETE /v1/webhooks/subscriptions/{id}', () => {
  it('PATCH changes what is sent (200), [] means all projects; 404 for another member’s or an unknown id; 403 read-only; 422 bad input', async () => {
    const created = (await subscribe(alice)).body
    const path = `/v1/webhooks/subscriptions/${created.id}`
    const scoped = await world.patch(path, { auth: alice.api_key, json: { project_ids: [aliceProject.id] } })
    expect(scoped.status, scoped.text).toBe(200)
    expect(scoped.body).toMatchObject({ id: created.id, url: HTTPS, project_ids: [aliceProject.id], active: true })
    expect(scoped.body.secret).toBeUndefined()
    const moved = await world.patch(path, { auth: alice.api_key, json: { url: 'https://other.example.com/x', event_type: 'new_todo', project_ids: [] } })
    expect(moved.body).toMatchObject({ url: 'https://other.example.com/x', project_ids: [] })
    const off = await world.patch(path, { auth: alice.api_key, json: { active: false } })
    expect(off.body.active).toBe(false)
    expect((await world.patch(path, { auth: alice.api_key, json: { active: true } })).body.active).toBe(true)

    expect((await world.patch(path, { auth: bob.api_key, json: { url: HTTPS } })).status).toBe(404)
    expect((await world.patch('/v1/webhooks/subscriptions/hook_00000000000000000000000000000000', { auth: alice.api_key, json: {} })).status).toBe(404)
    expect((await world.patch('/v1/webhooks/subscriptions/nonsense', { auth: alice.api_key, json: {} })).status).toBe(404)
    expect((await world.patch(path, { auth: alice.read_only_api_key, json: { url: HTTPS } })).status).toBe(403)
    expect((await world.patch(path, { auth: alice.api_key, json: { event_type: 'deleted_todo' } })).status).toBe(422)
    expect((await world.patch(path, { auth: alice.api_key, json: { url: 'http://hooks.example.com' } })).status).toBe(422)
    expect((await world.patch(path, { auth: alice.api_key, json: { project_ids: [bobPrivate.id] } })).status).toBe(422)
    expect((await world.patch(path, { auth: alice.api_key, json: { active: 'yes' } })).status).toBe(422)
    // Nothing of that changed it.
    const [after] = (await world.get('/v1/webhooks/subscriptions', { auth: alice.api_key })).body.filter((s: { id: string }) => s.id === created.id)
    expect(after).toMatchObject({ url: 'https://other.example.com/x', project_ids: [], active: true })

    expect((await world.delete(path, { auth: alice.read_only_api_key })).status).toBe(403)
    expect((await world.delete(path, { auth: bob.api_key })).status).toBe(404)
    expect((await world.delete(path, { auth: alice.api_key })).status).toBe(204)
    expect((await world.delete(path, { auth: alice.api_key })).status).toBe(404)
    expect((await world.delete('/v1/webhooks/subscriptions/hook_00000000000000000000000000000000', { auth: alice.api_key })).status).toBe(404)
  })
})

describe('the signing secret', () => {
  it('is invisible to members: no grant on app.webhook_secrets, and no route returns it after creation', async () => {
    const created = (await subscribe(alice)).body
    const attempt = world.sql.begin(async (tx) => {
      await tx`select set_config('role', 'authenticated', true), set_config('request.jwt.claims', ${JSON.stringify({ sub: alice.id.replace(/^user_/, '').replace(/(.{8})(.{4})(.{4})(.{4})(.{12})/, '$1-$2-$3-$4-$5'), role: 'authenticated', can_write: true })}, true)`
      return tx`select secret from app.webhook_secrets`
    })
    await expect(attempt).rejects.toThrow(/permission denied/)
    const patched = await world.patch(`/v1/webhooks/subscriptions/${created.id}`, { auth: alice.api_key, json: {} })
    expect(patched.text).not.toContain(created.secret)
    await world.delete(`/v1/webhooks/subscriptions/${created.id}`, { auth: alice.api_key })
  })
})
