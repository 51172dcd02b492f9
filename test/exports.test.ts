// Data exports (issue 17, item 3) and the billing scope (item 4), over real HTTP on a real
// PostgreSQL: request, progress, the worker (leases, retries, giving up), download of the
// export's URL and the archive's contents, the limits, and a 20,000-todo account exported in bounded pages.
import { createHash } from 'node:crypto'
import { existsSync, readdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { localSupabaseStorage } from '../local/storage-api.ts'
import { createSql } from '../functions/lib/sql.ts'
import { decodeJwt } from 'jose'
import { request } from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EXPORT_PAGE_SIZE, EXPORT_SECTIONS, runExports } from '../functions/lib/exports.ts'
import { type CreatedUser, JWT_SECRET, TEST_ENTRY, type TestWorld, WORKER_SECRET, startWorld } from './support/app.ts'

let world: TestWorld
let alice: CreatedUser
let bob: CreatedUser

const localUrl = (url: string) => url.replace('http://api.test', world.baseUrl)

/** An attachment of `user`'s: asked for, PUT, ready to attach (its signed_id). */
async function uploadText(user: CreatedUser, text: string) {
  const file = Buffer.from(text)
  const asked = await world.post('/v1/uploads', {
    auth: user.api_key,
    json: { filename: 'notes.txt', byte_size: file.length, checksum: createHash('md5').update(file).digest('base64'), content_type: 'text/plain' },
  })
  expect(asked.status).toBe(200)
  const put = await fetch(localUrl(asked.body.url), { method: 'PUT', headers: asked.body.headers, body: new Uint8Array(file) })
  expect(put.status).toBe(200)
  return asked.body as { signed_id: string; key: string }
}

/** GET of an export's url: the API's answer, and where it redirects (a Storage link signed for a minute) followed. */
async function download(url: string) {
  const first = await fetch(localUrl(url), { redirect: 'manual' })
  if (first.status !== 302) return { status: first.status, headers: first.headers, text: await first.text(), location: null }
  const location = first.headers.get('location')!
  expect(first.headers.get('cache-control')).toBe('no-store')
  const response = await fetch(location, { redirect: 'manual' })
  return { status: response.status, headers: response.headers, text: await response.text(), location }
}

beforeAll(async () => {
  world = await startWorld()
  alice = await world.createUser('alice', '--first-name', 'Alice')
  bob = await world.createUser('bob')
})
afterAll(() => world.close())

