// Issue 26: every list's items and total_count, recounted. total_count of the todo lists is no
// longer a count of every visible match: date ranges of GET /v1/todos sum sealed hours
// (app.todo_hours) and count the partial hours at their ends, the timeline is a merge of its
// sources' own newest todos with totals per source, and full-text totals count up to a cap.
// Here every list is walked page by page over HTTP and compared with the same list computed
// straight from the tables (the visibility rule spelled out in SQL), before and after what
// moves todos between totals: privacy changes, follows and unfollows, mutes, deletions of todos
// in sealed hours, backdated todos, a time-zone change.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type CreatedUser, type HttpResult, type TestWorld, startWorld } from './support/app.ts'

/** The cap of full-text totals (app.todo_page's query_count_cap). */
const QUERY_COUNT_CAP = 100

let world: TestWorld
const members: Record<string, CreatedUser> = {}
let projectId = ''
const HOUR = 3_600_000
const now = Date.now()

const uuidOf = (publicId: string) => publicId.replace(/^[a-z]+_/, '').replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5')
const todoId = (uuid: string) => `todo_${uuid.replace(/-/g, '')}`

/** Every item of a list, page by page (100 a page), with the total_count of its first page. */
async function walk(path: string, auth: string, limit = 100): Promise<{ ids: string[]; total: number }> {
  const ids: string[] = []
  let total = -1
  let after: string | null = null
  for (let pages = 0; pages < 200; pages++) {
    const sep = path.includes('?') ? '&' : '?'
    const res: HttpResult = await world.get(`${path}${sep}limit=${limit}${after ? `&starting_after=${after}` : ''}`, { auth })
    expect(res.status, `${path}: ${res.text}`).toBe(200)
    if (total < 0) total = res.body.total_count
    ids.push(...res.body.data.map((t: { id: string }) => t.id))
    if (!res.body.has_more) return { ids, total }
    after = res.body.after
  }
  throw new Error(`${path}: more than 200 pages`)
}

interface Filter {
  label: string
  query: string
  /** The same filter as SQL over `t` ($1 the viewer). */
  where: string
  fullText: boolean
}

/** The filters every list is checked with; instants are ISO, and one date is local to the viewer. */
function filters(): Filter[] {
  const since = new Date(now - 30 * HOUR + 17 * 60_000).toISOString()
  const until = new Date(now - 5 * HOUR - 23 * 60_000).toISOString()
  const day = new Date(now - 24 * HOUR).toISOString().slice(0, 10)
  return [
    { label: 'none', query: '', where: 'true', fullText: false },
    { label: 'since', query: `since=${since}`, where: `t.created_at >= '${since}'`, fullText: false },
    { label: 'until', query: `until=${until}`, where: `t.created_at <= '${until}'`, fullText: false },
    // Ranges that hold some members' whole history (app.timeline_todos_between takes those from todos_count).
    { label: 'since 1970', query: 'since=1970-01-01T00:00:00Z', where: `t.created_at >= '1970-01-01T00:00:00Z'`, fullText: false },
    { label: 'since 1970 until 2100', query: 'since=1970-01-01T00:00:00Z&until=2100-01-01T00:00:00Z', where: `t.created_at >= '1970-01-01T00:00:00Z' and t.created_at <= '2100-01-01T00:00:00Z'`, fullText: false },
    { label: 'since+until', query: `since=${since}&until=${until}`, where: `t.created_at >= '${since}' and t.created_at <= '${until}'`, fullText: false },
    {
      label: 'since a local day', query: `since=${day}`, fullText: false,
      where: `t.created_at >= ('${day}'::timestamp at time zone (select u.time_zone from app.users u where u.id = $1))`,
    },
    { label: 'query', query: 'query=shipped', where: `t.search @@ app.todo_search_query('shipped')`, fullText: true },
    { label: 'query -', query: `query=${encodeURIComponent('-bug')}`, where: `t.search @@ app.todo_search_query('-bug')`, fullText: true },
    { label: 'query+since', query: `query=shipped&since=${since}`, where: `t.search @@ app.todo_search_query('shipped') and t.created_at >= '${since}'`, fullText: true },
  ]
}

/** Who may see whose todos: app.can_see_member_content, spelled out. */
const VISIBLE = `(t.user_id = $1 or t.author_privacy = 'public'
  or (t.author_privacy = 'protected' and exists (select 1 from app.user_follows f where f.follower_id = $1 and f.followee_id = t.user_id)))`
const NOT_MUTED = 'not exists (select 1 from app.mutes m where m.user_id = $1 and m.muted_user_id = t.user_id)'

