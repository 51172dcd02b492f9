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
import type { Fixture } from './seed-data.ts'

export interface Call {
  /** Arguments of the api function, as the handler passes them. */
  args: unknown[]
  method: 'GET' | 'POST'
  /** Path and query string. */
  path: string
  /** JSON body. */
  body?: unknown
}

export interface CallContext {
  fixture: Fixture
  /** This connection's number, 0 … connections-1. */
  client: number
  connections: number
  /** What `prepare` returned. */
  prepared: string[]
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
}

const PAGE = 25
const uuidOf = (publicId: string) => publicId.replace(/^[a-z]+_/, '').replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5')

/** Targets per connection for writes that cannot repeat; more than a run at ~3000/s needs. */
export const WRITE_TARGETS_PER_CONNECTION = 1500

export const ENDPOINTS: Endpoint[] = [
  {
    name: 'GET /v1/users/me/todos?expand=reactions',
    fn: 'api.user_todos',
    access: 'read',
    as: 'reader',
    status: 200,
    read: true,
    calls: () => [{ method: 'GET', path: '/v1/users/me/todos?expand=reactions', args: ['me', {}, PAGE, null, true] }],
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
    calls: ({ fixture }) => [{
      method: 'GET',
      path: `/v1/projects/${fixture.project.id}/todos?query=${encodeURIComponent(fixture.project.query)}`,
      args: [fixture.project.id, { query: fixture.project.query }, PAGE, null, false],
    }],
  },
  {
    name: 'GET /v1/timeline',
    fn: 'api.timeline',
    access: 'read',
    as: 'reader',
    status: 200,
    read: true,
    calls: () => [{ method: 'GET', path: '/v1/timeline', args: [{}, PAGE, null, false] }],
  },
  {
    name: 'GET /v1/todos',
    fn: 'api.todos_list',
    access: 'read',
    as: 'reader',
    status: 200,
    read: true,
    calls: () => [{ method: 'GET', path: '/v1/todos', args: [{}, PAGE, null, false] }],
  },
  {
    name: 'POST /v1/todos',
    fn: 'api.todo_create',
    access: 'write',
    as: 'writer',
    status: 201,
    read: false,
    calls: ({ fixture }) => {
      // A real #hashtag and @mention, so posting parses and stores mentions as it does live.
      const body = `Benchmarked the write path #${fixture.mention.hashtag} with @${fixture.mention.username}`
      return [{ method: 'POST', path: '/v1/todos', body: { body }, args: [body, []] }]
    },
    cleanup: async (sql, fixture, since) => {
      await sql`delete from app.todos where user_id = ${uuidOf(fixture.writer.id)} and created_at >= ${since}`
    },
  },
  {
    name: 'POST /v1/reactions',
    fn: 'api.reaction_create',
    access: 'write',
    as: 'writer',
    status: 201,
    read: false,
    // Every request likes a different recent public todo: a repeated like would only read.
    prepare: async (sql, fixture, count) => {
      const rows = await sql<{ id: string }[]>`
        select 'todo_' || replace(t.id::text, '-', '') as id
        from app.todos t join app.users u on u.id = t.user_id
        where u.privacy = 'public'
          and not exists (select 1 from app.reactions r where r.todo_id = t.id and r.user_id = ${uuidOf(fixture.writer.id)})
        order by t.created_at desc
        limit ${count}`
      return rows.map((r) => r.id)
    },
    calls: ({ client, connections, prepared }) => {
      const mine = prepared.filter((_, i) => i % connections === client)
      return mine.map((todoId) => ({
        method: 'POST' as const,
        path: '/v1/reactions',
        body: { reactable_type: 'Todo', reactable_id: todoId },
        args: ['Todo', todoId],
      }))
    },
    cleanup: async (sql, fixture, since) => {
      await sql`delete from app.reactions where user_id = ${uuidOf(fixture.writer.id)} and created_at >= ${since}`
    },
  },
]
