// SPEC section 4: reactions, comments (with replies), reports, following, mutes, the timeline.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CommentSchema, ReactionSchema } from '../functions/lib/schemas.ts'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'
import { waitForLockWait } from './support/locks.ts'

let world: TestWorld
let alice: CreatedUser
let bob: CreatedUser
let carol: CreatedUser

const post = async (user: CreatedUser, body: string) => (await world.post('/v1/todos', { auth: user.api_key, json: { body } })).body
const comment = (user: CreatedUser, todoId: string, body: string | null, extra: Record<string, unknown> = {}) =>
  world.post('/v1/comments', { auth: user.api_key, json: { commentable_type: 'Todo', commentable_id: todoId, body, ...extra } })
const bodies = (res: { body: { data: { body: string }[] } }) => res.body.data.map((t) => t.body)

beforeAll(async () => {
  world = await startWorld()
  alice = await world.createUser('alice')
  bob = await world.createUser('bob')
  carol = await world.createUser('carol')
  await world.admin('create-project', '--owner', 'alice', '--name', 'Rocket', '--slug', 'rocket', '--hashtag', 'rocket')
})
afterAll(() => world.close())

describe('reactions', () => {
  it('201 Reaction on a todo; reacting again returns the same reaction; counters and viewer follow', async () => {
    const todo = await post(alice, 'Like me')
    const first = await world.post('/v1/reactions', { auth: bob.api_key, json: { reactable_type: 'Todo', reactable_id: todo.id } })
    expect(first.status).toBe(201)
    ReactionSchema.strict().parse(first.body)
    expect(first.body).toMatchObject({ reactable_type: 'Todo', reactable_id: todo.id, reactor: { username: 'bob' } })
    const again = await world.post('/v1/reactions', { auth: bob.api_key, json: { reactable_type: 'Todo', reactable_id: todo.id } })
    expect(again.status).toBe(201)
    expect(again.body.id).toBe(first.body.id)
    const seen = await world.get(`/v1/todos/${todo.id}`, { auth: bob.api_key })
    expect(seen.body.reactions_count).toBe(1)
    expect(seen.body.viewer.reactions).toEqual([{ id: first.body.id }])
  })

  it('20 concurrent identical reactions leave one row and one count', async () => {
    const todo = await post(alice, 'Race me')
    const results = await Promise.all(Array.from({ length: 20 }, () =>
      world.post('/v1/reactions', { auth: carol.api_key, json: { reactable_type: 'Todo', reactable_id: todo.id } })))
    expect(results.map((r) => r.status)).toEqual(Array(20).fill(201))
    expect(new Set(results.map((r) => r.body.id)).size).toBe(1)
    const [row] = await world.sql`select count(*)::int as n from app.reactions where todo_id = app.from_public_id('todo', ${todo.id})`
    expect(row!.n).toBe(1)
    expect((await world.get(`/v1/todos/${todo.id}`, { auth: carol.api_key })).body.reactions_count).toBe(1)
  })

  it('reactions on comments', async () => {
    const todo = await post(alice, 'Discuss')
    const c = (await comment(bob, todo.id, 'Nice')).body
    const res = await world.post('/v1/reactions', { auth: alice.api_key, json: { reactable_type: 'Comment', reactable_id: c.id } })
    expect(res.status).toBe(201)
    expect(res.body).toMatchObject({ reactable_type: 'Comment', reactable_id: c.id })
    const list = await world.get(`/v1/todos/${todo.id}/comments`, { auth: alice.api_key })
    expect(list.body.data[0]).toMatchObject({ reactions_count: 1, viewer: { reactions: [{ id: res.body.id }] } })
  })

  it('DELETE: own only (403), 404 unknown, 204 then gone', async () => {
    const todo = await post(alice, 'Unlike me')
    const r = (await world.post('/v1/reactions', { auth: bob.api_key, json: { reactable_type: 'Todo', reactable_id: todo.id } })).body
    expect((await world.delete(`/v1/reactions/${r.id}`, { auth: alice.api_key })).status).toBe(403)
    expect((await world.delete(`/v1/reactions/${r.id}`, { auth: bob.read_only_api_key })).status).toBe(403)
    expect((await world.delete(`/v1/reactions/${r.id}`, { auth: bob.api_key })).status).toBe(204)
    expect((await world.delete(`/v1/reactions/${r.id}`, { auth: bob.api_key })).status).toBe(404)
    expect((await world.get(`/v1/todos/${todo.id}`, { auth: bob.api_key })).body).toMatchObject({ reactions_count: 0, viewer: { reactions: [] } })
  })

  it('422 for a wrong type or target, 403 for a read-only key', async () => {
    const todo = await post(alice, 'x')
    const cases = [
      { reactable_type: 'Project', reactable_id: todo.id },
      { reactable_type: 'Todo', reactable_id: 'todo_00000000000000000000000000000000' },
      { reactable_type: 'Comment', reactable_id: todo.id },
      { reactable_type: 'Todo' },
    ]
    for (const json of cases) {
      const res = await world.post('/v1/reactions', { auth: bob.api_key, json })
      expect(res.status, JSON.stringify(json)).toBe(422)
      expect(res.body.error).toMatch(/^reactable_(type|id)/)
    }
    expect((await world.post('/v1/reactions', { auth: bob.read_only_api_key, json: { reactable_type: 'Todo', reactable_id: todo.id } })).status).toBe(403)
  })
})

