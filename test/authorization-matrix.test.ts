// Issue 19, item 2: the authorization matrix and IDOR. Every route of the table in
// docs/security.md (read by test/support/security-table.ts, the parser test/authorization.test.ts
// uses too) is tried with every kind of bad credential, and every route that takes an ID is tried
// by another member with the IDs of a private member's resources. docs/reliability.md,
// "Authorization matrix", says what each cell must answer and why.
import { createHash, randomBytes } from 'node:crypto'
import { decodeJwt } from 'jose'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type AccessTokenClaims, signAccessToken } from '../functions/lib/tokens.ts'
import { type CreatedUser, type HttpResult, JWT_SECRET, type TestWorld, startWorld } from './support/app.ts'
import { type Row, SCOPES, appOf, concretePath, readTable } from './support/security-table.ts'

const rows = readTable()
const UPGRADE_URL = 'https://todo.test/upgrade'
/**
 * What a lapsed member's right credential gets on the routes of their data rights (issue 28),
 * with the matrix's placeholder IDs: an export starts, the list answers, a made-up export is 404,
 * the deletion request is recorded. Every other route is 401.
 */
const LAPSED_DATA_RIGHTS: Record<string, number> = {
  'POST /v1/exports': 202,
  'GET /v1/exports': 200,
  'GET /v1/exports/{export_id}': 404,
  'DELETE /v1/account': 204,
}
/** A notification type (the `{identifier}` of the preference routes), which pat turned on. */
const PREFERENCE = 'comment_todo_create'
/** Every private resource of pat's carries this in its text, so a leak in any body is found by one search. */
const SECRET = 'PATSECRET'

let world: TestWorld
let alice: CreatedUser
let lapsed: CreatedUser
const tokens = new Map<string, string>()

async function tokenFor(user: string, scopes: string[], app: { firstParty: boolean; chat: boolean }): Promise<string> {
  const key = `${user}|${scopes.join(' ')}|${app.firstParty}|${app.chat}`
  let token = tokens.get(key)
  if (!token) {
    token = await world.token(user, scopes.join(' '), app)
    tokens.set(key, token)
  }
  return token
}

/** A token alice's row accepts (its first alternative's scope, from the right kind of app). */
const rightToken = (user: string, row: Row) => tokenFor(user, [row.oauth[0]!.scope], appOf(row.oauth[0]!.app))

/** The credential of `user` that the row accepts: the read-write key unless keys are refused. */
async function allowedCredential(user: CreatedUser, row: Row): Promise<string> {
  return row.key === 'refused' ? await rightToken(user.username, row) : user.api_key
}

async function call(row: Row, credential: string | undefined, path = concretePath(row.path), json?: unknown): Promise<HttpResult> {
  // Writes send an empty object unless told otherwise: a refused credential gets its 403 before
  // the input is read (docs/security.md), so the body never decides these cells.
  const body = json ?? (row.method === 'GET' || row.method === 'DELETE' ? undefined : {})
  const res = await world.request(row.method, path, { auth: credential, json: body })
  expect(res.status, `${row.method} ${path}: ${res.text}`).toBeLessThan(500)
  return res
}

const expect403 = (res: HttpResult, cell: string) => {
  expect(res.status, `${cell}: ${res.text}`).toBe(403)
  expect(res.body, cell).toEqual({ error: expect.any(String) })
}

beforeAll(async () => {
  world = await startWorld()
  alice = await world.createUser('alice')
  await world.createUser('bob')
  lapsed = await world.createUser('lapsed')
})
afterAll(() => world.close())

