// Idempotency keys (issue 29, item 1): a write sent again with its Idempotency-Key is answered
// with the first answer and does nothing twice; the key commits with the write.
import { createHash, randomUUID } from 'node:crypto'
import { decodeJwt } from 'jose'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { describeError } from '../functions/lib/errors.ts'
import { type CreatedUser, type HttpResult, type TestWorld, startWorld } from './support/app.ts'

let world: TestWorld
let alice: CreatedUser
let bob: CreatedUser

const uuidOf = (publicId: string) => publicId.replace(/^[a-z]+_/, '').replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5')
let keys = 0
/** A key no other test uses. */
const newKey = () => `key-${process.pid}-${++keys}-${Math.random().toString(36).slice(2)}`
const keyed = (key: string, headers: Record<string, string> = {}) => ({ 'idempotency-key': key, ...headers })

async function todoCount(user: CreatedUser): Promise<number> {
  const [row] = await world.sql`select count(*)::int as n from app.todos where user_id = ${uuidOf(user.id)}`
  return row!.n as number
}

async function storedKeys(user: CreatedUser): Promise<number> {
  const [row] = await world.sql`select count(*)::int as n from app.idempotency_keys where user_id = ${uuidOf(user.id)}`
  return row!.n as number
}

/** Polls `check` until it holds (generous deadline: a loaded machine is slow, never wrong). */
async function until(check: () => Promise<boolean>, what: string, deadlineMs = 20_000): Promise<void> {
  const end = Date.now() + deadlineMs
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
}

beforeAll(async () => {
  // A long statement timeout: one test holds a request open on a lock while it sends another.
  world = await startWorld({ statementTimeoutMs: 60_000 })
  alice = await world.createUser('alice')
  bob = await world.createUser('bob')
})
afterAll(() => world?.close())

