// The webhook worker as local processes run it (npm start, npm run webhook-worker, the bench):
// a drain every `intervalMs`, and at once when kick() is called: npm start's API calls it after
// each todo it created (AppDeps.onTodoCreated), so a delivery leaves within milliseconds of the
// commit with no database round trip for it. (A NOTIFY from the outbox trigger would do the
// same for every writer, but a notifying transaction takes a global lock at commit, which
// serialized concurrent POSTs: 1.8× slower with 3 subscriptions, docs/performance.md.) Never two
// drains at once in one process; a kick during a drain runs one more after it.
import type { Sql } from 'postgres'
import { type DrainOptions, type DrainResult, type WebhookSender, drainWebhooks } from '../functions/lib/webhooks.ts'

export interface WebhookRunner {
  /** Drain now (or right after the drain under way). */
  kick(): void
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
  kick()

  return {
    kick,
    async stop() {
      stopped = true
      clearInterval(timer)
      while (running) await running
    },
  }
}
