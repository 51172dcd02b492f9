// Issue 30, item 3: the local Storage REST API (local/storage-api.ts) answers as Supabase Storage
// does, driven by the official client (@supabase/storage-js, through @supabase/supabase-js), and the
// production adapter (functions/lib/supabase-storage.ts) runs its whole code path against it.
import { createHash } from 'node:crypto'
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { serve, type ServerType } from '@hono/node-server'
import { createClient } from '@supabase/supabase-js'
import { SignJWT } from 'jose'
import WebSocket from 'ws'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { JWT_SECRET, type TestWorld, startWorld } from './support/app.ts'
import { type StorageApi, storageApi } from '../local/storage-api.ts'
import { supabaseStorage } from '../functions/lib/supabase-storage.ts'
import { createSql } from '../functions/lib/sql.ts'
import { exportKey } from '../functions/lib/storage.ts'
import { closeAfterUnreadBody } from '../local/node-http.ts'

let world: TestWorld
let api: StorageApi
let server: ServerType
let url: string
let dir: string
let serviceKey: string
const BUCKET = 'contract'

beforeAll(async () => {
  world = await startWorld()
  dir = await mkdtemp(join(tmpdir(), 'todo-storage-api-'))
  api = storageApi({ dir, jwtSecret: JWT_SECRET, sql: world.sql })
  url = await new Promise<string>((resolve) => {
    server = serve({ fetch: closeAfterUnreadBody(api.routes.fetch), hostname: '127.0.0.1', port: 0 }, (info) => resolve(`http://127.0.0.1:${info.port}`))
  })
  serviceKey = await api.serviceRoleKey()
  // The contract is Storage's, whatever the bucket: a bucket with the limits of `uploads` (whose
  // own objects are bound to the app's uploads by a trigger, tested below and in uploads.test.ts).
  await world.sql`insert into storage.buckets (id, name, public, file_size_limit, allowed_mime_types)
    select ${BUCKET}, ${BUCKET}, false, file_size_limit, allowed_mime_types from storage.buckets where id = 'uploads'`
})

afterAll(async () => {
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()))
  await world?.close()
  if (dir) await rm(dir, { recursive: true, force: true })
})

// Node 20 has no global WebSocket, and supabase-js builds its Realtime client in createClient:
// without a transport it throws before the storage client is reached.
const client = (key = serviceKey) => createClient(url, key, {
  auth: { persistSession: false, autoRefreshToken: false }, realtime: { transport: WebSocket as never },
}).storage
const md5 = (bytes: Uint8Array) => createHash('md5').update(bytes).digest('hex')
const name = (file: string) => `${createHash('md5').update(Math.random().toString()).digest('hex')}/${file}`
/** A PNG's signature and some bytes: enough for the bucket (which looks only at the declared type). */
const png = () => new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, ...Array.from({ length: 200 }, (_, i) => i % 256)])

/** A failed call's error as plain fields (status: the HTTP status; statusCode: the one in Storage's body). */
function failure(result: { error: unknown }) {
  const error = result.error as { status?: number; statusCode?: string; message?: string } | null
  return error && { status: error.status, statusCode: error.statusCode, message: error.message }
}

async function objectRow(bucket: string, objectName: string) {
  const [row] = await world.sql`select metadata from storage.objects where bucket_id = ${bucket} and name = ${objectName}`
  return row?.metadata as Record<string, unknown> | undefined
}

