// The small data set of the scale comparison: a copy of the large one that keeps everything the
// benchmarked pages show and about 1% of the other todos. So both data sets serve the same
// pages (the reader's todos, the project's todos, the timeline sources' newest todos, the
// newest todos overall, the benchmarked todo, with all their reactions and comments) from
// tables a hundred times apart in size: a p50 that grows with the table is the table's doing.
//
// Built as CREATE DATABASE … TEMPLATE (a file copy), then the other todos are deleted with
// triggers off, rows that pointed at them are deleted by following every foreign key into
// app.todos and app.comments, the counters and totals are recomputed, and VACUUM FULL shrinks the tables.
import postgres, { type Sql } from 'postgres'
import { databaseUrl } from './databases.ts'
import type { Progress } from './progress.ts'
import { RECOUNT_TODO_TOTALS, SEED_FORMAT, type Fixture } from './seed-data.ts'

const uuidOf = (publicId: string) => publicId.replace(/^[a-z]+_/, '').replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5')

/** Newest todos kept per timeline source (the reader, each followee, each followed project). */
const PER_SOURCE = 100
/** Newest todos kept overall (GET /v1/todos shows the newest visible ones). */
const NEWEST = 1000
/** The other readers' first pages: their own newest todos and each timeline source's, a page and one. */
const PER_SOURCE_OTHER_READERS = 26

export interface SubsetInfo {
  /** The large data set it was cut from (its fixture's seeded_at and reader key). */
  from: { database: string; seeded_at: string; reader: string }
  todos: number
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
 * Makes database `name` (dropped first if it exists) from `large`, keeping about `target`
 * todos. Returns the fixture for it: the large one's, with the new counts.
 */
export async function deriveSubset(serverUrl: string, large: { name: string; fixture: Fixture }, name: string, target: number, progress: Progress): Promise<Fixture> {
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

  const sql = postgres(databaseUrl(serverUrl, name), { max: 1, onnotice: () => {}, connection: { application_name: 'todo-seed', TimeZone: 'UTC' } })
  const f = large.fixture
  try {
    await sql.begin(async (tx) => {
      await tx.unsafe(`set local session_replication_role = replica; set local work_mem = '256MB'`)
      progress.step('pick the todos to keep', 1)
      const reader = uuidOf(f.reader.id)
      await tx.unsafe(`
        create temp table keep (id uuid primary key) on commit drop;
        insert into keep select id from app.todos where user_id = '${reader}' on conflict do nothing;
        insert into keep select id from app.todos where id = '${uuidOf(f.todo.id)}' on conflict do nothing;
        insert into keep select id from app.todos where project_id = '${uuidOf(f.project.id)}' on conflict do nothing;
        insert into keep select t.id from app.user_follows s
          cross join lateral (select t.id from app.todos t where t.user_id = s.followee_id order by t.created_at desc, t.id desc limit ${PER_SOURCE}) t
          where s.follower_id = '${reader}' on conflict do nothing;
        insert into keep select t.id from app.project_follows s
          cross join lateral (select t.id from app.todos t where t.project_id = s.project_id order by t.created_at desc, t.id desc limit ${PER_SOURCE}) t
          where s.user_id = '${reader}' on conflict do nothing;
        insert into keep select id from (select id from app.todos order by created_at desc, id desc limit ${NEWEST}) n on conflict do nothing`)
      // The other readers' own first page and their timelines' (one page deep: the read runs ask for first pages).
      const others = (f.readers ?? []).slice(1).map((r) => uuidOf(r.id))
      if (others.length > 0) {
        await tx.unsafe(`
          insert into keep select t.id from unnest($1::uuid[]) as r(id)
            cross join lateral (select t.id from app.todos t where t.user_id = r.id order by t.created_at desc, t.id desc limit $2) t
            on conflict do nothing;`, [others, PER_SOURCE_OTHER_READERS])
        await tx.unsafe(`
          insert into keep select t.id from app.user_follows s
            cross join lateral (select t.id from app.todos t where t.user_id = s.followee_id order by t.created_at desc, t.id desc limit $2) t
            where s.follower_id = any ($1::uuid[]) on conflict do nothing`, [others, PER_SOURCE_OTHER_READERS])
        await tx.unsafe(`
          insert into keep select t.id from app.project_follows s
            cross join lateral (select t.id from app.todos t where t.project_id = s.project_id order by t.created_at desc, t.id desc limit $2) t
            where s.user_id = any ($1::uuid[]) on conflict do nothing`, [others, PER_SOURCE_OTHER_READERS])
      }
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
    const info: SubsetInfo = { from: { database: large.name, seeded_at: f.seeded_at, reader: f.reader.api_key }, todos: counts.todos ?? 0 }
    const fixture: Fixture & { subset: SubsetInfo } = { ...f, format: SEED_FORMAT, counts, subset: info }
    await sql`update seed.fixture set data = ${sql.json(fixture as never)} where id = 1`
    progress.done()
    return fixture
  } finally {
    await sql.end({ timeout: 5 })
  }
}

/** Whether `fixture` (of the small database) was cut from the large data set as it is now. */
export function isSubsetOf(fixture: Fixture | null, large: { name: string; fixture: Fixture }): boolean {
  const subset = (fixture as (Fixture & { subset?: SubsetInfo }) | null)?.subset
  return Boolean(subset && subset.from.database === large.name && subset.from.seeded_at === large.fixture.seeded_at
    && subset.from.reader === large.fixture.reader.api_key)
}
