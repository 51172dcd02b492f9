// Faults (issue 19, item 4), with the real `npm start` as a child process:
// - kill -9 of the whole server under write load loses no acknowledged write and no outbox entry:
//   every todo, comment and deletion it answered is in the database with its webhook delivery,
//   its push and its file deletion queued, and a restarted server delivers and deletes them all;
// - a PostgreSQL of its own, stopped and started again under load: while it is down every request
//   is answered with 503 {error}, none held past the connect timeout (Retry-After when it surely did not happen, or when a
//   retry is safe: a read, a write with its Idempotency-Key; never a 500, never a hang), and once it is back the same server answers again, without a restart; its
//   workers deliver again and the Realtime gateway hears the database again (a chat message
//   reaches a supabase-js subscriber);
// - and, without timing, how each way of losing the database is answered (functions/lib/errors.ts).
import { createHash } from 'node:crypto'
import { existsSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { ChildProcess } from 'node:child_process'
import type { SupabaseClient } from '@supabase/supabase-js'
import { afterAll, describe, expect, it } from 'vitest'
import { describeError } from '../functions/lib/errors.ts'
import { CONNECT_TIMEOUT_SECONDS, createSql } from '../functions/lib/sql.ts'
import { runAdmin } from '../local/admin-commands.ts'
import { migrate } from '../local/migrate.ts'
import { JWT_SECRET, type TestWorld, startWorld } from './support/app.ts'
import { freePort } from './support/net.ts'
import { importEmbeddedPostgres } from './support/postgres.ts'
import { interrupt, startServer } from './support/process.ts'
import { browserSubscription, startWebPushService } from './support/push.ts'
import { listen } from './support/realtime.ts'
import { startReceiver } from './support/receiver.ts'

const cleanups: (() => Promise<unknown>)[] = []
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {})
})

async function scratchDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix))
  cleanups.push(() => rm(dir, { recursive: true, force: true }))
  return dir
}

/** npm start on `databaseUrl`, its files in a scratch DATA_DIR, webhooks and pushes allowed to 127.0.0.1. */
async function serverEnv(databaseUrl: string) {
  return {
    DATABASE_URL: databaseUrl,
    JWT_SECRET,
    DATA_DIR: await scratchDir('todo-faults-'),
    PORT: String(await freePort()),
    HOST: '127.0.0.1',
    PUBLIC_URL: '',
    WEBHOOK_ALLOW_PRIVATE: '1',
  }
}

/** kill -9 of npm start's whole process group (npm, its shell, the server): a crash, nothing runs after it. */
function killNine(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    child.removeAllListeners('close')
    child.on('close', () => resolve())
    process.kill(-child.pid!, 'SIGKILL')
  })
}

interface Answer {
  status: number
  body: any
  headers: Headers
}

/** One request; null when no answer came (the connection refused or cut: the server is gone). */
async function call(base: string, method: string, path: string, auth: string, json?: unknown, extraHeaders: Record<string, string> = {}): Promise<Answer | null> {
  try {
    const response = await fetch(base + path, {
      method,
      headers: { authorization: `Bearer ${auth}`, ...(json === undefined ? {} : { 'content-type': 'application/json' }), ...extraHeaders },
      body: json === undefined ? undefined : JSON.stringify(json),
    })
    const text = await response.text()
    let body: unknown = text
    try {
      body = JSON.parse(text)
    } catch {
      // not JSON: kept as text, which the assertions then show
    }
    return { status: response.status, body, headers: response.headers }
  } catch {
    return null
  }
}

