// Issue 13: `protected` means approved followers. Following a protected member or project is a
// request its owner (or any maker) approves or declines; nothing is shown until approved.
import { readFileSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ProjectSchema, UserSchema } from '../functions/lib/schemas.ts'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'
import { asMember } from './support/sql.ts'

let world: TestWorld

const post = async (user: CreatedUser, body: string) => (await world.post('/v1/todos', { auth: user.api_key, json: { body } })).body
const bodies = (res: { body: { data: { body: string }[] } }) => res.body.data.map((t) => t.body)
const usernames = (res: { body: { data: { username: string }[] } }) => res.body.data.map((u) => u.username)
const profile = async (viewer: CreatedUser, who: string) => (await world.get(`/v1/users/${who}`, { auth: viewer.api_key })).body
const project = async (viewer: CreatedUser, ref: string) => (await world.get(`/v1/projects/${ref}`, { auth: viewer.api_key })).body
const uuidOf = (user: CreatedUser) => user.id.replace(/^user_/, '')

/** Every member's and project's followers_count equals its approved follow rows. */
async function countersAreExact() {
  const [row] = await world.sql`
    select (select count(*) from app.users u where u.followers_count <> (select count(*) from app.user_follows f where f.followee_id = u.id))::int
         + (select count(*) from app.projects p where p.followers_count <> (select count(*) from app.project_follows f where f.project_id = p.id))::int as wrong`
  expect(row!.wrong).toBe(0)
}

/** What `viewer` sees of `author`'s todo by every route that shows todos. */
async function seesTodo(viewer: CreatedUser, author: string, todo: { id: string; body: string }) {
  const direct = await world.get(`/v1/todos/${todo.id}`, { auth: viewer.api_key })
  const theirs = await world.get(`/v1/users/${author}/todos`, { auth: viewer.api_key })
  const all = await world.get('/v1/todos?limit=100', { auth: viewer.api_key })
  const timeline = await world.get('/v1/timeline?limit=100', { auth: viewer.api_key })
  // Unfiltered totals come from counters: they must agree with what is listed.
  expect(all.body.total_count).toBe(all.body.data.length)
  expect(timeline.body.total_count).toBe(timeline.body.data.length)
  expect(theirs.body.total_count).toBe(theirs.body.data.length)
  const seen = [direct.status === 200, bodies(theirs).includes(todo.body), bodies(all).includes(todo.body), bodies(timeline).includes(todo.body)]
  expect(new Set(seen).size, `consistent: ${seen}`).toBe(1)
  return seen[0]!
}

beforeAll(async () => {
  world = await startWorld()
})
afterAll(() => world.close())

