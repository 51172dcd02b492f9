// Webhook fairness (issue 25, item 3): one member's dead receivers must not delay another
// member's deliveries. Real receivers on loopback addresses (127.0.0.x, so that each is its own
// host), the real worker and the Node sender, WEBHOOK_ALLOW_PRIVATE as tests need it.
import { randomUUID } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest'
import { createSql } from '../functions/lib/sql.ts'
import { type DrainOptions, drainWebhooks } from '../functions/lib/webhooks.ts'
import { applyPlatformShim, listMigrations } from '../local/migrate.ts'
import { LOCAL_WEBHOOK_DRAIN, runWebhookWorker } from '../local/webhook-runner.ts'
import { nodeWebhookSender } from '../local/webhook-sender.ts'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'
import { databaseUrl } from './support/net.ts'
import { startReceiver } from './support/receiver.ts'

type Receiver = Awaited<ReturnType<typeof startReceiver>>

let world: TestWorld
const cleanups: (() => Promise<void>)[] = []

beforeAll(async () => {
  world = await startWorld({ webhookAllowPrivate: true })
})
// Each test starts with no subscription, no breaker and nothing in flight.
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
  await world.sql`delete from app.webhook_subscriptions`
  await world.sql`delete from app.webhook_breakers`
  await world.sql`delete from app.webhook_leases`
})
afterAll(() => world.close())

let users = 0
async function member(name: string): Promise<CreatedUser> {
  return world.createUser(`${name}${++users}`)
}

async function receiverOn(host: string, handler?: Parameters<typeof startReceiver>[0]): Promise<Receiver> {
  const receiver = await startReceiver(handler, { host })
  cleanups.push(() => receiver.close())
  return receiver
}

/** A receiver that accepts the connection, reads the request and never answers. */
const hang = () => {}

async function subscribe(user: CreatedUser, url: string): Promise<{ id: string }> {
  const res = await world.post('/v1/webhooks/subscriptions', { auth: user.api_key, json: { url, event_type: 'new_todo' } })
  expect(res.status, res.text).toBe(201)
  return res.body
}

async function postTodo(user: CreatedUser, body: string): Promise<{ id: string }> {
  const res = await world.post('/v1/todos', { auth: user.api_key, json: { body } })
  expect(res.status, res.text).toBe(201)
  return res.body
}

/**
 * The webhook worker as `npm start` runs it (local/start.ts): a pool of two connections of its
 * own, the Node sender, the drain options start.ts gives it, a drain every second and one right
 * after each todo (the app calls kick(); here the test does, right after the POST's answer).
 */
function npmStartWorker() {
  const sql = createSql(world.databaseUrl, { max: 2 })
  const sender = nodeWebhookSender({ allowPrivate: true })
  const worker = runWebhookWorker(sql, sender, { drain: LOCAL_WEBHOOK_DRAIN })
  let stopped = false
  const stop = async () => {
    if (stopped) return
    stopped = true
    await worker.stop()
    await sender.close()
    await sql.end({ timeout: 5 })
  }
  cleanups.push(stop)
  return { kick: worker.kick, stop }
}

/**
 * The issue's attack, timed against the same member's delivery on an idle worker: each attacker
 * (one member per entry of `hostsOf`) has 20 subscriptions to receivers that never answer (on
 * the hosts given for them) and posts 3 todos; `bob`'s delivery to a healthy receiver must not
 * wait for any of them. What proves it without a clock: when bob's delivery arrives, none of the
 * attack's attempts has ended yet (each waits 15 s for its timeout), so it did not wait for a
 * worker slot one of them held. With `answerFirst`, the attackers' receivers first answer one
 * todo of each attacker at once (so the worker has seen every one of them answer) and hang from
 * then on.
 */
async function deadReceiversAttack(hostsOf: string[][], options: { answerFirst?: boolean } = {}) {
  let answering = options.answerFirst ?? false
  const answerWhileWarm: Parameters<typeof startReceiver>[0] = (_req, res) => {
    if (answering) res.end('ok')
  }
  const deadOf = await Promise.all(hostsOf.map((hosts) => Promise.all(hosts.map((host) => receiverOn(host, answerWhileWarm)))))
  const dead = deadOf.flat()
  const healthy = await receiverOn('127.0.0.3')
  const attackers: CreatedUser[] = []
  for (const receivers of deadOf) {
    const attacker = await member('mallory')
    for (let i = 0; i < 20; i++) await subscribe(attacker, `${receivers[i % receivers.length]!.url}/hook/${i}`)
    attackers.push(attacker)
  }
  const bob = await member('bob')
  await subscribe(bob, `${healthy.url}/bob`)
  const worker = npmStartWorker()

  // Idle: bob's delivery alone.
  let posted = Date.now()
  await postTodo(bob, 'before the attack')
  worker.kick()
  const idle = (await healthy.waitFor(1, 30_000))[0]!.at - posted

  if (answering) {
    for (const attacker of attackers) {
      await postTodo(attacker, 'warm-up')
      worker.kick()
    }
    await waitUntil('every warm-up delivery is answered and recorded', async () => {
      const [row] = await world.sql<{ n: number }[]>`
        select count(*)::int as n from app.webhook_deliveries d join app.webhook_subscriptions s on s.id = d.subscription_id
         where s.user_id in (select app.from_public_id('user', u) from unnest(${attackers.map((a) => a.id)}::text[]) u)
           and d.status = 'delivered'`
      return row!.n === attackers.length * 20
    }, 60_000)
    answering = false
  }

  // The attack: 3 todos each, 60 deliveries an attacker to receivers that hang.
  const since = (await world.sql<{ since: Date }[]>`select now() as since`)[0]!.since
  const before = dead.reduce((n, r) => n + r.received.length, 0)
  for (let i = 0; i < 3; i++) {
    for (const attacker of attackers) {
      await postTodo(attacker, `attack ${i}`)
      worker.kick()
    }
  }
  const deadRequests = () => dead.reduce((n, r) => n + r.received.length, 0) - before
  await waitUntil('a delivery of the attack reached a dead receiver', () => deadRequests() > 0)

  posted = Date.now()
  await postTodo(bob, 'during the attack')
  worker.kick()
  const arrived = (await healthy.waitFor(2, 150_000))[1]!
  const [{ ended }] = await world.sql<[{ ended: number }]>`
    select count(*)::int as ended from app.webhook_deliveries d join app.webhook_subscriptions s on s.id = d.subscription_id
     where s.user_id in (select app.from_public_id('user', u) from unnest(${attackers.map((a) => a.id)}::text[]) u)
       and d.created_at >= ${since} and d.attempts > 0`
  const latency = arrived.at - posted
  console.log(`bob's delivery: ${idle} ms idle, ${latency} ms during the attack (${attackers.length} attacker(s), ${dead.length} dead host(s), ${deadRequests()} requests hanging)`)
  // Nothing of the attack had ended: bob's delivery took no slot a dead receiver had to free (each
  // holds its slot for the 15 s timeout). That is the proof; the latency is printed, not bounded
  // (issue 31: "idle + 5 s" measured the machine's load as much as the worker).
  expect(ended).toBe(0)
  return { dead, worker }
}

