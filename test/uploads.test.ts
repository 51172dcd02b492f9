// SPEC Uploads: the three-step procedure over real HTTP (ask, PUT, attach) with real PNG and
// JPEG files, every rejection, files served back and deleted. The PUT goes to Supabase Storage's
// REST API (local/storage-api.ts, as `npm start` serves it) through the production adapter, and
// what Storage records is bound to its upload by app.tg_storage_objects__bind_upload.
import { createHash } from 'node:crypto'
import { existsSync } from 'node:fs'
import { mkdir, rm } from 'node:fs/promises'
import { join } from 'node:path'
import jpeg from 'jpeg-js'
import { PNG } from 'pngjs'
import { SignJWT } from 'jose'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { uploadSigningKey } from '../functions/lib/storage.ts'
import { JWT_SECRET, WORKER_SECRET, type CreatedUser, type TestWorld, startWorld } from './support/app.ts'

let world: TestWorld
let alice: CreatedUser
let bob: CreatedUser

function png(width: number, height: number): Buffer {
  const image = new PNG({ width, height })
  for (let i = 0; i < image.data.length; i += 4) image.data.set([i % 256, 80, 160, 255], i)
  return PNG.sync.write(image)
}

function jpg(width: number, height: number): Buffer {
  const data = Buffer.alloc(width * height * 4)
  for (let i = 0; i < data.length; i += 4) data.set([200, i % 256, 40, 255], i)
  return Buffer.from(jpeg.encode({ data, width, height }, 80).data)
}

const md5 = (file: Buffer, encoding: 'base64' | 'hex' = 'base64') => createHash('md5').update(file).digest(encoding)

async function requestUpload(user: CreatedUser, file: Buffer, contentType: string, filename: string, checksum = md5(file)) {
  return await world.post('/v1/uploads', { auth: user.api_key, json: { filename, byte_size: file.length, checksum, content_type: contentType } })
}

async function put(url: string, headers: Record<string, string>, body: Buffer) {
  const response = await fetch(url, { method: 'PUT', headers, body: new Uint8Array(body) })
  return { status: response.status, body: await response.json().catch(() => null) }
}

/** A refusal as Supabase Storage answers one: HTTP 400 for every 4xx, the real status and message in the body. */
function refused(answer: { status: number; body: any }, statusCode: string, message: RegExp) {
  expect(answer.status, JSON.stringify(answer.body)).toBe(400)
  expect(answer.body).toMatchObject({ statusCode })
  expect(answer.body.message).toMatch(message)
}

/** Steps 1 and 2: ask for an upload and PUT the file; returns the Upload. */
async function upload(user: CreatedUser, file: Buffer, contentType = 'image/png', filename = 'picture.png') {
  const asked = await requestUpload(user, file, contentType, filename)
  expect(asked.status).toBe(200)
  const stored = await put(asked.body.url, asked.body.headers, file)
  expect(stored.status).toBe(200)
  return asked.body
}

const localUrl = (url: string) => url.replace('http://api.test', world.baseUrl)

beforeAll(async () => {
  world = await startWorld()
  alice = await world.createUser('alice')
  bob = await world.createUser('bob')
})
afterAll(() => world.close())

