// The small data set of the scale comparison: a copy of the large one that keeps every todo the
// benchmarked pages show and enough others for about SMALL_TODOS todos in all, whatever the
// large size (1M or 10M). So both data sets serve the same pages, with the same reactions,
// comments and mentions, from tables 100 or 1,000 times apart in size: a p50 that grows with
// the table is the table's doing.
//
// Which todos the pages show is asked of the API itself: every read endpoint's call, as each
// of the bench's readers, is made on the copy before anything is deleted, for a page and one
// (so has_more stays true), and every todo id in the answers is kept. A list is ordered and its
// filter is a property of each todo and the viewer (members, follows, mutes and privacy are all
// kept), so a subset that keeps the large set's first page and one answers with that same page.
// The bench checks it: the small data set's first page of every read endpoint must equal the
// large one's (local/bench.ts, verify).
//
// Built as CREATE DATABASE … TEMPLATE (a file copy), then the other todos are deleted with
// triggers off, rows that pointed at them are deleted by following every foreign key into
// app.todos and app.comments, the counters and totals are recomputed, and VACUUM FULL shrinks the tables.
import postgres, { type Sql } from 'postgres'
import { callApi, type Credential } from '../../functions/lib/db.ts'
import { createSql } from '../../functions/lib/sql.ts'
import { sha256Hex } from '../../functions/lib/tokens.ts'
import { databaseUrl } from './databases.ts'
import { PAGE, type Endpoint, uuidOf } from './endpoints.ts'
import type { Progress } from './progress.ts'
import { RECOUNT_TODO_TOTALS, SEED_FORMAT, type Fixture } from './seed-data.ts'

/** Todos of the small data set, at every large size: the "10k" of "p50 at 1M (10M) against 10k". */
export const SMALL_TODOS = 10_000
/** Bumped when what a subset keeps changes: the bench cuts it again. */
export const SUBSET_FORMAT = 2

export interface SubsetInfo {
  /** The large data set it was cut from (its fixture's seeded_at and reader key). */
  from: { database: string; seeded_at: string; reader: string }
  todos: number
  format: number
  /** The read endpoints whose pages it keeps (all of them when it was cut). */
  endpoints: string[]
  /** Todos those pages show, all readers together. */
  page_todos: number
}

/** Every todo id in an API answer (items, the todo itself, what reactions point at). */
export function todoIds(json: string): string[] {
  return [...json.matchAll(/"(todo_[0-9a-f]{32})"/g)].map((m) => m[1]!)
}

/**
 * The todos the read endpoints show on their first page and one, as each reader: what the
 * small data set must keep. Run on the copy before anything is deleted (it is the large set).
 */
async function pageTodos(url: string, fixture: Fixture, endpoints: Endpoint[], publicUrl: string, progress: Progress): Promise<Set<string>> {
  const sql = createSql(url, { max: 2 })
  try {
    const readers = fixture.readers?.length ? fixture.readers : [fixture.reader]
    const jobs: { endpoint: Endpoint; credential: Credential; args: unknown[] }[] = []
    for (const reader of readers) {
      const credential: Credential = { kind: 'api_key', key_hash: await sha256Hex(reader.api_key) }
      for (const endpoint of endpoints) {
        for (const call of endpoint.calls({ fixture, client: 0, connections: 1, prepared: [], page: PAGE + 1 })) {
          jobs.push({ endpoint, credential, args: call.args })
        }
      }
    }
    const ids = new Set<string>()
    let next = 0
    let done = 0
    // Two at a time: the machine's two cores.
    await Promise.all([0, 1].map(async () => {
      while (next < jobs.length) {
        const job = jobs[next++]!
        const text = await callApi(sql, { credential: job.credential, access: job.endpoint.access, publicUrl }, job.endpoint.fn, job.args)
        for (const id of todoIds(text ?? '')) ids.add(uuidOf(id))
        progress.update(++done / jobs.length)
      }
    }))
    return ids
  } finally {
    await sql.end({ timeout: 5 })
  }
}

async function orphans(tx: Sql): Promise<number> {
  // Every foreign key into todos or comments: cascade ones delete, set-null ones clear.
  const fks = await tx<{ table: string; column: string; target: string; action: string }[]>`
    select c.conrelid::regclass::text as table, a.attname as column, c.confrelid::regclass::text as target,
           c.confdeltype as action
    from pg_constraint c
    join pg_attribute a on a.attrelid = c.conrelid and a.attnum = c.conkey[1]
    where c.contype = 'f' and c.confrelid in ('app.todos'::regclass, 'app.comments'::regclass)
      and cardinality(c.conkey) = 1`
  let changed = 0
  for (const fk of fks) {
    const missing = `x.${fk.column} is not null and not exists (select 1 from ${fk.target} y where y.id = x.${fk.column})`
    const result = fk.action === 'c'
      ? await tx.unsafe(`delete from ${fk.table} x where ${missing}`)
      : await tx.unsafe(`update ${fk.table} x set ${fk.column} = null where ${missing}`)
    changed += result.count
  }
  return changed
}

/**
 * Makes database `name` (dropped first if it exists) from `large`, keeping the todos of the
 * first pages of `endpoints` (the read ones) and others up to about `target` todos. Returns the
 * fixture for it: the large one's, with the new counts.
 */
