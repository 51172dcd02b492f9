// The webhook worker on its own: `npm run webhook-worker` drains the outbox of DATABASE_URL (or
// the embedded database of DATA_DIR) until stopped, every second, as `npm start` does inside (which
// also drains right after each todo its API creates).
// For running more workers than the one in npm start, and for the crash test (kill -9).
import { createSql } from '../functions/lib/sql.ts'
import { LOCAL_WEBHOOK_DRAIN, runWebhookWorker } from './webhook-runner.ts'
import { readConfig } from './config.ts'
import { openDatabase } from './database.ts'
import { nodeWebhookSender } from './webhook-sender.ts'

const config = readConfig()
const database = await openDatabase(config)
// The deadline npm start gives its workers (STATEMENT_TIMEOUT_MS plus STATEMENT_DEADLINE_MARGIN_MS).
const sql = createSql(database.url, { max: 3, statementTimeoutMs: config.statementTimeoutMs, deadlineMarginMs: config.deadlineMarginMs })
const sender = nodeWebhookSender({ allowPrivate: config.webhookAllowPrivate })
console.log('webhook worker started')

const worker = runWebhookWorker(sql, sender, {
  drain: LOCAL_WEBHOOK_DRAIN,
  onDrained: (result) => {
    if (result.delivered + result.retrying + result.failed > 0) console.log(JSON.stringify(result))
  },
})
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, async () => {
    await worker.stop()
    await sender.close()
    await sql.end({ timeout: 5 })
    await database.stop()
    process.exit(0)
  })
}
