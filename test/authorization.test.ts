// The authorization table of docs/security.md, walked row by row against the running app:
// every route with a read-write key, a read-only key, a token with exactly the scope from the
// right kind of app, a token with every other scope, a token from the wrong kind of app, and
// a token with only `billing`. The table must list exactly the routes of the OpenAPI document.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'
import { type Row, SCOPES, appOf, concretePath, readOAuthTable, readTable } from './support/security-table.ts'

const rows = readTable()

let world: TestWorld
let alice: CreatedUser
/** Tokens of alice by scopes and kind of app, made once. */
const tokens = new Map<string, string>()

async function tokenFor(scopes: string[], app: { firstParty: boolean; chat: boolean }): Promise<string> {
  const key = `${scopes.join(' ')}|${app.firstParty}|${app.chat}`
  let token = tokens.get(key)
  if (!token) {
    token = await world.token('alice', scopes.join(' '), app)
    tokens.set(key, token)
  }
  return token
}

async function statusWith(row: Row, credential: string): Promise<number> {
  // Writes send an empty object: an allowed credential gets past authorization to validation
  // (400/422) or to the domain (204/404); a refused one gets 403 before its input is read.
  const json = row.method === 'GET' || row.method === 'DELETE' ? undefined : {}
  const res = await world.request(row.method, concretePath(row.path), { auth: credential, json })
  expect(res.status, `${row.method} ${row.path}: ${res.text}`).not.toBe(500)
  return res.status
}

const allowed = (status: number) => status !== 401 && status !== 403

beforeAll(async () => {
  world = await startWorld()
  alice = await world.createUser('alice')
  await world.createUser('bob')
})
afterAll(() => world.close())

describe('the authorization table of docs/security.md', () => {
  it('lists exactly the /v1 routes of the OpenAPI document; the OAuth endpoints have a table of their own', async () => {
    const document = (await world.get('/v1/openapi.json')).body as { paths: Record<string, Record<string, unknown>> }
    const documented = Object.entries(document.paths)
      .flatMap(([path, operations]) => Object.keys(operations).map((method) => `${method.toUpperCase()} ${path}`))
      .filter((route) => !route.endsWith('/v1/openapi.json') && !route.startsWith('PUT '))
      .sort()
    // /v1 routes take API keys and access tokens (walked below); the OAuth endpoints take client
    // credentials, a session or an access token as RFC 6749 says (test/oauth.test.ts walks them).
    const isOAuth = (route: string) => / \/(oauth\/|\.well-known\/oauth-)/.test(route)
    expect(rows.map((row) => `${row.method} ${row.path}`).sort()).toEqual(documented.filter((route) => route.includes(' /v1/')))
    expect(readOAuthTable().sort()).toEqual(documented.filter(isOAuth))
    expect(documented.filter((route) => !route.includes(' /v1/') && !isOAuth(route)), 'routes in neither table').toEqual([])
  })

  describe.each(rows.map((row) => [`${row.method} ${row.path}`, row] as const))('%s', (_name, row) => {
    it('API keys: as the table says', async () => {
      expect(allowed(await statusWith(row, alice.api_key))).toBe(row.key !== 'refused')
      expect(allowed(await statusWith(row, alice.read_only_api_key))).toBe(row.key === 'read-only or read-write')
    })

    it('OAuth: the scope from the right app is enough; other scopes, other apps and billing are not', async () => {
      const needed = row.oauth.map((alternative) => alternative.scope)
      for (const alternative of row.oauth) {
        expect(allowed(await statusWith(row, await tokenFor([alternative.scope], appOf(alternative.app)))), `scope ${alternative.scope}`).toBe(true)
        if (alternative.app !== 'any') {
          const wrongApp = await tokenFor([alternative.scope], { firstParty: alternative.app !== 'first-party', chat: alternative.app !== 'approved' })
          expect(await statusWith(row, wrongApp), `scope ${alternative.scope} from the wrong app`).toBe(403)
        }
      }
      const everyOtherScope = SCOPES.filter((scope) => !needed.includes(scope))
      expect(await statusWith(row, await tokenFor(everyOtherScope, { firstParty: true, chat: true })), 'every other scope').toBe(403)
      if (!needed.includes('billing')) {
        expect(await statusWith(row, await tokenFor(['billing'], { firstParty: true, chat: true })), 'billing only').toBe(403)
      }
    })
  })
})

describe('reads need the public scope', () => {
  it('a token granted only billing cannot read its member’s private todos', async () => {
    const carol = await world.createUser('carol', '--privacy', 'private')
    await world.post('/v1/todos', { auth: carol.api_key, json: { body: 'a private todo' } })
    const billing = await world.token('carol', 'billing', { firstParty: true, chat: true })
    for (const path of ['/v1/users/me/todos', '/v1/todos', '/v1/users/me', '/v1/timeline']) {
      const res = await world.get(path, { auth: billing })
      expect(res.status, path).toBe(403)
      expect(res.body).toEqual({ error: 'This access token lacks the public scope.' })
      expect(res.text).not.toContain('a private todo')
    }
    const reader = await world.token('carol', 'public')
    const own = await world.get('/v1/users/me/todos', { auth: reader })
    expect(own.status).toBe(200)
    expect(own.body.data.map((todo: { body: string }) => todo.body)).toEqual(['a private todo'])
  })
})
