// Where uploaded files go. The app signs uploads and serves files through a FileStorage:
// Supabase Storage's REST API (functions/lib/supabase-storage.ts) on both entries, the hosted
// service in production and local/storage-api.ts under `npm start`, `start:edge` and the tests.
// Storage records stored files in storage.objects, where a trigger binds each to its upload
// (app.tg_storage_objects__bind_upload), which is what SQL checks before attaching an upload.
import { SignJWT, errors as joseErrors, jwtVerify } from 'jose'
import { toHex } from './tokens.ts'

export interface UploadToSign {
  key: string
  contentType: string
  /** MD5 of the file, base64 (the Content-MD5 header's form). */
  checksumBase64: string
  byteSize: number
}

export interface SignedUpload {
  /** Where the client PUTs the file. */
  url: string
  /** Headers the PUT must carry, exactly. */
  headers: Record<string, string>
}

export interface FileStorage {
  signUpload(upload: UploadToSign): Promise<SignedUpload>
  /**
   * The answer to GET /files/{key}: the file, or a redirect to it; shown in the browser only
   * when `inline` (a raster image or video whose bytes were read and are what was declared).
   */
  fileResponse(key: string, inline: boolean): Promise<Response>
  /** Deletes stored files; keys that are already gone are not an error. */
  deleteFiles(keys: string[]): Promise<void>
  /** The first `bytes` bytes of a stored file (to read image dimensions), or null when it is gone. */
  readStart(key: string, bytes: number): Promise<Uint8Array | null>
  /**
   * Stores a data export's archive (key: exportKey(), in the private `exports` bucket) from a
   * stream, never holding it whole; resolves to its size in bytes. Absent: exports are off.
   */
  writeExport?(key: string, body: ReadableStream<Uint8Array>): Promise<number>
  /**
   * The answer to GET /exports/{key}, asked only once the API found the export live (ready, within
   * its 24 hours, its account not deleted): the archive, or a redirect to a link that lasts a
   * minute (the bucket is private). Never a link of its own that outlives the export.
   */
  exportResponse?(key: string): Promise<Response>
}

/** Keys of export archives: they live in the `exports` bucket; deleteFiles routes them there. */
export const EXPORT_KEY_PATTERN = /^exports\/[0-9a-f]{32}\/export\.json$/

/** A new archive key: 128 random bits, so two attempts of one export never share a file. */
export function exportKey(): string {
  return `exports/${toHex(crypto.getRandomValues(new Uint8Array(16)))}/export.json`
}

const encoder = new TextEncoder()
const UPLOAD_AUDIENCE = 'upload'
/** How long a signed_id stays valid; unattached uploads are removed after the same time (the PUT URL is Storage's, 2 hours). */
export const UPLOAD_LIFETIME_SECONDS = 24 * 60 * 60

/** A key for upload signatures derived from the JWT secret, so one secret serves both purposes apart. */
export async function uploadSigningKey(jwtSecret: string): Promise<Uint8Array> {
  const key = await crypto.subtle.importKey('raw', encoder.encode(jwtSecret), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign'])
  return new Uint8Array(await crypto.subtle.sign('HMAC', key, encoder.encode('todo-sharing uploads')))
}

/** The signed_id of an upload: a short JWT naming it, so a client cannot attach an upload it invents. */
export async function signUploadId(key: Uint8Array, uploadId: string): Promise<string> {
  return await new SignJWT({})
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject(uploadId)
    .setAudience(UPLOAD_AUDIENCE)
    .setExpirationTime(Math.floor(Date.now() / 1000) + UPLOAD_LIFETIME_SECONDS)
    .sign(key)
}

export type SignedIdCheck = { ok: true; uploadId: string } | { ok: false; reason: 'expired' | 'invalid' }

export async function verifyUploadId(key: Uint8Array, signedId: string): Promise<SignedIdCheck> {
  try {
    const { payload } = await jwtVerify(signedId, key, { algorithms: ['HS256'], audience: UPLOAD_AUDIENCE })
    if (typeof payload.sub !== 'string' || !/^[0-9a-f-]{36}$/.test(payload.sub)) return { ok: false, reason: 'invalid' }
    return { ok: true, uploadId: payload.sub }
  } catch (err) {
    return { ok: false, reason: err instanceof joseErrors.JWTExpired ? 'expired' : 'invalid' }
  }
}
