// What `npm run start:edge` runs on a migrated database, as Supabase runs it: the Deno entry
// (supabase/functions/api/index.ts) behind a gateway that serves it under /functions/v1/api, with
// Realtime (/realtime/v1/websocket) and Storage's REST API (/storage/v1/object/…, over local files)
// at the same host, and the Cron jobs of docs/deploy.md calling the function's /internal/* routes
// with the worker secret. local/start-edge.ts adds the database; the edge tests use it on theirs.
import { randomBytes } from 'node:crypto'
import { Hono } from 'hono'
import { createSql } from '../functions/lib/sql.ts'
import { type EdgeFunction, startEdgeFunction } from './edge-function.ts'
import { type Gateway, startGateway } from './gateway.ts'
import { closeAfterUnreadBody } from './node-http.ts'
import { freePort } from './net.ts'
import { type RealtimeGateway, startRealtimeGateway } from './realtime.ts'
import { storageApi } from './storage-api.ts'

/** The Cron jobs of docs/deploy.md: the function's worker routes and how often Supabase Cron calls them. */
export const EDGE_CRON_JOBS = [
  { route: '/internal/maintenance', everyMs: 60_000 },
  { route: '/internal/exports', everyMs: 30_000 },
  { route: '/internal/webhooks', everyMs: 5_000 },
  { route: '/internal/push', everyMs: 5_000 },
] as const

export interface EdgeStackOptions {
  databaseUrl: string
  jwtSecret: string
  /** Storage's files: <dir>/<bucket>/<name> (DATA_DIR/storage, the layout of `npm start`). */
  storageDir: string
  host?: string
  /** The gateway's port; 0: any free one. */
  port: number
  /** PUBLIC_URL of the function; default <gateway>/functions/v1/api. */
  publicUrl?: string
  /** WORKER_SECRET of the /internal routes; default a random one. */
  workerSecret?: string
  /** More of the function's environment (WEB_URL, VAPID_*, APNS_*, WEBHOOK_ALLOW_PRIVATE, …). */
  env?: Record<string, string | undefined>
  /** Run the Cron jobs on their schedules. Default true. */
  cron?: boolean
  /** The function's output; default: kept for `fn.output()` only. */
  onOutput?: (chunk: string) => void
}

export interface EdgeStack {
  /** The gateway: http://host:port, the project's SUPABASE_URL. */
  url: string
  publicUrl: string
  workerSecret: string
  fn: EdgeFunction
  gateway: Gateway
  realtime: RealtimeGateway
  /** Runs one Cron job now (what the schedule does): the route's answer. */
  runJob(route: (typeof EDGE_CRON_JOBS)[number]['route']): Promise<Response>
  stop(): Promise<void>
}

export async function startEdgeStack(options: EdgeStackOptions): Promise<EdgeStack> {
  const host = options.host ?? '127.0.0.1'
  const workerSecret = options.workerSecret ?? randomBytes(32).toString('base64url')
  // Storage's own connections (Supabase Storage is a service of its own, beside the function's pool).
  const sql = createSql(options.databaseUrl, { max: 2 })
  const storage = storageApi({ dir: options.storageDir, jwtSecret: options.jwtSecret, sql })
  const rest = new Hono()
  rest.route('/', storage.routes)

  const functionPort = await freePort()
  // As npm start serves its routes: an upload refused before its body was read closes its connection.
  const gateway = await startGateway({ host, port: options.port, functions: { api: `http://127.0.0.1:${functionPort}` }, fetch: closeAfterUnreadBody(rest.fetch) })
  // Where this machine's processes reach the gateway (a wildcard address is no destination).
  const port = new URL(gateway.url).port
  const reachable = `http://${host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host}:${port}`
  const publicUrl = (options.publicUrl ?? `${gateway.url}/functions/v1/api`).replace(/\/+$/, '')
  const realtime = await startRealtimeGateway({ databaseUrl: options.databaseUrl, jwtSecret: options.jwtSecret, privateOnly: true })
  realtime.attach(gateway.server)

  let fn: EdgeFunction
  try {
    fn = await startEdgeFunction({
      port: functionPort,
      env: {
        // What Supabase sets for a function, and the secrets docs/deploy.md has the operator set.
        SUPABASE_DB_URL: options.databaseUrl,
        SUPABASE_URL: reachable,
        SUPABASE_SERVICE_ROLE_KEY: await storage.serviceRoleKey(),
        JWT_SECRET: options.jwtSecret,
        PUBLIC_URL: publicUrl,
        WORKER_SECRET: workerSecret,
        ...options.env,
      },
      onOutput: options.onOutput,
    })
  } catch (err) {
    await realtime.close()
    await gateway.close()
    await sql.end({ timeout: 5 })
    throw err
  }

  const runJob = (route: string) => fetch(`${reachable}/functions/v1/api${route}`, {
    method: 'POST', headers: { authorization: `Bearer ${workerSecret}` }, signal: AbortSignal.timeout(120_000),
  })

  // Supabase Cron: each job calls its route on schedule, one call at a time (a slow pass is not
  // started over), through the gateway as pg_net calls the function's public URL.
  let stopping = false
  const timers = new Set<ReturnType<typeof setTimeout>>()
  const schedule = (run: () => Promise<void>, ms: number) => {
    const timer = setTimeout(() => {
      timers.delete(timer)
      void run()
    }, ms)
    timers.add(timer)
  }
  if (options.cron ?? true) {
    for (const job of EDGE_CRON_JOBS) {
      const run = async () => {
        if (stopping) return
        try {
          const res = await runJob(job.route)
          const text = await res.text()
          if (!res.ok) console.error(`cron ${job.route}: ${res.status} ${text.slice(0, 300)}`)
        } catch (err) {
          if (!stopping) console.error(`cron ${job.route} failed: ${(err as Error).message}`)
        }
        if (!stopping) schedule(run, job.everyMs)
      }
      schedule(run, 1_000)
    }
  }

  return {
    url: gateway.url,
    publicUrl,
    workerSecret,
    fn,
    gateway,
    realtime,
    runJob,
    async stop() {
      stopping = true
      for (const timer of timers) clearTimeout(timer)
      await realtime.close()
      await gateway.close()
      await fn.stop()
      await sql.end({ timeout: 5 })
    },
  }
}
