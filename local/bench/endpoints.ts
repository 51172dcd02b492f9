// The endpoints the benchmark drives, each as the HTTP request a client sends and the exact
// api.* call its handler makes for it (same function, same arguments): the direct-SQL run and
// PostGraphile run that call, so all three do the same database work. bench.ts checks this
// before measuring: the three answers of every read endpoint must be equal.
//
// To add an endpoint: one entry below. `calls` returns what one connection sends, cycled in
// order; writes that must not repeat (one reaction per member and todo) give every
// connection its own targets through `prepare`, and remove what they created in `cleanup`.
import type { Sql } from 'postgres'
import type { Access } from '../../functions/lib/db.ts'
import { type TodoFilterQuery, todoFilters } from '../../functions/lib/filters.ts'
import type { Fixture, ListFilters } from './seed-data.ts'

export interface Call {
  /** Arguments of the api function, as the handler passes them. */
  args: unknown[]
  method: 'GET' | 'POST' | 'DELETE'
  /** Path and query string. */
  path: string
  /** JSON body. */
  body?: unknown
  /** Writes: the index in fixture.writers of the member who sends it (else the endpoint's `as`). */
  writer?: number
  /** Reads: the index in fixture.readers of the member who sends it (bench.ts sets it per connection). */
  reader?: number
}

export interface CallContext {
  fixture: Fixture
  /** This connection's number, 0 … connections-1. */
  client: number
  connections: number
  /** What `prepare` returned. */
  prepared: string[]
  /** Todos per page that lists ask for (the subset asks for one more, to keep has_more's todo). */
  page?: number
}

export interface Endpoint {
  name: string
  fn: string
  access: Access
  /** The member whose key the requests carry. */
  as: 'reader' | 'writer'
  /** Success status of the HTTP endpoint. */
  status: number
  /** A read endpoint: measured at both data sizes (scale) and held to the read targets. */
  read: boolean
  calls(ctx: CallContext): Call[]
  /** Targets for writes, e.g. todos the writer has not reacted to; `count` is a suggestion. */
  prepare?(sql: Sql, fixture: Fixture, count: number): Promise<string[]>
  /** Removes what the endpoint created since `since` (as the superuser, triggers included). */
  cleanup?(sql: Sql, fixture: Fixture, since: Date): Promise<void>
  /** Its requests use up their targets (deletions): `prepare` runs again before every run. */
  consumes?: boolean
  /** A list asked with filters (issue 26): held to the single-threaded goal at 10M too. */
  filtered?: boolean
}

export const PAGE = 25
/** The uuid of a public id (todo_…, user_…): its hex digits, grouped as a uuid is. */
export const uuidOf = (publicId: string) => publicId.replace(/^[a-z]+_/, '').replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5')

/** Targets per connection for writes that cannot repeat; more than a run at ~3000/s needs. */
export const WRITE_TARGETS_PER_CONNECTION = 1500

/**
 * The writers (indexes in fixture.writers) connection `client` sends as, in turn: each
 * connection its own share, so every writer makes about (requests of a run) / writers writes per
 * run, far below every rate limit (docs/rate-limits.md). Fixtures older than the writers: the writer.
 */
export function writersOf(fixture: Fixture, client: number, connections: number): number[] {
  const count = fixture.writers?.length ?? 0
  if (count === 0) return [-1]
  if (count <= connections) return [client % count]
  const mine: number[] = []
  for (let i = client; i < count; i += connections) mine.push(i)
  return mine
}

/** The uuids of every member a write run sends as. */
export function writerIds(fixture: Fixture): string[] {
  return (fixture.writers?.length ? fixture.writers : [fixture.writer]).map((w) => uuidOf(w.id))
}

/** Removes what the write runs made since `since` (as the superuser: triggers run), and the writers' rate-limit counters, so every run starts alike. */
async function removeWrites(sql: Sql, fixture: Fixture, table: 'todos' | 'reactions', since: Date): Promise<void> {
  const ids = writerIds(fixture)
  // A write a target's server still finishes (its client gone at the end of the run) can
  // deadlock with this delete on the totals it also updates: the delete runs again.
  for (let attempt = 1; ; attempt++) {
    try {
      if (table === 'todos') await sql`delete from app.todos where user_id = any (${ids}::uuid[]) and created_at >= ${since}`
      else await sql`delete from app.reactions where user_id = any (${ids}::uuid[]) and created_at >= ${since}`
      break
    } catch (err) {
      if ((err as { code?: string }).code !== '40P01' || attempt === 5) throw err
    }
  }
  await sql`delete from app.rate_limit_counters where user_id = any (${ids}::uuid[])`
}