async function waitUntil(what: string, condition: () => boolean | Promise<boolean>, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`)
    await new Promise((r) => setTimeout(r, 100))
  }
}

// A 1×1 PNG: an upload the server accepts as image/png.
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==', 'base64')
const PNG_MD5 = createHash('md5').update(PNG).digest('base64')

interface Acknowledged {
  /** Todos created and answered 201 (kept: each has its webhook delivery). */
  todos: string[]
  /** Bodies of comments on Bob's todo answered 201 (each has Bob's notification and its push). */
  comments: string[]
  /** Keys of uploaded files whose todo was deleted and answered 204 (each queued for deletion). */
  deletedFiles: string[]
  /** When the last file deletion was acknowledged (ms). */
  lastDeletionAt: number
  /** Any answer other than the expected success before the kill: there must be none. */
  unexpected: string[]
}

/**
 * Writes as fast as `loops` concurrent clients can, until the server stops answering: todos
 * (webhooks), comments on Bob's todo (pushes), and uploads attached to a todo that is then
 * deleted (file deletions). Records what the server acknowledged.
 */
function writeLoad(base: string, apiKey: string, bobTodoId: string, loops: number) {
  const acknowledged: Acknowledged = { todos: [], comments: [], deletedFiles: [], lastDeletionAt: 0, unexpected: [] }
  let sequence = 0
  const expect2xx = (what: string, answer: Answer, status: number) => {
    if (answer.status !== status) acknowledged.unexpected.push(`${what}: ${answer.status} ${JSON.stringify(answer.body)}`)
    return answer.status === status
  }
  const kinds = [
    async () => {
      const body = `todo ${++sequence}`
      const answer = await call(base, 'POST', '/v1/todos', apiKey, { body })
      if (answer && expect2xx('POST /v1/todos', answer, 201)) acknowledged.todos.push(answer.body.id)
      return answer !== null
    },
    async () => {
      const body = `comment ${++sequence}`
      const answer = await call(base, 'POST', '/v1/comments', apiKey, { commentable_type: 'Todo', commentable_id: bobTodoId, body })
      if (answer && expect2xx('POST /v1/comments', answer, 201)) acknowledged.comments.push(body)
      return answer !== null
    },
    async () => {
      const asked = await call(base, 'POST', '/v1/uploads', apiKey, { filename: 'dot.png', byte_size: PNG.length, checksum: PNG_MD5, content_type: 'image/png' })
      if (!asked || !expect2xx('POST /v1/uploads', asked, 200)) return asked !== null
      const put = await fetch(asked.body.url, { method: 'PUT', headers: asked.body.headers, body: new Uint8Array(PNG) }).catch(() => null)
      if (!put) return false
      const putAnswer = await put.text().catch(() => '')
      // With Storage's answer: its body names the database error behind a 500 (seen once in CI).
      if (put.status !== 200) acknowledged.unexpected.push(`PUT upload: ${put.status} ${putAnswer}`)
      const todo = await call(base, 'POST', '/v1/todos', apiKey, { body: `with a file ${++sequence}`, attachments: [asked.body.signed_id] })
      if (!todo || !expect2xx('POST /v1/todos with a file', todo, 201)) return todo !== null
      const deleted = await call(base, 'DELETE', `/v1/todos/${todo.body.id}`, apiKey)
      if (deleted && expect2xx('DELETE /v1/todos/{id}', deleted, 204)) {
        acknowledged.deletedFiles.push(asked.body.key)
        acknowledged.lastDeletionAt = Date.now()
      }
      return deleted !== null
    },
  ]
  const running = Array.from({ length: loops }, async (_, loop) => {
    // Each loop keeps to one kind, so every kind is under way when the kill comes.
    while (await kinds[loop % kinds.length]!()) {
      // next write
    }
  })
  return { acknowledged, finished: Promise.all(running) }
}

describe('kill -9 of npm start under write load', () => {
  it('loses no acknowledged write and no outbox entry; a restarted server delivers and deletes them all', { timeout: 240_000 }, async () => {
    const world: TestWorld = await startWorld()
    cleanups.push(() => world.close())
    // A scratch database: the load is about crashes, not the limiter.
    await world.sql`update app.rate_limits set max_events = 100000000`
    const alice = await world.createUser('alice')
    const bob = await world.createUser('bob', '--first-name', 'Bob')
    const bobTodo = await world.post('/v1/todos', { auth: bob.api_key, json: { body: 'comment on me' } })
    expect(bobTodo.status).toBe(201)
    // Until the crash, the receiver and the push service refuse every other delivery (503: sent
    // again later), so that the crash surely leaves deliveries of both kinds in the outboxes.
    let refusing = true
    const webhooked = new Set<string>()
    const receiver = await startReceiver((request, response, index) => {
      if (refusing && index % 2 === 0) {
        response.statusCode = 503
        response.end()
        return
      }
      webhooked.add(JSON.parse(request.body).data.id as string)
      response.end('ok')
    })
    cleanups.push(() => receiver.close())
    const pushService = await startWebPushService()
    cleanups.push(() => pushService.close())
    const refusedPushes = new Set<number>()
    pushService.answer((_r, index) => {
      if (refusing && index % 2 === 0) {
        refusedPushes.add(index)
        return 503
      }
      return 201
    })
    const browser = browserSubscription(`${pushService.url}/push/bob`)
    await world.admin('add-web-push-subscription', '--user', 'bob', '--endpoint', browser.endpoint, `--p256dh=${browser.p256dh}`, `--auth=${browser.auth}`)

    const env = await serverEnv(world.databaseUrl)
    const base = `http://127.0.0.1:${env.PORT}`
    const fileOf = (key: string) => join(env.DATA_DIR, 'storage', 'uploads', ...key.split('/'))
    const first = await startServer(env)
    // npm start deletes queued files a second after it listens, then every minute: deletions
    // acknowledged well after that first pass are still queued when the kill comes.
    const startMaintenanceDone = Date.now() + 5_000
    let firstRunning = true
    cleanups.push(async () => firstRunning && killNine(first.child))
    expect((await call(base, 'POST', '/v1/webhooks/subscriptions', alice.api_key, { url: `${receiver.url}/hook`, event_type: 'new_todo' }))?.status).toBe(201)

    const load = writeLoad(base, alice.api_key, bobTodo.body.id, 6)
    const { acknowledged } = load
    await waitUntil('writes of every kind acknowledged', () =>
      acknowledged.todos.length >= 60 && acknowledged.comments.length >= 60 && acknowledged.deletedFiles.length >= 10
        && acknowledged.lastDeletionAt > startMaintenanceDone, 60_000)
    await killNine(first.child)
    firstRunning = false
    await load.finished
    expect(acknowledged.unexpected).toEqual([])

    // Right after the crash, before anything restarts: every acknowledged write is there with its outbox entry.
    const todos = await world.sql`
      select app.to_public_id('todo', t.id) as id, d.todo_id is not null as has_delivery
        from app.todos t left join app.webhook_deliveries d on d.todo_id = t.id
       where app.to_public_id('todo', t.id) = any(${acknowledged.todos})`
    expect(todos.map((t) => t.id).sort()).toEqual([...acknowledged.todos].sort())
    expect(todos.filter((t) => !t.has_delivery)).toEqual([])
    const comments = await world.sql`
      select c.body, n.id is not null as notified
        from app.comments c left join app.notifications n on n.comment_id = c.id and n.user_id = app.from_public_id('user', ${bob.id})
       where c.todo_id = app.from_public_id('todo', ${bobTodo.body.id}) and c.body = any(${acknowledged.comments})`
    expect(comments.map((c) => c.body).sort()).toEqual([...acknowledged.comments].sort())
    expect(comments.filter((c) => !c.notified)).toEqual([])
    // A push is either sent already or waiting in the outbox (a sent one leaves it), or still in
    // the fan-out queue that the worker turns into the outbox.
    const pushed = () => new Set(pushService.received.filter((_r, i) => !refusedPushes.has(i)).map((r) => JSON.parse(browser.decrypt(r.body)).body as string))
    const waitingPushes = new Set((await world.sql`
      select c.body from app.notifications n join app.comments c on c.id = n.comment_id
       where n.id in (select p.notification_id from app.push_deliveries p where p.status = 'pending'
                      union all select f.notification_id from app.push_fanouts f)`).map((r) => r.body as string))
    expect(acknowledged.comments.filter((body) => !waitingPushes.has(body) && !pushed().has(body))).toEqual([])
    // A file is either deleted already or queued (a deleted one leaves the queue).
    const queued = new Set((await world.sql`select key from app.file_deletions`).map((r) => r.key as string))
    expect(acknowledged.deletedFiles.filter((key) => !queued.has(key) && existsSync(fileOf(key)))).toEqual([])

    // A todo's webhook is either delivered already or pending.
    const pendingWebhooks = new Set((await world.sql`
      select app.to_public_id('todo', todo_id) as id from app.webhook_deliveries where status = 'pending'`).map((r) => r.id as string))
    expect(acknowledged.todos.filter((id) => !pendingWebhooks.has(id) && !webhooked.has(id))).toEqual([])
    // The crash left work of every kind behind for the next server (files wait for the minute's
    // maintenance; refused webhooks and pushes for their retry), or the restart would prove nothing.
    expect([pendingWebhooks.size, waitingPushes.size, queued.size].map((n) => n > 0)).toEqual([true, true, true])
    refusing = false

    // The killed server's leases (webhooks and pushes it had taken to send) end and the refused
    // ones' retries come due: brought forward here rather than waited for. Then the same server
    // starts again on the same data.
    await world.sql`update app.webhook_deliveries set next_attempt_at = now() where status = 'pending'`
    await world.sql`update app.push_deliveries set next_attempt_at = now() where status = 'pending'`
    const second = await startServer(env)
    try {
      await waitUntil('every acknowledged todo delivered to its webhook', () => acknowledged.todos.every((id) => webhooked.has(id)), 60_000)
      await waitUntil('every acknowledged comment pushed to Bob', () => acknowledged.comments.every((body) => pushed().has(body)), 60_000)
      await waitUntil('every deleted todo\'s file deleted', () => acknowledged.deletedFiles.every((key) => !existsSync(fileOf(key))), 60_000)
      expect(await world.sql`select key from app.file_deletions`).toEqual([])
      expect(pushService.received.filter((r) => r.problem)).toEqual([])
      expect(await world.sql`select status from app.webhook_deliveries where status <> 'delivered'`).toEqual([])
    } finally {
      expect([0, 'SIGINT']).toContain(await interrupt(second.child))
    }
  })
})