describe('comments', () => {
  it('201 Comment with every field, mentions parsed; counters and viewer.comments follow', async () => {
    const todo = await post(alice, 'Comment here')
    const res = await comment(bob, todo.id, 'Great work @alice on #rocket')
    expect(res.status).toBe(201)
    CommentSchema.strict().parse(res.body)
    expect(res.body).toMatchObject({
      body: 'Great work @alice on #rocket', attachments: [], reactions_count: 0, viewer: { reactions: [] }, parent_id: null,
      creator: { username: 'bob' },
    })
    expect(res.body.id).toMatch(/^comm_/)
    expect(res.body.url).toMatch(new RegExp(`^http://api\\.test/todos/\\d+#${res.body.id}$`))
    expect(res.body.mentioned_users.map((u: { username: string }) => u.username)).toEqual(['alice'])
    expect(res.body.mentioned_projects.map((p: { slug: string }) => p.slug)).toEqual(['rocket'])
    const seen = await world.get(`/v1/todos/${todo.id}`, { auth: bob.api_key })
    expect(seen.body).toMatchObject({ comments_count: 1, viewer: { comments: [{ id: res.body.id }] } })
    expect((await world.get(`/v1/todos/${todo.id}`, { auth: alice.api_key })).body.viewer.comments).toEqual([])
  })

  it('422: commentable_type other than Todo, unknown todo, no body, bad parent; 403 read-only', async () => {
    const todo = await post(alice, 'Strict')
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ commentable_type: 'Project', commentable_id: todo.id, body: 'x' }, /^commentable_type must be Todo/],
      [{ commentable_type: 'Todo', commentable_id: 'todo_00000000000000000000000000000000', body: 'x' }, /^commentable_id/],
      [{ commentable_type: 'Todo', commentable_id: todo.id }, /^body is required unless attachments/],
      [{ commentable_type: 'Todo', commentable_id: todo.id, body: '  ' }, /^body is required/],
      [{ commentable_type: 'Todo', commentable_id: todo.id, body: 'x', parent_id: 'comm_00000000000000000000000000000000' }, /^parent_id/],
      [{ commentable_type: 'Todo', commentable_id: todo.id, body: 'x', attachments: ['forged'] }, /^attachments/],
      [{ commentable_id: todo.id, body: 'x' }, /^commentable_type/],
    ]
    for (const [json, message] of cases) {
      const res = await world.post('/v1/comments', { auth: bob.api_key, json })
      expect(res.status, JSON.stringify(json)).toBe(422)
      expect(res.body.error).toMatch(message)
    }
    expect((await comment({ ...bob, api_key: bob.read_only_api_key }, todo.id, 'x')).status).toBe(403)
  })

  it('lists oldest first with replies; deleting a comment removes its replies and their reactions', async () => {
    const todo = await post(alice, 'Thread')
    const top = (await comment(bob, todo.id, 'First')).body
    const reply = (await comment(carol, todo.id, 'Reply to first', { parent_id: top.id })).body
    expect(reply.parent_id).toBe(top.id)
    await comment(carol, todo.id, 'Second')
    await world.post('/v1/reactions', { auth: alice.api_key, json: { reactable_type: 'Comment', reactable_id: reply.id } })

    const list = await world.get(`/v1/todos/${todo.id}/comments`, { auth: alice.api_key })
    expect(bodies(list)).toEqual(['First', 'Reply to first', 'Second'])
    expect(list.body).toMatchObject({ total_count: 3, has_more: false, after: null })
    const page = await world.get(`/v1/todos/${todo.id}/comments?limit=2`, { auth: alice.api_key })
    expect(page.body).toMatchObject({ has_more: true, after: page.body.data[1].id })
    expect(bodies(await world.get(`/v1/todos/${todo.id}/comments?starting_after=${page.body.after}`, { auth: alice.api_key }))).toEqual(['Second'])

    expect((await world.delete(`/v1/comments/${top.id}`, { auth: carol.api_key })).status).toBe(403)
    expect((await world.delete(`/v1/comments/${top.id}`, { auth: bob.api_key })).status).toBe(204)
    expect(bodies(await world.get(`/v1/todos/${todo.id}/comments`, { auth: alice.api_key }))).toEqual(['Second'])
    expect((await world.get(`/v1/todos/${todo.id}`, { auth: alice.api_key })).body.comments_count).toBe(1)
    const [left] = await world.sql`select count(*)::int as n from app.reactions where comment_id = app.from_public_id('comm', ${reply.id})`
    expect(left!.n).toBe(0)
    expect((await world.delete(`/v1/comments/${top.id}`, { auth: bob.api_key })).status).toBe(404)
  })

  it('404 for the comments of an unknown todo and for a foreign cursor', async () => {
    expect((await world.get('/v1/todos/todo_00000000000000000000000000000000/comments', { auth: alice.api_key })).status).toBe(404)
    const todo = await post(alice, 'Cursor')
    expect((await world.get(`/v1/todos/${todo.id}/comments?starting_after=comm_00000000000000000000000000000000`, { auth: alice.api_key })).status).toBe(404)
  })

  it('PATCH edits your own comment (mentions re-parsed); 403 others; 404; 422; 429 past the limit', async () => {
    const todo = await post(alice, 'Edit comments')
    const c = (await comment(bob, todo.id, 'Hello @carol')).body
    const edited = await world.patch(`/v1/comments/${c.id}`, { auth: bob.api_key, json: { body: 'Hello @alice' } })
    expect(edited.status).toBe(200)
    expect(edited.body.mentioned_users.map((u: { username: string }) => u.username)).toEqual(['alice'])
    expect((await world.patch(`/v1/comments/${c.id}`, { auth: alice.api_key, json: { body: 'x' } })).status).toBe(403)
    expect((await world.patch('/v1/comments/comm_00000000000000000000000000000000', { auth: bob.api_key, json: { body: 'x' } })).status).toBe(404)
    expect((await world.patch(`/v1/comments/${c.id}`, { auth: bob.api_key, json: { body: '' } })).status).toBe(422)
    expect((await world.patch(`/v1/comments/${c.id}`, { auth: bob.api_key, json: { remove_attachment_ids: ['x'] } })).status).toBe(422)
    for (let i = 1; i < 30; i++) expect((await world.patch(`/v1/comments/${c.id}`, { auth: bob.api_key, json: { body: `v${i}` } })).status).toBe(200)
    const limited = await world.patch(`/v1/comments/${c.id}`, { auth: bob.api_key, json: { body: 'too many' } })
    expect(limited.status).toBe(429)
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0)
  })

  it('total_count counts the comments the viewer sees, from the todo\'s counter: privacy, follows and mutes; a privacy change leaves updated_at', async () => {
    const [owner, pub, prot, priv, reader] = await Promise.all(['cowner', 'cpub', 'cprot', 'cpriv', 'creader'].map((name) => world.createUser(name)))
    const setPrivacy = (user: CreatedUser, privacy: string) => world.sql`update app.users set privacy = ${privacy}::app.privacy where username = ${user.username}`
    await setPrivacy(prot!, 'protected')
    await setPrivacy(priv!, 'private')
    const todo = await post(owner!, 'Talk to me')
    for (const [user, body] of [[pub!, 'public words'], [prot!, 'protected words'], [priv!, 'private words'], [reader!, 'my words']] as const) {
      expect((await comment(user, todo.id, body)).status).toBe(201)
    }
    const seen = async (user: CreatedUser) => {
      const res = await world.get(`/v1/todos/${todo.id}/comments`, { auth: user.api_key })
      expect(res.status).toBe(200)
      expect(res.body.total_count, `${user.username}: the total is what the pages hold`).toBe(res.body.data.length)
      return bodies(res).sort()
    }
    expect(await seen(owner!)).toEqual(['my words', 'private words', 'protected words', 'public words'])
    expect(await seen(reader!)).toEqual(['my words', 'public words'])
    expect(await seen(priv!)).toEqual(['my words', 'private words', 'public words'])
    await world.sql`insert into app.user_follows (follower_id, followee_id)
                    select r.id, p.id from app.users r, app.users p where r.username = ${reader!.username} and p.username = ${prot!.username}`
    expect(await seen(reader!)).toEqual(['my words', 'protected words', 'public words'])
    // The public commenter goes private: their comment leaves the reader's count, its updated_at stays.
    const [before] = await world.sql`select updated_at from app.comments where body = 'public words'`
    await setPrivacy(pub!, 'private')
    expect(await seen(reader!)).toEqual(['my words', 'protected words'])
    const [after] = await world.sql`select updated_at, author_privacy from app.comments where body = 'public words'`
    expect(after).toEqual({ updated_at: before!.updated_at, author_privacy: 'private' })
    // Muted: left out for the muter, the owner's muted commenter too.
    expect((await world.post(`/v1/users/${prot!.username}/mute`, { auth: reader!.api_key })).status).toBe(204)
    expect(await seen(reader!)).toEqual(['my words'])
    expect((await world.post(`/v1/users/${priv!.username}/mute`, { auth: owner!.api_key })).status).toBe(204)
    expect(await seen(owner!)).toEqual(['my words', 'protected words', 'public words'])
    // The total answers only for a viewer who may see the todo: null without a viewer (the todo
    // still public: nothing else would hide it) and for another's private todo.
    const countAs = (claims: Record<string, unknown>) => world.sql.begin(async (tx) => {
      await tx`select set_config('role', 'authenticated', true), set_config('request.jwt.claims', ${JSON.stringify(claims)}, true)`
      const [row] = await tx`select app.visible_comments_count(app.from_public_id('todo', ${todo.id})) as n`
      return row!.n
    })
    const idOf = (user: CreatedUser) => user.id.replace(/^user_(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5')
    expect(await countAs({ role: 'authenticated' })).toBeNull()
    await setPrivacy(owner!, 'private')
    expect(await countAs({ sub: idOf(reader!), role: 'authenticated' })).toBeNull()
    expect(Number(await countAs({ sub: idOf(owner!), role: 'authenticated' }))).toBe(3)
    // A member cannot write the copy: the insert's value is replaced by the commenter's privacy.
    await expect(world.sql`insert into app.comments (todo_id, user_id, body, author_privacy)
                           select app.from_public_id('todo', ${todo.id}), u.id, 'forged', 'public' from app.users u where u.username = ${priv!.username}
                           returning author_privacy`.then((rows) => rows[0]!.author_privacy)).resolves.toBe('private')
  })

  it('a comment and its commenter\'s privacy change at once: the comment keeps the privacy that commits last, in either order', async () => {
    const [owner, member] = await Promise.all(['raceowner', 'racer'].map((name) => world.createUser(name)))
    const todo = await post(owner!, 'Race on my comments')
    const memberId = (await world.sql`select id from app.users where username = ${member!.username}`)[0]!.id as string
    const todoId = (await world.sql`select app.from_public_id('todo', ${todo.id}) as id`)[0]!.id as string
    const copy = async (body: string) => (await world.sql`select author_privacy from app.comments where body = ${body}`)[0]!.author_privacy
    const held = await world.sql.reserve()
    try {
      // The comment first: the privacy change waits for it, then copies onto it too.
      await held`begin`
      await held`insert into app.comments (todo_id, user_id, body) values (${todoId}, ${memberId}, 'written first')`
      const change = world.sql`update app.users set privacy = 'private' where id = ${memberId}`.execute()
      await waitForLockWait(world.sql, { query: /update app\.users set privacy/ })
      await held`commit`
      await change
      expect(await copy('written first')).toBe('private')
      // The privacy change first: the comment waits for it, then reads the new value.
      await held`begin`
      await held`update app.users set privacy = 'protected' where id = ${memberId}`
      const written = world.sql`insert into app.comments (todo_id, user_id, body) values (${todoId}, ${memberId}, 'written second')`.execute()
      await waitForLockWait(world.sql, { query: /written second/ })
      await held`commit`
      await written
      expect(await copy('written second')).toBe('protected')
      expect(await copy('written first')).toBe('protected')
    } finally {
      await held`rollback`.catch(() => {})
      held.release()
    }
  })

  it('one statement changing several members\' privacy takes their comment locks before it locks their todos: no deadlock with a comment on one\'s todo by another', async () => {
    const [author, writer] = await Promise.all(['lockauthor', 'lockwriter'].map((name) => world.createUser(name)))
    const todo = await post(author!, 'Both of us change at once')
    const [a, w] = (await Promise.all([author!, writer!].map(async (u) => (await world.sql`select id from app.users where username = ${u.username}`)[0]!.id as string))) as [string, string]
    const todoId = (await world.sql`select app.from_public_id('todo', ${todo.id}) as id`)[0]!.id as string
    const held = await world.sql.reserve()
    try {
      // The writer's comment has taken its commenter's lock (as its BEFORE trigger does) and has
      // not yet counted itself on the author's todo when both members change privacy in one statement.
      await held`begin`
      await held`select pg_advisory_xact_lock_shared(app.comment_privacy_lock(${w}))`
      const change = world.sql`update app.users set privacy = 'private' where id in (${a}, ${w})`.execute()
      await waitForLockWait(world.sql, { query: /update app\.users set privacy = 'private' where id in/ })
      // Taking the locks after the author's todos were locked, the change deadlocked here.
      await held`insert into app.comments (todo_id, user_id, body) values (${todoId}, ${w}, 'counted while they change')`
      await held`commit`
      await change
      const [row] = await world.sql`select author_privacy from app.comments where body = 'counted while they change'`
      expect(row!.author_privacy).toBe('private')
    } finally {
      await held`rollback`.catch(() => {})
      held.release()
    }
  })

  it('a comment whose todo is hidden from its writer while it is written is refused (422) and rolled back, never a 201 without its body', async () => {
    const [author, writer] = await Promise.all(['hidingauthor', 'hidingwriter'].map((name) => world.createUser(name)))
    const todo = await post(author!, 'About to go private')
    const ids = await world.sql`select id from app.users where username in (${author!.username}, ${writer!.username})`
    const held = await world.sql.reserve()
    try {
      // Both go private in one transaction: the writer's comment waits for it (the writer's
      // privacy lock) after its checks passed, and renders once it committed: the todo is hidden.
      await held`begin`
      await held`update app.users set privacy = 'private' where id in ${held(ids.map((r) => r.id as string))}`
      const answer = comment(writer!, todo.id, 'just in time')
      await waitForLockWait(world.sql, { query: /api\.comment_create/ })
      await held`commit`
      const res = await answer
      expect(res.status, res.text).toBe(422)
      expect(res.body.error).toMatch(/no todo matches/)
      expect(await world.sql`select 1 from app.comments where body = 'just in time'`).toHaveLength(0)
    } finally {
      await held`rollback`.catch(() => {})
      held.release()
    }
  })

  it('DELETE is rate-limited too (429)', async () => {
    const dave = await world.createUser('dave')
    const todo = await post(alice, 'Many comments')
    const ids: string[] = []
    for (let i = 0; i < 31; i++) ids.push((await comment(dave, todo.id, `c${i}`)).body.id)
    for (const id of ids.slice(0, 30)) expect((await world.delete(`/v1/comments/${id}`, { auth: dave.api_key })).status).toBe(204)
    expect((await world.delete(`/v1/comments/${ids[30]}`, { auth: dave.api_key })).status).toBe(429)
  })
})