/**
 * The lists of issue 26, each asked with every filter of FILTERS: everything visible, the
 * timeline and a member's own list (the readers', as `GET /v1/users/me/todos` is).
 */
const LISTS = [
  { path: '/v1/todos', fn: 'api.todos_list', lead: [] as unknown[] },
  { path: '/v1/timeline', fn: 'api.timeline', lead: [] as unknown[] },
  { path: '/v1/users/me/todos', fn: 'api.user_todos', lead: ['me'] as unknown[] },
]

/** The filters (values from fixture.lists, see ListFilters), named for what they ask. */
export const FILTERS: { label: string; query: (f: ListFilters) => TodoFilterQuery }[] = [
  { label: 'since=1970', query: (f) => ({ since: f.since_all }) },
  { label: 'until=<a year ago>', query: (f) => ({ until: f.until }) },
  { label: 'query=<common prefix>', query: (f) => ({ query: f.prefix }) },
  { label: 'query=-<rare word>', query: (f) => ({ query: `-${f.negated}` }) },
  { label: 'since=<30 days ago>&query=<common prefix>', query: (f) => ({ since: f.since_recent, query: f.prefix }) },
]

function listFiltersOf(fixture: Fixture): ListFilters {
  if (!fixture.lists) throw new Error('the fixture has no list filters (older than FIXTURE_FORMAT 5): the bench picks them again when it opens the data set')
  return fixture.lists
}

/** One filtered list: the request, and the handler's arguments made by the handler's own todoFilters. */
function filteredList(list: (typeof LISTS)[number], filter: (typeof FILTERS)[number]): Endpoint {
  return {
    name: `GET ${list.path}?${filter.label}`,
    fn: list.fn,
    access: 'read',
    as: 'reader',
    status: 200,
    read: true,
    filtered: true,
    calls: ({ fixture, page = PAGE }) => {
      const query = filter.query(listFiltersOf(fixture))
      const search = new URLSearchParams(Object.entries(query) as [string, string][]).toString()
      return [{ method: 'GET', path: `${list.path}?${search}`, args: [...list.lead, todoFilters(query), page, null, false] }]
    },
  }
}

/** The filtered lists as endpoints, list by list. */
export const FILTERED_LISTS: Endpoint[] = LISTS.flatMap((list) => FILTERS.map((filter) => filteredList(list, filter)))

/**
 * Deletions each writer makes at most in one run: 80 × 500 writers is 40,000 targets, more than a
 * run at the database's limit (about 1,500 a second) uses. The `todo_delete` limit (30 per 10
 * minutes, docs/rate-limits.md) is lifted on the bench's database (local/bench.ts, openBench).
 */
const DELETES_PER_WRITER = 80