describe('POST /v1/exports, the worker and the archive', () => {
  let exportId: string

  it('202 with a pending export; one in progress per member (429); others’ exports are 404', async () => {
    // Alice's data: todos (one with an attachment), a comment and a like on Bob's todo, a project,
    // follows both ways, a mute and a webhook subscription.
    const attachment = await uploadText(alice, 'shopping list')
    const first = await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'shipped the #rocket launch', attachments: [attachment.signed_id] } })
    expect(first.status).toBe(201)
    await world.admin('create-project', '--owner', 'alice', '--name', 'Rocket', '--slug', 'rocket', '--hashtag', 'rocket')
    await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'second todo with @bob' } })
    const bobs = await world.post('/v1/todos', { auth: bob.api_key, json: { body: 'bob did a thing' } })
    expect((await world.post('/v1/comments', { auth: alice.api_key, json: { commentable_type: 'Todo', commentable_id: bobs.body.id, body: 'nice one' } })).status).toBe(201)
    expect((await world.post('/v1/reactions', { auth: alice.api_key, json: { reactable_type: 'Todo', reactable_id: bobs.body.id } })).status).toBe(201)
    expect((await world.post('/v1/users/bob/follow', { auth: alice.api_key })).status).toBe(204)
    expect((await world.post('/v1/users/alice/follow', { auth: bob.api_key })).status).toBe(204)
    const carol = await world.createUser('carol')
    expect((await world.post(`/v1/users/${carol.id}/mute`, { auth: alice.api_key })).status).toBe(204)
    const hook = await world.post('/v1/webhooks/subscriptions', { auth: alice.api_key, json: { url: 'https://hooks.example.com/todos?token=abc', event_type: 'new_todo' } })
    expect(hook.status).toBe(201)

    const created = await world.post('/v1/exports', { auth: alice.api_key })
    expect(created.status).toBe(202)
    expect(created.body).toMatchObject({ id: expect.stringMatching(/^exp_[0-9a-f]{32}$/), status: 'pending', created_at: expect.any(String), url: null })
    exportId = created.body.id

    const again = await world.post('/v1/exports', { auth: alice.api_key })
    expect(again.status).toBe(429)
    expect(again.body.error).toMatch(/already in progress/)
    expect(again.headers.get('retry-after')).toBe('30')

    expect((await world.get(`/v1/exports/${exportId}`, { auth: bob.api_key })).status).toBe(404)
    expect((await world.get('/v1/exports', { auth: bob.api_key })).body).toEqual({ data: [], has_more: false, total_count: 0, after: null })
    expect((await world.get(`/v1/exports/exp_${'0'.repeat(32)}`, { auth: alice.api_key })).status).toBe(404)

    // Read-only keys and tokens without write: 403 (an archive holds webhook URLs).
    expect((await world.post('/v1/exports', { auth: alice.read_only_api_key })).status).toBe(403)
    expect((await world.get(`/v1/exports/${exportId}`, { auth: alice.read_only_api_key })).status).toBe(403)
    const reader = await world.token('alice', 'public')
    expect((await world.get('/v1/exports', { auth: reader })).status).toBe(403)
    // A third-party app, even with write, never gets an archive (her e-mail address and mutes are
    // in it, which no scope grants), nor the download link of one she made with her key.
    const thirdParty = await world.token('alice', 'public write')
    for (const refused of [
      await world.post('/v1/exports', { auth: thirdParty }),
      await world.get('/v1/exports', { auth: thirdParty }),
      await world.get(`/v1/exports/${exportId}`, { auth: thirdParty }),
    ]) {
      expect(refused.status).toBe(403)
      expect(refused.body).toEqual({ error: 'Data exports are available to API keys and first-party apps only.' })
    }
    const ours = await world.token('alice', 'public write', { firstParty: true })
    expect((await world.get(`/v1/exports/${exportId}`, { auth: ours })).body).toMatchObject({ id: exportId, status: 'pending' })
  })

  it('the worker writes the archive; GET shows ready with a download url valid 24 hours; the download is the member’s own data', async () => {
    const pending = await world.get(`/v1/exports/${exportId}`, { auth: alice.api_key })
    expect(pending.body).toMatchObject({ status: 'pending', completed_at: null, url: null })

    // A preference Alice changed (scope notifications) is in the archive as she set it.
    const notifier = await world.token('alice', 'notifications')
    expect((await world.request('PATCH', '/v1/notification_preferences/reaction_todo_create', { auth: notifier, json: { mobile_push_enabled: false } })).status).toBe(200)

    const run = await world.runExports()
    expect(run).toMatchObject({ ready: 1, failed: 0, retrying: 0 })

    const ready = await world.get(`/v1/exports/${exportId}`, { auth: alice.api_key })
    expect(ready.status).toBe(200)
    // Served by the API ({base_url}), which checks the export on every download (issue 25).
    expect(ready.body).toMatchObject({ id: exportId, status: 'ready', url: expect.stringMatching(/^http:\/\/api\.test\/exports\/[0-9a-f]{32}\/export\.json$/), byte_size: expect.any(Number) })
    const window = Date.parse(ready.body.expires_at) - Date.parse(ready.body.completed_at)
    expect(Math.abs(window - 24 * 3600 * 1000)).toBeLessThan(5_000)

    const file = await download(ready.body.url)
    expect(file.status).toBe(200)
    expect(file.headers.get('content-type')).toBe('application/json')
    expect(file.headers.get('content-disposition')).toMatch(/attachment/)
    expect(Buffer.byteLength(file.text)).toBe(ready.body.byte_size)
    const archive = JSON.parse(file.text)
    expect(archive).toMatchObject({ format: 'todo-sharing-export', version: 1, export_id: exportId })
    expect(archive.profile).toMatchObject({ id: alice.id, username: 'alice', first_name: 'Alice', dismissed_time_zone: null, url: 'http://api.test/@alice' })
    expect(archive.todos.map((t: { body: string }) => t.body)).toEqual(['shipped the #rocket launch', 'second todo with @bob'])
    const [withFile] = archive.todos
    expect(withFile.attachments).toEqual([expect.objectContaining({ filename: 'notes.txt', mime_type: 'text/plain', url: expect.stringMatching(/\/files\/[0-9a-f]{32}\/notes\.txt$/) })])
    expect(archive.todos[1].mentioned_users).toEqual([{ id: bob.id, username: 'bob' }])
    expect(archive.comments).toEqual([expect.objectContaining({ body: 'nice one', parent_id: null })])
    expect(archive.reactions).toEqual([expect.objectContaining({ reactable_type: 'Todo' })])
    expect(archive.projects).toEqual([expect.objectContaining({ name: 'Rocket', slug: 'rocket', owner: true })])
    expect(archive.following).toEqual([expect.objectContaining({ id: bob.id, username: 'bob' })])
    expect(archive.followers).toEqual([expect.objectContaining({ id: bob.id, username: 'bob' })])
    expect(archive.mutes).toEqual([expect.objectContaining({ username: 'carol' })])
    expect(archive.webhook_subscriptions).toEqual([expect.objectContaining({ url: 'https://hooks.example.com/todos?token=abc', event_type: 'new_todo' })])
    expect(archive.webhook_subscriptions[0]).not.toHaveProperty('secret')
    expect(file.text).not.toContain('whsec_')
    // Every type, as GET /v1/notification_preferences shows them.
    const preferences = await world.get('/v1/notification_preferences', { auth: notifier })
    expect(archive.notification_preferences).toEqual(preferences.body.data)
    expect(archive.notification_preferences).toHaveLength(10)
    expect(archive.notification_preferences.find((p: { identifier: string }) => p.identifier === 'reaction_todo_create')).toMatchObject({ mobile_push_enabled: false })
    // Nothing of Bob's own data: his todo is not in Alice's archive.
    expect(file.text).not.toContain('bob did a thing')

    // Another key (128 random bits: the link is the capability) is no archive, and says nothing more.
    const guessed = await download(ready.body.url.replace(/[0-9a-f]{32}/, '0'.repeat(32)))
    expect(guessed.status).toBe(404)
    expect(JSON.parse(guessed.text)).toEqual({ error: 'No such export: it expired or was deleted.' })
    expect((await download(ready.body.url.replace('/export.json', '/other.json'))).status).toBe(404)
  })

  it('the link works only while the export does: a removed export’s archive is not served a moment longer, though still on disk (issue 25)', async () => {
    const lou = await world.createUser('lou')
    await world.runExports() // nothing else pending
    const created = await world.post('/v1/exports', { auth: lou.api_key })
    expect((await world.runExports()).ready).toBe(1)
    const ready = await world.get(`/v1/exports/${created.body.id}`, { auth: lou.api_key })
    expect((await download(ready.body.url)).status).toBe(200)
    const [row] = await world.sql`select file_key from app.exports where id = app.from_public_id('exp', ${created.body.id})`
    // The window closed (expires_at passed) before the worker's next pass: not served.
    await world.sql`update app.exports set expires_at = now() - interval '1 second' where id = app.from_public_id('exp', ${created.body.id})`
    expect((await download(ready.body.url)).status).toBe(404)
    expect(existsSync(join(world.storageDir, ...row!.file_key.split('/')))).toBe(true)
  })

  it('lists your exports newest first; a new one may start once the last finished', async () => {
    const next = await world.post('/v1/exports', { auth: alice.api_key })
    expect(next.status).toBe(202)
    const list = await world.get('/v1/exports?limit=1', { auth: alice.api_key })
    expect(list.body).toMatchObject({ data: [{ id: next.body.id, status: 'pending' }], has_more: true, total_count: 2, after: next.body.id })
    const rest = await world.get(`/v1/exports?starting_after=${list.body.after}`, { auth: alice.api_key })
    expect(rest.body).toMatchObject({ data: [{ id: exportId, status: 'ready' }], has_more: false, total_count: 2, after: null })
    expect((await world.get(`/v1/exports?starting_after=${exportId.replace(/.$/, '0')}`, { auth: bob.api_key })).status).toBe(404)
    expect((await world.runExports()).ready).toBe(1)
  })

  it('an archive whose 24 hours passed loses its url, and its file is deleted', async () => {
    const ready = await world.get(`/v1/exports/${exportId}`, { auth: alice.api_key })
    await world.sql`update app.exports set expires_at = now() - interval '1 second' where id = app.from_public_id('exp', ${exportId})`
    const run = await world.runExports()
    expect(run.expired).toBe(1)
    const after = await world.get(`/v1/exports/${exportId}`, { auth: alice.api_key })
    expect(after.body).toMatchObject({ status: 'ready', url: null })
    expect((await world.maintain()).deletedFiles).toBeGreaterThanOrEqual(1)
    expect((await download(ready.body.url)).status).toBe(404)
  })
})