describe('the first request with a key runs; the same request again is answered from the stored answer', () => {
  it('POST /v1/todos: 201 once, then 201 with the same body and Idempotent-Replayed: true; one todo, one rate-limit event, one statement each', async () => {
    const key = newKey()
    const before = await todoCount(alice)
    const sent = world.statements.length
    const first = await world.post('/v1/todos', { auth: alice.api_key, headers: keyed(key), json: { body: 'shipped the retry story' } })
    expect(first.status).toBe(201)
    expect(first.headers.get('idempotent-replayed')).toBeNull()
    // Still one round trip: the key rides in the request's one statement.
    expect(world.statements.length - sent).toBe(1)

    const again = await world.post('/v1/todos', { auth: alice.api_key, headers: keyed(key), json: { body: 'shipped the retry story' } })
    expect(again.status).toBe(201)
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    expect(again.body).toEqual(first.body)
    expect(world.statements.length - sent).toBe(2)
    expect(await todoCount(alice)).toBe(before + 1)
    // The replay did nothing else: the todo_create limit counted one event.
    const [events] = await world.sql`
      select coalesce(sum(events), 0)::int as n from app.rate_limit_counters
      where user_id = ${uuidOf(alice.id)} and action = 'todo_create'`
    expect(events!.n).toBe(before + 1)
  })

  it('a form and the same todo as JSON, or JSON spaced and ordered otherwise, are the same request (replayed, not 422)', async () => {
    const key = newKey()
    const first = await world.post('/v1/todos', {
      auth: alice.api_key, headers: keyed(key, { 'content-type': 'application/x-www-form-urlencoded' }), body: 'body=formed+once',
    })
    expect(first.status).toBe(201)
    const json = await world.post('/v1/todos', { auth: alice.api_key, headers: keyed(key, { 'content-type': 'application/json' }), body: '{ "attachments": [],\n "body": "formed once" }' })
    expect([json.status, json.headers.get('idempotent-replayed')]).toEqual([201, 'true'])
    expect(json.body.id).toBe(first.body.id)
  })

  it('PATCH and DELETE: the replay answers what the first did (a second DELETE without the key is 404)', async () => {
    const todo = (await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'to be edited' } })).body
    const patchKey = newKey()
    const patched = await world.patch(`/v1/todos/${todo.id}`, { auth: alice.api_key, headers: keyed(patchKey), json: { body: 'edited once' } })
    expect(patched.status).toBe(200)
    await world.sql`update app.todos set body = 'edited by someone else' where id = ${uuidOf(todo.id)}`
    const patchedAgain = await world.patch(`/v1/todos/${todo.id}`, { auth: alice.api_key, headers: keyed(patchKey), json: { body: 'edited once' } })
    expect([patchedAgain.status, patchedAgain.headers.get('idempotent-replayed')]).toEqual([200, 'true'])
    expect(patchedAgain.body).toEqual(patched.body)
    // Not run again: the row keeps what was written after the first.
    const [row] = await world.sql`select body from app.todos where id = ${uuidOf(todo.id)}`
    expect(row!.body).toBe('edited by someone else')

    const deleteKey = newKey()
    expect((await world.delete(`/v1/todos/${todo.id}`, { auth: alice.api_key, headers: keyed(deleteKey) })).status).toBe(204)
    const deletedAgain = await world.delete(`/v1/todos/${todo.id}`, { auth: alice.api_key, headers: keyed(deleteKey) })
    expect([deletedAgain.status, deletedAgain.text, deletedAgain.headers.get('idempotent-replayed')]).toEqual([204, '', 'true'])
    expect((await world.delete(`/v1/todos/${todo.id}`, { auth: alice.api_key })).status).toBe(404)
  })

  it('POST /v1/uploads: the same upload again (one row), its signed_id naming it and its PUT url signed afresh', async () => {
    const file = Buffer.from('idempotent upload')
    const json = { filename: 'notes.txt', byte_size: file.length, checksum: createHash('md5').update(file).digest('base64'), content_type: 'text/plain' }
    const uploadCount = async () => (await world.sql`select count(*)::int as n from app.uploads where user_id = ${uuidOf(alice.id)}`)[0]!.n as number
    const before = await uploadCount()
    const key = newKey()
    const first = await world.post('/v1/uploads', { auth: alice.api_key, headers: keyed(key), json })
    expect(first.status).toBe(200)
    const again = await world.post('/v1/uploads', { auth: alice.api_key, headers: keyed(key), json })
    expect([again.status, again.headers.get('idempotent-replayed')]).toEqual([200, 'true'])
    expect(again.body.key).toBe(first.body.key)
    expect(decodeJwt(again.body.signed_id).sub).toBe(decodeJwt(first.body.signed_id).sub)
    expect(await uploadCount()).toBe(before + 1)
    // The replayed URL takes the file.
    const put = await fetch(again.body.url.replace('http://api.test', world.baseUrl), { method: 'PUT', headers: again.body.headers, body: new Uint8Array(file) })
    expect(put.status).toBe(200)
  })

  it('POST /v1/exports: 202 replayed, where the same request without the key is 429 (one export at a time)', async () => {
    const key = newKey()
    const first = await world.post('/v1/exports', { auth: bob.api_key, headers: keyed(key) })
    expect(first.status).toBe(202)
    const again = await world.post('/v1/exports', { auth: bob.api_key, headers: keyed(key) })
    expect([again.status, again.headers.get('idempotent-replayed')]).toEqual([202, 'true'])
    expect(again.body.id).toBe(first.body.id)
    expect((await world.post('/v1/exports', { auth: bob.api_key })).status).toBe(429)
  })

  it('messages keep client_message_id as it was; the key works beside it (201 replayed, where a resent client_message_id is 200)', async () => {
    const aliceChat = await world.token('alice', 'chat', { chat: true })
    const conversationKey = newKey()
    const opened = await world.post('/v1/conversations', { auth: aliceChat, headers: keyed(conversationKey), json: { user: 'bob' } })
    expect(opened.status).toBe(201)
    const reopened = await world.post('/v1/conversations', { auth: aliceChat, headers: keyed(conversationKey), json: { user: 'bob' } })
    expect([reopened.status, reopened.headers.get('idempotent-replayed')]).toEqual([201, 'true'])
    // Without the key, the same request finds the conversation: 200.
    expect((await world.post('/v1/conversations', { auth: aliceChat, json: { user: 'bob' } })).status).toBe(200)

    const path = `/v1/conversations/${opened.body.id}/messages`
    const message = { body: 'hello once', client_message_id: randomUUID() }
    const key = newKey()
    const sent = await world.post(path, { auth: aliceChat, headers: keyed(key), json: message })
    expect(sent.status).toBe(201)
    const replayed = await world.post(path, { auth: aliceChat, headers: keyed(key), json: message })
    expect([replayed.status, replayed.headers.get('idempotent-replayed')]).toEqual([201, 'true'])
    expect(replayed.body).toEqual(sent.body)
    // client_message_id alone, or with a new key: the original, 200, as before.
    const resent = await world.post(path, { auth: aliceChat, json: message })
    expect([resent.status, resent.body.id]).toEqual([200, sent.body.id])
    const resentWithNewKey = await world.post(path, { auth: aliceChat, headers: keyed(newKey()), json: message })
    expect([resentWithNewKey.status, resentWithNewKey.body.id, resentWithNewKey.headers.get('idempotent-replayed')]).toEqual([200, sent.body.id, null])
    const [row] = await world.sql`select count(*)::int as n from app.messages where conversation_id = ${uuidOf(opened.body.id)}`
    expect(row!.n).toBe(1)
  })

  it('a key in double quotes (the draft standard\'s structured-field string) is the same key', async () => {
    const key = newKey()
    const first = await world.post('/v1/todos', { auth: alice.api_key, headers: keyed(key), json: { body: 'quoted or not' } })
    const quoted = await world.post('/v1/todos', { auth: alice.api_key, headers: keyed(`"${key}"`), json: { body: 'quoted or not' } })
    expect([quoted.status, quoted.headers.get('idempotent-replayed'), quoted.body.id]).toEqual([201, 'true', first.body.id])
  })
})

