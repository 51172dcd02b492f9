// Fuzzing (issue 19, item 1): property-based requests (fast-check) to every route of the OpenAPI
// document, the OAuth endpoints and the pages beyond /v1, with hostile JSON, forms, query strings,
// path ids, unicode (NUL, lone surrogates, RTL marks), huge values, SQL-looking strings and path
// traversal. Property: never a 5xx, never a stack trace; /v1 answers JSON with {error} for a 4xx;
// afterwards every counter (test/support/drift.ts: counts, per-privacy totals, chat, streaks) equals a recount.
//
// `npm test` runs a fixed seed and a bounded number of runs; `npm run fuzz` runs many more
// (FUZZ_RUNS, FUZZ_SEED; docs/reliability.md). FUZZ_COLLECT=1 reports every failing request at
// the end instead of stopping (and shrinking) at the first.
import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'
import { NO_DRIFT, counterDrift, streakDrift } from './support/drift.ts'
import { type Body, type Operation, STACK_TRACE, bodyFor, extraHeaders, hostileString, operationsOf, pathSegment, queryString, realIds } from './support/fuzz.ts'

const RUNS = Number(process.env.FUZZ_RUNS ?? 600)
const SEED = Number(process.env.FUZZ_SEED ?? 19)
const COLLECT = process.env.FUZZ_COLLECT === '1'

let world: TestWorld
let alice: CreatedUser
let bob: CreatedUser
let aliceToken: string
let operations: Operation[]

interface FuzzRequest {
  method: string
  /** The route it was made for (for the report). */
  route: string
  path: string
  auth: string | null
  body?: Body
  headers?: Record<string, string>
}

beforeAll(async () => {
  world = await startWorld()
  alice = await world.createUser('alice')
  bob = await world.createUser('bob')
  const carol = await world.createUser('carol', '--privacy', 'private')
  // The fuzzer writes hundreds of times a minute; the limits would turn most writes into 429s
  // before they reach the code under test (test/rate-limits.test.ts covers the limits).
  await world.sql`update app.rate_limits set max_events = 1000000`
  aliceToken = await world.token('alice', 'public write notifications chat billing', { firstParty: true, chat: true })
  const bobChat = await world.token('bob', 'public write chat', { firstParty: true, chat: true })
  const project = await world.admin('create-project', '--owner', 'alice', '--name', 'Fuzz', '--slug', 'fuzz', '--hashtag', 'fuzz')
  const secret = await world.admin('create-project', '--owner', 'carol', '--name', 'Secret', '--slug', 'secret', '--privacy', 'private')
  const todos = await Promise.all([alice, bob, carol].map(async (u) => (await world.post('/v1/todos', { auth: u.api_key, json: { body: `Shipped #fuzz @alice by ${u.username}` } })).body))
  const comment = (await world.post('/v1/comments', { auth: alice.api_key, json: { commentable_type: 'Todo', commentable_id: todos[1].id, body: 'nice @bob' } })).body
  const reaction = (await world.post('/v1/reactions', { auth: alice.api_key, json: { reactable_type: 'Todo', reactable_id: todos[1].id } })).body
  await world.post(`/v1/users/${bob.id}/follow`, { auth: alice.api_key })
  const conversation = (await world.post('/v1/conversations', { auth: bobChat, json: { user: 'alice' } })).body
  const message = (await world.post(`/v1/conversations/${conversation.id}/messages`, { auth: bobChat, json: { body: 'hi' } })).body
  realIds.push(
    alice.id, bob.id, carol.id, 'alice', 'bob', 'carol', project.id, secret.id, 'fuzz', 'secret',
    ...todos.flatMap((t) => [t.id, String(t.number)]), comment.id, reaction.id, conversation.id, message.id,
  )
  expect(realIds.filter((id) => typeof id !== 'string' || id.length === 0), JSON.stringify({ comment, reaction, conversation, message }).slice(0, 500)).toEqual([])
  operations = operationsOf((await world.get('/v1/openapi.json')).body)
  expect(operations.length).toBeGreaterThan(60)
})
afterAll(() => world?.close())

/** A credential: mostly alice's read-write key, sometimes her token, none, read-only or junk. */
const credential = fc.oneof(
  { weight: 6, arbitrary: fc.constant('key') },
  { weight: 2, arbitrary: fc.constant('token') },
  { weight: 1, arbitrary: fc.constantFrom('none', 'read-only', 'svc_sk_nope', 'eyJhbGciOiJub25lIn0.e30.', 'x'.repeat(5000)) },
).map((kind) => kind === 'key' ? alice.api_key : kind === 'token' ? aliceToken : kind === 'read-only' ? alice.read_only_api_key : kind === 'none' ? null : kind)