describe('the worker claims with a lease', () => {
  it('a running export whose lease ran out (its worker died) is taken again; after three attempts it fails', async () => {
    const dan = await world.createUser('dan')
    await world.post('/v1/todos', { auth: dan.api_key, json: { body: 'dan was here' } })
    const created = await world.post('/v1/exports', { auth: dan.api_key })
    // A worker claims it and dies: the export stays running until the lease ends.
    const [claimed] = await world.sql`select * from app.claim_export(interval '1 hour', 3)`
    expect(claimed).toMatchObject({ attempts: 1 })
    expect((await world.get(`/v1/exports/${created.body.id}`, { auth: dan.api_key })).body.status).toBe('running')
    expect((await world.runExports()).ready).toBe(0) // still leased: nobody else takes it
    // A page asked with a claim that is not the export's is refused.
    await expect(world.sql`select * from app.export_page(${claimed!.export_id}::uuid, gen_random_uuid(), 'todos', null, 10, 'x', interval '1 minute')`).rejects.toThrow(/no longer held/)

    await world.sql`update app.exports set lease_until = now() - interval '1 second' where id = ${claimed!.export_id}`
    expect((await world.runExports()).ready).toBe(1)
    const ready = await world.get(`/v1/exports/${created.body.id}`, { auth: dan.api_key })
    expect(ready.body.status).toBe('ready')
    expect(JSON.parse((await download(ready.body.url)).text).todos.map((t: { body: string }) => t.body)).toEqual(['dan was here'])

    // Three dead workers: given up.
    const second = await world.post('/v1/exports', { auth: dan.api_key })
    for (let attempt = 1; attempt <= 3; attempt++) {
      const [again] = await world.sql`select * from app.claim_export(interval '1 hour', 3)`
      expect(again!.attempts).toBe(attempt)
      await world.sql`update app.exports set lease_until = now() - interval '1 second' where id = ${again!.export_id}`
    }
    expect((await world.runExports()).ready).toBe(0)
    const failed = await world.get(`/v1/exports/${second.body.id}`, { auth: dan.api_key })
    expect(failed.body).toMatchObject({ status: 'failed', url: null, completed_at: expect.any(String) })
    // A failed export is not in progress: a new one may start.
    expect((await world.post('/v1/exports', { auth: dan.api_key })).status).toBe(202)
  })

  it('an attempt that fails is tried again, and the archive it began is removed', async () => {
    const erin = await world.createUser('erin')
    await world.runExports() // nothing else pending
    const created = await world.post('/v1/exports', { auth: erin.api_key })
    // Storage that fails halfway through the archive (a full disk, a dropped connection).
    const deleted: string[] = []
    const failing = {
      signUpload: async () => { throw new Error('unused') },
      fileResponse: async () => new Response(null, { status: 404 }),
      readStart: async () => null,
      deleteFiles: async (keys: string[]) => { deleted.push(...keys) },
      writeExport: async (_key: string, body: ReadableStream<Uint8Array>) => {
        await body.getReader().read()
        throw new Error('the disk is full')
      },
      exportResponse: async () => new Response(null, { status: 404 }),
    }
    const run = await runExports(world.sql, failing, { publicUrl: 'http://api.test' })
    expect(run).toMatchObject({ ready: 0, retrying: 1 })
    expect(deleted).toEqual([expect.stringMatching(/^exports\/[0-9a-f]{32}\/export\.json$/)])
    expect((await world.get(`/v1/exports/${created.body.id}`, { auth: erin.api_key })).body.status).toBe('pending')
    // Not at once: a failed attempt waits (a minute by default) before the next.
    expect((await world.runExports()).ready).toBe(0)
    await world.sql`update app.exports set lease_until = now() where id = app.from_public_id('exp', ${created.body.id})`
    expect((await world.runExports()).ready).toBe(1)
    const [row] = await world.sql`select attempts, error from app.exports where id = app.from_public_id('exp', ${created.body.id})`
    expect(row).toMatchObject({ attempts: 2, error: null })
  })

  it('a worker that dies mid-write leaves nothing behind: Storage records nothing of its upload and drops the partial file; the next claim queues its key for deletion', async () => {
    const kit = await world.createUser('kit')
    await world.post('/v1/todos', { auth: kit.api_key, json: { body: 'kit was here' } })
    await world.runExports() // nothing else pending
    const created = await world.post('/v1/exports', { auth: kit.api_key })
    // A writer over the same Storage (an upload that stops sending after the first chunk and never
    // returns: the process was killed), whose Storage gives up on a silent upload after 300 ms.
    const { storage } = await localSupabaseStorage({ dir: world.storageDir, publicUrl: world.baseUrl, jwtSecret: JWT_SECRET, sql: world.sql, idleTimeoutMs: 300 })
    let deadKey: string | null = null
    const dying = {
      ...storage,
      writeExport: (key: string, body: ReadableStream<Uint8Array>) => {
        const first = body.getReader().read().then((chunk) => {
          const stream = new ReadableStream<Uint8Array>({ start: (controller) => controller.enqueue(chunk.value!) }) // never closes
          void storage.writeExport!(key, stream).catch(() => {})
          deadKey = key
        })
        return first.then(() => new Promise<number>(() => {}))
      },
    }
    void runExports(world.sql, dying, { publicUrl: 'http://api.test' })
    const incoming = join(world.storageDir, '.incoming')
    const partials = () => (existsSync(incoming) ? readdirSync(incoming) : [])
    for (let i = 0; i < 250 && !(deadKey && partials().length > 0); i++) await new Promise((r) => setTimeout(r, 20))
    expect(deadKey).not.toBeNull()
    expect(partials().length).toBeGreaterThan(0)

    // Its lease runs out; the next worker takes the export again and finishes it.
    await world.sql`update app.exports set lease_until = now() - interval '1 second' where id = app.from_public_id('exp', ${created.body.id})`
    expect((await world.runExports()).ready).toBe(1)
    const [queued] = await world.sql`select count(*)::int as n from app.file_deletions where key = ${deadKey!}`
    expect(queued!.n).toBe(1)
    await world.maintain()
    // Storage recorded nothing of the dead upload, and dropped its partial file when it fell silent.
    const [recorded] = await world.sql`select count(*)::int as n from storage.objects where bucket_id = 'exports' and name = ${deadKey!.slice('exports/'.length)}`
    expect(recorded!.n).toBe(0)
    for (let i = 0; i < 250 && partials().length > 0; i++) await new Promise((r) => setTimeout(r, 20))
    expect(partials()).toEqual([])
    expect(existsSync(join(world.storageDir, ...deadKey!.split('/')))).toBe(false)
    const ready = await world.get(`/v1/exports/${created.body.id}`, { auth: kit.api_key })
    expect(JSON.parse((await download(ready.body.url)).text).todos.map((t: { body: string }) => t.body)).toEqual(['kit was here'])
  })

  it('concurrent requests of one member: exactly one export starts', async () => {
    const fay = await world.createUser('fay')
    const answers = await Promise.all(Array.from({ length: 8 }, () => world.post('/v1/exports', { auth: fay.api_key })))
    expect(answers.map((a) => a.status).sort()).toEqual([202, 429, 429, 429, 429, 429, 429, 429])
  })
})

