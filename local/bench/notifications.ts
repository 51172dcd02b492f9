// Notifications in the benchmark (issue 15, item 6), on a scratch database of their own
// (`npm run bench -- --notifications`):
//   1. The cost of the notification triggers on the write path: POST /v1/comments and
//      POST /v1/reactions with the triggers (each request notifies the todo's owner, who has a
//      device, so each also queues a push) and with them disabled (the figure before
//      notifications), interleaved in rounds so drift hits both alike. Target ≤ 1.15×.
//   2. Push throughput: the pushes those requests queued, fanned out into deliveries and
//      drained by one worker (drainPush, the Node transport: node:http2) to a local APNs
//      stand-in (HTTP/2 over TLS, checking each provider token's signature, as
//      test/support/push.ts does) that answers 200.
// The rate limits of comments and likes are lifted in the scratch database (the runs post
// thousands per member); everything else is as `npm start` runs it.
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { serve, type ServerType } from '@hono/node-server'
import postgres from 'postgres'
import { createApp } from '../../functions/app.ts'
import { ProviderTokens, drainPush } from '../../functions/lib/push.ts'
import { createSql } from '../../functions/lib/sql.ts'
import { startApnsStandIn } from '../../test/support/push.ts'
import { runAdmin } from '../admin-commands.ts'
import { databasePoolSize } from '../config.ts'
import { generateVapidKeys, nodePushTransport } from '../push-sender.ts'
import { localSupabaseStorage } from '../storage-api.ts'
import { databaseUrl, migrateDatabase } from './databases.ts'
import { type HttpRequest, type Measurement, runHttp } from './load.ts'

export interface NotificationBench {
  connections: number
  seconds: number
  rounds: number
  post: { endpoint: string; scenario: string; rps: number; p50: number | null; p99: number | null; errors: number }[]
  /** req/s with the triggers disabled over req/s with them, per endpoint (target ≤ 1.15). */
  slowdown: Record<string, number>
  push: { pushes: number; seconds: number; per_second: number; connections: number }
}

const DATABASE = 'todo_bench_notifications'
/** Distinct todos each connection likes, in order (a like repeated would be a no-op). */
const TARGETS = 600
const round2 = (v: number) => Math.round(v * 100) / 100

