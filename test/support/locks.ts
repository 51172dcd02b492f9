// Waiting for "the other transaction now waits on the lock" as a condition, not a sleep (issue 31):
// a sleep passes on a loaded machine without the race ever happening (the second statement had not
// reached the lock yet), and slows an idle one. pg_stat_activity says when a backend waits for a
// heavyweight lock (a row, a table, a transaction id), and which statement it runs.
import type { Sql } from 'postgres'

export interface LockWaitOptions {
  /** How many backends of this database must be waiting (default 1). */
  count?: number
  /** Only backends whose current statement matches (e.g. /conversation_read/). */
  query?: RegExp
  /** How long to wait at most (default 60 s: generous, the condition usually holds in milliseconds). */
  deadlineMs?: number
}

/**
 * Resolves once at least `count` backends of the current database wait for a lock (and run a
 * statement matching `query`); throws, naming what it saw, when that has not happened by the deadline.
 */
export async function waitForLockWait(sql: Sql<any>, options: LockWaitOptions = {}): Promise<void> {
  const { count = 1, query, deadlineMs = 60_000 } = options
  const deadline = Date.now() + deadlineMs
  let seen: string[] = []
  for (;;) {
    const rows = await sql<{ query: string }[]>`
      select query from pg_stat_activity
      where datname = current_database() and wait_event_type = 'Lock' and pid <> pg_backend_pid()`
    seen = rows.map((r) => r.query).filter((q) => !query || query.test(q))
    if (seen.length >= count) return
    if (Date.now() > deadline) {
      throw new Error(`waited ${deadlineMs} ms for ${count} lock waiter(s)${query ? ` running ${query}` : ''}; saw ${JSON.stringify(seen)}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}