/** A list straight from the tables, newest first. */
async function expected(list: 'all' | 'timeline' | 'user' | 'project', viewer: string, scope: string | null, filter: Filter): Promise<string[]> {
  const scopeWhere = {
    all: NOT_MUTED,
    timeline: `${NOT_MUTED} and (t.user_id = $1 or t.user_id in (select f.followee_id from app.user_follows f where f.follower_id = $1)
                 or t.project_id in (select pf.project_id from app.project_follows pf where pf.user_id = $1))`,
    user: 't.user_id = $2',
    project: 't.project_id = $2',
  }[list]
  // ($2 is typed even where the list has no scope: PostgreSQL must know every parameter's type.)
  const rows = await world.sql.unsafe(
    `select t.id from app.todos t where ${VISIBLE} and ${scopeWhere} and ${filter.where} and ($2::uuid is not null or true)
     order by t.created_at desc, t.id desc`,
    [viewer, scope] as never[])
  return rows.map((r) => todoId(r.id as string))
}

async function seal() {
  await world.sql`select app.seal_todo_hours()`
}

/** Every list of every member in `viewers`, with every filter, against the tables; `limit` a page. */
async function checkEveryList(viewers: string[], { limit = 100, only = (_: Filter): boolean => true } = {}) {
  for (const name of viewers) {
    const viewer = members[name]!
    const lists: [string, 'all' | 'timeline' | 'user' | 'project', string | null][] = [
      ['/v1/todos', 'all', null],
      ['/v1/timeline', 'timeline', null],
      ['/v1/users/me/todos', 'user', uuidOf(viewer.id)],
      [`/v1/users/bob/todos`, 'user', uuidOf(members.bob!.id)],
      [`/v1/users/carol/todos`, 'user', uuidOf(members.carol!.id)],
      [`/v1/projects/${projectId}/todos`, 'project', uuidOf(projectId)],
    ]
    for (const [path, list, scope] of lists) {
      for (const filter of filters().filter(only)) {
        const want = await expected(list, uuidOf(viewer.id), scope, filter)
        // A member's list is all of their todos or none: a member one may not see is 403/404.
        const walked = await walk(filter.query ? `${path}?${filter.query}` : path, viewer.api_key, limit).catch((err) => {
          if (list === 'user' && want.length === 0) return { ids: [], total: 0 }
          throw err
        })
        const label = `${name} ${path} ${filter.label}`
        expect(walked.ids, label).toEqual(want)
        expect(walked.total, label).toBe(filter.fullText ? Math.min(want.length, QUERY_COUNT_CAP) : want.length)
      }
    }
  }
}

/** app.todo_hours equals a recount of the sealed hours. */
async function hoursDrift(): Promise<unknown[]> {
  return [...await world.sql`
    select coalesce(h.privacy, r.privacy) as privacy, coalesce(h.hour, r.hour) as hour, h.todos as stored, r.n as counted
    from app.todo_hours h
    full join (select t.author_privacy as privacy, date_trunc('hour', t.created_at, 'UTC') as hour, count(*) as n
                 from app.todos t where t.created_at < (select s.until from app.todo_hours_sealed s) group by 1, 2) r
      on r.privacy = h.privacy and r.hour = h.hour
    where coalesce(h.todos, 0) <> coalesce(r.n, 0)`]
}

async function post(name: string, body: string, hoursAgo: number) {
  await world.admin('create-todo', '--user', name, '--body', body, '--created-at', new Date(now - hoursAgo * HOUR).toISOString())
}

beforeAll(async () => {
  world = await startWorld()
  // alice reads; bob public (followed); carol protected (alice an approved follower); dave
  // private; erin public (muted by alice); frank protected (not followed); gina public, posts in
  // alice's followed project; zed in another zone.
  for (const [name, privacy] of [['alice', 'public'], ['bob', 'public'], ['carol', 'protected'], ['dave', 'private'], ['erin', 'public'], ['frank', 'protected'], ['gina', 'public']] as const) {
    members[name] = await world.createUser(name, '--privacy', privacy, '--time-zone', name === 'alice' ? 'Asia/Kathmandu' : 'UTC')
  }
  const project = await world.admin<{ id: string }>('create-project', '--owner', 'gina', '--name', 'Rocket', '--hashtag', 'rocket', '--makers', 'frank')
  projectId = project.id
  const a = members.alice!.api_key
  expect((await world.post(`/v1/users/${members.bob!.id}/follow`, { auth: a })).status).toBe(204)
  expect((await world.post(`/v1/users/${members.carol!.id}/follow`, { auth: a })).status).toBe(204)
  expect((await world.post(`/v1/follow_requests/${members.alice!.id}/approve`, { auth: members.carol!.api_key })).status).toBeLessThan(300)
  expect((await world.post(`/v1/users/${members.erin!.id}/mute`, { auth: a })).status).toBe(204)
  expect((await world.post(`/v1/projects/${projectId}/follow`, { auth: a })).status).toBe(204)
  // History over the last three days, some of it in the hour now, bodies with and without the words searched.
  const words = ['shipped the #rocket launch', 'fixed a bug', 'shipped docs', 'wrote tests', 'shipped a bug fix #rocket']
  let n = 0
  for (const name of ['alice', 'bob', 'carol', 'dave', 'erin', 'frank', 'gina']) {
    for (const hoursAgo of [0, 0.2, 1.5, 4.7, 5.4, 9, 23.9, 24.1, 29.9, 30.3, 47, 71]) {
      await post(name, words[n++ % words.length]!, hoursAgo)
    }
  }
  await seal()
})
afterAll(() => world.close())