describe('the same key for something else', () => {
  it('another body, path or method: 422 naming the key, and nothing is done', async () => {
    const key = newKey()
    const first = await world.post('/v1/todos', { auth: alice.api_key, headers: keyed(key), json: { body: 'the original' } })
    expect(first.status).toBe(201)
    const before = await todoCount(alice)
    const message = 'This Idempotency-Key was used for a different request (another method, path or body) within the last 24 hours; use a new key for a new request.'
    const otherBody = await world.post('/v1/todos', { auth: alice.api_key, headers: keyed(key), json: { body: 'something else' } })
    expect([otherBody.status, otherBody.body]).toEqual([422, { error: message }])
    const otherPath = await world.post('/v1/comments', {
      auth: alice.api_key, headers: keyed(key), json: { commentable_type: 'Todo', commentable_id: first.body.id, body: 'the original' },
    })
    expect([otherPath.status, otherPath.body]).toEqual([422, { error: message }])
    const otherMethod = await world.delete(`/v1/todos/${first.body.id}`, { auth: alice.api_key, headers: keyed(key) })
    expect([otherMethod.status, otherMethod.body]).toEqual([422, { error: message }])
    expect(await todoCount(alice)).toBe(before)
    const [comments] = await world.sql`select count(*)::int as n from app.comments where todo_id = ${uuidOf(first.body.id)}`
    expect(comments!.n).toBe(0)
  })

  it('while the first request with the key still runs: 409 with Retry-After at once (not a wait), then the first\'s answer', async () => {
    const key = newKey()
    const json = { body: 'held open' }
    const before = await todoCount(alice)
    let first!: Promise<HttpResult>
    // Hold the first request inside its transaction, after it claimed the key: it waits on the
    // todo_create rate limit's lock of alice, which this transaction takes first.
    await world.sql.begin(async (tx) => {
      await tx`select pg_advisory_xact_lock(hashtextextended(${`app.hit_rate_limit todo_create ${uuidOf(alice.id)}`}, 0))`
      first = world.post('/v1/todos', { auth: alice.api_key, headers: keyed(key), json })
      await until(async () => {
        const [waiting] = await world.sql`
          select count(*)::int as n from pg_stat_activity
          where datname = current_database() and wait_event_type = 'Lock' and query like '%app.idempotency_claim%'`
        return waiting!.n === 1
      }, 'the first request to wait on the lock')
      const second = await world.post('/v1/todos', { auth: alice.api_key, headers: keyed(key), json })
      expect([second.status, second.body.error, second.headers.get('retry-after')]).toEqual([
        409, 'A request with this Idempotency-Key is still running. Wait for its answer, or send it again in a second to get it.', '1',
      ])
      // Still running while we answered the second: nothing was created yet.
      expect(await todoCount(alice)).toBe(before)
    })
    const answered = await first
    expect(answered.status).toBe(201)
    const third = await world.post('/v1/todos', { auth: alice.api_key, headers: keyed(key), json })
    expect([third.status, third.headers.get('idempotent-replayed'), third.body.id]).toEqual([201, 'true', answered.body.id])
    expect(await todoCount(alice)).toBe(before + 1)
  })
})

