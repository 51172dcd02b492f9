// Notifications (issue 15): every type produced by its real cause over the API and pushed to a
// test device through a local APNs stand-in (HTTP/2, self-signed TLS, provider token checked)
// and to a browser subscription through a local Web Push service that decrypts the payload;
// who is never notified; un-like and like again; deleted causes; the endpoints, devices and
// preferences; 410, 429 and 5xx; the shared provider token; a worker that dies mid-way.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { PUSH_MAX_ATTEMPTS, ProviderTokens, WEB_PUSH_MAX_PAYLOAD_BYTES, drainPush, type PushDrainOptions, type PushTransport } from '../functions/lib/push.ts'
import { nodePushTransport } from '../local/push-sender.ts'
import { generateVapidKeys } from '../local/push-sender.ts'
import { vapidFrom } from '../local/config.ts'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import net from 'node:net'
import http2 from 'node:http2'
import { randomUUID } from 'node:crypto'
import { SignJWT, importJWK, importPKCS8 } from 'jose'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DeviceTokenSchema, NotificationPreferenceSchema, PaginatedNotifications } from '../functions/notifications/notifications.routes.ts'
import { WORKER_SECRET, type CreatedUser, type TestWorld, startWorld, TEST_ENTRY } from './support/app.ts'
import { browserSubscription, startApnsStandIn, startWebPushService } from './support/push.ts'

let world: TestWorld
let apns: Awaited<ReturnType<typeof startApnsStandIn>>
let webPushService: Awaited<ReturnType<typeof startWebPushService>>
let transport: ReturnType<typeof nodePushTransport>
let tokens: ProviderTokens
const vapid = { ...generateVapidKeys(), subject: 'mailto:ops@todo.test' }
const FAST: PushDrainOptions = { scheduleMs: [100], giveUpAfterMs: 60_000, jitter: 0 }

const users: Record<string, CreatedUser> = {}
const tokensOf: Record<string, string> = {}
const devices: Record<string, string> = {}

function hexToken(seed: number): string {
  return seed.toString(16).padStart(2, '0').repeat(32)
}

async function drain(options: PushDrainOptions = {}) {
  return await drainPush(world.sql, transport, { config: apns.config, tokens }, { ...FAST, ...options })
}

async function list(user: string, query = '') {
  const res = await world.get(`/v1/notifications${query}`, { auth: tokensOf[user] })
  expect(res.status, res.text).toBe(200)
  PaginatedNotifications.parse(res.body)
  return res.body as { data: any[]; unread_count: number; total_count: number; has_more: boolean; after: string | null }
}

async function readAll(user: string) {
  const res = await world.post('/v1/notifications/reading', { auth: tokensOf[user] })
  expect(res.status, res.text).toBe(204)
}

async function member(name: string, ...flags: string[]) {
  users[name] = await world.createUser(name, '--first-name', name[0]!.toUpperCase() + name.slice(1), ...flags)
  tokensOf[name] = await world.token(name, 'public write notifications', { firstParty: true })
  devices[name] = hexToken(Object.keys(devices).length + 1)
  const res = await world.post('/v1/devices', { auth: tokensOf[name], json: { token: devices[name], platform: 'ios', apns_environment: 'sandbox' } })
  expect(res.status, res.text).toBe(201)
}

async function postTodo(user: string, body: string) {
  const res = await world.post('/v1/todos', { auth: users[user]!.api_key, json: { body } })
  expect(res.status, res.text).toBe(201)
  return res.body as { id: string; url: string }
}

async function comment(user: string, todoId: string, body: string, parentId?: string) {
  const res = await world.post('/v1/comments', {
    auth: users[user]!.api_key,
    json: { commentable_type: 'Todo', commentable_id: todoId, body, ...(parentId ? { parent_id: parentId } : {}) },
  })
  expect(res.status, res.text).toBe(201)
  return res.body as { id: string }
}

async function react(user: string, type: 'Todo' | 'Comment', id: string) {
  const res = await world.post('/v1/reactions', { auth: users[user]!.api_key, json: { reactable_type: type, reactable_id: id } })
  expect(res.status, res.text).toBe(201)
  return res.body as { id: string }
}

