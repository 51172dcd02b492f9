// Fair share (issue 25, item 2): no member can hold the database for the others.
//
// The attack, as the issue found it: one member's costly requests, sent many at once, took every
// connection of the pool, and another member's `GET /v1/users/me` waited seconds behind them.
// Here the member's requests are made slow the surest way: a test transaction holds their row,
// so each of their `PATCH /v1/users/me` waits on its lock, holding its connection, for as long as
// the test likes. Nothing below depends on timing: the tests wait for states (lock waiters in
// pg_stat_activity, answers) with generous deadlines.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type postgres from 'postgres'
import { createSql } from '../functions/lib/sql.ts'
import { FairQueue } from '../functions/lib/admission.ts'
import { callApi } from '../functions/lib/db.ts'
import { sha256Hex } from '../functions/lib/tokens.ts'
import { type CreatedUser, type HttpResult, type TestWorld, startWorld } from './support/app.ts'

const uuidOf = (publicId: string) => publicId.replace(/^user_/, '').replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5')

async function until<T>(what: string, probe: () => Promise<T>, done: (value: T) => boolean, deadlineMs = 20_000): Promise<T> {
  const deadline = Date.now() + deadlineMs
  for (;;) {
    const value = await probe()
    if (done(value)) return value
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}; last: ${JSON.stringify(value)}`)
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
}

/** Statements of the API waiting on a lock in this world's database. */
async function lockWaiters(sql: postgres.Sql): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity
    where datname = current_database() and wait_event_type = 'Lock' and query like '%api.user_update%'`
  return row!.n
}

/** A transaction of the test's own that holds a member's row until release(). */
async function holdMember(world: TestWorld, member: CreatedUser) {
  const holder = createSql(world.databaseUrl, { max: 1 })
  const reserved = await holder.reserve()
  await reserved`begin`
  await reserved`select 1 from app.users where id = ${uuidOf(member.id)} for update`
  return {
    async release() {
      await reserved`commit`
      reserved.release()
      await holder.end({ timeout: 5 })
    },
  }
}