describe('the three steps', () => {
  it('PNG: ask, PUT, attach to a todo; dimensions read from the file; served back', async () => {
    const file = png(40, 30)
    const asked = await requestUpload(alice, file, 'image/png', 'My Screen shot.png')
    expect(asked.status).toBe(200)
    expect(asked.body).toEqual({
      filename: 'My Screen shot.png',
      byte_size: file.length,
      checksum: md5(file),
      content_type: 'image/png',
      url: expect.stringMatching(new RegExp(`^${world.supabaseUrl}/storage/v1/object/upload/sign/uploads/[0-9a-f]{32}/My_Screen_shot\\.png\\?token=`)),
      key: expect.stringMatching(/^[0-9a-f]{32}\/My_Screen_shot\.png$/),
      signed_id: expect.any(String),
      method: 'PUT',
      headers: { 'Content-Type': 'image/png', 'Content-MD5': md5(file) },
    })
    expect((await put(asked.body.url, asked.body.headers, file)).status).toBe(200)

    const todo = await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'With a picture', attachments: [asked.body.signed_id] } })
    expect(todo.status).toBe(201)
    expect(todo.body.attachments).toEqual([{
      id: expect.stringMatching(/^att_[0-9a-f]{32}$/),
      created_at: expect.any(String),
      updated_at: expect.any(String),
      url: `http://api.test/files/${asked.body.key}`,
      mime_type: 'image/png',
      filename: 'My Screen shot.png',
      width: 40,
      height: 30,
      aspect_ratio: 1.3333,
    }])

    // GET /files: a redirect to a Storage link signed for an hour, shown inline (a PNG whose bytes are one).
    const redirect = await fetch(localUrl(todo.body.attachments[0].url), { redirect: 'manual' })
    expect(redirect.status).toBe(302)
    expect(redirect.headers.get('location')).toMatch(new RegExp(`^${world.supabaseUrl}/storage/v1/object/sign/uploads/${asked.body.key}\\?token=[^&]+$`))
    const served = await fetch(localUrl(todo.body.attachments[0].url))
    expect(served.status).toBe(200)
    expect(served.headers.get('content-type')).toBe('image/png')
    expect(served.headers.get('content-disposition')).toBeNull()
    expect(Buffer.from(await served.arrayBuffer()).equals(file)).toBe(true)
    expect((await world.get(`/v1/todos/${todo.body.id}`, { auth: bob.api_key })).body.attachments[0].width).toBe(40)
  })

  it('JPEG with a hex checksum; attached to a comment without a body', async () => {
    const file = jpg(64, 48)
    const asked = await requestUpload(alice, file, 'image/jpeg', 'photo.jpg', md5(file, 'hex'))
    expect(asked.status).toBe(200)
    expect(asked.body.checksum).toBe(md5(file))
    expect((await put(asked.body.url, asked.body.headers, file)).status).toBe(200)
    const todo = (await world.post('/v1/todos', { auth: bob.api_key, json: { body: 'Comment with a photo' } })).body
    const res = await world.post('/v1/comments', { auth: alice.api_key, json: { commentable_type: 'Todo', commentable_id: todo.id, attachments: [asked.body.signed_id] } })
    expect(res.status).toBe(201)
    expect(res.body.body).toBe('')
    expect(res.body.attachments[0]).toMatchObject({ mime_type: 'image/jpeg', filename: 'photo.jpg', width: 64, height: 48, aspect_ratio: 1.3333 })
  })

  it('a document has no dimensions', async () => {
    const file = Buffer.from('# Notes\n\nplain text\n')
    const done = await upload(alice, file, 'text/markdown', 'notes.md')
    const todo = await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'Notes', attachments: [done.signed_id] } })
    expect(todo.body.attachments[0]).toMatchObject({ mime_type: 'text/markdown', width: null, height: null, aspect_ratio: null })
    // Not a raster image or video: Storage sends it as a download (the redirect asks for `download`).
    const served = await fetch(localUrl(todo.body.attachments[0].url))
    expect(served.status).toBe(200)
    expect(served.headers.get('content-disposition')).toMatch(/^attachment; filename=notes\.md/)
  })

  it('a form-encoded todo takes attachments[]', async () => {
    const done = await upload(alice, png(5, 5))
    const res = await world.post('/v1/todos', {
      auth: alice.api_key,
      body: new URLSearchParams([['body', 'From a form'], ['attachments[]', done.signed_id]]).toString(),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    })
    expect(res.status).toBe(201)
    expect(res.body.attachments).toHaveLength(1)
  })
})