function requestFor(op: Operation): fc.Arbitrary<FuzzRequest> {
  const segments = fc.tuple(...op.pathParams.map(() => pathSegment))
  return fc.record({
    segments: op.pathParams.length > 0 ? segments : fc.constant([] as string[]),
    query: queryString(op.queryParams),
    auth: credential,
    body: op.method === 'GET' ? fc.constant(undefined) : bodyFor(op.bodyFields),
    headers: extraHeaders,
  }).map(({ segments, query, auth, body, headers }) => {
    let i = 0
    const path = op.path.replace(/\{[^}]+\}/g, () => segments[i++] ?? 'x') + query
    return { method: op.method, route: `${op.method} ${op.path}`, path, auth, body, headers }
  })
}

/** The routes beyond /v1 (test/http.test.ts lists them) and paths that match nothing. */
const PAGE_ROUTES: [string, string, (s: string[]) => string][] = [
  ['GET', '/health', () => '/health'],
  ['GET', '/docs', () => '/docs'],
  ['GET', '/assets/{kind}/{size}/{color}/{file}', (s) => `/assets/${s[0]}/${s[1]}/${s[2]}/${s[3]}`],
  ['GET', '/assets/{file}', (s) => `/assets/${s[0]}`],
  ['GET', '/@{username}', (s) => `/@${s[0]}`],
  ['GET', '/todos/{number}', (s) => `/todos/${s[0]}`],
  ['GET', '/projects/{slug}', (s) => `/projects/${s[0]}`],
  ['GET', '/files/{key}/{name}', (s) => `/files/${s[0]}/${s[1]}`],
  ['GET', '/files/{key}/{traversal}', (s) => `/files/${s[0]}/../../../${s[1]}`],
  ['PUT', '/storage/v1/object/upload/sign/uploads/{key}/{name}', (s) => `/storage/v1/object/upload/sign/uploads/${s[0]}/${s[1]}?token=${s[2]}`],
  ['GET', '/exports/{folder}/export.json', (s) => `/exports/${s[0]}/export.json`],
  ['POST', '/internal/maintenance', () => '/internal/maintenance'],
  ['POST', '/internal/webhooks', () => '/internal/webhooks'],
  ['POST', '/internal/exports', () => '/internal/exports'],
  ['POST', '/internal/push', () => '/internal/push'],
  ['GET', '/{anything}', (s) => `/${s[0]}/${s[1]}`],
  ['DELETE', '/v1/{anything}', (s) => `/v1/${s[0]}`],
]
const pageRequest: fc.Arbitrary<FuzzRequest> = fc.record({
  route: fc.constantFrom(...PAGE_ROUTES),
  segments: fc.tuple(pathSegment, pathSegment, pathSegment, pathSegment),
  auth: fc.oneof(fc.constant(null), credential, fc.constant('test-worker-secret-wrong')),
  body: bodyFor(['body']),
  headers: extraHeaders,
}).map(({ route: [method, template, make], segments, auth, body, headers }) => ({
  method, route: `${method} ${template}`, path: make(segments), auth, body: method === 'GET' ? undefined : body, headers,
}))

const describeRequest = (r: FuzzRequest) => {
  const data = r.body ? (typeof r.body.data === 'string' ? r.body.data : `<bytes ${Buffer.from(r.body.data).toString('hex')}>`) : ''
  return `${r.method} ${r.path.slice(0, 300)} [${r.route}] auth=${r.auth ? r.auth.slice(0, 12) : 'none'} `
    + `headers=${JSON.stringify(r.headers ?? {}).slice(0, 200)} type=${r.body?.contentType ?? '-'} body=${JSON.stringify(data.slice(0, 300))}`
}

/** Sends the request; returns what is wrong with the answer, or null. */
async function problemWith(r: FuzzRequest): Promise<string | null> {
  const headers: Record<string, string> = { ...r.headers }
  if (r.auth) headers.authorization = `Bearer ${r.auth}`
  if (r.body?.contentType) headers['content-type'] = r.body.contentType
  const send = () => fetch(world.baseUrl + r.path, { method: r.method, headers, body: r.body?.data as BodyInit | undefined, redirect: 'manual' })
  let response: Response
  try {
    response = await send()
  } catch (err) {
    // No answer at all: a crash of the request, or a kept-alive connection the server closed
    // under the client (local/node-http.ts, closeAfterUnreadBody, says how that used to happen).
    return `no answer: ${(err as Error).message} ${((err as Error).cause as Error)?.message ?? ''}`
  }
  const type = response.headers.get('content-type') ?? ''
  const text = type.startsWith('image/') || r.path.startsWith('/docs') ? '' : await response.text()
  if (type.startsWith('image/') || r.path.startsWith('/docs')) await response.arrayBuffer().catch(() => {})
  const { status } = response
  const seen = statuses.get(r.route) ?? new Map<number, number>()
  seen.set(status, (seen.get(status) ?? 0) + 1)
  statuses.set(r.route, seen)
  if (status >= 500) return `status ${status}: ${text.slice(0, 300)}`
  if (STACK_TRACE.test(text)) return `stack trace in the answer (${status}): ${text.slice(0, 500)}`
  const isApi = r.path.startsWith('/v1/') && r.route.includes(' /v1/')
  if (status === 204 || status === 304 || (status >= 300 && status < 400)) return null
  if (isApi) {
    if (!type.startsWith('application/json')) return `not JSON (${status}, ${type}): ${text.slice(0, 200)}`
    let body: unknown
    try {
      body = JSON.parse(text)
    } catch {
      return `unparseable JSON (${status}): ${text.slice(0, 200)}`
    }
    if (status >= 400 && typeof (body as { error?: unknown })?.error !== 'string') return `a ${status} without {error}: ${text.slice(0, 200)}`
    return null
  }
  // OAuth endpoints and web pages: JSON, or their HTML page; generated images; the docs' script.
  if (!/^(application\/json|text\/html|image\/png|text\/javascript)/.test(type)) return `unexpected content type ${type} (${status})`
  if (type.startsWith('application/json')) {
    try {
      JSON.parse(text)
    } catch {
      return `unparseable JSON (${status}): ${text.slice(0, 200)}`
    }
  }
  return null
}

