// SPEC section 5: API keys (header or query, query wins), read-only keys, OAuth access
// tokens (scopes, expiry, forgery, revocation), subscriptions (401 with upgrade_url).
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SignJWT } from 'jose'
import { sha256Hex, signAccessToken } from '../functions/lib/tokens.ts'
import { JWT_SECRET, type CreatedUser, type TestWorld, startWorld } from './support/app.ts'

let world: TestWorld
let alice: CreatedUser

beforeAll(async () => {
  world = await startWorld()
  alice = await world.createUser('alice', '--time-zone', 'Europe/Berlin')
})
afterAll(() => world.close())

describe('API keys', () => {
  it('200 with a key in the Authorization header', async () => {
    const res = await world.get('/v1/users/me', { auth: alice.api_key })
    expect(res.status).toBe(200)
    expect(res.body.username).toBe('alice')
  })

  it('200 with a key in the api_key query parameter', async () => {
    const res = await world.get(`/v1/users/me?api_key=${alice.api_key}`)
    expect(res.status).toBe(200)
    expect(res.body.id).toBe(alice.id)
  })

  it('the query parameter wins over the header when both are sent', async () => {
    const bob = await world.createUser('bob_keys')
    const res = await world.get(`/v1/users/me?api_key=${bob.api_key}`, { auth: alice.api_key })
    expect(res.body.username).toBe('bob_keys')
    const invalidQuery = await world.get('/v1/users/me?api_key=svc_sk_wrong', { auth: alice.api_key })
    expect(invalidQuery.status).toBe(403)
  })

  it('an OAuth access token in the api_key query parameter: 403, valid or not, with or without a good header; never in a URL', async () => {
    const token = await world.token('alice', 'public write', { firstParty: true })
    expect((await world.get('/v1/users/me', { auth: token })).status).toBe(200)
    for (const [path, auth] of [
      [`/v1/users/me?api_key=${token}`, undefined],
      [`/v1/users/me?api_key=${token}`, alice.api_key],
      [`/v1/users/me?api_key=${token}`, token],
      ['/v1/users/me?api_key=not-a-token', alice.api_key],
      [`/v1/todos?api_key=${token}`, undefined],
    ] as const) {
      const res = await world.request(path.startsWith('/v1/todos') ? 'POST' : 'GET', path, { auth, json: path.startsWith('/v1/todos') ? { body: 'via the url' } : undefined })
      expect(res.status, path).toBe(403)
      expect(res.body).toEqual({ error: 'Only API keys may be sent in the api_key query parameter; send an OAuth access token in the Authorization header.' })
    }
    expect((await world.get('/v1/users/me/todos', { auth: alice.api_key })).body.data.map((t: { body: string }) => t.body)).not.toContain('via the url')
  })

  it('403 without any credential', async () => {
    const res = await world.get('/v1/users/me')
    expect(res.status).toBe(403)
    expect(res.body).toEqual({ error: expect.stringMatching(/Authentication required/) })
  })

  it('403 for an unknown key, and for a scheme other than Bearer', async () => {
    expect((await world.get('/v1/users/me', { auth: 'svc_sk_not-a-real-key' })).status).toBe(403)
    const basic = await world.get('/v1/users/me', { headers: { authorization: `Basic ${alice.api_key}` } })
    expect(basic.status).toBe(403)
  })

  it('stores only the SHA-256 of a key', async () => {
    const rows = await world.sql`select encode(key_hash, 'hex') as hash from app.api_keys k join app.users u on u.id = k.user_id where u.username = 'alice'`
    expect(rows.map((r) => r.hash)).toContain(await sha256Hex(alice.api_key))
    const dump = JSON.stringify(await world.sql`select * from app.api_keys`)
    expect(dump).not.toContain(alice.api_key.slice('svc_sk_'.length))
  })

  it('a read-only key reads (200) but cannot write (403)', async () => {
    expect((await world.get('/v1/users/me', { auth: alice.read_only_api_key })).status).toBe(200)
    const res = await world.patch('/v1/users/me', { auth: alice.read_only_api_key, json: { time_zone: 'UTC' } })
    expect(res.status).toBe(403)
    expect(res.body).toEqual({ error: 'This API key is read-only.' })
    const me = await world.get('/v1/users/me', { auth: alice.api_key })
    expect(me.body.time_zone).toBe('Europe/Berlin')
  })

  it('create-key --read-only makes another read-only key', async () => {
    const { api_key } = await world.admin('create-key', '--user', 'alice', '--read-only')
    expect((await world.get('/v1/users/me', { auth: api_key })).status).toBe(200)
    expect((await world.patch('/v1/users/me', { auth: api_key, json: { time_zone: 'UTC' } })).status).toBe(403)
  })
})

