// SPEC Direct messages over REST: access (chat scope from an approved app), conversations,
// messages (idempotent by client_message_id, also concurrently), unread state, the caps on
// unanswered conversations (race-free), message reactions, rate limits.
import { createHash } from 'node:crypto'
import { PNG } from 'pngjs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ConversationSchema, MessageSchema } from '../functions/lib/schemas.ts'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'

let world: TestWorld
let counter = 0
const tokens = new Map<string, string>()

/** A member with a chat token from an approved app. */
async function chatter(prefix = 'c') {
  const user = await world.createUser(`${prefix}${++counter}`)
  // Scope chat alone is enough to read and send direct messages.
  const token = await world.token(user.username, 'chat', { chat: true })
  tokens.set(user.username, token)
  return { ...user, token }
}
type Chatter = Awaited<ReturnType<typeof chatter>>

const open = (from: Chatter, to: string) => world.post('/v1/conversations', { auth: from.token, json: { user: to } })
const send = (from: Chatter, conversation: string, json: Record<string, unknown>) =>
  world.post(`/v1/conversations/${conversation}/messages`, { auth: from.token, json })

beforeAll(async () => {
  world = await startWorld()
})
afterAll(() => world.close())

describe('access', () => {
  it('403 for API keys, tokens without chat, and unapproved apps, on every route', async () => {
    const a = await chatter()
    const b = await chatter()
    const conversation = (await open(a, b.username)).body.id
    const noChatScope = await world.token(a.username, 'public write', { chat: true })
    const unapproved = await world.token(a.username, 'public write chat')
    const routes: [string, string][] = [
      ['GET', '/v1/conversations'], ['POST', '/v1/conversations'], ['POST', '/v1/conversations/reading'],
      ['GET', `/v1/conversations/${conversation}`], ['GET', `/v1/conversations/${conversation}/messages`],
      ['POST', `/v1/conversations/${conversation}/messages`], ['POST', `/v1/conversations/${conversation}/reading`],
    ]
    for (const [method, path] of routes) {
      for (const auth of [a.api_key, noChatScope, unapproved]) {
        const res = await world.request(method, path, { auth, json: method === 'POST' ? { user: b.username, body: 'hi' } : undefined })
        expect(res.status, `${method} ${path}`).toBe(403)
      }
    }
  })
})

