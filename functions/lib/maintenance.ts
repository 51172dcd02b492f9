// The storage worker, the same on both platforms: removes uploads never attached within a
// day, deletes the files the database queued (app.file_deletions), and reads the stored files no
// attaching request read yet (what their bytes are, images' dimensions: functions/lib/inspect.ts;
// Storage receives the PUT, so nothing of ours saw the bytes).
// Beside the files, it seals the hours of todos that are over (app.seal_todo_hours), so the
// date filters of GET /v1/todos count from sums of hours (issue 26), and forgets the stored
// answers of idempotency keys once their 24 hours are over (issue 29), and keeps the retention
// of webhook delivery logs and spent notifications (issue 28; docs/reliability.md, "Retention").
// `npm start` runs it every minute; on Supabase, pg_cron calls POST /internal/maintenance.
import type { Sql } from 'postgres'
import { inspectStored } from './inspect.ts'
import { transaction } from './sql.ts'
import type { FileStorage } from './storage.ts'

export interface MaintenanceResult {
  removedUploads: number
  deletedFiles: number
  /** Stored files read (what their bytes are, images measured). */
  measuredImages: number
  /** Hours of todos counted into app.todo_hours. */
  sealedHours: number
  /** Stored answers of Idempotency-Keys older than 24 hours, deleted (app.forget_idempotency_keys). */
  forgottenIdempotencyKeys: number
  /** New-todo events older than WEBHOOK_LOG_KEPT_DAYS deleted with their delivery logs (app.prune_webhook_deliveries). */
  prunedWebhookEvents: number
  /** Read or hidden notifications older than SPENT_NOTIFICATIONS_KEPT_DAYS, deleted (app.prune_notifications). */
  prunedNotifications: number
}

/** How long the webhook delivery log is kept (each new todo's body and its delivery rows). */
export const WEBHOOK_LOG_KEPT_DAYS = 30
/** How long a read or hidden notification is kept; unread ones stay. */
export const SPENT_NOTIFICATIONS_KEPT_DAYS = 90
/** Rows one pruning statement deletes at most… */
export const PRUNE_BATCH = 1_000
/** …and statements of each kind one run makes at most: a backlog (the first run after an upgrade) goes over several minutes, never in one long run. */
export const PRUNE_BATCHES_PER_RUN = 10

const BATCH = 100
/** Expired idempotency keys deleted per statement. */
const FORGET_BATCH = 10_000

export async function runStorageMaintenance(sql: Sql, storage: FileStorage, staleAfter = '1 day'): Promise<MaintenanceResult> {
  const [stale] = await sql`select app.remove_stale_uploads(${staleAfter}::interval) as removed`
  const [sealed] = await sql`select app.seal_todo_hours() as hours`

  // In batches, each its own short statement, until a batch comes back short: a day of keyed
  // requests goes in a few index-ordered deletes, never one long transaction.
  let forgottenIdempotencyKeys = 0
  for (;;) {
    const [forgotten] = await sql`select app.forget_idempotency_keys(${FORGET_BATCH}) as n`
    const n = Number(forgotten?.n ?? 0)
    forgottenIdempotencyKeys += n
    if (n < FORGET_BATCH) break
  }

  // Retention, in short statements of PRUNE_BATCH rows, oldest first, each one index range.
  const prune = async (statement: () => Promise<{ n: number }[]>): Promise<number> => {
    let total = 0
    for (let i = 0; i < PRUNE_BATCHES_PER_RUN; i++) {
      const n = Number((await statement())[0]?.n ?? 0)
      total += n
      if (n < PRUNE_BATCH) break
    }
    return total
  }
  const prunedWebhookEvents = await prune(() => sql<{ n: number }[]>`
    select app.prune_webhook_deliveries(make_interval(days => ${WEBHOOK_LOG_KEPT_DAYS}), ${PRUNE_BATCH}) as n`)
  const prunedNotifications = await prune(() => sql<{ n: number }[]>`
    select app.prune_notifications(make_interval(days => ${SPENT_NOTIFICATIONS_KEPT_DAYS}), ${PRUNE_BATCH}) as n`)

  let deletedFiles = 0
  for (;;) {
    // Locked for this worker (skip locked): the rows go only after storage deleted the files.
    const batch = await transaction(sql, async (tx) => {
      const keys = (await tx`select app.take_file_deletions(${BATCH}) as key`).map((r) => r.key as string)
      if (keys.length > 0) {
        await storage.deleteFiles(keys)
        await tx`select app.forget_file_deletions(${keys})`
      }
      return keys.length
    })
    deletedFiles += batch
    if (batch < BATCH) break
  }

  let measuredImages = 0
  const uninspected = await sql<{ key: string; filename: string | null; content_type: string }[]>`
    select key, filename, content_type from app.uninspected_uploads(${BATCH})`
  for (const upload of uninspected) {
    // One file Storage cannot give (gone, or failing) is recorded as bytes nobody recognises, so
    // it neither blocks the queue nor comes back first on every pass; the others go on.
    try {
      if (await inspectStored(sql, storage, upload)) measuredImages++
      else await sql`select app.record_upload_inspection(${upload.key}, 'application/octet-stream', null, null)`
    } catch (err) {
      console.error('reading a stored file failed:', (err as Error).message)
    }
  }
  return { removedUploads: Number(stale?.removed ?? 0), deletedFiles, measuredImages, sealedHours: Number(sealed?.hours ?? 0), forgottenIdempotencyKeys,
    prunedWebhookEvents, prunedNotifications }
}
