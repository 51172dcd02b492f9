// The part of Supabase Storage's REST API (/storage/v1/object/…) that functions/lib/supabase-storage.ts
// uses, served over local files, so that the production storage code path runs off Supabase too
// (`npm run start:edge` over HTTP, `npm start` and the tests in-process: localSupabaseStorage). test/storage-api.test.ts
// drives it with the official client, @supabase/storage-js.
//
// What it serves, as Storage does (https://github.com/supabase/storage):
//   POST   /object/upload/sign/{bucket}/{name}  signed upload URL: a JWT {owner, url, upsert, scope: upload}
//                                               for two hours (src/storage/object.ts, signUploadObjectUrl;
//                                               storage-js: "valid for 2 hours")
//   PUT    /object/upload/sign/{bucket}/{name}?token=  the upload to it (src/http/routes/object/uploadSignedObject.ts)
//   POST   /object/{bucket}/{name}              an upload with the service role (x-upsert: true to replace)
//   POST   /object/sign/{bucket}/{name}         {expiresIn}: a signed download URL (scope download)
//   GET    /object/sign/{bucket}/{name}?token=[&download=]  the file through it
//   GET    /object/authenticated/{bucket}/{name}, GET|HEAD /object/{bucket}/{name}  the file, service role, Range
//   GET    /object/info/{bucket}/{name}         the object's metadata
//   DELETE /object/{bucket}  {prefixes}         removes objects, answers the removed rows
// An object is a file under `dir` (<bucket>/<name>) and its storage.objects row, with the metadata
// Storage records (eTag = the MD5, size, mimetype = the upload's Content-Type, cacheControl, …),
// which is what our SQL reads. The bucket's file_size_limit and allowed_mime_types (storage.buckets)
// are enforced on every upload, as Storage does.
//
// What the client does not show, taken from Storage's source:
//   * errors are HTTP 400 for every 4xx (500 stays 500), the real status in the body as a string:
//     {"statusCode": "404", "error": "NoSuchKey", "message": "Object not found"}
//     (src/internal/errors/storage-error.ts: userStatusCode; src/internal/errors/codes.ts: the codes);
//   * a signed token is checked for its scope and object (InvalidSignature), an expired one is
//     refused as an invalid JWT ("jwt expired");
//   * without upsert an existing object is not replaced (409 Duplicate, "The resource already exists");
//   * Content-MD5 is not checked (our SQL checks the eTag when an upload is attached).
// Not served: multipart/form-data bodies (the app's clients PUT the bytes), resumable (TUS)
// uploads, image transformations, listing, moving and copying.
import { createHash, randomBytes } from 'node:crypto'
import { createReadStream, createWriteStream } from 'node:fs'
import { mkdir, readdir, rename, rm, stat } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { Readable } from 'node:stream'
import { finished } from 'node:stream/promises'
import { Hono, type Context } from 'hono'
import { type JWTPayload, SignJWT, errors as joseErrors, jwtVerify } from 'jose'
import type { Sql } from 'postgres'
import { transaction } from '../functions/lib/sql.ts'
import { supabaseStorage } from '../functions/lib/supabase-storage.ts'
import type { FileStorage } from '../functions/lib/storage.ts'

export interface StorageApiOptions {
  /** Where the files are: <dir>/<bucket>/<name> (DATA_DIR/storage). */
  dir: string
  /** The project's JWT secret: it verifies the service role key and signs the URLs' tokens. */
  jwtSecret: string
  sql: Sql
  /** The project-wide ceiling on one object (supabase/config.toml [storage] file_size_limit). Default 100 MiB. */
  fileSizeLimit?: number
  /** An upload that sends nothing for this long is stopped and discarded. Default 30 s. */
  idleTimeoutMs?: number
}

export interface StorageApi {
  /** The routes, under /storage/v1/object/. */
  routes: Hono
  /** A service role key for this project (a JWT with role service_role, signed with the JWT secret). */
  serviceRoleKey(): Promise<string>
}