describe('1. following a protected member is a request', () => {
  let owner: CreatedUser
  let stranger: CreatedUser
  let secret: { id: string; body: string }
  beforeAll(async () => {
    owner = await world.createUser('prot_owner', '--privacy', 'protected')
    stranger = await world.createUser('prot_stranger')
    secret = await post(owner, 'a protected secret')
  })

  it('a stranger\'s POST follow is 204 and idempotent, reveals nothing, and shows as follow_requested', async () => {
    expect(await seesTodo(stranger, 'prot_owner', secret)).toBe(false)
    for (let i = 0; i < 3; i++) expect((await world.post('/v1/users/prot_owner/follow', { auth: stranger.api_key })).status).toBe(204)
    expect(await seesTodo(stranger, 'prot_owner', secret)).toBe(false)
    const seen = UserSchema.strict().parse(await profile(stranger, 'prot_owner'))
    expect(seen).toMatchObject({ following: false, follow_requested: true, follows_you: false, followers_count: 0 })
    // The owner sees the requester as not following them.
    expect(await profile(owner, 'prot_stranger')).toMatchObject({ follows_you: false, following: false, follow_requested: false })
    const [row] = await world.sql`select count(*)::int as n from app.user_follow_requests r join app.users u on u.id = r.requester_id where u.username = 'prot_stranger'`
    expect(row!.n).toBe(1)
    await countersAreExact()
  })

  it('follow_requested is false for yourself, for public members, and for others than the requester', async () => {
    const pub = await world.createUser('plain_public')
    expect((await world.post('/v1/users/plain_public/follow', { auth: stranger.api_key })).status).toBe(204)
    expect(await profile(stranger, 'plain_public')).toMatchObject({ following: true, follow_requested: false, followers_count: 1 })
    expect(await profile(stranger, 'me')).toMatchObject({ follow_requested: false })
    expect(await profile(pub, 'prot_owner')).toMatchObject({ following: false, follow_requested: false })
    expect(await profile(owner, 'me')).toMatchObject({ follow_requested: false })
  })

  it('DELETE …/follow withdraws a pending request (204, idempotent)', async () => {
    for (let i = 0; i < 2; i++) expect((await world.delete('/v1/users/prot_owner/follow', { auth: stranger.api_key })).status).toBe(204)
    expect(await profile(stranger, 'prot_owner')).toMatchObject({ following: false, follow_requested: false })
    expect(usernames(await world.get('/v1/follow_requests', { auth: owner.api_key }))).toEqual([])
  })

  it('a private member cannot be followed (403) and nothing is stored', async () => {
    await world.createUser('priv_member', '--privacy', 'private')
    const res = await world.post('/v1/users/priv_member/follow', { auth: stranger.api_key })
    expect(res.status).toBe(403)
    expect(res.body).toEqual({ error: 'priv_member is private: nobody can follow them.' })
    expect(await profile(stranger, 'priv_member')).toMatchObject({ following: false, follow_requested: false, followers_count: 0 })
    expect((await world.delete('/v1/users/priv_member/follow', { auth: stranger.api_key })).status).toBe(204)
  })

  it('a request counts toward user_follow, a repeated one does not (429 past the limit)', async () => {
    await world.sql`update app.rate_limits set max_events = 2 where action = 'user_follow'`
    try {
      const counter = await world.createUser('counter')
      const targets = await Promise.all(['lim_a', 'lim_b', 'lim_c'].map((u) => world.createUser(u, '--privacy', 'protected')))
      expect((await world.post('/v1/users/lim_a/follow', { auth: counter.api_key })).status).toBe(204)
      expect((await world.post('/v1/users/lim_a/follow', { auth: counter.api_key })).status).toBe(204)
      expect((await world.post('/v1/users/lim_b/follow', { auth: counter.api_key })).status).toBe(204)
      const limited = await world.post('/v1/users/lim_c/follow', { auth: counter.api_key })
      expect(limited.status).toBe(429)
      expect(await profile(counter, 'lim_c')).toMatchObject({ follow_requested: false })
      expect(targets).toHaveLength(3)
    } finally {
      await world.sql`update app.rate_limits set max_events = 200 where action = 'user_follow'`
    }
  })
})

