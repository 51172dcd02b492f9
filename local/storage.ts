// The local stand-in for Supabase Storage: accepts the signed PUT of an upload (signature,
// expiry, size and MD5 checked while the body streams to DATA_DIR/storage), records the file
// in storage.objects as Storage does (with image dimensions read by image-size), and serves
// files back at GET /files/{key}. A worker deletes what the database queued for deletion.
import { createHash, randomBytes } from 'node:crypto'
import { createReadStream, createWriteStream } from 'node:fs'
import { mkdir, open, readdir, rename, rm, stat } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { Readable } from 'node:stream'
import { finished, pipeline } from 'node:stream/promises'
import { Hono } from 'hono'
import { imageSizeFromFile } from 'image-size/fromFile'
import type { Sql } from 'postgres'
import { runStorageMaintenance as runSharedMaintenance } from '../functions/lib/maintenance.ts'
import { SNIFF_BYTES, fileHeaders, storedType } from '../functions/lib/media.ts'
import {
  EXPORT_KEY_PATTERN, type FileStorage, UPLOAD_LIFETIME_SECONDS, hmacHex, localUploadCanonical, localUploadPath,
  sameHex, uploadSigningKey,
} from '../functions/lib/storage.ts'

export interface LocalStorageOptions {
  /** Folder the files live in (DATA_DIR/storage). */
  dir: string
  publicUrl: string
  jwtSecret: string
  sql: Sql
  /** A PUT that sends nothing for this long is stopped and discarded (slow clients). Default 30 s. */
  idleTimeoutMs?: number
  /** A PUT that takes longer than this in all is stopped and discarded. Default 30 minutes. */
  putDeadlineMs?: number
  /** The worker deletes temporary files older than this (left by a crash). Default the PUT deadline plus 5 minutes. */
  incompleteAfterMs?: number
}

export interface LocalStorage extends FileStorage {
  /** The PUT endpoint, to mount next to the API. */
  routes: Hono
}

/** A storage key: 128 random bits in hex, then the cleaned file name (never `.` or `..`). */
const KEY_PATTERN = /^[0-9a-f]{32}\/(?!\.+$)[A-Za-z0-9._-]{1,100}$/

function problem(status: 400 | 403 | 404 | 408 | 409 | 411 | 413, error: string): Response {
  return new Response(JSON.stringify({ error }), { status, headers: { 'content-type': 'application/json' } })
}

/** A refused PUT: its body may be unread (or half read), so the connection is not reused. */
function refuse(status: 400 | 403 | 404 | 408 | 409 | 413, error: string): Response {
  return new Response(JSON.stringify({ error }), { status, headers: { 'content-type': 'application/json', connection: 'close' } })
}

const INCOMING_SUFFIX = '.part'

type Received =
  | { kind: 'complete'; received: number; md5: Buffer }
  | { kind: 'too-large' }
  | { kind: 'aborted' }
  | { kind: 'timeout'; message: string }

async function readHead(path: string, bytes: number): Promise<Uint8Array> {
  const file = await open(path)
  try {
    const buffer = new Uint8Array(bytes)
    const { bytesRead } = await file.read(buffer, 0, bytes, 0)
    return buffer.subarray(0, bytesRead)
  } finally {
    await file.close()
  }
}