/** How long a signed upload URL stays valid: Storage's default (uploadSignedUrlExpirationTime, 2 hours). */
export const SIGNED_UPLOAD_SECONDS = 2 * 60 * 60
/** At most this many names in one DELETE here (Storage bounds it per project: enforceDeleteObjectsLimit). */
export const DELETE_LIMIT = 1000
const PREFIX = '/storage/v1/object/'
const BUCKET = /^[a-z0-9][a-z0-9_.-]{0,62}$/
const INCOMING_SUFFIX = '.part'
/** File system errors that say the name cannot be a file under the bucket's folder. */
const UNSTORABLE_NAME = new Set(['ENAMETOOLONG', 'ENOTDIR', 'EISDIR', 'EEXIST', 'ENOTEMPTY'])
const encoder = new TextEncoder()

/** A Storage error as the service renders it (HTTP 400 for every 4xx; the real status in the body). */
export function storageError(status: number, code: string, message: string, error?: string): Response {
  return new Response(JSON.stringify({ statusCode: String(status), error: error ?? code, message }), {
    status: status >= 500 ? 500 : 400,
    headers: { 'content-type': 'application/json; charset=utf-8' },
  })
}

const notFound = () => storageError(404, 'NoSuchKey', 'Object not found', 'not_found')
const invalidKey = (name: string) => storageError(400, 'InvalidKey', `Invalid key: ${name}`)
const accessDenied = (message = 'Access denied') => storageError(403, 'AccessDenied', message, 'Unauthorized')

/**
 * A database error as Storage answers it (src/storage/database/errors.ts, DBError.fromDBError):
 * 42501 is AccessDenied with the database's message (a trigger's refusal reaches the client as
 * written), 23505 ResourceAlreadyExists, anything else a 500.
 */
function databaseRefusal(err: unknown): Response {
  const error = err as { code?: string; message?: string }
  if (error.code === '42501') {
    const message = error.message?.includes('row-level security') ? 'new row violates row-level security policy' : error.message ?? 'Access denied'
    return storageError(403, 'AccessDenied', message, 'Unauthorized')
  }
  if (error.code === '23505') return storageError(409, 'ResourceAlreadyExists', 'The resource already exists', 'Duplicate')
  // The operator's to see (the client gets only the code): a 500 here is a fault, not a refusal.
  console.error(`storage: database error ${error.code ?? 'unknown'}: ${error.message ?? String(err)}`)
  return storageError(500, 'DatabaseError', `database error, code: ${error.code ?? 'unknown'}`, 'internal')
}

/**
 * A Range header of one byte range (RFC 9110 14.1.2: `a-b`, `a-`, or the suffix `-n`) against a
 * file of `size` bytes: the bytes to send, 'unsatisfiable', or null to send the whole file (no
 * header, several ranges, or one that is not a byte range, which a server may ignore).
 */
export function byteRange(header: string | undefined, size: number): { start: number; end: number } | 'unsatisfiable' | null {
  const match = /^bytes=(\d*)-(\d*)$/.exec(header?.trim() ?? '')
  if (!match || (match[1] === '' && match[2] === '')) return null
  if (match[1] === '') {
    const suffix = Number(match[2])
    if (suffix === 0 || size === 0) return 'unsatisfiable'
    return { start: Math.max(0, size - suffix), end: size - 1 }
  }
  const start = Number(match[1])
  const end = match[2] === '' ? size - 1 : Math.min(Number(match[2]), size - 1)
  if (start >= size) return 'unsatisfiable'
  if (end < start) return null
  return { start, end }
}

/** A name's segments, decoded; null when one is empty, `.`, `..`, or not decodable (no path leaves its bucket). */
function objectName(encoded: string): string | null {
  if (encoded.length === 0 || encoded.length > 1024) return null
  const segments: string[] = []
  for (const raw of encoded.split('/')) {
    let segment: string
    try {
      segment = decodeURIComponent(raw)
    } catch {
      return null
    }
    if (segment === '' || segment === '.' || segment === '..' || /[\\/\0]/.test(segment)) return null
    segments.push(segment)
  }
  return segments.join('/')
}

const encodeName = (name: string) => name.split('/').map(encodeURIComponent).join('/')

interface Bucket { id: string; file_size_limit: string | number | null; allowed_mime_types: string[] | null }
interface ObjectRow { id: string; name: string; bucket_id: string; owner: string | null; metadata: Record<string, unknown> | null; created_at: Date; updated_at: Date; last_accessed_at: Date }

/**
 * Whether a bucket takes a Content-Type, as Storage decides it (Uploader.validateMimeType in
 * src/storage/uploader.ts): the header as sent, split at `/`, type and subtype compared exactly
 * (a `type/*` entry takes any subtype). Parameters are not removed: `image/png; charset=binary`
 * is not `image/png` there, so it is refused here too.
 */