describe('2. approving and declining', () => {
  let owner: CreatedUser
  let first: CreatedUser
  let second: CreatedUser
  let third: CreatedUser
  let secret: { id: string; body: string }
  beforeAll(async () => {
    owner = await world.createUser('approver', '--privacy', 'protected')
    first = await world.createUser('req_first')
    second = await world.createUser('req_second')
    third = await world.createUser('req_third')
    secret = await post(owner, 'for approved eyes')
    for (const who of [first, second, third]) await world.post('/v1/users/approver/follow', { auth: who.api_key })
  })

  it('GET /v1/follow_requests: PaginatedUsers, oldest first, with limit and starting_after', async () => {
    const all = await world.get('/v1/follow_requests', { auth: owner.api_key })
    expect(all.status).toBe(200)
    expect(usernames(all)).toEqual(['req_first', 'req_second', 'req_third'])
    expect(all.body).toMatchObject({ has_more: false, total_count: 3, after: null })
    for (const user of all.body.data) UserSchema.strict().parse(user)
    expect(all.body.data[0]).toMatchObject({ following: false, follows_you: false, follow_requested: false })
    const page = await world.get('/v1/follow_requests?limit=2', { auth: owner.api_key })
    expect(usernames(page)).toEqual(['req_first', 'req_second'])
    expect(page.body).toMatchObject({ has_more: true, total_count: 3, after: second.id })
    expect(usernames(await world.get(`/v1/follow_requests?starting_after=${page.body.after}`, { auth: owner.api_key }))).toEqual(['req_third'])
    expect((await world.get(`/v1/follow_requests?starting_after=${owner.id}`, { auth: owner.api_key })).status).toBe(404)
    // Your own requests are not requests to you.
    expect((await world.get('/v1/follow_requests', { auth: first.api_key })).body).toMatchObject({ data: [], total_count: 0 })
  })

  it('a requester cannot approve their own request (404), nor can anyone but the member asked', async () => {
    expect((await world.post('/v1/follow_requests/approver/approve', { auth: first.api_key })).status).toBe(404)
    expect((await world.post('/v1/follow_requests/req_first/approve', { auth: first.api_key })).status).toBe(404)
    expect((await world.post('/v1/follow_requests/me/approve', { auth: first.api_key })).status).toBe(404)
    expect((await world.post('/v1/follow_requests/req_first/approve', { auth: second.api_key })).status).toBe(404)
    expect((await world.delete('/v1/follow_requests/req_first', { auth: second.api_key })).status).toBe(204)
    expect(await profile(first, 'approver')).toMatchObject({ following: false, follow_requested: true })
    expect(await seesTodo(first, 'approver', secret)).toBe(false)
  })

  it('POST …/approve: 204, the requester follows and sees the todos; counters follow; again is 404', async () => {
    const res = await world.post('/v1/follow_requests/req_first/approve', { auth: owner.api_key })
    expect(res.status).toBe(204)
    expect(res.text).toBe('')
    expect(await profile(first, 'approver')).toMatchObject({ following: true, follow_requested: false, followers_count: 1 })
    expect(await profile(owner, 'req_first')).toMatchObject({ follows_you: true })
    expect(await seesTodo(first, 'approver', secret)).toBe(true)
    const again = await world.post('/v1/follow_requests/req_first/approve', { auth: owner.api_key })
    expect(again.status).toBe(404)
    expect(again.body).toEqual({ error: 'req_first has not asked to follow you.' })
    expect((await world.post('/v1/follow_requests/nobody_at_all/approve', { auth: owner.api_key })).status).toBe(404)
    // Following again is a no-op; the approved follow stays.
    expect((await world.post('/v1/users/approver/follow', { auth: first.api_key })).status).toBe(204)
    expect(await profile(first, 'approver')).toMatchObject({ following: true, follow_requested: false })
    await countersAreExact()
  })

  it('DELETE /v1/follow_requests/{user_id} declines: 204, idempotent, the requester sees nothing', async () => {
    for (let i = 0; i < 2; i++) expect((await world.delete('/v1/follow_requests/req_second', { auth: owner.api_key })).status).toBe(204)
    expect(await profile(second, 'approver')).toMatchObject({ following: false, follow_requested: false })
    expect(await seesTodo(second, 'approver', secret)).toBe(false)
    expect(usernames(await world.get('/v1/follow_requests', { auth: owner.api_key }))).toEqual(['req_third'])
    expect((await world.delete('/v1/follow_requests/nobody_at_all', { auth: owner.api_key })).status).toBe(404)
    // Asking again after a decline is a new request.
    expect((await world.post('/v1/users/approver/follow', { auth: second.api_key })).status).toBe(204)
    expect(usernames(await world.get('/v1/follow_requests', { auth: owner.api_key }))).toEqual(['req_third', 'req_second'])
  })

  it('concurrent approvals of one request: exactly one 204, one follow, one count', async () => {
    const results = await Promise.all(Array.from({ length: 8 }, () => world.post('/v1/follow_requests/req_third/approve', { auth: owner.api_key })))
    expect(results.map((r) => r.status).sort()).toEqual([204, 404, 404, 404, 404, 404, 404, 404])
    expect(await profile(third, 'approver')).toMatchObject({ following: true, followers_count: 2 })
    await countersAreExact()
  })

  it('an approval racing a withdrawal never leaves a follow nobody asked for', async () => {
    for (let i = 0; i < 12; i++) {
      const racer = await world.createUser(`racer${i}`)
      await world.post('/v1/users/approver/follow', { auth: racer.api_key })
      const [approve, withdraw] = await Promise.all([
        world.post(`/v1/follow_requests/racer${i}/approve`, { auth: owner.api_key }),
        world.delete('/v1/users/approver/follow', { auth: racer.api_key }),
      ])
      expect([204, 404]).toContain(approve.status)
      expect(withdraw.status).toBe(204)
      // Whichever came first, the withdrawal (which also unfollows) leaves nothing behind.
      const [rows] = await world.sql`
        select (select count(*) from app.user_follows f where f.follower_id = ${uuidOf(racer)})::int as follows,
               (select count(*) from app.user_follow_requests r where r.requester_id = ${uuidOf(racer)})::int as requests`
      expect(rows).toEqual({ follows: 0, requests: 0 })
    }
    await countersAreExact()
  })
})