describe('every route × every bad credential', () => {
  describe.each(rows.map((row) => [`${row.method} ${row.path}`, row] as const))('%s', (_name, row) => {
    it('no credential, an unknown key, a forged token: 403', async () => {
      expect403(await call(row, undefined), 'no credential')
      expect403(await call(row, `svc_sk_${randomBytes(24).toString('hex')}`), 'unknown key')
      expect403(await call(row, 'not-a-token'), 'garbage bearer')
      // Signed with another secret: well-formed, but not ours.
      const forged = await signAccessToken('another-secret-that-is-long-enough-for-hs256', {
        sub: alice.id, jti: crypto.randomUUID(), scope: SCOPES.join(' '), client_id: 'forged', first_party: true, chat: true,
      }, 3600)
      expect403(await call(row, forged), 'forged token')
    })

    it('a read-only key: 403 wherever the table does not say read-only', async () => {
      const res = await call(row, alice.read_only_api_key)
      if (row.key === 'read-only or read-write') expect([401, 403], res.text).not.toContain(res.status)
      else expect403(res, 'read-only key')
    })

    it('a token without the scope, from a third-party app, from an unapproved app: 403', async () => {
      const needed = row.oauth.map((alternative) => alternative.scope)
      const others = SCOPES.filter((scope) => !needed.includes(scope))
      expect403(await call(row, await tokenFor('alice', others, { firstParty: true, chat: true })), `scopes ${others.join(' ')}`)
      for (const alternative of row.oauth) {
        // A third-party app (not ours) for first-party routes; an app not approved for chat on chat routes.
        if (alternative.app === 'first-party') {
          expect403(await call(row, await tokenFor('alice', [alternative.scope], { firstParty: false, chat: true })), 'third-party app')
        }
        if (alternative.app === 'approved') {
          expect403(await call(row, await tokenFor('alice', [alternative.scope], { firstParty: true, chat: false })), 'unapproved app')
        }
      }
    })

    it('an expired token and a revoked token that would otherwise be enough: 403', async () => {
      const good = await rightToken('alice', row)
      expect([401, 403], 'the token itself is enough').not.toContain((await call(row, good)).status)
      // The same claims (same jti, so the grant still exists) re-signed with our secret, an hour past expiry.
      const claims = decodeJwt(good) as unknown as AccessTokenClaims
      const expired = await signAccessToken(JWT_SECRET, {
        sub: claims.sub, jti: claims.jti, scope: claims.scope, client_id: claims.client_id, first_party: claims.first_party, chat: claims.chat,
      }, -3600)
      expect403(await call(row, expired), 'expired token')

      const revoked = await world.token('alice', row.oauth[0]!.scope, appOf(row.oauth[0]!.app))
      expect([401, 403]).not.toContain((await call(row, revoked)).status)
      await world.admin('revoke-token', '--token', revoked)
      expect403(await call(row, revoked), 'revoked token')
    })

    it('the same credentials as the query parameter api_key, which wins over the header (SPEC, Authentication)', async () => {
      const inQuery = (key: string) => {
        const path = concretePath(row.path)
        return `${path}${path.includes('?') ? '&' : '?'}api_key=${encodeURIComponent(key)}`
      }
      const unknown = `svc_sk_${randomBytes(24).toString('hex')}`
      expect403(await call(row, undefined, inQuery(unknown)), 'unknown key in the query')
      // The query decides, not the header: a good header does not rescue an unknown query key.
      expect403(await call(row, await allowedCredential(alice, row), inQuery(unknown)), 'unknown key in the query, good header')
      const readOnly = await call(row, undefined, inQuery(alice.read_only_api_key))
      if (row.key === 'read-only or read-write') expect([401, 403], readOnly.text).not.toContain(readOnly.status)
      else expect403(readOnly, 'read-only key in the query')
      if (row.key === 'refused') expect403(await call(row, undefined, inQuery(alice.api_key)), 'an API key in the query where keys are refused')
      const revoked = await world.token('alice', row.oauth[0]!.scope, appOf(row.oauth[0]!.app))
      await world.admin('revoke-token', '--token', revoked)
      expect403(await call(row, undefined, inQuery(revoked)), 'revoked token in the query')
    })

    it('a lapsed subscription: 401 with upgrade_url (GET /v1/billing answers, to say why; the data rights work)', async () => {
      // Other tests renew and lapse the same member; each cell sets the state it needs.
      const credential = await allowedCredential(lapsed, row)
      await world.admin('set-subscription', '--user', 'lapsed', '--active', 'false')
      const res = await call(row, credential)
      const dataRight = LAPSED_DATA_RIGHTS[`${row.method} ${row.path}`]
      if (row.method === 'GET' && row.path === '/v1/billing') {
        expect(res.status).toBe(200)
        expect(res.body).toMatchObject({ status: 'inactive' })
      } else if (dataRight) {
        // Issue 28: taking one's data and leaving need no subscription (test/data-rights.test.ts).
        expect(res.status, res.text).toBe(dataRight)
      } else {
        expect(res.status, res.text).toBe(401)
        expect(res.body).toEqual({ error: expect.any(String), upgrade_url: UPGRADE_URL })
      }
    })
  })
})

