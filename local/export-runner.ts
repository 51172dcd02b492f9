// The export worker as `npm start` runs it: a pass every `intervalMs` (which also deletes archives
// whose download window closed), and at once when kick() is called: the API calls it after each
// POST /v1/exports (AppDeps.onExportCreated). Never two passes at once in one process; a kick
// during a pass runs one more after it, and so does a pass that parked an export (its time, 60 s
// in npm start, was spent: the next pass takes the export waiting longest, issue 28). Several
// processes may run it: claims are leases.
import type { Sql } from 'postgres'
import { type ExportOptions, runExports } from '../functions/lib/exports.ts'
import type { FileStorage } from '../functions/lib/storage.ts'

export interface ExportRunner {
  kick(): void
  /** Resolves after the pass under way (if any) has finished. */
  stop(): Promise<void>
}

export function runExportWorker(sql: Sql, storage: FileStorage, options: ExportOptions & { intervalMs?: number }): ExportRunner {
  let stopped = false
  let again = false
  let running: Promise<void> | null = null

  const kick = () => {
    if (stopped) return
    if (running) {
      again = true
      return
    }
    running = runExports(sql, storage, options)
      .then((result) => {
        // A pass whose time was spent parked an export unfinished: the next one goes on at once.
        if (result.parked > 0 && !stopped) again = true
      })
      .catch((err) => console.error('export worker:', (err as Error).message))
      .finally(() => {
        running = null
        if (again) {
          again = false
          kick()
        }
      })
  }

  const timer = setInterval(kick, options.intervalMs ?? 5_000)
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