describe('POST /v1/uploads rejects bad input with 400 naming the field', () => {
  const good = { filename: 'a.png', byte_size: 10, checksum: md5(Buffer.from('0123456789')), content_type: 'image/png' }
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ ...good, filename: undefined }, /^filename/],
    [{ ...good, filename: '  ' }, /^filename/],
    [{ ...good, byte_size: 0 }, /^byte_size must be greater than 0/],
    [{ ...good, byte_size: -5 }, /^byte_size/],
    [{ ...good, byte_size: 1.5 }, /^byte_size/],
    [{ ...good, byte_size: '10' }, /^byte_size/],
    [{ ...good, byte_size: 200 * 1024 * 1024 }, /^byte_size must be at most/],
    [{ ...good, checksum: 'not-md5' }, /^checksum/],
    [{ ...good, checksum: undefined }, /^checksum/],
    // Any media type is accepted since issue 18 (stored as octet-stream: test/clients.test.ts); not a media type is 400.
    [{ ...good, content_type: 'not a type' }, /^content_type/],
    [{ ...good, content_type: 'image/' }, /^content_type/],
    [{ ...good, content_type: undefined }, /^content_type/],
  ]
  for (const [json, message] of cases) {
    it(`${JSON.stringify(json).slice(0, 90)}`, async () => {
      const res = await world.post('/v1/uploads', { auth: alice.api_key, json })
      expect(res.status).toBe(400)
      expect(res.body.error).toMatch(message)
    })
  }

  it('403 for a read-only key; 400 for malformed JSON', async () => {
    expect((await world.post('/v1/uploads', { auth: alice.read_only_api_key, json: good })).status).toBe(403)
    const bad = await world.post('/v1/uploads', { auth: alice.api_key, body: '{', headers: { 'content-type': 'application/json' } })
    expect(bad.status).toBe(400)
  })
})

