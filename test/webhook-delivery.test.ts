// Webhook delivery (issue 14, items 2–5): the outbox written in the todo's transaction, signed
// Standard Webhooks deliveries to a real receiver on 127.0.0.1 verified with the npm
// `standardwebhooks` package, project scoping, retries (500, a timeout, 429 Retry-After),
// 410 and giving up disable the subscription, no redirects, at-least-once across a kill -9 of
// a worker process, two workers never sending one delivery at once, and SSRF refusals.
import { type ChildProcess, spawn } from 'node:child_process'
import { Webhook } from 'standardwebhooks'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { createSql } from '../functions/lib/sql.ts'
import { drainWebhooks, isPublicAddress, signWebhook } from '../functions/lib/webhooks.ts'
import { ROOT } from '../local/paths.ts'
import { nodeWebhookSender } from '../local/webhook-sender.ts'
import { WORKER_SECRET, type CreatedUser, type TestWorld, startWorld } from './support/app.ts'
import { startReceiver } from './support/receiver.ts'

type Receiver = Awaited<ReturnType<typeof startReceiver>>

let world: TestWorld
let receiver: Receiver
let alice: CreatedUser
let project: { id: string }
const FAST = { scheduleMs: [300], giveUpAfterMs: 60_000, jitter: 0 }

interface Delivery {
  id: string
  subscription_id: string
  todo_id: string
  status: 'pending' | 'delivered' | 'failed'
  attempts: number
  last_status: number | null
  next_attempt_at: string | null
}

async function deliveries(user = 'alice'): Promise<Delivery[]> {
  return (await world.admin<{ data: Delivery[] }>('webhook-deliveries', '--user', user)).data
}

/** A subscription of `user` to the receiver (path tells the tests' subscriptions apart). */
async function subscribe(user: CreatedUser, path: string, projectIds?: string[]) {
  const res = await world.post('/v1/webhooks/subscriptions', {
    auth: user.api_key,
    json: { url: `${receiver.url}${path}`, event_type: 'new_todo', ...(projectIds ? { project_ids: projectIds } : {}) },
  })
  expect(res.status, res.text).toBe(201)
  return res.body as { id: string; secret: string }
}

async function unsubscribe(user: CreatedUser, id: string) {
  await world.delete(`/v1/webhooks/subscriptions/${id}`, { auth: user.api_key })
}

async function postTodo(user: CreatedUser, body: string) {
  const res = await world.post('/v1/todos', { auth: user.api_key, json: { body } })
  expect(res.status, res.text).toBe(201)
  return res.body as { id: string }
}

const answerOk = () => receiver.answer((_req, res) => { res.end('ok') })

beforeAll(async () => {
  world = await startWorld({ webhookAllowPrivate: true })
  receiver = await startReceiver()
  alice = await world.createUser('alice')
  project = await world.admin('create-project', '--owner', 'alice', '--name', 'Alpha', '--hashtag', 'alpha')
})
// Each test starts with no subscription, an empty log and no host's breaker counting, whatever
// the one before left (every receiver here is on one host, 127.0.0.1).
afterEach(async () => {
  await world.sql`delete from app.webhook_subscriptions`
  await world.sql`delete from app.webhook_breakers`
  answerOk()
})
afterAll(async () => {
  await receiver.close()
  await world.close()
})

