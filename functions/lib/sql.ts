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

/** How long opening one connection may take (postgres.js's connect_timeout, in seconds). */
export const CONNECT_TIMEOUT_SECONDS = 5

/**
 * How long a pool connection waits before it reconnects after a failure, in seconds: 25 ms
 * doubling to at most 1 s (with jitter), counted across the pool and reset by a connection that
 * succeeds. A request waits for its connection's next attempt, so this bounds how long requests
 * wait while the database restarts before the attempt fails them with a 503: postgres.js's own
 * default grows to 20 s (3^n / 100), and with it every request while PostgreSQL was down (found
 * by test/faults.test.ts). One attempt per waiting connection per delay is no storm either.
 */
export function reconnectBackoffSeconds(retries: number): number {
  return Math.min(0.025 * 2 ** retries, 1) * (0.5 + Math.random() / 2)
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
    // A database that does not answer a connection attempt fails the request in 5 s (503), not
    // postgres.js's default 30 s: a request holds its caller for at most this long while the
    // database restarts or is unreachable (a refused connection fails at once).
    connect_timeout: CONNECT_TIMEOUT_SECONDS,
    backoff: reconnectBackoffSeconds,
    // Timestamps leave the database as UTC ISO 8601 whatever the server's zone is.
    connection: {
      TimeZone: 'UTC',
      application_name: 'todo-sharing-api',
      ...(options.statementTimeoutMs ? { statement_timeout: options.statementTimeoutMs } : {}),
      // One request, one process: a parallel plan would give one statement up to three cores
      // (a count over every todo planned two workers), so the fair queue's "two of yours at once"
      // (functions/lib/admission.ts) would be six processes on the machine's two cores, and
      // another member's read would wait for CPU behind them. Lists are index walks that gain
      // nothing from workers; what did gain was the very scans fair share must bound. A string:
      // postgres.js leaves out startup parameters whose value is falsy, 0 included.
      max_parallel_workers_per_gather: '0',
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

/** How many connections a postgres.js client opens at most (its `max`). */
export function poolSizeOf(sql: postgres.Sql): number {
  const max = (sql as { options?: { max?: unknown } }).options?.max
  return typeof max === 'number' && max > 0 ? max : 10
}
