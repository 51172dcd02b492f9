// The push worker on its own: `npm run push-worker` drains the push outbox of DATABASE_URL (or
// the embedded database of DATA_DIR) every second until stopped, as `npm start` does inside.
// For more workers than the one in npm start. (A self-signed APNs stand-in is trusted through
// Node's own NODE_EXTRA_CA_CERTS.)
import { createSql } from '../functions/lib/sql.ts'
import { readConfig } from './config.ts'
import { openDatabase } from './database.ts'
import { runPushWorker } from './push-runner.ts'
import { nodePushTransport } from './push-sender.ts'

const config = readConfig()
const database = await openDatabase(config)
// The deadline npm start gives its workers (STATEMENT_TIMEOUT_MS plus STATEMENT_DEADLINE_MARGIN_MS).
const sql = createSql(database.url, { max: 3, statementTimeoutMs: config.statementTimeoutMs, deadlineMarginMs: config.deadlineMarginMs })
const transport = nodePushTransport({ vapid: config.vapid, allowPrivate: config.webhookAllowPrivate })
console.log('push worker started')

const worker = runPushWorker(sql, transport, config.apns, {
  intervalMs: Number(process.env.PUSH_INTERVAL_MS) || 1_000,
  onDrained: (result) => {
    if (Object.values(result).some((n) => n > 0)) console.log(JSON.stringify(result))
  },
})
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, async () => {
    await worker.stop()
    await transport.close?.()
    await sql.end({ timeout: 5 })
    await database.stop()
    process.exit(0)
  })
}
