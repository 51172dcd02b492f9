// The privacy matrix: for each privacy level of a member and of a project, what the owner, a
// follower and a stranger see on every endpoint that renders a todo or a comment. RLS decides;
// these tests prove no endpoint leaks around it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'

type Level = 'public' | 'protected' | 'private'
type Role = 'owner' | 'follower' | 'stranger'

let world: TestWorld
const levels: Level[] = ['public', 'protected', 'private']
const authors = {} as Record<Level, CreatedUser>
const todos = {} as Record<Level, string>
const people = {} as Record<'follower' | 'stranger', CreatedUser>
const tokens = {} as Record<string, string>

const sees = (level: Level, role: Role) => level === 'public' || role === 'owner' || (level === 'protected' && role === 'follower')

beforeAll(async () => {
  world = await startWorld()
  people.follower = await world.createUser('follower')
  people.stranger = await world.createUser('stranger')
  for (const level of levels) {
    authors[level] = await world.createUser(`${level}_author`, '--privacy', level)
    await world.post(`/v1/users/${level}_author/follow`, { auth: people.follower.api_key })
    // A protected member's follower is one they approved (issue 13).
    if (level === 'protected') await world.post('/v1/follow_requests/follower/approve', { auth: authors[level].api_key })
    todos[level] = (await world.post('/v1/todos', { auth: authors[level].api_key, json: { body: `secretword from ${level}` } })).body.id
    await world.post('/v1/comments', { auth: authors[level].api_key, json: { commentable_type: 'Todo', commentable_id: todos[level], body: `own comment ${level}` } })
  }
  for (const user of [...levels.map((l) => `${l}_author`), 'follower', 'stranger']) {
    tokens[user] = await world.token(user, 'public write', { firstParty: true })
  }
})
afterAll(() => world.close())

function viewerOf(level: Level, role: Role): { user: CreatedUser; name: string } {
  if (role === 'owner') return { user: authors[level], name: `${level}_author` }
  return { user: people[role], name: role }
}

describe('member privacy', () => {
  for (const level of levels) {
    for (const role of ['owner', 'follower', 'stranger'] as Role[]) {
      const visible = sees(level, role)
      it(`${level} member's todo, ${role}: ${visible ? 'visible' : 'hidden'} everywhere`, async () => {
        const { user, name } = viewerOf(level, role)
        const auth = user.api_key
        const body = `secretword from ${level}`
        const has = (res: { body: { data: { body: string }[] } }) => res.body.data.some((t) => t.body === body)

        expect((await world.get(`/v1/todos/${todos[level]}`, { auth })).status).toBe(visible ? 200 : 404)
        expect(has(await world.get('/v1/todos?limit=100', { auth }))).toBe(visible)
        expect(has(await world.get(`/v1/users/${level}_author/todos`, { auth }))).toBe(visible)
        expect(has(await world.get('/v1/timeline?limit=100', { auth }))).toBe(visible && role !== 'stranger')
        expect(has(await world.get('/v1/search/todos?query=secretword&limit=100', { auth: tokens[name] }))).toBe(visible)

        const comments = await world.get(`/v1/todos/${todos[level]}/comments`, { auth })
        expect(comments.status).toBe(visible ? 200 : 404)
        if (visible) expect(comments.body.data.map((c: { body: string }) => c.body)).toContain(`own comment ${level}`)

        const react = await world.post('/v1/reactions', { auth, json: { reactable_type: 'Todo', reactable_id: todos[level] } })
        expect(react.status).toBe(visible ? 201 : 422)
        const commentOn = await world.post('/v1/comments', { auth, json: { commentable_type: 'Todo', commentable_id: todos[level], body: 'hi' } })
        expect(commentOn.status).toBe(visible ? 201 : 422)
        const report = await world.post('/v1/reports', { auth, json: { reportable_type: 'Todo', reportable_id: todos[level] } })
        expect(report.status).toBe(visible ? 201 : 422)
      })
    }
  }

  it('a private member\'s comment on a public todo: the todo\'s owner sees it, nobody else does', async () => {
    const host = authors.public
    const todo = (await world.post('/v1/todos', { auth: host.api_key, json: { body: 'open thread' } })).body.id
    await world.post('/v1/comments', { auth: authors.private.api_key, json: { commentable_type: 'Todo', commentable_id: todo, body: 'whisper' } })
    await world.post('/v1/comments', { auth: authors.protected.api_key, json: { commentable_type: 'Todo', commentable_id: todo, body: 'murmur' } })
    const view = async (user: CreatedUser) => (await world.get(`/v1/todos/${todo}/comments`, { auth: user.api_key })).body.data.map((c: { body: string }) => c.body)
    expect(await view(host)).toEqual(['whisper', 'murmur'])
    // The private commenter sees their own comment, but not a protected member they do not follow.
    expect(await view(authors.private)).toEqual(['whisper'])
    expect(await view(people.follower)).toEqual(['murmur'])
    expect(await view(people.stranger)).toEqual([])
  })
})