/** Waits (polling) until `check` holds; fails after a generous deadline. */
async function until(check: () => Promise<boolean>, what: string, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

/** Whether `user`'s device's delivery was claimed and its lease has run out (due again). */
async function leaseRanOut(user: string): Promise<boolean> {
  const rows = await world.sql`
    select 1 from app.push_deliveries where device_token = ${devices[user]!} and leased_at is not null and next_attempt_at <= now()`
  return rows.length === 1
}

/** Whether `user`'s device's delivery is due (its backoff or lease over). */
async function due(user: string): Promise<boolean> {
  return (await world.sql`select 1 from app.push_deliveries where device_token = ${devices[user]!} and next_attempt_at <= now()`).length === 1
}

/** The pushes that reached `user`'s device since `from`. */
function pushesTo(user: string, from = 0) {
  return apns.pushes.slice(from).filter((p) => p.token === devices[user])
}

beforeAll(async () => {
  apns = await startApnsStandIn()
  webPushService = await startWebPushService()
  transport = nodePushTransport({ vapid, allowPrivate: true, apnsCa: apns.ca })
  world = await startWorld({ push: { transport, apns: apns.config } })
  tokens = new ProviderTokens(world.sql, apns.config)
  for (const name of ['alice', 'bob', 'carol', 'dave']) await member(name)
  await member('paula', '--privacy', 'protected')
  await member('priv', '--privacy', 'private')
}, 60_000)

afterAll(async () => {
  await world?.close()
  await transport?.close?.()
  await apns?.close()
  await webPushService?.close()
})

beforeEach(() => {
  apns.answer(() => ({ status: 200 }))
  webPushService.answer(() => 201)
})

describe('every notification type, from its real cause, pushed to a device', () => {
  it('comment_todo_create and comment_comment_create', async () => {
    const from = apns.pushes.length
    const todo = await postTodo('alice', 'Shipped the release notes')
    const first = await comment('bob', todo.id, 'Nice work on the notes!')
    const reply = await comment('carol', todo.id, 'Agreed with Bob', first.id)

    const alice = await list('alice')
    const commented = alice.data.find((n) => n.type === 'comment_todo_create' && n.actor.username === 'bob')
    expect(commented).toMatchObject({
      read: false, emoji: '💬', title: 'Bob commented on your todo', text: 'Nice work on the notes!', todo_id: todo.id,
      actor: { id: users.bob!.id, username: 'bob', first_name: 'Bob' },
    })
    expect(commented.url).toBe(`${todo.url}#${first.id}`)
    expect(commented.id).toMatch(/^notif_[0-9a-f]{32}$/)
    // carol's reply notifies alice (her todo) and bob (his comment).
    expect(alice.data.some((n) => n.type === 'comment_todo_create' && n.actor.username === 'carol')).toBe(true)
    const bob = await list('bob')
    expect(bob.data[0]).toMatchObject({ type: 'comment_comment_create', title: 'Carol replied to your comment', text: 'Agreed with Bob', url: `${todo.url}#${reply.id}` })

    await drain()
    const toAlice = pushesTo('alice', from)
    expect(toAlice).toHaveLength(2)
    const push = toAlice.find((p) => p.payload.notification_id === commented.id)!
    expect(push.problem).toBeNull()
    expect(push.headers).toMatchObject({ 'apns-push-type': 'alert', 'apns-topic': 'com.example.todos' })
    expect(push.headers['apns-id']!.replace(/-/g, '')).toBe(commented.id.replace('notif_', ''))
    expect(push.jwt).toMatchObject({ kid: apns.config.keyId, iss: apns.config.teamId })
    expect(push.payload).toMatchObject({
      aps: { alert: { title: 'Bob commented on your todo', body: 'Nice work on the notes!' } },
      notification_id: commented.id, url: commented.url, type: 'comment_todo_create', todo_id: todo.id,
    })
    expect(typeof push.payload.aps.badge).toBe('number')
    expect(pushesTo('bob', from).map((p) => p.payload.type)).toEqual(['comment_comment_create'])
  })

  it('reaction_todo_create and reaction_comment_create; the badge is the unread count', async () => {
    await readAll('alice')
    await readAll('bob')
    const from = apns.pushes.length
    const todo = await postTodo('alice', 'Fixed the flaky test')
    const c = await comment('bob', todo.id, 'How?')
    await react('carol', 'Todo', todo.id)
    await react('carol', 'Comment', c.id)
    await drain()
    const toAlice = pushesTo('alice', from)
    expect(toAlice.map((p) => p.payload.type).sort()).toEqual(['comment_todo_create', 'reaction_todo_create'])
    const liked = toAlice.find((p) => p.payload.type === 'reaction_todo_create')!
    expect(liked.payload.aps.alert).toEqual({ title: 'Carol liked your todo', body: 'Fixed the flaky test' })
    // Both of alice's notifications were unread when the second was sent.
    expect(Math.max(...toAlice.map((p) => p.payload.aps.badge))).toBe(2)
    expect((await list('alice')).unread_count).toBe(2)
    const toBob = pushesTo('bob', from)
    expect(toBob.map((p) => p.payload)).toMatchObject([{ type: 'reaction_comment_create', aps: { alert: { title: 'Carol liked your comment', body: 'How?' }, badge: 1 } }])
  })

  it('mention_todo_create and mention_comment_create', async () => {
    const from = apns.pushes.length
    const todo = await postTodo('alice', 'Paired with @dave on the parser')
    await comment('bob', todo.id, 'Thanks @dave and @carol')
    const dave = await list('dave')
    expect(dave.data.filter((n) => n.type.startsWith('mention_')).map((n) => [n.type, n.actor.username, n.todo_id])).toEqual([
      ['mention_comment_create', 'bob', todo.id],
      ['mention_todo_create', 'alice', todo.id],
    ])
    expect(dave.data.find((n) => n.type === 'mention_todo_create')).toMatchObject({ title: 'Alice mentioned you in a todo', text: 'Paired with @dave on the parser', url: todo.url })
    await drain()
    expect(pushesTo('dave', from).map((p) => p.payload.type).sort()).toEqual(['mention_comment_create', 'mention_todo_create'])
    expect(pushesTo('carol', from).map((p) => p.payload.type)).toEqual(['mention_comment_create'])
  })

  it('follow_user_create, follow_request_create and follow_request_approve', async () => {
    const from = apns.pushes.length
    expect((await world.post(`/v1/users/${users.alice!.id}/follow`, { auth: users.dave!.api_key })).status).toBe(204)
    expect((await world.post(`/v1/users/${users.paula!.id}/follow`, { auth: users.dave!.api_key })).status).toBe(204)
    const asked = (await list('paula')).data[0]
    expect(asked).toMatchObject({ type: 'follow_request_create', title: 'Dave asked to follow you', actor: { username: 'dave' } })
    await drain()
    expect((await world.post(`/v1/follow_requests/${users.dave!.id}/approve`, { auth: users.paula!.api_key })).status).toBe(204)
    // Approving answered the request: its unread notification leaves paula's list; paula is not
    // told of a follow she made herself, dave is told of the approval.
    expect((await list('paula')).data.map((n) => n.type)).toEqual([])
    expect((await list('dave')).data[0]).toMatchObject({ type: 'follow_request_approve', title: 'Paula approved your follow request', actor: { username: 'paula' } })
    expect((await list('alice')).data[0]).toMatchObject({ type: 'follow_user_create', title: 'Dave started following you', url: expect.stringMatching(/\/@dave$/) })
    await drain()
    expect(pushesTo('alice', from).map((p) => p.payload.type)).toEqual(['follow_user_create'])
    expect(pushesTo('paula', from).map((p) => p.payload.type)).toEqual(['follow_request_create'])
    expect(pushesTo('dave', from).map((p) => p.payload.type)).toEqual(['follow_request_approve'])
  })

  it('follow_project_create, and a project follow request and its approval', async () => {
    const open = await world.admin<{ id: string }>('create-project', '--owner', 'alice', '--name', 'Open Tool', '--makers', 'bob')
    const closed = await world.admin<{ id: string }>('create-project', '--owner', 'alice', '--name', 'Closed Tool', '--privacy', 'protected')
    const from = apns.pushes.length
    expect((await world.post(`/v1/projects/${open.id}/follow`, { auth: users.carol!.api_key })).status).toBe(204)
    expect((await world.post(`/v1/projects/${closed.id}/follow`, { auth: users.carol!.api_key })).status).toBe(204)
    const alice = (await list('alice')).data
    expect(alice.find((n) => n.type === 'follow_project_create')).toMatchObject({ title: 'Carol started following Open Tool', actor: { username: 'carol' } })
    expect(alice.find((n) => n.type === 'follow_request_create')).toMatchObject({ title: 'Carol asked to follow Closed Tool' })
    await drain()
    expect((await list('bob')).data[0]).toMatchObject({ type: 'follow_project_create', title: 'Carol started following Open Tool' })
    const approve = await world.post(`/v1/projects/${closed.id}/follow_requests/${users.carol!.id}/approve`, { auth: users.alice!.api_key })
    expect(approve.status, approve.text).toBe(204)
    expect((await list('carol')).data[0]).toMatchObject({ type: 'follow_request_approve', title: 'Alice approved your request to follow Closed Tool' })
    await drain()
    expect(pushesTo('alice', from).map((p) => p.payload.type).sort()).toEqual(['follow_project_create', 'follow_request_create'])
    expect(pushesTo('bob', from).map((p) => p.payload.type)).toEqual(['follow_project_create'])
    expect(pushesTo('carol', from).map((p) => p.payload.type)).toEqual(['follow_request_approve'])
  })
})

describe('who is not notified', () => {
  it('never oneself, never from a muted member, never about what the recipient may not see', async () => {
    await readAll('alice')
    const before = (await list('alice')).total_count
    const own = await postTodo('alice', 'Note to self, @alice')
    await comment('alice', own.id, 'Talking to myself')
    await react('alice', 'Todo', own.id)
    expect((await list('alice')).total_count).toBe(before)

    expect((await world.post(`/v1/users/${users.carol!.id}/mute`, { auth: users.alice!.api_key })).status).toBe(204)
    await comment('carol', own.id, 'Muted comment mentioning @alice')
    await react('carol', 'Todo', own.id)
    expect((await list('alice')).total_count).toBe(before)

    // priv's todos are private: bob, mentioned there, may not see it.
    await postTodo('priv', 'Secret plan with @bob')
    expect((await list('bob')).data.some((n) => n.actor?.username === 'priv')).toBe(false)
  })

  it('muting a member hides what they caused before and drops its queued pushes', async () => {
    await member('muter')
    await member('pest')
    await drain()
    const from = apns.pushes.length
    const todo = await postTodo('muter', 'Shipped the release')
    await react('pest', 'Todo', todo.id)
    await comment('pest', todo.id, 'Call me at this number')
    expect((await list('muter')).unread_count).toBe(2)
    expect((await world.post(`/v1/users/${users.pest!.id}/mute`, { auth: users.muter!.api_key })).status).toBe(204)
    const after = await list('muter')
    expect(after.data.filter((n) => n.actor?.username === 'pest')).toHaveLength(0)
    expect(after.unread_count).toBe(0)
    await drain()
    expect(pushesTo('muter', from)).toHaveLength(0)
  })

  it('a todo naming many members notifies the first ten only', async () => {
    const names = Array.from({ length: 12 }, (_, i) => `crowd${i}`)
    for (const name of names) await world.createUser(name)
    const todo = await postTodo('alice', `Thanks ${names.map((n) => '@' + n).join(' ')}`)
    const rows = await world.sql<{ username: string }[]>`
      select u.username from app.notifications n join app.users u on u.id = n.user_id
      where n.todo_id = ${todo.id.replace('todo_', '')}::uuid and n.type = 'mention_todo_create' order by u.username`
    expect(rows.map((r) => r.username)).toEqual(names.slice(0, 10).sort())
  })

  it('un-liking hides the unread notification; liking again shows it again without a second push', async () => {
    const todo = await postTodo('dave', 'Wrote the migration guide')
    const like = await react('bob', 'Todo', todo.id)
    await drain()
    const from = apns.pushes.length
    expect((await list('dave')).data[0]).toMatchObject({ type: 'reaction_todo_create', read: false })
    const unread = (await list('dave')).unread_count
    expect((await world.delete(`/v1/reactions/${like.id}`, { auth: users.bob!.api_key })).status).toBe(204)
    const after = await list('dave')
    expect(after.data.some((n) => n.type === 'reaction_todo_create' && n.todo_id === todo.id)).toBe(false)
    expect(after.unread_count).toBe(unread - 1)
    // The hidden one leaves the totals too: each list's total is what its pages hold.
    const [hidden] = await world.sql`select count(*)::int as n from app.notifications n join app.users u on u.id = n.user_id where u.username = 'dave' and n.hidden`
    expect(hidden!.n).toBeGreaterThan(0)
    for (const query of ['?limit=100', '?unread=true&limit=100']) {
      const whole = await list('dave', query)
      expect(whole.has_more, query).toBe(false)
      expect(whole.total_count, query).toBe(whole.data.length)
    }
    await react('bob', 'Todo', todo.id)
    await react('bob', 'Todo', todo.id)
    const again = (await list('dave')).data.filter((n) => n.type === 'reaction_todo_create' && n.todo_id === todo.id)
    expect(again).toHaveLength(1)
    await drain()
    expect(pushesTo('dave', from)).toHaveLength(0)
  })

  it('the text shown is the todo or comment as it is now, and only while the recipient may see it', async () => {
    await member('keeper')
    const todo = await postTodo('keeper', 'Door code 4711, ask @bob')
    const c = await comment('keeper', (await postTodo('bob', 'Visiting Friday')).id, 'My number is 555-0100')
    const textOf = async (type: string) => (await list('bob')).data.find((n) => n.type === type && n.actor?.username === 'keeper')?.text
    expect(await textOf('mention_todo_create')).toBe('Door code 4711, ask @bob')
    expect(await textOf('comment_todo_create')).toBe('My number is 555-0100')
    // Edited away: the notification no longer quotes what its author took back.
    expect((await world.patch(`/v1/todos/${todo.id}`, { auth: users.keeper!.api_key, json: { body: 'Door code on request, ask @bob' } })).status).toBe(200)
    expect((await world.patch(`/v1/comments/${c.id}`, { auth: users.keeper!.api_key, json: { body: 'Call me' } })).status).toBe(200)
    expect(await textOf('mention_todo_create')).toBe('Door code on request, ask @bob')
    expect(await textOf('comment_todo_create')).toBe('Call me')
    // keeper turns private: bob may no longer read keeper's todos, nor their notification's text.
    await world.sql`update app.users set privacy = 'private' where id = ${users.keeper!.id.replace('user_', '')}::uuid`
    expect((await world.get(`/v1/todos/${todo.id}`, { auth: tokensOf.bob })).status).toBe(404)
    expect(await textOf('mention_todo_create')).toBeNull()
    // A comment on bob's own todo stays addressed to bob.
    expect(await textOf('comment_todo_create')).toBe('Call me')
  })

  it('deleting the cause removes its notification', async () => {
    const todo = await postTodo('dave', 'Refactored the queue')
    const c = await comment('carol', todo.id, 'Looks good')
    const count = (await list('dave')).total_count
    expect((await world.delete(`/v1/comments/${c.id}`, { auth: users.carol!.api_key })).status).toBe(204)
    expect((await list('dave')).total_count).toBe(count - 1)
    await comment('carol', todo.id, 'Another one')
    expect((await world.delete(`/v1/todos/${todo.id}`, { auth: users.dave!.api_key })).status).toBe(204)
    expect((await list('dave')).data.some((n) => n.todo_id === todo.id)).toBe(false)
    const [row] = await world.sql<{ left: number }[]>`select count(*)::int as left from app.push_deliveries d join app.notifications n on n.id = d.notification_id where n.todo_id = ${todo.id.replace('todo_', '')}::uuid`
    expect(row!.left).toBe(0)
  })
})

describe('GET /v1/notifications, reading', () => {
  it('pages newest first; unread filter; unread_count over all pages; reading and mark_as_read', async () => {
    await readAll('bob')
    const todo = await postTodo('bob', 'Bench numbers are in')
    for (const name of ['alice', 'carol', 'dave']) await comment(name, todo.id, `Comment from ${name}`)
    const page1 = await list('bob', '?unread=true&limit=2')
    expect(page1.data.map((n) => n.actor.username)).toEqual(['dave', 'carol'])
    expect(page1).toMatchObject({ has_more: true, total_count: 3, unread_count: 3 })
    const page2 = await list('bob', `?unread=true&limit=2&starting_after=${page1.after}`)
    expect(page2.data.map((n) => n.actor.username)).toEqual(['alice'])
    expect(page2).toMatchObject({ has_more: false, after: null, unread_count: 3 })
    expect((await world.get('/v1/notifications?starting_after=notif_00000000000000000000000000000000', { auth: tokensOf.bob })).status).toBe(404)
    expect((await world.get('/v1/notifications?unread=maybe', { auth: tokensOf.bob })).status).toBe(422)
    const legacy = await world.post('/v1/notifications/mark_as_read', { auth: tokensOf.bob })
    expect(legacy.status).toBe(204)
    const after = await list('bob', '?unread=true')
    expect(after).toMatchObject({ data: [], total_count: 0, unread_count: 0 })
    expect((await list('bob')).data[0]).toMatchObject({ read: true })
    // The whole list counts the read ones too: its total is what its pages hold.
    const everything = await list('bob', '?limit=100')
    expect(everything).toMatchObject({ has_more: false, unread_count: 0 })
    expect(everything.total_count).toBe(everything.data.length)
    expect(everything.total_count).toBeGreaterThanOrEqual(3)
  })

  it('OAuth with scope notifications only; API keys 403; nobody reads another member\'s', async () => {
    expect((await world.get('/v1/notifications', { auth: users.bob!.api_key })).status).toBe(403)
    const noScope = await world.token('bob', 'public write')
    expect((await world.get('/v1/notifications', { auth: noScope })).status).toBe(403)
    expect((await world.post('/v1/notifications/reading', { auth: noScope })).status).toBe(403)
    const onlyNotifications = await world.token('bob', 'notifications')
    expect((await world.get('/v1/notifications', { auth: onlyNotifications })).status).toBe(200)
    const carolFirst = (await list('carol')).data[0]
    const probe = await world.get(`/v1/notifications?starting_after=${carolFirst.id}`, { auth: tokensOf.bob })
    expect(probe.status).toBe(404)
  })
})

describe('devices', () => {
  it('validates, is idempotent, moves a token between accounts, deletes with 204', async () => {
    const token = 'AB'.repeat(32)
    const first = await world.post('/v1/devices', { auth: tokensOf.carol, json: { token, platform: 'macos' } })
    expect(first.status, first.text).toBe(201)
    expect(first.body).toMatchObject({ token: token.toLowerCase(), platform: 'macos', apns_environment: 'production' })
    DeviceTokenSchema.parse(first.body)
    expect((await world.post('/v1/devices', { auth: tokensOf.carol, json: { token, platform: 'macos' } })).status).toBe(201)
    for (const json of [{ token: 'xyz', platform: 'ios' }, { token: 'ab', platform: 'ios' }, { token, platform: 'android' }, { token, platform: 'ios', apns_environment: 'dev' }, { platform: 'ios' }]) {
      const res = await world.post('/v1/devices', { auth: tokensOf.carol, json })
      expect(res.status, JSON.stringify(json)).toBe(422)
    }
    // The token moves to dave: carol's notifications no longer reach it.
    expect((await world.post('/v1/devices', { auth: tokensOf.dave, json: { token, platform: 'ios' } })).status).toBe(201)
    const [owner] = await world.sql`select app.to_public_id('user', user_id) as id from app.devices where token = ${token.toLowerCase()}`
    expect(owner!.id).toBe(users.dave!.id)
    // carol cannot delete dave's token (204, nothing happens); dave can.
    expect((await world.delete(`/v1/devices/${token}`, { auth: tokensOf.carol })).status).toBe(204)
    expect((await world.sql`select 1 from app.devices where token = ${token.toLowerCase()}`).length).toBe(1)
    expect((await world.delete(`/v1/devices/${token}`, { auth: tokensOf.dave })).status).toBe(204)
    expect((await world.sql`select 1 from app.devices where token = ${token.toLowerCase()}`).length).toBe(0)
    expect((await world.delete(`/v1/devices/${'cd'.repeat(32)}`, { auth: tokensOf.dave })).status).toBe(204)
  })

  it('first-party apps only; API keys 403', async () => {
    const thirdParty = await world.token('carol', 'public notifications')
    const json = { token: 'ef'.repeat(32), platform: 'ios' }
    expect((await world.post('/v1/devices', { auth: thirdParty, json })).status).toBe(403)
    expect((await world.delete(`/v1/devices/${'ef'.repeat(32)}`, { auth: thirdParty })).status).toBe(403)
    expect((await world.post('/v1/devices', { auth: users.carol!.api_key, json })).status).toBe(403)
    const noScope = await world.token('carol', 'public write', { firstParty: true })
    expect((await world.post('/v1/devices', { auth: noScope, json })).status).toBe(403)
  })
})

describe('preferences', () => {
  it('lists every type, changes one, 404 for an unknown one; mobile_push_enabled off means no push', async () => {
    const res = await world.get('/v1/notification_preferences', { auth: tokensOf.carol })
    expect(res.status).toBe(200)
    expect(res.body.data.map((p: any) => p.identifier)).toEqual([
      'comment_todo_create', 'comment_comment_create', 'reaction_todo_create', 'reaction_comment_create', 'mention_todo_create',
      'mention_comment_create', 'follow_user_create', 'follow_project_create', 'follow_request_create', 'follow_request_approve',
    ])
    expect(res.body.data.every((p: any) => p.mobile_push_enabled === true && p.name && p.description)).toBe(true)
    for (const preference of res.body.data) NotificationPreferenceSchema.parse(preference)
    const off = await world.patch('/v1/notification_preferences/reaction_todo_create', { auth: tokensOf.carol, json: { mobile_push_enabled: false } })
    expect(off.status, off.text).toBe(200)
    expect(off.body).toMatchObject({ identifier: 'reaction_todo_create', mobile_push_enabled: false, name: 'Likes on todos' })
    expect((await world.patch('/v1/notification_preferences/nope', { auth: tokensOf.carol, json: { mobile_push_enabled: false } })).status).toBe(404)
    expect((await world.patch('/v1/notification_preferences/reaction_todo_create', { auth: tokensOf.carol, json: { mobile_push_enabled: 'no' } })).status).toBe(422)
    expect((await world.patch('/v1/notification_preferences/reaction_todo_create', { auth: users.carol!.api_key, json: { mobile_push_enabled: true } })).status).toBe(403)

    const from = apns.pushes.length
    const todo = await postTodo('carol', 'Quiet likes please')
    await react('dave', 'Todo', todo.id)
    await comment('dave', todo.id, 'Loud comment')
    await drain()
    // The like is listed, but only the comment is pushed.
    expect((await list('carol')).data.slice(0, 2).map((n) => n.type)).toEqual(['comment_todo_create', 'reaction_todo_create'])
    expect(pushesTo('carol', from).map((p) => p.payload.type)).toEqual(['comment_todo_create'])

    // Turned off before the worker fanned the push out: no delivery is written for the device.
    await comment('dave', todo.id, 'Switched off before the fan-out')
    expect((await world.patch('/v1/notification_preferences/comment_todo_create', { auth: tokensOf.carol, json: { mobile_push_enabled: false } })).status).toBe(200)
    expect(await drain()).toMatchObject({ dropped: 0, delivered: 0 })
    expect(await world.sql`select 1 from app.push_deliveries where device_token = ${devices.carol!}`).toHaveLength(0)
    expect(pushesTo('carol', from)).toHaveLength(1)
    expect((await world.patch('/v1/notification_preferences/comment_todo_create', { auth: tokensOf.carol, json: { mobile_push_enabled: true } })).status).toBe(200)

    // Turned off after the push was fanned out into a delivery: it is dropped unsent.
    await comment('dave', todo.id, 'Queued before the switch')
    expect(await world.sql`select app.fan_out_pushes(100) as taken`).toEqual([{ taken: 1 }])
    expect(await world.sql`select 1 from app.push_deliveries where device_token = ${devices.carol!}`).toHaveLength(1)
    expect((await world.patch('/v1/notification_preferences/comment_todo_create', { auth: tokensOf.carol, json: { mobile_push_enabled: false } })).status).toBe(200)
    expect(await drain()).toMatchObject({ dropped: 1, delivered: 0 })
    expect(pushesTo('carol', from)).toHaveLength(1)
    expect((await world.patch('/v1/notification_preferences/comment_todo_create', { auth: tokensOf.carol, json: { mobile_push_enabled: true } })).body).toMatchObject({ mobile_push_enabled: true })
  })
})

describe('the push fan-out (issue 27)', () => {
  const queued = async () => (await world.sql<{ n: number }[]>`select count(*)::int as n from app.push_fanouts`)[0]!.n

  it('a notification queues one fan-out row only when its recipient has somewhere to be pushed; the worker writes the deliveries and drops a row whose notification is gone', async () => {
    await drain()
    expect(await queued()).toBe(0)
    // No device and no browser: nothing queued, though the notification is written.
    const quiet = await world.createUser('quiet', '--first-name', 'Quiet')
    const theirs = await world.post('/v1/todos', { auth: quiet.api_key, json: { body: 'Nobody to buzz' } })
    expect(theirs.status, theirs.text).toBe(201)
    await react('alice', 'Todo', theirs.body.id)
    expect(await world.sql`select 1 from app.notifications where user_id = app.from_public_id('user', ${quiet.id})`).toHaveLength(1)
    expect(await queued()).toBe(0)

    // A device: one queue row and no delivery yet; the worker's claim writes it, and it is sent.
    const from = apns.pushes.length
    const todo = await postTodo('bob', 'Buzz me')
    await react('alice', 'Todo', todo.id)
    expect(await queued()).toBe(1)
    expect(await world.sql`select 1 from app.push_deliveries where device_token = ${devices.bob!}`).toHaveLength(0)
    expect(await drain()).toMatchObject({ delivered: 1 })
    expect(await queued()).toBe(0)
    expect(pushesTo('bob', from).map((p) => p.payload.type)).toEqual(['reaction_todo_create'])

    // Gone before the fan-out (the todo deleted, its notification with it): dropped, nothing sent.
    const doomed = await postTodo('bob', 'Short-lived')
    await comment('alice', doomed.id, 'Nice')
    expect(await queued()).toBe(1)
    expect((await world.delete(`/v1/todos/${doomed.id}`, { auth: users.bob!.api_key })).status).toBe(204)
    expect(await drain()).toMatchObject({ delivered: 0, dropped: 0 })
    expect(await queued()).toBe(0)
    expect(pushesTo('bob', from)).toHaveLength(1)
  })

  it('queue rows that yield no push do not hold up the rest: one drain fans out the whole queue', async () => {
    await drain()
    const from = apns.pushes.length
    // What a bulk deletion of todos or an account leaves: rows whose notification is gone, more
    // than two lanes' batches of them, ahead of a live one.
    await world.sql`insert into app.push_fanouts (notification_id) select gen_random_uuid() from generate_series(1, 300)`
    const todo = await postTodo('bob', 'Behind a backlog')
    await comment('alice', todo.id, 'Still pushed')
    expect(await drain()).toMatchObject({ delivered: 1 })
    expect(pushesTo('bob', from).map((p) => p.payload.aps.alert.body)).toEqual(['Still pushed'])
    expect(await queued()).toBe(0)
  })

  it('a notification being deleted while the worker fans it out is skipped: the fan-out waits for the deletion and fails nothing', async () => {
    await drain()
    const todo = await postTodo('bob', 'Deleted mid-fan-out')
    await comment('alice', todo.id, 'Gone soon')
    expect(await queued()).toBe(1)
    const deleting = await world.sql.reserve()
    try {
      await deleting`begin`
      await deleting`delete from app.todos where id = app.from_public_id('todo', ${todo.id})`
      const fanning = world.sql<{ taken: number }[]>`select app.fan_out_pushes(100) as taken`.execute()
      await until(async () => (await world.sql`
        select 1 from pg_stat_activity where wait_event_type = 'Lock' and query like '%fan_out_pushes%'`).length > 0, 'the fan-out waits for the deletion')
      await deleting`commit`
      expect(await fanning).toEqual([{ taken: 1 }])
    } finally {
      deleting.release()
    }
    expect(await world.sql`select 1 from app.push_deliveries d where not exists (select 1 from app.notifications n where n.id = d.notification_id)`).toHaveLength(0)
    expect(await queued()).toBe(0)
  })

  it('a push whose device moved to another account since the fan-out is dropped, never sent to the new owner', async () => {
    await drain()
    const from = apns.pushes.length
    const todo = await postTodo('dave', 'Mine alone')
    await comment('alice', todo.id, 'For dave only')
    expect(await world.sql`select app.fan_out_pushes(100) as taken`).toEqual([{ taken: 1 }])
    // Moved without app.register_device (which deletes what was queued for a moved token): the
    // check at the send holds on its own.
    await world.sql`update app.devices set user_id = app.from_public_id('user', ${users.carol!.id}) where token = ${devices.dave!}`
    try {
      expect(await drain()).toMatchObject({ delivered: 0, dropped: 1 })
      expect(pushesTo('dave', from)).toHaveLength(0)
    } finally {
      await world.sql`update app.devices set user_id = app.from_public_id('user', ${users.dave!.id}) where token = ${devices.dave!}`
    }
  })
})

describe('APNs delivery', () => {
  it('410 Unregistered deletes the device token', async () => {
    await member('gone')
    apns.answer((push) => (push.token === devices.gone ? { status: 410, reason: 'Unregistered' } : { status: 200 }))
    const todo = await postTodo('gone', 'Last todo from this phone')
    await comment('alice', todo.id, 'Bye')
    const result = await drain()
    expect(result.unregistered).toBe(1)
    expect((await world.sql`select 1 from app.devices where token = ${devices.gone!}`).length).toBe(0)
  })

  it('a 410 for a token the device registered again while the push was in flight keeps the token', async () => {
    await member('reborn')
    let reregister!: () => void
    const registered = new Promise<void>((resolve) => (reregister = resolve))
    apns.answer(async (push) => {
      if (push.token !== devices.reborn) return { status: 200 }
      // The app got its token anew (same token, re-registered) while this push was in flight.
      await registered
      return { status: 410, reason: 'Unregistered' }
    })
    const todo = await postTodo('reborn', 'Reinstalled the app')
    await comment('alice', todo.id, 'Welcome back')
    const from = apns.pushes.length
    const drained = drain()
    await apns.waitFor(from + 1)
    await new Promise((r) => setTimeout(r, 20))
    const res = await world.post('/v1/devices', { auth: tokensOf.reborn, json: { token: devices.reborn, platform: 'ios', apns_environment: 'sandbox' } })
    expect(res.status, res.text).toBe(201)
    reregister()
    expect(await drained).toMatchObject({ unregistered: 1 })
    expect((await world.sql`select 1 from app.devices where token = ${devices.reborn!}`).length).toBe(1)
    expect((await world.sql`select 1 from app.push_deliveries where device_token = ${devices.reborn!}`).length).toBe(0)
  })

  it('a connection that went silent (half-open) is replaced after a timeout, not reused forever', async () => {
    // A path to the stand-in whose first connection is a black hole (a NAT that forgot it):
    // bytes go in, nothing comes back, no error and no close. Later connections get through.
    let accepted = 0
    const held: net.Socket[] = []
    const target = new URL(apns.config.url!)
    const proxy = net.createServer((socket) => {
      if (accepted++ === 0) {
        socket.on('error', () => {})
        held.push(socket)
        return
      }
      const upstream = net.connect(Number(target.port), target.hostname)
      socket.pipe(upstream).pipe(socket)
      socket.on('error', () => upstream.destroy())
      upstream.on('error', () => socket.destroy())
    })
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve))
    const config = { ...apns.config, url: `https://127.0.0.1:${(proxy.address() as net.AddressInfo).port}` }
    const silentTransport = nodePushTransport({ vapid, allowPrivate: true, apnsCa: apns.ca })
    try {
      await member('halfopen')
      const todo = await postTodo('halfopen', 'Behind a flaky NAT')
      await comment('alice', todo.id, 'Ping')
      const from = apns.pushes.length
      const run = () => drainPush(world.sql, silentTransport, { config, tokens }, { ...FAST, scheduleMs: [0], timeoutMs: 500 })
      expect(await run()).toMatchObject({ retrying: 1 })
      expect(await run()).toMatchObject({ delivered: 1 })
      expect(pushesTo('halfopen', from)).toHaveLength(1)
    } finally {
      await silentTransport.close()
      for (const s of held) s.destroy()
      await new Promise<void>((resolve) => proxy.close(() => resolve()))
    }
  })

  it('an answer whose body never ends counts by its status, read no further (no stall, no second push)', async () => {
    await member('chatty')
    apns.answer((push) => (push.token === devices.chatty ? { status: 200, body: 'endless' } : { status: 200 }))
    const todo = await postTodo('chatty', 'Talkative gateway')
    await comment('alice', todo.id, 'Hello')
    const from = apns.pushes.length
    // A stall on the endless body would end in the 4 s timeout, and a timeout is a retry: delivered
    // with no retry is the proof, without a clock (issue 31).
    expect(await drain({ timeoutMs: 4_000 })).toMatchObject({ delivered: 1, retrying: 0 })
    expect(pushesTo('chatty', from)).toHaveLength(1)
    expect((await world.sql`select 1 from app.push_deliveries where device_token = ${devices.chatty!}`).length).toBe(0)
  })

  it('a push retried later says what is true then: the edited text, or nothing once its subject is out of sight', async () => {
    await member('shy')
    await member('pal')
    apns.answer((push) => (push.token === devices.pal ? { status: 503, reason: 'ServiceUnavailable' } : { status: 200 }))
    const from = apns.pushes.length
    const todo = await postTodo('shy', 'Gate code 1234 for @pal')
    expect(await drain()).toMatchObject({ retrying: 1 })
    expect((await world.patch(`/v1/todos/${todo.id}`, { auth: users.shy!.api_key, json: { body: 'Gate code by phone, @pal' } })).status).toBe(200)
    apns.answer(() => ({ status: 200 }))
    await until(() => due('pal'), 'the retry is due')
    expect(await drain()).toMatchObject({ delivered: 1 })
    expect(pushesTo('pal', from).map((p) => p.payload.aps.alert.body)).toEqual(['Gate code 1234 for @pal', 'Gate code by phone, @pal'])

    apns.answer((push) => (push.token === devices.pal ? { status: 503, reason: 'ServiceUnavailable' } : { status: 200 }))
    await postTodo('shy', 'Party at mine, @pal')
    expect(await drain()).toMatchObject({ retrying: 1 })
    await world.sql`update app.users set privacy = 'private' where id = ${users.shy!.id.replace('user_', '')}::uuid`
    apns.answer(() => ({ status: 200 }))
    await until(() => due('pal'), 'the retry is due')
    expect(await drain()).toMatchObject({ delivered: 0, dropped: 1 })
    expect(pushesTo('pal', from)).toHaveLength(3)
  })

  it('failed deliveries are kept a week, then pruned: the outbox does not grow with every push that failed', async () => {
    await member('refused')
    apns.answer((push) => (push.token === devices.refused ? { status: 400, reason: 'PayloadTooLarge' } : { status: 200 }))
    await comment('alice', (await postTodo('refused', 'First')).id, 'One')
    await comment('alice', (await postTodo('refused', 'Second')).id, 'Two')
    expect(await drain()).toMatchObject({ failed: 2 })
    const failed = await world.sql<{ id: string }[]>`select id from app.push_deliveries where device_token = ${devices.refused!} and status = 'failed' order by id`
    expect(failed).toHaveLength(2)
    await world.sql`update app.push_deliveries set created_at = now() - interval '8 days' where id = ${failed[0]!.id}`
    await drain()
    const left = await world.sql<{ id: string }[]>`select id from app.push_deliveries where device_token = ${devices.refused!} order by id`
    expect(left.map((r) => r.id)).toEqual([failed[1]!.id])
  })

  it('429 and 5xx are retried with backoff until delivered', async () => {
    const from = apns.pushes.length
    let calls = 0
    apns.answer((push) => {
      if (push.token !== devices.bob) return { status: 200 }
      calls++
      return calls === 1 ? { status: 429, reason: 'TooManyRequests' } : calls === 2 ? { status: 503, reason: 'ServiceUnavailable' } : { status: 200 }
    })
    const todo = await postTodo('bob', 'Retry me')
    await comment('alice', todo.id, 'Retried comment')
    // The first retry a minute away, so the drain below surely comes before it however loaded
    // the machine (with 100 ms it might not: issue 31).
    expect(await drain({ scheduleMs: [60_000, 100] })).toMatchObject({ retrying: 1 })
    const [row] = await world.sql`select attempts, last_status, status, next_attempt_at > now() + interval '50 seconds' as later from app.push_deliveries where device_token = ${devices.bob!}`
    expect(row).toMatchObject({ attempts: 1, last_status: 429, status: 'pending', later: true })
    // Not due before its backoff: nothing is sent.
    expect(await drain()).toMatchObject({ delivered: 0, retrying: 0 })
    expect(pushesTo('bob', from)).toHaveLength(1)
    // The minute passes.
    await world.sql`update app.push_deliveries set next_attempt_at = now() where device_token = ${devices.bob!}`
    expect(await drain()).toMatchObject({ retrying: 1 })
    await until(() => due('bob'), 'the second retry is due')
    expect(await drain()).toMatchObject({ delivered: 1 })
    expect(pushesTo('bob', from).map((p) => p.payload.aps.alert.body)).toEqual(['Retried comment', 'Retried comment', 'Retried comment'])
    expect((await world.sql`select 1 from app.push_deliveries where device_token = ${devices.bob!}`).length).toBe(0)
  })

  it('one provider token, shared by every worker through the database and reused', async () => {
    const raw = new Set(apns.pushes.map((p) => p.jwt.raw))
    expect(raw.size).toBe(1)
    const another = new ProviderTokens(world.sql, apns.config)
    expect(await another.token()).toBe([...raw][0])
    // 40 minutes later one worker renews it and the others take the renewed one.
    const later = Date.now() + 41 * 60_000
    await world.sql`update app.apns_provider_tokens set issued_at = now() - interval '41 minutes'`
    const renewed = await another.token(later)
    expect(renewed).not.toBe([...raw][0])
    expect(await new ProviderTokens(world.sql, apns.config).token(later)).toBe(renewed)
    // Both sessions reuse one HTTP/2 connection for all their pushes.
    expect(apns.connections).toBeLessThanOrEqual(2)
  })

  it('nothing is lost when a worker stops mid-way: the leased deliveries go out after the lease', async () => {
    const from = apns.pushes.length
    apns.answer((push) => (push.token === devices.carol ? 'hang' : { status: 200 }))
    const todo = await postTodo('carol', 'Crash test')
    await comment('alice', todo.id, 'Survives restarts')
    // A worker that claims, sends and then dies: its send never finishes (the process is gone, so
    // no timeout fires: the transport is given a minute while the worker counts on half a second,
    // which its 2 s lease covers) and nothing is recorded.
    const dyingTransport = nodePushTransport({ vapid, allowPrivate: true, apnsCa: apns.ca })
    const dead: PushTransport = { apns: (request) => dyingTransport.apns({ ...request, timeoutMs: 60_000 }), web: (request) => dyingTransport.web(request) }
    const dying = drainPush(world.sql, dead, { config: apns.config, tokens }, { ...FAST, leaseMs: 2_000, timeoutMs: 500 })
    await apns.waitFor(from + 1)
    apns.answer(() => ({ status: 200 }))
    // While the lease holds, another drain sends nothing. Checked after that drain: a lease still
    // in force then was in force during it; on a machine so loaded that it ran out first, the
    // drain rightly took the push over (issue 31: no 2 s race either way).
    const during = await drain()
    const [row] = await world.sql`select next_attempt_at > now() as leased from app.push_deliveries where device_token = ${devices.carol!}`
    if (row?.leased) {
      expect(during).toMatchObject({ delivered: 0 })
      await until(() => leaseRanOut('carol'), 'the dead worker\'s lease ran out')
      expect(await drain()).toMatchObject({ delivered: 1 })
    } else {
      expect(during).toMatchObject({ delivered: 1 })
    }
    expect(pushesTo('carol', from).map((p) => p.payload.aps.alert.body)).toEqual(['Survives restarts', 'Survives restarts'])
    // The dead worker's connection goes; what it would record finds its delivery gone.
    await dyingTransport.close()
    await dying
    expect((await world.sql`select 1 from app.push_deliveries where device_token = ${devices.carol!}`).length).toBe(0)
  })

  // The route drains with the push transport given to the Node app (the stand-in APNs); the edge
  // function's own sender is tested by test/push-deno.test.ts.
  it.skipIf(TEST_ENTRY === 'edge')('POST /internal/push drains with the worker secret, 404 without', async () => {
    expect((await world.post('/internal/push')).status).toBe(404)
    expect((await world.post('/internal/push', { headers: { authorization: 'Bearer wrong' } })).status).toBe(404)
    const from = apns.pushes.length
    const todo = await postTodo('dave', 'Cron drained')
    await comment('bob', todo.id, 'Via the route')
    const res = await world.post('/internal/push', { headers: { authorization: `Bearer ${WORKER_SECRET}` } })
    expect(res.status, res.text).toBe(200)
    expect(res.body).toMatchObject({ delivered: 1 })
    expect(pushesTo('dave', from)).toHaveLength(1)
  })
})

