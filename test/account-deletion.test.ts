// Account deletion under review (issue 17, items 1 and 2), over real HTTP on a real PostgreSQL:
// the request (204, 422 while pending, 403 without a writing credential), the operator's queue,
// rejection, and approval: every row and file of the member gone in one transaction, their
// credentials dead at once, everyone else's counters exact, nothing of them readable through any
// endpoint or realtime channel, and their username free again.
import { createHash } from 'node:crypto'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { decodeJwt } from 'jose'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { honouredTokenIds } from '../local/realtime/authorize.ts'
import type { SupabaseClient } from '@supabase/supabase-js'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'
import { NO_DRIFT, counterDrift, streakDrift } from './support/drift.ts'
import { waitForLockWait } from './support/locks.ts'
import { type Listener, listen } from './support/realtime.ts'

let world: TestWorld
const clients: SupabaseClient[] = []

const localUrl = (url: string) => url.replace('http://api.test', world.baseUrl)
const uuidOf = (publicId: string) => publicId.replace(/^[a-z]+_/, '').replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5')

async function uploadText(user: CreatedUser, text: string) {
  const file = Buffer.from(text)
  const asked = await world.post('/v1/uploads', {
    auth: user.api_key,
    json: { filename: 'notes.txt', byte_size: file.length, checksum: createHash('md5').update(file).digest('base64'), content_type: 'text/plain' },
  })
  expect(asked.status).toBe(200)
  expect((await fetch(localUrl(asked.body.url), { method: 'PUT', headers: asked.body.headers, body: new Uint8Array(file) })).status).toBe(200)
  return asked.body as { signed_id: string; key: string }
}

beforeAll(async () => {
  // Revocation sweeps every second (npm start: every 5 s): the tests wait for a sweep, not a time.
  world = await startWorld({ revocationCheckIntervalMs: 1_000 })
})
afterAll(async () => {
  await Promise.all(clients.map((client) => client.removeAllChannels()))
  await world.close()
})

/** The id of an API key (app.api_keys.id), as deletion-requests names it. */
async function keyIdOf(apiKey: string): Promise<string> {
  const [key] = await world.sql`select id from app.api_keys where key_hash = sha256(convert_to(${apiKey}, 'UTF8'))`
  return key!.id
}