describe('reports', () => {
  it('201 Report for a todo, a comment and a user; visible to operators', async () => {
    const todo = await post(alice, 'Spam?')
    const c = (await comment(alice, todo.id, 'More spam')).body
    for (const [type, id] of [['Todo', todo.id], ['Comment', c.id], ['User', alice.id]]) {
      const res = await world.post('/v1/reports', { auth: bob.api_key, json: { reportable_type: type, reportable_id: id } })
      expect(res.status, type).toBe(201)
      expect(res.body).toEqual({ id: expect.stringMatching(/^rep_[0-9a-f]{32}$/), created_at: expect.any(String), reportable_type: type, reportable_id: id })
    }
    const { data } = await world.admin('reports')
    expect(data.slice(0, 3).map((r: { reportable_type: string; reporter: string }) => [r.reportable_type, r.reporter]))
      .toEqual([['User', 'bob'], ['Comment', 'bob'], ['Todo', 'bob']])
  })

  it('422 for an unknown type or target; 403 read-only', async () => {
    for (const json of [{ reportable_type: 'Project', reportable_id: alice.id }, { reportable_type: 'User', reportable_id: 'user_00000000000000000000000000000000' },
      { reportable_type: 'Todo', reportable_id: alice.id }, { reportable_type: 'Comment', reportable_id: 'comm_x' }, { reportable_type: 'User' }]) {
      const res = await world.post('/v1/reports', { auth: bob.api_key, json })
      expect(res.status, JSON.stringify(json)).toBe(422)
    }
    expect((await world.post('/v1/reports', { auth: bob.read_only_api_key, json: { reportable_type: 'User', reportable_id: alice.id } })).status).toBe(403)
  })
})