describe('the outbox', () => {
  it('writes one delivery per matching subscription with the todo’s transaction, and none for a rolled-back todo', async () => {
    const all = await subscribe(alice, '/outbox-all')
    const scoped = await subscribe(alice, '/outbox-scoped', [project.id])
    const plain = await postTodo(alice, 'no project here')
    const tagged = await postTodo(alice, 'shipped #alpha today')
    const rows = await world.sql`
      select app.to_public_id('hook', d.subscription_id) as sub, app.to_public_id('todo', d.todo_id) as todo, e.payload
      from app.webhook_deliveries d join app.webhook_events e on e.todo_id = d.todo_id order by d.created_at`
    const pairs = rows.map((r) => `${r.sub} ${r.todo}`).sort()
    expect(pairs).toEqual([`${all.id} ${plain.id}`, `${all.id} ${tagged.id}`, `${scoped.id} ${tagged.id}`].sort())
    // The Todo as its owner sees it at creation, in the body that will be sent.
    const owner = (await world.get(`/v1/todos/${tagged.id}`, { auth: alice.api_key })).body
    const sent = rows.find((r) => r.todo === tagged.id)!.payload as { type: string; timestamp: string; data: unknown }
    expect(sent.type).toBe('new_todo')
    expect(Date.parse(sent.timestamp)).toBe(Date.parse(owner.created_at))
    expect(sent.data).toEqual(owner)

    // A todo whose transaction rolls back leaves nothing behind. The insert itself succeeded (the
    // todo is there inside the transaction), and the transaction failed on the division, nothing
    // else: so "nothing behind" is the rollback's doing (issue 31: a swallowed error of any kind
    // passed before).
    const before = rows.length
    let inside = -1
    await expect(world.sql.begin(async (tx) => {
      await tx`insert into app.todos (user_id, body) values (${alice.id.replace(/^user_/, '').replace(/(.{8})(.{4})(.{4})(.{4})(.{12})/, '$1-$2-$3-$4-$5')}, 'never happened')`
      inside = (await tx`select count(*)::int as n from app.todos where body = 'never happened'`)[0]!.n
      await tx`select 1/0`
    })).rejects.toThrow(/division by zero/)
    expect(inside).toBe(1)
    expect((await world.sql`select count(*)::int as n from app.webhook_deliveries`)[0]!.n).toBe(before)
    // One stored body per todo, however many subscriptions it went to.
    expect((await world.sql`select count(*)::int as n from app.webhook_events`)[0]!.n).toBe(2)
    await unsubscribe(alice, all.id)
    await unsubscribe(alice, scoped.id)
  })
})

describe('the outbox, for a todo the operator CLI creates', () => {
  it('the body has the same urls as the todo\'s API answer', async () => {
    const sub = await subscribe(alice, '/cli')
    const made = await world.admin<{ id: string; url: string }>('create-todo', '--user', 'alice', '--body', 'from the CLI')
    const [row] = await world.sql`select e.payload from app.webhook_events e where e.todo_id = app.from_public_id('todo', ${made.id})`
    const owner = (await world.get(`/v1/todos/${made.id}`, { auth: alice.api_key })).body
    expect((row!.payload as { data: { url: string } }).data.url).toBe(owner.url)
    expect((row!.payload as { data: unknown }).data).toEqual(owner)
    await unsubscribe(alice, sub.id)
  })
})