// ---------------------------------------------------------------------------------------------
// IDOR: mallory, an ordinary member with every credential there is, tries every route that takes
// an ID with the IDs of pat's private resources.

interface PatsThings {
  todo: string
  comment: string
  reaction: string
  project: string
  conversation: string
  message: string
  subscription: string
  export: string
  notification: string
  upload: string
  device: string
}
let pat: CreatedUser
let mallory: CreatedUser
const things = {} as PatsThings
let patWrite: string
let patNotify: string
let patChat: string

async function uploadFor(user: CreatedUser): Promise<string> {
  const file = Buffer.from(`${SECRET} notes`)
  const asked = await world.post('/v1/uploads', {
    auth: user.api_key,
    json: { filename: `${SECRET}.txt`, byte_size: file.length, checksum: createHash('md5').update(file).digest('base64'), content_type: 'text/plain' },
  })
  expect(asked.status, asked.text).toBe(200)
  const stored = await fetch(asked.body.url, { method: 'PUT', headers: asked.body.headers, body: new Uint8Array(file) })
  expect(stored.status).toBe(200)
  return asked.body.signed_id
}

/**
 * Every row of pat's, whole (every column, as JSON), per table: an attack that changed any field
 * of any of them (a reaction's content, a device's platform, an export's state, a notification
 * read, a follower removed) shows as a difference, not only one that changed how many there are.
 * `pat` is pat's id; each entry selects the rows that are pat's or hang off pat's resources.
 */
const PATS_ROWS: Record<string, string> = {
  user: 'select x.* from app.users x where x.id = pat',
  todos: 'select x.* from app.todos x where x.user_id = pat',
  comments: 'select x.* from app.comments x where x.user_id = pat or x.todo_id in (select t.id from app.todos t where t.user_id = pat)',
  reactions: 'select x.* from app.reactions x where x.user_id = pat or x.todo_id in (select t.id from app.todos t where t.user_id = pat)',
  projects: 'select x.* from app.projects x where x.owner_id = pat',
  project_makers: 'select x.* from app.project_makers x where x.project_id in (select p.id from app.projects p where p.owner_id = pat)',
  project_follows: 'select x.* from app.project_follows x where x.project_id in (select p.id from app.projects p where p.owner_id = pat)',
  hooks: 'select x.* from app.webhook_subscriptions x where x.user_id = pat',
  hook_secrets: 'select k.* from app.webhook_secrets k join app.webhook_subscriptions w on w.id = k.subscription_id where w.user_id = pat',
  exports: 'select x.* from app.exports x where x.user_id = pat',
  devices: 'select x.* from app.devices x where x.user_id = pat',
  conversation_members: 'select x.* from app.conversation_members x where x.conversation_id in (select m.conversation_id from app.conversation_members m where m.user_id = pat)',
  messages: 'select x.* from app.messages x where x.conversation_id in (select m.conversation_id from app.conversation_members m where m.user_id = pat)',
  message_reactions: 'select x.* from app.message_reactions x where x.user_id = pat',
  follow_requests: 'select x.* from app.user_follow_requests x where x.requester_id = pat or x.followee_id = pat',
  follows: 'select x.* from app.user_follows x where x.followee_id = pat or x.follower_id = pat',
  notifications: 'select x.* from app.notifications x where x.user_id = pat',
  notification_preferences: 'select x.* from app.notification_preferences x where x.user_id = pat',
  mutes: 'select x.* from app.mutes x where x.user_id = pat',
  uploads: 'select x.* from app.uploads x where x.user_id = pat',
}

/** What pat's resources look like in the database: must be the same after every attack. */
async function patsState(): Promise<Record<string, unknown>> {
  const columns = Object.entries(PATS_ROWS).map(([name, rows]) =>
    `(select coalesce(jsonb_agg(to_jsonb(r) order by to_jsonb(r)::text), '[]') from (${rows}) r) as ${name}`)
  const [state] = await world.sql.unsafe(
    `with me as (select id as pat from app.users where username = 'pat') select ${columns.join(',\n')} from me`)
  return state!
}

/**
 * The IDs of pat's resources in a route's path. `{identifier}` is a notification type, the same
 * for every member: PATCH /v1/notification_preferences/{identifier} can only name the caller's own
 * preference, which the test checks (mallory's changes, pat's does not).
 */
