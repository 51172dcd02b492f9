// The storage worker, the same on both platforms: removes uploads never attached within a
// day, deletes the temporary files of PUTs that never finished (the local server, after a
// crash), deletes the files the database queued (app.file_deletions), and measures images whose
// dimensions are unknown (in production Storage receives the PUT, so nothing measured them).
// Beside the files, it seals the hours of todos that are over (app.seal_todo_hours), so the
// date filters of GET /v1/todos count from sums of hours (issue 26), and forgets the stored
// answers of idempotency keys once their 24 hours are over (issue 29), and keeps the retention
// of webhook delivery logs and spent notifications (issue 28; docs/reliability.md, "Retention").
// `npm start` runs it every minute; on Supabase, pg_cron calls POST /internal/maintenance.
import { imageSize } from 'image-size'
import type { Sql } from 'postgres'
import { detectedType } from './media.ts'
import { transaction } from './sql.ts'
import type { FileStorage } from './storage.ts'

export interface MaintenanceResult {
  removedUploads: number
  deletedFiles: number
  measuredImages: number
  /** Temporary files of PUTs that never finished, deleted. */
  removedPartials: number
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
/** Enough of the file for the header of any image type image-size reads, EXIF included. */
const IMAGE_HEAD_BYTES = 512 * 1024

export async function runStorageMaintenance(sql: Sql, storage: FileStorage, staleAfter = '1 day'): Promise<MaintenanceResult> {
  const [stale] = await sql`select app.remove_stale_uploads(${staleAfter}::interval) as removed`
  const [sealed] = await sql`select app.seal_todo_hours() as hours`
  const removedPartials = (await storage.sweepIncomplete?.()) ?? 0

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
  const unmeasured = await sql`select key, filename from app.unmeasured_images(${BATCH})`
  for (const { key, filename } of unmeasured) {
    const head = await storage.readStart(key as string, IMAGE_HEAD_BYTES)
    let width: number | null = null
    let height: number | null = null
    if (head) {
      // A file declared application/octet-stream: Supabase Storage recorded that; find what it is
      // from its bytes, else from its name (as the local storage server does on PUT).
      await sql`select app.record_detected_type(${key as string}, ${await detectedType(head, filename as string | null)})`
      try {
        const size = imageSize(head)
        const turned = (size.orientation ?? 1) >= 5
        width = (turned ? size.height : size.width) ?? null
        height = (turned ? size.width : size.height) ?? null
      } catch {
        // Not readable as an image: recorded as measured, dimensions unknown.
      }
    }
    await sql`select app.record_image_size(${key as string}, ${width}, ${height})`
    measuredImages++
  }
  return { removedUploads: Number(stale?.removed ?? 0), deletedFiles, measuredImages, removedPartials, sealedHours: Number(sealed?.hours ?? 0), forgottenIdempotencyKeys,
    prunedWebhookEvents, prunedNotifications }
}
