// Webhooks in the benchmark (issue 14, item 7), on a scratch database of their own so the section
// runs alone (`npm run bench -- --webhooks`, about a minute) as well as after the rest:
//   1. POST /v1/todos by members with 0 and with 3 matching subscriptions (the outbox trigger's
//      cost on the write path; target ≤ 1.15×), and with the trigger disabled (the figure
//      before webhooks), interleaved in rounds so drift hits every scenario alike. The worker
//      does not run meanwhile: what is measured is the todo's own transaction.
//   2. Delivery throughput: the deliveries those POSTs queued, drained by one worker
//      (drainWebhooks, the Node sender) to a local receiver that answers 200 at once.
//   3. POST-to-delivery latency when idle: the worker as `npm start` runs it (woken by the API
//      right after each todo it created, polling every second besides); from just before the POST until the
//      receiver has the request, for each of the 3 deliveries of a todo.
import { mkdtemp, rm } from 'node:fs/promises'
import { createServer } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { serve, type ServerType } from '@hono/node-server'
import postgres from 'postgres'
import { createApp } from '../../functions/app.ts'
import { createSql } from '../../functions/lib/sql.ts'
import { drainWebhooks } from '../../functions/lib/webhooks.ts'
import { runAdmin } from '../admin-commands.ts'
import { databasePoolSize } from '../config.ts'
import { localSupabaseStorage } from '../storage-api.ts'
import { LOCAL_WEBHOOK_DRAIN, runWebhookWorker } from '../webhook-runner.ts'
import { nodeWebhookSender } from '../webhook-sender.ts'
import { databaseUrl, migrateDatabase } from './databases.ts'
import { type HttpRequest, type Measurement, runHttp } from './load.ts'

export interface WebhookBench {
  connections: number
  seconds: number
  rounds: number
  /** Per scenario, the run with the median req/s of its rounds. */
  post: { scenario: string; rps: number; p50: number | null; p99: number | null; errors: number }[]
  /** req/s with 0 subscriptions over req/s with 3 (≥ 1: how much slower the trigger makes a POST). */
  slowdown_3_vs_0: number
  slowdown_0_vs_no_trigger: number
  throughput: { deliveries: number; seconds: number; per_second: number }
  latency: { deliveries: number; p50: number; p99: number; max: number }
}

const SCENARIOS = ['trigger disabled (before webhooks)', '0 subscriptions', '3 matching subscriptions'] as const
const DATABASE = 'todo_bench_webhooks'
/** Members per connection and scenario. */
const WRITERS = 10
const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!
const round2 = (v: number) => Math.round(v * 100) / 100