interface Timed extends Answer {
  startedAt: number
  ms: number
  /** Whether sending the request again is safe whatever became of it: a GET, or a POST with its Idempotency-Key. */
  retrySafe: boolean
}

/**
 * Reads and writes from `loops` concurrent clients until stopped, every answer timed. A request
 * without an answer (the connection cut) is recorded as status 0.
 */
function mixedLoad(base: string, apiKey: string, loops: number) {
  const answers: Timed[] = []
  let stopped = false
  let sequence = 0
  const running = Array.from({ length: loops }, async (_, loop) => {
    while (!stopped) {
      const startedAt = Date.now()
      // Reads, and writes with and without an Idempotency-Key (a key of its own each).
      const keyed = loop % 4 === 2
      const answer = loop % 2 === 0
        ? await call(base, 'POST', '/v1/todos', apiKey, { body: `under restart ${++sequence}` }, keyed ? { 'idempotency-key': `restart-${sequence}` } : {})
        : await call(base, 'GET', '/v1/todos?per_page=5', apiKey)
      answers.push({ ...(answer ?? { status: 0, body: null, headers: new Headers() }), startedAt, ms: Date.now() - startedAt, retrySafe: loop % 2 === 1 || keyed })
      // A refused request comes back at once: a short pause keeps the loop from spinning.
      if (!answer || answer.status >= 500) await new Promise((r) => setTimeout(r, 20))
    }
  })
  return {
    answers,
    async stop() {
      stopped = true
      await Promise.all(running)
    },
  }
}