describe('the PUT rejects and keeps nothing', () => {
  async function expectNothingKept(key: string) {
    expect(existsSync(join(world.storageDir, 'uploads', ...key.split('/')))).toBe(false)
    const [row] = await world.sql`select count(*)::int as n from storage.objects where name = ${key}`
    expect(row!.n).toBe(0)
  }

  it('a tampered or expired token, or a token for another object, is refused', async () => {
    const file = png(8, 8)
    const asked = (await requestUpload(alice, file, 'image/png', 'x.png')).body
    const tampered = asked.url.replace(/token=([^.]+)\.([^.]+)\.(.)/, (_: string, h: string, p: string, c: string) => `token=${h}.${p}.${c === 'A' ? 'B' : 'A'}`)
    refused(await put(tampered, asked.headers, file), '400', /signature|Invalid JWT/i)
    const token = new URL(asked.url).searchParams.get('token')!
    const other = (await requestUpload(alice, png(9, 9), 'image/png', 'y.png')).body
    refused(await put(`${world.supabaseUrl}/storage/v1/object/upload/sign/uploads/${other.key}?token=${token}`, other.headers, file), '400', /signature/i)
    // Signed as Storage signs (the project's JWT secret), but expired.
    const expired = await new SignJWT({ url: `uploads/${asked.key}`, upsert: false, scope: 'upload' })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).setExpirationTime(Math.floor(Date.now() / 1000) - 10).sign(new TextEncoder().encode(JWT_SECRET))
    refused(await put(`${world.supabaseUrl}/storage/v1/object/upload/sign/uploads/${asked.key}?token=${expired}`, asked.headers, file), '400', /jwt expired/)
    await expectNothingKept(asked.key)
  })

  it('a malformed escape in the PUT\'s path is Storage\'s InvalidKey, not a 500', async () => {
    const res = await put(`${world.supabaseUrl}/storage/v1/object/upload/sign/uploads/%E0%A4/x.png?token=x`, {}, Buffer.from('x'))
    refused(res, '400', /Invalid key/)
  })

  it('another size, checksum or type than declared keeps nothing (the trigger refuses what Storage would record)', async () => {
    const file = png(8, 8)
    const asked = (await requestUpload(alice, file, 'image/png', 'x.png')).body
    refused(await put(asked.url, asked.headers, file.subarray(0, file.length - 1)), '403', new RegExp(`is ${file.length - 1} bytes, but this upload was declared as ${file.length} bytes`))
    refused(await put(asked.url, asked.headers, Buffer.concat([file, Buffer.from('extra')])), '403', /declared as \d+ bytes/)
    const damaged = Buffer.from(file)
    damaged[damaged.length - 5] = damaged[damaged.length - 5]! ^ 0xff
    refused(await put(asked.url, asked.headers, damaged), '403', /does not match the checksum/)
    // Another type the bucket takes, or none (Storage then records application/octet-stream).
    refused(await put(asked.url, { ...asked.headers, 'Content-Type': 'image/jpeg' }, file), '403', /sent as image\/jpeg, but this upload was declared as image\/png/)
    refused(await put(asked.url, { 'Content-MD5': asked.headers['Content-MD5'] }, file), '403', /sent as application\/octet-stream/)
    // A type the bucket does not take: Storage's own refusal, before the database.
    refused(await put(asked.url, { ...asked.headers, 'Content-Type': 'text/html' }, file), '415', /text\/html/)
    await expectNothingKept(asked.key)
    const [row] = await world.sql`select stored_at from app.uploads where key = ${asked.key}`
    expect(row!.stored_at).toBeNull()
    // The same URL still stores the right file.
    expect((await put(asked.url, asked.headers, file)).status).toBe(200)
  })

  it('a spent URL stores nothing more: a second PUT, or a PUT after the upload was removed', async () => {
    const file = png(8, 9)
    const asked = await upload(alice, file, 'image/png', 'once.png')
    refused(await put(asked.url, asked.headers, file), '403', /This upload URL has been used/)
    refused(await put(asked.url, asked.headers, png(8, 9).fill(1, 100)), '403', /This upload URL has been used/)
    const [spent] = await world.sql`select stored_at from app.uploads where key = ${asked.key}`
    expect(spent!.stored_at).not.toBeNull()
    // Removed (never attached, a day old) and its file deleted: the URL, still within its two hours, stores nothing.
    await world.sql`update app.uploads set created_at = now() - interval '25 hours' where key = ${asked.key}`
    await world.maintain('1 day')
    expect(existsSync(join(world.storageDir, 'uploads', ...asked.key.split('/')))).toBe(false)
    refused(await put(asked.url, asked.headers, file), '403', /No such upload/)
    await expectNothingKept(asked.key)
    // Nor does the service role replace a stored object in the uploads bucket (an upsert).
    const kept = await upload(alice, png(4, 4), 'image/png', 'kept.png')
    const key = await world.serviceRoleKey()
    const replaced = await fetch(`${world.supabaseUrl}/storage/v1/object/uploads/${kept.key}`, {
      method: 'PUT', headers: { authorization: `Bearer ${key}`, 'content-type': 'image/png' }, body: new Uint8Array(png(4, 4)),
    })
    refused({ status: replaced.status, body: await replaced.json() }, '403', /This upload URL has been used/)
    // Nor moved or given other metadata (Storage's move and metadata updates are UPDATEs of the row).
    await expect(world.sql`update storage.objects set name = ${`${kept.key}.moved`} where bucket_id = 'uploads' and name = ${kept.key}`)
      .rejects.toMatchObject({ code: '42501', message: expect.stringMatching(/never replaced/) })
    await expect(world.sql`update storage.objects set metadata = metadata || '{"size": 1}' where bucket_id = 'uploads' and name = ${kept.key}`)
      .rejects.toMatchObject({ code: '42501' })
    // What account deletion does (owner cleared) is no replacement.
    await world.sql`update storage.objects set owner = null where bucket_id = 'uploads' and name = ${kept.key}`
    // Only the Storage API deletes objects (as on Supabase: storage.protect_delete), even a DELETE of no row;
    // the storage worker deletes through it and forgets only its own outbox (app.forget_file_deletions).
    await expect(world.sql`delete from storage.objects where bucket_id = 'uploads' and name = 'nothing'`).rejects.toMatchObject({ code: '42501' })
  })
})