describe('conversations', () => {
  it('POST: 201 new and empty, then 200 the same one from either side', async () => {
    const a = await chatter()
    const b = await chatter()
    const created = await open(a, b.username)
    expect(created.status).toBe(201)
    ConversationSchema.strict().parse(created.body)
    expect(created.body).toMatchObject({ unread: false, last_message: null, user: { username: b.username } })
    expect(created.body.id).toMatch(/^conversation_[0-9a-f]{32}$/)
    const again = await open(a, b.id)
    expect(again.status).toBe(200)
    expect(again.body.id).toBe(created.body.id)
    const reverse = await open(b, a.username)
    expect(reverse.status).toBe(200)
    expect(reverse.body).toMatchObject({ id: created.body.id, user: { username: a.username } })
  })

  it('POST: 400 without user, 404 unknown, 422 yourself', async () => {
    const a = await chatter()
    const missing = await world.post('/v1/conversations', { auth: a.token, json: {} })
    expect(missing.status).toBe(400)
    expect(missing.body.error).toMatch(/^user is required/)
    expect((await world.post('/v1/conversations', { auth: a.token, json: { user: '' } })).status).toBe(400)
    expect((await open(a, 'nobody')).status).toBe(404)
    expect((await open(a, a.username)).status).toBe(422)
    expect((await open(a, 'me')).status).toBe(422)
  })

  it('concurrent opens of the same pair agree on one conversation', async () => {
    const a = await chatter()
    const b = await chatter()
    const results = await Promise.all([...Array(5)].flatMap(() => [open(a, b.username), open(b, a.username)]))
    expect(new Set(results.map((r) => r.body.id)).size).toBe(1)
    expect(results.filter((r) => r.status === 201)).toHaveLength(1)
  })

  it('GET one: participants 200, anyone else 404 (never 403)', async () => {
    const a = await chatter()
    const b = await chatter()
    const outsider = await chatter()
    const id = (await open(a, b.username)).body.id
    expect((await world.get(`/v1/conversations/${id}`, { auth: b.token })).status).toBe(200)
    const res = await world.get(`/v1/conversations/${id}`, { auth: outsider.token })
    expect(res.status).toBe(404)
    expect((await world.get('/v1/conversations/conversation_00000000000000000000000000000000', { auth: a.token })).status).toBe(404)
    expect((await send(outsider, id, { body: 'intrude' })).status).toBe(404)
    expect((await world.get(`/v1/conversations/${id}/messages`, { auth: outsider.token })).status).toBe(404)
  })

  it('GET list: latest activity first, without empty ones, unread filter, unread_count over all pages, cursors', async () => {
    const me = await chatter('inbox')
    const others = await Promise.all([1, 2, 3, 4].map(() => chatter()))
    const ids: string[] = []
    for (const other of others) ids.push((await open(me, other.username)).body.id)
    // Others write in order 0..2 (3 stays empty); then 0 writes again: order 0, 2, 1.
    for (const i of [0, 1, 2, 0]) expect((await send(others[i]!, ids[i]!, { body: `from ${i}` })).status).toBe(201)

    const list = await world.get('/v1/conversations', { auth: me.token })
    expect(list.status).toBe(200)
    expect(list.body.data.map((c: { id: string }) => c.id)).toEqual([ids[0], ids[2], ids[1]])
    expect(list.body).toMatchObject({ total_count: 3, unread_count: 3, has_more: false, after: null })
    expect(list.body.data[0].last_message.body).toBe('from 0')
    expect(list.body.data.every((c: { unread: boolean }) => c.unread)).toBe(true)

    const page = await world.get('/v1/conversations?limit=2', { auth: me.token })
    expect(page.body).toMatchObject({ has_more: true, unread_count: 3, after: ids[2] })
    const next = await world.get(`/v1/conversations?limit=2&starting_after=${page.body.after}`, { auth: me.token })
    expect(next.body.data.map((c: { id: string }) => c.id)).toEqual([ids[1]])

    expect((await world.post(`/v1/conversations/${ids[2]}/reading`, { auth: me.token })).status).toBe(204)
    const unread = await world.get('/v1/conversations?unread=true', { auth: me.token })
    expect(unread.body.data.map((c: { id: string }) => c.id)).toEqual([ids[0], ids[1]])
    expect(unread.body).toMatchObject({ total_count: 2, unread_count: 2 })

    for (const cursor of ['conversation_00000000000000000000000000000000', ids[3], 'garbage']) {
      expect((await world.get(`/v1/conversations?starting_after=${cursor}`, { auth: me.token })).status, cursor).toBe(404)
    }
    expect((await world.get(`/v1/conversations?unread=true&starting_after=${ids[2]}`, { auth: me.token })).status).toBe(404)
    expect((await world.get('/v1/conversations?unread=maybe', { auth: me.token })).status).toBe(422)

    expect((await world.post('/v1/conversations/reading', { auth: me.token })).status).toBe(204)
    const after = await world.get('/v1/conversations', { auth: me.token })
    expect(after.body.unread_count).toBe(0)
    expect(after.body.data.some((c: { unread: boolean }) => c.unread)).toBe(false)
  })
})