describe('Storage REST API through @supabase/storage-js', () => {
  it('signed upload URL, upload to it, the object recorded as Storage records it (size, type, MD5)', async () => {
    const path = name('photo.png')
    const bytes = png()
    const signed = await client().from(BUCKET).createSignedUploadUrl(path)
    expect(signed.error).toBeNull()
    expect(signed.data!.signedUrl.startsWith(`${url}/storage/v1/object/upload/sign/${BUCKET}/${path}?token=`)).toBe(true)
    // Anyone holding the URL uploads: the token is the credential (an anonymous client here).
    const uploaded = await client('not-a-key').from(BUCKET).uploadToSignedUrl(path, signed.data!.token, bytes, { contentType: 'image/png' })
    expect(uploaded.error).toBeNull()
    expect(uploaded.data!.fullPath).toBe(`${BUCKET}/${path}`)
    expect(await objectRow(BUCKET, path)).toMatchObject({ size: bytes.length, contentLength: bytes.length, mimetype: 'image/png', eTag: `"${md5(bytes)}"` })
    expect(new Uint8Array(await readFile(join(dir, BUCKET, ...path.split('/'))))).toEqual(bytes)

    // One upload per name without upsert: the second is Storage's 409 Duplicate (HTTP 400).
    const again = await client('not-a-key').from(BUCKET).uploadToSignedUrl(path, signed.data!.token, bytes, { contentType: 'image/png' })
    expect(failure(again)).toMatchObject({ status: 400, statusCode: '409', message: 'The resource already exists' })
  })

  it('signed download URL (inline and as a download), authenticated download, info, exists; remove', async () => {
    const path = name('notes.txt')
    const bytes = new TextEncoder().encode('Plain words, stored.')
    const { data: signed } = await client().from(BUCKET).createSignedUploadUrl(path)
    expect((await client().from(BUCKET).uploadToSignedUrl(path, signed!.token, bytes, { contentType: 'text/plain' })).error).toBeNull()

    const link = await client().from(BUCKET).createSignedUrl(path, 60)
    expect(link.error).toBeNull()
    const inline = await fetch(link.data!.signedUrl)
    expect(inline.status).toBe(200)
    expect(inline.headers.get('content-type')).toBe('text/plain')
    expect(inline.headers.get('etag')).toBe(`"${md5(bytes)}"`)
    expect(inline.headers.get('content-disposition')).toBeNull()
    expect(new Uint8Array(await inline.arrayBuffer())).toEqual(bytes)
    const asDownload = await client().from(BUCKET).createSignedUrl(path, 60, { download: 'saved.txt' })
    const attached = await fetch(asDownload.data!.signedUrl)
    expect(attached.headers.get('content-disposition')).toMatch(/^attachment; filename=saved\.txt/)

    const downloaded = await client().from(BUCKET).download(path)
    expect(downloaded.error).toBeNull()
    expect(new Uint8Array(await downloaded.data!.arrayBuffer())).toEqual(bytes)
    const info = await client().from(BUCKET).info(path)
    expect(info.error).toBeNull()
    expect(info.data).toMatchObject({ name: path, bucketId: BUCKET, size: bytes.length, contentType: 'text/plain' })
    expect((await client().from(BUCKET).exists(path)).data).toBe(true)

    const removed = await client().from(BUCKET).remove([path, 'nothing/here.txt'])
    expect(removed.error).toBeNull()
    expect(removed.data!.map((o) => o.name)).toEqual([path])
    expect(await objectRow(BUCKET, path)).toBeUndefined()
    expect(await stat(join(dir, BUCKET, ...path.split('/'))).catch(() => null)).toBeNull()
    expect((await client().from(BUCKET).exists(path)).data).toBe(false)
    // Signing a download of what is gone: Storage's 404 (HTTP 400).
    expect(failure(await client().from(BUCKET).createSignedUrl(path, 60))).toMatchObject({ status: 400, statusCode: '404', message: 'Object not found' })
  })

  it('the bucket\'s allowed types and size limit are enforced on upload (415 and 413 in the body, HTTP 400)', async () => {
    const svg = name('drawing.svg')
    const { data: signed } = await client().from(BUCKET).createSignedUploadUrl(svg)
    const refused = await client().from(BUCKET).uploadToSignedUrl(svg, signed!.token, new TextEncoder().encode('<svg/>'), { contentType: 'image/svg+xml' })
    expect(failure(refused)).toMatchObject({ status: 400, statusCode: '415' })
    expect(await objectRow(BUCKET, svg)).toBeUndefined()

    await world.sql`insert into storage.buckets (id, name, public, file_size_limit) values ('tiny', 'tiny', false, 10)`
    const big = name('eleven.bin')
    const tiny = await client().from('tiny').createSignedUploadUrl(big)
    const tooLarge = await client().from('tiny').uploadToSignedUrl(big, tiny.data!.token, new Uint8Array(11), { contentType: 'application/octet-stream' })
    expect(failure(tooLarge)).toMatchObject({ status: 400, statusCode: '413' })
    expect(await objectRow('tiny', big)).toBeUndefined()
    const fits = await client().from('tiny').uploadToSignedUrl(big, tiny.data!.token, new Uint8Array(10), { contentType: 'application/octet-stream' })
    expect(fits.error).toBeNull()
  })

  it('a token opens only its own object, for its own action, until it expires; signing takes the service role', async () => {
    const path = name('a.png')
    const { data: signed } = await client().from(BUCKET).createSignedUploadUrl(path)
    const elsewhere = await client().from(BUCKET).uploadToSignedUrl(name('b.png'), signed!.token, png(), { contentType: 'image/png' })
    expect(failure(elsewhere)).toMatchObject({ status: 400, statusCode: '400' })
    expect(elsewhere.error!.message).toMatch(/signature/i)

    const secret = new TextEncoder().encode(JWT_SECRET)
    const expired = await new SignJWT({ url: `${BUCKET}/${path}`, upsert: false, scope: 'upload' }).setProtectedHeader({ alg: 'HS256' })
      .setExpirationTime(Math.floor(Date.now() / 1000) - 10).sign(secret)
    expect(failure(await client().from(BUCKET).uploadToSignedUrl(path, expired, png(), { contentType: 'image/png' })))
      .toMatchObject({ status: 400, statusCode: '400', message: 'jwt expired' })

    // A download token is no upload token.
    expect((await client().from(BUCKET).uploadToSignedUrl(path, signed!.token, png(), { contentType: 'image/png' })).error).toBeNull()
    const link = await client().from(BUCKET).createSignedUrl(path, 60)
    const downloadToken = new URL(link.data!.signedUrl).searchParams.get('token')!
    const other = name('c.png')
    const misused = await client().from(BUCKET).uploadToSignedUrl(other, downloadToken, png(), { contentType: 'image/png' })
    expect(failure(misused)).toMatchObject({ status: 400, statusCode: '400' })

    // Not the service role (an anon key of the project): no signing, no reading.
    const anon = await new SignJWT({ role: 'anon' }).setProtectedHeader({ alg: 'HS256' }).setExpirationTime('1h').sign(secret)
    expect(failure(await client(anon).from(BUCKET).createSignedUploadUrl(name('d.png')))).toMatchObject({ status: 400, statusCode: '403' })
    expect((await client(anon).from(BUCKET).download(path)).error).not.toBeNull()
    expect(failure(await client('forged.key.here').from(BUCKET).createSignedUrl(path, 60))).toMatchObject({ status: 400 })
  })

  it('a download token expires, and one altered in any part is refused', async () => {
    const path = name('kept.png')
    const { data: signed } = await client().from(BUCKET).createSignedUploadUrl(path)
    expect((await client().from(BUCKET).uploadToSignedUrl(path, signed!.token, png(), { contentType: 'image/png' })).error).toBeNull()
    const link = new URL((await client().from(BUCKET).createSignedUrl(path, 60)).data!.signedUrl)
    expect((await fetch(link)).status).toBe(200)
    const withToken = (token: string) => {
      const url = new URL(link)
      url.searchParams.set('token', token)
      return url
    }
    const refusal = async (url: URL) => {
      const res = await fetch(url)
      return { status: res.status, body: (await res.json()) as { statusCode: string; error: string; message: string } }
    }

    // Signed with the project's secret, for this very object, but expired ten seconds ago.
    const secret = new TextEncoder().encode(JWT_SECRET)
    const expired = await new SignJWT({ url: `${BUCKET}/${path}`, scope: 'download' }).setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setExpirationTime(Math.floor(Date.now() / 1000) - 10).sign(secret)
    expect(await refusal(withToken(expired))).toEqual({ status: 400, body: { statusCode: '400', error: 'InvalidJWT', message: 'jwt expired' } })

    // The payload rewritten (another object, a later expiry) under the original signature.
    const [header, payload, signature] = link.searchParams.get('token')!.split('.')
    const claims = JSON.parse(Buffer.from(payload!, 'base64url').toString())
    const other = name('secret.png')
    for (const changed of [{ ...claims, url: `${BUCKET}/${other}` }, { ...claims, exp: claims.exp + 3600 }]) {
      const forged = `${header}.${Buffer.from(JSON.stringify(changed)).toString('base64url')}.${signature}`
      expect((await refusal(withToken(forged))).body).toMatchObject({ statusCode: '400', error: 'InvalidJWT' })
    }
    // Unsigned (alg none), and signed with another secret.
    const none = `${Buffer.from('{"alg":"none","typ":"JWT"}').toString('base64url')}.${payload}.`
    expect((await refusal(withToken(none))).body).toMatchObject({ statusCode: '400', error: 'InvalidJWT' })
    const foreign = await new SignJWT(claims).setProtectedHeader({ alg: 'HS256' }).sign(new TextEncoder().encode('another-secret-that-is-long-enough-for-hs256'))
    expect((await refusal(withToken(foreign))).body).toMatchObject({ statusCode: '400', error: 'InvalidJWT' })
    // The token moved to another object's URL: that object's signature check fails.
    const moved = new URL(link.href.replace(path, other))
    expect((await refusal(moved)).body).toMatchObject({ statusCode: '400', error: 'InvalidSignature' })
    // The service role's key is no download token (no scope, no url).
    expect((await refusal(withToken(serviceKey))).body).toMatchObject({ statusCode: '400', error: 'InvalidSignature' })
  })

  it('a name these files cannot hold (a part over 255 bytes, a file where a folder is) is InvalidKey, never a 500', async () => {
    const long = `${name('')}${'x'.repeat(256)}.png`
    const { data: signed } = await client().from(BUCKET).createSignedUploadUrl(long)
    const refused = await client().from(BUCKET).uploadToSignedUrl(long, signed!.token, png(), { contentType: 'image/png' })
    expect(failure(refused)).toMatchObject({ status: 400, statusCode: '400' })
    expect(refused.error!.message).toMatch(/^Invalid key/)
    expect(await objectRow(BUCKET, long)).toBeUndefined()

    const file = name('a.png')
    expect((await client().from(BUCKET).upload(file, png(), { contentType: 'image/png' })).error).toBeNull()
    const under = await client().from(BUCKET).upload(`${file}/b.png`, png(), { contentType: 'image/png' })
    expect(failure(under)).toMatchObject({ status: 400, statusCode: '400' })
    expect(await objectRow(BUCKET, `${file}/b.png`)).toBeUndefined()
    // The object that was there is untouched.
    expect((await client().from(BUCKET).exists(file)).data).toBe(true)
  })

  it('a name that would leave its bucket is refused', async () => {
    // (A literal or %2E%2E segment never arrives: URL parsers resolve it first. An encoded slash does.)
    const res = await fetch(`${url}/storage/v1/object/upload/sign/${BUCKET}/a/..%2F..%2F..%2Fescape.txt`, {
      method: 'POST', headers: { authorization: `Bearer ${serviceKey}`, 'content-type': 'application/json' }, body: '{}',
    })
    expect(res.status).toBe(400)
    expect(((await res.json()) as { statusCode: string }).statusCode).toBe('400')
  })

  it('uploads while every connection of its pool is busy: each transaction waits for a connection of its own (never UNSAFE_TRANSACTION)', async () => {
    // postgres.js pipelines a BEGIN onto a busy connection when the pool is full, then refuses the
    // transaction (UNSAFE_TRANSACTION, a 500) and leaves that connection inside it (functions/lib/sql.ts,
    // transaction()). The faults test met it under write load; here two connections are held busy.
    const small = createSql(world.databaseUrl, { max: 2 })
    const busyDir = await mkdtemp(join(tmpdir(), 'todo-storage-busy-'))
    const busyApi = storageApi({ dir: busyDir, jwtSecret: JWT_SECRET, sql: small })
    let busyServer: ServerType | undefined
    try {
      const busyUrl = await new Promise<string>((resolve) => {
        busyServer = serve({ fetch: busyApi.routes.fetch, hostname: '127.0.0.1', port: 0 }, (info) => resolve(`http://127.0.0.1:${info.port}`))
      })
      const key = await busyApi.serviceRoleKey()
      const storage = createClient(busyUrl, key, { auth: { persistSession: false, autoRefreshToken: false }, realtime: { transport: WebSocket as never } }).storage
      const paths = Array.from({ length: 12 }, () => name('busy.png'))
      const signed = await Promise.all(paths.map((path) => storage.from(BUCKET).createSignedUploadUrl(path)))
      // Both connections kept busy with short statements while the uploads run.
      let loading = true
      const load = (async () => { while (loading) await Promise.all([small`select pg_sleep(0.002)`, small`select pg_sleep(0.002)`, small`select pg_sleep(0.002)`]) })()
      const results = await Promise.all(paths.map((path, i) => storage.from(BUCKET).uploadToSignedUrl(path, signed[i]!.data!.token, png(), { contentType: 'image/png' })))
      loading = false
      await load
      expect(results.map(failure)).toEqual(paths.map(() => null))
      // Every object recorded, and no connection of the pool left inside a transaction.
      const [recorded] = await world.sql`select count(*)::int as n from storage.objects where bucket_id = ${BUCKET} and name = any(${paths})`
      expect(recorded!.n).toBe(paths.length)
      // SAVEPOINT outside a transaction block fails (25P01); on a connection left inside one it would not.
      const outside = await Promise.all([0, 1].map(() => small.unsafe('savepoint probe').then(() => 'inside a transaction', (e: { code?: string }) => e.code)))
      expect(outside).toEqual(['25P01', '25P01'])
    } finally {
      await new Promise<void>((resolve) => (busyServer ? busyServer.close(() => resolve()) : resolve()))
      await small.end()
      await rm(busyDir, { recursive: true, force: true })
    }
  })
})