describe('delivery', () => {
  it('POSTs the signed event; standardwebhooks verifies it; the log says delivered (through POST /internal/webhooks)', async () => {
    answerOk()
    const sub = await subscribe(alice, '/signed')
    const todo = await postTodo(alice, 'signed and delivered')
    const start = receiver.received.length
    const drained = await world.post('/internal/webhooks', { headers: { authorization: `Bearer ${WORKER_SECRET}` } })
    expect(drained.status).toBe(200)
    expect(drained.body).toMatchObject({ delivered: 1 })
    const [request] = (await receiver.waitFor(start + 1)).slice(start)
    expect(request!.path).toBe('/signed')
    expect(request!.headers['content-type']).toBe('application/json')
    expect(request!.headers['webhook-id']).toMatch(/^msg_[0-9a-f]{32}$/)
    const verified = new Webhook(sub.secret).verify(request!.body, request!.headers) as { type: string; data: { id: string; body: string } }
    expect(verified.type).toBe('new_todo')
    expect(verified.data).toMatchObject({ id: todo.id, body: 'signed and delivered' })
    // Another secret, or a changed body, does not verify.
    const other = new Webhook(`whsec_${Buffer.alloc(32, 7).toString('base64')}`)
    expect(() => other.verify(request!.body, request!.headers)).toThrow()
    expect(() => new Webhook(sub.secret).verify(request!.body.replace('signed', 'forged'), request!.headers)).toThrow()
    const [log] = await deliveries()
    expect(log).toEqual({ id: request!.headers['webhook-id'], subscription_id: sub.id, todo_id: todo.id, status: 'delivered', attempts: 1, last_status: 200, next_attempt_at: null })
    // The route is off without the worker secret.
    expect((await world.post('/internal/webhooks', { headers: { authorization: 'Bearer wrong' } })).status).toBe(404)
    await unsubscribe(alice, sub.id)
  })

  it('the signature is the Standard Webhooks one (our HMAC equals the package’s)', async () => {
    const secret = `whsec_${Buffer.alloc(32, 1).toString('base64')}`
    const ours = await signWebhook(secret, 'msg_1', 1700000000, '{"a":1}')
    expect(ours).toBe(new Webhook(secret).sign('msg_1', new Date(1700000000 * 1000), '{"a":1}'))
  })

  it('only todos of the subscription’s projects reach a scoped subscription', async () => {
    answerOk()
    const scoped = await subscribe(alice, '/scoped', [project.id])
    const start = receiver.received.length
    await postTodo(alice, 'nothing to do with a project')
    const tagged = await postTodo(alice, 'more #alpha work')
    await world.drainWebhooks(FAST)
    const got = receiver.received.slice(start)
    expect(got.map((r) => JSON.parse(r.body).data.id)).toEqual([tagged.id])
    await unsubscribe(alice, scoped.id)
  })

  it('retries after a 500 and after a timeout, with the same webhook-id, then delivers', async () => {
    const sub = await subscribe(alice, '/flaky')
    let calls = 0
    receiver.answer((_req, res) => {
      calls++
      if (calls === 1) { res.statusCode = 500; res.end('boom'); return }
      if (calls === 2) return // never answers: the attempt times out
      res.end('ok')
    })
    const start = receiver.received.length
    await postTodo(alice, 'third time lucky')
    const options = { ...FAST, timeoutMs: 700 }
    expect(await world.drainWebhooks(options)).toMatchObject({ retrying: 1 })
    let [log] = await deliveries()
    expect(log).toMatchObject({ status: 'pending', attempts: 1, last_status: 500 })
    await new Promise((r) => setTimeout(r, 350))
    expect(await world.drainWebhooks(options)).toMatchObject({ retrying: 1 })
    ;[log] = await deliveries()
    expect(log).toMatchObject({ status: 'pending', attempts: 2, last_status: null })
    await new Promise((r) => setTimeout(r, 350))
    expect(await world.drainWebhooks(options)).toMatchObject({ delivered: 1 })
    ;[log] = await deliveries()
    expect(log).toMatchObject({ status: 'delivered', attempts: 3, last_status: 200 })
    const ids = receiver.received.slice(start).map((r) => r.headers['webhook-id'])
    expect(ids).toHaveLength(3)
    expect(new Set(ids).size).toBe(1)
    await unsubscribe(alice, sub.id)
  })

  it('honours Retry-After on 429, and does not follow redirects', async () => {
    const sub = await subscribe(alice, '/busy')
    receiver.answer((_req, res) => { res.writeHead(429, { 'retry-after': '120' }).end() })
    await postTodo(alice, 'later please')
    const before = Date.now()
    await world.drainWebhooks({ ...FAST, giveUpAfterMs: 3_600_000 })
    const [log] = await deliveries()
    expect(log).toMatchObject({ status: 'pending', last_status: 429 })
    expect(Date.parse(log!.next_attempt_at!) - before).toBeGreaterThan(100_000)
    await world.sql`update app.webhook_deliveries set next_attempt_at = now()`

    const start = receiver.received.length
    receiver.answer((req, res) => {
      if (req.path === '/busy') res.writeHead(302, { location: `${receiver.url}/elsewhere` }).end()
      else res.end('ok')
    })
    await world.drainWebhooks(FAST)
    expect(receiver.received.slice(start).map((r) => r.path)).toEqual(['/busy'])
    expect((await deliveries())[0]).toMatchObject({ status: 'pending', last_status: 302 })
    await unsubscribe(alice, sub.id)
  })

  it('410 Gone disables the subscription (active false) and fails its deliveries; no new ones are written', async () => {
    const sub = await subscribe(alice, '/gone')
    receiver.answer((_req, res) => { res.statusCode = 410; res.end() })
    await postTodo(alice, 'to a receiver that left')
    await world.drainWebhooks(FAST)
    expect((await deliveries())[0]).toMatchObject({ status: 'failed', attempts: 1, last_status: 410, next_attempt_at: null })
    const [listed] = (await world.get('/v1/webhooks/subscriptions', { auth: alice.api_key })).body.filter((s: { id: string }) => s.id === sub.id)
    expect(listed.active).toBe(false)
    const count = (await deliveries()).length
    await postTodo(alice, 'not enqueued for an inactive subscription')
    expect((await deliveries()).length).toBe(count)
    // Turned back on by its owner, it receives new todos again.
    answerOk()
    expect((await world.patch(`/v1/webhooks/subscriptions/${sub.id}`, { auth: alice.api_key, json: { active: true } })).body.active).toBe(true)
    await postTodo(alice, 'welcome back')
    await world.drainWebhooks(FAST)
    expect((await deliveries())[0]).toMatchObject({ status: 'delivered' })
    await unsubscribe(alice, sub.id)
  })

  it('after the give-up window of failures the delivery fails and the subscription is disabled', async () => {
    const sub = await subscribe(alice, '/down')
    receiver.answer((_req, res) => { res.statusCode = 503; res.end() })
    await postTodo(alice, 'into the void')
    const options = { scheduleMs: [150], giveUpAfterMs: 400, jitter: 0 }
    for (let i = 0; i < 10 && (await deliveries())[0]!.status === 'pending'; i++) {
      await world.drainWebhooks(options)
      await new Promise((r) => setTimeout(r, 170))
    }
    const [log] = await deliveries()
    expect(log).toMatchObject({ status: 'failed', last_status: 503, next_attempt_at: null })
    expect(log!.attempts).toBeGreaterThanOrEqual(3)
    const [listed] = (await world.get('/v1/webhooks/subscriptions', { auth: alice.api_key })).body.filter((s: { id: string }) => s.id === sub.id)
    expect(listed.active).toBe(false)
    await unsubscribe(alice, sub.id)
  })
})