describe('PostgreSQL restarted under load', () => {
  it('answers 503 {error} while it is down, no request held past the connect timeout, and the same server recovers: requests, webhooks, realtime', { timeout: 300_000 }, async () => {
    const startPostgres = await importEmbeddedPostgres()
    const options = { dataDir: await scratchDir('todo-faults-pg-'), port: await freePort(), password: 'test' }
    let postgres = await startPostgres(options)
    cleanups.push(() => postgres.stop())
    const sql = createSql(postgres.url, { max: 2 })
    cleanups.push(() => sql.end({ timeout: 1 }))
    await migrate(sql)
    await sql`update app.rate_limits set max_events = 100000000`
    const admin = async <T = any>(...argv: string[]) => (await runAdmin({ sql, jwtSecret: JWT_SECRET, publicUrl: 'http://api.test' }, argv)) as T
    const alice = await admin<{ id: string; api_key: string }>('create-user', '--username', 'alice')
    const bob = await admin<{ id: string }>('create-user', '--username', 'bob')
    const chatToken = async (user: string) => {
      const client = await admin<{ client_id: string }>('create-oauth-client', '--name', 'Chat app', '--chat')
      return (await admin<{ access_token: string }>('issue-token', '--user', user, '--client', client.client_id, '--scopes', 'public chat')).access_token
    }
    const [aliceChat, bobChat] = [await chatToken('alice'), await chatToken('bob')]
    void bob

    const receiver = await startReceiver()
    cleanups.push(() => receiver.close())
    const env = await serverEnv(postgres.url)
    const base = `http://127.0.0.1:${env.PORT}`
    const server = await startServer(env)
    let serverRunning = true
    cleanups.push(async () => serverRunning && killNine(server.child))
    expect((await call(base, 'POST', '/v1/webhooks/subscriptions', alice.api_key, { url: `${receiver.url}/hook`, event_type: 'new_todo' }))?.status).toBe(201)
    const conversation = await call(base, 'POST', '/v1/conversations', aliceChat, { user: 'bob' })
    expect(conversation?.status).toBe(201)
    const conversationPath = `/v1/conversations/${conversation!.body.id}/messages`
    expect((await call(base, 'POST', conversationPath, bobChat, { body: 'hello' }))?.status).toBe(201)
    const clients: SupabaseClient[] = []
    cleanups.push(() => Promise.all(clients.map((c) => c.realtime.disconnect())))
    const bobListens = await listen(base, clients, bobChat, `conversation:${conversation!.body.id}`)
    expect(bobListens.status).toBe('SUBSCRIBED')
    const before = await call(base, 'POST', conversationPath, aliceChat, { body: 'before the restart' })
    await bobListens.waitFor('message.created', (m) => m.id === before!.body.id)

    const load = mixedLoad(base, alice.api_key, 4)
    await waitUntil('answers before the restart', () => load.answers.filter((a) => a.status < 300).length >= 40, 30_000)
    // Down: a fast shutdown (SIGINT), as a restart or a failover does: sessions cut, in-flight transactions rolled back.
    const downAt = Date.now()
    await postgres.stop()
    const stoppedAt = Date.now()
    await waitUntil('503 answers while PostgreSQL is down', () => load.answers.filter((a) => a.startedAt > stoppedAt && a.status === 503).length >= 40, 30_000)
    const health = await fetch(`${base}/health`)
    expect(health.status).toBe(503)
    expect(await health.json()).toEqual({ error: expect.any(String) })
    // A chat app joining now is refused at once, as Supabase Realtime refuses it
    // (UnableToConnectToProject); supabase-js joins again by itself later.
    const aliceListens = await listen(base, clients, aliceChat, `conversation:${conversation!.body.id}`)
    expect([aliceListens.status, aliceListens.reason]).toEqual(['CHANNEL_ERROR', expect.stringMatching(/^UnableToConnectToProject/)])
    // Up again, on the same data and port; the server is the same process throughout.
    const upAt = Date.now()
    postgres = await startPostgres(options)
    const acceptingAt = Date.now()
    await waitUntil('the first success after the restart', () => load.answers.some((a) => a.startedAt > upAt && a.status < 300), 30_000)
    const recoveredAt = Date.now()
    // How soon after PostgreSQL accepts connections (about 0.3 s measured, recorded below) is a
    // figure, not a bound: the deadline above only ends a run that would hang (issue 31).
    console.log(`faults: first success ${recoveredAt - acceptingAt} ms after PostgreSQL accepted connections`)
    await waitUntil('answers after the recovery', () => load.answers.filter((a) => a.startedAt > recoveredAt && a.status < 300).length >= 40, 30_000)
    await load.stop()

    // Every answer is a success or a 503 {error} with Retry-After: never a 500, never a cut connection.
    const wrong = load.answers.filter((a) => !(a.status >= 200 && a.status < 300) && a.status !== 503)
    expect(wrong.map((a) => `${a.status} ${JSON.stringify(a.body)}`)).toEqual([])
    const unavailable = load.answers.filter((a) => a.status === 503)
    expect(unavailable.length).toBeGreaterThan(0)
    for (const a of unavailable) {
      expect(a.body).toEqual({ error: expect.any(String) })
      // Worth retrying (Retry-After) when nothing happened; a request whose connection broke while
      // it ran may have taken effect, and says so, with Retry-After only when sending it again is
      // safe: a read, or a write with its Idempotency-Key (functions/lib/errors.ts).
      if (/may or may not have taken effect/.test(a.body.error)) expect(a.headers.get('retry-after')).toBe(a.retrySafe ? '2' : null)
      else expect([a.body.error, Number(a.headers.get('retry-after'))]).toEqual(['The database is unavailable right now; try again shortly.', 2])
    }
    // No request waits past the connect timeout (a hang, or postgres.js's default 30 s, would); the
    // margin is for a loaded machine. "At once" (a refused connection fails without waiting) is
    // what the answers' error says, not a time measured here (issue 31: the name claimed it).
    expect(Math.max(...load.answers.map((a) => a.ms))).toBeLessThan(CONNECT_TIMEOUT_SECONDS * 1000 + 2_000)
    // Once one request succeeds again, they all do: no broken connection left in the pool.
    expect(load.answers.filter((a) => a.startedAt > recoveredAt + 1_000 && a.status !== 200 && a.status !== 201)).toEqual([])
    expect(downAt).toBeLessThan(upAt)
    expect((await fetch(`${base}/health`)).status).toBe(200)

    // Every todo the server acknowledged, before, during (none then) and after the outage, is kept
    // and delivered to its webhook by the worker, which carried on by itself.
    // A success always carries its record (once, a 201 came back with the body null: functions/lib/db.ts).
    expect(load.answers.filter((a) => a.status < 300 && (a.body === null || typeof a.body !== 'object'))).toEqual([])
    const acknowledged = load.answers.filter((a) => a.status === 201).map((a) => a.body.id as string)
    const kept = await sql`select app.to_public_id('todo', id) as id from app.todos where app.to_public_id('todo', id) = any(${acknowledged})`
    expect(kept.length).toBe(acknowledged.length)
    const delivered = () => new Set(receiver.received.map((r) => JSON.parse(r.body).data.id as string))
    await waitUntil('every acknowledged todo delivered to its webhook', () => acknowledged.every((id) => delivered().has(id)), 60_000)

    // The Realtime gateway hears the database again: a message sent now reaches the subscriber
    // who joined before the restart, on the same websocket.
    const after = await call(base, 'POST', conversationPath, aliceChat, { body: 'after the restart' })
    expect(after?.status).toBe(201)
    expect(await bobListens.waitFor('message.created', (m) => m.id === after!.body.id, 30_000)).toMatchObject({ body: 'after the restart' })
    // And the join refused during the outage went through once the database was back.
    await waitUntil('the refused join, made again by supabase-js', () => aliceListens.status === 'SUBSCRIBED', 30_000)
    const answer = await call(base, 'POST', conversationPath, bobChat, { body: 'to the rejoined' })
    expect(await aliceListens.waitFor('message.created', (m) => m.id === answer!.body.id, 10_000)).toMatchObject({ body: 'to the rejoined' })

    expect([0, 'SIGINT']).toContain(await interrupt(server.child))
    serverRunning = false
  })
})