export const ENDPOINTS: Endpoint[] = [
  {
    name: 'GET /v1/users/me/todos?expand=reactions',
    fn: 'api.user_todos',
    access: 'read',
    as: 'reader',
    status: 200,
    read: true,
    calls: ({ page = PAGE }) => [{ method: 'GET', path: '/v1/users/me/todos?expand=reactions', args: ['me', {}, page, null, true] }],
  },
  {
    name: 'GET /v1/todos/{id}',
    fn: 'api.todo_get',
    access: 'read',
    as: 'reader',
    status: 200,
    read: true,
    calls: ({ fixture }) => [{ method: 'GET', path: `/v1/todos/${fixture.todo.id}`, args: [fixture.todo.id, false] }],
  },
  {
    name: 'GET /v1/projects/{id}/todos?query=…',
    fn: 'api.project_todos',
    access: 'read',
    as: 'reader',
    status: 200,
    read: true,
    calls: ({ fixture, page = PAGE }) => [{
      method: 'GET',
      path: `/v1/projects/${fixture.project.id}/todos?query=${encodeURIComponent(fixture.project.query)}`,
      args: [fixture.project.id, { query: fixture.project.query }, page, null, false],
    }],
  },
  {
    name: 'GET /v1/timeline',
    fn: 'api.timeline',
    access: 'read',
    as: 'reader',
    status: 200,
    read: true,
    calls: ({ page = PAGE }) => [{ method: 'GET', path: '/v1/timeline', args: [{}, page, null, false] }],
  },
  {
    name: 'GET /v1/todos',
    fn: 'api.todos_list',
    access: 'read',
    as: 'reader',
    status: 200,
    read: true,
    calls: ({ page = PAGE }) => [{ method: 'GET', path: '/v1/todos', args: [{}, page, null, false] }],
  },
  ...FILTERED_LISTS,
  {
    name: 'POST /v1/todos',
    fn: 'api.todo_create',
    access: 'write',
    as: 'writer',
    status: 201,
    read: false,
    calls: ({ fixture, client, connections }) => {
      // A real #hashtag and @mention, so posting parses and stores mentions as it does live.
      const body = `Benchmarked the write path #${fixture.mention.hashtag} with @${fixture.mention.username}`
      return writersOf(fixture, client, connections).map((writer) =>
        ({ method: 'POST' as const, path: '/v1/todos', body: { body }, args: [body, []], writer }))
    },
    cleanup: (sql, fixture, since) => removeWrites(sql, fixture, 'todos', since),
  },
  {
    name: 'DELETE /v1/todos/{id}',
    fn: 'api.todo_delete',
    access: 'write',
    as: 'writer',
    status: 204,
    read: false,
    consumes: true,
    // Before every run, each writer gets new todos of its own to delete, made as the superuser
    // with every trigger (counts, totals, streaks), as POST /v1/todos makes them: a deletion
    // undoes what posting did. At most DELETES_PER_WRITER each, so none reaches its limit.
    prepare: async (sql, fixture, count) => {
      const writers = writerIds(fixture)
      const per = Math.max(1, Math.min(DELETES_PER_WRITER, Math.ceil(count / writers.length)))
      const rows = await sql<{ user_id: string; id: string }[]>`
        insert into app.todos (user_id, body)
        select w.id, 'Made by the benchmark to be deleted ' || n
        from unnest(${writers}::uuid[]) as w(id) cross join generate_series(1, ${per}) n
        returning user_id::text, 'todo_' || replace(id::text, '-', '') as id`
      const index = new Map(writers.map((id, k) => [id, k]))
      return rows.map((r) => `${index.get(r.user_id)}:${r.id}`)
    },
    calls: ({ fixture, client, connections, prepared }) => {
      // This connection's writers' targets, the writers taking turns.
      const mine = writersOf(fixture, client, connections).map((w) => Math.max(w, 0))
      const byWriter = new Map<number, string[]>(mine.map((w) => [w, []]))
      for (const entry of prepared) {
        const [writer, id] = entry.split(':') as [string, string]
        byWriter.get(Number(writer))?.push(id)
      }
      const calls: Call[] = []
      for (let n = 0, more = true; more; n++) {
        more = false
        for (const w of mine) {
          const id = byWriter.get(w)![n]
          if (id === undefined) continue
          more = true
          calls.push({ method: 'DELETE', path: `/v1/todos/${id}`, args: [id], writer: w })
        }
      }
      return calls
    },
    cleanup: (sql, fixture, since) => removeWrites(sql, fixture, 'todos', since),
  },
  {
    name: 'POST /v1/reactions',
    fn: 'api.reaction_create',
    access: 'write',
    as: 'writer',
    status: 201,
    read: false,
    // Every request likes a different recent public todo that no writer likes yet: a repeated
    // like would only read. The writers take turns, so none comes near its rate limit.
    prepare: async (sql, fixture, count) => {
      const rows = await sql<{ id: string }[]>`
        select 'todo_' || replace(t.id::text, '-', '') as id
        from app.todos t join app.users u on u.id = t.user_id
        where u.privacy = 'public'
          and not exists (select 1 from app.reactions r where r.todo_id = t.id and r.user_id = any (${writerIds(fixture)}::uuid[]))
        order by t.created_at desc
        limit ${count}`
      return rows.map((r) => r.id)
    },
    calls: ({ fixture, client, connections, prepared }) => {
      const mine = prepared.filter((_, i) => i % connections === client)
      const writers = writersOf(fixture, client, connections)
      return mine.map((todoId, n) => ({
        method: 'POST' as const,
        path: '/v1/reactions',
        body: { reactable_type: 'Todo', reactable_id: todoId },
        args: ['Todo', todoId],
        writer: writers[n % writers.length]!,
      }))
    },
    cleanup: (sql, fixture, since) => removeWrites(sql, fixture, 'reactions', since),
  },
]