describe('messages', () => {
  let a: Chatter
  let b: Chatter
  let conversation: string
  beforeAll(async () => {
    a = await chatter()
    b = await chatter()
    conversation = (await open(a, b.username)).body.id
  })

  it('201 with the Message; listed newest first with pagination; unread for the recipient only', async () => {
    const first = await send(a, conversation, { body: 'Hello!' })
    expect(first.status).toBe(201)
    MessageSchema.strict().parse(first.body)
    expect(first.body).toMatchObject({ conversation_id: conversation, body: 'Hello!', client_message_id: null, attachment: null, reactions: [], creator: { username: a.username } })
    await send(b, conversation, { body: 'Hi back' })
    await send(a, conversation, { body: 'How are you?' })
    const list = await world.get(`/v1/conversations/${conversation}/messages?limit=2`, { auth: b.token })
    expect(list.body.data.map((m: { body: string }) => m.body)).toEqual(['How are you?', 'Hi back'])
    expect(list.body).toMatchObject({ total_count: 3, has_more: true })
    const rest = await world.get(`/v1/conversations/${conversation}/messages?starting_after=${list.body.after}`, { auth: b.token })
    expect(rest.body.data.map((m: { body: string }) => m.body)).toEqual(['Hello!'])
    expect((await world.get(`/v1/conversations/${conversation}/messages?starting_after=message_00000000000000000000000000000000`, { auth: b.token })).status).toBe(404)
    expect((await world.get(`/v1/conversations/${conversation}`, { auth: b.token })).body.unread).toBe(true)
    expect((await world.get(`/v1/conversations/${conversation}`, { auth: a.token })).body.unread).toBe(false)
  })

  it('total_count is the conversation\'s messages_count, kept on write: resends count once, an operator\'s deletion counts out', async () => {
    const c = await chatter()
    const d = await chatter()
    const id = (await open(c, d.username)).body.id
    const total = async () => (await world.get(`/v1/conversations/${id}/messages?limit=1`, { auth: d.token })).body.total_count
    expect(await total()).toBe(0)
    const clientId = crypto.randomUUID()
    expect((await send(c, id, { body: 'one', client_message_id: clientId })).status).toBe(201)
    expect((await send(c, id, { body: 'one again', client_message_id: clientId })).status).toBe(200)
    expect((await send(d, id, { body: 'two' })).status).toBe(201)
    expect((await send(c, id, { body: 'three' })).status).toBe(201)
    expect(await total()).toBe(3)
    // Two deleted in one statement (the API deletes none): counted out once, per conversation.
    await world.sql`delete from app.messages where conversation_id = ${id.replace(/^conversation_/, '')}::uuid and body in ('one', 'three')`
    expect(await total()).toBe(1)
    const [row] = await world.sql`select messages_count from app.conversations where id = ${id.replace(/^conversation_/, '')}::uuid`
    expect(row!.messages_count).toBe(1)
    // Counted in the statement that writes: a message inserted and deleted in one transaction
    // counts in and out there (the delivery runs at commit), and a read in between counts it.
    const conversationId = id.replace(/^conversation_/, '')
    const counts = await world.sql.begin(async (tx) => {
      await tx`insert into app.messages (conversation_id, user_id, body) values (${conversationId}::uuid, (select id from app.users where username = ${c.username}), 'fleeting')`
      const [during] = await tx`select messages_count from app.conversations where id = ${conversationId}::uuid`
      await tx`delete from app.messages where conversation_id = ${conversationId}::uuid and body = 'fleeting'`
      return during!.messages_count as number
    })
    expect(counts).toBe(2)
    expect(await total()).toBe(1)
  })

  it('client_message_id makes sending idempotent: 200 with the original, also under concurrent resends', async () => {
    const id = crypto.randomUUID()
    const first = await send(a, conversation, { body: 'Once', client_message_id: id })
    expect(first.status).toBe(201)
    const again = await send(a, conversation, { body: 'Once (retry)', client_message_id: id })
    expect(again.status).toBe(200)
    expect(again.body).toEqual(first.body)

    const racing = crypto.randomUUID()
    const results = await Promise.all(Array.from({ length: 10 }, () => send(a, conversation, { body: 'Racing', client_message_id: racing })))
    expect(results.filter((r) => r.status === 201)).toHaveLength(1)
    expect(results.filter((r) => r.status === 200)).toHaveLength(9)
    expect(new Set(results.map((r) => r.body.id)).size).toBe(1)
    const [row] = await world.sql`select count(*)::int as n from app.messages where client_message_id = ${racing}`
    expect(row!.n).toBe(1)
  })

  it('422 for a client_message_id that is not a UUID and for neither body nor attachment', async () => {
    const bad = await send(a, conversation, { body: 'x', client_message_id: 'not-a-uuid' })
    expect(bad.status).toBe(422)
    expect(bad.body.error).toBe('client_message_id must be a UUID.')
    for (const json of [{}, { body: '' }, { body: null }, { body: null, attachment: null }]) {
      const res = await send(a, conversation, json)
      expect(res.status, JSON.stringify(json)).toBe(422)
      expect(res.body.error).toBe('A message needs a body or an attachment.')
    }
  })

  it('an uploaded image as attachment (body optional); other types are 422', async () => {
    const image = new PNG({ width: 12, height: 9 })
    const file = PNG.sync.write(image)
    const checksum = createHash('md5').update(file).digest('base64')
    // A token with scope chat alone may upload what it sends.
    const upload = (await world.post('/v1/uploads', { auth: a.token, json: { filename: 'pic.png', byte_size: file.length, checksum, content_type: 'image/png' } })).body
    expect((await fetch(upload.url, { method: 'PUT', headers: upload.headers, body: new Uint8Array(file) })).status).toBe(200)
    const res = await send(a, conversation, { attachment: upload.signed_id })
    expect(res.status).toBe(201)
    expect(res.body.body).toBe('')
    const attachment = { url: `http://api.test/files/${upload.key}`, mime_type: 'image/png', filename: 'pic.png', byte_size: file.length, width: 12, height: 9 }
    expect(res.body.attachment).toEqual(attachment)
    // The recipient sees it too, in the list and as the conversation's last message.
    const seenByB = await world.get(`/v1/conversations/${conversation}/messages?limit=1`, { auth: b.token })
    expect(seenByB.body.data[0].attachment).toEqual(attachment)
    expect((await world.get(`/v1/conversations/${conversation}`, { auth: b.token })).body.last_message.attachment).toEqual(attachment)
    // And so does message.created, broadcast at commit, when the attachment is in place.
    const [broadcast] = await world.sql`select payload from realtime.messages where event = 'message.created' and payload ->> 'id' = ${res.body.id}`
    expect(broadcast!.payload.attachment).toEqual(attachment)

    const doc = Buffer.from('text')
    const docUpload = (await world.post('/v1/uploads', { auth: a.api_key, json: { filename: 'a.txt', byte_size: doc.length, checksum: createHash('md5').update(doc).digest('base64'), content_type: 'text/plain' } })).body
    await fetch(docUpload.url, { method: 'PUT', headers: docUpload.headers, body: new Uint8Array(doc) })
    const refused = await send(a, conversation, { attachment: docUpload.signed_id })
    expect(refused.status).toBe(422)
    expect(refused.body.error).toMatch(/^attachment must be an image or a video/)
    expect((await send(a, conversation, { attachment: 'forged' })).status).toBe(422)
  })
})