/** `npm run webhook-worker` on this world's database, as node itself (not the tsx launcher), so a signal hits the process that holds the delivery. */
function spawnWorker() {
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', 'local/webhook-worker.ts'], {
    cwd: ROOT,
    env: { ...process.env, DATABASE_URL: world.databaseUrl, WEBHOOK_ALLOW_PRIVATE: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout!.on('data', (d) => (output += d))
  child.stderr!.on('data', (d) => (output += d))
  const exited = new Promise((resolve) => child.on('exit', resolve))
  return {
    output: () => output,
    async kill(signal: NodeJS.Signals) {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal)
      await exited
    },
  }
}

describe('secret rotation (issue 28)', () => {
  it('POST …/secret returns a new secret; for 24 hours deliveries carry both signatures (standardwebhooks verifies each), then only the new one; owner only', async () => {
    answerOk()
    const sub = await subscribe(alice, '/rotated')
    const rotate = (id: string, auth: string) => world.post(`/v1/webhooks/subscriptions/${id}/secret`, { auth })
    // Only the owner, with a writing credential: another member and an unknown id get 404, as
    // the other subscription routes answer; a read-only key 403. None of them changes the secret.
    const other = await world.createUser('rotstranger')
    expect((await rotate(sub.id, other.api_key)).status).toBe(404)
    expect((await rotate(`hook_${'0'.repeat(32)}`, alice.api_key)).status).toBe(404)
    expect((await rotate(sub.id, alice.read_only_api_key)).status).toBe(403)
    // An app's token: the write scope, as for creating a subscription (which hands an app its
    // secret too); every other scope together is not enough.
    expect((await rotate(sub.id, await world.token('alice', 'public billing notifications chat', { firstParty: true, chat: true }))).status).toBe(403)
    const [unchanged] = await world.sql`select secret, previous_secret from app.webhook_secrets where subscription_id = app.from_public_id('hook', ${sub.id})`
    expect({ ...unchanged }).toEqual({ secret: sub.secret, previous_secret: null })

    const rotated = await rotate(sub.id, alice.api_key)
    expect(rotated.status, rotated.text).toBe(200)
    expect(rotated.body).toMatchObject({ id: sub.id, url: `${receiver.url}/rotated`, active: true })
    expect(rotated.body.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/)
    expect(rotated.body.secret).not.toBe(sub.secret)
    expect(Date.parse(rotated.body.previous_secret_expires_at) - Date.now()).toBeGreaterThan(23 * 3_600_000)
    // Shown once: the list does not carry it.
    expect(JSON.stringify((await world.get('/v1/webhooks/subscriptions', { auth: alice.api_key })).body)).not.toContain(rotated.body.secret)

    const start = receiver.received.length
    const both = await postTodo(alice, 'signed with both secrets')
    await world.drainWebhooks(FAST)
    const [request] = (await receiver.waitFor(start + 1)).slice(start)
    expect(request!.headers['webhook-signature']!.split(' ')).toHaveLength(2)
    for (const secret of [rotated.body.secret as string, sub.secret]) {
      const verified = new Webhook(secret).verify(request!.body, request!.headers) as { data: { id: string } }
      expect(verified.data.id).toBe(both.id)
    }

    // The 24 hours are over: only the new secret signs.
    await world.sql`update app.webhook_secrets set previous_expires_at = now() - interval '1 second' where subscription_id = app.from_public_id('hook', ${sub.id})`
    const after = await postTodo(alice, 'signed with the new secret only')
    await world.drainWebhooks(FAST)
    const [later] = (await receiver.waitFor(start + 2)).slice(start + 1)
    expect(later!.headers['webhook-signature']!.split(' ')).toHaveLength(1)
    expect((new Webhook(rotated.body.secret).verify(later!.body, later!.headers) as { data: { id: string } }).data.id).toBe(after.id)
    expect(() => new Webhook(sub.secret).verify(later!.body, later!.headers)).toThrow()

    // Rotating twice within the 24 hours keeps the two newest: never more than two signatures.
    const third = await rotate(sub.id, alice.api_key)
    const fourth = await rotate(sub.id, alice.api_key)
    expect(fourth.status).toBe(200)
    await postTodo(alice, 'rotated twice')
    await world.drainWebhooks(FAST)
    const [last] = (await receiver.waitFor(start + 3)).slice(start + 2)
    expect(last!.headers['webhook-signature']!.split(' ')).toHaveLength(2)
    expect(() => new Webhook(fourth.body.secret).verify(last!.body, last!.headers)).not.toThrow()
    expect(() => new Webhook(third.body.secret).verify(last!.body, last!.headers)).not.toThrow()
    expect(() => new Webhook(rotated.body.secret).verify(last!.body, last!.headers)).toThrow()
    // A third-party app with the write scope may rotate, as it may create, change or delete a
    // subscription: the new secret lets it sign nothing the member's receiver (which holds the
    // old one) would accept.
    const byApp = await rotate(sub.id, await world.token('alice', 'write'))
    expect(byApp.status, byApp.text).toBe(200)
    expect(byApp.body.secret).not.toBe(fourth.body.secret)

    // Documented in the OpenAPI document.
    const doc = (await world.get('/v1/openapi.json')).body
    expect(Object.keys(doc.paths['/v1/webhooks/subscriptions/{subscription_id}/secret'] ?? {})).toEqual(['post'])
    await unsubscribe(alice, sub.id)
  })
})