const problems: string[] = []
/** Per route, how many answers of each status: shows the fuzzer reaches real code, not only validation. */
const statuses = new Map<string, Map<number, number>>()
let previous: FuzzRequest | null = null
async function fuzz(arbitrary: fc.Arbitrary<FuzzRequest>, numRuns: number) {
  await fc.assert(fc.asyncProperty(arbitrary, async (r) => {
    const problem = await problemWith(r)
    const before = previous
    previous = r
    if (problem && COLLECT) {
      problems.push(`${problem}\n    ${describeRequest(r)}\n    after ${before ? describeRequest(before) : '-'}`)
      return true
    }
    if (problem) throw new Error(`${problem}\n    ${describeRequest(r)}`)
    return true
  }), { seed: SEED, numRuns, endOnFailure: !process.env.FUZZ_SHRINK })
}

describe('fuzzing every route', () => {
  it('the OpenAPI document\'s routes, including OAuth: no 5xx, no stack trace, /v1 answers JSON with {error} for a 4xx', async () => {
    const request = fc.constantFrom(...operations).chain(requestFor)
    await fuzz(request, RUNS * 3)
    expect(await counterDrift(world.sql)).toEqual(NO_DRIFT)
    expect(await streakDrift(world.sql)).toEqual([])
  }, 60_000 + RUNS * 3 * 200)

  it('each route at least a few times (the random pick above may miss some)', async () => {
    for (const op of operations) await fuzz(requestFor(op), Math.max(3, Math.round(RUNS / 50)))
    expect(await counterDrift(world.sql)).toEqual(NO_DRIFT)
    expect(await streakDrift(world.sql)).toEqual([])
  }, 60_000 + RUNS * 3 * 200)

  it('the pages beyond /v1, the storage and worker routes, unknown paths', async () => {
    await fuzz(pageRequest, RUNS)
    expect(await counterDrift(world.sql)).toEqual(NO_DRIFT)
    expect(await streakDrift(world.sql)).toEqual([])
  }, 60_000 + RUNS * 200)

  it('reaches past validation: many routes answered 2xx to generated requests (real ids, real writes)', () => {
    const succeeded = [...statuses].filter(([, seen]) => [...seen.keys()].some((s) => s >= 200 && s < 300)).map(([route]) => route)
    if (process.env.FUZZ_RUNS) {
      for (const [route, seen] of [...statuses].sort()) console.log(route.padEnd(70), [...seen].sort().map(([s, n]) => `${s}×${n}`).join(' '))
    }
    expect(succeeded.length).toBeGreaterThan(20)
  })

  // Only in FUZZ_COLLECT mode (npm run fuzz -- --collect) is a problem kept instead of failing its
  // test at once; this reports them all. Under npm test every problem fails the test that met it,
  // so this test would have nothing to check, and is not run (issue 31: it could not fail there).
  it.runIf(COLLECT)('FUZZ_COLLECT: no request above had a problem (each is printed)', () => {
    if (problems.length > 0) console.log(problems.join('\n'))
    expect(problems).toEqual([])
  })
})

// Each case the fuzzer found, kept as a plain test (docs/reliability.md lists them).
describe('cases the fuzzer found', () => {
  it('a NUL byte in a todo list filter (sent to SQL inside jsonb, SQLSTATE 22P05) is a 422, not a 500', async () => {
    for (const path of ['/v1/todos?until=101&query=%00', '/v1/timeline?query=a%00b', '/v1/users/alice/todos?query=%00', '/v1/projects/fuzz/todos?query=%00']) {
      const res = await world.get(path, { auth: alice.api_key })
      expect({ path, status: res.status, body: res.body }).toEqual({
        path, status: 422, body: { error: 'A value contains a character that is not allowed, such as a NUL byte.' },
      })
    }
  })
})