describe('project privacy', () => {
  const projectTodos = {} as Record<Level, string>
  let makerKey = ''
  beforeAll(async () => {
    await world.createUser('pmaker')
    for (const level of levels) {
      await world.admin('create-project', '--owner', 'pmaker', '--name', `P ${level}`, '--slug', `p-${level}`, '--hashtag', `p${level}`, '--privacy', level)
      const follow = await world.post(`/v1/projects/p-${level}/follow`, { auth: people.follower.api_key })
      // Public and protected projects can be followed by anyone who knows them; private ones cannot.
      expect(follow.status).toBe(level === 'private' ? 404 : 204)
    }
    // Following a protected project is a request a maker approves (issue 13).
    expect((await world.post('/v1/projects/p-protected/follow_requests/follower/approve', { auth: (await world.admin('create-key', '--user', 'pmaker')).api_key })).status).toBe(204)
    // Even a follower of a private project (made a follower before it went private) does not see it.
    await world.sql`insert into app.project_follows (user_id, project_id)
      select u.id, p.id from app.users u, app.projects p where u.username = 'follower' and p.slug = 'p-private' on conflict do nothing`
    const maker = await world.admin('create-key', '--user', 'pmaker')
    for (const level of levels) {
      projectTodos[level] = (await world.post('/v1/todos', { auth: maker.api_key, json: { body: `working on #p${level}` } })).body.id
    }
    makerKey = maker.api_key
  })

  const seesProject = (level: Level, role: 'maker' | 'follower' | 'stranger') => level === 'public' || role === 'maker' || (level === 'protected' && role === 'follower')
  // Issue 13: a protected project's profile (and so its mentions) is visible to everyone, like a
  // protected member's; its todos only to makers and approved followers.
  const seesProfile = (level: Level, role: 'maker' | 'follower' | 'stranger') => level !== 'private' || role === 'maker'

  for (const level of levels) {
    for (const role of ['maker', 'follower', 'stranger'] as const) {
      const visible = seesProject(level, role)
      const profile = seesProfile(level, role)
      it(`${level} project, ${role}: ${visible ? 'visible' : 'hidden'} (project, its todos, mentions)`, async () => {
        const auth = role === 'maker' ? makerKey : people[role].api_key
        expect((await world.get(`/v1/projects/p-${level}`, { auth })).status).toBe(profile ? 200 : 404)
        const list = await world.get(`/v1/projects/p-${level}/todos`, { auth })
        expect(list.status).toBe(profile ? 200 : 404)
        if (profile) expect(list.body.data.length > 0).toBe(visible)
        // The maker is public, so the todo itself is visible; only the project is hidden in it.
        const todo = await world.get(`/v1/todos/${projectTodos[level]}`, { auth })
        expect(todo.status).toBe(200)
        expect(todo.body.mentioned_projects.map((p: { slug: string }) => p.slug)).toEqual(profile ? [`p-${level}`] : [])
        expect(todo.body.projects.map((p: { slug: string }) => p.slug)).toEqual(profile ? [`p-${level}`] : [])
        const listed = (await world.get('/v1/projects?limit=100', { auth })).body.data.map((p: { slug: string }) => p.slug)
        expect(listed.includes(`p-${level}`)).toBe(profile)
      })
    }
  }
})