function patsPath(path: string): string {
  return path
    .replace('{identifier}', PREFERENCE)
    .replace('{todo_id}', things.todo)
    .replace('{username}', 'pat')
    .replace('{user_id}', 'pat')
    .replace('{project_id}', things.project)
    .replace('{comment_id}', things.comment)
    .replace('{reaction_id}', things.reaction)
    .replace('{conversation_id}', things.conversation)
    .replace('{message_id}', things.message)
    .replace('{content}', encodeURIComponent('👍'))
    .replace('{export_id}', things.export)
    .replace('{subscription_id}', things.subscription)
    .replace('{token}', things.device)
}

/** A body that would be valid for the owner, so a refusal is the resource's, not validation's. */
function validBody(row: Row): unknown {
  switch (`${row.method} ${row.path}`) {
    case 'PATCH /v1/todos/{todo_id}': return { body: 'pwned' }
    case 'PATCH /v1/comments/{comment_id}': return { body: 'pwned' }
    case 'POST /v1/conversations/{conversation_id}/messages': return { body: 'pwned' }
    case 'POST /v1/messages/{message_id}/reactions': return { content: '🎉' }
    case 'PATCH /v1/webhooks/subscriptions/{subscription_id}': return { active: false, url: 'https://evil.example.com/hook' }
    case 'PATCH /v1/notification_preferences/{identifier}': return { mobile_push_enabled: false }
    default: return undefined
  }
}

const expectNoLeak = (res: HttpResult, cell: string) => {
  expect(res.text, `${cell} leaks`).not.toContain(SECRET)
  for (const id of Object.values(things)) {
    // An error may name the ID the caller sent (it is theirs already), never another resource of pat's.
    if (!res.text.includes(id)) continue
    expect(res.status, `${cell} names ${id}`).toBeGreaterThanOrEqual(400)
  }
}

