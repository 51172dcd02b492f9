// The export worker, the same on both platforms: claims an export with a lease
// (app.claim_export), pages through the member's data with keyset queries (app.export_page,
// EXPORT_PAGE_SIZE rows at a time) and builds the JSON archive in chunks of at most
// EXPORT_CHUNK_ROWS rows, each stored in the database with the progress after it
// (app.save_export_chunk, issue 28). A pass stops adding chunks once its time (budgetMs) is
// spent and leaves the export for the next pass (app.park_export), which goes on where it
// stopped: no export depends on one invocation's wall clock (an edge function has 150 s), and a
// worker that dies loses at most the chunk it was building. Once every section is written, one
// pass streams the chunks in order into the archive in storage (a copy of bytes, one chunk in
// memory at a time) and marks the export ready for 24 hours: the API serves the archive at
// {base_url}/exports/{key} while the export is live (functions/exports/exports.ts). A worker
// that dies leaves its export running with a lease that runs out; the next claim takes it again
// (at most EXPORT_MAX_ATTEMPTS attempts, then `failed`). `npm start` runs it on a timer and after
// each POST /v1/exports; on Supabase, Cron calls POST /internal/exports.
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
/**
 * Rows of the member's data in one chunk at most: what one stored step of an export holds
 * (a few MB of JSON), and the most a pass goes past its time by. (The notification preferences
 * are one page of ten rows, the types there are, whatever the chunk's room.)
 */
export const EXPORT_CHUNK_ROWS = 2_000

/** The archive's sections after `profile`, in order: each a JSON array of the member's own rows. */
export const EXPORT_SECTIONS = [
  'todos', 'comments', 'reactions', 'projects', 'following', 'followers', 'followed_projects', 'mutes',
  'webhook_subscriptions', 'notification_preferences',
] as const

export interface ExportOptions {
  pageSize?: number
  /** Rows per chunk at most (EXPORT_CHUNK_ROWS); tests make it a few rows. */
  chunkRows?: number
  leaseSeconds?: number
  maxAttempts?: number
  /** How long a failed attempt waits before the next one. Default 60 s. */
  retryDelaySeconds?: number
  /**
   * A pass's time (an edge function's wall clock): past it, no new claim and no new chunk; the
   * export under way is left for the next pass. Each claim gets at least one chunk (or its
   * archive written, when its chunks are all built), so a pass always makes progress.
   */
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
  /** Chunks built and stored. */
  chunks: number
  /** Exports left unfinished for the next pass (their time was spent). */
  parked: number
}

/**
 * Where an export's archive stands, saved with each chunk (app.exports.progress): the section
 * being written (-1: nothing yet, the header and profile come first; EXPORT_SECTIONS.length + 1:
 * all written), the cursor of its last row written, whether its array is open and has a row.
 */
interface Progress {
  section: number
  after: string | null
  open: boolean
  wrote: boolean
}

const DONE = EXPORT_SECTIONS.length + 1

interface Claimed {
  export_id: string
  user_id: string
  claim: string
  attempts: number
  progress: Progress | null
}

const encoder = new TextEncoder()

