// The export worker, the same on both platforms: claims a pending export with a lease
// (app.claim_export), pages through the member's data with keyset queries (app.export_page,
// EXPORT_PAGE_SIZE rows at a time) and streams the JSON archive to storage as it goes, so an
// account with tens of thousands of todos is exported in bounded memory. Then it marks the
// export ready for 24 hours: the API serves the archive at {base_url}/exports/{key} while the
// export is live (functions/exports/exports.ts). A worker that dies leaves its
// export running with a lease that runs out; the next claim takes it again (at most
// EXPORT_MAX_ATTEMPTS attempts, then `failed`). `npm start` runs it on a timer and after each
// POST /v1/exports; on Supabase, Cron calls POST /internal/exports.
import type { Sql } from 'postgres'
import { type FileStorage, exportKey } from './storage.ts'

/** Rows per page of a section: what the worker holds of the data at any moment. */
export const EXPORT_PAGE_SIZE = 500
/** How long the download link (and the archive) lasts. */
export const EXPORT_DOWNLOAD_SECONDS = 24 * 60 * 60
/** Attempts before an export is given up as failed. */
export const EXPORT_MAX_ATTEMPTS = 3
/** A claim lasts this long without a page read; every page renews it. */
export const EXPORT_LEASE_SECONDS = 120

/** The archive's sections after `profile`, in order: each a JSON array of the member's own rows. */
export const EXPORT_SECTIONS = [
  'todos', 'comments', 'reactions', 'projects', 'following', 'followers', 'followed_projects', 'mutes',
  'webhook_subscriptions', 'notification_preferences',
] as const

export interface ExportOptions {
  pageSize?: number
  leaseSeconds?: number
  maxAttempts?: number
  /** How long a failed attempt waits before the next one. Default 60 s. */
  retryDelaySeconds?: number
  /** Stop claiming new exports after this long (an edge function's wall clock). */
  budgetMs?: number
  /** The {base_url} of attachment and todo URLs in the archive (the API's PUBLIC_URL). */
  publicUrl: string
}

export interface ExportRunResult {
  ready: number
  /** Attempts that failed and will be tried again. */
  retrying: number
  failed: number
  /** Archives whose download window closed, queued for deletion. */
  expired: number
  /** Pages read from the database, and the most rows any one of them held. */
  pages: number
  largestPage: number
}

interface Claimed {
  export_id: string
  user_id: string
  claim: string
  attempts: number
}

const encoder = new TextEncoder()

/** Exports everything that is due (until none is or the budget is spent); expires old archives first. */
export async function runExports(sql: Sql, storage: FileStorage, options: ExportOptions): Promise<ExportRunResult> {
  const pageSize = options.pageSize ?? EXPORT_PAGE_SIZE
  const leaseSeconds = options.leaseSeconds ?? EXPORT_LEASE_SECONDS
  const maxAttempts = options.maxAttempts ?? EXPORT_MAX_ATTEMPTS
  const deadline = Date.now() + (options.budgetMs ?? Number.POSITIVE_INFINITY)
  const result: ExportRunResult = { ready: 0, retrying: 0, failed: 0, expired: 0, pages: 0, largestPage: 0 }
  const [expired] = await sql`select app.expire_exports() as n`
  result.expired = Number(expired?.n ?? 0)
  if (!storage.writeExport || !storage.exportResponse) return result

  while (Date.now() < deadline) {
    const [claimed] = await sql<Claimed[]>`
      select * from app.claim_export(make_interval(secs => ${leaseSeconds}), ${maxAttempts})`
    if (!claimed) break
    const key = exportKey()
    // Recorded before a byte is stored: if this process dies mid-write, the next claim queues
    // whatever it left (half an archive, or a whole one never marked ready) for deletion.
    const [started] = await sql`select app.export_file_started(${claimed.export_id}::uuid, ${claimed.claim}::uuid, ${key}) as ok`
    if (!started?.ok) continue // another worker took it over already
    try {
      const size = await storage.writeExport(key, archive(sql, claimed, pageSize, leaseSeconds, options.publicUrl, result))
      // Downloadable at {base_url}/{key} until then (app.export_json), checked on every download.
      const expiresAt = new Date(Date.now() + EXPORT_DOWNLOAD_SECONDS * 1000)
      const [done] = await sql`
        select app.complete_export(${claimed.export_id}::uuid, ${claimed.claim}::uuid, ${key}, ${size}::bigint, ${expiresAt}::timestamptz) as ok`
      if (done?.ok) result.ready++
      else await storage.deleteFiles([key]) // another worker took it over meanwhile
    } catch (err) {
      await storage.deleteFiles([key]).catch(() => {})
      const [row] = await sql`
        select app.fail_export(${claimed.export_id}::uuid, ${claimed.claim}::uuid, ${(err as Error).message ?? String(err)}, ${maxAttempts},
                               make_interval(secs => ${options.retryDelaySeconds ?? 60})) as status`
      if (row?.status === 'failed') result.failed++
      else if (row?.status === 'pending') result.retrying++
      console.error(`export ${claimed.export_id} attempt ${claimed.attempts} failed:`, (err as Error).message)
    }
  }
  return result
}

/**
 * The archive as a stream that reads one page when storage asks for more (pull), so what is held
 * at once is one page, however large the account:
 * `{"format", "version", "export_id", "exported_at", "profile": {…}, "todos": [ … ], …}`.
 */
function archive(sql: Sql, claimed: Claimed, pageSize: number, leaseSeconds: number, publicUrl: string, stats: ExportRunResult): ReadableStream<Uint8Array> {
  async function page(section: string, after: string | null): Promise<{ cursor: string | null; item: string }[]> {
    const rows = await sql<{ cursor: string | null; item: string }[]>`
      select cursor, item::text as item
      from app.export_page(${claimed.export_id}::uuid, ${claimed.claim}::uuid, ${section}, ${after}, ${pageSize}::integer, ${publicUrl},
                           make_interval(secs => ${leaseSeconds}))`
    stats.pages++
    stats.largestPage = Math.max(stats.largestPage, rows.length)
    return rows
  }

  async function* parts(): AsyncGenerator<string> {
    const [profile] = await page('profile', null)
    if (!profile) throw new Error('the member is gone')
    yield `{"format":"todo-sharing-export","version":1,"export_id":${JSON.stringify(`exp_${claimed.export_id.replace(/-/g, '')}`)},` +
      `"exported_at":${JSON.stringify(new Date().toISOString())},"profile":${profile.item}`
    for (const section of EXPORT_SECTIONS) {
      yield `,${JSON.stringify(section)}:[`
      let after: string | null = null
      let first = true
      for (;;) {
        const rows = await page(section, after)
        if (rows.length > 0) {
          yield (first ? '' : ',') + rows.map((row) => row.item).join(',')
          first = false
          after = rows[rows.length - 1]!.cursor
        }
        if (rows.length < pageSize) break
      }
      yield ']'
    }
    yield '}\n'
  }

  const iterator = parts()
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const next = await iterator.next()
      if (next.done) controller.close()
      else controller.enqueue(encoder.encode(next.value))
    },
    async cancel() {
      await iterator.return(undefined)
    },
  })
}
