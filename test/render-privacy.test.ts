// Issue 11, item 7: every member is rendered as the viewer may see them, in every payload that
// reaches someone else. expand=reactions over HTTP (a like is its reactor's activity: hidden
// where their comment would be, still counted), and realtime payloads with the real
// @supabase/supabase-js client through the local gateway (never the sender's own-record fields).
import type { SupabaseClient } from '@supabase/supabase-js'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'
import { type Listener, listen as listenTo } from './support/realtime.ts'
import { asMember } from './support/sql.ts'

let world: TestWorld
let owner: CreatedUser // public, posts the todo
let pub: CreatedUser // public reactor
let prot: CreatedUser // protected reactor
let priv: CreatedUser // private reactor
let follower: CreatedUser // follows prot
let stranger: CreatedUser // follows nobody
let todoId: string

const reactors = (todo: { reactions: { reactor: { username: string } }[] }) => todo.reactions.map((r) => r.reactor.username)
const react = (user: CreatedUser, id: string) =>
  world.post('/v1/reactions', { auth: user.api_key, json: { reactable_type: 'Todo', reactable_id: id } })

beforeAll(async () => {
  world = await startWorld()
  owner = await world.createUser('owner')
  pub = await world.createUser('pub')
  prot = await world.createUser('prot', '--privacy', 'protected')
  priv = await world.createUser('priv', '--privacy', 'private')
  follower = await world.createUser('follower')
  stranger = await world.createUser('stranger')
  expect((await world.post(`/v1/users/${prot.id}/follow`, { auth: follower.api_key })).status).toBe(204)
  // A protected member's follower is one they approved (issue 13).
  expect((await world.post('/v1/follow_requests/follower/approve', { auth: prot.api_key })).status).toBe(204)
  todoId = (await world.post('/v1/todos', { auth: owner.api_key, json: { body: 'Shipped the thing' } })).body.id
  // Oldest first: pub, prot, priv (the preview is newest first).
  for (const who of [pub, prot, priv]) expect((await react(who, todoId)).status).toBe(201)
})
afterAll(() => world.close())

