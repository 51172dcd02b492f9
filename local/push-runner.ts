// The push worker as local processes run it (npm start, npm run push-worker): a drain every
// `intervalMs` (default 1 s), and at once when kick() is called. Never two drains at once in one
// process; a kick during a drain runs one more after it. As local/webhook-runner.ts.
import type { Sql } from 'postgres'
import { type ApnsConfig, type PushDrainOptions, type PushDrainResult, type PushTransport, ProviderTokens, drainPush } from '../functions/lib/push.ts'

export interface PushRunner {
  kick(): void
  stop(): Promise<void>
}

export function runPushWorker(
  sql: Sql,
  transport: PushTransport,
  apns: ApnsConfig | null,
  options: { intervalMs?: number; drain?: PushDrainOptions; onDrained?: (result: PushDrainResult) => void } = {},
): PushRunner {
  const apnsDeps = apns ? { config: apns, tokens: new ProviderTokens(sql, apns) } : null
  let stopped = false
  let again = false
  let running: Promise<void> | null = null

  const kick = () => {
    if (stopped) return
    if (running) {
      again = true
      return
    }
    running = drainPush(sql, transport, apnsDeps, options.drain)
      .then((result) => options.onDrained?.(result))
      .catch((err) => console.error('push worker:', (err as Error).message))
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
