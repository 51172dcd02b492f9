// The webhook worker as local processes run it (npm start, npm run webhook-worker, the bench):
// a drain every `intervalMs`, and at once when kick() is called: npm start's API calls it after
// each todo it created (AppDeps.onTodoCreated), so a delivery leaves within milliseconds of the
// commit with no database round trip for it. (A NOTIFY from the outbox trigger would do the
// same for every writer, but a notifying transaction takes a global lock at commit, which
// serialized concurrent POSTs: 1.8× slower with 3 subscriptions, docs/performance.md.) Never two
// drains at once in one process: a kick during a drain makes it claim again at once (its free
// slots take what is due: a slow delivery under way holds its own slot, and for 2 s at most, issue 25).
import type { Sql } from 'postgres'
import { type Drain, type DrainOptions, type DrainResult, type WebhookSender, startDrain } from '../functions/lib/webhooks.ts'

/**
 * How npm start (and npm run webhook-worker) drain: 2 lanes of 10, 20 slots (5 for one member, 10
 * for receivers not known to answer), and a waiting room of 80 for requests slower than 2 s.
 */
export const LOCAL_WEBHOOK_DRAIN: DrainOptions = { lanes: 2 }

export interface WebhookRunner {
  /** Drain now (or claim again in the drain under way). */
  kick(): void
  /** Claims nothing more; resolves when the sends under way have been recorded. */
  stop(): Promise<void>
}

export function runWebhookWorker(
  sql: Sql,
  send: WebhookSender,
  options: { intervalMs?: number; drain?: DrainOptions; onDrained?: (result: DrainResult) => void } = {},
): WebhookRunner {
  let stopped = false
  let drain: Drain | null = null

  const kick = () => {
    if (stopped || drain?.poke()) return
    const current = startDrain(sql, send, options.drain)
    drain = current
    current.done
      .then((result) => options.onDrained?.(result))
      .catch((err) => console.error('webhook worker:', (err as Error).message))
      .finally(() => {
        if (drain === current) drain = null
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
      const current = drain
      if (current) {
        current.stop()
        await current.done.catch(() => {})
      }
    },
  }
}