describe('how a lost database is answered (functions/lib/errors.ts)', () => {
  // The kinds the restart above meets depend on timing; each code is pinned here.
  const postgresError = (code: string) => Object.assign(new Error(`sqlstate ${code}`), { name: 'PostgresError', code })
  const socketError = (code: string) => Object.assign(new Error(`socket ${code}`), { code })
  it('not applied: 503 with Retry-After; outcome unknown: 503 that says so, with Retry-After only when a retry is safe (a read, or a write with its Idempotency-Key)', () => {
    for (const err of [socketError('ECONNREFUSED'), socketError('CONNECT_TIMEOUT'), socketError('CONNECTION_ENDED'),
      postgresError('57P01'), postgresError('57P03'), postgresError('53300'), postgresError('08001')]) {
      for (const retrySafe of [false, true]) {
        const { status, body, headers } = describeError(err, 'https://todo.test/upgrade', { retrySafe })
        expect([err.message, status, body, headers]).toEqual([err.message, 503, { error: 'The database is unavailable right now; try again shortly.' }, { 'Retry-After': '2' }])
      }
    }
    for (const err of [socketError('ECONNRESET'), socketError('EPIPE'), socketError('CONNECTION_CLOSED'), socketError('CONNECTION_DESTROYED'), socketError('NO_RESULT_ROW'),
      socketError('DATABASE_SILENT'), postgresError('08006')]) {
      // A write without a key: it may have taken effect, and a client that retries on Retry-After
      // would make it twice.
      const blind = describeError(err, 'https://todo.test/upgrade')
      expect([err.message, blind.status, blind.headers]).toEqual([err.message, 503, {}])
      expect(blind.body.error).toMatch(/may or may not have taken effect\. If you sent an Idempotency-Key, send the request again with the same key/)
      // A read, or a write with its key (issue 29: the 503 "tells the client to retry with its key").
      const safe = describeError(err, 'https://todo.test/upgrade', { retrySafe: true })
      expect([err.message, safe.status, safe.body, safe.headers]).toEqual([err.message, 503, blind.body, { 'Retry-After': '2' }])
    }
    // A statement cancelled (its statement timeout, or a cancel) is surely not applied: PostgreSQL
    // rolled it back. 503 with Retry-After, whatever the request (issue 29, item 2).
    for (const retrySafe of [false, true]) {
      const cancelled = describeError(postgresError('57014'), 'https://todo.test/upgrade', { retrySafe })
      expect([cancelled.status, cancelled.body, cancelled.headers]).toEqual([503, { error: 'The request took too long; try again.' }, { 'Retry-After': '2' }])
    }
    // A code of another kind is not a lost database: a plain 500, logged as ours to fix.
    expect(describeError(socketError('ENOENT'), '').status).toBe(500)
    expect(describeError(postgresError('XX000'), '').status).toBe(500)
  })
})