describe('DELETE /v1/account', () => {
  let ivy: CreatedUser

  it('204 and a pending request; 422 while pending; 403 for a read-only key or a token without write; the account keeps working', async () => {
    ivy = await world.createUser('ivy')
    const readOnly = await world.delete('/v1/account', { auth: ivy.read_only_api_key })
    expect(readOnly.status).toBe(403)
    expect(readOnly.body).toEqual({ error: 'This API key is read-only.' })
    const reader = await world.delete('/v1/account', { auth: await world.token('ivy', 'public billing notifications chat', { firstParty: true, chat: true }) })
    expect(reader.status).toBe(403)
    expect(reader.body).toEqual({ error: 'This access token lacks the write scope.' })
    expect((await world.admin('deletion-requests')).data).toEqual([])

    const asked = await world.delete('/v1/account', { auth: ivy.api_key })
    expect(asked.status).toBe(204)
    expect(asked.text).toBe('')
    const again = await world.delete('/v1/account', { auth: await world.token('ivy', 'write', { firstParty: true }) })
    expect(again.status).toBe(422)
    expect(again.body).toEqual({ error: 'Your account’s deletion is already requested and waiting for review.'.replace('’', "'") })

    // Until the request is decided, nothing changes.
    expect((await world.get('/v1/users/me', { auth: ivy.api_key })).status).toBe(200)
    expect((await world.post('/v1/todos', { auth: ivy.api_key, json: { body: 'still here' } })).status).toBe(201)
  })

  it('the operator lists requests oldest first; reject-deletion clears one, and the member may ask again', async () => {
    const jo = await world.createUser('jo')
    expect((await world.delete('/v1/account', { auth: jo.api_key })).status).toBe(204)
    const queue = await world.admin('deletion-requests')
    expect(queue.data).toEqual([
      { user: 'ivy', id: ivy.id, requested_at: expect.any(String), requested_by: { kind: 'api_key', api_key_id: await keyIdOf(ivy.api_key) } },
      { user: 'jo', id: jo.id, requested_at: expect.any(String), requested_by: { kind: 'api_key', api_key_id: await keyIdOf(jo.api_key) } },
    ])
    expect(Date.parse(queue.data[0].requested_at)).toBeLessThanOrEqual(Date.parse(queue.data[1].requested_at))

    expect(await world.admin('reject-deletion', '--user', 'jo')).toEqual({ user: 'jo', rejected: true })
    expect((await world.admin('deletion-requests')).data.map((r: { user: string }) => r.user)).toEqual(['ivy'])
    await expect(world.admin('reject-deletion', '--user', 'jo')).rejects.toThrow(/no pending deletion request/)
    await expect(world.admin('approve-deletion', '--user', 'jo')).rejects.toThrow(/has not asked/)
    expect((await world.get('/v1/users/me', { auth: jo.api_key })).status).toBe(200)
    expect((await world.delete('/v1/account', { auth: jo.api_key })).status).toBe(204)
    expect(await world.admin('reject-deletion', '--user', jo.id)).toEqual({ user: 'jo', rejected: true })
  })

  it('a third-party app with write: 403, and nothing is recorded; our own app’s token: 204, recorded with its client_id', async () => {
    const kim = await world.createUser('kim')
    // Every scope there is, from an app that is not ours (chat-approved or not).
    for (const client of [{}, { chat: true }]) {
      const refused = await world.delete('/v1/account', { auth: await world.token('kim', 'public write billing notifications chat', client) })
      expect(refused.status).toBe(403)
      expect(refused.body).toEqual({ error: "Only you can ask for your account's deletion: with your API key or our own app, not a third-party app." })
    }
    expect((await world.admin('deletion-requests')).data.map((r: { user: string }) => r.user)).not.toContain('kim')
    // Our own app, but without write: 403 as for any write.
    const reader = await world.delete('/v1/account', { auth: await world.token('kim', 'public', { firstParty: true }) })
    expect(reader.status).toBe(403)
    expect(reader.body).toEqual({ error: 'This access token lacks the write scope.' })

    const token = await world.token('kim', 'public write', { firstParty: true })
    const clientId = decodeJwt(token).client_id
    expect(clientId).toEqual(expect.any(String))
    expect((await world.delete('/v1/account', { auth: token })).status).toBe(204)
    const [row] = (await world.admin('deletion-requests')).data.filter((r: { user: string }) => r.user === 'kim')
    expect(row).toEqual({ user: 'kim', id: kim.id, requested_at: expect.any(String), requested_by: { kind: 'oauth', client_id: clientId } })

    // Asked again with another credential while pending: 422, and the record still names what asked first.
    expect((await world.delete('/v1/account', { auth: kim.api_key })).status).toBe(422)
    const [still] = (await world.admin('deletion-requests')).data.filter((r: { user: string }) => r.user === 'kim')
    expect(still).toEqual(row)
    expect(await world.admin('reject-deletion', '--user', 'kim')).toEqual({ user: 'kim', rejected: true })
  })

  it('the record cannot be written by the member: requested_by is not theirs to set, and only the request’s own credential fills it', async () => {
    const [grant] = await world.sql`
      select has_column_privilege('authenticated', 'app.account_deletion_requests', 'requested_by', 'insert') as insert_by,
             has_column_privilege('authenticated', 'app.account_deletion_requests', 'requested_by', 'update') as update_by,
             has_column_privilege('authenticated', 'app.account_deletion_requests', 'requested_at', 'insert') as insert_at`
    expect(grant).toEqual({ insert_by: false, update_by: false, insert_at: false })
  })

  it('a request made before requests were recorded shows requested_by null', async () => {
    const old = await world.createUser('old_timer')
    // As the migration left the rows of pending requests: no claims, so no credential to name.
    await world.sql`insert into app.account_deletion_requests (user_id, requested_at)
                    values (app.from_public_id('user', ${old.id}), now() - interval '1 day')`
    const [row] = (await world.admin('deletion-requests')).data.filter((r: { user: string }) => r.user === 'old_timer')
    expect(row).toEqual({ user: 'old_timer', id: old.id, requested_at: expect.any(String), requested_by: null })
    expect(await world.admin('reject-deletion', '--user', 'old_timer')).toEqual({ user: 'old_timer', rejected: true })
  })
})