export async function measureWebhooks(options: {
  serverUrl: string
  jwtSecret: string
  seconds?: number
  connections?: number
  rounds?: number
  log?: (line: string) => void
}): Promise<WebhookBench> {
  const seconds = options.seconds ?? 8
  const connections = options.connections ?? 32
  const rounds = options.rounds ?? 3
  const log = options.log ?? (() => {})

  // A fresh database every time: the figures never depend on what an earlier run left.
  const admin = postgres(options.serverUrl, { max: 1, onnotice: () => {} })
  await admin.unsafe(`drop database if exists ${DATABASE} with (force)`)
  await admin.unsafe(`create database ${DATABASE}`)
  await admin.end({ timeout: 5 })
  const url = databaseUrl(options.serverUrl, DATABASE)
  await migrateDatabase(url)

  const sql = createSql(url, { max: databasePoolSize() })
  const workerSql = createSql(url, { max: 4 })
  const sender = nodeWebhookSender({ allowPrivate: true })
  const storageDir = await mkdtemp(join(tmpdir(), 'bench-webhooks-'))
  const { storage } = await localSupabaseStorage({ dir: storageDir, publicUrl: 'http://bench.test', jwtSecret: options.jwtSecret, sql })
  // As npm start: the API wakes the in-process worker after each todo (only while it runs, below).
  let kick: (() => void) | null = null
  const app = createApp({
    sql, publicUrl: 'http://bench.test', jwtSecret: options.jwtSecret, upgradeUrl: 'http://bench.test/upgrade', storage,
    webhookAllowPrivate: true, onTodoCreated: () => kick?.(),
  })
  let server: ServerType | null = null
  const baseUrl = await new Promise<string>((resolve) => {
    server = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }, (info) => resolve(`http://127.0.0.1:${info.port}`))
  })

  // The receiver: 200 at once; tells the latency run when each delivery arrives.
  let onArrival: (() => void) | null = null
  let received = 0
  const receiver = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      received++
      res.end('ok')
      onArrival?.()
    })
  })
  const receiverUrl = await new Promise<string>((resolve) => receiver.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(receiver.address() as { port: number }).port}/hook`)))

  try {
    // Writers: WRITERS per connection and a group per scenario, so no member nears todo_create's
    // 200 an hour (nobody is exempt) and no two connections wait on one member's rate-limit lock.
    const ctx = { sql, jwtSecret: options.jwtSecret, publicUrl: 'http://bench.test' }
    log(`Webhooks: creating ${3 * connections * WRITERS} writers and ${connections * WRITERS * 3} subscriptions…`)
    const project = (await runAdmin(ctx, ['create-project', '--owner', await makeUser(ctx, 'hookowner'), '--name', 'Bench hooks', '--hashtag', 'benchhooks'])) as { id: string }
    const groups: Record<'before' | 'plain' | 'subscribed', string[]> = { before: [], plain: [], subscribed: [] }
    for (const group of ['before', 'plain', 'subscribed'] as const) {
      for (let i = 0; i < connections * WRITERS; i++) {
        const created = (await runAdmin(ctx, ['create-user', '--username', `hook_${group}_${i}`])) as { id: string; api_key: string }
        groups[group].push(created.api_key)
        if (group === 'subscribed') {
          // One for all projects and two scoped to the project every bench todo mentions: 3
          // matching, each its own url (one subscription per member and url, issue 25).
          await sql`
            with subs as (
              insert into app.webhook_subscriptions (user_id, url, project_ids)
              select app.from_public_id('user', ${created.id}), ${receiverUrl} || x.path, x.p
              from (values ('/all', array[]::uuid[]), ('/project', array[app.from_public_id('proj', ${project.id})]), ('/again', array[app.from_public_id('proj', ${project.id})])) as x(path, p)
              returning id)
            insert into app.webhook_secrets (subscription_id, secret)
            select id, 'whsec_' || encode(decode(md5(id::text) || md5(id::text || 'x'), 'hex'), 'base64') from subs`
        }
      }
    }
    const body = JSON.stringify({ body: 'shipped the webhook bench #benchhooks' })
    const requestsOf = (keys: string[]): HttpRequest[][] =>
      Array.from({ length: connections }, (_, c) => keys.slice(c * WRITERS, (c + 1) * WRITERS).map((key) => ({
        method: 'POST' as const, path: '/v1/todos', body, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      })))

    const runs: Record<string, Measurement[]> = Object.fromEntries(SCENARIOS.map((s) => [s, []]))
    // Warm-up: plans, caches and connections, unmeasured.
    await runHttp({ baseUrl, perConnection: requestsOf(groups.before), connections, seconds: 2 })
    for (let round = 0; round < rounds; round++) {
      for (const scenario of SCENARIOS) {
        const disabled = scenario === SCENARIOS[0]
        if (disabled) await sql`alter table app.todos disable trigger _900_enqueue_webhooks`
        const group = disabled ? groups.before : scenario === SCENARIOS[2] ? groups.subscribed : groups.plain
        const m = await runHttp({ baseUrl, perConnection: requestsOf(group), connections, seconds })
        if (disabled) await sql`alter table app.todos enable trigger _900_enqueue_webhooks`
        runs[scenario]!.push(m)
        log(`  POST /v1/todos, ${scenario}, round ${round + 1}: ${m.rps} req/s, p50 ${m.p50} ms, p99 ${m.p99} ms, ${m.errors} errors`)
      }
    }
    const median = (ms: Measurement[]) => [...ms].sort((a, b) => a.rps - b.rps)[Math.floor(ms.length / 2)]!
    const post = SCENARIOS.map((scenario) => {
      const m = median(runs[scenario]!)
      return { scenario, rps: m.rps, p50: m.p50, p99: m.p99, errors: m.errors }
    })

    // 2. Throughput: everything the subscribed POSTs queued.
    const [queued] = await sql<{ n: number }[]>`select count(*)::int as n from app.webhook_deliveries where status = 'pending'`
    log(`Webhooks: draining ${queued!.n} queued deliveries to ${receiverUrl}…`)
    const before = received
    const drainStarted = performance.now()
    // The one local receiver is one host for 320 members, as a popular receiving host is: the
    // caps are per member and host (issue 25), so it needs no lifting. Every member's receiver
    // starts unproven (never answered), half the slots, until its first answer.
    const drained = await drainWebhooks(workerSql, sender, { lanes: 4, batch: 25 })
    const drainSeconds = (performance.now() - drainStarted) / 1000
    // POSTs still in flight when the last run ended may commit after the count: at least that many.
    if (drained.delivered < queued!.n || drained.retrying + drained.failed > 0 || received - before !== drained.delivered) {
      throw new Error(`drained ${JSON.stringify(drained)} of ${queued!.n}; the receiver got ${received - before}`)
    }

    // 3. Latency when idle, with the worker running as npm start runs it.
    const worker = runWebhookWorker(workerSql, sender, { drain: LOCAL_WEBHOOK_DRAIN })
    kick = worker.kick
    const latencies: number[] = []
    try {
      const key = groups.subscribed[0]!
      // One todo at a time, so every arrival in an iteration is one of its 3 deliveries.
      for (let i = 0; i < 50; i++) {
        await new Promise((r) => setTimeout(r, 40))
        let pending = 3
        const started = performance.now()
        const all = new Promise<void>((resolve) => {
          onArrival = () => {
            latencies.push(performance.now() - started)
            if (--pending === 0) resolve()
          }
        })
        const res = await fetch(`${baseUrl}/v1/todos`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body })
        if (res.status !== 201) throw new Error(`POST /v1/todos: ${res.status} ${await res.text()}`)
        let timer: ReturnType<typeof setTimeout> | undefined
        await Promise.race([all, new Promise((_, reject) => (timer = setTimeout(() => reject(new Error('deliveries did not arrive within 10 s')), 10_000)))])
        clearTimeout(timer)
      }
    } finally {
      onArrival = null
      kick = null
      await worker.stop()
    }
    latencies.sort((a, b) => a - b)

    return {
      connections,
      seconds,
      rounds,
      post,
      slowdown_3_vs_0: round2(post[1]!.rps / post[2]!.rps),
      slowdown_0_vs_no_trigger: round2(post[0]!.rps / post[1]!.rps),
      throughput: { deliveries: drained.delivered, seconds: round2(drainSeconds), per_second: Math.round(drained.delivered / drainSeconds) },
      latency: { deliveries: latencies.length, p50: round2(percentile(latencies, 50)), p99: round2(percentile(latencies, 99)), max: round2(latencies.at(-1)!) },
    }
  } finally {
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()))
    await new Promise<void>((resolve) => receiver.close(() => resolve()))
    await sender.close()
    await workerSql.end({ timeout: 5 })
    await sql.end({ timeout: 5 })
    const cleanup = postgres(options.serverUrl, { max: 1, onnotice: () => {} })
    await cleanup.unsafe(`drop database if exists ${DATABASE} with (force)`).catch(() => {})
    await cleanup.end({ timeout: 5 })
    await rm(storageDir, { recursive: true, force: true })
  }

  async function makeUser(ctx: Parameters<typeof runAdmin>[0], name: string): Promise<string> {
    await runAdmin(ctx, ['create-user', '--username', name])
    return name
  }
}
