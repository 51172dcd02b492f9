// Issue 28, item 2: a Project's `todos_count` (the project's todos the viewer may see, from
// counters kept on write: app.project_todo_counts) and `protected` (privacy == "protected"), in
// every rendering of a Project: GET /v1/projects/{id}, the project lists, a todo's `projects`,
// the operator's create-project and the webhook payload (no realtime payload carries a Project).
// Recounted for viewers of every kind (a maker, a protected maker's approved follower, an
// approved follower of a protected project, a stranger, a member who muted a maker, a private
// maker) after posts, deletions, privacy changes of members and projects, todos moved between
// projects, a mention by a non-maker and an account deletion: the recount is what the project's
// todo list shows that viewer, walked page by page.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'
import { asMember } from './support/sql.ts'

let world: TestWorld
const people: Record<string, CreatedUser> = {}
const projects: Record<string, string> = {}
const VIEWERS = ['olga', 'mark', 'pia', 'fan', 'stranger', 'muter'] as const

const post = async (who: string, body: string): Promise<string> => {
  const res = await world.post('/v1/todos', { auth: people[who]!.api_key, json: { body } })
  expect(res.status, res.text).toBe(201)
  return res.body.id
}

/** How many todos the project's list shows `viewer`, page by page, and its total_count; null when the project is 404 to them. */
async function listed(viewer: string, project: string): Promise<{ items: number; total: number } | null> {
  let items = 0
  let total = -1
  let cursor: string | null = null
  do {
    const res: { status: number; text: string; body: any } = await world.get(`/v1/projects/${project}/todos?limit=2${cursor ? `&starting_after=${cursor}` : ''}`, { auth: people[viewer]!.api_key })
    if (res.status === 404) return null
    expect(res.status, res.text).toBe(200)
    items += res.body.data.length
    total = res.body.total_count
    cursor = res.body.after
  } while (cursor)
  return { items, total }
}

/** Every stored project counter against a recount of the todos it counts: the rows that disagree. */
async function counterDrift(): Promise<number> {
  const [row] = await world.sql`
    select count(*)::int as n from app.project_todo_counts c
    full join (select project_id, user_id, count(*) as n from app.todos where project_id is not null group by 1, 2) r
      on r.project_id = c.project_id and r.user_id = c.user_id
    where coalesce(c.todos, 0) <> coalesce(r.n, 0)`
  return row!.n
}

/** For every viewer and project: todos_count equals what the project's list shows them, and protected is the privacy. */
async function expectCountsAsListed(when: string): Promise<Record<string, Record<string, number | null>>> {
  expect(await counterDrift(), `${when}: counters against a recount`).toBe(0)
  const seen: Record<string, Record<string, number | null>> = {}
  for (const viewer of VIEWERS) {
    if (!people[viewer]) continue
    seen[viewer] = {}
    for (const [slug, id] of Object.entries(projects)) {
      const cell = `${when}: ${viewer} sees ${slug}`
      const [one, list] = await Promise.all([world.get(`/v1/projects/${id}`, { auth: people[viewer]!.api_key }), listed(viewer, id)])
      if (one.status === 404) {
        expect(list, cell).toBeNull()
        seen[viewer]![slug] = null
        continue
      }
      expect(one.status, cell).toBe(200)
      expect(list, cell).not.toBeNull()
      expect(one.body.todos_count, cell).toBe(list!.items)
      expect(list!.total, `${cell} (total_count)`).toBe(list!.items)
      expect(one.body.protected, cell).toBe(one.body.privacy === 'protected')
      seen[viewer]![slug] = one.body.todos_count
    }
  }
  return seen
}

beforeAll(async () => {
  world = await startWorld()
  people.olga = await world.createUser('olga')
  people.mark = await world.createUser('mark', '--privacy', 'protected')
  people.pia = await world.createUser('pia', '--privacy', 'private')
  people.fan = await world.createUser('fan')
  people.stranger = await world.createUser('stranger')
  people.muter = await world.createUser('muter')
  const made = async (slug: string, privacy: string, makers: string, owner = 'olga') =>
    (projects[slug] = (await world.admin('create-project', '--owner', owner, '--name', slug, '--slug', slug, '--hashtag', slug, '--privacy', privacy, '--makers', makers)).id)
  await made('open', 'public', 'mark,pia')
  await made('closed', 'protected', 'mark')
  await made('hidden', 'private', 'pia')
  await made('other', 'public', 'olga', 'mark')
  // fan: an approved follower of mark (protected) and of the protected project.
  expect((await world.post('/v1/users/mark/follow', { auth: people.fan!.api_key })).status).toBe(204)
  expect((await world.post(`/v1/follow_requests/${people.fan!.id}/approve`, { auth: people.mark!.api_key })).status).toBe(204)
  expect((await world.post('/v1/projects/closed/follow', { auth: people.fan!.api_key })).status).toBe(204)
  expect((await world.post(`/v1/projects/closed/follow_requests/${people.fan!.id}/approve`, { auth: people.olga!.api_key })).status).toBe(204)
  // muter muted olga, the owner of most projects.
  expect((await world.post('/v1/users/olga/mute', { auth: people.muter!.api_key })).status).toBe(204)
})
afterAll(() => world.close())