/** A PATCH of the member's own profile: it waits on the member's row while holdMember holds it. */
function slowWrite(world: TestWorld, member: CreatedUser, baseUrl = world.baseUrl): Promise<HttpResult> {
  return fetch(`${baseUrl}/v1/users/me`, {
    method: 'PATCH',
    headers: { authorization: `Bearer ${member.api_key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ time_zone: 'Europe/Berlin' }),
  }).then(async (res) => {
    const text = await res.text()
    return { status: res.status, text, body: JSON.parse(text), headers: res.headers }
  })
}

/** Resolves with the promise's result, or rejects when it takes longer than `ms` (the old code's answer never came). */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([promise, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms))])
}

describe('one member’s flood of slow requests', () => {
  let world: TestWorld
  let mallory: CreatedUser
  let bob: CreatedUser

  beforeAll(async () => {
    // A long statement timeout: without a fair queue, Bob would wait as long as this for a connection.
    world = await startWorld({ statementTimeoutMs: 60_000 })
    mallory = await world.createUser('mallory')
    bob = await world.createUser('bob')
  })
  afterAll(() => world.close())

  it('takes at most half of the pool: another member is answered at once, and every slow request still succeeds', async () => {
    const hold = await holdMember(world, mallory)
    let flood: Promise<HttpResult>[] = []
    try {
      flood = Array.from({ length: 12 }, () => slowWrite(world, mallory))
      // The pool has 8 connections; Mallory's share is 4 of them. The rest of her requests wait
      // in her own line, not in the pool's.
      await until('Mallory’s requests to reach the lock', () => lockWaiters(world.sql), (n) => n >= 4)
      const me = await within(world.get('/v1/users/me', { auth: bob.api_key }), 15_000, 'Bob’s GET /v1/users/me while Mallory floods')
      expect(me.status).toBe(200)
      expect(me.body.username).toBe('bob')
      expect(await lockWaiters(world.sql)).toBe(4)
    } finally {
      await hold.release()
    }
    const answers = await Promise.all(flood)
    expect(answers.map((a) => a.status)).toEqual(Array(12).fill(200))
  })
})

describe('one member’s line is bounded', () => {
  let world: TestWorld
  let mallory: CreatedUser
  let bob: CreatedUser

  beforeAll(async () => {
    world = await startWorld({
      statementTimeoutMs: 60_000,
      admission: { concurrency: 8, perMember: 2, waitingPerMember: 3, maxWaitMs: 60_000 },
    })
    mallory = await world.createUser('mallory')
    bob = await world.createUser('bob')
  })
  afterAll(() => world.close())

  it('past the requests that run and wait, one more is 429 with Retry-After at once; another member is not', async () => {
    const hold = await holdMember(world, mallory)
    let flood: Promise<HttpResult>[] = []
    try {
      flood = Array.from({ length: 5 }, () => slowWrite(world, mallory))
      await until('two running requests at the lock', () => lockWaiters(world.sql), (n) => n === 2)
      // Two run, three wait: the line is full.
      await until('three waiting', async () => world.admission.stats(), (s) => s.waiting === 3)
      const refused = await within(slowWrite(world, mallory), 15_000, 'the request past the line')
      expect(refused.status).toBe(429)
      expect(refused.headers.get('retry-after')).toBe('1')
      expect(refused.body).toEqual({ error: expect.stringMatching(/^Too many requests at once: 2 of yours run at a time and 3 may wait/) })
      expect((await world.get('/v1/users/me', { auth: bob.api_key })).status).toBe(200)
      // A read of Mallory's waits in the same line: refused too.
      const read = await world.get('/v1/users/me', { auth: mallory.api_key })
      expect(read.status).toBe(429)
    } finally {
      await hold.release()
    }
    expect((await Promise.all(flood)).map((a) => a.status)).toEqual(Array(5).fill(200))
  })

  it('an invalid request waits in the line too (its credential check is a SQL call)', async () => {
    const hold = await holdMember(world, mallory)
    let flood: Promise<HttpResult>[] = []
    try {
      flood = Array.from({ length: 5 }, () => slowWrite(world, mallory))
      await until('two running requests at the lock', () => lockWaiters(world.sql), (n) => n === 2)
      await until('three waiting', async () => world.admission.stats(), (s) => s.waiting === 3)
      const invalid = await world.patch('/v1/users/me', { auth: mallory.api_key, json: { time_zone: 42 } })
      expect(invalid.status).toBe(429)
    } finally {
      await hold.release()
    }
    await Promise.all(flood)
  })
})

describe('a request without a turn in time', () => {
  it('is 503 with Retry-After, and is never run', async () => {
    const world = await startWorld({
      statementTimeoutMs: 60_000,
      admission: { concurrency: 8, perMember: 1, waitingPerMember: 5, maxWaitMs: 300 },
    })
    try {
      const mallory = await world.createUser('mallory')
      const hold = await holdMember(world, mallory)
      try {
        const first = slowWrite(world, mallory)
        await until('the first request at the lock', () => lockWaiters(world.sql), (n) => n === 1)
        const second = await within(slowWrite(world, mallory), 15_000, 'the waiting request')
        expect(second.status).toBe(503)
        expect(second.headers.get('retry-after')).toBe('2')
        expect(second.body.error).toMatch(/^The service is busy: the request waited 0 seconds without a turn/)
        expect(await lockWaiters(world.sql)).toBe(1)
        await hold.release()
        expect((await first).status).toBe(200)
      } catch (err) {
        await hold.release().catch(() => {})
        throw err
      }
    } finally {
      await world.close()
    }
  })
})

describe('across servers (edge isolates share no memory)', () => {
  let world: TestWorld
  let mallory: CreatedUser
  let bob: CreatedUser
  // Each server alone would let Mallory run 8 at once: only the database knows she has 10.
  const generous = { concurrency: 8, perMember: 8, waitingPerMember: 32, maxWaitMs: 60_000 }

  beforeAll(async () => {
    world = await startWorld({ statementTimeoutMs: 60_000, admission: generous })
    mallory = await world.createUser('mallory')
    bob = await world.createUser('bob')
  })
  afterAll(() => world.close())

  it('the database runs at most 8 of one member’s requests at once: the rest are 429 at once, others unaffected', async () => {
    const other = await world.anotherServer(generous)
    const hold = await holdMember(world, mallory)
    let running: Promise<HttpResult>[] = []
    const answered: HttpResult[] = []
    try {
      running = [
        ...Array.from({ length: 5 }, () => slowWrite(world, mallory)),
        ...Array.from({ length: 5 }, () => slowWrite(world, mallory, other.baseUrl)),
      ].map((p) => p.then((a) => { answered.push(a); return a }))
      await until('eight requests at the lock', () => lockWaiters(world.sql), (n) => n === 8)
      // The other two were refused by the database while the eight still wait.
      await until('two answers', async () => answered.length, (n) => n >= 2)
      const refused = [...answered]
      expect(refused.map((a) => a.status)).toEqual([429, 429])
      expect(refused[0]!.headers.get('retry-after')).toBe('1')
      expect(refused[0]!.body).toEqual({ error: 'Too many requests at once: at most 8 of one member\'s requests run at the same time. Try again in a second.', retry_after: 1 })
      expect((await world.get('/v1/users/me', { auth: bob.api_key })).status).toBe(200)
      const viaOther = await fetch(`${other.baseUrl}/v1/users/me`, { headers: { authorization: `Bearer ${bob.api_key}` } })
      expect(viaOther.status).toBe(200)
    } finally {
      await hold.release()
    }
    const answers = await Promise.all(running)
    expect(answers.filter((a) => a.status === 200)).toHaveLength(8)
  })
})

describe('reads are rate-limited per member', () => {
  let world: TestWorld
  let alice: CreatedUser
  let bob: CreatedUser

  beforeAll(async () => {
    world = await startWorld()
    alice = await world.createUser('alice')
    bob = await world.createUser('bob')
    // The rule is data (app.rate_limits): a small one here, 1,200 a minute in production.
    await world.sql`update app.rate_limits set max_events = 5 where action = 'read'`
  })
  afterAll(() => world.close())

  it('the read past the limit is 429 with Retry-After and a sentence; writes and other members are not counted', async () => {
    for (let i = 0; i < 5; i++) expect((await world.get('/v1/users/me', { auth: alice.api_key })).status).toBe(200)
    const refused = await world.get('/v1/todos', { auth: alice.api_key })
    expect(refused.status).toBe(429)
    const wait = Number(refused.headers.get('retry-after'))
    expect(wait).toBeGreaterThanOrEqual(1)
    expect(wait).toBeLessThanOrEqual(120)
    expect(refused.body).toEqual({ error: `Too many requests: at most 5 reads per 1 minute(s). Try again in ${wait} seconds.`, retry_after: wait })
    // A refused read is not counted, a write is no read, and Bob has his own count.
    expect((await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'still writing' } })).status).toBe(201)
    expect((await world.get('/v1/users/me', { auth: bob.api_key })).status).toBe(200)
    const [counted] = await world.sql<{ n: number }[]>`
      select coalesce(sum(events), 0)::int as n from app.read_counters where user_id = ${uuidOf(alice.id)}`
    expect(counted!.n).toBe(5)
  })

  it('counts concurrent reads on separate rows, one per slot, and sums them', async () => {
    await world.sql`update app.rate_limits set max_events = 1000 where action = 'read'`
    const carol = await world.createUser('carol')
    const answers = await Promise.all(Array.from({ length: 12 }, () => world.get('/v1/users/me', { auth: carol.api_key })))
    expect(answers.map((a) => a.status)).toEqual(Array(12).fill(200))
    const rows = await world.sql<{ slot: number; events: number }[]>`
      select slot, events from app.read_counters where user_id = ${uuidOf(carol.id)} order by slot`
    expect(rows.reduce((sum, r) => sum + r.events, 0)).toBe(12)
    expect(rows.every((r) => r.slot >= 1 && r.slot <= 8)).toBe(true)
  })
})

describe('the fair queue (functions/lib/admission.ts)', () => {
  /** A call that runs until its gate opens, recording when it started. */
  function gated(log: string[], name: string) {
    let open!: () => void
    const gate = new Promise<void>((resolve) => (open = resolve))
    return { call: async () => { log.push(name); await gate; return name }, open }
  }
  const tick = () => new Promise((resolve) => setTimeout(resolve, 0))

  it('serves members in turn: a member who arrives behind another’s backlog is next, not last', async () => {
    const queue = new FairQueue({ concurrency: 1, perMember: 1, waitingPerMember: 10, maxWaitMs: 60_000 })
    const log: string[] = []
    const a = [1, 2, 3, 4].map((n) => gated(log, `a${n}`))
    const b = gated(log, 'b1')
    const c = gated(log, 'c1')
    const runs = [...a.map((g) => queue.run('a', g.call)), queue.run('b', b.call), queue.run('c', c.call)]
    await tick()
    expect(log).toEqual(['a1'])
    for (const g of [a[0]!, b, c, a[1]!, a[2]!, a[3]!]) {
      g.open()
      await tick()
      await tick()
    }
    await Promise.all(runs)
    expect(log).toEqual(['a1', 'b1', 'c1', 'a2', 'a3', 'a4'])
    expect(queue.stats()).toEqual({ running: 0, waiting: 0, members: 0 })
  })

  it('keeps a member to its share of the pool while others have room', async () => {
    const queue = new FairQueue({ concurrency: 4, perMember: 2, waitingPerMember: 10, maxWaitMs: 60_000 })
    const log: string[] = []
    const a = [1, 2, 3].map((n) => gated(log, `a${n}`))
    const b = [1, 2].map((n) => gated(log, `b${n}`))
    const runs = [...a.map((g) => queue.run('a', g.call)), ...b.map((g) => queue.run('b', g.call))]
    await tick()
    expect(log).toEqual(['a1', 'a2', 'b1', 'b2'])
    expect(queue.stats()).toEqual({ running: 4, waiting: 1, members: 2 })
    for (const g of [...a, ...b]) g.open()
    await Promise.all(runs)
    expect(log).toEqual(['a1', 'a2', 'b1', 'b2', 'a3'])
  })

  it('an API key’s line becomes its member’s once the member is known: the calls under way count toward it', async () => {
    const queue = new FairQueue({ concurrency: 4, perMember: 2, waitingPerMember: 10, maxWaitMs: 60_000 })
    const log: string[] = []
    const byKey = [1, 2, 3].map((n) => gated(log, `k${n}`))
    const runs = byKey.map((g) => queue.run('key h', g.call))
    await tick()
    expect(log).toEqual(['k1', 'k2'])
    queue.rename('key h', 'member')
    const byMember = gated(log, 'm1')
    runs.push(queue.run('member', byMember.call))
    await tick()
    // Not a second line with two more turns: the member already runs two.
    expect(log).toEqual(['k1', 'k2'])
    expect(queue.stats()).toEqual({ running: 2, waiting: 2, members: 1 })
    byKey[0]!.open()
    await tick()
    await tick()
    expect(log).toEqual(['k1', 'k2', 'k3'])
    for (const g of [...byKey, byMember]) g.open()
    await Promise.all(runs)
    expect(log).toEqual(['k1', 'k2', 'k3', 'm1'])
    expect(queue.stats()).toEqual({ running: 0, waiting: 0, members: 0 })
  })

  it('a caller that goes away leaves the line, and a failing call frees its turn', async () => {
    const queue = new FairQueue({ concurrency: 1, perMember: 1, waitingPerMember: 10, maxWaitMs: 60_000 })
    const log: string[] = []
    const first = gated(log, 'a1')
    const running = queue.run('a', first.call)
    const abort = new AbortController()
    const abandoned = queue.run('a', async () => 'never', () => abort.signal)
    abort.abort()
    await expect(abandoned).rejects.toMatchObject({ status: 503 })
    expect(queue.stats()).toEqual({ running: 1, waiting: 0, members: 1 })
    first.open()
    await running
    await expect(queue.run('b', async () => { throw new Error('boom') })).rejects.toThrow('boom')
    expect(await queue.run('b', async () => 'next')).toBe('next')
    expect(queue.stats()).toEqual({ running: 0, waiting: 0, members: 0 })
  })
})

describe('one request, one process', () => {
  it('runs every statement in one process: no parallel workers, as the pool connects', async () => {
    const world = await startWorld()
    try {
      const alice = await world.createUser('alice')
      // A probe api function, called exactly as every request calls its function (functions/lib/db.ts).
      await world.sql.unsafe(`
        create function api.probe_parallel() returns text language sql stable set search_path = '' as $$
          select current_setting('max_parallel_workers_per_gather')
        $$;
        grant execute on function api.probe_parallel() to authenticated;`)
      const credential = { kind: 'api_key' as const, key_hash: await sha256Hex(alice.api_key) }
      const body = await callApi(world.sql, { credential, access: 'read', read: true, publicUrl: 'http://api.test' }, 'api.probe_parallel', [])
      expect(body).toBe('0')
    } finally {
      await world.close()
    }
  })
})
