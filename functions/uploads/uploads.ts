// Uploads: direct uploads to storage with a pre-signed PUT, and the files served back.
import { ApiError } from '../lib/errors.ts'
import { servedInline } from '../lib/media.ts'
import { callFor, inTurn } from '../lib/respond.ts'
import { createRouter } from '../lib/router.ts'
import { signUploadId } from '../lib/storage.ts'
import { signingKey } from './signed-ids.ts'
import { ALLOWED_CONTENT_TYPES, createUpload } from './uploads.routes.ts'

/** The MD5 as hex, from base64 (16 bytes) or hex (32 digits); null when it is neither. */
export function md5Hex(checksum: string): string | null {
  const value = checksum.trim()
  if (/^[0-9a-f]{32}$/i.test(value)) return value.toLowerCase()
  if (/^[A-Za-z0-9+/]{22}==$/.test(value)) {
    const bytes = Uint8Array.from(atob(value), (ch) => ch.charCodeAt(0))
    return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('')
  }
  return null
}

/** A media type as RFC 9110 spells one (token/token), parameters removed. */
const MEDIA_TYPE = /^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}\/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$/

const hexToBase64 = (hex: string) => btoa(String.fromCharCode(...(hex.match(/../g) ?? []).map((h) => parseInt(h, 16))))

export const uploads = createRouter(400).openapi(createUpload, async (c) => {
  const input = c.req.valid('json')
  const checksumHex = md5Hex(input.checksum)
  if (!checksumHex) throw new ApiError(400, 'checksum must be the MD5 of the file, base64 (24 characters) or hex (32 digits).')
  const declared = input.content_type.split(';')[0]!.trim().toLowerCase()
  if (!MEDIA_TYPE.test(declared)) {
    throw new ApiError(400, `content_type ${JSON.stringify(input.content_type.slice(0, 100))} is not a media type (type/subtype); send application/octet-stream when you do not know it.`)
  }
  // A type we do not name (application/octet-stream, application/x-sketch, text/html …) is
  // stored as bytes: the PUT carries application/octet-stream, and storage finds the real type.
  const contentType = (ALLOWED_CONTENT_TYPES as readonly string[]).includes(declared) ? declared : 'application/octet-stream'
  const recorded = JSON.parse((await callFor(c, 'api.upload_create', [input.filename, input.byte_size, checksumHex, contentType], 'upload')) ?? 'null') as {
    id: string
    key: string
    filename: string
    byte_size: number
    content_type: string
  }
  const checksumBase64 = hexToBase64(checksumHex)
  const signed = await c.var.deps.storage.signUpload({ key: recorded.key, contentType, checksumBase64, byteSize: recorded.byte_size })
  return c.json({
    filename: recorded.filename,
    byte_size: recorded.byte_size,
    checksum: checksumBase64,
    content_type: recorded.content_type,
    url: signed.url,
    key: recorded.key,
    signed_id: await signUploadId(await signingKey(c), recorded.id),
    method: 'PUT' as const,
    headers: signed.headers,
  }, 200)
})

/** GET /files/{key}: an attachment's file (or a redirect to it). The key is the capability. */
uploads.get('/files/*', async (c) => {
  // c.req.path is already decoded; a key only ever holds [0-9a-f/A-Za-z._-], so anything else is no file.
  const key = c.req.path.slice('/files/'.length)
  if (!/^[0-9a-f]{32}\/(?!\.+$)[A-Za-z0-9._-]{1,100}$/.test(key)) return c.json({ error: 'No such file.' }, 404)
  // Served only while its upload exists: a file whose upload was removed (its todo, comment or
  // message deleted, its member's account deleted) is gone at once, not when the storage worker
  // gets to its queued deletion (app.file_deletions) a minute or more later.
  // Shown inline only when its bytes were read and are the raster image or video it was declared
  // as (sniffed_type): an HTML page PUT as image/png is a download, even before it is attached.
  const [live] = await inTurn(c, () => c.var.deps.sql`
    select u.content_type, u.sniffed_type from app.uploads u where u.key = ${key} and u.stored_at is not null`)
  if (!live) return c.json({ error: 'No such file.' }, 404)
  const inline = live.sniffed_type === live.content_type && servedInline(String(live.content_type))
  return await c.var.deps.storage.fileResponse(key, inline)
})