describe('approve-deletion', () => {
  let lea: CreatedUser
  let bob: CreatedUser
  let cat: CreatedUser
  let dee: CreatedUser
  const seen: Record<string, any> = {}

  beforeAll(async () => {
    lea = await world.createUser('lea')
    bob = await world.createUser('bob')
    cat = await world.createUser('cat')
    dee = await world.createUser('dee', '--privacy', 'protected')

    // Lea's own things: todos (one with a file), projects (one alone, one with Bob), a webhook,
    // an export with its archive, credentials of every kind.
    const file = await uploadText(lea, 'lea’s notes')
    seen.fileKey = file.key
    const leaTodo = await world.post('/v1/todos', { auth: lea.api_key, json: { body: 'lea finished a thing', attachments: [file.signed_id] } })
    seen.leaTodo = leaTodo.body
    await world.post('/v1/todos', { auth: lea.api_key, json: { body: 'lea finished another thing' } })
    seen.solo = await world.admin('create-project', '--owner', 'lea', '--name', 'Solo', '--slug', 'solo')
    seen.shared = await world.admin('create-project', '--owner', 'lea', '--name', 'Shared', '--slug', 'shared', '--makers', 'bob')
    seen.bobs = await world.admin('create-project', '--owner', 'bob', '--name', 'Bobs', '--slug', 'bobs')
    expect((await world.post('/v1/webhooks/subscriptions', { auth: lea.api_key, json: { url: 'https://hooks.example.com/lea', event_type: 'new_todo' } })).status).toBe(201)
    const exp = await world.post('/v1/exports', { auth: lea.api_key })
    expect((await world.runExports()).ready).toBe(1)
    seen.export = (await world.get(`/v1/exports/${exp.body.id}`, { auth: lea.api_key })).body

    // What others see of her: Bob's todo with her comment, her reply, Cat's reply to her, her like
    // of the todo and of Cat's comment, Bob's comment and like on her todo.
    const bobTodo = await world.post('/v1/todos', { auth: bob.api_key, json: { body: 'bob shipped' } })
    seen.bobTodo = bobTodo.body
    const bobComment = await world.post('/v1/comments', { auth: bob.api_key, json: { commentable_type: 'Todo', commentable_id: bobTodo.body.id, body: 'my own note' } })
    const leaComment = await world.post('/v1/comments', { auth: lea.api_key, json: { commentable_type: 'Todo', commentable_id: bobTodo.body.id, body: 'lea says congrats' } })
    await world.post('/v1/comments', { auth: cat.api_key, json: { commentable_type: 'Todo', commentable_id: bobTodo.body.id, body: 'cat replies to lea', parent_id: leaComment.body.id } })
    await world.post('/v1/comments', { auth: lea.api_key, json: { commentable_type: 'Todo', commentable_id: bobTodo.body.id, body: 'lea replies to bob', parent_id: bobComment.body.id } })
    const catComment = await world.post('/v1/comments', { auth: cat.api_key, json: { commentable_type: 'Todo', commentable_id: bobTodo.body.id, body: 'cat on her own' } })
    seen.catComment = catComment.body
    expect((await world.post('/v1/reactions', { auth: lea.api_key, json: { reactable_type: 'Todo', reactable_id: bobTodo.body.id } })).status).toBe(201)
    expect((await world.post('/v1/reactions', { auth: cat.api_key, json: { reactable_type: 'Todo', reactable_id: bobTodo.body.id } })).status).toBe(201)
    expect((await world.post('/v1/reactions', { auth: lea.api_key, json: { reactable_type: 'Comment', reactable_id: catComment.body.id } })).status).toBe(201)
    await world.post('/v1/comments', { auth: bob.api_key, json: { commentable_type: 'Todo', commentable_id: leaTodo.body.id, body: 'bob on lea' } })
    await world.post('/v1/reactions', { auth: bob.api_key, json: { reactable_type: 'Todo', reactable_id: leaTodo.body.id } })

    // Follows both ways, a project follow, a pending request to Dee, a mute.
    expect((await world.post('/v1/users/bob/follow', { auth: lea.api_key })).status).toBe(204)
    expect((await world.post('/v1/users/lea/follow', { auth: cat.api_key })).status).toBe(204)
    expect((await world.post('/v1/projects/bobs/follow', { auth: lea.api_key })).status).toBe(204)
    expect((await world.post('/v1/users/dee/follow', { auth: lea.api_key })).status).toBe(204)
    expect((await world.post('/v1/users/cat/mute', { auth: lea.api_key })).status).toBe(204)

    // A conversation with Bob, unread on his side.
    seen.leaChat = await world.token('lea', 'chat', { chat: true })
    seen.bobChat = await world.token('bob', 'chat', { chat: true })
    const conversation = await world.post('/v1/conversations', { auth: seen.leaChat, json: { user: 'bob' } })
    seen.conversation = conversation.body
    expect((await world.post(`/v1/conversations/${conversation.body.id}/messages`, { auth: seen.leaChat, json: { body: 'hi bob' } })).status).toBe(201)
    const answer = await world.post(`/v1/conversations/${conversation.body.id}/messages`, { auth: seen.bobChat, json: { body: 'hi lea' } })
    expect((await world.post(`/v1/messages/${answer.body.id}/reactions`, { auth: seen.leaChat, json: { content: '👍' } })).status).toBe(201)
    expect((await world.post(`/v1/conversations/${conversation.body.id}/messages`, { auth: seen.leaChat, json: { body: 'one more' } })).status).toBe(201)
    // Realtime: Lea on her inbox and the conversation, Bob on his inbox and the conversation.
    const closed = (listener: Listener) => new Promise<string>((resolve) => {
      listener.channel.on('system', {}, (message: { status?: string; message?: string }) => {
        if (message.status === 'error') resolve(String(message.message))
      })
    })
    const leaInbox = await listen(world.supabaseUrl, clients, seen.leaChat, `user:${lea.id}`)
    const leaConversation = await listen(world.supabaseUrl, clients, seen.leaChat, `conversation:${conversation.body.id}`)
    seen.leaClosings = [closed(leaInbox), closed(leaConversation)]
    seen.bobInbox = await listen(world.supabaseUrl, clients, seen.bobChat, `user:${bob.id}`)
    seen.bobConversation = await listen(world.supabaseUrl, clients, seen.bobChat, `conversation:${conversation.body.id}`)
    expect([leaInbox.status, leaConversation.status, seen.bobInbox.status, seen.bobConversation.status]).toEqual(['SUBSCRIBED', 'SUBSCRIBED', 'SUBSCRIBED', 'SUBSCRIBED'])
    seen.leaToken = await world.token('lea', 'public write')

    seen.before = {
      bobTodo: (await world.get(`/v1/todos/${bobTodo.body.id}`, { auth: bob.api_key })).body,
      bob: (await world.get('/v1/users/me', { auth: bob.api_key })).body,
      bobs: (await world.get('/v1/projects/bobs', { auth: bob.api_key })).body,
      inbox: (await world.get('/v1/conversations', { auth: seen.bobChat })).body,
      catComment: (await world.get(`/v1/todos/${bobTodo.body.id}/comments`, { auth: bob.api_key })).body.data.find((c: { id: string }) => c.id === catComment.body.id),
    }
    expect(seen.before.bobTodo).toMatchObject({ comments_count: 5, reactions_count: 2 })
    expect(seen.before.bob.followers_count).toBe(1)
    expect(seen.before.bobs.followers_count).toBe(1)
    expect(seen.before.inbox.unread_count).toBe(1)
    expect(seen.before.catComment.reactions_count).toBe(1)
    expect(await counterDrift(world.sql)).toEqual(NO_DRIFT)
    expect(await streakDrift(world.sql)).toEqual([])

    expect((await world.delete('/v1/account', { auth: lea.api_key })).status).toBe(204)
  })

  it('prints {"deleted"} and leaves no row of the member in any table, in one transaction', async () => {
    const uuid = uuidOf(lea.id)
    seen.bobEventsBefore = seen.bobConversation.events.length + seen.bobInbox.events.length
    expect(await world.admin('approve-deletion', '--user', 'lea')).toEqual({ deleted: lea.id })
    // Every uuid column of every table of ours, Supabase's auth.users and storage.objects.
    const columns = await world.sql<{ table_schema: string; table_name: string; column_name: string }[]>`
      select c.table_schema, c.table_name, c.column_name from information_schema.columns c
      join information_schema.tables t on t.table_schema = c.table_schema and t.table_name = c.table_name and t.table_type = 'BASE TABLE'
      where c.table_schema in ('app', 'auth', 'storage') and c.data_type = 'uuid'`
    expect(columns.length).toBeGreaterThan(20)
    const left: string[] = []
    for (const col of columns) {
      const [row] = await world.sql.unsafe(`select count(*)::int as n from ${col.table_schema}.${col.table_name} where ${col.column_name} = $1`, [uuid])
      if (row!.n > 0) left.push(`${col.table_schema}.${col.table_name}.${col.column_name}`)
    }
    expect(left).toEqual([])
    expect((await world.admin('deletion-requests')).data.map((r: { user: string }) => r.user)).not.toContain('lea')
    await expect(world.admin('approve-deletion', '--user', 'lea')).rejects.toThrow(/no user matches/)
  })

  it('every credential is dead at once: keys, tokens, and the realtime gateway sees her tokens as revoked', async () => {
    expect((await world.get('/v1/users/me', { auth: lea.api_key })).status).toBe(403)
    expect((await world.get('/v1/users/me', { auth: lea.read_only_api_key })).status).toBe(403)
    expect((await world.get('/v1/users/me', { auth: seen.leaToken })).status).toBe(403)
    expect((await world.get('/v1/conversations', { auth: seen.leaChat })).status).toBe(403)
    const jti = JSON.parse(Buffer.from(seen.leaChat.split('.')[1], 'base64url').toString()).jti
    expect([...(await honouredTokenIds(world.sql, [jti]))]).toEqual([])
  })

  it('other members’ counters stay exact: reactions_count, comments_count, followers_count, todos_count, unread counts', async () => {
    const bobTodo = (await world.get(`/v1/todos/${seen.bobTodo.id}`, { auth: bob.api_key })).body
    // Her comment, her reply, and Cat's reply to her comment are gone; Bob's and Cat's own stay.
    expect(bobTodo.comments_count).toBe(2)
    expect(bobTodo.reactions_count).toBe(1)
    const comments = (await world.get(`/v1/todos/${seen.bobTodo.id}/comments`, { auth: bob.api_key })).body
    expect(comments.data.map((c: { body: string }) => c.body)).toEqual(['my own note', 'cat on her own'])
    expect(comments.total_count).toBe(2)
    expect(comments.data[1].reactions_count).toBe(0)
    expect((await world.get('/v1/users/me', { auth: bob.api_key })).body.followers_count).toBe(0)
    expect((await world.get('/v1/projects/bobs', { auth: bob.api_key })).body.followers_count).toBe(0)
    expect((await world.get('/v1/users/me', { auth: bob.api_key })).body.todos_count).toBe(seen.before.bob.todos_count)
    const inbox = (await world.get('/v1/conversations', { auth: seen.bobChat })).body
    expect(inbox).toMatchObject({ data: [], total_count: 0, unread_count: 0 })
    expect(await counterDrift(world.sql)).toEqual(NO_DRIFT)
    expect(await streakDrift(world.sql)).toEqual([])
  })

  it('nothing of hers is readable through any endpoint that could render her', async () => {
    const hex = lea.id.slice('user_'.length)
    const bobSearch = await world.token('bob', 'public', { firstParty: true })
    const deeReads = await world.token('dee', 'public')
    const reads: [string, string][] = [
      [bob.api_key, '/v1/users/lea'], [bob.api_key, `/v1/users/${lea.id}`], [bob.api_key, '/v1/users/lea/todos'],
      [bob.api_key, '/v1/users/lea/projects'], [bob.api_key, '/v1/todos'], [cat.api_key, '/v1/timeline'], [bob.api_key, '/v1/timeline'],
      [bob.api_key, `/v1/todos/${seen.leaTodo.id}`], [bob.api_key, `/v1/todos/${seen.leaTodo.id}/comments`],
      [bob.api_key, `/v1/todos/${seen.bobTodo.id}?expand=reactions`], [bob.api_key, `/v1/todos/${seen.bobTodo.id}/comments`],
      [bob.api_key, '/v1/todos?expand=reactions'], [bob.api_key, '/v1/users/me'], [bob.api_key, '/v1/users/me/projects'],
      [bob.api_key, '/v1/projects'], [bob.api_key, '/v1/projects/shared'], [bob.api_key, '/v1/projects/solo'], [bob.api_key, '/v1/projects/bobs'],
      [bob.api_key, '/v1/projects/shared/todos'], [cat.api_key, '/v1/users/cat'], [deeReads, '/v1/follow_requests'],
      [seen.bobChat, '/v1/conversations'], [seen.bobChat, `/v1/conversations/${seen.conversation.id}`],
      [seen.bobChat, `/v1/conversations/${seen.conversation.id}/messages`],
      [bobSearch, '/v1/search/users?query=le'], [bobSearch, '/v1/search/todos?query=lea'], [bob.api_key, '/v1/todos?query=lea'],
    ]
    for (const [auth, path] of reads) {
      const res = await world.get(path, { auth })
      expect(res.status, `${path}: ${res.text}`).toBeLessThan(500)
      // A 404 repeats the name or id asked for; an answer with data never names her.
      if (res.status !== 200) continue
      expect(res.text, path).not.toContain(hex)
      expect(res.text, path).not.toMatch(/\blea\b/)
    }
    expect((await world.get('/v1/users/lea', { auth: bob.api_key })).status).toBe(404)
    expect((await world.get(`/v1/todos/${seen.leaTodo.id}`, { auth: bob.api_key })).status).toBe(404)
    expect((await world.get('/v1/projects/solo', { auth: bob.api_key })).status).toBe(404)
    expect((await world.get(`/v1/conversations/${seen.conversation.id}`, { auth: seen.bobChat })).status).toBe(404)
    // The project she shared passed to Bob, its other maker.
    const shared = (await world.get('/v1/projects/shared', { auth: bob.api_key })).body
    expect(shared.owner.id).toBe(bob.id)
    expect(shared.makers.map((m: { id: string }) => m.id)).toEqual([bob.id])
  })

  it('her files are queued in the same transaction and deleted by the storage worker; her export archive too', async () => {
    const [queued] = await world.sql`select count(*)::int as n from app.file_deletions where key = ${seen.fileKey} or key like 'exports/%'`
    expect(queued!.n).toBeGreaterThanOrEqual(2)
    // Not served a moment longer: the file is still on disk until the worker runs, but its upload is gone.
    expect(existsSync(join(world.storageDir, 'uploads', ...seen.fileKey.split('/')))).toBe(true)
    const early = await fetch(`${world.baseUrl}/files/${seen.fileKey}`)
    expect(early.status).toBe(404)
    expect(await early.text()).not.toContain('notes')
    // Her export's link too, at once (issue 25): its archive is still on disk until the worker runs.
    const [archiveKey] = (await world.sql`select key from app.file_deletions where key like 'exports/%'`).map((r) => r.key as string)
    expect(existsSync(join(world.storageDir, ...archiveKey!.split('/')))).toBe(true)
    const archive = await fetch(localUrl(seen.export.url), { redirect: 'manual' })
    expect(archive.status).toBe(404)
    expect(await archive.text()).not.toContain('lea')
    await world.maintain()
    expect((await fetch(`${world.baseUrl}/files/${seen.fileKey}`)).status).toBe(404)
    expect((await fetch(localUrl(seen.export.url))).status).toBe(404)
  })

  it('her realtime history is gone, and Bob’s inbox was told its new unread count', async () => {
    const topics = await world.sql`select topic, event, payload from realtime.messages where topic like ${`%${seen.conversation.id}%`} or topic = ${`user:${lea.id}`}`
    expect(topics).toEqual([])
    const [told] = await world.sql`select payload from realtime.messages where topic = ${`user:${bob.id}`} and event = 'inbox.updated' order by inserted_at desc limit 1`
    expect(told!.payload).toMatchObject({ unread_count: 0 })
    expect(JSON.stringify(told!.payload)).not.toContain(lea.id.slice(5))
  })

  it('realtime: her channels close (the gateway\'s revocation sweep); Bob hears nothing of her, only his new unread count', async () => {
    expect(await Promise.all(seen.leaClosings)).toEqual(['The access token was revoked', 'The access token was revoked'])
    await seen.bobInbox.waitFor('inbox.updated', (p: { unread_count: number }) => p.unread_count === 0)
    const hex = lea.id.slice('user_'.length)
    const afterwards = [...seen.bobConversation.events, ...seen.bobInbox.events].slice(0)
    expect(afterwards.filter((e: { event: string }) => e.event === 'reaction.deleted')).toEqual([])
    const since = [...seen.bobInbox.events].filter((e: { event: string; payload: unknown }) => e.event === 'inbox.updated' && JSON.stringify(e.payload).includes('"unread_count":0'))
    expect(since.length).toBeGreaterThanOrEqual(1)
    for (const e of since) expect(JSON.stringify(e.payload)).not.toContain(hex)
  }, 20_000)

  it('her username can be taken again', async () => {
    const again = await world.createUser('lea')
    expect(again.id).not.toBe(lea.id)
    expect((await world.get('/v1/users/lea', { auth: bob.api_key })).body).toMatchObject({ id: again.id, todos_count: 0, followers_count: 0 })
  })
})