describe('following', () => {
  it('users: 204 idempotent; following, follows_you and followers_count exact', async () => {
    const erin = await world.createUser('erin')
    for (let i = 0; i < 2; i++) expect((await world.post('/v1/users/erin/follow', { auth: alice.api_key })).status).toBe(204)
    await Promise.all(Array.from({ length: 10 }, () => world.post(`/v1/users/${erin.id}/follow`, { auth: bob.api_key })))
    const seen = await world.get('/v1/users/erin', { auth: alice.api_key })
    expect(seen.body).toMatchObject({ following: true, follows_you: false, followers_count: 2 })
    expect((await world.get('/v1/users/alice', { auth: erin.api_key })).body).toMatchObject({ following: false, follows_you: true })
    for (let i = 0; i < 2; i++) expect((await world.delete('/v1/users/erin/follow', { auth: alice.api_key })).status).toBe(204)
    expect((await world.get('/v1/users/erin', { auth: alice.api_key })).body).toMatchObject({ following: false, followers_count: 1 })
  })

  it('users: 404 unknown, 422 yourself, 403 read-only', async () => {
    expect((await world.post('/v1/users/nobody/follow', { auth: alice.api_key })).status).toBe(404)
    expect((await world.delete('/v1/users/nobody/follow', { auth: alice.api_key })).status).toBe(404)
    expect((await world.post('/v1/users/me/follow', { auth: alice.api_key })).status).toBe(422)
    expect((await world.post('/v1/users/bob/follow', { auth: alice.read_only_api_key })).status).toBe(403)
  })

  it('projects: 204 idempotent with exact counters; 404 unknown or invisible', async () => {
    await world.admin('create-project', '--owner', 'bob', '--name', 'Hidden', '--slug', 'hidden', '--privacy', 'private')
    for (let i = 0; i < 2; i++) expect((await world.post('/v1/projects/rocket/follow', { auth: carol.api_key })).status).toBe(204)
    expect((await world.get('/v1/projects/rocket', { auth: carol.api_key })).body).toMatchObject({ following: true, followers_count: 1 })
    expect((await world.delete('/v1/projects/rocket/follow', { auth: carol.api_key })).status).toBe(204)
    expect((await world.get('/v1/projects/rocket', { auth: carol.api_key })).body).toMatchObject({ following: false, followers_count: 0 })
    expect((await world.post('/v1/projects/hidden/follow', { auth: carol.api_key })).status).toBe(404)
    expect((await world.post('/v1/projects/nope/follow', { auth: carol.api_key })).status).toBe(404)
    expect((await world.post('/v1/projects/rocket/follow', { auth: carol.read_only_api_key })).status).toBe(403)
  })
})