describe('retention (issue 28)', () => {
  it('the storage worker prunes the delivery log after 30 days, events and their rows together; pending deliveries stay', async () => {
    answerOk()
    await subscribe(alice, '/retained')
    const old = await postTodo(alice, 'delivered long ago')
    const recent = await postTodo(alice, 'delivered lately')
    await world.drainWebhooks(FAST)
    const pending = await postTodo(alice, 'still pending, however old')
    await world.sql`
      update app.webhook_events set created_at = now() - interval '31 days'
      where todo_id in (app.from_public_id('todo', ${old.id}), app.from_public_id('todo', ${pending.id}))`
    const result = await world.maintain()
    expect(result.prunedWebhookEvents).toBe(1)
    expect((await deliveries()).map((d) => `${d.todo_id} ${d.status}`).sort()).toEqual([`${recent.id} delivered`, `${pending.id} pending`].sort())
    expect((await world.sql`select 1 from app.webhook_events where todo_id = app.from_public_id('todo', ${old.id})`).length).toBe(0)
    // The todo itself is untouched: only what was sent about it goes.
    expect((await world.get(`/v1/todos/${old.id}`, { auth: alice.api_key })).status).toBe(200)
  })
})

describe('at least once, never twice at once', () => {
  it('a worker process killed (kill -9) mid-delivery: a restarted worker sends it again with the same webhook-id', async () => {
    await subscribe(alice, '/crash')
    receiver.answer(() => {}) // holds the request: the worker is mid-delivery
    const start = receiver.received.length
    const todo = await postTodo(alice, 'survives a crash')
    const first = spawnWorker()
    try {
      // The worker polls every second; how soon after the todo it sends is a bench figure, not a
      // test's (issue 31): this waits for the request, with a generous deadline.
      const [held] = (await receiver.waitFor(start + 1, 30_000)).slice(start)
      expect(JSON.parse(held!.body).data.id).toBe(todo.id)
    } finally {
      await first.kill('SIGKILL')
    }
    // The killed worker recorded nothing; its lease on the delivery runs out (here: at once,
    // rather than waiting the lease's minute), and the delivery is due again.
    const [leased] = await deliveries()
    expect(leased).toMatchObject({ status: 'pending', attempts: 0 })
    expect(Date.parse(leased!.next_attempt_at!)).toBeGreaterThan(Date.now() + 30_000)
    await world.sql`update app.webhook_deliveries set next_attempt_at = now() where status = 'pending'`
    answerOk()
    const second = spawnWorker()
    try {
      await receiver.waitFor(start + 2, 30_000)
      for (let i = 0; i < 50 && (await deliveries())[0]!.status !== 'delivered'; i++) await new Promise((r) => setTimeout(r, 100))
    } finally {
      await second.kill('SIGTERM')
    }
    const got = receiver.received.slice(start)
    expect(got).toHaveLength(2)
    expect(got[1]!.headers['webhook-id']).toBe(got[0]!.headers['webhook-id'])
    expect(got[1]!.body).toBe(got[0]!.body)
    expect((await deliveries())[0]).toMatchObject({ status: 'delivered', attempts: 1, last_status: 200 })
  }, 90_000)

  it('a claim whose worker never reports is due again when its lease runs out, by the clock (no SQL moves it), and goes out with the same webhook-id', async () => {
    const sub = await subscribe(alice, '/lease')
    await postTodo(alice, 'leased and forgotten')
    // A worker claims it with the production claim (a 1 s lease here, the worker's is its send
    // timeout + 30 s) and dies: it never sends nor records.
    const [claimed] = await world.sql<{ webhook_id: string }[]>`select webhook_id from app.take_webhook_deliveries(10, interval '1 second')`
    expect(claimed!.webhook_id).toEqual(expect.any(String))
    const start = receiver.received.length
    // While the lease holds, a drain sends nothing. Checked after the drain: a lease still in force
    // then was in force during it (so a loaded machine cannot make this pass or fail by timing).
    const during = await world.drainWebhooks(FAST)
    const [held] = await world.sql`select next_attempt_at > now() as leased from app.webhook_deliveries`
    if (held!.leased) expect(during).toMatchObject({ delivered: 0 })
    // The lease runs out by itself.
    for (const deadline = Date.now() + 60_000; (await world.sql`select 1 from app.webhook_deliveries where next_attempt_at <= now()`).length === 0;) {
      if (Date.now() > deadline) throw new Error('the lease did not run out')
      await new Promise((r) => setTimeout(r, 50))
    }
    expect(await world.drainWebhooks(FAST)).toMatchObject({ delivered: 1 })
    const got = receiver.received.slice(start)
    expect(got.map((r) => r.headers['webhook-id'])).toEqual([claimed!.webhook_id])
    expect((await deliveries())[0]).toMatchObject({ status: 'delivered', attempts: 1 })
    await unsubscribe(alice, sub.id)
  })

  it('a slow receiver holds no lock: another member deletes a todo and switches a subscription off while a delivery is in flight', async () => {
    const bob = await world.createUser('slowbob')
    const slow = await subscribe(alice, '/slow')
    const quick = await subscribe(bob, '/quick-bob')
    let release: () => void = () => {}
    receiver.answer((req, res) => {
      if (req.path === '/slow') release = () => res.end('late')
      else res.end('ok')
    })
    await postTodo(alice, 'to a slow receiver')
    const bobs = await postTodo(bob, 'bob goes first')
    const sender = nodeWebhookSender({ allowPrivate: true })
    const start = receiver.received.length
    const draining = drainWebhooks(world.sql, sender, { ...FAST, batch: 10, lanes: 1, timeoutMs: 10_000 })
    try {
      await receiver.waitFor(start + 2, 10_000)
      // Both deliveries were claimed in one batch; alice's is still in flight, and stays so until
      // `release()` below: a write that waited for a lock the delivery held would wait forever
      // (a 503 at the statement timeout, or the test's own timeout), so no clock is needed.
      expect((await world.delete(`/v1/todos/${bobs.id}`, { auth: bob.api_key })).status).toBe(204)
      const off = await world.patch(`/v1/webhooks/subscriptions/${quick.id}`, { auth: bob.api_key, json: { active: false } })
      expect(off.status, off.text).toBe(200)
    } finally {
      release()
      await draining
      await sender.close()
    }
    await unsubscribe(alice, slow.id)
    await unsubscribe(bob, quick.id)
  }, 30_000)

  it('two workers draining at once never send the same delivery twice', async () => {
    const sub = await subscribe(alice, '/pair')
    const inFlight = new Map<string, number>()
    let overlaps = 0
    // Answers wait until both workers have sent something (each tags its requests), so the two
    // surely drain at the same time however the machine schedules them; a bound keeps a worker
    // that never sends from hanging the test (it then fails on its count below).
    const seen = new Set<string>()
    let bothSent!: () => void
    const together = Promise.race([new Promise<void>((resolve) => (bothSent = resolve)), new Promise<void>((resolve) => setTimeout(resolve, 10_000))])
    receiver.answer((req, res) => {
      const id = req.headers['webhook-id']!
      inFlight.set(id, (inFlight.get(id) ?? 0) + 1)
      if (inFlight.get(id)! > 1) overlaps++
      seen.add(String(req.headers['x-test-worker']))
      if (seen.size === 2) bothSent()
      void together.then(() => setTimeout(() => {
        inFlight.set(id, inFlight.get(id)! - 1)
        res.end('ok')
      }, 30))
    })
    const start = receiver.received.length
    const todos = 40
    for (let i = 0; i < todos; i++) await postTodo(alice, `pair ${i}`)
    const workers = [0, 1].map((n) => {
      const sender = nodeWebhookSender({ allowPrivate: true })
      const send: typeof sender = Object.assign((request: Parameters<typeof sender>[0]) => sender({ ...request, headers: { ...request.headers, 'x-test-worker': String(n) } }), { close: () => sender.close() })
      return { sql: createSql(world.databaseUrl, { max: 3 }), send }
    })
    try {
      // Caps out of the way (test/webhook-fairness.test.ts has them): with one member's share (2
      // of 8 slots) or the unproven half in flight at most, the first worker could take them all
      // and leave the second nothing.
      const results = await Promise.all(workers.map((w) => drainWebhooks(w.sql, w.send, { ...FAST, batch: 4, lanes: 2, hostCap: 100, memberCap: 100, unprovenCap: 100 })))
      expect(results[0]!.delivered + results[1]!.delivered).toBe(todos)
      expect(results[0]!.delivered).toBeGreaterThan(0)
      expect(results[1]!.delivered).toBeGreaterThan(0)
    } finally {
      for (const w of workers) {
        await w.send.close()
        await w.sql.end({ timeout: 5 })
      }
    }
    const ids = receiver.received.slice(start).map((r) => r.headers['webhook-id'])
    expect(ids).toHaveLength(todos)
    expect(new Set(ids).size).toBe(todos)
    expect(overlaps).toBe(0)
    await unsubscribe(alice, sub.id)
  })

  it('a claim whose transaction began before another claim took the lock still takes what is due', async () => {
    await subscribe(alice, '/race')
    for (let i = 0; i < 3; i++) await postTodo(alice, `race ${i}`)
    // Claims take turns (an advisory lock). When two workers start together, the one whose
    // transaction began first may get the lock second: its now() is then earlier than the turn
    // the other one gave the subscription (the other's claim time), so it used to find nothing
    // due and stop, and the other worker sent everything (this file's test above, once in CI).
    const second = await world.sql.reserve()
    let first: { todo_id: string }[]
    let taken: { todo_id: string }[]
    try {
      await second`begin`
      await second`select now()`
      // The first claim takes one delivery (a cap of 1 to the host) and moves the turn.
      first = await world.sql<{ todo_id: string }[]>`select todo_id from app.take_webhook_deliveries(10, interval '60 seconds', 20, interval '2 seconds', 1, 100, 100)`
      taken = await second<{ todo_id: string }[]>`select todo_id from app.take_webhook_deliveries(10, interval '60 seconds', 20, interval '2 seconds', 100, 100, 100)`
    } finally {
      await second`rollback`.catch(() => {})
      second.release()
    }
    expect(first.length).toBe(1)
    // The other two, though its transaction began before the first claim was made.
    expect(taken.length).toBe(2)
    expect(taken.map((r) => r.todo_id)).not.toContain(first[0]!.todo_id)
  })
})

