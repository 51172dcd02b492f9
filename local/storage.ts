// The local stand-in for Supabase Storage: accepts the signed PUT of an upload (signature,
// expiry, size and MD5 checked while the body streams to DATA_DIR/storage), records the file
// in storage.objects as Storage does (with image dimensions read by image-size), and serves
// files back at GET /files/{key}. A worker deletes what the database queued for deletion.
import { createHash, randomBytes } from 'node:crypto'
import { createReadStream, createWriteStream } from 'node:fs'
import { mkdir, open, rename, rm, stat } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { Readable } from 'node:stream'
import { finished } from 'node:stream/promises'
import { Hono } from 'hono'
import { imageSizeFromFile } from 'image-size/fromFile'
import type { Sql } from 'postgres'
import { runStorageMaintenance as runSharedMaintenance } from '../functions/lib/maintenance.ts'
import {
  type FileStorage, UPLOAD_LIFETIME_SECONDS, hmacHex, localUploadCanonical, localUploadPath, sameHex, uploadSigningKey,
} from '../functions/lib/storage.ts'

export interface LocalStorageOptions {
  /** Folder the files live in (DATA_DIR/storage). */
  dir: string
  publicUrl: string
  jwtSecret: string
  sql: Sql
}

export interface LocalStorage extends FileStorage {
  /** The PUT endpoint, to mount next to the API. */
  routes: Hono
}

const KEY_PATTERN = /^[0-9a-f]{32}\/[A-Za-z0-9._-]{1,100}$/

function problem(status: 400 | 403 | 404 | 411 | 413, error: string): Response {
  return new Response(JSON.stringify({ error }), { status, headers: { 'content-type': 'application/json' } })
}

export function localStorage(options: LocalStorageOptions): LocalStorage {
  const signingKey = uploadSigningKey(options.jwtSecret)
  const pathOf = (key: string) => join(options.dir, 'uploads', ...key.split('/'))

  const routes = new Hono()
  routes.put('/storage/v1/uploads/*', async (c) => {
    const key = c.req.path.slice('/storage/v1/uploads/'.length).split('/').map(decodeURIComponent).join('/')
    if (!KEY_PATTERN.test(key)) return problem(404, 'No such upload.')
    const size = Number(c.req.query('size'))
    const expires = Number(c.req.query('expires'))
    const contentType = c.req.header('content-type') ?? ''
    const contentMd5 = c.req.header('content-md5') ?? ''
    const expected = await hmacHex(await signingKey, localUploadCanonical(key, expires, contentType, contentMd5, size))
    if (!sameHex(expected, c.req.query('signature') ?? '')) {
      return problem(403, 'The upload signature does not match: PUT to the url exactly as returned, with its Content-Type and Content-MD5 headers.')
    }
    if (!(expires * 1000 > Date.now())) return problem(403, 'The upload URL has expired; ask POST /v1/uploads for a new one.')
    const declaredLength = c.req.header('content-length')
    if (declaredLength !== undefined && Number(declaredLength) !== size) {
      return problem(400, `Content-Length is ${declaredLength}, but this upload is ${size} bytes.`)
    }
    if (!c.req.raw.body) return problem(400, 'The request has no body.')

    // Stream to a temporary file, counting and hashing; never keep more than `size` bytes.
    const incoming = join(options.dir, '.incoming', randomBytes(12).toString('hex'))
    await mkdir(dirname(incoming), { recursive: true })
    const md5 = createHash('md5')
    let received = 0
    let tooLarge = false
    const out = createWriteStream(incoming)
    try {
      for await (const chunk of Readable.fromWeb(c.req.raw.body as import('node:stream/web').ReadableStream<Uint8Array>)) {
        received += (chunk as Buffer).length
        if (received > size) {
          tooLarge = true
          break
        }
        md5.update(chunk as Buffer)
        if (!out.write(chunk)) await new Promise<void>((resolve) => out.once('drain', () => resolve()))
      }
    } finally {
      out.end()
      await finished(out).catch(() => {})
    }
    const discard = () => rm(incoming, { force: true })
    if (tooLarge) {
      await discard()
      return problem(413, `The body is larger than the ${size} bytes declared for this upload.`)
    }
    if (received !== size) {
      await discard()
      return problem(400, `Received ${received} bytes, but this upload is ${size} bytes.`)
    }
    const digest = md5.digest()
    if (digest.toString('base64') !== contentMd5) {
      await discard()
      return problem(400, 'The body does not match Content-MD5: the file changed or arrived damaged.')
    }

    let width: number | null = null
    let height: number | null = null
    if (contentType.startsWith('image/')) {
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
      select app.record_stored_file(${key}, ${size}, ${digest.toString('hex')}, ${contentType}, ${width}, ${height}) as known`
    if (!row?.known) {
      await rm(target, { force: true })
      return problem(404, 'No such upload: it was removed before the file arrived.')
    }
    return c.json({ Key: `uploads/${key}` }, 200)
  })

  return {
    routes,

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
      }
    },

    async readStart(key, bytes) {
      if (!KEY_PATTERN.test(key)) return null
      const file = await open(pathOf(key)).catch(() => null)
      if (!file) return null
      try {
        const buffer = new Uint8Array(bytes)
        const { bytesRead } = await file.read(buffer, 0, bytes, 0)
        return buffer.subarray(0, bytesRead)
      } finally {
        await file.close()
      }
    },

    async fileResponse(key) {
      const [object] = await options.sql`
        select metadata ->> 'mimetype' as mime from storage.objects where bucket_id = 'uploads' and name = ${key}`
      const path = pathOf(key)
      const info = object ? await stat(path).catch(() => null) : null
      if (!object || !info) return problem(404, 'No such file.')
      const mime = String(object.mime ?? 'application/octet-stream')
      const inline = /^(image|video)\//.test(mime) || mime === 'application/pdf'
      return new Response(Readable.toWeb(createReadStream(path)) as ReadableStream, {
        headers: {
          'content-type': mime,
          'content-length': String(info.size),
          'content-disposition': inline ? 'inline' : 'attachment',
          'x-content-type-options': 'nosniff',
          'cache-control': 'private, max-age=3600',
        },
      })
    },
  }
}

export type { MaintenanceResult } from '../functions/lib/maintenance.ts'

/** One pass of the storage worker over the local files (see functions/lib/maintenance.ts). */
export function runStorageMaintenance(sql: Sql, storage: FileStorage, staleAfter = '1 day') {
  return runSharedMaintenance(sql, storage, staleAfter)
}