describe('approve-deletion also scrubs what other members’ rows say of the member', () => {
  it('webhook payloads of others’ todos lose her mention and her project; their inbox topics lose the events of her conversation', async () => {
    const ola = await world.createUser('ola')
    const pat = await world.createUser('pat')
    await world.admin('create-project', '--owner', 'ola', '--name', 'Ola Works', '--slug', 'olaworks', '--hashtag', 'olaworks')
    expect((await world.post('/v1/webhooks/subscriptions', { auth: pat.api_key, json: { url: 'https://hooks.example.com/pat', event_type: 'new_todo' } })).status).toBe(201)
    const todo = await world.post('/v1/todos', { auth: pat.api_key, json: { body: 'thanks @ola for #olaworks and @pat' } })
    expect(todo.status).toBe(201)
    const [event] = await world.sql`select payload from app.webhook_events where todo_id = app.from_public_id('todo', ${todo.body.id})`
    expect(event!.payload.data.mentioned_users.map((u: { username: string }) => u.username)).toEqual(['ola', 'pat'])
    expect(event!.payload.data.mentioned_projects.map((p: { hashtag: string }) => p.hashtag)).toEqual(['olaworks'])

    const olaChat = await world.token('ola', 'chat', { chat: true })
    const conversation = await world.post('/v1/conversations', { auth: olaChat, json: { user: 'pat' } })
    expect((await world.post(`/v1/conversations/${conversation.body.id}/messages`, { auth: olaChat, json: { body: 'hi pat' } })).status).toBe(201)
    const olaHex = ola.id.slice('user_'.length)
    const conversationHex = conversation.body.id.replace(/^conversation_/, '')
    const naming = () => world.sql`
      select topic, event from realtime.messages where payload::text like ${`%${olaHex}%`} or payload::text like ${`%${conversationHex}%`}`
    expect((await naming()).map((r) => r.topic)).toContain(`user:${pat.id}`)

    expect((await world.delete('/v1/account', { auth: ola.api_key })).status).toBe(204)
    expect(await world.admin('approve-deletion', '--user', 'ola')).toEqual({ deleted: ola.id })

    const [after] = await world.sql`select payload from app.webhook_events where todo_id = app.from_public_id('todo', ${todo.body.id})`
    expect(after!.payload.data.mentioned_users.map((u: { username: string }) => u.username)).toEqual(['pat'])
    expect(after!.payload.data.mentioned_projects).toEqual([])
    expect(after!.payload.data.body).toBe('thanks @ola for #olaworks and @pat') // Pat's own words stay
    const [stored] = await world.sql`select count(*)::int as n from app.webhook_events where payload::text like ${`%${olaHex}%`} or payload::text like '%Ola Works%'`
    expect(stored!.n).toBe(0)
    expect(await naming()).toEqual([])
  })
})