describe('dead receivers do not starve other members (the issue\'s attack)', () => {
  it('20 subscriptions of one member to one receiver that never answers: another member\'s delivery arrives before any of the attack\'s requests timed out', async () => {
    const { dead, worker } = await deadReceiversAttack([['127.0.0.2']])
    for (const r of dead) await r.close()
    await worker.stop()
  }, 240_000)

  it('20 subscriptions to 20 receivers on 20 hosts that never answer: the same', async () => {
    const hosts = Array.from({ length: 20 }, (_, i) => `127.0.0.${10 + i}`)
    const { dead, worker } = await deadReceiversAttack([hosts])
    for (const r of dead) await r.close()
    await worker.stop()
  }, 240_000)

  it('four accounts with silent receivers do not hold every slot of npm start\'s drain: another member\'s delivery still arrives before any of the attack\'s requests timed out', async () => {
    const { dead, worker } = await deadReceiversAttack([['127.0.0.50'], ['127.0.0.51'], ['127.0.0.52'], ['127.0.0.53']])
    for (const r of dead) await r.close()
    await worker.stop()
  }, 240_000)

  it('four accounts whose receivers answered and then hang (the worker trusted them) hold no slot for more than seconds: another member\'s delivery still arrives before any of the attack\'s requests timed out', async () => {
    const { dead, worker } = await deadReceiversAttack([['127.0.0.54'], ['127.0.0.55'], ['127.0.0.56'], ['127.0.0.57']], { answerFirst: true })
    for (const r of dead) await r.close()
    await worker.stop()
  }, 240_000)
})

describe('round robin', () => {
  it('a backlog on one subscription does not go first: the claim takes the subscriptions in turn', async () => {
    const receiver = await receiverOn('127.0.0.4')
    const alice = await member('alice')
    const bob = await member('bob')
    await subscribe(alice, `${receiver.url}/alice`)
    await subscribe(bob, `${receiver.url}/bob`)
    for (let i = 0; i < 12; i++) await postTodo(alice, `backlog ${i}`)
    await postTodo(bob, 'one of mine')
    const sender = nodeWebhookSender({ allowPrivate: true })
    try {
      // One delivery at a time, so the order they arrive in is the order they were claimed in.
      expect(await drainWebhooks(world.sql, sender, { batch: 1, lanes: 1 })).toMatchObject({ delivered: 13 })
    } finally {
      await sender.close()
    }
    const paths = receiver.received.map((r) => r.path)
    expect(paths.indexOf('/bob')).toBeLessThanOrEqual(1)
    expect(paths.filter((p) => p === '/alice')).toHaveLength(12)
  })
})

/** Receivers that hold each request until released, counting how many they hold at once. */
async function holdingReceivers(hosts: string[]) {
  let held = 0
  let most = 0
  const waiting: (() => void)[] = []
  let releasing = false
  const receivers = await Promise.all(hosts.map((host) => receiverOn(host, (_req, res) => {
    held++
    most = Math.max(most, held)
    const answer = () => {
      held--
      res.end('ok')
    }
    if (releasing) setTimeout(answer, 20)
    else waiting.push(answer)
  })))
  return {
    receivers,
    held: () => held,
    most: () => most,
    received: () => receivers.reduce((n, r) => n + r.received.length, 0),
    /** Answers what is held, and from now on answers every request after 20 ms. */
    release() {
      releasing = true
      for (const answer of waiting.splice(0)) answer()
    },
  }
}

/** Two workers (their own connections and senders, as two processes or edge invocations) draining at once. */
function twoWorkers(options: DrainOptions) {
  const workers = [0, 1].map(() => ({ sql: createSql(world.databaseUrl, { max: 3 }), send: nodeWebhookSender({ allowPrivate: true }) }))
  cleanups.push(async () => {
    for (const w of workers) {
      await w.send.close()
      await w.sql.end({ timeout: 5 })
    }
  })
  return Promise.all(workers.map((w) => drainWebhooks(w.sql, w.send, options)))
}