function typeAllowed(type: string, allowed: string[] | null): boolean {
  if (!allowed) return true
  const requested = type.split('/')
  if (requested.length < 2) return false
  const [kind, subtype] = requested
  return allowed.some((entry) => {
    const [allowedKind, allowedSubtype] = entry.split('/')
    return allowedKind === kind && (allowedSubtype === '*' || allowedSubtype === subtype)
  })
}

export function storageApi(options: StorageApiOptions): StorageApi {
  const secret = encoder.encode(options.jwtSecret)
  const globalLimit = options.fileSizeLimit ?? 100 * 1024 * 1024
  const idleTimeoutMs = options.idleTimeoutMs ?? 30_000
  const incomingDir = join(options.dir, '.incoming')
  // What uploads cut off by a crash left (every failure the server sees deletes its own): an
  // upload under way writes at least every idleTimeoutMs, so a file untouched for an hour is dead.
  const sweep = async () => {
    for (const file of await readdir(incomingDir).catch(() => [] as string[])) {
      if (!file.endsWith(INCOMING_SUFFIX)) continue
      const info = await stat(join(incomingDir, file)).catch(() => null)
      if (info && Date.now() - info.mtimeMs > Math.max(60 * 60_000, 2 * idleTimeoutMs)) await rm(join(incomingDir, file), { force: true }).catch(() => {})
    }
  }
  void sweep()
  setInterval(() => void sweep(), 60 * 60_000).unref()
  const pathOf = (bucket: string, name: string) => join(options.dir, bucket, ...name.split('/'))
  let serviceKey: Promise<string> | null = null

  async function sign(claims: JWTPayload, seconds: number): Promise<string> {
    return await new SignJWT(claims).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).setIssuedAt()
      .setExpirationTime(Math.floor(Date.now() / 1000) + seconds).sign(secret)
  }

  /** The service role: a JWT with role service_role in Authorization (or apikey), signed with the project's secret. */
  async function serviceRole(c: Context): Promise<Response | null> {
    const token = c.req.header('authorization')?.replace(/^Bearer\s+/i, '') || c.req.header('apikey') || ''
    if (!token) return accessDenied('headers must have required property \'authorization\'')
    try {
      const { payload } = await jwtVerify(token, secret, { algorithms: ['HS256'] })
      if (payload.role !== 'service_role') return accessDenied('This local Storage serves the service role only.')
      return null
    } catch (err) {
      return storageError(400, 'InvalidJWT', err instanceof joseErrors.JWTExpired ? 'jwt expired' : (err as Error).message || 'Invalid JWT')
    }
  }

  /** A signed URL's token for this object and scope, or the error Storage answers. */
  async function verifySigned(token: string | undefined, bucket: string, name: string, scope: 'upload' | 'download'): Promise<{ upsert: boolean; owner?: string } | Response> {
    if (!token) return storageError(400, 'InvalidRequest', 'querystring must have required property \'token\'')
    let payload: JWTPayload
    try {
      payload = (await jwtVerify(token, secret, { algorithms: ['HS256'] })).payload
    } catch (err) {
      return storageError(400, 'InvalidJWT', err instanceof joseErrors.JWTExpired ? 'jwt expired' : 'Invalid JWT')
    }
    if (payload.scope !== scope) return storageError(400, 'InvalidSignature', `Token is not scoped for ${scope}`)
    if (payload.url !== `${bucket}/${name}`) return storageError(400, 'InvalidSignature', 'Invalid signature')
    return { upsert: payload.upsert === true, owner: typeof payload.owner === 'string' ? payload.owner : undefined }
  }

  async function findBucket(id: string): Promise<Bucket | null> {
    if (!BUCKET.test(id)) return null
    const [row] = await options.sql<Bucket[]>`select id, file_size_limit, allowed_mime_types from storage.buckets where id = ${id}`
    return row ?? null
  }

  async function findObject(bucket: string, name: string): Promise<ObjectRow | null> {
    const [row] = await options.sql<ObjectRow[]>`select * from storage.objects where bucket_id = ${bucket} and name = ${name}`
    return row ?? null
  }

  /**
   * Stores a request's body as object `name` of `bucket`: checked against the bucket's limits,
   * streamed to a temporary file (MD5 and size counted), then recorded in storage.objects and
   * moved into place. Without upsert an existing object stays (409 Duplicate).
   */
  /**
   * Storage's probe of a write (Uploader.canUpload → testPermission): the row inserted (or upserted)
   * without metadata in a transaction that is rolled back; a database refusal answered as Storage
   * answers it (DBError.fromDBError), else null.
   */
  async function probeWrite(bucketId: string, name: string, upsert: boolean, owner?: string): Promise<Response | null> {
    const rolledBack = new Error('probe')
    try {
      await transaction(options.sql, async (tx) => {
        if (upsert) {
          await tx`insert into storage.objects (bucket_id, name, owner) values (${bucketId}, ${name}, ${owner ?? null})
                   on conflict (bucket_id, name) do update set metadata = null, owner = excluded.owner, updated_at = now()`
        } else {
          await tx`insert into storage.objects (bucket_id, name, owner) values (${bucketId}, ${name}, ${owner ?? null})`
        }
        throw rolledBack
      })
    } catch (err) {
      if (err === rolledBack) return null
      return databaseRefusal(err)
    }
    return null
  }

  async function upload(c: Context, bucketId: string, name: string, upsert: boolean, owner?: string): Promise<Response | ObjectRow> {
    const bucket = await findBucket(bucketId)
    if (!bucket) return storageError(404, 'NoSuchBucket', 'Bucket not found', 'Bucket not found')
    const contentType = c.req.header('content-type') || 'application/octet-stream'
    if (/^multipart\/form-data/i.test(contentType)) {
      return storageError(400, 'InvalidRequest', 'This local Storage takes the file as the request body, not as multipart/form-data.')
    }
    if (!typeAllowed(contentType, bucket.allowed_mime_types)) {
      return storageError(415, 'InvalidMimeType', `mime type ${contentType} is not supported`, 'invalid_mime_type')
    }
    const bucketLimit = bucket.file_size_limit === null ? null : Number(bucket.file_size_limit)
    const limit = bucketLimit !== null && bucketLimit > 0 && bucketLimit < globalLimit ? bucketLimit : globalLimit
    const tooLarge = () => storageError(413, 'EntityTooLarge', 'The object exceeded the maximum allowed size', 'Payload too large')
    const declared = c.req.header('content-length')
    if (declared !== undefined && Number(declared) > limit) return tooLarge()
    // Storage's permission probe before it takes a byte (Uploader.canUpload: the row inserted, or
    // upserted, without metadata in a transaction rolled back): an existing object without upsert,
    // and whatever the database's triggers refuse (app.tg_storage_objects__bind_upload), stop here.
    const probe = await probeWrite(bucketId, name, upsert, owner)
    if (probe) return probe
    const body = c.req.raw.body
    if (!body) return storageError(400, 'InvalidRequest', 'No content provided')

    await mkdir(incomingDir, { recursive: true })
    const incoming = join(incomingDir, `${randomBytes(12).toString('hex')}${INCOMING_SUFFIX}`)
    let kept = false
    try {
      const md5 = createHash('md5')
      const out = createWriteStream(incoming)
      const outFailed = new Promise<never>((_, reject) => out.once('error', reject))
      outFailed.catch(() => {})
      const reader = body.getReader()
      let size = 0
      let outcome: 'complete' | 'too-large' | 'idle' | 'aborted' = 'complete'
      try {
        for (;;) {
          let timer: ReturnType<typeof setTimeout> | undefined
          const idle = new Promise<'idle'>((resolve) => (timer = setTimeout(() => resolve('idle'), idleTimeoutMs)))
          let next: ReadableStreamReadResult<Uint8Array> | 'idle'
          try {
            next = await Promise.race([reader.read(), idle, outFailed])
          } catch {
            outcome = 'aborted'
            break
          } finally {
            clearTimeout(timer)
          }
          if (next === 'idle') {
            outcome = 'idle'
            break
          }
          if (next.done) break
          size += next.value.byteLength
          if (size > limit) {
            outcome = 'too-large'
            break
          }
          md5.update(next.value)
          if (!out.write(next.value)) await Promise.race([new Promise<void>((resolve) => out.once('drain', () => resolve())), outFailed])
        }
      } finally {
        reader.cancel().catch(() => {})
        out.end()
        await finished(out).catch(() => {})
      }
      if (outcome === 'too-large') return tooLarge()
      if (outcome === 'idle') return storageError(408, 'InvalidRequest', `No data arrived for ${Math.round(idleTimeoutMs / 1000)} seconds; the upload was stopped.`)
      if (outcome === 'aborted') return storageError(400, 'InvalidRequest', 'The upload was interrupted.')

      const etag = md5.digest('hex')
      const metadata = {
        eTag: `"${etag}"`, size, mimetype: contentType, cacheControl: c.req.header('cache-control') || 'no-cache',
        lastModified: new Date().toISOString(), contentLength: size, httpStatusCode: 200,
      }
      // Recorded as Storage's completeUpload does, always as an upsert (the probe refused an existing
      // object without upsert; two writes racing past it both land, the later replacing, unless a
      // trigger refuses: ours on the uploads bucket does). (sql.json: a JSON text bound to ::jsonb
      // would be stored as one jsonb string, not the object.)
      // Recorded and moved into place in one transaction, as Storage's completeUpload records in
      // one: a failed move rolls the row back, with what a trigger set in it (the upload's
      // stored_at), so the same URL may be PUT again.
      const target = pathOf(bucketId, name)
      const moveFailed = new Error('move failed')
      let moveError: unknown = null
      let row: ObjectRow | undefined
      try {
        row = await transaction(options.sql, async (tx) => {
          const [inserted] = await tx<ObjectRow[]>`
            insert into storage.objects (bucket_id, name, owner, metadata) values (${bucketId}, ${name}, ${owner ?? null}, ${tx.json(metadata)})
            on conflict (bucket_id, name) do update set metadata = excluded.metadata, owner = excluded.owner, updated_at = now()
            returning *`
          if (!inserted) return undefined
          try {
            await mkdir(dirname(target), { recursive: true })
            await rename(incoming, target)
          } catch (err) {
            moveError = err
            throw moveFailed
          }
          return inserted
        })
      } catch (err) {
        if (err !== moveFailed) return databaseRefusal(err)
        // A name these files cannot hold (a part over 255 bytes; a part that is a file here and a
        // folder there, which Storage's flat keys allow): the client's to change, not a 500.
        if (UNSTORABLE_NAME.has((moveError as NodeJS.ErrnoException).code ?? '')) return invalidKey(name)
        throw moveError
      }
      if (!row) return storageError(409, 'ResourceAlreadyExists', 'The resource already exists', 'Duplicate')
      kept = true
      return row
    } finally {
      if (!kept) await rm(incoming, { force: true }).catch(() => {})
    }
  }

  /** An object's bytes (all, or the range asked for), with the headers Storage sends. */
  async function serve(c: Context, bucket: string, name: string, download?: string): Promise<Response> {
    const object = await findObject(bucket, name)
    const path = pathOf(bucket, name)
    const info = object ? await stat(path).catch(() => null) : null
    if (!object || !info) return notFound()
    const metadata = object.metadata ?? {}
    const headers: Record<string, string> = {
      'content-type': String(metadata.mimetype ?? 'application/octet-stream'),
      'cache-control': String(metadata.cacheControl ?? 'no-cache'),
      'last-modified': new Date(String(metadata.lastModified ?? info.mtime.toISOString())).toUTCString(),
      'accept-ranges': 'bytes',
    }
    if (metadata.eTag) headers.etag = String(metadata.eTag)
    if (download !== undefined) {
      const filename = download || name.split('/').pop()!
      headers['content-disposition'] = `attachment; filename=${encodeURIComponent(filename)}; filename*=UTF-8''${encodeURIComponent(filename)}`
    }
    // A client's cached copy (If-None-Match with the eTag): 304, as Storage passes S3's on.
    const known = c.req.header('if-none-match')
    if (known && metadata.eTag && known.split(',').map((tag) => tag.trim().replace(/^W\//, '')).includes(String(metadata.eTag))) {
      return new Response(null, { status: 304, headers })
    }
    // HEAD (storage-js's exists()): the headers only, the file left unopened.
    if (c.req.method === 'HEAD') return new Response(null, { status: 200, headers: { ...headers, 'content-length': String(info.size) } })
    const range = byteRange(c.req.header('range'), info.size)
    if (range === 'unsatisfiable') {
      // S3 answers 416 InvalidRange, which Storage passes on as its error: HTTP 400, the 416 in the
      // body (StorageBackendError.fromError keeps the S3 status as httpStatusCode; the user status
      // of every 4xx is 400, src/internal/errors/storage-error.ts).
      return storageError(416, 'InvalidRange', 'The requested range is not satisfiable', 'InvalidRange')
    }
    if (range) {
      headers['content-range'] = `bytes ${range.start}-${range.end}/${info.size}`
      headers['content-length'] = String(range.end - range.start + 1)
      return new Response(Readable.toWeb(createReadStream(path, { start: range.start, end: range.end })) as ReadableStream, { status: 206, headers })
    }
    headers['content-length'] = String(info.size)
    return new Response(Readable.toWeb(createReadStream(path)) as ReadableStream, { status: 200, headers })
  }

  /** {bucket, name} of a path after `rest`, or an error answer. */
  function target(rest: string): { bucket: string; name: string } | Response {
    const slash = rest.indexOf('/')
    if (slash <= 0) return storageError(404, 'NoSuchKey', 'Object not found', 'not_found')
    const bucket = rest.slice(0, slash)
    const name = objectName(rest.slice(slash + 1))
    if (!BUCKET.test(bucket)) return storageError(404, 'NoSuchBucket', 'Bucket not found', 'Bucket not found')
    if (name === null) return invalidKey(rest.slice(slash + 1))
    return { bucket, name }
  }

  const routes = new Hono()
  routes.all(`${PREFIX}*`, async (c) => {
    // The path as sent (still percent-encoded: a name's segments are decoded once, in objectName).
    const rest = new URL(c.req.url).pathname.slice(PREFIX.length)
    const method = c.req.method

    // Signed upload URL: asked with the service role, used by anyone holding it.
    if (rest.startsWith('upload/sign/')) {
      const at = target(rest.slice('upload/sign/'.length))
      if (at instanceof Response) return at
      if (method === 'POST') {
        const denied = await serviceRole(c)
        if (denied) return denied
        if (!(await findBucket(at.bucket))) return storageError(404, 'NoSuchBucket', 'Bucket not found', 'Bucket not found')
        const upsert = c.req.header('x-upsert') === 'true'
        // Storage probes the write when it signs, too (ObjectStorage.signUploadObjectUrl → canUpload).
        const probe = await probeWrite(at.bucket, at.name, upsert)
        if (probe) return probe
        const token = await sign({ url: `${at.bucket}/${at.name}`, upsert, scope: 'upload' }, SIGNED_UPLOAD_SECONDS)
        return c.json({ url: `/object/upload/sign/${at.bucket}/${encodeName(at.name)}?token=${token}`, token })
      }
      if (method === 'PUT') {
        const claims = await verifySigned(c.req.query('token'), at.bucket, at.name, 'upload')
        if (claims instanceof Response) return claims
        const stored = await upload(c, at.bucket, at.name, claims.upsert, claims.owner)
        if (stored instanceof Response) return stored
        return c.json({ Key: `${at.bucket}/${at.name}` })
      }
    }

    // Signed download URL: signed with the service role, read by anyone holding it.
    if (rest.startsWith('sign/')) {
      const at = target(rest.slice('sign/'.length))
      if (at instanceof Response) return at
      if (method === 'POST') {
        const denied = await serviceRole(c)
        if (denied) return denied
        const body = (await c.req.json().catch(() => null)) as { expiresIn?: unknown } | null
        const expiresIn = body?.expiresIn
        if (typeof expiresIn !== 'number' || !Number.isInteger(expiresIn) || expiresIn < 1) {
          return storageError(400, 'InvalidRequest', 'body/expiresIn must be an integer of at least 1')
        }
        if (!(await findObject(at.bucket, at.name))) return notFound()
        const token = await sign({ url: `${at.bucket}/${at.name}`, scope: 'download' }, expiresIn)
        return c.json({ signedURL: `/object/sign/${at.bucket}/${encodeName(at.name)}?token=${token}` })
      }
      if (method === 'GET' || method === 'HEAD') {
        const claims = await verifySigned(c.req.query('token'), at.bucket, at.name, 'download')
        if (claims instanceof Response) return claims
        return serve(c, at.bucket, at.name, c.req.query('download'))
      }
    }

    if (rest.startsWith('info/') && method === 'GET') {
      const denied = await serviceRole(c)
      if (denied) return denied
      const at = target(rest.slice('info/'.length).replace(/^authenticated\//, ''))
      if (at instanceof Response) return at
      const object = await findObject(at.bucket, at.name)
      if (!object) return notFound()
      const metadata = object.metadata ?? {}
      return c.json({
        id: object.id, name: object.name, version: null, bucket_id: object.bucket_id,
        size: metadata.size ?? null, content_type: metadata.mimetype ?? null, cache_control: metadata.cacheControl ?? null,
        etag: metadata.eTag ?? null, metadata: null, last_modified: metadata.lastModified ?? object.updated_at, created_at: object.created_at,
      })
    }

    if (rest.startsWith('authenticated/') && (method === 'GET' || method === 'HEAD')) {
      const denied = await serviceRole(c)
      if (denied) return denied
      const at = target(rest.slice('authenticated/'.length))
      if (at instanceof Response) return at
      return serve(c, at.bucket, at.name)
    }

    // DELETE /object/{bucket} {prefixes}: the objects named (exact names, as Storage treats them).
    if (method === 'DELETE' && /^[^/]+\/?$/.test(rest)) {
      const denied = await serviceRole(c)
      if (denied) return denied
      const bucket = rest.replace(/\/$/, '')
      if (!(await findBucket(bucket))) return storageError(404, 'NoSuchBucket', 'Bucket not found', 'Bucket not found')
      const body = (await c.req.json().catch(() => null)) as { prefixes?: unknown } | null
      const prefixes = body?.prefixes
      if (!Array.isArray(prefixes) || prefixes.length < 1 || !prefixes.every((p) => typeof p === 'string')) {
        return storageError(400, 'InvalidRequest', 'body/prefixes must be an array of at least one name')
      }
      if (prefixes.length > DELETE_LIMIT) return storageError(400, 'InvalidRequest', `At most ${DELETE_LIMIT} names in one request.`)
      const names = (prefixes as string[]).filter((name) => objectName(encodeName(name)) === name)
      // As Storage deletes: with storage.allow_delete_query set for its transaction (storage.protect_delete).
      const deleted = names.length === 0 ? [] : await transaction(options.sql, async (tx) => {
        await tx`select set_config('storage.allow_delete_query', 'true', true)`
        return await tx<ObjectRow[]>`delete from storage.objects where bucket_id = ${bucket} and name = any (${names}) returning *`
      })
      for (const row of deleted) await rm(pathOf(bucket, row.name), { force: true })
      return c.json(deleted)
    }

    // The service role's own upload and read of an object.
    {
      const at = target(rest)
      if (at instanceof Response) return at
      if (method === 'POST' || method === 'PUT') {
        const denied = await serviceRole(c)
        if (denied) return denied
        // POST creates (x-upsert: true replaces); PUT replaces.
        const stored = await upload(c, at.bucket, at.name, method === 'PUT' || c.req.header('x-upsert') === 'true')
        if (stored instanceof Response) return stored
        return c.json({ Id: stored.id, Key: `${at.bucket}/${at.name}` })
      }
      if (method === 'GET' || method === 'HEAD') {
        const denied = await serviceRole(c)
        if (denied) return denied
        return serve(c, at.bucket, at.name)
      }
    }
    return storageError(404, 'NotFound', `Route ${method}:${new URL(c.req.url).pathname} not found`, 'Not Found')
  })

  return {
    routes,
    serviceRoleKey: () => (serviceKey ??= new SignJWT({ role: 'service_role', iss: 'supabase' })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).setIssuedAt()
      .setExpirationTime(Math.floor(Date.now() / 1000) + 10 * 365 * 24 * 3600).sign(secret)),
  }
}

/**
 * The app's FileStorage on this machine: the production adapter (functions/lib/supabase-storage.ts)
 * over this Storage API, called in-process (no socket back to ourselves, whatever HOST is), handing
 * out URLs under `publicUrl` (where the API's server serves `routes`). What `npm start` and the
 * tests use, so the Storage code path of production runs there too.
 */
export async function localSupabaseStorage(options: StorageApiOptions & { publicUrl: string | (() => string) }): Promise<{ api: StorageApi; storage: FileStorage }> {
  const api = storageApi(options)
  const storage = supabaseStorage({
    supabaseUrl: 'http://storage.internal',
    serviceRoleKey: await api.serviceRoleKey(),
    publicUrl: options.publicUrl,
    fetch: (async (input: RequestInfo | URL, init?: RequestInit) => await api.routes.fetch(new Request(input, init))) as typeof fetch,
  })
  return { api, storage }
}
