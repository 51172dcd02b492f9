// `npm start`: the whole service on one machine. Embedded PostgreSQL (or DATABASE_URL),
// pending migrations, and the API on HOST:PORT.
import { serve } from '@hono/node-server'
import { createApp } from '../functions/app.ts'
import { createSql } from '../functions/lib/sql.ts'
import { readConfig } from './config.ts'
import { openDatabase } from './database.ts'
import { migrate } from './migrate.ts'

const config = readConfig()
const database = await openDatabase(config)
const sql = createSql(database.url, { max: 20 })
const applied = await migrate(sql)
if (applied.length > 0) console.log(`Applied ${applied.length} migration(s): ${applied.join(', ')}`)

const app = createApp({ sql, publicUrl: config.publicUrl, jwtSecret: config.jwtSecret, upgradeUrl: config.upgradeUrl })
const server = serve({ fetch: app.fetch, hostname: config.host, port: config.port }, () => {
  console.log(`Todo-sharing API listening on ${config.publicUrl}`)
  console.log(`  REST:     ${config.publicUrl}/v1   (reference: ${config.publicUrl}/docs)`)
  console.log(`  Database: ${database.embedded ? `embedded PostgreSQL, data in ${config.dataDir}` : 'DATABASE_URL'}`)
  console.log('Press Ctrl-C to stop.')
})

let stopping = false
async function shutdown(signal: string) {
  if (stopping) return
  stopping = true
  console.log(`\n${signal}: stopping…`)
  server.close()
  await sql.end({ timeout: 5 })
  await database.stop()
  process.exit(0)
}
process.on('SIGINT', () => void shutdown('SIGINT'))
process.on('SIGTERM', () => void shutdown('SIGTERM'))