describe('a large account', () => {
  it('20,000 todos are exported in pages of at most EXPORT_PAGE_SIZE rows, and all arrive in order', async () => {
    const gus = await world.createUser('gus')
    // A fast insert: the rows as the triggers would leave them, without running them 20,000 times.
    await world.sql.begin(async (tx) => {
      await tx`set local session_replication_role = replica`
      await tx`
        insert into app.todos (user_id, body, local_date, author_privacy, created_at, updated_at)
        select app.from_public_id('user', ${gus.id}), 'todo number ' || n, (now() - make_interval(mins => 20000 - n))::date, 'public',
               now() - make_interval(mins => 20000 - n), now() - make_interval(mins => 20000 - n)
        from generate_series(1, 20000) n`
    })
    await world.runExports() // nothing else pending
    const created = await world.post('/v1/exports', { auth: gus.api_key })
    const run = await world.runExports()
    expect(run.ready).toBe(1)
    // Bounded memory: the data was read page by page, never at once.
    expect(run.largestPage).toBeLessThanOrEqual(EXPORT_PAGE_SIZE)
    expect(run.pages).toBeGreaterThanOrEqual(20000 / EXPORT_PAGE_SIZE)
    const ready = await world.get(`/v1/exports/${created.body.id}`, { auth: gus.api_key })
    const archive = JSON.parse((await download(ready.body.url)).text)
    expect(archive.todos).toHaveLength(20000)
    expect(archive.todos[0].body).toBe('todo number 1')
    expect(archive.todos[19999].body).toBe('todo number 20000')
    const numbers = archive.todos.map((t: { number: number }) => t.number)
    expect(numbers.every((n: number, i: number) => i === 0 || n > numbers[i - 1])).toBe(true)
  }, 120_000)
})