describe('SSRF', () => {
  it.each([
    ['127.0.0.1', false], ['::1', false], ['::ffff:127.0.0.1', false], ['::ffff:7f00:1', false], ['0.0.0.0', false], ['::', false],
    ['10.0.0.1', false], ['172.16.5.4', false], ['192.168.1.1', false], ['169.254.169.254', false], ['100.64.0.1', false],
    ['fc00::1', false], ['fe80::1', false], ['224.0.0.1', false], ['255.255.255.255', false], ['64:ff9b::7f00:1', false],
    ['2002:7f00:1::', false], ['198.18.0.1', false], ['not an address', false],
    ['93.184.216.34', true], ['1.1.1.1', true], ['2606:4700:4700::1111', true], ['::ffff:8.8.8.8', true],
  ])('%s is public: %s', (address, expected) => {
    expect(isPublicAddress(address)).toBe(expected)
  })

  it('without WEBHOOK_ALLOW_PRIVATE a host resolving to a private address gets nothing; the attempt is logged as refused', async () => {
    answerOk()
    const sub = await subscribe(alice, '/private')
    // The name resolves (system resolver) to loopback; the subscription itself is valid.
    await world.sql`update app.webhook_subscriptions set url = ${`https://localhost:${receiver.port}/private`} where id = app.from_public_id('hook', ${sub.id})`
    await postTodo(alice, 'must not reach localhost')
    const start = receiver.received.length
    const strict = nodeWebhookSender({ allowPrivate: false })
    try {
      expect(await drainWebhooks(world.sql, strict, FAST)).toMatchObject({ retrying: 1 })
      const refusedLiteral = await strict({ url: `${receiver.url}/x`, headers: {}, body: '{}', timeoutMs: 1000 })
      expect(refusedLiteral).toMatchObject({ status: null, error: expect.stringMatching(/refused/) })
      const mapped = await strict({ url: `http://[::ffff:127.0.0.1]:${receiver.port}/x`, headers: {}, body: '{}', timeoutMs: 1000 })
      expect(mapped).toMatchObject({ status: null, error: expect.stringMatching(/refused/) })
      const decimal = await strict({ url: `http://2130706433:${receiver.port}/x`, headers: {}, body: '{}', timeoutMs: 1000 })
      expect(decimal).toMatchObject({ status: null, error: expect.stringMatching(/refused/) })
      // A plain-http subscription made while the flag was on goes out no more once it is off.
      const plain = await strict({ url: 'http://hooks.example.com/x', headers: {}, body: '{}', timeoutMs: 1000 })
      expect(plain).toEqual({ status: null, error: 'refused: http: is not https' })
    } finally {
      await strict.close()
    }
    expect(receiver.received.length).toBe(start)
    expect((await deliveries())[0]).toMatchObject({ status: 'pending', attempts: 1, last_status: null })
    await unsubscribe(alice, sub.id)
  })

  it('the connection goes to the vetted address: a resolver that answers a private address is refused, and one we control is used as is', async () => {
    const rebinding = nodeWebhookSender({ allowPrivate: false, resolve: async () => [{ address: '10.11.12.13', family: 4 }] })
    try {
      const res = await rebinding({ url: 'https://hooks.example.com/x', headers: {}, body: '{}', timeoutMs: 1000 })
      expect(res).toMatchObject({ status: null, error: expect.stringMatching(/refused: hooks.example.com resolves to 10.11.12.13/) })
    } finally {
      await rebinding.close()
    }
    // A name that exists in no DNS reaches our receiver only because the socket uses our lookup.
    answerOk()
    const start = receiver.received.length
    const pinned = nodeWebhookSender({ allowPrivate: true, resolve: async () => [{ address: '127.0.0.1', family: 4 }] })
    try {
      const res = await pinned({ url: `http://receiver.invalid:${receiver.port}/pinned`, headers: {}, body: '{}', timeoutMs: 2000 })
      expect(res.status).toBe(200)
    } finally {
      await pinned.close()
    }
    expect(receiver.received.slice(start).map((r) => r.path)).toEqual(['/pinned'])
  })

  it('a response that streams forever is read only to the read bound: the drain returns, the delivery recorded', async () => {
    const sub = await subscribe(alice, '/stream')
    receiver.answer((_req, res) => {
      res.writeHead(200)
      const timer = setInterval(() => res.write('x'.repeat(1024)), 5)
      res.on('close', () => clearInterval(timer))
    })
    await postTodo(alice, 'endless answer')
    // A worker that read on would never return (the stream has no end): returning is the proof.
    expect(await world.drainWebhooks(FAST)).toMatchObject({ delivered: 1 })
    await unsubscribe(alice, sub.id)
  })
})