describe('functions/lib/supabase-storage.ts (production\'s FileStorage) against the local Storage API', () => {
  it('signs an upload the client PUTs, reads its start, redirects downloads, writes and serves an export, deletes both', async () => {
    const storage = supabaseStorage({ supabaseUrl: url, serviceRoleKey: serviceKey })
    const bytes = new TextEncoder().encode('%PDF-1.4 not much of a document')
    const key = name('report.pdf')
    const checksum = createHash('md5').update(bytes).digest('base64')
    // The `uploads` bucket takes only objects of declared uploads (app.tg_storage_objects__bind_upload).
    const member = await world.createUser(`m${Math.random().toString(36).slice(2, 8)}`)
    await world.sql`insert into app.uploads (user_id, key, filename, byte_size, checksum, content_type)
      values (app.from_public_id('user', ${member.id}), ${key}, 'report.pdf', ${bytes.length}, decode(${md5(bytes)}, 'hex'), 'application/pdf')`
    const signed = await storage.signUpload({ key, contentType: 'application/pdf', checksumBase64: checksum, byteSize: bytes.length })
    expect(signed.url.startsWith(`${url}/storage/v1/object/upload/sign/uploads/${key}?token=`)).toBe(true)
    const put = await fetch(signed.url, { method: 'PUT', headers: signed.headers, body: bytes })
    expect(put.status).toBe(200)
    expect(await objectRow('uploads', key)).toMatchObject({ size: bytes.length, mimetype: 'application/pdf', eTag: `"${md5(bytes)}"` })

    expect(await storage.readStart(key, 4)).toEqual(bytes.subarray(0, 4))
    expect(await storage.readStart(name('missing.pdf'), 4)).toBeNull()

    // A PDF is never shown inline from the API's origin: the redirect asks Storage for a download.
    const redirect = await storage.fileResponse(key, false)
    expect(redirect.status).toBe(302)
    const location = redirect.headers.get('location')!
    expect(location).toMatch(/&download=$/)
    const file = await fetch(location)
    expect(file.status).toBe(200)
    expect(file.headers.get('content-disposition')).toMatch(/^attachment; filename=report\.pdf/)
    expect(new Uint8Array(await file.arrayBuffer())).toEqual(bytes)
    expect((await storage.fileResponse(name('missing.pdf'), false)).status).toBe(404)
    // Shown inline only when the API says so (a raster image or video whose bytes were read).
    expect((await storage.fileResponse(key, true)).headers.get('location')).not.toMatch(/download=/)

    const archive = exportKey()
    const json = new TextEncoder().encode(JSON.stringify({ todos: [] }))
    const written = await storage.writeExport!(archive, new ReadableStream({ start(c) { c.enqueue(json); c.close() } }))
    expect(written).toBe(json.length)
    const served = await storage.exportResponse!(archive)
    expect(served.status).toBe(302)
    const downloaded = await fetch(served.headers.get('location')!)
    expect(downloaded.status).toBe(200)
    expect(downloaded.headers.get('content-disposition')).toMatch(/^attachment; filename=todo-export\.json/)
    expect(await downloaded.text()).toBe(JSON.stringify({ todos: [] }))

    await storage.deleteFiles([key, archive])
    expect(await objectRow('uploads', key)).toBeUndefined()
    expect((await storage.exportResponse!(archive)).status).toBe(404)
    expect((await storage.fileResponse(key, false)).status).toBe(404)
  })

  it('in the uploads bucket, what the trigger refuses reaches the client as Storage words it: AccessDenied with its message', async () => {
    // Signing probes the write, as Storage's signUploadObjectUrl does: an undeclared name is refused there.
    const path = name('undeclared.png')
    const unsigned = await client().from('uploads').createSignedUploadUrl(path)
    expect(failure(unsigned)).toMatchObject({ status: 400, statusCode: '403' })
    expect(unsigned.error!.message).toMatch(/^No such upload/)
    // A URL signed while its upload existed, PUT after the upload was removed: refused before the body is kept.
    const member = await world.createUser(`r${Math.random().toString(36).slice(2, 8)}`)
    await world.sql`insert into app.uploads (user_id, key, filename, byte_size, checksum, content_type)
      values (app.from_public_id('user', ${member.id}), ${path}, 'undeclared.png', ${png().length}, decode(${md5(png())}, 'hex'), 'image/png')`
    const { data: signed } = await client().from('uploads').createSignedUploadUrl(path)
    await world.sql`delete from app.uploads where key = ${path}`
    const refused = await client('not-a-key').from('uploads').uploadToSignedUrl(path, signed!.token, png(), { contentType: 'image/png' })
    expect(failure(refused)).toMatchObject({ status: 400, statusCode: '403' })
    expect(refused.error!.message).toMatch(/^No such upload/)
    expect(await objectRow('uploads', path)).toBeUndefined()
    expect(await stat(join(dir, 'uploads', ...path.split('/'))).catch(() => null)).toBeNull()
  })
})