describe('OAuth access tokens', () => {
  it('a bearer without the svc_sk_ prefix is an OAuth token: 200 when valid', async () => {
    const token = await world.token('alice', 'public')
    const res = await world.get('/v1/users/me', { auth: token })
    expect(res.status).toBe(200)
    expect(res.body.username).toBe('alice')
  })

  it('writing needs the write scope (403 without it, 200 with it)', async () => {
    const readOnly = await world.token('alice', 'public')
    const denied = await world.patch('/v1/users/me', { auth: readOnly, json: { time_zone: 'Asia/Tokyo' } })
    expect(denied.status).toBe(403)
    expect(denied.body).toEqual({ error: 'This access token lacks the write scope.' })
    const writer = await world.token('alice', 'public write')
    const ok = await world.patch('/v1/users/me', { auth: writer, json: { time_zone: 'Asia/Tokyo' } })
    expect(ok.status).toBe(200)
    expect(ok.body.time_zone).toBe('Asia/Tokyo')
  })

  it('the token carries role, sub, exp, scope, client_id and the client flags', async () => {
    const token = await world.token('alice', 'public chat', { firstParty: true, chat: true })
    const payload = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString())
    // Not a Supabase session (issue 11, item 9): a role nobody else may become, our own audience, the public id.
    expect(payload).toMatchObject({ role: 'api_client', scope: 'public chat', first_party: true, chat: true, aud: 'todo-sharing-api' })
    expect(payload.sub).toBe(alice.id)
    expect(payload.exp).toBeGreaterThan(Date.now() / 1000)
    expect(typeof payload.client_id).toBe('string')
  })

  it('403 for an expired token', async () => {
    const token = await world.token('alice', 'public')
    const payload = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString())
    const expired = await signAccessToken(JWT_SECRET, { ...payload }, -60)
    expect((await world.get('/v1/users/me', { auth: expired })).status).toBe(403)
  })

  it('403 for a token signed with another secret, or not a JWT at all', async () => {
    const token = await world.token('alice', 'public')
    const payload = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString())
    const forged = await signAccessToken('some-other-secret-some-other-secret', payload, 600)
    expect((await world.get('/v1/users/me', { auth: forged })).status).toBe(403)
    expect((await world.get('/v1/users/me', { auth: 'not.a.jwt' })).status).toBe(403)
  })

  it('403 for a validly signed token that was never issued', async () => {
    const minted = await signAccessToken(JWT_SECRET, {
      sub: alice.id, jti: crypto.randomUUID(), scope: 'public write', client_id: 'x', first_party: true, chat: true,
    }, 600)
    expect((await world.get('/v1/users/me', { auth: minted })).status).toBe(403)
  })

  it('403 for a Supabase session signed with the same secret, even naming an issued token (issue 11, item 9)', async () => {
    const token = await world.token('alice', 'public write')
    const payload = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString())
    const uuid = alice.id.replace(/^user_(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5')
    const key = new TextEncoder().encode(JWT_SECRET)
    const mint = (claims: Record<string, unknown>, audience: string) =>
      new SignJWT(claims).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).setAudience(audience).setExpirationTime('10m').sign(key)
    const { aud: _aud, exp: _exp, ...rest } = payload
    const variants = {
      'a Supabase session': await mint({ ...rest, role: 'authenticated', sub: uuid }, 'authenticated'),
      'our audience, role authenticated': await mint({ ...rest, role: 'authenticated' }, 'todo-sharing-api'),
      'role api_client, audience authenticated': await mint({ ...rest }, 'authenticated'),
      'our claims, the auth.users uuid as sub': await mint({ ...rest, sub: uuid }, 'todo-sharing-api'),
    }
    expect((await world.get('/v1/users/me', { auth: token })).status).toBe(200)
    for (const [name, forged] of Object.entries(variants)) {
      expect((await world.get('/v1/users/me', { auth: forged })).status, name).toBe(403)
    }
  })

  it('403 once the token is revoked', async () => {
    const token = await world.token('alice', 'public')
    expect((await world.get('/v1/users/me', { auth: token })).status).toBe(200)
    await world.admin('revoke-token', '--token', token)
    const res = await world.get('/v1/users/me', { auth: token })
    expect(res.status).toBe(403)
    expect(res.body.error).toMatch(/revoked/)
  })

  it('403 once its OAuth client is deleted', async () => {
    const token = await world.token('alice', 'public')
    await world.sql`delete from app.oauth_clients where id = (select client_id from app.oauth_tokens order by created_at desc limit 1)`
    expect((await world.get('/v1/users/me', { auth: token })).status).toBe(403)
  })
})

describe('subscriptions', () => {
  it('401 with upgrade_url for a key of an account without a subscription, 200 again once renewed', async () => {
    const carol = await world.createUser('carol', '--no-subscription')
    const res = await world.get('/v1/users/me', { auth: carol.api_key })
    expect(res.status).toBe(401)
    expect(res.body).toEqual({ error: 'This account has no active subscription.', upgrade_url: 'https://todo.test/upgrade' })

    expect(await world.admin('set-subscription', '--user', 'carol', '--active', 'true')).toEqual({ id: carol.id, pro: true })
    const renewed = await world.get('/v1/users/me', { auth: carol.api_key })
    expect(renewed.status).toBe(200)
    expect(renewed.body.pro).toBe(true)
  })

  it('401 for an OAuth token too, and for writes before the read-only check', async () => {
    const dave = await world.createUser('dave')
    const token = await world.token('dave', 'public')
    await world.admin('set-subscription', '--user', 'dave', '--active', 'false')
    expect((await world.get('/v1/users/me', { auth: token })).status).toBe(401)
    const write = await world.patch('/v1/users/me', { auth: dave.read_only_api_key, json: { time_zone: 'UTC' } })
    expect(write.status).toBe(401)
    expect(write.body.upgrade_url).toBe('https://todo.test/upgrade')
  })

  it('other users see pro: false for an account without a subscription', async () => {
    await world.createUser('erin', '--no-subscription')
    const res = await world.get('/v1/users/erin', { auth: alice.api_key })
    expect(res.status).toBe(200)
    expect(res.body.pro).toBe(false)
  })
})