describe('whose key it is', () => {
  it('another member\'s equal key is theirs: both run', async () => {
    const key = newKey()
    const mine = await world.post('/v1/todos', { auth: alice.api_key, headers: keyed(key), json: { body: 'same key, two members' } })
    const theirs = await world.post('/v1/todos', { auth: bob.api_key, headers: keyed(key), json: { body: 'same key, two members' } })
    expect([mine.status, theirs.status, theirs.headers.get('idempotent-replayed')]).toEqual([201, 201, null])
    expect([mine.body.creator.username, theirs.body.creator.username]).toEqual(['alice', 'bob'])
  })

  it('keys are per credential: the member\'s API key and an OAuth app of the same member never meet', async () => {
    const token = await world.token('alice', 'public write')
    const key = newKey()
    const before = await todoCount(alice)
    const byKey = await world.post('/v1/todos', { auth: alice.api_key, headers: keyed(key), json: { body: 'same key, two credentials' } })
    const byApp = await world.post('/v1/todos', { auth: token, headers: keyed(key), json: { body: 'same key, two credentials' } })
    expect([byKey.status, byApp.status, byApp.headers.get('idempotent-replayed')]).toEqual([201, 201, null])
    expect(byApp.body.id).not.toBe(byKey.body.id)
    // And each replays its own.
    const byAppAgain = await world.post('/v1/todos', { auth: token, headers: keyed(key), json: { body: 'same key, two credentials' } })
    expect([byAppAgain.headers.get('idempotent-replayed'), byAppAgain.body.id]).toEqual(['true', byApp.body.id])
    expect(await todoCount(alice)).toBe(before + 2)
  })
})

describe('what is stored, and for how long', () => {
  it('a request that failed stored nothing: the same key runs it again, and it succeeds once it can', async () => {
    const chat = await world.token('bob', 'chat', { chat: true })
    const key = newKey()
    const storedBefore = await storedKeys(bob)
    const missing = await world.post('/v1/conversations', { auth: chat, headers: keyed(key), json: { user: 'carol' } })
    expect(missing.status).toBe(404)
    expect(await storedKeys(bob)).toBe(storedBefore)
    await world.createUser('carol')
    const opened = await world.post('/v1/conversations', { auth: chat, headers: keyed(key), json: { user: 'carol' } })
    expect([opened.status, opened.headers.get('idempotent-replayed')]).toEqual([201, null])
    expect(await storedKeys(bob)).toBe(storedBefore + 1)
  })

  it('after 24 hours the key is forgotten: the same request runs again, and the storage worker deletes the old answer', async () => {
    const key = newKey()
    const json = { body: 'a day later' }
    const first = await world.post('/v1/todos', { auth: alice.api_key, headers: keyed(key), json })
    expect(first.status).toBe(201)
    const fresh = await world.post('/v1/todos', { auth: alice.api_key, headers: keyed(newKey()), json })
    expect(fresh.status).toBe(201)
    // Just inside the window: still replayed.
    await world.sql`
      update app.idempotency_keys set created_at = now() - interval '23 hours 59 minutes'
      where user_id = ${uuidOf(alice.id)} and created_at > now() - interval '1 minute'`
    expect((await world.post('/v1/todos', { auth: alice.api_key, headers: keyed(key), json })).headers.get('idempotent-replayed')).toBe('true')
    await world.sql`
      update app.idempotency_keys set created_at = now() - interval '24 hours 1 second'
      where user_id = ${uuidOf(alice.id)} and created_at > now() - interval '24 hours'`
    const before = await todoCount(alice)
    const later = await world.post('/v1/todos', { auth: alice.api_key, headers: keyed(key), json })
    expect([later.status, later.headers.get('idempotent-replayed')]).toEqual([201, null])
    expect(later.body.id).not.toBe(first.body.id)
    expect(await todoCount(alice)).toBe(before + 1)

    // The run above stored the key afresh; every other answer of alice's is now older than 24 hours.
    const stored = await storedKeys(alice)
    expect(stored).toBeGreaterThan(1)
    const result = await world.maintain()
    expect(result.forgottenIdempotencyKeys).toBeGreaterThanOrEqual(stored - 1)
    expect(await storedKeys(alice)).toBe(1)
    expect((await world.post('/v1/todos', { auth: alice.api_key, headers: keyed(key), json })).headers.get('idempotent-replayed')).toBe('true')
  })

  it('one member\'s stored answers are bounded by the idempotency_key rate limit: past it 429, nothing done; replays and requests without a key go on', async () => {
    const dee = await world.createUser('dee')
    await world.sql`update app.rate_limits set max_events = 3 where action = 'idempotency_key'`
    try {
      const sentKeys = [newKey(), newKey(), newKey(), newKey()]
      for (const key of sentKeys.slice(0, 3)) {
        expect((await world.post('/v1/todos', { auth: dee.api_key, headers: keyed(key), json: { body: `keyed ${key}` } })).status).toBe(201)
      }
      const refused = await world.post('/v1/todos', { auth: dee.api_key, headers: keyed(sentKeys[3]!), json: { body: 'one key too many' } })
      expect(refused.status).toBe(429)
      expect(refused.body.error).toMatch(/^Too many requests: at most 3 per 1 hour\(s\) \(requests sent with an Idempotency-Key/)
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0)
      // The todo went with its key: one transaction.
      expect(await todoCount(dee)).toBe(3)
      expect(await storedKeys(dee)).toBe(3)
      const replay = await world.post('/v1/todos', { auth: dee.api_key, headers: keyed(sentKeys[0]!), json: { body: `keyed ${sentKeys[0]}` } })
      expect([replay.status, replay.headers.get('idempotent-replayed')]).toEqual([201, 'true'])
      expect((await world.post('/v1/todos', { auth: dee.api_key, json: { body: 'no key' } })).status).toBe(201)
    } finally {
      await world.sql`update app.rate_limits set max_events = 2000 where action = 'idempotency_key'`
    }
  })
})

