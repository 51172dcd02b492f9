// The webhook worker as local processes run it (npm start, npm run webhook-worker, the bench):
// a drain whenever the todo trigger notifies `app_webhook_deliveries` (LISTEN, so a delivery
// leaves within milliseconds of its todo's commit) and every `intervalMs` besides, for retries
// that fall due and for notifications missed while the listening connection was away. Never
// two drains at once in one process; a wake-up during a drain runs one more after it.
import type { Sql } from 'postgres'
import { type DrainOptions, type DrainResult, type WebhookSender, drainWebhooks } from '../functions/lib/webhooks.ts'

export interface WebhookRunner {
  /** Resolves after the drain under way (if any) has finished. */
  stop(): Promise<void>
}

export function runWebhookWorker(
  sql: Sql,
  send: WebhookSender,
  options: { intervalMs?: number; drain?: DrainOptions; onDrained?: (result: DrainResult) => void } = {},
): WebhookRunner {
  let stopped = false
  let again = false
  let running: Promise<void> | null = null

  const kick = () => {
    if (stopped) return
    if (running) {
      again = true
      return
    }
    running = drainWebhooks(sql, send, options.drain)
      .then((result) => options.onDrained?.(result))
      .catch((err) => console.error('webhook worker:', (err as Error).message))
      .finally(() => {
        running = null
        if (again) {
          again = false
          kick()
        }
      })
  }

  const timer = setInterval(kick, options.intervalMs ?? 1_000)
  timer.unref()
  const listening = sql.listen('app_webhook_deliveries', kick).catch((err) => {
    console.error('webhook worker: LISTEN failed, polling only:', (err as Error).message)
    return null
  })
  kick()

  return {
    async stop() {
      stopped = true
      clearInterval(timer)
      await (await listening)?.unlisten().catch(() => {})
      while (running) await running
    },
  }
}