describe('IDOR: another member with the IDs of a private member\'s resources', () => {
  let before: Awaited<ReturnType<typeof patsState>>

  beforeAll(async () => {
    pat = await world.createUser('pat')
    mallory = await world.createUser('mallory')
    const quinn = await world.createUser('quinn')
    await world.createUser('prue', '--privacy', 'protected')
    patWrite = pat.api_key
    patNotify = await world.token('pat', 'notifications', { firstParty: true })
    patChat = await world.token('pat', 'chat write public', { firstParty: true, chat: true })
    const quinnChat = await world.token('quinn', 'chat', { chat: true })

    const todo = await world.post('/v1/todos', { auth: patWrite, json: { body: `${SECRET} todo`, attachments: [await uploadFor(pat)] } })
    expect(todo.status, todo.text).toBe(201)
    things.todo = todo.body.id
    const comment = await world.post('/v1/comments', { auth: patWrite, json: { commentable_type: 'Todo', commentable_id: things.todo, body: `${SECRET} comment` } })
    things.comment = comment.body.id
    const reaction = await world.post('/v1/reactions', { auth: patWrite, json: { reactable_type: 'Todo', reactable_id: things.todo } })
    expect(reaction.status, reaction.text).toBe(201)
    things.reaction = reaction.body.id
    // A notification of pat's: quinn comments while pat is still public.
    await world.post('/v1/comments', { auth: quinn.api_key, json: { commentable_type: 'Todo', commentable_id: things.todo, body: `${SECRET} from quinn` } })
    const notifications = await world.get('/v1/notifications', { auth: patNotify })
    expect(notifications.body.data.length, notifications.text).toBeGreaterThan(0)
    things.notification = notifications.body.data[0].id

    const project = await world.admin('create-project', '--owner', 'pat', '--name', `${SECRET} project`, '--slug', 'pats-secret', '--privacy', 'private')
    things.project = project.id
    const conversation = await world.post('/v1/conversations', { auth: patChat, json: { user: 'quinn' } })
    things.conversation = conversation.body.id
    const message = await world.post(`/v1/conversations/${things.conversation}/messages`, { auth: patChat, json: { body: `${SECRET} message` } })
    things.message = message.body.id
    await world.post(`/v1/conversations/${things.conversation}/messages`, { auth: quinnChat, json: { body: `${SECRET} answer` } })
    expect((await world.post(`/v1/messages/${things.message}/reactions`, { auth: patChat, json: { content: '👍' } })).status).toBe(201)

    const hook = await world.post('/v1/webhooks/subscriptions', { auth: patWrite, json: { url: `https://hooks.example.com/${SECRET}`, event_type: 'new_todo' } })
    expect(hook.status, hook.text).toBe(201)
    things.subscription = hook.body.id
    const exported = await world.post('/v1/exports', { auth: patWrite })
    expect(exported.status, exported.text).toBe(202)
    things.export = exported.body.id
    things.upload = await uploadFor(pat)
    things.device = randomBytes(32).toString('hex')
    const device = await world.post('/v1/devices', { auth: await world.token('pat', 'notifications', { firstParty: true }), json: { token: things.device, platform: 'ios' } })
    expect(device.status, device.text).toBe(201)
    // A pending follow request of pat's (to a protected member), and pat mutes quinn.
    expect((await world.post('/v1/users/prue/follow', { auth: patWrite })).status).toBeLessThan(300)
    expect((await world.post('/v1/users/quinn/mute', { auth: patWrite })).status).toBeLessThan(300)

    // Privacy is set on the website, not through the API (SPEC has no field for it in PATCH /v1/users/me).
    const preference = await world.request('PATCH', `/v1/notification_preferences/${PREFERENCE}`, { auth: patNotify, json: { mobile_push_enabled: true } })
    expect(preference.status, preference.text).toBe(200)
    await world.sql`update app.users set privacy = 'private' where username = 'pat'`
    before = await patsState()
  })

  const idRows = rows.filter((row) => row.path.includes('{'))
  // Profiles are visible to every member (docs/security.md: "profiles are visible to every
  // member"; a private member's todos and projects are not), and a mute is the caller's own
  // relation that anyone may make: these answer 2xx, but with none of pat's private content.
  const profileRoutes = new Set([
    'GET /v1/users/{username}', 'GET /v1/users/{username}/todos', 'GET /v1/users/{username}/projects',
    'POST /v1/users/{user_id}/mute', 'DELETE /v1/users/{user_id}/mute',
  ])

  it.each(idRows.map((row) => [`${row.method} ${row.path}`, row] as const))('%s', async (name, row) => {
    const path = patsPath(row.path)
    const res = await call(row, await allowedCredential(mallory, row), path, validBody(row))
    // A DELETE of the caller's own relation is idempotent (SPEC: 204 when there is nothing to
    // delete, as for DELETE /v1/devices/{token}): it may answer 204, as long as pat's resource is
    // untouched (checked below); everything else is a refusal.
    if (name === 'PATCH /v1/notification_preferences/{identifier}') {
      // The caller's own preference: it answers 200 and changes mallory's row; pat's rows are
      // compared below like every other route's.
      expect(res.status, res.text).toBe(200)
      const [own] = await world.sql`
        select p.mobile_push_enabled from app.notification_preferences p join app.users u on u.id = p.user_id
        where u.username = 'mallory' and p.type = ${PREFERENCE}`
      expect(own, 'mallory\'s own preference was written').toEqual({ mobile_push_enabled: false })
    } else if (profileRoutes.has(name)) {
      if (res.body?.data) expect(res.body.data, `${name} lists pat's private things`).toEqual([])
    } else if (!(row.method === 'DELETE' && res.status === 204 && res.text === '')) {
      expect(res.status, `${name}: ${res.text}`).toBeGreaterThanOrEqual(400)
    }
    expectNoLeak(res, name)
    expect(await patsState(), `${name} changed pat's resources`).toEqual(before)
  })

  it('IDs in bodies and query strings: reactions, comments, replies, reports, attachments, cursors', async () => {
    const calls: [string, string, unknown?][] = [
      ['POST', '/v1/reactions', { reactable_type: 'Todo', reactable_id: things.todo }],
      ['POST', '/v1/reactions', { reactable_type: 'Comment', reactable_id: things.comment }],
      ['POST', '/v1/comments', { commentable_type: 'Todo', commentable_id: things.todo, body: 'hi' }],
      ['POST', '/v1/comments', { commentable_type: 'Todo', commentable_id: things.todo, body: 'hi', parent_id: things.comment }],
      ['POST', '/v1/reports', { reportable_type: 'Todo', reportable_id: things.todo }],
      ['POST', '/v1/reports', { reportable_type: 'Comment', reportable_id: things.comment }],
      ['POST', '/v1/todos', { body: 'stolen', attachments: [things.upload] }],
      ['POST', '/v1/webhooks/subscriptions', { url: 'https://hooks.example.com/m', event_type: 'new_todo', project_ids: [things.project] }],
      ['GET', `/v1/todos?starting_after=${things.todo}`],
      ['GET', `/v1/timeline?starting_after=${things.todo}`],
      ['GET', `/v1/todos/${things.todo}/comments?starting_after=${things.comment}`],
      ['GET', `/v1/users/me/todos?starting_after=${things.todo}`],
      ['GET', `/v1/projects?starting_after=${things.project}`],
    ]
    for (const [method, path, json] of calls) {
      const res = await world.request(method, path, { auth: mallory.api_key, json })
      expect(res.status, `${method} ${path} ${JSON.stringify(json)}: ${res.text}`).toBeGreaterThanOrEqual(400)
      expect(res.status).toBeLessThan(500)
      expectNoLeak(res, `${method} ${path}`)
    }
    const malloryAll = await world.token('mallory', SCOPES.join(' '), { firstParty: true, chat: true })
    const chatCalls: [string, string, unknown?][] = [
      ['GET', `/v1/notifications?starting_after=${things.notification}`],
      ['GET', `/v1/conversations?starting_after=${things.conversation}`],
      ['GET', `/v1/conversations/${things.conversation}/messages?starting_after=${things.message}`],
      ['POST', '/v1/conversations/reading', { conversation_ids: [things.conversation] }],
    ]
    for (const [method, path, json] of chatCalls) {
      const res = await world.request(method, path, { auth: malloryAll, json })
      expectNoLeak(res, `${method} ${path}`)
      if (path.includes('starting_after')) expect(res.status, `${method} ${path}: ${res.text}`).toBe(404)
    }
    // A message with pat's upload as its attachment, in mallory's own conversation.
    const own = await world.post('/v1/conversations', { auth: malloryAll, json: { user: 'quinn' } })
    const attached = await world.post(`/v1/conversations/${own.body.id}/messages`, { auth: malloryAll, json: { attachment: things.upload } })
    expect(attached.status, attached.text).toBeGreaterThanOrEqual(400)
    expectNoLeak(attached, 'message attachment')
    expect(await patsState()).toEqual(before)
  })

  it('a visible resource of another member: 403 on every write (SPEC section 5, rule 9), untouched', async () => {
    // Alice is public: mallory sees her todo, comment and reaction, so the refusal is 403, not 404.
    const todo = (await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'alice in public' } })).body.id
    const comment = (await world.post('/v1/comments', { auth: alice.api_key, json: { commentable_type: 'Todo', commentable_id: todo, body: 'alice comments' } })).body.id
    const reaction = (await world.post('/v1/reactions', { auth: alice.api_key, json: { reactable_type: 'Todo', reactable_id: todo } })).body.id
    const writes: [string, string, unknown?][] = [
      ['PATCH', `/v1/todos/${todo}`, { body: 'pwned' }],
      ['DELETE', `/v1/todos/${todo}`],
      ['PATCH', `/v1/comments/${comment}`, { body: 'pwned' }],
      ['DELETE', `/v1/comments/${comment}`],
      ['DELETE', `/v1/reactions/${reaction}`],
    ]
    for (const credential of [mallory.api_key, await world.token('mallory', 'public write')]) {
      for (const [method, path, json] of writes) {
        const res = await world.request(method, path, { auth: credential, json })
        expect(res.status, `${method} ${path}: ${res.text}`).toBe(403)
        expect(res.body).toEqual({ error: expect.any(String) })
      }
    }
    const seen = await world.get(`/v1/todos/${todo}`, { auth: alice.api_key })
    expect(seen.body).toMatchObject({ body: 'alice in public', comments_count: 1, reactions_count: 1 })
  })

  it('pat still has all of it', async () => {
    expect((await world.get(`/v1/todos/${things.todo}`, { auth: patWrite })).body.body).toBe(`${SECRET} todo`)
    expect((await world.get(`/v1/exports/${things.export}`, { auth: patWrite })).status).toBe(200)
    expect((await world.get('/v1/webhooks/subscriptions', { auth: patWrite })).body.map((hook: { id: string }) => hook.id)).toEqual([things.subscription])
    expect((await world.get(`/v1/conversations/${things.conversation}`, { auth: patChat })).status).toBe(200)
  })
})