/** Exports everything that is due (until none is or the budget is spent); expires old archives first. */
export async function runExports(sql: Sql, storage: FileStorage, options: ExportOptions): Promise<ExportRunResult> {
  const pageSize = options.pageSize ?? EXPORT_PAGE_SIZE
  const chunkRows = Math.max(1, options.chunkRows ?? EXPORT_CHUNK_ROWS)
  const leaseSeconds = options.leaseSeconds ?? EXPORT_LEASE_SECONDS
  const maxAttempts = options.maxAttempts ?? EXPORT_MAX_ATTEMPTS
  const deadline = Date.now() + (options.budgetMs ?? Number.POSITIVE_INFINITY)
  const result: ExportRunResult = { ready: 0, retrying: 0, failed: 0, expired: 0, pages: 0, largestPage: 0, chunks: 0, parked: 0 }
  const [expired] = await sql`select app.expire_exports() as n`
  result.expired = Number(expired?.n ?? 0)
  if (!storage.writeExport || !storage.exportResponse) return result

  // At least one claim per pass, however short its time: each makes progress.
  for (let first = true; first || Date.now() < deadline; first = false) {
    const [claimed] = await sql<Claimed[]>`
      select * from app.claim_export(make_interval(secs => ${leaseSeconds}), ${maxAttempts})`
    if (!claimed) break
    let key: string | null = null
    try {
      let progress: Progress = claimed.progress ?? { section: -1, after: null, open: false, wrote: false }
      // Each chunk must move the section on or past a row: a progress that is not one (a
      // hand-edited row, a bug) would have every pass build empty chunks forever.
      if (!Number.isInteger(progress.section) || progress.section < -1 || progress.section > DONE) {
        throw new Error('the export\'s stored progress is unreadable')
      }
      let built = 0
      let held = true
      // One chunk at least, then more while the pass has time.
      while (progress.section !== DONE && (built === 0 || Date.now() < deadline)) {
        const next = await buildChunk(sql, claimed, progress, pageSize, chunkRows, leaseSeconds, options.publicUrl, result)
        const [saved] = await sql`
          select app.save_export_chunk(${claimed.export_id}::uuid, ${claimed.claim}::uuid, ${next.text}::text, ${JSON.stringify(next.progress)}::text::jsonb,
                                       make_interval(secs => ${leaseSeconds})) as ok`
        if (!saved?.ok) {
          held = false // another worker took it over
          break
        }
        progress = next.progress
        built++
        result.chunks++
      }
      if (!held) continue
      // The archive is written by a pass that still has time, or that built nothing (a pass
      // given the export with every chunk built): otherwise the next pass does it.
      if (progress.section !== DONE || (built > 0 && Date.now() >= deadline)) {
        const [parked] = await sql`select app.park_export(${claimed.export_id}::uuid, ${claimed.claim}::uuid) as ok`
        if (parked?.ok) result.parked++
        continue
      }
      key = exportKey()
      // Recorded before a byte is stored: if this process dies mid-write, the next claim queues
      // whatever it left (half an archive, or a whole one never marked ready) for deletion.
      const [started] = await sql`select app.export_file_started(${claimed.export_id}::uuid, ${claimed.claim}::uuid, ${key}) as ok`
      if (!started?.ok) continue // another worker took it over already
      const [counted] = await sql<{ chunks: number }[]>`select chunks from app.exports where id = ${claimed.export_id}::uuid`
      const size = await storage.writeExport(key, archive(sql, claimed, Number(counted?.chunks ?? 0), leaseSeconds))
      // Downloadable at {base_url}/{key} until then (app.export_json), checked on every download.
      const expiresAt = new Date(Date.now() + EXPORT_DOWNLOAD_SECONDS * 1000)
      const [done] = await sql`
        select app.complete_export(${claimed.export_id}::uuid, ${claimed.claim}::uuid, ${key}, ${size}::bigint, ${expiresAt}::timestamptz) as ok`
      if (done?.ok) result.ready++
      else await storage.deleteFiles([key]) // another worker took it over meanwhile
    } catch (err) {
      if (key) await storage.deleteFiles([key]).catch(() => {})
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
 * The next chunk of the archive from `progress`: whole pages of the sections in order, at most
 * chunkRows rows of the member's data (the header and profile with the first), and the progress
 * after it. The archive is the chunks' texts one after another:
 * `{"format", "version", "export_id", "exported_at", "profile": {…}, "todos": [ … ], …}`.
 */
async function buildChunk(
  sql: Sql, claimed: Claimed, from: Progress, pageSize: number, chunkRows: number, leaseSeconds: number, publicUrl: string, stats: ExportRunResult,
): Promise<{ text: string; progress: Progress }> {
  async function page(section: string, after: string | null, size: number): Promise<{ cursor: string | null; item: string }[]> {
    const rows = await sql<{ cursor: string | null; item: string }[]>`
      select cursor, item::text as item
      from app.export_page(${claimed.export_id}::uuid, ${claimed.claim}::uuid, ${section}, ${after}, ${size}::integer, ${publicUrl},
                           make_interval(secs => ${leaseSeconds}))`
    stats.pages++
    stats.largestPage = Math.max(stats.largestPage, rows.length)
    return rows
  }

  const parts: string[] = []
  let { section, after, open, wrote } = from
  let rows = 0
  if (section === -1) {
    const [profile] = await page('profile', null, 1)
    if (!profile) throw new Error('the member is gone')
    parts.push(`{"format":"todo-sharing-export","version":1,"export_id":${JSON.stringify(`exp_${claimed.export_id.replace(/-/g, '')}`)},` +
      `"exported_at":${JSON.stringify(new Date().toISOString())},"profile":${profile.item}`)
    section = 0
    after = null
    open = false
    wrote = false
  }
  while (section < EXPORT_SECTIONS.length && rows < chunkRows) {
    const name = EXPORT_SECTIONS[section]!
    if (!open) {
      parts.push(`,${JSON.stringify(name)}:[`)
      open = true
      wrote = false
      after = null
    }
    const size = Math.min(pageSize, chunkRows - rows)
    const got = await page(name, after, size)
    if (got.length > 0) {
      parts.push((wrote ? ',' : '') + got.map((row) => row.item).join(','))
      wrote = true
      after = got[got.length - 1]!.cursor
      rows += got.length
    }
    if (got.length < size) {
      parts.push(']')
      section++
      open = false
    }
  }
  if (section === EXPORT_SECTIONS.length) {
    parts.push('}\n')
    section = DONE
  }
  return { text: parts.join(''), progress: { section, after, open, wrote } }
}

/**
 * The archive as a stream of its stored chunks, read one at a time when storage asks for more
 * (pull), so what is held at once is one chunk, however large the account.
 */
function archive(sql: Sql, claimed: Claimed, chunks: number, leaseSeconds: number): ReadableStream<Uint8Array> {
  let next = 0
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (next >= chunks) {
        controller.close()
        return
      }
      const [row] = await sql<{ body: string | null }[]>`
        select app.export_chunk(${claimed.export_id}::uuid, ${claimed.claim}::uuid, ${next}::integer, make_interval(secs => ${leaseSeconds})) as body`
      if (row?.body == null) throw new Error(`chunk ${next} of the export is missing`)
      next++
      controller.enqueue(encoder.encode(row.body))
    },
  })
}
