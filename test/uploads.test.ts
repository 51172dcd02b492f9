// SPEC Uploads: the three-step procedure over real HTTP (ask, PUT, attach) with real PNG and
// JPEG files, every rejection, files served back and deleted, and the Supabase Storage adapter
// against a local stand-in of its API.
import { createHash } from 'node:crypto'
import { createServer } from 'node:http'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import jpeg from 'jpeg-js'
import { PNG } from 'pngjs'
import { SignJWT } from 'jose'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { hmacHex, localUploadCanonical, localUploadPath, uploadSigningKey } from '../functions/lib/storage.ts'
import { supabaseStorage } from '../functions/lib/supabase-storage.ts'
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
      url: expect.stringContaining('/storage/v1/uploads/'),
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

    const served = await fetch(localUrl(todo.body.attachments[0].url))
    expect(served.status).toBe(200)
    expect(served.headers.get('content-type')).toBe('image/png')
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
    const served = await fetch(localUrl(todo.body.attachments[0].url))
    expect(served.headers.get('content-disposition')).toBe('attachment')
    expect(served.headers.get('x-content-type-options')).toBe('nosniff')
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

  it('403 for a tampered signature, other headers, or an expired URL', async () => {
    const file = png(8, 8)
    const asked = (await requestUpload(alice, file, 'image/png', 'x.png')).body
    const tampered = asked.url.replace(/signature=([0-9a-f])/, (_: string, c: string) => `signature=${c === '0' ? '1' : '0'}`)
    expect((await put(tampered, asked.headers, file)).status).toBe(403)
    expect((await put(asked.url, { ...asked.headers, 'Content-Type': 'image/jpeg' }, file)).status).toBe(403)
    expect((await put(asked.url, { 'Content-Type': 'image/png' }, file)).status).toBe(403)

    const expires = Math.floor(Date.now() / 1000) - 10
    const signature = await hmacHex(await uploadSigningKey(JWT_SECRET), localUploadCanonical(asked.key, expires, 'image/png', md5(file), file.length))
    const expired = `${world.baseUrl}${localUploadPath(asked.key)}?size=${file.length}&expires=${expires}&signature=${signature}`
    const res = await put(expired, asked.headers, file)
    expect(res.status).toBe(403)
    expect(res.body.error).toMatch(/expired/)
    await expectNothingKept(asked.key)
  })

  it('404 for a malformed escape in the PUT\'s path (was a URIError, 500)', async () => {
    const res = await fetch(`${world.baseUrl}/storage/v1/uploads/%E0%A4/x.png?size=1&expires=1&signature=00`, { method: 'PUT', body: 'x' })
    expect(res.status).toBe(404)
    expect(await res.json()).toEqual({ error: 'No such upload.' })
  })

  it('400 for a body of another size or checksum, 413 for a larger one', async () => {
    const file = png(8, 8)
    const asked = (await requestUpload(alice, file, 'image/png', 'x.png')).body
    const shorter = await fetch(asked.url, { method: 'PUT', headers: asked.headers, body: new Uint8Array(file.subarray(0, file.length - 1)) })
    expect(shorter.status).toBe(400)
    const damaged = Buffer.from(file)
    damaged[damaged.length - 5] = damaged[damaged.length - 5]! ^ 0xff
    const wrong = await put(asked.url, asked.headers, damaged)
    expect(wrong.status).toBe(400)
    expect(wrong.body.error).toMatch(/Content-MD5/)
    const larger = await fetch(asked.url, { method: 'PUT', headers: asked.headers, body: new Uint8Array(Buffer.concat([file, Buffer.from('extra')])) })
    expect([400, 413]).toContain(larger.status)
    await expectNothingKept(asked.key)
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
    expect(await ran.json()).toMatchObject({ removedUploads: 1, deletedFiles: expect.any(Number), measuredImages: 0 })
    expect(existsSync(join(world.storageDir, 'uploads', ...old.key.split('/')))).toBe(false)
  })

  it('the worker measures stored images whose dimensions are unknown (as on Supabase, where Storage takes the PUT)', async () => {
    const stored = await upload(alice, jpg(30, 20), 'image/jpeg', 'later.jpg')
    await world.sql`update app.uploads set width = null, height = null, measured_at = null where key = ${stored.key}`
    const todo = (await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'measure me', attachments: [stored.signed_id] } })).body
    expect(todo.attachments[0]).toMatchObject({ width: null, height: null, aspect_ratio: null })
    expect((await world.maintain()).measuredImages).toBe(1)
    const again = await world.get(`/v1/todos/${todo.id}`, { auth: alice.api_key })
    expect(again.body.attachments[0]).toMatchObject({ width: 30, height: 20, aspect_ratio: 1.5 })
    expect((await world.maintain()).measuredImages).toBe(0)
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