describe('3. protected projects', () => {
  let owner: CreatedUser
  let maker: CreatedUser
  let fan: CreatedUser
  let outsider: CreatedUser
  let made: { id: string; body: string }
  beforeAll(async () => {
    owner = await world.createUser('p_owner')
    maker = await world.createUser('p_maker')
    fan = await world.createUser('p_fan')
    outsider = await world.createUser('p_outsider')
    await world.admin('create-project', '--owner', 'p_owner', '--name', 'Vault', '--slug', 'vault', '--hashtag', 'vault', '--privacy', 'protected', '--makers', 'p_maker')
    await world.admin('create-project', '--owner', 'p_owner', '--name', 'Cellar', '--slug', 'cellar', '--hashtag', 'cellar', '--privacy', 'private')
    made = await post(owner, 'shipped the #vault door')
  })

  const projectTodos = async (viewer: CreatedUser) => {
    const res = await world.get('/v1/projects/vault/todos', { auth: viewer.api_key })
    expect(res.status).toBe(200)
    expect(res.body.total_count).toBe(res.body.data.length)
    return bodies(res)
  }
  const inTimeline = async (viewer: CreatedUser) => bodies(await world.get('/v1/timeline?limit=100', { auth: viewer.api_key })).includes(made.body)

  it('the profile is visible to everyone, its todos only to makers', async () => {
    const seen = ProjectSchema.strict().parse(await project(fan, 'vault'))
    expect(seen).toMatchObject({ slug: 'vault', privacy: 'protected', following: false, follow_requested: false, followers_count: 0 })
    expect(await projectTodos(fan)).toEqual([])
    expect(await projectTodos(maker)).toEqual([made.body])
    // Private projects stay invisible to non-makers.
    for (const path of ['/v1/projects/cellar', '/v1/projects/cellar/todos', '/v1/projects/cellar/follow_requests']) {
      expect((await world.get(path, { auth: fan.api_key })).status, path).toBe(404)
    }
    expect((await world.post('/v1/projects/cellar/follow', { auth: fan.api_key })).status).toBe(404)
  })

  it('following it makes a request: 204 idempotent, follow_requested, nothing revealed', async () => {
    for (let i = 0; i < 2; i++) expect((await world.post('/v1/projects/vault/follow', { auth: fan.api_key })).status).toBe(204)
    expect(await project(fan, 'vault')).toMatchObject({ following: false, follow_requested: true, followers_count: 0 })
    expect(await project(outsider, 'vault')).toMatchObject({ follow_requested: false })
    expect(await projectTodos(fan)).toEqual([])
    expect(await inTimeline(fan)).toBe(false)
    await world.post('/v1/projects/vault/follow', { auth: outsider.api_key })
  })

  it('non-makers cannot list or answer its requests (403), the requester included', async () => {
    for (const who of [fan, outsider]) {
      const list = await world.get('/v1/projects/vault/follow_requests', { auth: who.api_key })
      expect(list.status).toBe(403)
      expect(list.body).toEqual({ error: 'Only the project\'s makers can answer its follow requests.' })
      expect((await world.post('/v1/projects/vault/follow_requests/p_fan/approve', { auth: who.api_key })).status).toBe(403)
      expect((await world.delete('/v1/projects/vault/follow_requests/p_outsider', { auth: who.api_key })).status).toBe(403)
    }
    expect(await project(fan, 'vault')).toMatchObject({ following: false, follow_requested: true })
    expect(await project(outsider, 'vault')).toMatchObject({ following: false, follow_requested: true })
  })

  it('any maker lists, approves (the follower sees its todos) and declines', async () => {
    const list = await world.get('/v1/projects/vault/follow_requests', { auth: maker.api_key })
    expect(list.status).toBe(200)
    expect(usernames(list)).toEqual(['p_fan', 'p_outsider'])
    expect(list.body).toMatchObject({ total_count: 2, has_more: false, after: null })
    expect(usernames(await world.get(`/v1/projects/vault/follow_requests?limit=1&starting_after=${fan.id}`, { auth: owner.api_key }))).toEqual(['p_outsider'])

    expect((await world.post('/v1/projects/vault/follow_requests/p_fan/approve', { auth: maker.api_key })).status).toBe(204)
    expect(await project(fan, 'vault')).toMatchObject({ following: true, follow_requested: false, followers_count: 1 })
    expect(await projectTodos(fan)).toEqual([made.body])
    expect(await inTimeline(fan)).toBe(true)
    expect((await world.post('/v1/projects/vault/follow_requests/p_fan/approve', { auth: owner.api_key })).status).toBe(404)

    for (let i = 0; i < 2; i++) expect((await world.delete('/v1/projects/vault/follow_requests/p_outsider', { auth: owner.api_key })).status).toBe(204)
    expect(await project(outsider, 'vault')).toMatchObject({ following: false, follow_requested: false, followers_count: 1 })
    expect(await projectTodos(outsider)).toEqual([])
    expect((await world.get('/v1/projects/vault/follow_requests', { auth: owner.api_key })).body).toMatchObject({ data: [], total_count: 0 })
    expect((await world.get('/v1/projects/no-such-project/follow_requests', { auth: owner.api_key })).status).toBe(404)
    await countersAreExact()
  })

  it('a project\'s requests leave out requesters the answering maker muted; a race with a withdrawal leaves nothing', async () => {
    const noisy = await world.createUser('p_noisy')
    await world.post('/v1/projects/vault/follow', { auth: noisy.api_key })
    await world.post('/v1/users/p_noisy/mute', { auth: maker.api_key })
    expect(usernames(await world.get('/v1/projects/vault/follow_requests', { auth: maker.api_key }))).toEqual([])
    expect(usernames(await world.get('/v1/projects/vault/follow_requests', { auth: owner.api_key }))).toEqual(['p_noisy'])
    const [approve, withdraw] = await Promise.all([
      world.post('/v1/projects/vault/follow_requests/p_noisy/approve', { auth: owner.api_key }),
      world.delete('/v1/projects/vault/follow', { auth: noisy.api_key }),
    ])
    expect([204, 404]).toContain(approve.status)
    expect(withdraw.status).toBe(204)
    expect(await project(noisy, 'vault')).toMatchObject({ following: false, follow_requested: false })
    await countersAreExact()
  })

  it('DELETE …/follow withdraws a pending project request; makers follow at once', async () => {
    await world.post('/v1/projects/vault/follow', { auth: outsider.api_key })
    expect((await world.delete('/v1/projects/vault/follow', { auth: outsider.api_key })).status).toBe(204)
    expect(await project(outsider, 'vault')).toMatchObject({ following: false, follow_requested: false })
    expect((await world.post('/v1/projects/vault/follow', { auth: maker.api_key })).status).toBe(204)
    expect(await project(maker, 'vault')).toMatchObject({ following: true, follow_requested: false, followers_count: 2 })
  })
})