describe('caps on unanswered conversations', () => {
  it('at most 3 messages until the other answers; then no cap', async () => {
    const a = await chatter()
    const b = await chatter()
    const id = (await open(a, b.username)).body.id
    for (let i = 0; i < 3; i++) expect((await send(a, id, { body: `ping ${i}` })).status).toBe(201)
    const capped = await send(a, id, { body: 'ping 3' })
    expect(capped.status).toBe(429)
    expect(capped.body.error).toBe(`You can send at most 3 messages until ${b.username} answers.`)
    expect(capped.headers.get('retry-after')).toMatch(/^\d+$/)
    expect((await send(b, id, { body: 'pong' })).status).toBe(201)
    for (let i = 0; i < 4; i++) expect((await send(a, id, { body: `more ${i}` })).status).toBe(201)
  })

  it('concurrent sends cannot exceed the cap: exactly 3 of 10 parallel messages go through', async () => {
    const a = await chatter()
    const b = await chatter()
    const id = (await open(a, b.username)).body.id
    const results = await Promise.all(Array.from({ length: 10 }, (_, i) => send(a, id, { body: `burst ${i}` })))
    expect(results.filter((r) => r.status === 201)).toHaveLength(3)
    expect(results.filter((r) => r.status === 429)).toHaveLength(7)
    const [row] = await world.sql`select count(*)::int as n from app.messages where conversation_id = app.from_public_id('conversation', ${id})`
    expect(row!.n).toBe(3)
  })

  it('at most 5 distinct unanswered conversations per 24 hours, also under concurrency', async () => {
    const a = await chatter()
    const others = await Promise.all(Array.from({ length: 8 }, () => chatter()))
    const ids = await Promise.all(others.map(async (o) => (await open(a, o.username)).body.id as string))
    for (const id of ids.slice(0, 4)) expect((await send(a, id, { body: 'hello' })).status).toBe(201)
    const results = await Promise.all(ids.slice(4).map((id) => send(a, id, { body: 'hello' })))
    expect(results.filter((r) => r.status === 201)).toHaveLength(1)
    const refused = results.find((r) => r.status === 429)!
    expect(refused.body.error).toBe('You can message at most 5 people who have not answered you within 24 hours.')
    // Messaging a conversation already counted is still fine (up to its own cap of 3).
    expect((await send(a, ids[0]!, { body: 'again' })).status).toBe(201)
    // When one of them answers, room opens up.
    await send(others[0]!, ids[0]!, { body: 'answer' })
    const stillWaiting = results.findIndex((r) => r.status === 429)
    expect((await send(a, ids[4 + stillWaiting]!, { body: 'now?' })).status).toBe(201)
  })
})