export async function deriveSubset(
  serverUrl: string, large: { name: string; fixture: Fixture }, name: string, target: number, progress: Progress,
  pages: { endpoints: Endpoint[]; publicUrl: string },
): Promise<Fixture> {
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} })
  try {
    progress.step('copy the large database (template)', 3)
    await admin.unsafe(`drop database if exists ${name} with (force)`)
    await admin.unsafe(`create database ${name} template ${large.name} strategy file_copy`).catch(async () => {
      await admin.unsafe(`create database ${name} template ${large.name}`)
    })
  } finally {
    await admin.end({ timeout: 5 })
  }

  const url = databaseUrl(serverUrl, name)
  const f = large.fixture
  const readEndpoints = pages.endpoints.filter((e) => e.read)
  progress.step(`the benchmarked pages (${readEndpoints.length} read endpoints × ${f.readers?.length || 1} readers)`, 4)
  const shown = await pageTodos(url, f, readEndpoints, pages.publicUrl, progress)
  const sql = postgres(url, { max: 1, onnotice: () => {}, connection: { application_name: 'todo-seed', TimeZone: 'UTC' } })
  try {
    await sql.begin(async (tx) => {
      await tx.unsafe(`set local session_replication_role = replica; set local work_mem = '256MB'`)
      progress.step('pick the todos to keep', 1)
      await tx.unsafe(`create temp table keep (id uuid primary key) on commit drop`)
      await tx.unsafe(`insert into keep select unnest($1::uuid[]) on conflict do nothing`, [[...shown]])
      const [counts] = await tx<{ kept: number; total: number }[]>`select (select count(*) from keep)::int as kept, (select count(*) from app.todos)::int as total`
      const fill = Math.max(0, target - counts!.kept) / Math.max(1, counts!.total - counts!.kept)
      await tx.unsafe(`insert into keep select id from app.todos where (abs(hashint8extended(number, 77)) % 1000000) < ${Math.round(fill * 1_000_000)} on conflict do nothing`)

      progress.step('delete the other todos and what pointed at them', 4)
      await tx.unsafe(`delete from app.todos t where not exists (select 1 from keep k where k.id = t.id)`)
      for (let round = 0; round < 5 && (await orphans(tx as unknown as Sql)) > 0; round++) {}

      progress.step('counters and streaks', 1)
      await tx.unsafe(`
        with todo_counts as (
          select user_id, count(*)::int as n from app.todos group by user_id
        ), days as (
          select distinct user_id, local_date as day from app.todos
          union
          select user_id, day from app.streak_freezes
        ), islands as (
          select user_id, day, day - (row_number() over (partition by user_id order by day))::integer as island from days
        ), runs as (
          select user_id, max(day) as last_day, count(*)::integer as length from islands group by user_id, island
        ), streaks as (
          select distinct on (user_id) user_id, last_day, length, max(length) over (partition by user_id) as best
          from runs order by user_id, last_day desc
        )
        update app.users u set
          todos_count = coalesce(tc.n, 0),
          streak_last_day = s.last_day,
          streak_length = coalesce(s.length, 0),
          best_streak = coalesce(s.best, 0)
        from app.users u2
        left join todo_counts tc on tc.user_id = u2.id
        left join streaks s on s.user_id = u2.id
        where u.id = u2.id`)
      await tx.unsafe(RECOUNT_TODO_TOTALS)
      await tx`select app.recount_project_todos()`
      // The hours of the todos kept, counted again (the deletes ran with the triggers off).
      await tx`truncate app.todo_hours, app.todo_hours_sealed`
      await tx`select app.seal_todo_hours()`
    })

    progress.step('vacuum full (shrink the tables)', 3)
    const tables = await sql<{ name: string }[]>`
      select c.oid::regclass::text as name from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = 'app' and c.relkind = 'r'`
    for (const t of tables) await sql.unsafe(`vacuum (full, analyze) ${t.name}`)

    const counts: Record<string, number> = { ...f.counts }
    for (const table of Object.keys(counts)) {
      const [row] = await sql.unsafe(`select count(*)::int as n from app.${table}`)
      counts[table] = row!.n as number
    }
    const info: SubsetInfo = {
      from: { database: large.name, seeded_at: f.seeded_at, reader: f.reader.api_key }, todos: counts.todos ?? 0,
      format: SUBSET_FORMAT, endpoints: readEndpoints.map((e) => e.name), page_todos: shown.size,
    }
    const fixture: Fixture & { subset: SubsetInfo } = { ...f, format: SEED_FORMAT, counts, subset: info }
    await sql`update seed.fixture set data = ${sql.json(fixture as never)} where id = 1`
    progress.done()
    return fixture
  } finally {
    await sql.end({ timeout: 5 })
  }
}

/** Whether `fixture` (of the small database) was cut from the large data set as it is now, keeping the pages of every one of `endpoints`. */
export function isSubsetOf(fixture: Fixture | null, large: { name: string; fixture: Fixture }, endpoints: Endpoint[]): boolean {
  const subset = (fixture as (Fixture & { subset?: SubsetInfo }) | null)?.subset
  return Boolean(subset && subset.format === SUBSET_FORMAT && subset.from.database === large.name
    && subset.from.seeded_at === large.fixture.seeded_at && subset.from.reader === large.fixture.reader.api_key
    && endpoints.filter((e) => e.read).every((e) => subset.endpoints.includes(e.name)))
}