describe('mutes and the timeline', () => {
  let viewer: CreatedUser
  let friend: CreatedUser
  let noisy: CreatedUser
  let maker: CreatedUser
  let stranger: CreatedUser
  beforeAll(async () => {
    viewer = await world.createUser('viewer')
    friend = await world.createUser('friend')
    noisy = await world.createUser('noisy')
    maker = await world.createUser('maker')
    stranger = await world.createUser('stranger')
    await world.admin('create-project', '--owner', 'maker', '--name', 'Kiln', '--slug', 'kiln', '--hashtag', 'kiln')
    await post(viewer, 'V: my own')
    await post(friend, 'F: followed member')
    await post(noisy, 'N: followed but muted')
    await post(maker, 'M: in a followed #kiln')
    await post(maker, 'M: not in the project')
    await post(stranger, 'S: nobody follows')
    await world.post('/v1/users/friend/follow', { auth: viewer.api_key })
    await world.post('/v1/users/noisy/follow', { auth: viewer.api_key })
    await world.post('/v1/projects/kiln/follow', { auth: viewer.api_key })
  })

  it('GET /v1/timeline: own, followed members, followed projects, newest first', async () => {
    const res = await world.get('/v1/timeline', { auth: viewer.api_key })
    expect(res.status).toBe(200)
    expect(bodies(res)).toEqual(['M: in a followed #kiln', 'N: followed but muted', 'F: followed member', 'V: my own'])
    expect(res.body.total_count).toBe(4)
    expect(bodies(await world.get('/v1/timeline?query=followed&limit=1', { auth: viewer.api_key }))).toEqual(['M: in a followed #kiln'])
    expect((await world.get('/v1/timeline?since=nonsense', { auth: viewer.api_key })).status).toBe(400)
  })

  it('muting removes a member from the timeline, GET /v1/todos and comment lists; unmuting restores', async () => {
    const thread = await post(viewer, 'V: thread')
    await comment(noisy, thread.id, 'noise')
    await comment(friend, thread.id, 'signal')
    for (let i = 0; i < 2; i++) expect((await world.post('/v1/users/noisy/mute', { auth: viewer.api_key })).status).toBe(204)

    const timeline = await world.get('/v1/timeline?limit=100', { auth: viewer.api_key })
    expect(bodies(timeline)).not.toContain('N: followed but muted')
    expect(timeline.body.total_count).toBe(timeline.body.data.length)
    const everything = await world.get('/v1/todos?limit=100', { auth: viewer.api_key })
    expect(bodies(everything)).not.toContain('N: followed but muted')
    // total_count comes from counters when unfiltered: it must agree with what is listed.
    expect(everything.body.total_count).toBe(everything.body.data.length)
    const thread1 = await world.get(`/v1/todos/${thread.id}/comments`, { auth: viewer.api_key })
    expect(bodies(thread1)).toEqual(['signal'])
    expect(thread1.body.total_count).toBe(1)
    // Others still see everything; a direct request still works for the muter.
    expect(bodies(await world.get(`/v1/todos/${thread.id}/comments`, { auth: friend.api_key }))).toEqual(['noise', 'signal'])
    expect((await world.get('/v1/users/noisy/todos', { auth: viewer.api_key })).body.total_count).toBe(1)

    for (let i = 0; i < 2; i++) expect((await world.delete('/v1/users/noisy/mute', { auth: viewer.api_key })).status).toBe(204)
    expect(bodies(await world.get('/v1/timeline', { auth: viewer.api_key }))).toContain('N: followed but muted')
    expect(bodies(await world.get(`/v1/todos/${thread.id}/comments`, { auth: viewer.api_key }))).toEqual(['noise', 'signal'])
  })

  it('mute: 404 unknown, 422 yourself, 403 read-only', async () => {
    expect((await world.post('/v1/users/nobody/mute', { auth: viewer.api_key })).status).toBe(404)
    expect((await world.post('/v1/users/me/mute', { auth: viewer.api_key })).status).toBe(422)
    expect((await world.post('/v1/users/noisy/mute', { auth: viewer.read_only_api_key })).status).toBe(403)
  })
})