describe('Web Push', () => {
  it('sends an encrypted payload with VAPID to the subscription the CLI added; 410 deletes it', async () => {
    const sub = browserSubscription(`${webPushService.url}/push/bob-browser`)
    const added = await world.admin<{ id: string; user: string }>('add-web-push-subscription', '--user', 'bob', '--endpoint', sub.endpoint, `--p256dh=${sub.p256dh}`, `--auth=${sub.auth}`)
    expect(added).toMatchObject({ user: 'bob', endpoint: sub.endpoint })
    await expect(world.admin('add-web-push-subscription', '--user', 'bob', '--endpoint', sub.endpoint, '--p256dh', 'short', `--auth=${sub.auth}`)).rejects.toThrow(/p256dh/)

    const todo = await postTodo('bob', 'Web push test')
    await comment('carol', todo.id, 'To your browser')
    await drain()
    const got = webPushService.received.filter((r) => r.path === '/push/bob-browser')
    expect(got).toHaveLength(1)
    expect(got[0]!.problem).toBeNull()
    expect(got[0]!.vapid).toMatchObject({ sub: 'mailto:ops@todo.test', aud: webPushService.url, publicKey: vapid.publicKey })
    const payload = JSON.parse(sub.decrypt(got[0]!.body))
    expect(payload).toMatchObject({ title: 'Carol commented on your todo', body: 'To your browser', type: 'comment_todo_create', todo_id: todo.id })
    expect(payload.notification_id).toMatch(/^notif_/)

    webPushService.answer(() => 410)
    await comment('dave', todo.id, 'Browser gone')
    expect((await drain()).unregistered).toBe(1)
    expect((await world.sql`select 1 from app.web_push_subscriptions where id = ${added.id}`).length).toBe(0)
  })
})