describe('4. transitions', () => {
  it('followers a member has stay when they turn protected; pending requests are approved when they turn public', async () => {
    const member = await world.createUser('turner')
    const early = await world.createUser('early_fan')
    const late = await world.createUser('late_fan')
    const todo = await post(member, 'turner speaks')
    await world.post('/v1/users/turner/follow', { auth: early.api_key })
    await world.sql`update app.users set privacy = 'protected' where username = 'turner'`
    expect(await profile(early, 'turner')).toMatchObject({ following: true, followers_count: 1 })
    expect(await seesTodo(early, 'turner', todo)).toBe(true)

    await world.post('/v1/users/turner/follow', { auth: late.api_key })
    expect(await seesTodo(late, 'turner', todo)).toBe(false)
    expect(await profile(late, 'turner')).toMatchObject({ following: false, follow_requested: true, followers_count: 1 })

    await world.sql`update app.users set privacy = 'public' where username = 'turner'`
    expect(await profile(late, 'turner')).toMatchObject({ following: true, follow_requested: false, followers_count: 2 })
    expect(usernames(await world.get('/v1/follow_requests', { auth: member.api_key }))).toEqual([])
    expect(await seesTodo(late, 'turner', todo)).toBe(true)
    await countersAreExact()
  })

  it('turning private declines pending requests; a project turning public approves them', async () => {
    const member = await world.createUser('hider', '--privacy', 'protected')
    const asker = await world.createUser('asker')
    await world.post('/v1/users/hider/follow', { auth: asker.api_key })
    await world.sql`update app.users set privacy = 'private' where username = 'hider'`
    expect(await profile(asker, 'hider')).toMatchObject({ following: false, follow_requested: false })
    expect((await world.get('/v1/follow_requests', { auth: member.api_key })).body.total_count).toBe(0)

    await world.admin('create-project', '--owner', 'hider', '--name', 'Door', '--slug', 'door', '--privacy', 'protected')
    await world.post('/v1/projects/door/follow', { auth: asker.api_key })
    expect(await project(asker, 'door')).toMatchObject({ follow_requested: true, followers_count: 0 })
    await world.sql`update app.projects set privacy = 'public' where slug = 'door'`
    expect(await project(asker, 'door')).toMatchObject({ following: true, follow_requested: false, followers_count: 1 })
    await countersAreExact()
  })

  it('muting a requester declines their request; a muted member\'s new request stays out of the list', async () => {
    const member = await world.createUser('muter', '--privacy', 'protected')
    const pest = await world.createUser('pest')
    const polite = await world.createUser('polite')
    await world.post('/v1/users/muter/follow', { auth: pest.api_key })
    await world.post('/v1/users/muter/follow', { auth: polite.api_key })
    expect((await world.post('/v1/users/pest/mute', { auth: member.api_key })).status).toBe(204)
    expect(await profile(pest, 'muter')).toMatchObject({ following: false, follow_requested: false })
    expect(usernames(await world.get('/v1/follow_requests', { auth: member.api_key }))).toEqual(['polite'])

    await world.post('/v1/users/muter/follow', { auth: pest.api_key })
    const list = await world.get('/v1/follow_requests', { auth: member.api_key })
    expect(usernames(list)).toEqual(['polite'])
    expect(list.body.total_count).toBe(1)
    // Muting again (a no-op mute) declines the new one too.
    await world.post('/v1/users/pest/mute', { auth: member.api_key })
    expect(await profile(pest, 'muter')).toMatchObject({ follow_requested: false })
  })
})