async function waitUntil(what: string, condition: () => boolean | Promise<boolean>, timeoutMs = 30_000) {
  for (const deadline = Date.now() + timeoutMs; !(await condition());) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

describe('the per-host cap', () => {
  it('two workers never have more than the cap in flight to one host for one member, and another member\'s deliveries to the host have a cap of their own; other hosts are served meanwhile', async () => {
    const slow = await holdingReceivers(['127.0.0.5'])
    const quick = await receiverOn('127.0.0.6')
    const alice = await member('alice')
    const carol = await member('carol')
    const bob = await member('bob')
    for (let i = 0; i < 3; i++) await subscribe(alice, `${slow.receivers[0]!.url}/alice/${i}`)
    for (let i = 0; i < 3; i++) await subscribe(carol, `${slow.receivers[0]!.url}/carol/${i}`)
    await subscribe(bob, `${quick.url}/bob`)
    await postTodo(alice, 'to the slow host')
    await postTodo(carol, 'to the slow host too')
    await postTodo(bob, 'to the quick host')
    // 20 slots a worker: a member's share (5) is more than the host cap (2).
    const draining = twoWorkers({ batch: 5, lanes: 4, hostCap: 2 })
    await quick.waitFor(1, 30_000)
    await waitUntil('the slow host holds two requests of each member', () => slow.held() === 4)
    // Both workers have claimed since (bob's delivery came after): the rest wait for a slot.
    await new Promise((r) => setTimeout(r, 300))
    expect(slow.held()).toBe(4)
    expect(slow.receivers[0]!.received.filter((r) => r.path.startsWith('/alice'))).toHaveLength(2)
    slow.release()
    const results = await draining
    expect(results[0]!.delivered + results[1]!.delivered).toBe(7)
    expect(slow.received()).toBe(6)
    expect(slow.most()).toBe(4)
  }, 60_000)
})

describe('the per-member cap', () => {
  it('one member\'s deliveries to many hosts hold at most a quarter of the drain\'s slots, across two workers; another member is served meanwhile', async () => {
    const slow = await holdingReceivers(Array.from({ length: 6 }, (_, i) => `127.0.0.${40 + i}`))
    const quick = await receiverOn('127.0.0.6')
    const alice = await member('alice')
    const bob = await member('bob')
    for (const [i, r] of slow.receivers.entries()) await subscribe(alice, `${r.url}/alice/${i}`)
    await subscribe(bob, `${quick.url}/bob`)
    await postTodo(alice, 'to six slow hosts')
    await postTodo(bob, 'to the quick host')
    // 12 slots a worker: a member's share is 3.
    const draining = twoWorkers({ batch: 6, lanes: 2 })
    await quick.waitFor(1, 30_000)
    await waitUntil('three requests are held', () => slow.held() === 3)
    await new Promise((r) => setTimeout(r, 300))
    expect(slow.held()).toBe(3)
    slow.release()
    const results = await draining
    expect(results[0]!.delivered + results[1]!.delivered).toBe(7)
    expect(slow.most()).toBe(3)
  }, 60_000)
})

describe('the circuit breaker of a member\'s receivers on a host', () => {
  // Short numbers, the same logic: 3 attempts without an answer in a row open the host for 2 s
  // (long enough for the drains that must find it open, on a busy machine), and a failed probe
  // doubles that. One delivery in flight at a time (memberCap 1), so the attempts happen in a
  // known order.
  const BREAKER: DrainOptions = {
    timeoutMs: 300, breakerAfter: 3, breakerCooldownMs: 2_000, breakerMaxCooldownMs: 10_000, memberCap: 1,
    scheduleMs: [100], jitter: 0, giveUpAfterMs: 600_000,
  }
  const hostRow = async (host: string) =>
    (await world.sql<{ failures: number; open: boolean; cooldown_ms: number | null }[]>`
      select failures, open_until > now() as open, (extract(epoch from cooldown) * 1000)::int as cooldown_ms
        from app.webhook_breakers where host = ${host}`)[0] ?? null
  const deliveryRows = async (user: CreatedUser) =>
    world.sql<{ webhook_id: string; status: string; attempts: number }[]>`
      select app.webhook_id(d.subscription_id, d.todo_id) as webhook_id, d.status, d.attempts
        from app.webhook_deliveries d join app.webhook_subscriptions s on s.id = d.subscription_id
       where s.user_id = app.from_public_id('user', ${user.id}) order by d.created_at, d.todo_id`
  const sender = () => {
    const send = nodeWebhookSender({ allowPrivate: true })
    cleanups.push(() => send.close())
    return send
  }
  const waitForCooldown = (host: string) =>
    waitUntil(`the cool-down of ${host} ends`, async () => (await hostRow(host))?.open === false)

  it('opens after 3 timeouts in a row, postpones the rest unattempted, lets one probe through (across two workers), re-opens for twice as long, and closes on an answer: nothing is lost, nothing sent twice', async () => {
    let answering = false
    const dead = await receiverOn('127.0.0.7', (_req, res) => {
      if (answering) res.end('ok')
    })
    const alice = await member('alice')
    await subscribe(alice, `${dead.url}/hook`)
    for (let i = 0; i < 6; i++) await postTodo(alice, `while it is down ${i}`)
    const send = sender()

    expect(await drainWebhooks(world.sql, send, BREAKER)).toEqual({ delivered: 0, retrying: 3, failed: 0 })
    expect(dead.received).toHaveLength(3)
    expect(await hostRow(dead.host)).toEqual({ failures: 3, open: true, cooldown_ms: 2_000 })
    // Open: nothing is attempted, and the postponed deliveries count no attempt.
    expect(await drainWebhooks(world.sql, send, BREAKER)).toEqual({ delivered: 0, retrying: 0, failed: 0 })
    expect(dead.received).toHaveLength(3)
    expect((await deliveryRows(alice)).map((d) => d.attempts)).toEqual([1, 1, 1, 0, 0, 0])

    // Half-open: two workers drain at once, and one delivery goes, as the probe. It fails.
    await waitForCooldown(dead.host)
    const results = await twoWorkers(BREAKER)
    expect(results.reduce((n, r) => n + r.retrying, 0)).toBe(1)
    expect(dead.received).toHaveLength(4)
    expect(await hostRow(dead.host)).toEqual({ failures: 4, open: true, cooldown_ms: 4_000 })
    // The probe was the delivery due first (the oldest never tried); the others counted nothing.
    expect((await deliveryRows(alice)).map((d) => d.attempts)).toEqual([1, 1, 1, 1, 0, 0])

    // The host is back: the next probe is answered, the breaker closes, and everything goes.
    answering = true
    await waitForCooldown(dead.host)
    expect(await drainWebhooks(world.sql, send, BREAKER)).toEqual({ delivered: 6, retrying: 0, failed: 0 })
    // Closed, and known to answer from now on.
    expect(await hostRow(dead.host)).toEqual({ failures: 0, open: null, cooldown_ms: null })
    const rows = await deliveryRows(alice)
    expect(rows.map((d) => d.status)).toEqual(Array(6).fill('delivered'))
    // One attempt each without an answer (the four that were tried while it was down), and one
    // that was answered: the postponed ones were attempted only when they were delivered.
    expect(rows.map((d) => d.attempts)).toEqual([2, 2, 2, 2, 1, 1])
    const answered = dead.received.slice(4).map((r) => r.headers['webhook-id'])
    expect(answered.sort()).toEqual(rows.map((d) => d.webhook_id).sort())
  }, 60_000)
})

describe('a host is its name and port', () => {
  it('another member\'s subscriptions to a silent port of your receiver\'s machine open that port\'s breaker, not yours, and take none of your slots', async () => {
    const options: DrainOptions = { timeoutMs: 300, breakerAfter: 2, breakerCooldownMs: 60_000, hostCap: 2, scheduleMs: [60_000], jitter: 0, giveUpAfterMs: 600_000 }
    const victimReceiver = await receiverOn('127.0.0.13')
    const silent = await receiverOn('127.0.0.13', hang)
    const mallory = await member('mallory')
    const bob = await member('bob')
    for (let i = 0; i < 4; i++) await subscribe(mallory, `${silent.url}/hook/${i}`)
    await subscribe(bob, `${victimReceiver.url}/bob`)
    await postTodo(mallory, 'to the silent port')
    const send = nodeWebhookSender({ allowPrivate: true })
    cleanups.push(() => send.close())
    // Two at a time time out; the second failure in a row opens it (a third may be under way).
    expect((await drainWebhooks(world.sql, send, options)).retrying).toBeGreaterThanOrEqual(2)
    const open = await world.sql`select host from app.webhook_breakers where open_until > now() and host in ${world.sql([silent.host, victimReceiver.host])}`
    expect(open).toEqual([{ host: silent.host }])
    // Bob's receiver on the same machine: nothing held back, every slot of its own.
    await postTodo(bob, 'to my receiver')
    expect(await drainWebhooks(world.sql, send, options)).toEqual({ delivered: 1, retrying: 0, failed: 0 })
    expect(victimReceiver.received).toHaveLength(1)
  }, 30_000)
})

describe('a host that never answers again', () => {
  it('has its subscriptions turned off after the give-up window, postponed deliveries failed unattempted, so its backlog stops growing', async () => {
    const options: DrainOptions = {
      timeoutMs: 200, breakerAfter: 2, breakerCooldownMs: 300, breakerMaxCooldownMs: 300, memberCap: 1, scheduleMs: [100], jitter: 0, giveUpAfterMs: 1_500,
    }
    const dead = await receiverOn('127.0.0.12', hang)
    const alice = await member('alice')
    const sub = await subscribe(alice, `${dead.url}/hook`)
    for (let i = 0; i < 10; i++) await postTodo(alice, `into the void ${i}`)
    const send = nodeWebhookSender({ allowPrivate: true })
    cleanups.push(() => send.close())
    const state = async () => (await world.sql<{ active: boolean; disabled_reason: string | null }[]>`
      select active, disabled_reason from app.webhook_subscriptions where id = app.from_public_id('hook', ${sub.id})`)[0]!
    await waitUntil('the subscription is turned off', async () => {
      await drainWebhooks(world.sql, send, options)
      return !(await state()).active
    })
    expect(await state()).toEqual({ active: false, disabled_reason: 'its host gave no answer for about three days' })
    const rows = await world.sql<{ status: string; attempts: number }[]>`
      select status, attempts from app.webhook_deliveries where subscription_id = app.from_public_id('hook', ${sub.id})`
    expect(rows.map((r) => r.status)).toEqual(Array(10).fill('failed'))
    // Most were never attempted: the breaker kept them back, and the give-up did not wait for them.
    expect(rows.filter((r) => r.attempts === 0).length).toBeGreaterThan(0)
    expect(dead.received.length).toBeLessThan(10)
    expect(await world.sql`select host from app.webhook_breakers where host = ${dead.host}`).toEqual([])
    // Its owner sees it off in the API.
    const [listed] = (await world.get('/v1/webhooks/subscriptions', { auth: alice.api_key })).body
    expect(listed.active).toBe(false)
  }, 60_000)
})

describe('the circuit breaker counts only failures in a row', () => {
  const BREAKER: DrainOptions = {
    timeoutMs: 300, breakerAfter: 3, breakerCooldownMs: 60_000, memberCap: 1, scheduleMs: [60_000], jitter: 0, giveUpAfterMs: 600_000,
  }
  it('an answer in between (even a 500) starts the count again; a refused connection counts like a timeout', async () => {
    // Timeouts for attempts 1, 2, 4, 5 and 6; attempt 3 is answered 500.
    const flaky = await receiverOn('127.0.0.8', (_req, res, index) => {
      if (index === 2) {
        res.statusCode = 500
        res.end()
      }
    })
    const alice = await member('alice')
    await subscribe(alice, `${flaky.url}/hook`)
    for (let i = 0; i < 8; i++) await postTodo(alice, `flaky ${i}`)
    const send = nodeWebhookSender({ allowPrivate: true })
    cleanups.push(() => send.close())
    // Without the 500 resetting it, the host would have opened after the 4th attempt.
    expect(await drainWebhooks(world.sql, send, BREAKER)).toEqual({ delivered: 0, retrying: 6, failed: 0 })
    expect(flaky.received).toHaveLength(6)
    const [row] = await world.sql`select failures, open_until > now() as open from app.webhook_breakers where host = ${flaky.host}`
    expect(row).toEqual({ failures: 3, open: true })

    // Nobody listens on 127.0.0.9: connections are refused at once, and three open it too.
    const bob = await member('bob')
    await subscribe(bob, `http://127.0.0.9:${flaky.port}/nobody`)
    for (let i = 0; i < 5; i++) await postTodo(bob, `refused ${i}`)
    expect(await drainWebhooks(world.sql, send, BREAKER)).toEqual({ delivered: 0, retrying: 3, failed: 0 })
    const [refused] = await world.sql`select failures, open_until > now() as open from app.webhook_breakers where host = ${`127.0.0.9:${flaky.port}`}`
    expect(refused).toEqual({ failures: 3, open: true })
  }, 30_000)
})

describe('one member cannot shut another member out of a host they share', () => {
  // A webhook service many members use (hooks.slack.com, script.google.com, hooks.zapier.com):
  // one host, one port, a path of each member's own. (From the review of issue 25.)
  async function sharedHost(handleMallory: (res: import('node:http').ServerResponse) => void) {
    const receiver = await receiverOn('127.0.0.21', (req, res) => {
      if (req.path.startsWith('/mallory')) handleMallory(res)
      else res.end('ok')
    })
    const mallory = await member('mallory')
    const bob = await member('bob')
    for (let i = 0; i < 4; i++) await subscribe(mallory, `${receiver.url}/mallory/${i}`)
    await subscribe(bob, `${receiver.url}/bob`)
    const send = nodeWebhookSender({ allowPrivate: true })
    cleanups.push(() => send.close())
    return { receiver, mallory, bob, send }
  }

  it('timeouts of one member\'s receiver paths do not open the breaker for another member\'s path on the same host', async () => {
    const options: DrainOptions = { timeoutMs: 300, breakerAfter: 2, breakerCooldownMs: 60_000, scheduleMs: [60_000], jitter: 0, giveUpAfterMs: 600_000 }
    const { receiver, mallory, bob, send } = await sharedHost(() => {})
    await postTodo(mallory, 'to my silent paths')
    expect((await drainWebhooks(world.sql, send, options)).retrying).toBeGreaterThanOrEqual(2)
    // Bob's receiver answers every request it gets; Mallory's failures must not hold it back.
    await postTodo(bob, 'to my healthy path')
    expect(await drainWebhooks(world.sql, send, options)).toMatchObject({ delivered: 1 })
    expect(receiver.received.filter((r) => r.path === '/bob')).toHaveLength(1)
  }, 30_000)

  it('one member\'s hanging requests do not hold every slot of a host another member uses', async () => {
    // hostCap 2 stands for production's 8 (two members' caps of 5 filled it).
    const held: import('node:http').ServerResponse[] = []
    const { receiver, mallory, bob, send } = await sharedHost((res) => held.push(res))
    cleanups.push(async () => {
      for (const res of held) if (!res.writableEnded) res.end('late')
    })
    await postTodo(mallory, 'to my slow paths')
    await postTodo(bob, 'to my healthy path')
    const draining = drainWebhooks(world.sql, send, { hostCap: 2, timeoutMs: 60_000, scheduleMs: [60_000], jitter: 0 })
    try {
      await waitUntil('Mallory\'s requests held', () => held.length >= 1)
      const bobs = await waitUntil('Bob\'s delivery', () => receiver.received.some((r) => r.path === '/bob'), 10_000).then(() => 1, () => 0)
      expect(bobs).toBe(1)
    } finally {
      const answerHeld = () => {
        for (const res of held) if (!res.writableEnded) res.end('ok')
      }
      answerHeld()
      await waitUntil('every request of Mallory\'s held', () => held.length === 4).catch(() => {})
      answerHeld()
      await draining
    }
  }, 90_000)
})

describe('what the worker knows of a member\'s receivers on a host', () => {
  it('goes with the member\'s last subscription to the host (deleted, or its url moved to another host); another member\'s stays', async () => {
    const alice = await member('alice')
    const bob = await member('bob')
    const first = await subscribe(alice, 'http://127.0.0.61:9/first')
    const second = await subscribe(alice, 'http://127.0.0.61:9/second')
    await subscribe(bob, 'http://127.0.0.61:9/bob')
    await world.sql`
      insert into app.webhook_breakers (user_id, host, failures, failing_since)
      select app.from_public_id('user', u), '127.0.0.61:9', 3, now() from unnest(${[alice.id, bob.id]}::text[]) u`
    const known = async () => (await world.sql<{ id: string }[]>`select app.to_public_id('user', user_id) as id from app.webhook_breakers`).map((r) => r.id).sort()
    // One of alice's two subscriptions there goes: she still has one on the host.
    expect((await world.delete(`/v1/webhooks/subscriptions/${first.id}`, { auth: alice.api_key })).status).toBe(204)
    expect(await known()).toEqual([alice.id, bob.id].sort())
    // A change of path on the same host keeps it; the last one moving to another host takes it along.
    expect((await world.patch(`/v1/webhooks/subscriptions/${second.id}`, { auth: alice.api_key, json: { url: 'http://127.0.0.61:9/other' } })).status).toBe(200)
    expect(await known()).toEqual([alice.id, bob.id].sort())
    expect((await world.patch(`/v1/webhooks/subscriptions/${second.id}`, { auth: alice.api_key, json: { url: 'http://127.0.0.62:9/moved' } })).status).toBe(200)
    expect(await known()).toEqual([bob.id])
    // A request to the old host that was in flight meanwhile, recorded after: nothing comes back.
    for (const status of [200, null]) {
      const todo = randomUUID()
      await world.sql`
        insert into app.webhook_leases (subscription_id, todo_id, host, user_id, until)
        values (app.from_public_id('hook', ${second.id}), ${todo}, '127.0.0.61:9', app.from_public_id('user', ${alice.id}), now() + interval '1 minute')`
      await world.sql`select app.record_webhook_attempt(app.from_public_id('hook', ${second.id}), ${todo}::uuid, ${status}::integer, 'x', now(), null)`
      expect(await known()).toEqual([bob.id])
    }
  })
})

describe('a receiver slower than a few seconds', () => {
  it('leaves its worker slot to wait apart; past the waiting room, the oldest waiting request is cut short and recorded as no answer', async () => {
    // 2 slots; a request unanswered after 300 ms waits apart, 2 at most; six members, each with
    // one subscription to a receiver that answers nothing until released.
    let open = 0
    let most = 0
    const held: import('node:http').ServerResponse[] = []
    const receiver = await receiverOn('127.0.0.22', (_req, res) => {
      open++
      most = Math.max(most, open)
      res.on('close', () => open--)
      held.push(res)
    })
    const members = await Promise.all(Array.from({ length: 6 }, () => member('slow')))
    for (const [i, m] of members.entries()) await subscribe(m, `${receiver.url}/m/${i}`)
    for (const m of members) await postTodo(m, 'to a receiver that takes its time')
    const send = nodeWebhookSender({ allowPrivate: true })
    cleanups.push(() => send.close())
    const options = { batch: 1, lanes: 2, slowAfterMs: 300, waitingSlots: 2, timeoutMs: 60_000, scheduleMs: [60_000], jitter: 0 } as DrainOptions
    const draining = drainWebhooks(world.sql, send, options)
    // Every member's delivery is sent, though none is answered: none waits for another's 60 s.
    await waitUntil('every delivery was sent', () => receiver.received.length === 6, 30_000)
    for (const res of held) if (!res.writableEnded) res.end('ok')
    const result = await draining
    // Never more open at once than the slots and the waiting room.
    expect(most).toBeLessThanOrEqual(4)
    expect(result.delivered + result.retrying).toBe(6)
    const cut = await world.sql<{ last_error: string }[]>`
      select d.last_error from app.webhook_deliveries d join app.webhook_subscriptions s on s.id = d.subscription_id
       where s.url like ${`${receiver.url}/m/%`} and d.status = 'pending'`
    expect(cut.length).toBe(result.retrying)
    expect(cut.length).toBeGreaterThanOrEqual(2)
    for (const row of cut) expect(row.last_error).toMatch(/cut short/)
  }, 60_000)
})

describe('changing a subscription\'s url', () => {
  it('is rate-limited (429) with the creations it stands for: webhook_subscription_create, 30 per 10 minutes; other changes are not counted', async () => {
    const alice = await member('alice')
    const sub = await subscribe(alice, 'http://127.0.0.60:9/hook/0')
    const patch = (json: Record<string, unknown>) => world.patch(`/v1/webhooks/subscriptions/${sub.id}`, { auth: alice.api_key, json })
    // The creation counted one; 29 changes of the url fit in the ten minutes.
    for (let i = 1; i < 30; i++) {
      const res = await patch({ url: `http://fresh-${i}.example/hook` })
      expect(res.status, res.text).toBe(200)
    }
    const refused = await patch({ url: 'http://fresh-30.example/hook' })
    expect(refused.status, refused.text).toBe(429)
    expect(refused.headers.get('retry-after')).toMatch(/^[1-9]\d*$/)
    expect(refused.body.error).toMatch(/^Too many requests: at most 30 per 10 minute\(s\) \(POST \/v1\/webhooks\/subscriptions, or a PATCH that changes a subscription's url\)/)
    // The url stayed what it was; changing anything else, or "changing" it to what it is, still works.
    const [listed] = (await world.get('/v1/webhooks/subscriptions', { auth: alice.api_key })).body
    expect(listed.url).toBe('http://fresh-29.example/hook')
    expect((await patch({ url: 'http://fresh-29.example/hook', active: false })).status).toBe(200)
    expect((await patch({ active: true, project_ids: [] })).status).toBe(200)
    // And creating one is refused by the same count.
    const created = await world.post('/v1/webhooks/subscriptions', { auth: alice.api_key, json: { url: 'http://fresh-31.example/hook', event_type: 'new_todo' } })
    expect(created.status).toBe(429)
  })
})

describe('the claim at scale', () => {
  /**
   * One claim, rolled back after: which subscriptions it leased a delivery of, and what it cost
   * the outbox: the difference of pg_stat_xact_user_tables across the claim, inside its
   * transaction. Not the counts alone: they are the backend's pending statistics, which hold
   * what earlier transactions on the same connection did until the backend flushes them (at
   * most once a second, and an idle backend up to 10 s later), so a cascade from the last
   * test's cleanup (delete from app.webhook_subscriptions: a sequential scan of the then small
   * outbox) was counted as the claim's, now and then (a clean-clone CI). The connection reads
   * the outbox whole first, so that a measure that counted it would fail every time.
   */
  async function claimOnce(memberCap: number) {
    const connection = await world.sql.reserve()
    const outboxCounters = async () => {
      const [row] = await connection<{ seq_scan: number; idx_tup_fetch: number }[]>`
        select seq_scan::int, idx_tup_fetch::int from pg_stat_xact_user_tables where relid = 'app.webhook_deliveries'::regclass`
      return row!
    }
    try {
      await connection`select count(*) from app.webhook_deliveries`
      await connection`begin`
      const before = await outboxCounters()
      await connection`select from app.take_webhook_deliveries(10, interval '45 seconds', 20, interval '2 seconds', 8, ${memberCap})`
      const after = await outboxCounters()
      const leased = await connection<{ id: string }[]>`
        select app.to_public_id('hook', l.subscription_id) as id from app.webhook_leases l join app.webhook_subscriptions s on s.id = l.subscription_id order by 1`
      return {
        claimed: leased.map((r) => r.id),
        seq_scan: after.seq_scan - before.seq_scan,
        idx_tup_fetch: after.idx_tup_fetch - before.idx_tup_fetch,
      }
    } finally {
      await connection`rollback`
      connection.release()
    }
  }

  it('200,000 pending deliveries of one dead receiver cost each claim a few index probes, whether its breaker is open, it is at its cap, the unproven half is in use, or it is due', async () => {
    const dead = await member('mallory')
    const bob = await member('bob')
    const deadSub = await subscribe(dead, 'http://127.0.0.10:9/dead')
    const receiver = await receiverOn('127.0.0.11')
    await subscribe(bob, `${receiver.url}/bob`)
    await postTodo(bob, 'one delivery among many')
    // The backlog, written as the outbox would have (without the todos: the claim never reads
    // them for deliveries it does not take), all due, older than bob's.
    await world.sql.begin(async (tx) => {
      await tx`set local session_replication_role = replica`
      // Setup, not what is measured: no request's statement timeout on a busy machine.
      await tx`set local statement_timeout = 0`
      await tx`
        insert into app.webhook_deliveries (subscription_id, todo_id, next_attempt_at, created_at)
        select app.from_public_id('hook', ${deadSub.id}), gen_random_uuid(), now() - interval '1 day' + g * interval '1 ms', now() - interval '1 day'
          from generate_series(1, 200000) g`
      await tx`insert into app.webhook_queue (subscription_id, turn_at) values (app.from_public_id('hook', ${deadSub.id}), now() - interval '1 day')`
    })
    // Every row in the statistics (a target of 10,000 samples 3,000,000 rows): the default samples
    // 30,000 of the 200,001, so whether bob's one delivery was seen changed a plan of the claim
    // from run to run (a sequential scan once in a clean-clone CI).
    await world.sql.begin(async (tx) => {
      await tx`set local default_statistics_target = 10000`
      await tx`analyze app.webhook_deliveries`
    })
    const bobsSub = (await world.sql`select app.to_public_id('hook', id) as id from app.webhook_subscriptions where url like ${`${receiver.url}%`}`)[0]!.id as string

    // Open: the dead subscription is looked at once and put off until the cool-down ends.
    await world.sql`
      insert into app.webhook_breakers (user_id, host, failures, failing_since, open_until, cooldown)
      values (app.from_public_id('user', ${dead.id}), '127.0.0.10:9', 5, now(), now() + interval '1 hour', interval '1 hour')`
    const open = await claimOnce(5)
    expect(open.claimed).toEqual([bobsSub])
    expect(open.seq_scan).toBe(0)
    expect(open.idx_tup_fetch).toBeLessThan(20)
    await world.sql`delete from app.webhook_breakers`

    // Closed but at its cap (8 of its member's deliveries in flight to it): the same.
    await world.sql`
      insert into app.webhook_leases (subscription_id, todo_id, host, user_id, until)
      select gen_random_uuid(), gen_random_uuid(), '127.0.0.10:9', app.from_public_id('user', ${dead.id}), now() + interval '1 minute'
        from generate_series(1, 8) g`
    const capped = await claimOnce(100)
    expect(capped.claimed).toEqual([bobsSub])
    expect(capped.seq_scan).toBe(0)
    expect(capped.idx_tup_fetch).toBeLessThan(20)
    await world.sql`delete from app.webhook_leases`

    // The unproven half in use (10 requests of other members to hosts not known to answer, sent
    // just now); bob's receiver has answered before: the dead one waits, bob's goes.
    const others = await Promise.all(Array.from({ length: 2 }, () => member('carol')))
    await world.sql`
      insert into app.webhook_leases (subscription_id, todo_id, host, user_id, unproven, until)
      select gen_random_uuid(), gen_random_uuid(), 'fresh-' || g || '.example', app.from_public_id('user', (${others.map((o) => o.id)}::text[])[1 + g % 2]), true, now() + interval '1 minute'
        from generate_series(1, 10) g`
    await world.sql`insert into app.webhook_breakers (user_id, host) values (app.from_public_id('user', ${bob.id}), ${receiver.host})`
    const unproven = await claimOnce(100)
    expect(unproven.claimed).toEqual([bobsSub])
    expect(unproven.seq_scan).toBe(0)
    expect(unproven.idx_tup_fetch).toBeLessThan(20)
    await world.sql`delete from app.webhook_leases`

    // Due and free (one in flight per member here): one of its deliveries and bob's, not ten of its own.
    const due = await claimOnce(1)
    expect(due.claimed).toEqual([bobsSub, deadSub.id].sort())
    expect(due.seq_scan).toBe(0)
    expect(due.idx_tup_fetch).toBeLessThan(40)
  }, 120_000)
})

describe('the migration to one subscription per url and member', () => {
  it('keeps the newest active subscription of each duplicate pair, with the union of their scopes and their pending deliveries; the others go', async () => {
    // A database as it was before the migration: every migration up to it, then duplicates.
    const migrations = await listMigrations()
    const at = migrations.findIndex((m) => m.name === 'schedule_webhooks_fairly')
    expect(at).toBeGreaterThan(0)
    const name = `todo_before_fairness_${process.pid}`
    const admin = createSql(inject('serverUrl'), { max: 1 })
    await admin.unsafe(`drop database if exists ${name} with (force)`)
    await admin.unsafe(`create database ${name}`)
    const sql = createSql(databaseUrl(inject('serverUrl'), name), { max: 1 })
    cleanups.push(async () => {
      await sql.end({ timeout: 5 })
      await admin.unsafe(`drop database if exists ${name} with (force)`)
      await admin.end({ timeout: 5 })
    })
    const apply = (file: string) => readFile(file, 'utf8').then((text) => sql.begin((tx) => tx.unsafe(text)))
    await sql.unsafe('set client_min_messages = warning')
    await applyPlatformShim(sql)
    for (const migration of migrations.slice(0, at)) await apply(migration.file)

    const [ann, ben] = [randomUUID(), randomUUID()]
    const [p1, p2, p3] = [randomUUID(), randomUUID(), randomUUID()] // project_ids (no foreign key: not needed here)
    const todos = [randomUUID(), randomUUID(), randomUUID()]
    const sub = {
      annOld: randomUUID(), annNew: randomUUID(), annOff: randomUUID(), // one url, three times
      annScopedA: randomUUID(), annScopedB: randomUUID(), // another url, two scopes
      benOnly: randomUUID(), // the same url as ann's, but ben's
    }
    await sql.begin(async (tx) => {
      // Rows as the API would have left them; triggers off, so that no todo needs rendering.
      await tx`set local session_replication_role = replica`
      await tx`insert into app.users (id, username) values (${ann}, 'ann'), (${ben}, 'ben')`
      // (No todos: with triggers off, foreign keys are not checked, and the migration reads none.)
      for (const t of todos) await tx`insert into app.webhook_events (todo_id, payload) values (${t}, '{}')`
      const url = 'https://hooks.example.com/ann'
      const scopedUrl = 'https://hooks.example.com/scoped'
      await tx`
        insert into app.webhook_subscriptions (id, user_id, url, project_ids, active, created_at) values
          (${sub.annOld}, ${ann}, ${url}, '{}', true, now() - interval '3 days'),
          (${sub.annNew}, ${ann}, ${url}, ${[p1]}, true, now() - interval '2 days'),
          (${sub.annOff}, ${ann}, ${url}, '{}', false, now() - interval '1 day'),
          (${sub.annScopedA}, ${ann}, ${scopedUrl}, ${[p1, p2]}, true, now() - interval '2 days'),
          (${sub.annScopedB}, ${ann}, ${scopedUrl}, ${[p3, p2]}, true, now() - interval '1 day'),
          (${sub.benOnly}, ${ben}, ${url}, '{}', true, now())`
      for (const id of Object.values(sub)) await tx`insert into app.webhook_secrets (subscription_id, secret) values (${id}, ${`whsec_${id}`})`
      // annOld has two pending deliveries and one delivered; annNew one of the same todos pending.
      await tx`
        insert into app.webhook_deliveries (subscription_id, todo_id, status, next_attempt_at) values
          (${sub.annOld}, ${todos[0]!}, 'pending', now()), (${sub.annOld}, ${todos[1]!}, 'pending', now() + interval '5 minutes'),
          (${sub.annOld}, ${todos[2]!}, 'delivered', null), (${sub.annNew}, ${todos[1]!}, 'pending', now())`
    })

    await apply(migrations[at]!.file)

    const left = await sql<{ id: string; url: string; project_ids: string[]; active: boolean }[]>`
      select id, url, project_ids, active from app.webhook_subscriptions order by user_id = ${ann} desc, url, created_at`
    expect(left).toEqual([
      // The newest active one of the three; it had a scope, but the oldest sent it everything.
      { id: sub.annNew, url: 'https://hooks.example.com/ann', project_ids: [], active: true },
      // The union of the two scopes, the kept one's first.
      { id: sub.annScopedB, url: 'https://hooks.example.com/scoped', project_ids: [p3, p2, p1], active: true },
      { id: sub.benOnly, url: 'https://hooks.example.com/ann', project_ids: [], active: true },
    ])
    // The removed ones' secrets and deliveries went with them; their pending todos moved over, once.
    expect((await sql`select subscription_id from app.webhook_secrets order by 1`).map((r) => r.subscription_id))
      .toEqual([sub.annNew, sub.annScopedB, sub.benOnly].sort())
    const deliveries = await sql`select subscription_id, todo_id, status from app.webhook_deliveries order by todo_id`
    expect(deliveries.map((d) => `${d.subscription_id} ${d.todo_id} ${d.status}`).sort())
      .toEqual([`${sub.annNew} ${todos[0]} pending`, `${sub.annNew} ${todos[1]} pending`].sort())
    // And what is pending has its turn in the queue.
    expect(await sql`select subscription_id from app.webhook_queue`).toEqual([{ subscription_id: sub.annNew }])
    // From now on the index refuses a second one.
    await expect(sql`insert into app.webhook_subscriptions (user_id, url) values (${ann}, 'https://hooks.example.com/ann')`).rejects.toThrow(/duplicate key/)
  }, 120_000)
})
