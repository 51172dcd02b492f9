// The webhook worker on its own: `npm run webhook-worker` drains the outbox of DATABASE_URL (or
// the embedded database of DATA_DIR) every second until stopped, as `npm start` does inside.
// For running more workers than the one in npm start, and for the crash test (kill -9).
import { createSql } from '../functions/lib/sql.ts'
import { drainWebhooks } from '../functions/lib/webhooks.ts'
import { readConfig } from './config.ts'
import { openDatabase } from './database.ts'
import { nodeWebhookSender } from './webhook-sender.ts'

const config = readConfig()
const database = await openDatabase(config)
const sql = createSql(database.url, { max: 3 })
const sender = nodeWebhookSender({ allowPrivate: config.webhookAllowPrivate })
console.log('webhook worker started')

let stopping = false
async function loop() {
  while (!stopping) {
    try {
      const result = await drainWebhooks(sql, sender, { lanes: 2 })
      if (result.delivered + result.retrying + result.failed > 0) console.log(JSON.stringify(result))
    } catch (err) {
      console.error('webhook worker:', (err as Error).message)
    }
    await new Promise((resolve) => setTimeout(resolve, 1000))
  }
}
const running = loop()
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, async () => {
    stopping = true
    await running
    await sender.close()
    await sql.end({ timeout: 5 })
    await database.stop()
    process.exit(0)
  })
}