describe('credentials: every write here needs a read-write key or the write scope', () => {
  it('read-only keys and tokens without write get 403 and change nothing', async () => {
    const member = await world.createUser('guarded', '--privacy', 'protected')
    const asker = await world.createUser('guard_asker')
    await world.admin('create-project', '--owner', 'guarded', '--name', 'Guard', '--slug', 'guard', '--privacy', 'protected')
    await world.post('/v1/users/guarded/follow', { auth: asker.api_key })
    await world.post('/v1/projects/guard/follow', { auth: asker.api_key })
    const readers = {
      member: [member.read_only_api_key, await world.token('guarded', 'public notifications chat', { firstParty: true, chat: true })],
      asker: [asker.read_only_api_key, await world.token('guard_asker', 'public', { firstParty: true })],
    }
    const writes: [keyof typeof readers, string, string][] = [
      ['asker', 'POST', '/v1/users/guarded/follow'],
      ['asker', 'DELETE', '/v1/users/guarded/follow'],
      ['asker', 'POST', '/v1/projects/guard/follow'],
      ['asker', 'DELETE', '/v1/projects/guard/follow'],
      ['member', 'POST', '/v1/follow_requests/guard_asker/approve'],
      ['member', 'DELETE', '/v1/follow_requests/guard_asker'],
      ['member', 'POST', '/v1/projects/guard/follow_requests/guard_asker/approve'],
      ['member', 'DELETE', '/v1/projects/guard/follow_requests/guard_asker'],
    ]
    for (const [who, method, path] of writes) {
      for (const credential of readers[who]) {
        const res = await world.request(method, path, { auth: credential })
        expect(res.status, `${method} ${path}`).toBe(403)
      }
    }
    // Reads work with them.
    expect((await world.get('/v1/follow_requests', { auth: readers.member[0] })).status).toBe(200)
    expect((await world.get('/v1/projects/guard/follow_requests', { auth: readers.member[1] })).status).toBe(200)
    expect(await profile(asker, 'guarded')).toMatchObject({ following: false, follow_requested: true })
    expect(await project(asker, 'guard')).toMatchObject({ following: false, follow_requested: true })
  })
})