describe('expand=reactions shows a reactor only to who may see their activity', () => {
  const cases: [string, () => CreatedUser, string[]][] = [
    ['a stranger sees only the public reactor', () => stranger, ['pub']],
    ['a follower of the protected reactor sees them too', () => follower, ['prot', 'pub']],
    ['the private reactor sees their own like', () => priv, ['priv', 'pub']],
    ['the protected reactor sees their own like', () => prot, ['prot', 'pub']],
    ["the todo's owner sees every like on it (as every comment)", () => owner, ['priv', 'prot', 'pub']],
  ]
  for (const [name, viewer, expected] of cases) {
    it(`${name}; reactions_count counts all three`, async () => {
      const one = await world.get(`/v1/todos/${todoId}?expand=reactions`, { auth: viewer().api_key })
      expect(one.status).toBe(200)
      expect(reactors(one.body)).toEqual(expected)
      expect(one.body.reactions_count).toBe(3)
      // The lists render through the same code: a member's todos, every todo, the timeline of a
      // follower of the owner.
      const list = await world.get(`/v1/users/${owner.id}/todos?expand=reactions`, { auth: viewer().api_key })
      const listed = list.body.data.find((t: { id: string }) => t.id === todoId)
      expect(reactors(listed)).toEqual(expected)
      expect(listed.reactions_count).toBe(3)
      const all = await world.get('/v1/todos?expand=reactions', { auth: viewer().api_key })
      expect(reactors(all.body.data.find((t: { id: string }) => t.id === todoId))).toEqual(expected)
    })
  }

  it('the preview is the newest 5 reactions the viewer may see, not the newest 5 minus hidden ones', async () => {
    const todo = (await world.post('/v1/todos', { auth: owner.api_key, json: { body: 'Popular' } })).body.id
    const publics: CreatedUser[] = []
    for (let i = 0; i < 5; i++) publics.push(await world.createUser(`fan${i}`))
    for (const fan of publics) expect((await react(fan, todo)).status).toBe(201)
    expect((await react(priv, todo)).status).toBe(201)
    expect((await react(prot, todo)).status).toBe(201)
    const seen = await world.get(`/v1/todos/${todo}?expand=reactions`, { auth: stranger.api_key })
    expect(reactors(seen.body)).toEqual(['fan4', 'fan3', 'fan2', 'fan1', 'fan0'])
    expect(seen.body.reactions_count).toBe(7)
    const byFollower = await world.get(`/v1/todos/${todo}?expand=reactions`, { auth: follower.api_key })
    expect(reactors(byFollower.body)).toEqual(['prot', 'fan4', 'fan3', 'fan2', 'fan1'])
  })

  it('the reactions policy (the last line of defence) follows the same rule, for likes of todos and of comments', async () => {
    const uuid = async (u: CreatedUser) => ((await world.sql`select app.from_public_id('user', ${u.id}) as id`)[0]!.id as string)
    const commentId = (await world.post('/v1/comments', { auth: owner.api_key, json: { commentable_type: 'Todo', commentable_id: todoId, body: 'Thanks all' } })).body.id
    for (const who of [pub, priv]) expect((await world.post('/v1/reactions', { auth: who.api_key, json: { reactable_type: 'Comment', reactable_id: commentId } })).status).toBe(201)
    const seenBy = async (viewer: CreatedUser) => {
      const rows = await asMember(world.sql, { sub: await uuid(viewer) }, (tx) => tx<{ username: string; on: string }[]>`
        select u.username, case when r.todo_id is not null then 'todo' else 'comment' end as on
        from app.reactions r join app.users u on u.id = r.user_id
        where r.todo_id = app.from_public_id('todo', ${todoId}) or r.comment_id = app.from_public_id('comm', ${commentId})
        order by 2 desc, 1`)
      return rows.map((r) => `${r.on}:${r.username}`)
    }
    expect(await seenBy(stranger)).toEqual(['todo:pub', 'comment:pub'])
    expect(await seenBy(follower)).toEqual(['todo:prot', 'todo:pub', 'comment:pub'])
    expect(await seenBy(priv)).toEqual(['todo:priv', 'todo:pub', 'comment:priv', 'comment:pub'])
    expect(await seenBy(owner)).toEqual(['todo:priv', 'todo:prot', 'todo:pub', 'comment:priv', 'comment:pub'])
  })

  it('a member who turns private takes their likes out of others\' previews at once', async () => {
    const switcher = await world.createUser('switcher')
    const todo = (await world.post('/v1/todos', { auth: owner.api_key, json: { body: 'Watch me' } })).body.id
    expect((await react(switcher, todo)).status).toBe(201)
    expect(reactors((await world.get(`/v1/todos/${todo}?expand=reactions`, { auth: stranger.api_key })).body)).toEqual(['switcher'])
    await world.sql`update app.users set privacy = 'private' where username = 'switcher'`
    const after = (await world.get(`/v1/todos/${todo}?expand=reactions`, { auth: stranger.api_key })).body
    expect(reactors(after)).toEqual([])
    expect(after.reactions_count).toBe(1)
  })
})

// ---------------------------------------------------------------------------------------------
// Realtime payloads
// ---------------------------------------------------------------------------------------------

const clients: SupabaseClient[] = []
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.realtime.disconnect()))
})

/** Subscribes to a private topic like a chat app does, resolving once the join is answered. */
const listen = (token: string, topic: string): Promise<Listener> => listenTo(world.baseUrl, clients, token, topic)