export function localStorage(options: LocalStorageOptions): LocalStorage {
  const signingKey = uploadSigningKey(options.jwtSecret)
  const pathOf = (key: string) => join(options.dir, 'uploads', ...key.split('/'))
  // Archives (exports/<hex>/export.json) under DATA_DIR/storage/exports, apart from uploads.
  const exportPathOf = (key: string) => join(options.dir, ...key.split('/'))
  const incomingDir = join(options.dir, '.incoming')
  const idleTimeoutMs = options.idleTimeoutMs ?? 30_000
  const putDeadlineMs = options.putDeadlineMs ?? 30 * 60_000
  const incompleteAfterMs = options.incompleteAfterMs ?? putDeadlineMs + 5 * 60_000

  /**
   * Streams a PUT's body into `path`, counting and hashing. Stops at the first byte past `size`,
   * when no byte arrives for idleTimeoutMs (a slow or stalled client), when the whole PUT takes
   * longer than putDeadlineMs, or when the client goes away. The caller deletes `path` unless the
   * file is kept.
   */
  async function receive(body: ReadableStream<Uint8Array>, path: string, size: number): Promise<Received> {
    await mkdir(dirname(path), { recursive: true })
    const md5 = createHash('md5')
    const out = createWriteStream(path)
    const outFailed = new Promise<never>((_, reject) => out.once('error', reject))
    outFailed.catch(() => {})
    const reader = body.getReader()
    const deadline = Date.now() + putDeadlineMs
    let received = 0
    let timer: ReturnType<typeof setTimeout> | undefined
    try {
      for (;;) {
        const wait = Math.min(idleTimeoutMs, deadline - Date.now())
        if (wait <= 0) return { kind: 'timeout', message: `The upload took longer than ${Math.round(putDeadlineMs / 1000)} seconds.` }
        const timedOut = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), wait)))
        let next: ReadableStreamReadResult<Uint8Array> | 'timeout'
        try {
          next = await Promise.race([reader.read(), timedOut, outFailed])
        } catch {
          return { kind: 'aborted' }
        } finally {
          clearTimeout(timer)
        }
        if (next === 'timeout') {
          return {
            kind: 'timeout',
            message: Date.now() >= deadline
              ? `The upload took longer than ${Math.round(putDeadlineMs / 1000)} seconds.`
              : `No data arrived for ${Math.round(idleTimeoutMs / 1000)} seconds; the upload was stopped.`,
          }
        }
        if (next.done) break
        const chunk = next.value
        received += chunk.length
        if (received > size) return { kind: 'too-large' }
        md5.update(chunk)
        if (!out.write(chunk)) await Promise.race([new Promise<void>((resolve) => out.once('drain', () => resolve())), outFailed])
      }
      return { kind: 'complete', received, md5: md5.digest() }
    } finally {
      reader.cancel().catch(() => {})
      out.end()
      await finished(out).catch(() => {})
    }
  }

  const routes = new Hono()
  routes.put('/storage/v1/uploads/*', async (c) => {
    // A malformed escape (%ZZ) names no upload: 404, not a URIError's 500.
    let key: string
    try {
      key = c.req.path.slice('/storage/v1/uploads/'.length).split('/').map(decodeURIComponent).join('/')
    } catch {
      return refuse(404, 'No such upload.')
    }
    if (!KEY_PATTERN.test(key)) return refuse(404, 'No such upload.')
    const size = Number(c.req.query('size'))
    const expires = Number(c.req.query('expires'))
    const contentType = c.req.header('content-type') ?? ''
    const contentMd5 = c.req.header('content-md5') ?? ''
    const expected = await hmacHex(await signingKey, localUploadCanonical(key, expires, contentType, contentMd5, size))
    if (!sameHex(expected, c.req.query('signature') ?? '')) {
      return refuse(403, 'The upload signature does not match: PUT to the url exactly as returned, with its Content-Type and Content-MD5 headers.')
    }
    if (!(expires * 1000 > Date.now())) return refuse(403, 'The upload URL has expired; ask POST /v1/uploads for a new one.')
    const declaredLength = c.req.header('content-length')
    if (declaredLength !== undefined && Number(declaredLength) !== size) {
      return refuse(400, `Content-Length is ${declaredLength}, but this upload is ${size} bytes.`)
    }
    if (!c.req.raw.body) return refuse(400, 'The request has no body.')

    // One completed PUT per signed URL: claim the upload before taking a byte of the body. A
    // claim outlives the PUT's deadline by a margin, so it lapses only when its server is gone.
    const claimSeconds = Math.ceil(putDeadlineMs / 1000) + 300
    // The upload's file name rides along: when the bytes say nothing, its extension may (typeFromName).
    const [claim] = await options.sql`
      select app.begin_stored_file(${key}, ${`${claimSeconds} seconds`}::interval) as state,
             (select u.filename from app.uploads u where u.key = ${key}) as filename`
    if (claim?.state === 'unknown') return refuse(404, 'No such upload: it was removed, or never asked for.')
    if (claim?.state === 'stored') {
      return refuse(409, 'This upload URL has been used: the file is stored. Ask POST /v1/uploads for a new URL to upload another file.')
    }
    if (claim?.state === 'busy') return refuse(409, 'Another PUT to this upload URL is in progress.')

    // Stream to a temporary file, counting and hashing; never keep more than `size` bytes, and
    // keep nothing when the PUT fails in any way (aborted, timed out, too short or long, damaged).
    const incoming = join(incomingDir, `${randomBytes(12).toString('hex')}${INCOMING_SUFFIX}`)
    let stored = false
    try {
      const outcome = await receive(c.req.raw.body, incoming, size)
      if (outcome.kind === 'timeout') return refuse(408, outcome.message)
      if (outcome.kind === 'aborted') return refuse(400, 'The upload was interrupted; PUT the file again.')
      if (outcome.kind === 'too-large') return refuse(413, `The body is larger than the ${size} bytes declared for this upload.`)
      if (outcome.received !== size) return refuse(400, `Received ${outcome.received} bytes, but this upload is ${size} bytes.`)
      if (outcome.md5.toString('base64') !== contentMd5) {
        return refuse(400, 'The body does not match Content-MD5: the file changed or arrived damaged.')
      }

      // Storage records what the file is: the declared type only when the file starts as one;
      // for bytes of no named type, what the bytes say, else what the name may say.
      const head = await readHead(incoming, SNIFF_BYTES)
      const mime = await storedType(contentType, head, claim?.filename as string | null | undefined)
      let width: number | null = null
      let height: number | null = null
      if (mime.startsWith('image/')) {
        try {
          const dimensions = await imageSizeFromFile(incoming)
          const turned = (dimensions.orientation ?? 1) >= 5
          width = (turned ? dimensions.height : dimensions.width) ?? null
          height = (turned ? dimensions.width : dimensions.height) ?? null
        } catch {
          // Not an image image-size can read: dimensions stay unknown (null), the file is kept.
        }
      }
      const target = pathOf(key)
      await mkdir(dirname(target), { recursive: true })
      await rename(incoming, target)
      const [row] = await options.sql`
        select app.record_stored_file(${key}, ${size}, ${outcome.md5.toString('hex')}, ${mime}, ${width}, ${height}) as known`
      if (!row?.known) {
        await rm(target, { force: true })
        return refuse(404, 'No such upload: it was removed before the file arrived.')
      }
      stored = true
    } finally {
      if (!stored) {
        await rm(incoming, { force: true }).catch(() => {})
        await options.sql`select app.end_stored_file(${key})`.catch(() => {})
      }
    }
    return c.json({ Key: `uploads/${key}` }, 200)
  })

  return {
    routes,

    async writeExport(key, body) {
      if (!EXPORT_KEY_PATTERN.test(key)) throw new Error(`not an export key: ${key}`)
      // Written beside its final place and renamed once complete: a reader never sees half an archive.
      const target = exportPathOf(key)
      await mkdir(dirname(target), { recursive: true })
      const partial = `${target}${INCOMING_SUFFIX}`
      const out = createWriteStream(partial)
      let bytes = 0
      try {
        const counted = body.pipeThrough(new TransformStream<Uint8Array, Uint8Array>({
          transform(chunk, controller) {
            bytes += chunk.byteLength
            controller.enqueue(chunk)
          },
        }))
        await pipeline(Readable.fromWeb(counted as never), out)
        await rename(partial, target)
        return bytes
      } catch (err) {
        out.destroy()
        await rm(partial, { force: true }).catch(() => {})
        throw err
      }
    },

    async exportResponse(key) {
      // The API found the export live (GET /exports/{key}); the archive itself, always a download,
      // never rendered on the API's origin.
      if (!EXPORT_KEY_PATTERN.test(key)) return problem(404, 'No such export: it expired or was deleted.')
      const path = exportPathOf(key)
      const info = await stat(path).catch(() => null)
      if (!info) return problem(404, 'No such export: it expired or was deleted.')
      return new Response(Readable.toWeb(createReadStream(path)) as ReadableStream, {
        headers: {
          'content-type': 'application/json',
          'content-length': String(info.size),
          'content-disposition': 'attachment; filename="todo-export.json"',
          'x-content-type-options': 'nosniff',
          'cache-control': 'private, no-store',
        },
      })
    },

    async signUpload(upload) {
      const expires = Math.floor(Date.now() / 1000) + UPLOAD_LIFETIME_SECONDS
      const signature = await hmacHex(await signingKey,
        localUploadCanonical(upload.key, expires, upload.contentType, upload.checksumBase64, upload.byteSize))
      const query = new URLSearchParams({ size: String(upload.byteSize), expires: String(expires), signature })
      return {
        url: `${options.publicUrl}${localUploadPath(upload.key)}?${query}`,
        headers: { 'Content-Type': upload.contentType, 'Content-MD5': upload.checksumBase64 },
      }
    },

    async deleteFiles(keys) {
      for (const key of keys) {
        if (KEY_PATTERN.test(key)) await rm(pathOf(key), { force: true })
        else if (EXPORT_KEY_PATTERN.test(key)) {
          // With the partial file a writer that died left beside it (writeExport renames on completion).
          await rm(exportPathOf(key), { force: true })
          await rm(`${exportPathOf(key)}${INCOMING_SUFFIX}`, { force: true })
        }
      }
    },

    async readStart(key, bytes) {
      if (!KEY_PATTERN.test(key)) return null
      // A missing file (deleted meanwhile) is simply nothing to read.
      return await readHead(pathOf(key), bytes).catch(() => null)
    },

    async fileResponse(key) {
      const [object] = await options.sql`
        select metadata ->> 'mimetype' as mime, metadata ->> 'eTag' as etag from storage.objects where bucket_id = 'uploads' and name = ${key}`
      const path = pathOf(key)
      const info = object ? await stat(path).catch(() => null) : null
      if (!object || !info) return problem(404, 'No such file.')
      const mime = String(object.mime ?? 'application/octet-stream')
      return new Response(Readable.toWeb(createReadStream(path)) as ReadableStream, {
        headers: {
          ...fileHeaders(mime), 'content-length': String(info.size), 'cache-control': 'private, max-age=3600',
          // The file's MD5, as Supabase Storage tags it: a key stores one file, so it never changes.
          ...(object.etag ? { etag: String(object.etag) } : {}),
        },
      })
    },

    async sweepIncomplete() {
      // Temporary files of PUTs that never finished (the server stopped mid-PUT): every failure
      // the server sees deletes its own; these are what a crash leaves.
      const names = await readdir(incomingDir).catch(() => [] as string[])
      let removed = 0
      for (const name of names) {
        if (!name.endsWith(INCOMING_SUFFIX)) continue
        const path = join(incomingDir, name)
        const info = await stat(path).catch(() => null)
        if (info && Date.now() - info.mtimeMs > incompleteAfterMs) {
          await rm(path, { force: true })
          removed++
        }
      }
      return removed
    },
  }
}

export type { MaintenanceResult } from '../functions/lib/maintenance.ts'

/** One pass of the storage worker over the local files (see functions/lib/maintenance.ts). */
export function runStorageMaintenance(sql: Sql, storage: FileStorage, staleAfter = '1 day') {
  return runSharedMaintenance(sql, storage, staleAfter)
}
