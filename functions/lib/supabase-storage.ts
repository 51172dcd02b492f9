// Supabase Storage as the FileStorage of production: signed upload URLs from the Storage API
// (the client PUTs straight to Supabase), and signed download URLs for GET /files/{key}.
// Runtime-neutral (fetch only), so the Edge Function uses it as is.
import { EXPORT_KEY_PATTERN, type FileStorage, type SignedUpload, type UploadToSign } from './storage.ts'

export const UPLOADS_BUCKET = 'uploads'
/** Data export archives: private, JSON only (the migration and supabase/config.toml declare it). */
export const EXPORTS_BUCKET = 'exports'
/** How long the link an archive's download redirects to stays valid. */
export const EXPORT_REDIRECT_SECONDS = 60

export interface SupabaseStorageOptions {
  /** https://<ref>.supabase.co */
  supabaseUrl: string
  /** The service role key: the function signs on behalf of members. */
  serviceRoleKey: string
  /** Seconds a download link stays valid (GET /files/{key} redirects to one). */
  downloadSeconds?: number
  fetch?: typeof fetch
  /**
   * Where clients reach Storage (the signed upload and download URLs handed out): default
   * supabaseUrl. `npm start` calls its own Storage API in-process and hands out PUBLIC_URL's.
   */
  publicUrl?: string | (() => string)
  /** How long one call to Storage may take (an export's upload excepted, which streams); default 30 s. */
  timeoutMs?: number
}

const objectPath = (key: string) => `${UPLOADS_BUCKET}/${key.split('/').map(encodeURIComponent).join('/')}`
/** An archive's key is `exports/<name>`: the bucket, then the object's name in it. */
const exportName = (key: string) => key.slice(`${EXPORTS_BUCKET}/`.length)
const exportPath = (key: string) => `${EXPORTS_BUCKET}/${exportName(key).split('/').map(encodeURIComponent).join('/')}`

/** Counts the bytes that pass, for the archive's size. */
function counting(body: ReadableStream<Uint8Array>): { stream: ReadableStream<Uint8Array>; bytes: () => number } {
  let bytes = 0
  const stream = body.pipeThrough(new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      bytes += chunk.byteLength
      controller.enqueue(chunk)
    },
  }))
  return { stream, bytes: () => bytes }
}