describe('keys the API does not take', () => {
  it('400 for a malformed key (empty, too long, a space, a quote, a backslash, not ASCII), before anything runs', async () => {
    const before = await todoCount(alice)
    for (const bad of ['', 'x'.repeat(256), 'two words', 'a"b', 'a\\b', 'caf\u00e9', '""']) {
      const res = await world.post('/v1/todos', { auth: alice.api_key, headers: keyed(bad), json: { body: 'never posted' } })
      expect([bad, res.status, res.body]).toEqual([bad, 400, {
        error: 'The Idempotency-Key header must be 1 to 255 visible ASCII characters, without spaces, quotes or backslashes.',
      }])
    }
    expect((await world.post('/v1/todos', { auth: alice.api_key, headers: keyed('k'.repeat(255)), json: { body: 'the longest key' } })).status).toBe(201)
    expect(await todoCount(alice)).toBe(before + 1)
  })

  it('a made-up credential with a malformed key is 403, as any input error is for strangers', async () => {
    const res = await world.post('/v1/todos', { auth: 'svc_sk_made_up', headers: keyed('two words'), json: { body: 'x' } })
    expect(res.status).toBe(403)
  })

  it('GET ignores the header (reads are idempotent already), a malformed one too', async () => {
    const res = await world.get('/v1/users/me', { auth: alice.api_key, headers: keyed('two words') })
    expect([res.status, res.headers.get('idempotent-replayed')]).toEqual([200, null])
  })
})

describe('where clients learn of it', () => {
  it('the "outcome unknown" 503 tells the client to send the request again with its key', () => {
    const answer = describeError(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET', syscall: 'read' }), 'https://todo.test/upgrade')
    expect(answer.status).toBe(503)
    expect(answer.body.error).toMatch(/may or may not have taken effect\. If you sent an Idempotency-Key, send the request again with the same key/)
  })

  it('the OpenAPI document has the header on every POST, PATCH and DELETE of /v1, and on no GET', async () => {
    const doc = (await world.get('/v1/openapi.json')).body as {
      paths: Record<string, Record<string, { parameters?: { $ref?: string }[]; responses: Record<string, { headers?: Record<string, unknown> }> }>>
      components: { parameters: Record<string, { name: string; in: string }> }
    }
    expect(doc.components.parameters.IdempotencyKey).toMatchObject({ name: 'Idempotency-Key', in: 'header' })
    const ref = '#/components/parameters/IdempotencyKey'
    let writes = 0
    for (const [path, operations] of Object.entries(doc.paths)) {
      for (const [method, operation] of Object.entries(operations)) {
        const hasKey = (operation.parameters ?? []).some((p) => p.$ref === ref)
        const write = path.startsWith('/v1/') && ['post', 'patch', 'delete'].includes(method)
        expect(`${method} ${path}: ${hasKey}`).toBe(`${method} ${path}: ${write}`)
        if (!write) continue
        writes++
        expect(operation.responses['409'], `${method} ${path}`).toBeDefined()
        const success = Object.entries(operation.responses).filter(([status]) => status.startsWith('2'))
        expect(success.length, `${method} ${path}`).toBeGreaterThan(0)
        for (const [, response] of success) expect(response.headers?.['Idempotent-Replayed'], `${method} ${path}`).toBeDefined()
      }
    }
    expect(writes).toBeGreaterThan(30)
  })

  it('browsers may send the key from any origin and read Idempotent-Replayed (CORS)', async () => {
    const preflight = await world.request('OPTIONS', '/v1/todos', {
      headers: { origin: 'https://app.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, idempotency-key' },
    })
    expect(preflight.headers.get('access-control-allow-headers')).toMatch(/\bIdempotency-Key\b/)
    const res = await world.post('/v1/todos', { auth: alice.api_key, headers: keyed(newKey(), { origin: 'https://app.example' }), json: { body: 'from a browser' } })
    expect(res.headers.get('access-control-expose-headers')).toMatch(/\bIdempotent-Replayed\b/)
  })
})
