// Issue 19, item 3: races. Every idempotent operation sent ten times at once over HTTP leaves
// exactly one row (and every answer is a success, never a 5xx from a unique violation or a
// deadlock); then a seeded random workload of members posting, deleting, commenting, replying,
// reacting, following, changing privacy, moving todos between projects, messaging and reading runs concurrently, and afterwards
// every stored counter equals a recount. docs/reliability.md, "Races", lists what is covered.
import { randomBytes, randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type CreatedUser, type HttpResult, type TestWorld, startWorld } from './support/app.ts'
import { waitForLockWait } from './support/locks.ts'
import { NO_DRIFT, counterDrift, streakDrift } from './support/drift.ts'

let world: TestWorld
const PARALLEL = 10

/** Sends the same request PARALLEL times at once; every answer must be a success. */
async function tenAtOnce(send: () => Promise<HttpResult>): Promise<HttpResult[]> {
  const results = await Promise.all(Array.from({ length: PARALLEL }, send))
  for (const res of results) expect(res.status, res.text).toBeLessThan(300)
  return results
}

const count = async (query: Promise<{ n: number }[]>) => (await query)[0]!.n

beforeAll(async () => {
  world = await startWorld()
  // The workload is many writes from few members in seconds: the limits of docs/rate-limits.md
  // would answer 429 long before any race shows. An operator raises them the same way.
  await world.sql`update app.rate_limits set max_events = 1000000`
})
afterAll(() => world.close())