describe('the stand-ins refuse what Apple and push services refuse (issue 31)', () => {
  /** Sends one push to a fresh APNs stand-in, as our transport would, with the given token and device. */
  async function sendToApns(standIn: Awaited<ReturnType<typeof startApnsStandIn>>, jwt: string, device: string, payload = '{"aps":{"alert":"hi"}}') {
    const session = http2.connect(standIn.config.url!, { ca: standIn.ca })
    try {
      return await new Promise<{ status: number; reason: string }>((resolve, reject) => {
        const stream = session.request({
          ':method': 'POST', ':path': `/3/device/${device}`, authorization: `bearer ${jwt}`,
          'apns-push-type': 'alert', 'apns-topic': standIn.config.topic, 'apns-id': randomUUID(),
        })
        let status = 0
        let body = ''
        stream.on('response', (headers) => { status = Number(headers[':status']) })
        stream.on('data', (chunk: Buffer) => { body += chunk.toString('utf8') })
        stream.on('end', () => resolve({ status, reason: body ? JSON.parse(body).reason : '' }))
        stream.on('error', reject)
        stream.end(payload)
      })
    } finally {
      session.close()
    }
  }
  const providerToken = async (standIn: Awaited<ReturnType<typeof startApnsStandIn>>, iat: number) =>
    await new SignJWT({}).setProtectedHeader({ alg: 'ES256', kid: standIn.config.keyId }).setIssuer(standIn.config.teamId)
      .setIssuedAt(iat).sign(await importPKCS8(standIn.config.privateKey, 'ES256'))

  it('APNs: a provider token over an hour old, a renewal within 20 minutes, a malformed device token, a payload over 4 KB', async () => {
    const standIn = await startApnsStandIn()
    try {
      const now = Math.floor(Date.now() / 1000)
      const device = 'ab'.repeat(32)
      expect(await sendToApns(standIn, await providerToken(standIn, now - 3601), device)).toEqual({ status: 403, reason: 'ExpiredProviderToken' })
      const first = await providerToken(standIn, now - 30 * 60)
      expect(await sendToApns(standIn, first, device)).toEqual({ status: 200, reason: '' })
      // Renewed 19 minutes after the token in use: too soon; 21 minutes after: accepted.
      expect(await sendToApns(standIn, await providerToken(standIn, now - 11 * 60), device)).toEqual({ status: 429, reason: 'TooManyProviderTokenUpdates' })
      expect(await sendToApns(standIn, await providerToken(standIn, now - 9 * 60), device)).toEqual({ status: 200, reason: '' })
      // The token before is still good (under an hour old): a worker still on it is not a renewal.
      expect(await sendToApns(standIn, first, device)).toEqual({ status: 200, reason: '' })
      expect(await sendToApns(standIn, first, 'ab'.repeat(31))).toEqual({ status: 400, reason: 'BadDeviceToken' })
      expect(await sendToApns(standIn, first, device, JSON.stringify({ aps: { alert: 'x'.repeat(4100) } }))).toEqual({ status: 413, reason: 'PayloadTooLarge' })
    } finally {
      await standIn.close()
    }
  })

  it('Web Push: a VAPID token without exp, expired, or more than 24 hours ahead is 403; a body over 4 KB is 413', async () => {
    const service = await startWebPushService()
    try {
      const raw = Buffer.from(vapid.publicKey, 'base64url')
      const key = await importJWK({
        kty: 'EC', crv: 'P-256', d: vapid.privateKey,
        x: raw.subarray(1, 33).toString('base64url'), y: raw.subarray(33).toString('base64url'),
      }, 'ES256')
      const now = Math.floor(Date.now() / 1000)
      const send = async (exp: number | null, bytes = 100) => {
        const claims = new SignJWT({ sub: vapid.subject }).setProtectedHeader({ alg: 'ES256', typ: 'JWT' }).setAudience(service.url)
        const jwt = await (exp === null ? claims : claims.setExpirationTime(exp)).sign(key)
        const res = await fetch(`${service.url}/push/check`, {
          method: 'POST', body: new Uint8Array(bytes),
          headers: { authorization: `vapid t=${jwt}, k=${vapid.publicKey}`, 'content-encoding': 'aes128gcm', ttl: '60' },
        })
        return res.status
      }
      expect(await send(now + 12 * 3600)).toBe(201)
      expect(await send(null)).toBe(403)
      expect(await send(now - 60)).toBe(403)
      expect(await send(now + 25 * 3600)).toBe(403)
      expect(await send(now + 12 * 3600, 4097)).toBe(413)
      // What our worker sent in the tests above was accepted: its exp within the day.
      expect(webPushService.received.filter((r) => r.problem !== null && !/^body of/.test(r.problem))).toEqual([])
      expect(webPushService.received.every((r) => r.vapid === null || (r.vapid.exp! - Date.now() / 1000) <= 24 * 3600)).toBe(true)
    } finally {
      await service.close()
    }
  })
})