describe('Supabase Storage adapter (against a local stand-in of the Storage API)', () => {
  it('signs uploads and downloads with the service role key', async () => {
    const seen: { method?: string; url?: string; auth?: string; range?: string; body: string }[] = []
    const fake = createServer((req, res) => {
      let body = ''
      req.on('data', (d) => (body += d))
      req.on('end', () => {
        seen.push({ method: req.method, url: req.url, auth: req.headers.authorization, range: req.headers.range, body })
        res.setHeader('content-type', 'application/json')
        if (req.method === 'DELETE') {
          res.end('[]')
        } else if (req.method === 'GET' && req.url?.includes('missing')) {
          res.statusCode = 400
          res.end(JSON.stringify({ error: 'not found' }))
        } else if (req.method === 'GET') {
          res.setHeader('content-type', 'application/octet-stream')
          res.end('IMAGEBYTES')
        } else if (req.url?.startsWith('/storage/v1/object/upload/sign/')) {
          res.end(JSON.stringify({ url: `/object/upload/sign/uploads/abc/f.png?token=t0k`, token: 't0k' }))
        } else if (req.url?.includes('missing')) {
          res.statusCode = 400
          res.end(JSON.stringify({ error: 'not found' }))
        } else {
          res.end(JSON.stringify({ signedURL: '/object/sign/uploads/abc/f.png?token=d0wn' }))
        }
      })
    })
    await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', () => resolve()))
    const port = (fake.address() as { port: number }).port
    try {
      const storage = supabaseStorage({
        supabaseUrl: `http://127.0.0.1:${port}`, serviceRoleKey: 'service-key',
        contentTypeOf: async (key) => (key === 'abc/f.png' ? 'image/png' : null),
      })
      const signed = await storage.signUpload({ key: 'abc/f.png', contentType: 'image/png', checksumBase64: 'q83vEjRWeJA=', byteSize: 3 })
      expect(signed).toEqual({
        url: `http://127.0.0.1:${port}/storage/v1/object/upload/sign/uploads/abc/f.png?token=t0k`,
        headers: { 'Content-Type': 'image/png', 'Content-MD5': 'q83vEjRWeJA=' },
      })
      expect(seen[0]).toMatchObject({ method: 'POST', url: '/storage/v1/object/upload/sign/uploads/abc/f.png', auth: 'Bearer service-key' })

      const download = await storage.fileResponse('abc/f.png')
      expect(download.status).toBe(302)
      expect(download.headers.get('location')).toBe(`http://127.0.0.1:${port}/storage/v1/object/sign/uploads/abc/f.png?token=d0wn`)
      expect(JSON.parse(seen[1]!.body)).toEqual({ expiresIn: 3600 })
      expect((await storage.fileResponse('missing/f.png')).status).toBe(404)

      await storage.deleteFiles(['abc/f.png', 'def/g.jpg'])
      const deletion = seen.find((r) => r.method === 'DELETE')!
      expect(deletion).toMatchObject({ url: '/storage/v1/object/uploads', auth: 'Bearer service-key' })
      expect(JSON.parse(deletion.body)).toEqual({ prefixes: ['abc/f.png', 'def/g.jpg'] })

      const head = await storage.readStart('abc/f.png', 1024)
      const read = seen.find((r) => r.method === 'GET')!
      expect(read).toMatchObject({ url: '/storage/v1/object/authenticated/uploads/abc/f.png', range: 'bytes=0-1023' })
      expect(Buffer.from(head!).toString()).toBe('IMAGEBYTES')
      expect(await storage.readStart('missing/x.png', 10)).toBeNull()
    } finally {
      fake.close()
    }
  })
})