describe('parallel duplicates of every idempotent operation leave exactly one row', () => {
  let ann: CreatedUser
  let ben: CreatedUser
  let annChat: string
  let benChat: string
  let todo: string
  let comment: string

  beforeAll(async () => {
    ann = await world.createUser('ann')
    ben = await world.createUser('ben')
    await world.createUser('pia', '--privacy', 'protected')
    annChat = await world.token('ann', 'chat', { chat: true })
    benChat = await world.token('ben', 'chat', { chat: true })
    todo = (await world.post('/v1/todos', { auth: ann.api_key, json: { body: 'race me' } })).body.id
    comment = (await world.post('/v1/comments', { auth: ann.api_key, json: { commentable_type: 'Todo', commentable_id: todo, body: 'first' } })).body.id
  })

  it('reactions on a todo and on a comment: one row each, one reaction id, counts of 1', async () => {
    for (const [type, id] of [['Todo', todo], ['Comment', comment]] as const) {
      const results = await tenAtOnce(() => world.post('/v1/reactions', { auth: ben.api_key, json: { reactable_type: type, reactable_id: id } }))
      expect(new Set(results.map((res) => res.body.id)).size, type).toBe(1)
    }
    expect(await count(world.sql`select count(*)::int as n from app.reactions r join app.users u on u.id = r.user_id where u.username = 'ben'`)).toBe(2)
    expect((await world.get(`/v1/todos/${todo}`, { auth: ann.api_key })).body.reactions_count).toBe(1)
    // Parallel unreactions: all succeed or find it gone, none fails, and the counts go back to 0.
    const reaction = (await world.post('/v1/reactions', { auth: ben.api_key, json: { reactable_type: 'Todo', reactable_id: todo } })).body.id
    const deletes = await Promise.all(Array.from({ length: PARALLEL }, () => world.delete(`/v1/reactions/${reaction}`, { auth: ben.api_key })))
    for (const res of deletes) expect([204, 404], res.text).toContain(res.status)
    expect((await world.get(`/v1/todos/${todo}`, { auth: ann.api_key })).body.reactions_count).toBe(0)
  })

  it('user follows, project follows, follow requests and mutes: one row each', async () => {
    await tenAtOnce(() => world.post('/v1/users/ann/follow', { auth: ben.api_key }))
    expect(await count(world.sql`select count(*)::int as n from app.user_follows f join app.users u on u.id = f.followee_id where u.username = 'ann'`)).toBe(1)
    expect((await world.get('/v1/users/ann', { auth: ben.api_key })).body.followers_count).toBe(1)

    const project = await world.admin('create-project', '--owner', 'ann', '--name', 'Racer', '--slug', 'racer')
    await tenAtOnce(() => world.post(`/v1/projects/${project.id}/follow`, { auth: ben.api_key }))
    expect(await count(world.sql`select count(*)::int as n from app.project_follows f where f.project_id = (select id from app.projects where slug = 'racer')`)).toBe(1)

    await tenAtOnce(() => world.post('/v1/users/pia/follow', { auth: ben.api_key }))
    expect(await count(world.sql`select count(*)::int as n from app.user_follow_requests r join app.users u on u.id = r.followee_id where u.username = 'pia'`)).toBe(1)
    expect(await count(world.sql`select count(*)::int as n from app.user_follows f join app.users u on u.id = f.followee_id where u.username = 'pia'`)).toBe(0)

    const guarded = await world.admin('create-project', '--owner', 'pia', '--name', 'Guarded', '--slug', 'guarded', '--privacy', 'protected')
    await tenAtOnce(() => world.post(`/v1/projects/${guarded.id}/follow`, { auth: ben.api_key }))
    expect(await count(world.sql`select count(*)::int as n from app.project_follow_requests r where r.project_id = (select id from app.projects where slug = 'guarded')`)).toBe(1)

    // Approving the same request ten times at once makes one follow, and the request is gone.
    const pia = (await world.admin('create-key', '--user', 'pia')).api_key as string
    const approvals = await Promise.all(Array.from({ length: PARALLEL }, () => world.post('/v1/follow_requests/ben/approve', { auth: pia })))
    for (const res of approvals) expect([204, 404], res.text).toContain(res.status)
    expect(approvals.filter((res) => res.status === 204).length).toBeGreaterThanOrEqual(1)
    expect(await count(world.sql`select count(*)::int as n from app.user_follows f join app.users u on u.id = f.followee_id where u.username = 'pia'`)).toBe(1)
    expect(await count(world.sql`select count(*)::int as n from app.user_follow_requests r join app.users u on u.id = r.followee_id where u.username = 'pia'`)).toBe(0)

    await tenAtOnce(() => world.post('/v1/users/ann/mute', { auth: ben.api_key }))
    expect(await count(world.sql`select count(*)::int as n from app.mutes m join app.users u on u.id = m.user_id where u.username = 'ben'`)).toBe(1)
    // And parallel unfollows and unmutes: none fails, nothing is left, the count is back to 0.
    await tenAtOnce(() => world.delete('/v1/users/ann/follow', { auth: ben.api_key }))
    await tenAtOnce(() => world.delete('/v1/users/ann/mute', { auth: ben.api_key }))
    expect((await world.get('/v1/users/ann', { auth: ben.api_key })).body.followers_count).toBe(0)
    expect(await count(world.sql`select count(*)::int as n from app.mutes m join app.users u on u.id = m.user_id where u.username = 'ben'`)).toBe(0)
  })

  it('devices: one row for one token', async () => {
    const devices = await world.token('ann', 'notifications', { firstParty: true })
    const token = randomBytes(32).toString('hex')
    await tenAtOnce(() => world.post('/v1/devices', { auth: devices, json: { token, platform: 'ios' } }))
    expect(await count(world.sql`select count(*)::int as n from app.devices where token = ${token}`)).toBe(1)
  })

  it('conversations opened from both sides at once: one conversation with two members', async () => {
    const results = await Promise.all(Array.from({ length: PARALLEL }, (_, i) =>
      world.post('/v1/conversations', { auth: i % 2 ? annChat : benChat, json: { user: i % 2 ? 'ben' : 'ann' } })))
    for (const res of results) expect(res.status, res.text).toBeLessThan(300)
    expect(new Set(results.map((res) => res.body.id)).size).toBe(1)
    expect(await count(world.sql`select count(*)::int as n from app.conversations`)).toBe(1)
    expect(await count(world.sql`select count(*)::int as n from app.conversation_members`)).toBe(2)
  })

  it('a message resent with one client_message_id: one message, and every answer is it', async () => {
    const conversation = (await world.post('/v1/conversations', { auth: annChat, json: { user: 'ben' } })).body.id
    const clientMessageId = randomUUID()
    const results = await tenAtOnce(() => world.post(`/v1/conversations/${conversation}/messages`, { auth: annChat, json: { body: 'once', client_message_id: clientMessageId } }))
    expect(new Set(results.map((res) => res.body.id)).size).toBe(1)
    expect(results.filter((res) => res.status === 201).length).toBe(1)
    expect(await count(world.sql`select count(*)::int as n from app.messages where client_message_id = ${clientMessageId}`)).toBe(1)

    const message = results[0]!.body.id
    await tenAtOnce(() => world.post(`/v1/messages/${message}/reactions`, { auth: benChat, json: { content: '👍' } }))
    expect(await count(world.sql`select count(*)::int as n from app.message_reactions`)).toBe(1)
  })

  it('a resend racing the unanswered-conversation cap still gets the original message (200), never 429', async () => {
    // The cap allows 3 messages until the other member answers: the third is sent ten times at
    // once with one client_message_id. One send makes it; the others are resends of it.
    const cyd = await world.createUser('cyd')
    const cydChat = await world.token('cyd', 'chat', { chat: true })
    const conversation = (await world.post('/v1/conversations', { auth: cydChat, json: { user: 'ann' } })).body.id
    for (const body of ['one', 'two']) expect((await world.post(`/v1/conversations/${conversation}/messages`, { auth: cydChat, json: { body } })).status).toBe(201)
    const clientMessageId = randomUUID()
    const results = await tenAtOnce(() => world.post(`/v1/conversations/${conversation}/messages`, { auth: cydChat, json: { body: 'three', client_message_id: clientMessageId } }))
    expect(new Set(results.map((res) => res.body.id)).size).toBe(1)
    expect(await count(world.sql`select count(*)::int as n from app.messages where client_message_id = ${clientMessageId}`)).toBe(1)
  })

  it('opening one conversation ten times at once counts once toward conversation_create', async () => {
    await world.sql`update app.rate_limits set max_events = 1 where action = 'conversation_create'`
    try {
      const dot = await world.createUser('dot')
      const dotChat = await world.token('dot', 'chat', { chat: true })
      const results = await tenAtOnce(() => world.post('/v1/conversations', { auth: dotChat, json: { user: 'ben' } }))
      expect(new Set(results.map((res) => res.body.id)).size).toBe(1)
    } finally {
      await world.sql`update app.rate_limits set max_events = 1000000 where action = 'conversation_create'`
    }
  })

  it('at a limit of one, ten duplicates of a counted operation count once: every one succeeds', async () => {
    // Only the request that makes the row counts (docs/rate-limits.md); duplicates racing it
    // must find the row, not spend the limit. A fresh member and target for each action.
    const cases: [string, (me: CreatedUser) => Promise<() => Promise<HttpResult>>][] = [
      ['reaction_create', async (me) => () => world.post('/v1/reactions', { auth: me.api_key, json: { reactable_type: 'Todo', reactable_id: todo } })],
      ['user_follow', async (me) => () => world.post('/v1/users/ann/follow', { auth: me.api_key })],
      ['user_follow', async (me) => () => world.post('/v1/users/pia/follow', { auth: me.api_key })],
      ['project_follow', async (me) => () => world.post('/v1/projects/racer/follow', { auth: me.api_key })],
      ['project_follow', async (me) => () => world.post('/v1/projects/guarded/follow', { auth: me.api_key })],
      ['mute_create', async (me) => () => world.post('/v1/users/ann/mute', { auth: me.api_key })],
    ]
    for (const [i, [action, make]] of cases.entries()) {
      await world.sql`update app.rate_limits set max_events = 1 where action = ${action}`
      try {
        const me = await world.createUser(`limited${i}`)
        await tenAtOnce(await make(me))
      } finally {
        await world.sql`update app.rate_limits set max_events = 1000000 where action = ${action}`
      }
    }
  })

  it('one hot conversation: messages from both sides and reads at once keep its order and unread flags', async () => {
    const conversation = (await world.post('/v1/conversations', { auth: annChat, json: { user: 'ben' } })).body.id
    const conversationId = conversation.replace(/^conversation_/, '')
    await world.post(`/v1/conversations/${conversation}/messages`, { auth: benChat, json: { body: 'answered' } })
    for (let round = 0; round < 5; round += 1) {
      await tenAtOnce(async () => {
        const i = Math.floor(Math.random() * 4)
        const chat = i % 2 ? annChat : benChat
        return i < 2
          ? await world.post(`/v1/conversations/${conversation}/messages`, { auth: chat, json: { body: `round ${round}` } })
          : await world.post(`/v1/conversations/${conversation}/reading`, { auth: chat })
      })
    }
    // One last message from ben: ann's side is unread, ben's read, whatever the rounds left, and
    // each side is unread exactly when the other participant wrote after its last read.
    expect((await world.post(`/v1/conversations/${conversation}/messages`, { auth: benChat, json: { body: 'last' } })).status).toBe(201)
    const sides = await world.sql`
      select u.username, m.unread,
             exists (select 1 from app.messages x where x.conversation_id = m.conversation_id and x.user_id <> m.user_id
                       and x.created_at > coalesce(m.last_read_at, '-infinity')) as other_wrote_since
      from app.conversation_members m join app.users u on u.id = m.user_id
      where m.conversation_id = ${conversationId}::uuid order by u.username`
    expect(sides.map((row) => [row.username, row.unread, row.other_wrote_since])).toEqual([['ann', true, true], ['ben', false, false]])
    expect((await world.get('/v1/conversations?unread=true', { auth: annChat })).body.data.map((c: { id: string }) => c.id)).toContain(conversation)
  })

  it('a message delivered while a read waits for the row stays unread: the read marks only what its snapshot saw', async () => {
    const conversation = (await world.post('/v1/conversations', { auth: annChat, json: { user: 'ben' } })).body.id
    const conversationId = conversation.replace(/^conversation_/, '')
    expect((await world.post(`/v1/conversations/${conversation}/messages`, { auth: benChat, json: { body: 'seen' } })).status).toBe(201)
    const annSide = async () => (await world.sql`
      select m.unread from app.conversation_members m join app.users u on u.id = m.user_id
      where m.conversation_id = ${conversationId}::uuid and u.username = 'ann'`)[0]!.unread as boolean
    expect(await annSide()).toBe(true)
    // Ben's next message: its delivery (run now, not at commit) holds ann's row until it commits.
    const sender = await world.sql.reserve()
    try {
      await sender`begin`
      await sender`insert into app.messages (conversation_id, user_id, body)
                   values (${conversationId}::uuid, (select id from app.users where username = 'ben'), 'never seen by the read')`
      await sender`set constraints all immediate`
      // Ann reads: her snapshot has only 'seen'; her update waits for the row ben's delivery holds.
      const reading = world.post(`/v1/conversations/${conversation}/reading`, { auth: annChat })
      await waitForLockWait(world.sql, { query: /conversation_read/ })
      await sender`commit`
      expect((await reading).status).toBe(204)
    } finally {
      sender.release()
    }
    // The message committed after the read began: ann never saw it, so it is still unread.
    expect(await annSide()).toBe(true)
    // A read that sees it marks it read.
    expect((await world.post(`/v1/conversations/${conversation}/reading`, { auth: annChat })).status).toBe(204)
    expect(await annSide()).toBe(false)
    expect(await counterDrift(world.sql)).toEqual(NO_DRIFT)
  })

  it('a send that started first but commits last is still dated after the messages before it', async () => {
    // The race the hot conversation found, made deterministic: a transaction that began (and so
    // has its now()) before another member's send commits, then inserts its own message.
    const conversation = (await world.post('/v1/conversations', { auth: annChat, json: { user: 'ben' } })).body.id
    const conversationId = conversation.replace(/^conversation_/, '')
    await world.sql.begin(async (tx) => {
      await tx`select now()`
      const reply = await world.post(`/v1/conversations/${conversation}/messages`, { auth: benChat, json: { body: 'committed first' } })
      expect(reply.status, reply.text).toBe(201)
      await tx`insert into app.messages (conversation_id, user_id, body)
               values (${conversationId}::uuid, (select id from app.users where username = 'ann'), 'started first, committed last')`
    })
    const [order] = await world.sql`
      select (select body from app.messages where conversation_id = ${conversationId}::uuid order by created_at desc, id desc limit 1) as newest,
             (select last_message_at = (select max(created_at) from app.messages where conversation_id = c.id) from app.conversations c where c.id = ${conversationId}::uuid) as in_step`
    expect(order).toEqual({ newest: 'started first, committed last', in_step: true })
    // Ben's side is unread (ann wrote last), ann's is read.
    const unread = await world.sql`select u.username, m.unread from app.conversation_members m join app.users u on u.id = m.user_id where m.conversation_id = ${conversationId}::uuid order by u.username`
    expect(unread.map((row) => [row.username, row.unread])).toEqual([['ann', false], ['ben', true]])
  })

  it('one hot todo: reactions, unreactions, comments and their deletions at once', async () => {
    const hot = (await world.post('/v1/todos', { auth: ann.api_key, json: { body: 'hot' } })).body.id
    const people = [ann, ben, ...await Promise.all(['h1', 'h2', 'h3'].map((name) => world.createUser(name)))]
    for (let round = 0; round < 5; round += 1) {
      const results = await Promise.all(people.flatMap((person) => [
        world.post('/v1/reactions', { auth: person.api_key, json: { reactable_type: 'Todo', reactable_id: hot } }),
        world.post('/v1/comments', { auth: person.api_key, json: { commentable_type: 'Todo', commentable_id: hot, body: `round ${round}` } }),
      ]))
      for (const res of results) expect(res.status, res.text).toBeLessThan(300)
      await Promise.all(results.filter((res) => res.body.id.startsWith(round % 2 ? 'reac_' : 'comm_')).map(async (res) => {
        const owner = people.find((person) => person.id === (res.body.reactor ?? res.body.creator).id)!
        const gone = await world.delete(`/v1/${res.body.id.startsWith('reac_') ? 'reactions' : 'comments'}/${res.body.id}`, { auth: owner.api_key })
        expect(gone.status, gone.text).toBe(204)
      }))
    }
  })

  it('and no counter drifted', async () => {
    expect(await counterDrift(world.sql)).toEqual(NO_DRIFT)
    expect(await streakDrift(world.sql)).toEqual([])
  })
})