describe('row-level security: the last line of defence says the same', () => {
  let member: CreatedUser
  let open: CreatedUser
  let asker: CreatedUser
  let other: CreatedUser
  let projectId: string
  beforeAll(async () => {
    member = await world.createUser('rls_member', '--privacy', 'protected')
    open = await world.createUser('rls_open')
    asker = await world.createUser('rls_asker')
    other = await world.createUser('rls_other')
    const created = await world.admin('create-project', '--owner', 'rls_member', '--name', 'Moat', '--slug', 'moat', '--privacy', 'protected')
    projectId = created.id.replace(/^proj_/, '')
    await world.post('/v1/users/rls_member/follow', { auth: asker.api_key })
    await world.post('/v1/projects/moat/follow', { auth: asker.api_key })
  })

  const insertFollow = (as: CreatedUser, follower: CreatedUser, followee: CreatedUser) =>
    asMember(world.sql, { sub: uuidOf(as) }, (tx) => tx`insert into app.user_follows (follower_id, followee_id) values (${uuidOf(follower)}, ${uuidOf(followee)}) returning 1`)
  const insertProjectFollow = (as: CreatedUser, user: CreatedUser) =>
    asMember(world.sql, { sub: uuidOf(as) }, (tx) => tx`insert into app.project_follows (user_id, project_id) values (${uuidOf(user)}, ${projectId}) returning 1`)

  it('a member follows a protected member only by their approval: direct inserts are refused', async () => {
    await expect(insertFollow(asker, asker, member)).rejects.toMatchObject({ code: '42501' })
    await expect(insertFollow(other, other, member)).rejects.toMatchObject({ code: '42501' })
    // The followee lets in only who asked, and nobody lets themself in elsewhere.
    await expect(insertFollow(member, other, member)).rejects.toMatchObject({ code: '42501' })
    expect(await insertFollow(member, asker, member)).toHaveLength(1)
    await expect(insertFollow(open, asker, member)).rejects.toMatchObject({ code: '42501' })
    expect(await insertFollow(asker, asker, open)).toHaveLength(1)
    await expect(asMember(world.sql, { sub: uuidOf(member), can_write: false },
      (tx) => tx`insert into app.user_follows (follower_id, followee_id) values (${uuidOf(asker)}, ${uuidOf(member)})`)).rejects.toMatchObject({ code: '42501' })
  })

  it('requests: only in one\'s own name, only to protected members; visible to the two of them only', async () => {
    const ask = (as: CreatedUser, requester: CreatedUser, followee: CreatedUser) =>
      asMember(world.sql, { sub: uuidOf(as) }, (tx) => tx`insert into app.user_follow_requests (requester_id, followee_id) values (${uuidOf(requester)}, ${uuidOf(followee)}) returning 1`)
    await expect(ask(other, asker, member)).rejects.toMatchObject({ code: '42501' })
    await expect(ask(other, other, open)).rejects.toMatchObject({ code: '42501' })
    expect(await ask(other, other, member)).toHaveLength(1)
    const seen = (as: CreatedUser) => asMember(world.sql, { sub: uuidOf(as) }, (tx) => tx`select 1 from app.user_follow_requests where followee_id = ${uuidOf(member)}`)
    expect(await seen(member)).toHaveLength(1)
    expect(await seen(asker)).toHaveLength(1)
    expect(await seen(other)).toHaveLength(0)
    // Only the requester or the member asked can remove it.
    const removed = await asMember(world.sql, { sub: uuidOf(other) }, (tx) => tx`delete from app.user_follow_requests where followee_id = ${uuidOf(member)} returning 1`)
    expect(removed).toHaveLength(0)
  })

  it('project follows: a non-maker cannot let a requester in, nor follow a protected project directly', async () => {
    await expect(insertProjectFollow(asker, asker)).rejects.toMatchObject({ code: '42501' })
    await expect(insertProjectFollow(other, asker)).rejects.toMatchObject({ code: '42501' })
    await expect(insertProjectFollow(member, other)).rejects.toMatchObject({ code: '42501' })
    expect(await insertProjectFollow(member, asker)).toHaveLength(1)
    const seen = (as: CreatedUser) => asMember(world.sql, { sub: uuidOf(as) }, (tx) => tx`select 1 from app.project_follow_requests where project_id = ${projectId}`)
    expect(await seen(member)).toHaveLength(1)
    expect(await seen(asker)).toHaveLength(1)
    expect(await seen(other)).toHaveLength(0)
  })
})