describe('attaching rejects with 422', () => {
  it('a forged, expired, foreign, not-yet-uploaded or already attached signed id', async () => {
    const attach = (user: CreatedUser, signedId: string) => world.post('/v1/todos', { auth: user.api_key, json: { body: 'x', attachments: [signedId] } })

    const forged = await attach(alice, 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.forged')
    expect(forged.status).toBe(422)
    expect(forged.body.error).toMatch(/^attachments: .* is not a signed id/)

    const accessToken = await world.token('alice', 'public write')
    expect((await attach(alice, accessToken)).status).toBe(422)

    const expiredId = await new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject(crypto.randomUUID())
      .setAudience('upload').setExpirationTime(Math.floor(Date.now() / 1000) - 60).sign(await uploadSigningKey(JWT_SECRET))
    const expired = await attach(alice, expiredId)
    expect(expired.status).toBe(422)
    expect(expired.body.error).toMatch(/expired/)

    const bobs = await upload(bob, png(3, 3))
    const foreign = await attach(alice, bobs.signed_id)
    expect(foreign.status).toBe(422)
    expect(foreign.body.error).toMatch(/belongs to someone else/)

    const pending = (await requestUpload(alice, png(4, 4), 'image/png', 'later.png')).body
    const notYet = await attach(alice, pending.signed_id)
    expect(notYet.status).toBe(422)
    expect(notYet.body.error).toMatch(/has not been uploaded yet/)

    const done = await upload(alice, png(6, 6))
    expect((await attach(alice, done.signed_id)).status).toBe(201)
    const twice = await attach(alice, done.signed_id)
    expect(twice.status).toBe(422)
    expect(twice.body.error).toMatch(/already attached/)

    // A failed attach creates nothing: the todo of a rejected request does not exist.
    const [count] = await world.sql`select count(*)::int as n from app.todos where body = 'x'`
    expect(count!.n).toBe(1)
  })
})

describe('a PUT that fails after Storage recorded it', () => {
  it('a file that cannot be moved into place rolls back its record: the URL stays usable', async () => {
    const file = png(6, 6)
    const asked = (await requestUpload(alice, file, 'image/png', 'blocked.png')).body
    // Something in the way at the file's place (a folder): the move fails after the row was written.
    const target = join(world.storageDir, 'uploads', ...asked.key.split('/'))
    await mkdir(join(target, 'in-the-way'), { recursive: true })
    const failed = await put(asked.url, asked.headers, file)
    expect(failed.status).toBe(400)
    const [row] = await world.sql`select stored_at from app.uploads where key = ${asked.key}`
    expect(row!.stored_at).toBeNull()
    const [objects] = await world.sql`select count(*)::int as n from storage.objects where name = ${asked.key}`
    expect(objects!.n).toBe(0)
    await rm(target, { recursive: true })
    expect((await put(asked.url, asked.headers, file)).status).toBe(200)
  })
})

describe('a request reads only its member\'s own stored files', () => {
  it('naming another member\'s signed id reads nothing of that file and changes nothing of that upload', async () => {
    const bobs = await upload(bob, png(5, 4), 'image/png', 'bobs.png')
    const before = await world.sql`select * from app.uploads where key = ${bobs.key}`
    const refused = await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'not mine', attachments: [bobs.signed_id] } })
    expect(refused.status).toBe(422)
    expect(refused.body.error).toMatch(/belongs to someone else/)
    expect(await world.sql`select * from app.uploads where key = ${bobs.key}`).toEqual(before)
    expect(before[0]).toMatchObject({ sniffed_type: null, measured_at: null })
    // Bob's own request reads it, and attaches it.
    const own = await world.post('/v1/todos', { auth: bob.api_key, json: { body: 'mine', attachments: [bobs.signed_id] } })
    expect(own.status).toBe(201)
    expect(own.body.attachments[0]).toMatchObject({ width: 5, height: 4 })
  })
})