describe('loose ends (issue 28)', () => {
  it('a worker held up past its lease sends nothing once another worker took the push over, and records nothing', async () => {
    await member('fenced')
    const todo = await postTodo('fenced', 'Fenced lease')
    // A worker held up between its claim and its send (a paused process, a slow provider token):
    // its token comes only after its lease ran out and another worker delivered the push.
    let release!: () => void
    const held = new Promise<void>((resolve) => (release = resolve))
    const slowTokens = { token: async () => { await held; return await tokens.token() }, forget: () => tokens.forget() } as unknown as ProviderTokens
    const from = apns.pushes.length
    await comment('alice', todo.id, 'Sent once')
    const stale = drainPush(world.sql, transport, { config: apns.config, tokens: slowTokens }, { ...FAST, leaseMs: 1_000, timeoutMs: 500 })
    await until(() => leaseRanOut('fenced'), 'the held-up worker claimed the push and its lease ran out')
    expect(await drain()).toMatchObject({ delivered: 1 })
    release()
    expect(await stale).toMatchObject({ delivered: 0, retrying: 0, failed: 0, lapsed: 1 })
    expect(pushesTo('fenced', from).map((p) => p.payload.aps.alert.body)).toEqual(['Sent once'])
    expect((await world.sql`select 1 from app.push_deliveries where device_token = ${devices.fenced!}`).length).toBe(0)
  })

  it('a worker whose lease ran out never records over the worker that took it over (no third push)', async () => {
    await member('overtaken')
    const todo = await postTodo('overtaken', 'Overtaken lease')
    const from = apns.pushes.length
    let releaseFirst!: () => void
    let releaseSecond!: () => void
    const firstHeld = new Promise<void>((resolve) => (releaseFirst = resolve))
    const secondHeld = new Promise<void>((resolve) => (releaseSecond = resolve))
    apns.answer(async (push) => {
      if (push.token !== devices.overtaken) return { status: 200 }
      const n = pushesTo('overtaken', from).length
      if (n === 1) return { status: 503, reason: 'ServiceUnavailable' }
      if (n === 2) await secondHeld
      return { status: 200 }
    })
    // The first worker gets its 503 at once, but records it only after its lease ran out and a
    // second worker claimed the push (its answer reached it late: a paused process).
    const late: PushTransport = {
      apns: async (request) => {
        const response = await transport.apns(request)
        await firstHeld
        return response
      },
      web: (request) => transport.web(request),
    }
    await comment('alice', todo.id, 'Twice at most')
    const first = drainPush(world.sql, late, { config: apns.config, tokens }, { ...FAST, leaseMs: 3_000, timeoutMs: 500 })
    await until(() => leaseRanOut('overtaken'), 'the first worker\'s lease ran out')
    const second = drain()
    await apns.waitFor(from + 2)
    releaseFirst()
    // The late "retry" is not recorded: the row stays the second worker's, leased, no attempt counted.
    expect(await first).toMatchObject({ retrying: 0, failed: 0, lapsed: 1 })
    const [row] = await world.sql`
      select status, attempts, next_attempt_at > now() + interval '5 seconds' as leased from app.push_deliveries where device_token = ${devices.overtaken!}`
    expect(row).toMatchObject({ status: 'pending', attempts: 0, leased: true })
    // So a third worker finds nothing due (a recorded retry was due after 100 ms: a third push).
    await new Promise((r) => setTimeout(r, 300))
    expect(await drain()).toMatchObject({ delivered: 0, retrying: 0 })
    releaseSecond()
    expect(await second).toMatchObject({ delivered: 1 })
    expect(pushesTo('overtaken', from)).toHaveLength(2)
  })

  it('a huge actor name: the push fits in 4 KB (APNs and Web Push), its title cut between characters', async () => {
    await member('tiny')
    const sub = browserSubscription(`${webPushService.url}/push/tiny-browser`)
    await world.admin('add-web-push-subscription', '--user', 'tiny', '--endpoint', sub.endpoint, `--p256dh=${sub.p256dh}`, `--auth=${sub.auth}`)
    // Surrogate pairs, an emoji sequence with a skin tone, a letter with a combining accent.
    const huge = 'Zoë 👩🏽‍🚀 Ame\u0301lie 🇫🇷 '.repeat(400)
    users.longname = await world.createUser('longname', '--first-name', huge)
    const fullTitle = `${huge.trim()} commented on your todo`
    const todo = await postTodo('tiny', 'Small todo')
    const from = apns.pushes.length
    const webFrom = webPushService.received.length
    await comment('longname', todo.id, 'Hello from a long name')
    expect(await drain()).toMatchObject({ delivered: 2, failed: 0 })

    const graphemes = (text: string) => [...new Intl.Segmenter(undefined, { granularity: 'grapheme' }).segment(text)].map((g) => g.segment)
    const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/
    const checkTitle = (title: string) => {
      expect(title.endsWith('…')).toBe(true)
      const kept = title.slice(0, -1)
      expect(kept.length).toBeGreaterThan(500)
      expect(loneSurrogate.test(kept)).toBe(false)
      expect(fullTitle.startsWith(kept)).toBe(true)
      // Whole user-perceived characters only: the kept ones are the full title's first ones.
      const keptGraphemes = graphemes(kept)
      expect(keptGraphemes).toEqual(graphemes(fullTitle).slice(0, keptGraphemes.length))
    }

    const [push] = pushesTo('tiny', from)
    expect(push!.problem).toBeNull()
    expect(push!.bytes).toBeLessThanOrEqual(4096)
    expect(push!.bytes).toBeGreaterThan(3500)
    checkTitle(push!.payload.aps.alert.title)
    expect(push!.payload.aps.alert.body).toBe('Hello from a long name')

    const [web] = webPushService.received.slice(webFrom).filter((r) => r.path === '/push/tiny-browser')
    expect(web!.problem).toBeNull()
    const plain = sub.decrypt(web!.body)
    expect(Buffer.byteLength(plain)).toBeLessThanOrEqual(WEB_PUSH_MAX_PAYLOAD_BYTES)
    const payload = JSON.parse(plain)
    checkTitle(payload.title)
    expect(payload.body).toBe('Hello from a long name')
  })

  it(`a push service answering 429 or 5xx is tried ${PUSH_MAX_ATTEMPTS} times, then failed; 404 drops the subscription at once`, async () => {
    await member('busy')
    const sub = browserSubscription(`${webPushService.url}/push/busy-browser`)
    await world.admin('add-web-push-subscription', '--user', 'busy', '--endpoint', sub.endpoint, `--p256dh=${sub.p256dh}`, `--auth=${sub.auth}`)
    const hits = () => webPushService.received.filter((r) => r.path === '/push/busy-browser').length
    webPushService.answer((r) => (r.path !== '/push/busy-browser' ? 201 : hits() % 2 ? 429 : 503))
    const todo = await postTodo('busy', 'Busy push service')
    await comment('alice', todo.id, 'Knock knock')
    // Retries due at once: only the number of tries bounds them here.
    for (let i = 0; i < PUSH_MAX_ATTEMPTS + 4; i++) await drain({ scheduleMs: [0] })
    const delivery = () => world.sql`
      select d.status, d.attempts, d.last_status from app.push_deliveries d
      join app.web_push_subscriptions w on w.id = d.web_subscription_id where w.endpoint = ${sub.endpoint}`
    expect([...(await delivery())]).toMatchObject([{ status: 'failed', attempts: PUSH_MAX_ATTEMPTS }])
    expect(hits()).toBe(PUSH_MAX_ATTEMPTS)

    webPushService.answer((r) => (r.path === '/push/busy-browser' ? 404 : 201))
    await comment('carol', todo.id, 'Anyone there?')
    expect(await drain()).toMatchObject({ unregistered: 1 })
    expect(hits()).toBe(PUSH_MAX_ATTEMPTS + 1)
    expect((await world.sql`select 1 from app.web_push_subscriptions where endpoint = ${sub.endpoint}`).length).toBe(0)
    expect(await delivery()).toHaveLength(0)
  })

  it('the storage worker prunes read and hidden notifications after 90 days; unread ones stay', async () => {
    await member('aged')
    const todo = await postTodo('aged', 'Old news')
    await comment('alice', todo.id, 'Read long ago')
    await comment('bob', todo.id, 'Never read')
    const like = await react('carol', 'Todo', todo.id)
    expect((await world.delete(`/v1/reactions/${like.id}`, { auth: users.carol!.api_key })).status).toBe(204)
    const aged = users.aged!.id.replace('user_', '')
    await world.sql`update app.notifications set read = true where user_id = ${aged}::uuid and actor_id = ${users.alice!.id.replace('user_', '')}::uuid`
    await world.sql`update app.notifications set created_at = now() - interval '91 days' where user_id = ${aged}::uuid`
    await comment('dave', todo.id, 'Read lately')
    await world.sql`update app.notifications set read = true where user_id = ${aged}::uuid and actor_id = ${users.dave!.id.replace('user_', '')}::uuid`
    const result = await world.maintain()
    expect(result.prunedNotifications).toBeGreaterThanOrEqual(2)
    const left = await world.sql<{ username: string; read: boolean }[]>`
      select u.username, n.read from app.notifications n join app.users u on u.id = n.actor_id where n.user_id = ${aged}::uuid order by u.username`
    expect(left.map((r) => ({ ...r }))).toEqual([{ username: 'bob', read: false }, { username: 'dave', read: true }])
    // What is left of their pushes went with them; the rest go out as usual.
    await drain()
  })

  it('pruning spent notifications reads them through indexes, never a scan of the table', async () => {
    // 4,000 notifications of one recipient (a thousand of them read and 91 days old), analyzed,
    // so the planner knows the table is not tiny.
    const heap = await world.createUser('heap')
    const recipient = heap.id.replace('user_', '')
    const actor = users.alice!.id.replace('user_', '')
    await world.sql`
      insert into app.notifications (user_id, type, actor_id, subject_id, read, created_at)
      select ${recipient}::uuid, 'follow_user_create', ${actor}::uuid, gen_random_uuid(), i <= 1000,
             now() - case when i <= 1000 then interval '91 days' else interval '1 day' end
      from generate_series(1, 4000) i`
    await world.sql`analyze app.notifications`
    // One statement's cost: the difference of the transaction's counters across it.
    const connection = await world.sql.reserve()
    try {
      const counters = async () => (await connection<{ seq_scan: number; idx_scan: number }[]>`
        select seq_scan::int, idx_scan::int from pg_stat_xact_user_tables where relid = 'app.notifications'::regclass`)[0]!
      await connection`begin`
      const before = await counters()
      const [pruned] = await connection`select app.prune_notifications(interval '90 days', 100) as n`
      const after = await counters()
      await connection`rollback`
      expect(pruned!.n).toBe(100)
      expect(after.seq_scan - before.seq_scan).toBe(0)
      expect(after.idx_scan - before.idx_scan).toBeGreaterThan(0)
    } finally {
      connection.release()
    }
    await world.sql`delete from app.notifications where user_id = ${recipient}::uuid`
  })
})