describe('an old account in a large database', () => {
  // The export worker's SQL on a million rows, run in-process whatever the entry: once, on the Node pass.
  it.skipIf(TEST_ENTRY === 'edge')('a member whose todos are older than a million others is exported reading their own rows, not the million later ones', async () => {
    const old = await world.createUser('olds')
    const busy = await world.createUser('busy')
    await world.sql.begin(async (tx) => {
      await tx`set local statement_timeout = 0`
      await tx`set local session_replication_role = replica`
      await tx`
        insert into app.todos (user_id, body, local_date, author_privacy, created_at, updated_at)
        select app.from_public_id('user', ${old.id}), 'old todo ' || n, (now() - interval '2 years')::date, 'public',
               now() - interval '2 years' + make_interval(secs => n), now() - interval '2 years' + make_interval(secs => n)
        from generate_series(1, 1200) n`
      await tx`
        insert into app.todos (user_id, body, local_date, author_privacy)
        select app.from_public_id('user', ${busy.id}), 'newer todo ' || n, now()::date, 'public' from generate_series(1, 1000000) n`
    })
    await world.sql`analyze app.todos`
    await world.runExports() // nothing else pending
    const created = await world.post('/v1/exports', { auth: old.api_key })
    // Each page must read the member's own rows, not scan everyone's later todos: counted in the
    // rows the worker's connections read from app.todos (PostgreSQL's statistics, flushed when
    // they end), not timed (an 80 ms statement timeout stood here, and a loaded machine once made
    // an index page outlast it). The statement timeout stays, generous, against a hang.
    const todosRead = async () => {
      await world.sql`select pg_stat_clear_snapshot()`
      const [row] = await world.sql<{ n: string }[]>`
        select (coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0))::text as n from pg_stat_user_tables where relid = 'app.todos'::regclass`
      return Number(row!.n)
    }
    const before = await todosRead()
    const worker = createSql(world.databaseUrl, { max: 2, statementTimeoutMs: 10_000 })
    // Both of the pool's connections, by their backends, to know when their statistics are in.
    const pids = (await Promise.all([0, 1].map(() => worker<{ pid: number }[]>`select pg_backend_pid() as pid, pg_sleep(0.05)`))).map((r) => r[0]!.pid)
    try {
      // Storage on connections of its own (a service beside the worker's pool), as in production.
      const { storage } = await localSupabaseStorage({ dir: world.storageDir, publicUrl: world.supabaseUrl, jwtSecret: JWT_SECRET, sql: world.sql })
      expect(await runExports(worker, storage, { publicUrl: 'http://api.test' })).toMatchObject({ ready: 1, retrying: 0, failed: 0 })
    } finally {
      await worker.end({ timeout: 5 })
    }
    expect(new Set(pids).size).toBe(2)
    for (let deadline = Date.now() + 20_000; ;) {
      const [gone] = await world.sql<{ n: number }[]>`select count(*)::int as n from pg_stat_activity where pid = any (${pids}::int[])`
      if (gone!.n === 0) break
      if (Date.now() > deadline) throw new Error('the worker\'s connections did not end')
      await new Promise((resolve) => setTimeout(resolve, 25))
    }
    // The member's 1,200 todos and what a page looks up beside them; a scan of the later million
    // (or an index walk through them) reads over a million.
    expect(await todosRead() - before).toBeLessThan(50_000)
    const ready = await world.get(`/v1/exports/${created.body.id}`, { auth: old.api_key })
    const archive = JSON.parse((await download(ready.body.url)).text)
    expect(archive.todos.map((t: { body: string }) => t.body)).toEqual(Array.from({ length: 1200 }, (_, i) => `old todo ${i + 1}`))
    await world.sql.begin(async (tx) => {
      await tx`set local statement_timeout = 0`
      await tx`set local session_replication_role = replica` // as they were inserted: no counters
      await tx`delete from app.todos where user_id in (app.from_public_id('user', ${busy.id}), app.from_public_id('user', ${old.id}))`
    })
  }, 180_000)
})