// ---------------------------------------------------------------------------------------------

/** mulberry32: a small seeded generator, so a failing workload can be replayed exactly. */
function generator(seed: number) {
  let state = seed >>> 0
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  return { next, pick: <T>(items: T[]): T | undefined => items[Math.floor(next() * items.length)] }
}

const SEED = Number(process.env.RACES_SEED ?? 19)
const OPERATIONS = 400

describe(`a random concurrent workload (seed ${SEED}) leaves every counter equal to a recount`, () => {
  interface Member { user: CreatedUser; chat: string }
  const members: Member[] = []
  const todos: string[] = []
  const comments: string[] = []
  // Who wrote what, so deletions mostly hit the member's own (others' answer 403, which races nothing).
  const authors = new Map<string, Member>()
  const own = (ids: string[], member: Member) => ids.filter((id) => authors.get(id) === member)
  const reactions: { id: string; by: Member }[] = []
  const projects: string[] = []
  const conversations: { id: string; between: [Member, Member] }[] = []
  const statuses = new Map<string, number>()

  beforeAll(async () => {
    for (const name of ['w0', 'w1', 'w2', 'w3', 'w4', 'w5']) {
      const user = await world.createUser(name)
      members.push({ user, chat: await world.token(name, 'chat', { chat: true }) })
    }
    // Everyone makes every project, so each #work tag makes a project todo, and an edit moves a
    // todo between projects (the project counters of issue 28).
    const everyone = members.map((m) => m.user.username).join(',')
    for (const [i, member] of members.slice(0, 3).entries()) {
      projects.push((await world.admin('create-project', '--owner', member.user.username, '--name', `Work ${i}`, '--slug', `work-${i}`, '--hashtag', `work${i}`, '--makers', everyone)).id)
    }
    // Older todos, in hours that are sealed (issue 26), so the workload's deletions and privacy
    // changes move counts of sealed hours too; and backdated ones posted after the sealing.
    for (const [i, member] of members.entries()) {
      for (const hoursAgo of [3, 26, 50]) {
        const todo = await world.admin('create-todo', '--user', member.user.username, '--body', `earlier ${i} #work${i % 3}`, '--created-at', new Date(Date.now() - hoursAgo * 3_600_000).toISOString())
        todos.push(todo.id)
        authors.set(todo.id, member)
      }
    }
    await world.sql`select app.seal_todo_hours()`
    for (const [i, member] of members.entries()) {
      const todo = await world.admin('create-todo', '--user', member.user.username, '--body', `backdated ${i}`, '--created-at', new Date(Date.now() - 30 * 3_600_000).toISOString())
      todos.push(todo.id)
      authors.set(todo.id, member)
    }
    // Conversations answered once on both sides, so the unanswered-conversation caps stay out of the way.
    for (let i = 0; i < members.length; i += 1) {
      const [a, b] = [members[i]!, members[(i + 1) % members.length]!]
      const id = (await world.post('/v1/conversations', { auth: a.chat, json: { user: b.user.username } })).body.id
      await world.post(`/v1/conversations/${id}/messages`, { auth: a.chat, json: { body: 'hi' } })
      await world.post(`/v1/conversations/${id}/messages`, { auth: b.chat, json: { body: 'hi back' } })
      conversations.push({ id, between: [a, b] })
    }
  })

  it('runs without a 5xx, and every counter equals its recount', async () => {
    const random = generator(SEED)
    const operations: (() => Promise<[string, number]>)[] = []
    for (let i = 0; i < OPERATIONS; i += 1) {
      const me = random.pick(members)!
      const other = random.pick(members)!
      const roll = random.next()
      const kind = random.pick([
        'todo', 'todo', 'delete_todo', 'move_todo', 'comment', 'reply', 'delete_comment', 'react_todo', 'react_comment', 'unreact',
        'follow', 'unfollow', 'follow_project', 'unfollow_project', 'privacy', 'message', 'read', 'read_all',
      ])!
      operations.push(async () => {
        const auth = me.user.api_key
        let res: HttpResult
        switch (kind) {
          case 'todo':
            res = await world.post('/v1/todos', { auth, json: { body: `done #work${Math.floor(roll * 3)} @${other.user.username}` } })
            if (res.status === 201) {
              todos.push(res.body.id)
              authors.set(res.body.id, me)
            }
            break
          case 'delete_todo':
            res = await world.delete(`/v1/todos/${random.pick(roll < 0.8 ? own(todos, me) : todos) ?? 'todo_00000000000000000000000000000000'}`, { auth })
            break
          case 'move_todo':
            // An edit that moves one's todo to another project, or out of any (roll ≥ 0.9).
            res = await world.patch(`/v1/todos/${random.pick(own(todos, me)) ?? 'todo_00000000000000000000000000000000'}`, {
              auth, json: { body: roll < 0.9 ? `moved to #work${Math.floor(roll * 3.3) % 3}` : 'moved out of every project' },
            })
            break
          case 'comment':
          case 'reply': {
            const parent = kind === 'reply' ? random.pick(comments) : undefined
            const todo = parent ? (await world.sql`select 'todo_' || replace(todo_id::text, '-', '') as id from app.comments where id = ${parent.replace(/^comm_/, '')}::uuid`)[0]?.id : random.pick(todos)
            res = await world.post('/v1/comments', { auth, json: { commentable_type: 'Todo', commentable_id: todo ?? 'todo_00000000000000000000000000000000', body: 'nice', ...(parent ? { parent_id: parent } : {}) } })
            if (res.status === 201) {
              comments.push(res.body.id)
              authors.set(res.body.id, me)
            }
            break
          }
          case 'delete_comment':
            res = await world.delete(`/v1/comments/${random.pick(roll < 0.8 ? own(comments, me) : comments) ?? 'comm_00000000000000000000000000000000'}`, { auth })
            break
          case 'react_todo':
          case 'react_comment': {
            const target = kind === 'react_todo' ? random.pick(todos) : random.pick(comments)
            res = await world.post('/v1/reactions', { auth, json: { reactable_type: kind === 'react_todo' ? 'Todo' : 'Comment', reactable_id: target ?? 'todo_00000000000000000000000000000000' } })
            if (res.status === 201) reactions.push({ id: res.body.id, by: me })
            break
          }
          case 'unreact': {
            const mine = reactions.filter((reaction) => reaction.by === me)
            res = await world.delete(`/v1/reactions/${random.pick(mine)?.id ?? 'reac_00000000000000000000000000000000'}`, { auth })
            break
          }
          case 'follow':
          case 'unfollow':
            res = await world.request(kind === 'follow' ? 'POST' : 'DELETE', `/v1/users/${other.user.username}/follow`, { auth })
            break
          case 'follow_project':
          case 'unfollow_project':
            res = await world.request(kind === 'follow_project' ? 'POST' : 'DELETE', `/v1/projects/${random.pick(projects)}/follow`, { auth })
            break
          case 'privacy': {
            // Privacy is changed on the website (a plain update of the member's row), never via the API.
            const privacy = roll < 0.5 ? 'public' : roll < 0.8 ? 'protected' : 'private'
            await world.sql`update app.users set privacy = ${privacy}::app.privacy where id = (select id from app.users where username = ${me.user.username})`
            return [kind, 200]
          }
          case 'message':
          case 'read': {
            const conversation = random.pick(conversations.filter((c) => c.between.includes(me)))!
            res = kind === 'message'
              ? await world.post(`/v1/conversations/${conversation.id}/messages`, { auth: me.chat, json: { body: `m${i}` } })
              : await world.post(`/v1/conversations/${conversation.id}/reading`, { auth: me.chat })
            break
          }
          case 'read_all':
            res = await world.post('/v1/conversations/reading', { auth: me.chat })
            break
          default:
            throw new Error(kind)
        }
        return [kind, res.status]
      })
    }
    // At most PARALLEL in flight: a pool, so every request races the ones around it.
    let next = 0
    const failures: string[] = []
    await Promise.all(Array.from({ length: PARALLEL }, async () => {
      while (next < operations.length) {
        const [kind, status] = await operations[next++]!()
        statuses.set(`${kind} ${status}`, (statuses.get(`${kind} ${status}`) ?? 0) + 1)
        if (status >= 500) failures.push(`${kind} ${status}`)
      }
    }))
    if (process.env.RACES_VERBOSE) console.log(JSON.stringify([...statuses].sort()))
    expect(failures).toEqual([])
    // The workload did what it says: writes of every kind succeeded.
    for (const kind of ['todo 201', 'move_todo 200', 'comment 201', 'react_todo 201', 'follow 204', 'message 201']) {
      expect(statuses.get(kind) ?? 0, `${kind} in ${JSON.stringify([...statuses])}`).toBeGreaterThan(0)
    }
    expect(await counterDrift(world.sql)).toEqual(NO_DRIFT)
    expect(await streakDrift(world.sql)).toEqual([])
  })
})
