// The postgres.js client both runtimes use, configured the same way.
import postgres from 'postgres'

export interface SqlOptions {
  /** Connections in the pool. */
  max?: number
  /** false behind Supabase's transaction pooler (port 6543), which cannot keep prepared statements. */
  prepare?: boolean
  /** Called with the text of every statement sent (tests count round trips with it). */
  onQuery?: (statement: string) => void
  /**
   * statement_timeout of every statement on the pool's connections, in milliseconds (0: none).
   * Sent as a startup parameter, so it is the session's own setting before any statement runs:
   * PostgreSQL arms the timer when a statement starts, which is why setting it inside the
   * request's statement (or per role, when the role is switched inside it) would never apply.
   */
  statementTimeoutMs?: number
}

/** How long one request's statement may run unless STATEMENT_TIMEOUT_MS says otherwise. */
export const DEFAULT_STATEMENT_TIMEOUT_MS = 5_000

/** STATEMENT_TIMEOUT_MS as milliseconds: unset or empty is the default; 0 turns the limit off. */
export function statementTimeoutFrom(value: string | undefined): number {
  if (value === undefined || value.trim() === '') return DEFAULT_STATEMENT_TIMEOUT_MS
  const ms = Number(value)
  if (!Number.isInteger(ms) || ms < 0) throw new Error(`STATEMENT_TIMEOUT_MS must be a whole number of milliseconds, got ${JSON.stringify(value)}`)
  return ms
}

/** Options postgres.js reads (src/index.js) that its type definitions do not list. */
const unlistedOptions = { max_pipeline: 1 }

export function createSql(url: string, options: SqlOptions = {}) {
  return postgres(url, {
    max: options.max ?? 10,
    prepare: options.prepare ?? true,
    // At most one statement waiting on a connection behind the one it runs (max_pipeline 1;
    // postgres.js refuses transactions with 0). By default postgres.js pipelines up to 100
    // waiting statements onto busy connections, each behind whatever that connection runs, so
    // under load a request's wait depended on the queue it landed in. With the rest waiting in
    // one queue for the whole pool, the first connection to free up takes the oldest request.
    // At 32 concurrent requests on 4 connections: p99 58 → 33 ms for a todo, 220 → 114 ms for a
    // page (docs/performance.md).
    ...unlistedOptions,
    // Timestamps leave the database as UTC ISO 8601 whatever the server's zone is.
    connection: {
      TimeZone: 'UTC',
      application_name: 'todo-sharing-api',
      ...(options.statementTimeoutMs ? { statement_timeout: options.statementTimeoutMs } : {}),
    },
    onnotice: () => {},
    ...(options.onQuery ? { debug: (_connection: number, statement: string) => options.onQuery!(statement) } : {}),
  })
}

/**
 * `sql.begin` on a connection of its own. postgres.js 3.4.9 hands a transaction's BEGIN to a busy
 * connection when every connection of the pool is busy (pipelining it behind the statement that
 * connection runs) and then, because that fills the connection's pipeline (max_pipeline 1 above),
 * skips reserving the connection for the transaction: the BEGIN fails with UNSAFE_TRANSACTION and
 * leaves that connection inside an open transaction, back in the pool, where unrelated requests
 * then run (and their writes are never committed, or fail as "current transaction is aborted")
 * (porsager/postgres#823, #1189). Reserving an idle connection first (waiting for one) never
 * pipelines: BEGIN, the work and COMMIT run on it alone, and it returns to the pool outside any
 * transaction. Used for every transaction of the API, its workers and the operator CLI.
 */
export async function transaction<T>(sql: postgres.Sql, fn: (tx: postgres.ReservedSql) => Promise<T>): Promise<T> {
  const reserved = await sql.reserve()
  try {
    await reserved`begin`
    let result: T
    try {
      result = await fn(reserved)
    } catch (err) {
      await reserved`rollback`.catch(() => {})
      throw err
    }
    await reserved`commit`
    return result
  } finally {
    reserved.release()
  }
}
