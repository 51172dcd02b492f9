// Issue 28, item 6: a member whose subscription lapsed keeps their data rights. They may still
// export their data (POST /v1/exports, GET /v1/exports…, the archive's download) and ask for
// their account's deletion (DELETE /v1/account); everything else stays 401 with upgrade_url, and
// the lapse widens nothing a credential may do (a read-only key, a third-party app: still 403).
// test/authorization-matrix.test.ts walks every route for a lapsed member.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'

let world: TestWorld
let lena: CreatedUser

const UPGRADE_URL = 'https://todo.test/upgrade'
const localUrl = (url: string) => url.replace('http://api.test', world.baseUrl)

beforeAll(async () => {
  world = await startWorld()
  // Lena posted while she paid, then her subscription lapsed.
  lena = await world.createUser('lena')
  expect((await world.post('/v1/todos', { auth: lena.api_key, json: { body: 'written while subscribed' } })).status).toBe(201)
  await world.admin('set-subscription', '--user', 'lena', '--active', 'false')
})
afterAll(() => world.close())

describe('a lapsed member keeps their data rights', () => {
  it('POST /v1/exports 202, GET /v1/exports and /v1/exports/{id} 200, and the archive downloads: with an API key and with our own app', async () => {
    await world.runExports() // nothing else pending
    const created = await world.post('/v1/exports', { auth: lena.api_key })
    expect(created.status, created.text).toBe(202)
    expect(created.body).toMatchObject({ id: expect.stringMatching(/^exp_[0-9a-f]{32}$/), status: 'pending' })

    expect((await world.runExports()).ready).toBe(1)
    const listed = await world.get('/v1/exports', { auth: lena.api_key })
    expect(listed.status, listed.text).toBe(200)
    expect(listed.body.data.map((e: { id: string }) => e.id)).toEqual([created.body.id])
    // Our own app, as on the website's "download your data" page.
    const app = await world.token('lena', 'public write', { firstParty: true })
    const ready = await world.get(`/v1/exports/${created.body.id}`, { auth: app })
    expect(ready.status, ready.text).toBe(200)
    expect(ready.body).toMatchObject({ status: 'ready', url: expect.stringMatching(/\/exports\/[0-9a-f]{32}\/export\.json$/) })

    const file = await fetch(localUrl(ready.body.url))
    expect(file.status).toBe(200)
    const archive = await file.json()
    expect(archive.profile).toMatchObject({ id: lena.id, username: 'lena', pro: false })
    expect(archive.todos.map((t: { body: string }) => t.body)).toEqual(['written while subscribed'])
  })

  it('DELETE /v1/account 204: the request waits for review like anyone’s', async () => {
    const asked = await world.delete('/v1/account', { auth: lena.api_key })
    expect(asked.status, asked.text).toBe(204)
    const queue = await world.admin('deletion-requests')
    expect(queue.data).toEqual([expect.objectContaining({ user: 'lena', requested_by: expect.objectContaining({ kind: 'api_key' }) })])
    // Asked again: the pending request answers, not the lapse.
    const again = await world.delete('/v1/account', { auth: await world.token('lena', 'write', { firstParty: true }) })
    expect(again.status).toBe(422)
  })

  it('the lapse widens nothing: a read-only key and a third-party app are 403 as for anyone', async () => {
    expect((await world.post('/v1/exports', { auth: lena.read_only_api_key })).status).toBe(403)
    expect((await world.delete('/v1/account', { auth: lena.read_only_api_key })).status).toBe(403)
    const thirdParty = await world.token('lena', 'public write')
    const exported = await world.post('/v1/exports', { auth: thirdParty })
    expect(exported.status).toBe(403)
    expect(exported.body).toEqual({ error: 'Data exports are available to API keys and first-party apps only.' })
    expect((await world.get('/v1/exports', { auth: thirdParty })).status).toBe(403)
    expect((await world.delete('/v1/account', { auth: thirdParty })).status).toBe(403)
    // And a credential that is no credential is still 403 before anything.
    expect((await world.post('/v1/exports', { auth: 'svc_sk_nonsense' })).status).toBe(403)
  })

  it('everything else stays 401 with upgrade_url', async () => {
    for (const [method, path, json] of [
      ['GET', '/v1/users/me', undefined],
      ['GET', '/v1/todos', undefined],
      ['POST', '/v1/todos', { body: 'not while lapsed' }],
      ['GET', '/v1/timeline', undefined],
      ['GET', '/v1/webhooks/subscriptions', undefined],
      ['PATCH', '/v1/users/me', { time_zone: 'Europe/Paris' }],
    ] as const) {
      const res = await world.request(method, path, { auth: lena.api_key, json })
      expect(res.status, `${method} ${path}: ${res.text}`).toBe(401)
      expect(res.body).toEqual({ error: expect.any(String), upgrade_url: UPGRADE_URL })
    }
    // Renewed: everything answers again.
    await world.admin('set-subscription', '--user', 'lena', '--active', 'true')
    expect((await world.get('/v1/users/me', { auth: lena.api_key })).status).toBe(200)
  })
})