describe('every list and its total_count equal a recount from the tables', () => {
  it('after history is sealed into hours', async () => {
    const [sealed] = await world.sql<{ until: Date }[]>`select until from app.todo_hours_sealed`
    expect(sealed!.until.getTime()).toBeGreaterThan(now - 2 * HOUR)
    expect(await hoursDrift()).toEqual([])
    await checkEveryList(['alice', 'bob', 'frank'])
  })

  it('page by page, five at a time: each cursor meets since and until (until is folded into the cursor\'s bound)', async () => {
    await checkEveryList(['alice', 'frank'], { limit: 5, only: (filter) => !filter.fullText })
  })

  it('after privacy changes, follows and unfollows, mutes, deletions in sealed hours, backdated todos and a time-zone change', async () => {
    const a = members.alice!.api_key
    // Old todos deleted (their hours are sealed), and backdated ones posted into sealed hours.
    const old = await world.sql<{ id: string; user: string }[]>`
      select t.id, u.username as user from app.todos t join app.users u on u.id = t.user_id
      where t.created_at < now() - interval '6 hours' order by t.created_at limit 6`
    for (const todo of old) {
      const member = members[todo.user]!
      expect((await world.delete(`/v1/todos/${todoId(todo.id)}`, { auth: member.api_key })).status).toBe(204)
    }
    await post('bob', 'shipped late, backdated', 28)
    await post('frank', 'shipped #rocket backdated', 50)
    // Privacy (set on the website: here as the operator would) moves a member's sealed hours to the other totals.
    await world.sql`update app.users set privacy = 'public' where username = 'dave'`
    await world.sql`update app.users set privacy = 'protected' where username = 'bob'`
    await world.sql`update app.users set privacy = 'public' where username = 'frank'`
    // Follows and mutes change what alice sees.
    expect((await world.delete(`/v1/users/${members.carol!.id}/follow`, { auth: a })).status).toBe(204)
    expect((await world.delete(`/v1/users/${members.erin!.id}/mute`, { auth: a })).status).toBe(204)
    expect((await world.post(`/v1/users/${members.gina!.id}/mute`, { auth: a })).status).toBe(204)
    // A local day is read in the viewer's zone.
    expect((await world.patch('/v1/users/me', { auth: a, json: { time_zone: 'Pacific/Kiritimati' } })).status).toBe(200)
    expect(await hoursDrift()).toEqual([])
    await checkEveryList(['alice', 'bob', 'frank'])
  })

  it('sealing again later changes nothing, and a deleted account leaves its hours', async () => {
    await seal()
    // Every row of an account goes in one cascade (approve-deletion's work; here without the request).
    await world.sql`delete from app.users where username = 'erin'`
    delete members.erin
    expect(await hoursDrift()).toEqual([])
    await checkEveryList(['alice'])
  })
})

describe('the timeline with a full-text query', () => {
  // It reads candidates by index (a page, then windows of time sized by the share that
  // matched), then their words: a page may need several windows, the last read is everything
  // left, and a cursor may fall anywhere in a window.
  it('pages through windows of candidates exactly, for rare, common and negated words', async () => {
    const alice = members.alice!
    // 300 more todos of bob (followed) in sealed hours, three at each instant (so a window's
    // edge or a cursor falls between todos of the same time): one in 50 holds the rare word.
    await world.sql`
      insert into app.todos (user_id, body, created_at)
      select ${uuidOf(members.bob!.id)}::uuid,
             case when n % 50 = 0 then 'polished the zeppelin' else 'shipped chore ' || n end,
             date_trunc('second', now()) - interval '2 hours' - (n / 3) * interval '7 minutes'
      from generate_series(1, 300) n`
    await seal()
    for (const [query, limit] of [['zeppelin', 1], ['zeppelin', 4], ['shipped', 7], ['-zeppelin', 25], ['chor', 100]] as const) {
      const filter: Filter = { label: query, query: `query=${encodeURIComponent(query)}`, where: `t.search @@ app.todo_search_query('${query}')`, fullText: true }
      const want = await expected('timeline', uuidOf(alice.id), null, filter)
      const walked = await walk(`/v1/timeline?${filter.query}`, alice.api_key, limit)
      expect(walked.ids, `${query} by ${limit}`).toEqual(want)
      expect(walked.total, `${query} by ${limit}`).toBe(Math.min(want.length, QUERY_COUNT_CAP))
    }
  })
})