describe('approve-deletion under concurrent activity', () => {
  it('a deadlock with someone acting on her rows does not fail the approval: it runs again and everything is gone', async () => {
    const una = await world.createUser('una')
    const vic = await world.createUser('vic')
    const todo = await world.post('/v1/todos', { auth: una.api_key, json: { body: 'una’s todo' } })
    expect((await world.delete('/v1/account', { auth: una.api_key })).status).toBe(204)
    const unaId = uuidOf(una.id)
    const todoId = uuidOf(todo.body.id)
    // Vic's transaction does what a comment on her todo that mentions her does: it locks her todo
    // (the comment counter), and later her member row (the mention's foreign key).
    let approval: Promise<unknown> | null = null
    await world.sql.begin(async (vicTx) => {
      // Only the approval looks for the cycle: PostgreSQL aborts the waiter whose deadlock_timeout
      // ran out first, and on a loaded machine that was once Vic's (stop 38's loaded run).
      await vicTx`set local deadlock_timeout = '10min'`
      await vicTx`select 1 from app.todos where id = ${todoId} for no key update`
      // The approval locks her row, then waits for the todo; Vic then waits for her row: a cycle,
      // which PostgreSQL breaks (after deadlock_timeout) by aborting the approval, the first waiter.
      approval = world.admin('approve-deletion', '--user', 'una').then((r) => r, (e: Error) => e)
      // The approval now waits for the todo Vic holds (a lock waiter, not a pause it may not have reached).
      await waitForLockWait(world.sql)
      await vicTx`select 1 from app.users where id = ${unaId} for key share`
    })
    const result = await approval
    expect(result).toEqual({ deleted: una.id })
    expect((await world.get(`/v1/todos/${todo.body.id}`, { auth: vic.api_key })).status).toBe(404)
    expect((await world.get('/v1/users/una', { auth: vic.api_key })).status).toBe(404)
  })
})

describe('transactions while every connection of the pool is busy', () => {
  it('approve-deletion and the storage worker wait for a connection of their own; no connection is left inside a transaction', async () => {
    const wes = await world.createUser('wes')
    expect((await world.delete('/v1/account', { auth: wes.api_key })).status).toBe(204)
    // The pool (8 connections) busy with slow statements: a transaction's BEGIN used to be
    // pipelined behind one of them without reserving the connection (postgres.js), failing with
    // UNSAFE_TRANSACTION and leaving that connection in an open transaction for the next requests.
    const busy = Array.from({ length: 12 }, () => world.sql`select pg_sleep(0.3)`)
    const [approved, maintained] = await Promise.all([
      world.admin('approve-deletion', '--user', 'wes').catch((e: Error) => e),
      world.maintain().catch((e: Error) => e),
      ...busy,
    ])
    expect(approved).toEqual({ deleted: wes.id })
    expect(maintained).toMatchObject({ deletedFiles: expect.any(Number) })
    // No connection of the pool is left inside a transaction.
    const [open] = await world.sql`
      select count(*)::int as n from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'`
    expect(open!.n).toBe(0)
    expect((await world.get('/v1/users/wes', { auth: (await world.createUser('xan')).api_key })).status).toBe(404)
  })
})