describe('resumable exports (issue 28)', () => {
  it('an export is built in chunks of a few rows over many passes, survives a worker dying mid-way, and comes out whole and in order', async () => {
    const chunky = await world.createUser('chunky', '--first-name', 'Chunky')
    const bodies = Array.from({ length: 8 }, (_, i) => `chunky todo ${i + 1}`)
    const todos: { id: string }[] = []
    for (const body of bodies) {
      const posted = await world.post('/v1/todos', { auth: chunky.api_key, json: { body } })
      expect(posted.status).toBe(201)
      todos.push(posted.body)
    }
    expect((await world.post('/v1/comments', { auth: chunky.api_key, json: { commentable_type: 'Todo', commentable_id: todos[0]!.id, body: 'a comment' } })).status).toBe(201)
    expect((await world.post('/v1/reactions', { auth: chunky.api_key, json: { reactable_type: 'Todo', reactable_id: todos[1]!.id } })).status).toBe(201)
    await world.runExports() // nothing else pending
    const created = await world.post('/v1/exports', { auth: chunky.api_key })
    const id = created.body.id as string
    const state = async () => (await world.sql`
      select e.status, e.chunks, e.attempts, e.claim is null as parked,
             (select count(*)::int from app.export_chunks c where c.export_id = e.id) as stored
      from app.exports e where e.id = app.from_public_id('exp', ${id})`)[0]

    // A pass whose time is spent builds one chunk (at most 3 rows here), stores it with its
    // progress and stops: the export stays running, unclaimed, for the next pass.
    const pass = () => world.runExports({ chunkRows: 3, budgetMs: 0 })
    expect(await pass()).toMatchObject({ ready: 0, chunks: 1, parked: 1 })
    expect(await state()).toMatchObject({ status: 'running', chunks: 1, attempts: 1, parked: true, stored: 1 })
    expect((await world.get(`/v1/exports/${id}`, { auth: chunky.api_key })).body).toMatchObject({ status: 'running', url: null })
    expect(await pass()).toMatchObject({ ready: 0, chunks: 1, parked: 1 })
    expect(await state()).toMatchObject({ chunks: 2, attempts: 1 })

    // A worker takes the export up (going on with a parked export is no new attempt) and dies
    // before its chunk is stored: once its lease ends, the next pass goes on from the two
    // chunks stored, as a second attempt.
    const [dead] = await world.sql`select * from app.claim_export(interval '1 hour', 3)`
    expect(dead).toMatchObject({ attempts: 1, progress: expect.objectContaining({ section: 0, open: true }) })
    expect(await pass()).toMatchObject({ chunks: 0 }) // still leased: nobody else takes it
    await world.sql`update app.exports set lease_until = now() - interval '1 second' where id = ${dead!.export_id}`

    let passes = 0
    let largest = 0
    for (; passes < 40 && (await state())!.status !== 'ready'; passes++) largest = Math.max(largest, (await pass()).largestPage)
    // Pages of at most 3 rows, but for the notification preferences: one page of the ten types.
    expect(largest).toBeLessThanOrEqual(10)
    expect(passes).toBeGreaterThan(2)
    expect(await state()).toMatchObject({ status: 'ready', attempts: 2, chunks: 0, stored: 0 })
    const ready = await world.get(`/v1/exports/${id}`, { auth: chunky.api_key })
    const chunked = JSON.parse((await download(ready.body.url)).text)
    expect(Object.keys(chunked)).toEqual(['format', 'version', 'export_id', 'exported_at', 'profile', ...EXPORT_SECTIONS])
    expect(chunked.todos.map((t: { body: string }) => t.body)).toEqual(bodies)

    // The same archive as one uninterrupted pass writes (but for its id and time).
    const again = await world.post('/v1/exports', { auth: chunky.api_key })
    expect((await world.runExports()).ready).toBe(1)
    const whole = JSON.parse((await download((await world.get(`/v1/exports/${again.body.id}`, { auth: chunky.api_key })).body.url)).text)
    const strip = (a: Record<string, unknown>) => ({ ...a, export_id: null, exported_at: null })
    expect(strip(chunked)).toEqual(strip(whole))
    expect(chunked.comments).toHaveLength(1)
    expect(chunked.reactions).toHaveLength(1)
  })

  it('a parked export goes to the back of the queue: exports take turns, a large one never holds every pass', async () => {
    const large = await world.createUser('largeturns')
    for (let i = 1; i <= 7; i++) expect((await world.post('/v1/todos', { auth: large.api_key, json: { body: `large ${i}` } })).status).toBe(201)
    const small = await world.createUser('smallturns')
    await world.runExports() // nothing else pending
    const first = await world.post('/v1/exports', { auth: large.api_key })
    const second = await world.post('/v1/exports', { auth: small.api_key })
    const state = async (id: string) => (await world.sql`
      select status, chunks from app.exports where id = app.from_public_id('exp', ${id})`)[0]
    const pass = () => world.runExports({ chunkRows: 3, budgetMs: 0 })

    // The large export was asked for first: the first pass builds a chunk of it and parks it.
    expect(await pass()).toMatchObject({ chunks: 1, parked: 1 })
    expect(await state(first.body.id)).toMatchObject({ status: 'running', chunks: 1 })
    // The small one waited since before that park: the next pass is its turn, not the large one's.
    expect(await pass()).toMatchObject({ chunks: 1 })
    expect(await state(second.body.id)).toMatchObject({ status: 'running', chunks: 1 })
    expect(await state(first.body.id)).toMatchObject({ chunks: 1 })
    // Then the large one again, and so on in turns: the small one is ready first.
    expect(await pass()).toMatchObject({ chunks: 1 })
    expect(await state(first.body.id)).toMatchObject({ chunks: 2 })
    expect(await state(second.body.id)).toMatchObject({ chunks: 1 })
    const readyOrder: string[] = []
    for (let passes = 0; passes < 40 && readyOrder.length < 2; passes++) {
      await pass()
      for (const [name, id] of [['large', first.body.id], ['small', second.body.id]] as const) {
        if (!readyOrder.includes(name) && (await state(id))!.status === 'ready') readyOrder.push(name)
      }
    }
    expect(readyOrder).toEqual(['small', 'large'])
  })
})