describe('PATCH, deletion and cleanup', () => {
  it('PATCH adds (additive) and removes attachments; removed files are deleted by the worker', async () => {
    const first = await upload(alice, png(10, 10), 'image/png', 'one.png')
    const second = await upload(alice, jpg(20, 10), 'image/jpeg', 'two.jpg')
    const todo = (await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'Gallery', attachments: [first.signed_id] } })).body
    const added = await world.patch(`/v1/todos/${todo.id}`, { auth: alice.api_key, json: { attachments: [second.signed_id] } })
    expect(added.status).toBe(200)
    expect(added.body.attachments.map((a: { filename: string }) => a.filename)).toEqual(['one.png', 'two.jpg'])

    const removedId = added.body.attachments[0].id
    const removedUrl = localUrl(added.body.attachments[0].url)
    const removed = await world.patch(`/v1/todos/${todo.id}`, { auth: alice.api_key, json: { remove_attachment_ids: [removedId] } })
    expect(removed.body.attachments.map((a: { filename: string }) => a.filename)).toEqual(['two.jpg'])
    expect((await world.patch(`/v1/todos/${todo.id}`, { auth: alice.api_key, json: { remove_attachment_ids: [removedId] } })).status).toBe(422)
    expect((await world.patch(`/v1/todos/${todo.id}`, { auth: bob.api_key, json: { remove_attachment_ids: [added.body.attachments[1].id] } })).status).toBe(403)

    expect((await world.maintain()).deletedFiles).toBeGreaterThanOrEqual(1)
    expect((await fetch(removedUrl)).status).toBe(404)
    expect(existsSync(join(world.storageDir, 'uploads', ...first.key.split('/')))).toBe(false)
  })

  it('deleting a todo or comment deletes its files', async () => {
    const a = await upload(alice, png(7, 7), 'image/png', 'todo.png')
    const b = await upload(alice, png(9, 9), 'image/png', 'comment.png')
    const todo = (await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'Short-lived', attachments: [a.signed_id] } })).body
    const c = (await world.post('/v1/comments', { auth: alice.api_key, json: { commentable_type: 'Todo', commentable_id: todo.id, body: 'c', attachments: [b.signed_id] } })).body
    expect((await world.delete(`/v1/todos/${todo.id}`, { auth: alice.api_key })).status).toBe(204)
    // Not served from the moment its todo is gone, before the storage worker deletes the files.
    for (const key of [a.key, b.key]) expect((await fetch(`${world.baseUrl}/files/${key}`)).status).toBe(404)
    await world.maintain()
    for (const key of [a.key, b.key]) {
      expect(existsSync(join(world.storageDir, 'uploads', ...key.split('/')))).toBe(false)
      expect((await fetch(`${world.baseUrl}/files/${key}`)).status).toBe(404)
    }
    expect(c.attachments).toHaveLength(1)
  })

  it('an upload never attached is removed after a day', async () => {
    const fresh = await upload(alice, png(2, 2), 'image/png', 'fresh.png')
    const old = await upload(alice, png(3, 2), 'image/png', 'old.png')
    await world.sql`update app.uploads set created_at = now() - interval '25 hours' where key = ${old.key}`
    const result = await world.maintain('1 day')
    expect(result.removedUploads).toBe(1)
    expect(existsSync(join(world.storageDir, 'uploads', ...old.key.split('/')))).toBe(false)
    expect(existsSync(join(world.storageDir, 'uploads', ...fresh.key.split('/')))).toBe(true)
    const attachOld = await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'late', attachments: [old.signed_id] } })
    expect(attachOld.status).toBe(422)
  })

  it('POST /internal/maintenance runs the worker for pg_cron, with the worker secret only', async () => {
    const old = await upload(alice, png(2, 3), 'image/png', 'cron.png')
    await world.sql`update app.uploads set created_at = now() - interval '2 days' where key = ${old.key}`
    for (const auth of [undefined, 'wrong-secret', JWT_SECRET]) {
      const refused = await fetch(`${world.baseUrl}/internal/maintenance`, { method: 'POST', headers: auth ? { authorization: `Bearer ${auth}` } : {} })
      expect(refused.status).toBe(404)
    }
    const ran = await fetch(`${world.baseUrl}/internal/maintenance`, { method: 'POST', headers: { authorization: `Bearer ${WORKER_SECRET}` } })
    expect(ran.status).toBe(200)
    expect(await ran.json()).toMatchObject({ removedUploads: 1, deletedFiles: expect.any(Number), measuredImages: expect.any(Number) })
    expect(existsSync(join(world.storageDir, 'uploads', ...old.key.split('/')))).toBe(false)
  })

  it('the worker reads stored files no request attached yet: their type and an image\'s dimensions', async () => {
    const stored = await upload(alice, jpg(30, 20), 'image/jpeg', 'later.jpg')
    const before = await world.sql`select sniffed_type, width, measured_at from app.uploads where key = ${stored.key}`
    expect(before[0]).toMatchObject({ sniffed_type: null, width: null, measured_at: null })
    expect((await world.maintain()).measuredImages).toBeGreaterThanOrEqual(1)
    const [after] = await world.sql`select sniffed_type, width, height from app.uploads where key = ${stored.key}`
    expect(after).toMatchObject({ sniffed_type: 'image/jpeg', width: 30, height: 20 })
    expect((await world.maintain()).measuredImages).toBe(0)
    const todo = (await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'measured', attachments: [stored.signed_id] } })).body
    expect(todo.attachments[0]).toMatchObject({ width: 30, height: 20, aspect_ratio: 1.5 })
  })

  it('a file whose bytes are not the declared type is refused when attached, and never shown inline', async () => {
    const page = Buffer.from('<html><script>alert(1)</script></html>')
    const asked = await upload(alice, page, 'image/png', 'cat.png')
    const redirect = await fetch(`${world.baseUrl}/files/${asked.key}`, { redirect: 'manual' })
    expect(redirect.headers.get('location')).toMatch(/&download=$/)
    const attach = await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'a cat', attachments: [asked.signed_id] } })
    expect(attach.status).toBe(422)
    expect(attach.body.error).toMatch(/is not image\/png \(its bytes are application\/octet-stream\)/)
  })

  it('Range: 206 for a range, the suffix too; unsatisfiable as Storage answers it (HTTP 400, 416 in the body)', async () => {
    const file = png(50, 50)
    const asked = await upload(alice, file, 'image/png', 'ranged.png')
    const link = (await fetch(`${world.baseUrl}/files/${asked.key}`, { redirect: 'manual' })).headers.get('location')!
    const part = await fetch(link, { headers: { range: 'bytes=8-15' } })
    expect(part.status).toBe(206)
    expect(part.headers.get('content-range')).toBe(`bytes 8-15/${file.length}`)
    expect(Buffer.from(await part.arrayBuffer()).equals(file.subarray(8, 16))).toBe(true)
    const tail = await fetch(link, { headers: { range: 'bytes=-4' } })
    expect(tail.status).toBe(206)
    expect(Buffer.from(await tail.arrayBuffer()).equals(file.subarray(file.length - 4))).toBe(true)
    const beyond = await fetch(link, { headers: { range: `bytes=${file.length}-` } })
    refused({ status: beyond.status, body: await beyond.json() }, '416', /not satisfiable/)
  })

  it('GET /files answers 404 for unknown or malformed keys', async () => {
    expect((await fetch(`${world.baseUrl}/files/00000000000000000000000000000000/none.png`)).status).toBe(404)
    expect((await fetch(`${world.baseUrl}/files/..%2F..%2Fsecrets.json`)).status).toBe(404)
    // An invalid escape must not turn into a 500.
    const malformed = await fetch(`${world.baseUrl}/files/%E0%A4`)
    expect(malformed.status).toBe(404)
    expect(await malformed.json()).toEqual({ error: 'No such file.' })
  })
})
