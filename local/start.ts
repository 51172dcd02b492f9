// `npm start`: the whole service on one machine. Embedded PostgreSQL (or DATABASE_URL),
// pending migrations, and the API on HOST:PORT.
import { join } from 'node:path'
import { serve } from '@hono/node-server'
import { createApp } from '../functions/app.ts'
import { createSql } from '../functions/lib/sql.ts'
import { databasePoolSize, readConfig } from './config.ts'
import { openDatabase } from './database.ts'
import { migrate } from './migrate.ts'
import { startRealtimeGateway } from './realtime.ts'
import { localStorage, runStorageMaintenance } from './storage.ts'
import { runWebhookWorker } from './webhook-runner.ts'
import { nodeWebhookSender } from './webhook-sender.ts'
import { runPushWorker } from './push-runner.ts'
import { nodePushTransport } from './push-sender.ts'

const config = readConfig()
const database = await openDatabase(config)
const sql = createSql(database.url, { max: databasePoolSize(), statementTimeoutMs: config.statementTimeoutMs })
const applied = await migrate(sql)
if (applied.length > 0) console.log(`Applied ${applied.length} migration(s): ${applied.join(', ')}`)

const storageDir = join(config.dataDir, 'storage')
const storage = localStorage({ dir: storageDir, publicUrl: config.publicUrl, jwtSecret: config.jwtSecret, sql })
const app = createApp({
  sql, publicUrl: config.publicUrl, jwtSecret: config.jwtSecret, upgradeUrl: config.upgradeUrl, storage,
  webhookAllowPrivate: config.webhookAllowPrivate, onTodoCreated: () => webhookWorker.kick(),
})
app.route('/', storage.routes)

// Background work that pg_cron and Supabase Queues do in production.
const maintenance = setInterval(() => {
  runStorageMaintenance(sql, storage).catch((err) => console.error('storage maintenance failed:', err))
}, 60_000)
maintenance.unref()
// The webhook worker (right after each todo the API creates, and every second), on connections
// of its own: a delivery holds its transaction while it is sent (up to 15 s), which must not take
// the API's connections.
const webhookSql = createSql(database.url, { max: 2 })
const webhookSender = nodeWebhookSender({ allowPrivate: config.webhookAllowPrivate })
const webhookWorker = runWebhookWorker(webhookSql, webhookSender, { drain: { lanes: 2 } })
// The push worker (APNs and Web Push), every second, on connections of its own.
const pushSql = createSql(database.url, { max: 2 })
const pushTransport = nodePushTransport({ vapid: config.vapid, allowPrivate: config.webhookAllowPrivate })
const pushWorker = runPushWorker(pushSql, pushTransport, config.apns)
const realtime = await startRealtimeGateway({ databaseUrl: database.url, jwtSecret: config.jwtSecret, privateOnly: true })
const server = serve({ fetch: app.fetch, hostname: config.host, port: config.port }, () => {
  console.log(`Todo-sharing API listening on ${config.publicUrl}`)
  console.log(`  REST:     ${config.publicUrl}/v1   (reference: ${config.publicUrl}/docs)`)
  console.log(`  Realtime: ${config.publicUrl.replace(/^http/, 'ws')}/realtime/v1/websocket`)
  console.log(`  Database: ${database.embedded ? `embedded PostgreSQL, data in ${config.dataDir}` : 'DATABASE_URL'}`)
  console.log('Press Ctrl-C to stop.')
})
realtime.attach(server)

let stopping = false
async function shutdown(signal: string) {
  if (stopping) return
  stopping = true
  console.log(`\n${signal}: stopping…`)
  clearInterval(maintenance)
  await webhookWorker.stop()
  await pushWorker.stop()
  await realtime.close()
  server.close()
  await sql.end({ timeout: 5 })
  await webhookSql.end({ timeout: 5 })
  await webhookSender.close()
  await pushSql.end({ timeout: 5 })
  await pushTransport.close?.()
  await database.stop()
  process.exit(0)
}
process.on('SIGINT', () => void shutdown('SIGINT'))
process.on('SIGTERM', () => void shutdown('SIGTERM'))