describe('Project todos_count and protected (issue 28, item 2)', () => {
  const todos: Record<string, string> = {}

  it('create-project prints todos_count 0 and protected; the OpenAPI document has both', async () => {
    const made = await world.admin('create-project', '--owner', 'olga', '--name', 'Fresh', '--slug', 'fresh', '--privacy', 'protected')
    expect(made).toMatchObject({ todos_count: 0, protected: true, privacy: 'protected' })
    const doc = (await world.get('/v1/openapi.json')).body
    const project = doc.components.schemas.Project
    expect(project.properties.todos_count).toMatchObject({ type: 'integer' })
    expect(project.properties.protected).toMatchObject({ type: 'boolean' })
    expect(project.required).toEqual(expect.arrayContaining(['todos_count', 'protected']))
  })

  it('after posts by public, protected and private makers (and a mention by a non-maker, which is no project todo): each viewer’s count is what the list shows them', async () => {
    todos.olgaOpen = await post('olga', 'first #open')
    todos.olgaOpen2 = await post('olga', 'second #open')
    todos.olgaClosed = await post('olga', 'inside #closed')
    todos.olgaHidden = await post('olga', 'secret #hidden')
    todos.markOpen = await post('mark', 'protected maker #open')
    todos.markClosed = await post('mark', 'protected maker #closed')
    todos.piaOpen = await post('pia', 'private maker #open')
    todos.piaHidden = await post('pia', 'private maker #hidden')
    await post('stranger', 'I like #open') // not a maker: the todo belongs to no project
    const seen = await expectCountsAsListed('after posts')
    // The rule, spelled out for #open (public: olga public, mark protected, pia private).
    expect(seen.olga!.open).toBe(2)
    expect(seen.stranger!.open).toBe(2)
    expect(seen.muter!.open).toBe(2) // a project's list keeps muted members' todos, as a member's page does
    expect(seen.fan!.open).toBe(3) // olga's two and mark's, whom fan follows
    expect(seen.mark!.open).toBe(3) // olga's two and his own
    expect(seen.pia!.open).toBe(3) // olga's two and her own
    // #closed is protected: its todos are for makers and approved followers only.
    expect(seen.stranger!.closed).toBe(0)
    expect(seen.fan!.closed).toBe(2)
    expect(seen.mark!.closed).toBe(2)
    // #hidden is private: 404 to all but its makers.
    expect(seen.stranger!.hidden).toBeNull()
    expect(seen.pia!.hidden).toBe(2)
    expect(seen.olga!.hidden).toBe(1)
    // The counting helper acts for the requesting member only, and names no project they may not see.
    const [stranger] = await world.sql`select id from app.users where username = 'stranger'`
    const counted = await asMember(world.sql, { sub: stranger!.id }, (tx) => tx`
      select count(*)::int as n from app.visible_project_todos(array[app.from_public_id('proj', ${projects.hidden!}), app.from_public_id('proj', ${projects.open!})])`)
    expect(counted[0]!.n).toBe(1)
  })

  it('after deletions', async () => {
    expect((await world.delete(`/v1/todos/${todos.olgaOpen2}`, { auth: people.olga!.api_key })).status).toBe(204)
    expect((await world.delete(`/v1/todos/${todos.markClosed}`, { auth: people.mark!.api_key })).status).toBe(204)
    const seen = await expectCountsAsListed('after deletions')
    expect(seen.stranger!.open).toBe(1)
    expect(seen.fan!.closed).toBe(1)
  })

  it('after members change privacy, and projects change privacy', async () => {
    await world.sql`update app.users set privacy = 'public' where username = 'mark'`
    await world.sql`update app.users set privacy = 'protected' where username = 'pia'`
    let seen = await expectCountsAsListed('after mark turned public and pia protected')
    expect(seen.stranger!.open).toBe(2)
    await world.sql`update app.users set privacy = 'private' where username = 'olga'`
    seen = await expectCountsAsListed('after olga turned private')
    expect(seen.stranger!.open).toBe(1)
    expect(seen.olga!.open).toBe(2)
    await world.sql`update app.users set privacy = 'public' where username = 'olga'`
    await world.sql`update app.projects set privacy = 'public' where slug = 'closed'`
    seen = await expectCountsAsListed('after #closed turned public')
    expect(seen.stranger!.closed).toBe(1)
    await world.sql`update app.projects set privacy = 'protected' where slug = 'closed'`
    seen = await expectCountsAsListed('after #closed turned protected again')
    expect(seen.stranger!.closed).toBe(0)
  })

  it('after todos move between projects (an edit of the body) and out of any', async () => {
    const moved = await world.patch(`/v1/todos/${todos.olgaOpen}`, { auth: people.olga!.api_key, json: { body: 'first, now #other' } })
    expect(moved.status, moved.text).toBe(200)
    expect(moved.body.projects.map((p: { id: string }) => p.id)).toEqual([projects.other])
    let seen = await expectCountsAsListed('after a todo moved from #open to #other')
    expect(seen.stranger!.other).toBe(1)
    expect((await world.patch(`/v1/todos/${todos.markOpen}`, { auth: people.mark!.api_key, json: { body: 'no project any more' } })).status).toBe(200)
    seen = await expectCountsAsListed('after a todo left #open')
    expect(seen.stranger!.open).toBe(0)
    expect((await world.patch(`/v1/todos/${todos.markOpen}`, { auth: people.mark!.api_key, json: { body: 'back in #open' } })).status).toBe(200)
    await expectCountsAsListed('after it came back')
  })

  it('after a maker’s account is deleted (their todos cascade) and a project goes with its only maker', async () => {
    expect((await world.delete('/v1/account', { auth: people.pia!.api_key })).status).toBe(204)
    await world.admin('approve-deletion', '--user', 'pia')
    delete people.pia
    // mark owns #other with olga; a project of his own, with a todo of olga's from when she made it too.
    const solo = (await world.admin('create-project', '--owner', 'mark', '--name', 'solo', '--slug', 'solo', '--hashtag', 'solo', '--makers', 'olga')).id
    projects.solo = solo
    await post('olga', 'helped on #solo')
    await world.sql`delete from app.project_makers where project_id = app.from_public_id('proj', ${solo}) and user_id = app.from_public_id('user', ${people.olga!.id})`
    await expectCountsAsListed('after pia’s account was deleted')
    await world.sql`delete from app.projects where slug = 'solo'`
    delete projects.solo
    await expectCountsAsListed('after #solo was deleted (its todos left it)')
  })

  it('every rendering carries the same todos_count and protected: the project lists, a todo’s projects, the webhook payload', async () => {
    const viewer = people.fan!
    const single = (await world.get('/v1/projects/closed', { auth: viewer.api_key })).body
    const inList = (await world.get('/v1/projects?limit=100', { auth: viewer.api_key })).body.data.find((p: { id: string }) => p.id === projects.closed)
    const ofOlga = (await world.get('/v1/users/olga/projects?limit=100', { auth: viewer.api_key })).body.data.find((p: { id: string }) => p.id === projects.closed)
    expect(inList).toMatchObject({ todos_count: single.todos_count, protected: true })
    expect(ofOlga).toMatchObject({ todos_count: single.todos_count, protected: true })
    const todo = (await world.get(`/v1/todos/${todos.olgaClosed}`, { auth: viewer.api_key })).body
    expect(todo.projects).toEqual([expect.objectContaining({ id: projects.closed, todos_count: single.todos_count, protected: true })])

    // The webhook payload: the Todo as its owner sees it, rendered in the post's transaction.
    const hook = await world.post('/v1/webhooks/subscriptions', { auth: people.olga!.api_key, json: { url: 'https://hooks.example.com/olga', event_type: 'new_todo' } })
    expect(hook.status).toBe(201)
    const id = await post('olga', 'for the hook #closed')
    const [event] = await world.sql`select payload from app.webhook_events where todo_id = app.from_public_id('todo', ${id})`
    const asOwner = (await world.get('/v1/projects/closed', { auth: people.olga!.api_key })).body
    expect(event!.payload.data.projects).toEqual([expect.objectContaining({ id: projects.closed, todos_count: asOwner.todos_count, protected: true })])
    await expectCountsAsListed('after the hook’s todo')
  })
})