export async function measureNotifications(options: {
  serverUrl: string
  jwtSecret: string
  seconds?: number
  connections?: number
  rounds?: number
  log?: (line: string) => void
}): Promise<NotificationBench> {
  const seconds = options.seconds ?? 5
  const connections = options.connections ?? 32
  const rounds = options.rounds ?? 3
  const log = options.log ?? (() => {})

  const admin = postgres(options.serverUrl, { max: 1, onnotice: () => {} })
  await admin.unsafe(`drop database if exists ${DATABASE} with (force)`)
  await admin.unsafe(`create database ${DATABASE}`)
  await admin.end({ timeout: 5 })
  const url = databaseUrl(options.serverUrl, DATABASE)
  await migrateDatabase(url)

  const sql = createSql(url, { max: databasePoolSize() })
  const workerSql = createSql(url, { max: 4 })
  const apns = await startApnsStandIn()
  const transport = nodePushTransport({ vapid: { ...generateVapidKeys(), subject: 'mailto:bench@todo.test' }, allowPrivate: true, apnsCa: apns.ca })
  const storageDir = await mkdtemp(join(tmpdir(), 'bench-notifications-'))
  const { storage } = await localSupabaseStorage({ dir: storageDir, publicUrl: 'http://bench.test', jwtSecret: options.jwtSecret, sql })
  const app = createApp({ sql, publicUrl: 'http://bench.test', jwtSecret: options.jwtSecret, upgradeUrl: 'http://bench.test/upgrade', storage })
  let server: ServerType | null = null
  const baseUrl = await new Promise<string>((resolve) => {
    server = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }, (info) => resolve(`http://127.0.0.1:${info.port}`))
  })

  try {
    const ctx = { sql, jwtSecret: options.jwtSecret, publicUrl: 'http://bench.test' }
    await sql`update app.rate_limits set max_events = 100000000 where action in ('comment_create', 'reaction_create')`
    log(`Notifications: ${connections} todo owners with a device, ${connections} commenters and likers, ${connections * TARGETS} todos…`)
    const owners: string[] = []
    const actors: string[] = []
    for (let c = 0; c < connections; c++) {
      const owner = (await runAdmin(ctx, ['create-user', '--username', `note_owner_${c}`])) as { id: string }
      owners.push(owner.id)
      actors.push(((await runAdmin(ctx, ['create-user', '--username', `note_actor_${c}`])) as { api_key: string }).api_key)
      await sql`insert into app.devices (token, user_id, platform) values (${(c + 1).toString(16).padStart(64, '0')}, app.from_public_id('user', ${owner.id}), 'ios')`
    }
    await sql`
      insert into app.todos (user_id, body)
      select app.from_public_id('user', o.id), 'bench todo ' || g
      from unnest(${owners}::text[]) o(id), generate_series(1, ${TARGETS}) g`
    const todosOf = new Map<string, string[]>()
    for (const row of await sql<{ owner: string; todos: string[] }[]>`
      select app.to_public_id('user', user_id) as owner, array_agg(app.to_public_id('todo', id) order by number) as todos
      from app.todos group by user_id`) todosOf.set(row.owner, row.todos)

    const json = (key: string, body: object): Omit<HttpRequest, 'path'> => ({
      method: 'POST', body: JSON.stringify(body), headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    })
    const comments = (): HttpRequest[][] => owners.map((owner, c) => [{
      ...json(actors[c]!, { commentable_type: 'Todo', commentable_id: todosOf.get(owner)![0], body: 'Nice one, well done' }), path: '/v1/comments',
    }])
    const likes = (): HttpRequest[][] => owners.map((owner, c) => todosOf.get(owner)!.map((todo) => ({
      ...json(actors[c]!, { reactable_type: 'Todo', reactable_id: todo }), path: '/v1/reactions',
    })))
    const setTriggers = async (on: boolean) => {
      const verb = on ? 'enable' : 'disable'
      await sql.unsafe(`alter table app.comments ${verb} trigger _500_notify`)
      await sql.unsafe(`alter table app.comment_user_mentions ${verb} trigger _500_notify`)
      await sql.unsafe(`alter table app.reactions ${verb} trigger _500_notify`)
    }
    // Every likes run starts from no likes (a like repeated returns the existing one, cheaper).
    // The fan-out queue has no foreign key to cascade from (app.push_fanouts): emptied with them.
    const clearLikes = () => sql`truncate app.reactions, app.notifications, app.push_fanouts cascade`

    const scenarios = ['triggers disabled (before notifications)', 'notifications (owner has a device)'] as const
    const runs: Record<string, Measurement[]> = {}
    await runHttp({ baseUrl, perConnection: comments(), connections, seconds: 2 })
    let queued = 0
    for (let round = 0; round < rounds; round++) {
      for (const endpoint of ['POST /v1/comments', 'POST /v1/reactions'] as const) {
        for (const scenario of scenarios) {
          const on = scenario === scenarios[1]
          await setTriggers(on)
          if (endpoint === 'POST /v1/reactions') await clearLikes()
          const m = await runHttp({ baseUrl, perConnection: endpoint === 'POST /v1/comments' ? comments() : likes(), connections, seconds })
          await setTriggers(true)
          ;(runs[`${endpoint}|${scenario}`] ??= []).push(m)
          log(`  ${endpoint}, ${scenario}, round ${round + 1}: ${m.rps} req/s, p50 ${m.p50} ms, p99 ${m.p99} ms, ${m.errors} errors`)
          if (on && round === rounds - 1) {
            // Queued: fanned out into deliveries already, or waiting in the fan-out queue.
            const [row] = await sql<{ n: number }[]>`select ((select count(*) from app.push_deliveries) + (select count(*) from app.push_fanouts))::int as n`
            queued = row!.n
          }
        }
      }
    }
    const median = (ms: Measurement[]) => [...ms].sort((a, b) => a.rps - b.rps)[Math.floor(ms.length / 2)]!
    const post = Object.entries(runs).map(([key, ms]) => {
      const [endpoint, scenario] = key.split('|') as [string, string]
      const m = median(ms)
      return { endpoint, scenario, rps: m.rps, p50: m.p50, p99: m.p99, errors: m.errors }
    })
    const slowdown: Record<string, number> = {}
    for (const endpoint of ['POST /v1/comments', 'POST /v1/reactions']) {
      const [off, on] = scenarios.map((s) => post.find((p) => p.endpoint === endpoint && p.scenario === s)!.rps)
      slowdown[endpoint] = round2(off! / on!)
    }

    // 2. Push throughput: what the last rounds queued (the likes' truncate emptied the rest).
    log(`Notifications: pushing ${queued} queued notifications to the APNs stand-in at ${apns.config.url}…`)
    const tokens = new ProviderTokens(workerSql, apns.config)
    const started = performance.now()
    const drained = await drainPush(workerSql, transport, { config: apns.config, tokens }, { lanes: 4, batch: 50 })
    const pushSeconds = (performance.now() - started) / 1000
    if (drained.retrying + drained.failed > 0 || apns.pushes.some((p) => p.problem)) throw new Error(`push drain: ${JSON.stringify(drained)}`)
    return {
      connections,
      seconds,
      rounds,
      post,
      slowdown,
      push: { pushes: drained.delivered, seconds: round2(pushSeconds), per_second: Math.round(drained.delivered / pushSeconds), connections: apns.connections },
    }
  } finally {
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()))
    await transport.close()
    await apns.close()
    await workerSql.end({ timeout: 5 })
    await sql.end({ timeout: 5 })
    const cleanup = postgres(options.serverUrl, { max: 1, onnotice: () => {} })
    await cleanup.unsafe(`drop database if exists ${DATABASE} with (force)`).catch(() => {})
    await cleanup.end({ timeout: 5 })
    await rm(storageDir, { recursive: true, force: true })
  }
}
