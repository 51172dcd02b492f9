// postgres.js #1181 (test/driver.test.ts) under Deno, through the Edge Function's module graph:
// test/driver-deno.test.ts runs it as `deno run --config supabase/functions/api/deno.json …`, so
// that 'postgres' resolves as the function's own import does, and createSql is the function's.
// Prints what the statement pipelined behind each failing one got, as one line of JSON.
import process from 'node:process'
import { createSql } from '../../functions/lib/sql.ts'

const url = process.env.DATABASE_URL!
const sql = createSql(url, { max: 1 })
const timed = createSql(url, { max: 1, statementTimeoutMs: 300 })
try {
  // Three rows stream before 1/(4-i) divides by zero; the second waits on the same connection.
  const failing = sql`select i, 1 / (4 - i) as boom from generate_series(1, 10) i`.then(() => 'resolved', (err: Error) => err.message)
  const behind = sql`select x from generate_series(1, 5) x`
  const error = await failing
  const rows = await behind
  // Rows stream, then pg_sleep in a later row runs past the statement timeout.
  const timedFailing = timed`select i, case when i = 50 then pg_sleep(2) end as slow from generate_series(1, 100) i`
    .then(() => 'resolved', (err: Error) => err.message)
  const timedBehind = timed`select 42 as answer`
  const timedError = await timedFailing
  const timedRows = await timedBehind
  // A sparse array (the bug) shows its holes as null.
  console.log(JSON.stringify({
    error,
    rows: Array.from(rows, (row) => (row ? row.x : null)),
    timedError,
    timedRows: Array.from(timedRows, (row) => (row ? row.answer : null)),
  }))
} finally {
  await sql.end({ timeout: 5 })
  await timed.end({ timeout: 5 })
}