describe('VAPID keys', () => {
  it('are generated into DATA_DIR on first start and the same afterwards, unless the environment names them', () => {
    const dir = mkdtempSync(join(tmpdir(), 'vapid-'))
    try {
      const first = vapidFrom({}, dir)
      expect(first.publicKey).toMatch(/^[A-Za-z0-9_-]{87}$/)
      expect(first.subject).toMatch(/^mailto:/)
      expect(vapidFrom({}, dir)).toEqual(first)
      const stored = JSON.parse(readFileSync(join(dir, 'secrets.json'), 'utf8'))
      expect(stored).toMatchObject({ vapidPublicKey: first.publicKey, vapidPrivateKey: first.privateKey })
      expect(stored.jwtSecret).toBeTruthy()
      const given = generateVapidKeys()
      expect(vapidFrom({ VAPID_PUBLIC_KEY: given.publicKey, VAPID_PRIVATE_KEY: given.privateKey, VAPID_SUBJECT: 'https://todo.test' }, dir))
        .toEqual({ ...given, subject: 'https://todo.test' })
      expect(() => vapidFrom({ VAPID_PUBLIC_KEY: given.publicKey }, dir)).toThrow(/both/)
      expect(() => vapidFrom({ VAPID_SUBJECT: 'ops@todo.test' }, dir)).toThrow(/VAPID_SUBJECT/)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