describe('the archive shows of others only what the member may see', () => {
  it('a #hashtag of a private project the member does not make names no project (as in the API), one they make does', async () => {
    const pia = await world.createUser('pia')
    await world.createUser('quinn')
    const hidden = await world.admin('create-project', '--owner', 'quinn', '--name', 'Hidden', '--slug', 'hidden', '--hashtag', 'hidden', '--privacy', 'private')
    await world.admin('create-project', '--owner', 'pia', '--name', 'Mine', '--slug', 'mine', '--hashtag', 'mine', '--privacy', 'private')
    const todo = await world.post('/v1/todos', { auth: pia.api_key, json: { body: 'guessing #hidden and #mine' } })
    expect(todo.status).toBe(201)
    // The API hides the private project she cannot see.
    expect(todo.body.mentioned_projects.map((p: { hashtag: string }) => p.hashtag)).toEqual(['mine'])
    await world.runExports() // nothing else pending
    const created = await world.post('/v1/exports', { auth: pia.api_key })
    expect((await world.runExports()).ready).toBe(1)
    const ready = await world.get(`/v1/exports/${created.body.id}`, { auth: pia.api_key })
    const file = await download(ready.body.url)
    const archive = JSON.parse(file.text)
    expect(archive.todos[0].mentioned_projects.map((p: { hashtag: string }) => p.hashtag)).toEqual(['mine'])
    expect(hidden.id).toMatch(/^proj_/)
    expect(file.text).not.toContain(hidden.id.slice('proj_'.length))
  })
})

describe('GET /v1/billing', () => {
  it('API keys (read-only too) and tokens with billing see the subscription and where to manage it', async () => {
    const expected = { pro: true, status: 'active', manage_url: 'https://todo.test/upgrade' }
    expect((await world.get('/v1/billing', { auth: alice.api_key })).body).toEqual(expected)
    expect((await world.get('/v1/billing', { auth: alice.read_only_api_key })).body).toEqual(expected)
    expect((await world.get('/v1/billing', { auth: await world.token('alice', 'billing') })).body).toEqual(expected)
    const other = await world.get('/v1/billing', { auth: await world.token('alice', 'public write notifications chat', { firstParty: true, chat: true }) })
    expect(other.status).toBe(403)
    expect(other.body).toEqual({ error: 'This access token lacks the billing scope.' })
    expect((await world.get('/v1/billing')).status).toBe(403)
  })

  it('a lapsed account still reads its billing status (every endpoint but billing and its data rights is 401: test/data-rights.test.ts)', async () => {
    const hal = await world.createUser('hal', '--no-subscription')
    expect((await world.get('/v1/users/me', { auth: hal.api_key })).status).toBe(401)
    const billing = await world.get('/v1/billing', { auth: hal.api_key })
    expect(billing.status).toBe(200)
    expect(billing.body).toEqual({ pro: false, status: 'inactive', manage_url: 'https://todo.test/upgrade' })
  })
})