describe('message reactions', () => {
  it('201 for a quick-set emoji; again is a no-op; 400 missing; 422 other emoji; DELETE 204 even when absent', async () => {
    const a = await chatter()
    const b = await chatter()
    const id = (await open(a, b.username)).body.id
    const message = (await send(a, id, { body: 'react to me' })).body
    const react = (content?: string, who = b) => world.post(`/v1/messages/${message.id}/reactions`, { auth: who.token, json: content === undefined ? {} : { content } })

    const first = await react('❤️')
    expect(first.status).toBe(201)
    expect(first.body).toMatchObject({ content: '❤️', user: { username: b.username } })
    expect((await react('❤️')).status).toBe(201)
    expect((await react('🔥')).status).toBe(201)
    const seen = await world.get(`/v1/conversations/${id}/messages`, { auth: a.token })
    expect(seen.body.data[0].reactions.map((r: { content: string }) => r.content)).toEqual(['❤️', '🔥'])

    const missing = await react()
    expect(missing.status).toBe(400)
    expect(missing.body.error).toMatch(/^content is required/)
    for (const content of ['🎉', '❤', 'heart', '']) {
      const res = await react(content)
      expect(res.status, content).toBe(422)
    }
    expect((await world.delete(`/v1/messages/${message.id}/reactions/${encodeURIComponent('❤️')}`, { auth: b.token })).status).toBe(204)
    expect((await world.delete(`/v1/messages/${message.id}/reactions/${encodeURIComponent('❤️')}`, { auth: b.token })).status).toBe(204)
    const after = await world.get(`/v1/conversations/${id}/messages`, { auth: a.token })
    expect(after.body.data[0].reactions.map((r: { content: string }) => r.content)).toEqual(['🔥'])

    const outsider = await chatter()
    expect((await react('👍', outsider)).status).toBe(404)
    expect((await world.delete(`/v1/messages/${message.id}/reactions/${encodeURIComponent('🔥')}`, { auth: outsider.token })).status).toBe(404)
    expect((await world.post('/v1/messages/message_00000000000000000000000000000000/reactions', { auth: b.token, json: { content: '👍' } })).status).toBe(404)
  })
})

describe('rate limits', () => {
  it('marking read is limited (429 with Retry-After)', async () => {
    const a = await chatter()
    const b = await chatter()
    const id = (await open(a, b.username)).body.id
    for (let i = 0; i < 60; i++) expect((await world.post(`/v1/conversations/${id}/reading`, { auth: a.token })).status).toBe(204)
    const limited = await world.post('/v1/conversations/reading', { auth: a.token })
    expect(limited.status).toBe(429)
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0)
  })

  it('new conversations are limited; reopening an existing one is not', async () => {
    const a = await chatter()
    await world.sql`update app.rate_limits set max_events = 2 where action = 'conversation_create'`
    try {
      const others = await Promise.all([1, 2, 3].map(() => chatter()))
      expect((await open(a, others[0]!.username)).status).toBe(201)
      expect((await open(a, others[1]!.username)).status).toBe(201)
      expect((await open(a, others[2]!.username)).status).toBe(429)
      expect((await open(a, others[0]!.username)).status).toBe(200)
    } finally {
      await world.sql`update app.rate_limits set max_events = 20 where action = 'conversation_create'`
    }
  })
})