describe('races with privacy changes', () => {
  it('a follow racing a turn to public never leaves a request behind, nor a follow to a member still protected', async () => {
    for (let i = 0; i < 8; i++) {
      const member = await world.createUser(`flip${i}`, '--privacy', 'protected')
      const fan = await world.createUser(`flip_fan${i}`)
      await Promise.all([
        world.post(`/v1/users/flip${i}/follow`, { auth: fan.api_key }),
        world.sql`update app.users set privacy = 'public' where id = ${uuidOf(member)}`,
      ])
      const [rows] = await world.sql`
        select (select count(*) from app.user_follows f where f.follower_id = ${uuidOf(fan)})::int as follows,
               (select count(*) from app.user_follow_requests r where r.requester_id = ${uuidOf(fan)})::int as requests`
      // Whichever came first, the member is public now and the fan follows them.
      expect(rows).toEqual({ follows: 1, requests: 0 })
    }
    await countersAreExact()
  })
})

describe('fixes from an attacker\'s review', () => {
  it('an approval racing repeated follows of the same requester never deadlocks (all 204)', async () => {
    const owner = await world.createUser('lockowner', '--privacy', 'protected')
    const asker = await world.createUser('lockasker')
    for (let round = 0; round < 12; round++) {
      expect((await world.post(`/v1/users/${owner.username}/follow`, { auth: asker.api_key })).status).toBe(204)
      const answers = await Promise.all([
        world.post(`/v1/follow_requests/${asker.username}/approve`, { auth: owner.api_key }),
        ...Array.from({ length: 3 }, () => world.post(`/v1/users/${owner.username}/follow`, { auth: asker.api_key })),
      ])
      expect(answers.map((a) => a.status), JSON.stringify(answers.map((a) => a.body))).toEqual([204, 204, 204, 204])
      expect((await profile(asker, owner.username)).following).toBe(true)
      expect((await world.delete(`/v1/users/${owner.username}/follow`, { auth: asker.api_key })).status).toBe(204)
    }
    await countersAreExact()
  })

  it('follows made before approvals existed become requests (protected) or go (private); public follows and makers stay', async () => {
    const guarded = await world.createUser('legacyguarded', '--privacy', 'protected')
    const hidden = await world.createUser('legacyhidden', '--privacy', 'private')
    const open = await world.createUser('legacyopen')
    const stranger = await world.createUser('legacystranger')
    const maker = await world.createUser('legacymaker')
    const vault = await world.admin('create-project', '--owner', guarded.username, '--name', 'Legacy vault', '--slug', 'legacy-vault', '--privacy', 'protected', '--makers', maker.username)
    // Rows as the old API wrote them: follows without any approval.
    await world.sql`insert into app.user_follows (follower_id, followee_id) values
      (${uuidOf(stranger)}, ${uuidOf(guarded)}), (${uuidOf(stranger)}, ${uuidOf(hidden)}), (${uuidOf(stranger)}, ${uuidOf(open)})`
    await world.sql`insert into app.project_follows (user_id, project_id)
      select u.id, app.resolve_project('legacy-vault') from app.users u where u.id in (${uuidOf(stranger)}, ${uuidOf(maker)})`
    const migration = readFileSync(new URL('../supabase/migrations/20261124175530_answer_follow_requests_in_lock_order.sql', import.meta.url), 'utf8')
    await world.sql.unsafe(migration.slice(migration.indexOf('-- Rows, not schema')))

    expect((await profile(stranger, guarded.username)).following).toBe(false)
    expect((await profile(stranger, guarded.username)).follow_requested).toBe(true)
    expect((await profile(stranger, hidden.username)).following).toBe(false)
    expect((await profile(stranger, hidden.username)).follow_requested).toBe(false)
    expect((await profile(stranger, open.username)).following).toBe(true)
    expect(usernames(await world.get('/v1/follow_requests', { auth: guarded.api_key }))).toEqual([stranger.username])
    expect(await project(stranger, vault.id)).toMatchObject({ following: false, follow_requested: true })
    expect(await project(maker, vault.id)).toMatchObject({ following: true, follow_requested: false })
    await countersAreExact()
  })
})