describe('POST /internal/exports (Supabase Cron)', () => {
  it('404 without the worker secret; with it, one pass of the worker', async () => {
    const ida = await world.createUser('ida')
    await world.runExports() // nothing else pending
    const created = await world.post('/v1/exports', { auth: ida.api_key })
    expect((await world.post('/internal/exports')).status).toBe(404)
    expect((await world.post('/internal/exports', { auth: 'wrong' })).status).toBe(404)
    const pass = await world.post('/internal/exports', { auth: WORKER_SECRET })
    expect(pass.status).toBe(200)
    expect(pass.body).toMatchObject({ ready: 1, failed: 0 })
    expect((await world.get(`/v1/exports/${created.body.id}`, { auth: ida.api_key })).body.status).toBe('ready')
  })
})

describe('the Supabase Storage adapter over the local Storage API (the exports bucket)', () => {
  it('streams the archive to the exports bucket, answers a download with a one-minute signed link, and deletes archives there', async () => {
    const key = `exports/${'a'.repeat(32)}/export.json`
    const parts = ['{"todos":[', '{"id":1}', ',{"id":2}', ']}']
    let pulled = 0
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        const next = parts.shift()
        pulled++
        if (next === undefined) controller.close()
        else controller.enqueue(new TextEncoder().encode(next))
      },
    })
    expect(await world.storage.writeExport!(key, body)).toBe('{"todos":[{"id":1},{"id":2}]}'.length)
    expect(pulled).toBe(5)
    const [row] = await world.sql`select metadata from storage.objects where bucket_id = 'exports' and name = ${key.slice('exports/'.length)}`
    expect(row!.metadata).toMatchObject({ mimetype: 'application/json', size: 29, cacheControl: 'no-store' })

    // A download (GET /exports/{key}, once the API found the export live) is a redirect to a
    // link signed for a minute, never one that outlives the export by a day.
    const answer = await world.storage.exportResponse!(key)
    expect(answer.status).toBe(302)
    expect(answer.headers.get('cache-control')).toBe('no-store')
    const location = answer.headers.get('location')!
    expect(location).toMatch(new RegExp(`^${world.supabaseUrl}/storage/v1/object/sign/exports/${'a'.repeat(32)}/export\\.json\\?token=[^&]+&download=todo-export\\.json$`))
    const claims = decodeJwt(new URL(location).searchParams.get('token')!)
    expect(claims.exp! - claims.iat!).toBe(60)
    const served = await fetch(location)
    expect(served.headers.get('content-disposition')).toMatch(/^attachment; filename=todo-export\.json/)
    expect(await served.text()).toBe('{"todos":[{"id":1},{"id":2}]}')

    await world.storage.deleteFiles([key])
    expect(existsSync(join(world.storageDir, ...key.split('/')))).toBe(false)
    expect((await world.storage.exportResponse!(key)).status).toBe(404)
  })

  it('the exports bucket refuses what docs/deploy.md says: strangers, other types, a second write of a name', async () => {
    const name = `${'b'.repeat(32)}/export.json`
    const write = (headers: Record<string, string>, body = '{}') => fetch(`${world.supabaseUrl}/storage/v1/object/exports/${name}`, { method: 'POST', headers, body })
    const answer = async (response: Response) => ({ status: response.status, body: await response.json() })
    const key = await world.serviceRoleKey()
    // No key, or a member's API key: not the service role.
    expect(await answer(await write({ 'content-type': 'application/json' }))).toMatchObject({ status: 400, body: { statusCode: '403' } })
    expect(await answer(await write({ 'content-type': 'application/json', authorization: `Bearer ${alice.api_key}` }))).toMatchObject({ status: 400, body: { statusCode: '400', error: 'InvalidJWT' } })
    // JSON only (allowed_mime_types of the migration *_create_accounts_and_exports.sql).
    expect(await answer(await write({ 'content-type': 'text/html', authorization: `Bearer ${key}` }, '<p>'))).toMatchObject({ status: 400, body: { statusCode: '415', error: 'invalid_mime_type' } })
    expect((await write({ 'content-type': 'application/json', authorization: `Bearer ${key}` })).status).toBe(200)
    // Without x-upsert a name is written once (Storage's 409 Duplicate).
    expect(await answer(await write({ 'content-type': 'application/json', authorization: `Bearer ${key}` }))).toMatchObject({ status: 400, body: { statusCode: '409', error: 'Duplicate' } })
    // Over the bucket's 100 MiB, as declared: refused before a byte is stored (EntityTooLarge, 413).
    const [bucket] = await world.sql`select file_size_limit from storage.buckets where id = 'exports'`
    const tooLarge = await new Promise<{ status: number; body: any }>((resolve, reject) => {
      const req = request(`${world.supabaseUrl}/storage/v1/object/exports/${'c'.repeat(32)}/export.json`, {
        method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, 'content-length': String(Number(bucket!.file_size_limit) + 1) },
      }, (res) => {
        let text = ''
        res.on('data', (chunk) => (text += chunk))
        res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }))
      })
      req.on('error', reject)
      req.write('{"a":1}')
    })
    expect(tooLarge).toMatchObject({ status: 400, body: { statusCode: '413', error: 'Payload too large' } })
    await world.storage.deleteFiles([`exports/${name}`])
  })
})