export function supabaseStorage(options: SupabaseStorageOptions): FileStorage {
  const base = options.supabaseUrl.replace(/\/+$/, '') + '/storage/v1'
  const publicBase = () => {
    const url = typeof options.publicUrl === 'function' ? options.publicUrl() : options.publicUrl
    return url ? url.replace(/\/+$/, '') + '/storage/v1' : base
  }
  const send = options.fetch ?? fetch
  const timeoutMs = options.timeoutMs ?? 30_000
  // Every call bounded: a Storage that hangs fails the request or the worker's pass, never holds it.
  const request = (url: string, init: RequestInit = {}) => send(url, { signal: AbortSignal.timeout(timeoutMs), ...init })
  const headers = { authorization: `Bearer ${options.serviceRoleKey}`, apikey: options.serviceRoleKey, 'content-type': 'application/json' }

  return {
    async signUpload(upload: UploadToSign): Promise<SignedUpload> {
      // Never with `x-upsert: true`: Storage puts the flag into the upload token, and without it
      // a PUT to an object that exists is refused, so one signed URL stores one file, once.
      const response = await request(`${base}/object/upload/sign/${objectPath(upload.key)}`, { method: 'POST', headers, body: '{}' })
      if (!response.ok) throw new Error(`Supabase Storage refused to sign an upload: ${response.status} ${await response.text()}`)
      const { url } = (await response.json()) as { url: string }
      return {
        url: publicBase() + url,
        headers: { 'Content-Type': upload.contentType, 'Content-MD5': upload.checksumBase64 },
      }
    },

    async deleteFiles(keys: string[]): Promise<void> {
      // Export archives (exports/…) live in their own bucket; everything else is an upload.
      const archives = keys.filter((key) => EXPORT_KEY_PATTERN.test(key)).map(exportName)
      const files = keys.filter((key) => !EXPORT_KEY_PATTERN.test(key))
      for (const [bucket, prefixes] of [[UPLOADS_BUCKET, files], [EXPORTS_BUCKET, archives]] as const) {
        if (prefixes.length === 0) continue
        const response = await request(`${base}/object/${bucket}`, { method: 'DELETE', headers, body: JSON.stringify({ prefixes }) })
        if (!response.ok) throw new Error(`Supabase Storage refused to delete files: ${response.status} ${await response.text()}`)
      }
    },

    async writeExport(key: string, body: ReadableStream<Uint8Array>): Promise<number> {
      // Streamed as the worker pages through the data (a request body stream: `duplex: 'half'`,
      // which Node's and Deno's fetch both take), so the archive is never held whole.
      const counted = counting(body)
      const response = await send(`${base}/object/${exportPath(key)}`, {
        method: 'POST',
        headers: { authorization: headers.authorization, apikey: headers.apikey, 'content-type': 'application/json', 'cache-control': 'no-store' },
        body: counted.stream,
        duplex: 'half',
      } as RequestInit)
      if (!response.ok) throw new Error(`Supabase Storage refused an export archive: ${response.status} ${await response.text()}`)
      return counted.bytes()
    },

    async exportResponse(key: string): Promise<Response> {
      // Signed per download, for a minute (the API found the export live just now): a link
      // signed for the archive's 24 hours would outlive its export, its account's deletion among
      // them, until the storage worker deleted the object.
      const response = await request(`${base}/object/sign/${exportPath(key)}`, {
        method: 'POST', headers, body: JSON.stringify({ expiresIn: EXPORT_REDIRECT_SECONDS }),
      })
      if (response.status === 400 || response.status === 404) {
        return new Response(JSON.stringify({ error: 'No such export: it expired or was deleted.' }), { status: 404, headers: { 'content-type': 'application/json' } })
      }
      if (!response.ok) throw new Error(`Supabase Storage refused to sign an export download: ${response.status} ${await response.text()}`)
      const { signedURL } = (await response.json()) as { signedURL: string }
      // Always a download (Content-Disposition: attachment), never shown on the API's origin.
      return new Response(null, { status: 302, headers: { location: `${publicBase()}${signedURL}&download=todo-export.json`, 'cache-control': 'no-store' } })
    },

    async readStart(key: string, bytes: number): Promise<Uint8Array | null> {
      const response = await request(`${base}/object/authenticated/${objectPath(key)}`, {
        headers: { ...headers, range: `bytes=0-${bytes - 1}` },
      })
      if (response.status === 400 || response.status === 404) return null
      if (!response.ok) throw new Error(`Supabase Storage refused to read a file: ${response.status}`)
      return new Uint8Array(await response.arrayBuffer())
    },

    async fileResponse(key: string, inline: boolean): Promise<Response> {
      const response = await request(`${base}/object/sign/${objectPath(key)}`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ expiresIn: options.downloadSeconds ?? 3600 }),
      })
      if (response.status === 400 || response.status === 404) {
        return new Response(JSON.stringify({ error: 'No such file.' }), { status: 404, headers: { 'content-type': 'application/json' } })
      }
      if (!response.ok) throw new Error(`Supabase Storage refused to sign a download: ${response.status}`)
      const { signedURL } = (await response.json()) as { signedURL: string }
      // Storage answers on the API's origin (<ref>.supabase.co): whatever is not a raster image
      // or a video whose bytes were read and found to be one is sent with Content-Disposition:
      // attachment (Storage's `download` parameter).
      const location = publicBase() + signedURL + (inline ? '' : '&download=')
      return new Response(null, { status: 302, headers: { location, 'cache-control': 'private, max-age=60' } })
    },
  }
}