describe('realtime payloads render members as the other participant sees them', () => {
  let sender: CreatedUser & { token: string }
  let recipient: CreatedUser & { token: string }
  let conversation: string

  beforeAll(async () => {
    const make = async (name: string) => {
      const user = await world.createUser(name)
      return { ...user, token: await world.token(name, 'public chat', { chat: true }) }
    }
    sender = await make('sender')
    recipient = await make('recipient')
    // Fields only their owners may see, on both sides; the recipient follows the sender.
    for (const [who, zone] of [[sender, 'Asia/Tokyo'], [recipient, 'Europe/Paris']] as const) {
      const res = await world.patch('/v1/users/me', { auth: who.api_key, json: { dismissed_time_zone: zone } })
      expect(res.body.dismissed_time_zone).toBe(zone)
    }
    expect((await world.post(`/v1/users/${sender.id}/follow`, { auth: recipient.api_key })).status).toBe(204)
    conversation = (await world.post('/v1/conversations', { auth: sender.token, json: { user: 'recipient' } })).body.id
    await world.post(`/v1/conversations/${conversation}/messages`, { auth: recipient.token, json: { body: 'hi' } })
  })

  it('message.created: the Message as the recipient sees it (no dismissed_time_zone of the sender), to both participants', async () => {
    const recipientListens = await listen(recipient.token, `conversation:${conversation}`)
    const senderListens = await listen(sender.token, `conversation:${conversation}`)
    expect([recipientListens.status, senderListens.status]).toEqual(['SUBSCRIBED', 'SUBSCRIBED'])
    const sent = await world.post(`/v1/conversations/${conversation}/messages`, { auth: sender.token, json: { body: 'secret zone?' } })
    expect(sent.status).toBe(201)
    // The sender's own answer carries their own record (that is theirs to see).
    expect(sent.body.creator.dismissed_time_zone).toBe('Asia/Tokyo')

    const delivered = await recipientListens.waitFor('message.created', (m) => m.id === sent.body.id)
    expect(delivered.creator).not.toHaveProperty('dismissed_time_zone')
    expect(JSON.stringify(delivered)).not.toContain('Asia/Tokyo')
    // following: the recipient follows the sender; follows_you: the sender follows the recipient.
    expect(delivered.creator).toMatchObject({ username: 'sender', following: true, follows_you: false })
    // Exactly what the recipient reads over REST.
    const listed = await world.get(`/v1/conversations/${conversation}/messages`, { auth: recipient.token })
    expect(delivered).toEqual(listed.body.data.find((m: { id: string }) => m.id === sent.body.id))
    // The sender receives the same payload: the message as the recipient sees it.
    expect(await senderListens.waitFor('message.created', (m) => m.id === sent.body.id)).toEqual(delivered)
  })

  it('reaction.created and reaction.deleted render the reacting member as the other participant sees them', async () => {
    const senderListens = await listen(sender.token, `conversation:${conversation}`)
    expect(senderListens.status).toBe('SUBSCRIBED')
    const message = (await world.post(`/v1/conversations/${conversation}/messages`, { auth: sender.token, json: { body: 'react' } })).body
    const reacted = await world.post(`/v1/messages/${message.id}/reactions`, { auth: recipient.token, json: { content: '🔥' } })
    expect(reacted.status).toBe(201)
    const created = await senderListens.waitFor('reaction.created', (p) => p.message_id === message.id)
    expect(created.user).not.toHaveProperty('dismissed_time_zone')
    expect(JSON.stringify(created)).not.toContain('Europe/Paris')
    // As the sender sees the recipient: the sender does not follow them; they follow the sender.
    expect(created.user).toMatchObject({ username: 'recipient', following: false, follows_you: true })
    expect((await world.delete(`/v1/messages/${message.id}/reactions/${encodeURIComponent('🔥')}`, { auth: recipient.token })).status).toBe(204)
    const deleted = await senderListens.waitFor('reaction.deleted', (p) => p.message_id === message.id)
    expect(deleted.user).not.toHaveProperty('dismissed_time_zone')
    expect(deleted.user).toMatchObject({ username: 'recipient', following: false, follows_you: true })
  })

  it('no broadcast of any kind carries a dismissed_time_zone (read receipts, inbox updates, new conversations)', async () => {
    const inbox = await listen(recipient.token, `user:${recipient.id}`)
    const topic = await listen(recipient.token, `conversation:${conversation}`)
    expect([inbox.status, topic.status]).toEqual(['SUBSCRIBED', 'SUBSCRIBED'])
    const sent = await world.post(`/v1/conversations/${conversation}/messages`, { auth: sender.token, json: { body: 'read me' } })
    await inbox.waitFor('inbox.updated', (p) => p.message_id === sent.body.id)
    await world.post(`/v1/conversations/${conversation}/reading`, { auth: sender.token })
    expect((await world.post(`/v1/conversations/${conversation}/reading`, { auth: recipient.token })).status).toBe(204)
    const receipt = await topic.waitFor('conversation.read')
    // Ids and a time only (realtime.send adds the message's own id).
    expect(Object.keys(receipt).sort()).toEqual(['conversation_id', 'id', 'read_at', 'user_id'])
    const rows = await world.sql<{ payload: unknown }[]>`select payload from realtime.messages where extension = 'broadcast'`
    expect(rows.length).toBeGreaterThan(3)
    for (const row of rows) expect(JSON.stringify(row.payload)).not.toMatch(/dismissed_time_zone|Asia\/Tokyo|Europe\/Paris/)
  })
})
