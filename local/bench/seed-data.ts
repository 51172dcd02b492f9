// The data set of the benchmark (issue 5): users with time zones, privacy and subscriptions,
// projects with makers and hashtags, todos over two years with #hashtags and @mentions,
// comments with replies, reactions on todos and comments, follows and mutes. Deterministic:
// the same seed, sizes and day give the same rows.
//
// How it is fast enough (10k users / 1M todos in about a minute on 2 cores, 100k users / 10M
// todos in about ten: every step is linear in the rows it makes):
//   - Small tables (users, projects) come from @faker-js/faker in JavaScript and go in as one
//     JSON parameter each; the big ones (todos, reactions, follows) are generated inside
//     PostgreSQL with generate_series and a hash of the row number as the random source
//     (hashint8extended), so nothing crosses the wire row by row.
//   - Everything runs in one transaction with `session_replication_role = replica`: row
//     triggers (mention parsing, counters, streak refresh, updated_at) and foreign-key checks
//     are skipped, and what the triggers would have derived is computed set-based instead
//     (local_date, project_id, mention rows of todos and comments, todos_count,
//     followers_count, reactions_count, comments_count, streaks, the projects' todo counts) with the same definitions the
//     triggers use (app.extract_mentions, app.refresh_streak's runs of consecutive days).
//   - The secondary indexes of the bulk tables are dropped first and rebuilt at the end,
//     which is several times faster than maintaining them row by row (GIN above all); so are
//     their primary keys and unique constraints that no foreign key uses (random uuids: kept
//     row by row, their indexes outgrow shared_buffers at 10M and every row costs a page).
//   - Chunked steps (100k todos a statement, for the progress bar) join only the chunk's rows:
//     what one step derives for the next (counts, the owning project) is keyed by the todo's
//     row number and joined by range, never hashed whole per chunk.
// The transaction either commits the whole data set with its fixture or nothing.
//
// A new table gets its own step in STEPS: generate its rows from seed_todos / seed_users the
// way comments and reactions do, add it to BULK_TABLES when it is big, and compute whatever
// its triggers would maintain (counters, mention rows) set-based in the same step.
import { mkdir, writeFile } from 'node:fs/promises'
import { resolve } from 'node:path'
import { Faker, base, en } from '@faker-js/faker'
import type { Sql, TransactionSql } from 'postgres'
import { newApiKey, sha256Hex } from '../../functions/lib/tokens.ts'
import type { Progress } from './progress.ts'

/** Bumped when the generated data changes: the bench seeds again. */
export const SEED_FORMAT = 1
/** Bumped when what the fixture picks changes: the bench picks again without seeding. */
export const FIXTURE_FORMAT = 5
/**
 * Members the write runs post and like as, in turn: every write that grows a table is
 * rate-limited per member (docs/rate-limits.md), so a run spreads its writes over this many
 * that each makes a few dozen per run, well under every limit, and measures the endpoint.
 */
export const BENCH_WRITERS = 500
/**
 * Members the read runs read as, in turn (the reader first): the API queues each member's
 * requests in a line of their own and runs at most half the pool of them at once
 * (functions/lib/admission.ts), as it should for real traffic, where many members read at once.
 * One reader behind 32 connections would measure that line, not the endpoint. Sixteen members,
 * two connections each at 32.
 */
export const BENCH_READERS = 16

export interface SeedOptions {
  users: number
  todos: number
  /** The faker seed and the salt of every SQL-side random choice. */
  seed: number
}

export interface BenchKey {
  id: string
  username: string
  api_key: string
  todos_count: number
}

/** What the benchmark needs to know about a seeded database (stored in seed.fixture). */
export interface Fixture {
  format: number
  fixture_format: number
  options: SeedOptions
  seeded_at: string
  /** Seconds the whole seed took. */
  seconds: number
  /** Seconds of each step of the seed, in order (older fixtures lack it). */
  steps?: Record<string, number>
  /** pg_database_size of the seeded database after its vacuum, bytes (older fixtures lack it). */
  disk_bytes?: number
  migrations: string[]
  counts: Record<string, number>
  /** Reads as this member: an active, public member with a typical-to-busy history. */
  reader: BenchKey
  /** Posts as this member, so the reader's lists are not changed by the write benchmarks. */
  writer: BenchKey
  /**
   * The write runs' members, the writer first: requests take them in turn so that no member
   * reaches a rate limit (up to BENCH_WRITERS; never the reader). Older fixtures lack it.
   */
  writers: BenchKey[]
  /** More members with read-write keys, for endpoints that need a second party. */
  others: BenchKey[]
  /**
   * The read runs' members, the reader first: active public members with about as many todos
   * and followees as the reader, so each reads a page like the reader's. Older fixtures lack it.
   */
  readers?: BenchKey[]
  /** A public todo with a project, an @mention and reactions. */
  todo: { id: string; number: number; reactions_count: number }
  /** A public project with todos, and a word that matches about a tenth of them. */
  project: { id: string; slug: string | null; hashtag: string; todos: number; query: string; query_matches: number }
  /** Used in the body of posted todos, so posting parses a real #hashtag and @mention. */
  mention: { hashtag: string; username: string }
  /** The filters of the filtered lists (issue 26). Older fixtures lack it (the bench picks again). */
  lists?: ListFilters
}

/**
 * What the filtered lists ask for, picked by absolute properties so that every data set size
 * asks the same question of the same kind of data: dates relative to the moment of seeding (the
 * todos span the two years before it), words by their share of todos in a fixed sample (the
 * oldest todos: the phrases come from the same 2,000 faker phrases at every size).
 */
export interface ListFilters {
  /** since that keeps every todo. */
  since_all: string
  /** since 30 days before seeding (YYYY-MM-DD, the viewer's local day): about 4% of the todos. */
  since_recent: string
  /** until a year before seeding: the older half. */
  until: string
  /** A one-letter prefix: the first letter of the commonest word (every word of `query` is a prefix match). */
  prefix: string
  /** That word, and the share of the sample's todos it is in. */
  prefix_word: string
  prefix_word_share: number
  /** A word in about one todo in a thousand, negated (`query=-word`: nearly every todo matches). */
  negated: string
  negated_share: number
  /** Todos the words were counted in (the oldest, by number). */
  sample: number
}

/** Todos counted for the words of ListFilters (the oldest ones). */
const WORD_SAMPLE = 20_000

const TIME_ZONES: { value: string; weight: number }[] = [
  { value: 'America/New_York', weight: 14 }, { value: 'America/Los_Angeles', weight: 10 },
  { value: 'America/Chicago', weight: 6 }, { value: 'America/Denver', weight: 3 },
  { value: 'America/Toronto', weight: 3 }, { value: 'America/Sao_Paulo', weight: 4 },
  { value: 'America/Mexico_City', weight: 2 }, { value: 'America/St_Johns', weight: 1 },
  { value: 'Europe/London', weight: 9 }, { value: 'Europe/Berlin', weight: 8 },
  { value: 'Europe/Paris', weight: 5 }, { value: 'Europe/Amsterdam', weight: 3 },
  { value: 'Europe/Madrid', weight: 3 }, { value: 'Europe/Kyiv', weight: 2 },
  { value: 'Asia/Kolkata', weight: 6 }, { value: 'Asia/Kathmandu', weight: 1 },
  { value: 'Asia/Tokyo', weight: 4 }, { value: 'Asia/Shanghai', weight: 3 },
  { value: 'Asia/Singapore', weight: 2 }, { value: 'Asia/Dubai', weight: 2 },
  { value: 'Australia/Sydney', weight: 3 }, { value: 'Pacific/Auckland', weight: 1 },
  { value: 'Pacific/Chatham', weight: 1 }, { value: 'Pacific/Kiritimati', weight: 1 },
  { value: 'Pacific/Pago_Pago', weight: 1 }, { value: 'Africa/Lagos', weight: 2 },
  { value: 'Africa/Nairobi', weight: 1 }, { value: 'UTC', weight: 3 },
]
const PRIVACY = [
  { value: 'public', weight: 85 },
  { value: 'protected', weight: 10 },
  { value: 'private', weight: 5 },
]

/** Tables filled in bulk: their secondary indexes are rebuilt after the load. */
const BULK_TABLES = [
  'app.todos', 'app.reactions', 'app.todo_project_mentions', 'app.todo_user_mentions', 'app.comments',
  'app.comment_project_mentions', 'app.comment_user_mentions', 'app.user_follows', 'app.project_follows', 'app.mutes',
]

const DAY = 86_400
/** Todos are spread over the two years before the moment of seeding. */
const TODO_SPAN_SECONDS = 730 * DAY
/** Todos per statement of the chunked steps (the test seeds with smaller chunks, so it crosses chunk bounds). */
const CHUNK = 100_000

// ---------------------------------------------------------------------------------------------
// Vocabulary from faker (JavaScript side)
// ---------------------------------------------------------------------------------------------

interface UserRow {
  idx: number; id: string; username: string; first_name: string; last_name: string; bio: string | null
  location: string | null; website_url: string | null; time_zone: string; privacy: string
  subscription_active: boolean; created_at: string
}
interface ProjectRow {
  idx: number; id: string; owner_idx: number; name: string; slug: string; hashtag: string; pitch: string
  description: string | null; website_url: string | null; github_url: string | null; privacy: string
  archived: boolean; created_at: string; makers: { idx: number; accepted: boolean }[]
}

function unique(seen: Set<string>, candidate: string, fallback: string, max: number): string {
  let value = candidate.slice(0, max)
  for (let n = 2; !value || seen.has(value.toLowerCase()) || value.toLowerCase() === 'me'; n++) {
    const suffix = `_${n}`
    value = (candidate || fallback).slice(0, max - suffix.length) + suffix
  }
  seen.add(value.toLowerCase())
  return value
}

/** Skewed towards small indexes: index i of n is drawn with density ∝ 1/sqrt(i). */
function skewed(faker: Faker, n: number, exponent = 2): number {
  return Math.min(n - 1, Math.floor(n * faker.number.float({ min: 0, max: 1 }) ** exponent))
}

export function vocabulary(options: SeedOptions, anchor: Date) {
  const faker = new Faker({ locale: [en, base] })
  faker.seed(options.seed)
  const at = (daysAgo: number) => new Date(anchor.getTime() - daysAgo * DAY * 1000).toISOString()

  const usernames = new Set<string>()
  const users: UserRow[] = []
  for (let idx = 0; idx < options.users; idx++) {
    const first = faker.person.firstName()
    const last = faker.person.lastName()
    const candidate = faker.internet.username({ firstName: first, lastName: last }).replace(/[^A-Za-z0-9_]/g, '_')
    users.push({
      idx,
      id: faker.string.uuid(),
      username: unique(usernames, candidate, 'member', 39),
      first_name: first,
      last_name: last,
      bio: faker.datatype.boolean(0.6) ? faker.person.bio() : null,
      location: faker.datatype.boolean(0.5) ? `${faker.location.city()}, ${faker.location.country()}` : null,
      website_url: faker.datatype.boolean(0.3) ? faker.internet.url() : null,
      time_zone: faker.helpers.weightedArrayElement(TIME_ZONES),
      privacy: faker.helpers.weightedArrayElement(PRIVACY),
      subscription_active: faker.datatype.boolean(0.95),
      created_at: at(730 + faker.number.float({ min: 1, max: 365 })),
    })
  }

  const projectCount = Math.max(3, Math.round(options.users / 10))
  const hashtags = new Set<string>()
  const slugs = new Set<string>()
  const projects: ProjectRow[] = []
  for (let idx = 0; idx < projectCount; idx++) {
    const name = faker.commerce.productName()
    const owner = skewed(faker, options.users)
    const makers = new Map<number, boolean>([[owner, true]])
    const extra = faker.helpers.weightedArrayElement([{ value: 0, weight: 50 }, { value: 1, weight: 25 }, { value: 2, weight: 15 }, { value: 3, weight: 10 }])
    for (let k = 0; k < extra; k++) {
      const maker = skewed(faker, options.users, 1.5)
      if (!makers.has(maker)) makers.set(maker, faker.datatype.boolean(0.9))
    }
    const slug = unique(slugs, name.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, ''), 'project', 63).replace(/_/g, '-')
    projects.push({
      idx,
      id: faker.string.uuid(),
      owner_idx: owner,
      name,
      slug,
      hashtag: unique(hashtags, name.replace(/[^A-Za-z0-9]/g, ''), 'Project', 64),
      pitch: faker.company.catchPhrase(),
      description: faker.datatype.boolean(0.5) ? faker.lorem.paragraph() : null,
      website_url: faker.datatype.boolean(0.5) ? faker.internet.url() : null,
      github_url: faker.datatype.boolean(0.4) ? `https://github.com/${users[owner]!.username}/${slug}` : null,
      privacy: faker.helpers.weightedArrayElement(PRIVACY),
      archived: faker.datatype.boolean(0.05),
      created_at: at(730 + faker.number.float({ min: 0, max: 60 })),
      makers: [...makers].map(([maker, accepted]) => ({ idx: maker, accepted })),
    })
  }

  // What people write: short commit-style notes mostly, some longer sentences.
  const phrases: string[] = []
  for (let n = 0; n < 2000; n++) {
    const text = faker.datatype.boolean(0.7) ? faker.git.commitMessage() : faker.hacker.phrase()
    const clean = text.replace(/[#@]/g, '').trim()
    phrases.push(clean.charAt(0).toUpperCase() + clean.slice(1))
  }
  return { users, projects, phrases }
}

// ---------------------------------------------------------------------------------------------
// SQL side
// ---------------------------------------------------------------------------------------------

/** A deterministic uniform number in [0, 1) from an integer expression and a salt. */
function rnd(expr: string, salt: number, seed: number): string {
  return `((hashint8extended((${expr})::bigint, ${seed * 1000 + salt}) & 140737488355327)::float8 / 140737488355328.0)`
}

interface Ctx {
  tx: TransactionSql
  options: SeedOptions
  anchor: Date
  progress: Progress
  vocab: ReturnType<typeof vocabulary>
  indexes: { name: string; def: string; comment: string | null }[]
  /** Primary keys and unique constraints dropped for the load and added again at the end. */
  constraints: { table: string; name: string; def: string; comment: string | null; index_comment: string | null }[]
  /** Todos per statement of the chunked steps. */
  chunk: number
}

interface Step {
  label: string
  /** Seconds it takes, roughly (measured at 10k users / 1M todos), for the progress bar. */
  weight: (o: SeedOptions) => number
  run: (ctx: Ctx) => Promise<void>
}

async function chunked(ctx: Ctx, total: number, run: (from: number, to: number) => Promise<unknown>) {
  for (let from = 1; from <= total; from += ctx.chunk) {
    const to = Math.min(total, from + ctx.chunk - 1)
    await run(from, to)
    ctx.progress.update(to / total)
  }
}

/**
 * app.todo_totals recounted from the todos, as app.tg_todos__count_and_streak keeps them: for
 * the seed (which writes with triggers off) and for the small data set cut from it.
 */
export const RECOUNT_TODO_TOTALS = `
  update app.todo_totals tt set todos = coalesce(c.n, 0)
  from app.todo_totals k
  left join (select t.author_privacy, app.todo_total_shard(t.user_id) as shard, count(*) as n
             from app.todos t group by 1, 2) c on c.author_privacy = k.privacy and c.shard = k.shard
  where tt.privacy = k.privacy and tt.shard = k.shard`

const STEPS: Step[] = [
  {
    label: 'prepare: drop secondary indexes and unreferenced keys of bulk tables',
    weight: () => 0.1,
    run: async ({ tx, indexes, constraints }) => {
      // Primary keys and unique constraints that no foreign key depends on go too (reactions,
      // mentions, follows): their keys are random (uuids), so a load in time order inserts into
      // every page of their indexes; once an index outgrows shared_buffers (at 10M todos the
      // reactions' key alone is about 0.8 GB) every row reads and dirties a page of it and the
      // load slows down faster than the data grows. Rebuilt by a sort at the end, as the indexes
      // are; uniqueness is checked then, in the same transaction. Keys that foreign keys use
      // (todos, comments) stay.
      const keys = await tx<{ table: string; name: string; def: string; comment: string | null; index_comment: string | null }[]>`
        select c.conrelid::regclass::text as table, c.conname as name, pg_get_constraintdef(c.oid) as def,
               obj_description(c.oid, 'pg_constraint') as comment, obj_description(c.conindid, 'pg_class') as index_comment
        from pg_constraint c
        where c.conrelid = any (${BULK_TABLES}::regclass[]) and c.contype in ('p', 'u')
          and not exists (select 1 from pg_constraint f where f.contype = 'f' and f.conindid = c.conindid)
        order by c.oid`
      for (const key of keys) {
        constraints.push(key)
        await tx.unsafe(`alter table ${key.table} drop constraint ${key.name}`)
      }
      const rows = await tx<{ name: string; def: string; comment: string | null }[]>`
        select i.indexrelid::regclass::text as name, pg_get_indexdef(i.indexrelid) as def,
               obj_description(i.indexrelid, 'pg_class') as comment
        from pg_index i
        where i.indrelid = any (${BULK_TABLES}::regclass[])
          and not exists (select 1 from pg_constraint c where c.conindid = i.indexrelid)
        order by i.indexrelid`
      for (const row of rows) {
        indexes.push(row)
        await tx.unsafe(`drop index ${row.name}`)
      }
    },
  },
  {
    label: 'users',
    weight: (o) => 0.1 + o.users / 25_000,
    run: async ({ tx, vocab }) => {
      // JSON goes in as text: postgres.js would send a JS array as a PostgreSQL array.
      const users = JSON.stringify(vocab.users)
      await tx.unsafe(`
        create temp table seed_users on commit drop as
        select x.idx, x.id, x.username, x.time_zone, x.privacy, array[]::text[] as hashtags
        from jsonb_to_recordset($1::text::jsonb) as x(idx int, id uuid, username text, time_zone text, privacy app.privacy)`, [users])
      await tx.unsafe(`alter table seed_users add primary key (idx)`)
      await tx.unsafe(`
        insert into auth.users (id, aud, role, raw_app_meta_data, raw_user_meta_data, created_at, updated_at)
        select x.id, 'authenticated', 'authenticated', '{}', jsonb_build_object('username', x.username), x.created_at, x.created_at
        from jsonb_to_recordset($1::text::jsonb) as x(id uuid, username text, created_at timestamptz)`, [users])
      await tx.unsafe(`
        insert into app.users (id, username, first_name, last_name, bio, location, website_url, time_zone, privacy,
                               subscription_active, created_at, updated_at)
        select x.id, x.username, x.first_name, x.last_name, x.bio, x.location, x.website_url, x.time_zone, x.privacy,
               x.subscription_active, x.created_at, x.created_at
        from jsonb_to_recordset($1::text::jsonb) as x(idx int, id uuid, username text, first_name text, last_name text, bio text,
             location text, website_url text, time_zone text, privacy app.privacy, subscription_active boolean,
             created_at timestamptz)
        order by x.idx`, [users])
    },
  },
  {
    label: 'projects and makers',
    weight: () => 0.1,
    run: async ({ tx, vocab }) => {
      const projects = JSON.stringify(vocab.projects)
      await tx.unsafe(`
        insert into app.projects (id, owner_id, slug, name, pitch, description, hashtag, website_url, github_url,
                                  privacy, archived, created_at, updated_at)
        select x.id, u.id, x.slug, x.name, x.pitch, x.description, x.hashtag, x.website_url, x.github_url,
               x.privacy, x.archived, x.created_at, x.created_at
        from jsonb_to_recordset($1::text::jsonb) as x(idx int, id uuid, owner_idx int, slug text, name text, pitch text,
             description text, hashtag text, website_url text, github_url text, privacy app.privacy, archived boolean,
             created_at timestamptz)
        join seed_users u on u.idx = x.owner_idx
        order by x.idx`, [projects])
      // The owner is an accepted maker (the trigger app.tg_projects__add_owner_as_maker is skipped).
      await tx.unsafe(`
        insert into app.project_makers (project_id, user_id, accepted, created_at)
        select x.id, u.id, m.accepted, x.created_at
        from jsonb_to_recordset($1::text::jsonb) as x(id uuid, created_at timestamptz, makers jsonb)
        cross join lateral jsonb_to_recordset(x.makers) as m(idx int, accepted boolean)
        join seed_users u on u.idx = m.idx`, [projects])
      await tx.unsafe(`
        create temp table seed_tags on commit drop as
        select (row_number() over (order by p.created_at, p.id) - 1)::int as n, p.hashtag from app.projects p;
        alter table seed_tags add primary key (n);
        update seed_users s set hashtags = h.tags
        from (select m.user_id, array_agg(p.hashtag order by p.created_at, p.id) as tags
              from app.project_makers m join app.projects p on p.id = m.project_id
              where m.accepted group by m.user_id) h
        where h.user_id = s.id`)
      await tx.unsafe(`
        create temp table seed_phrases (n int primary key, phrase text not null) on commit drop`)
      await tx.unsafe(`insert into seed_phrases select (o - 1)::int, p from unnest($1::text[]) with ordinality as t(p, o)`, [vocab.phrases])
    },
  },
  {
    label: 'follows (users and projects) and mutes',
    weight: (o) => 0.1 + o.users / 10_000,
    run: async ({ tx, options: o, anchor }) => {
      const r = (expr: string, salt: number) => rnd(expr, salt, o.seed)
      // About 20 followees per member (at most 60), popular (busy) members followed most.
      await tx.unsafe(`
        insert into app.user_follows (follower_id, followee_id, created_at)
        select distinct f.id, e.id, $1::timestamptz - make_interval(secs => ${700 * DAY} * ${r(`f.idx::bigint * ${o.users} + e.idx`, 33)})
        from seed_users f
        cross join lateral generate_series(1, floor(60 * power(${r('f.idx', 31)}, 2))::int) j
        join seed_users e on e.idx = floor(${o.users} * power(${r('f.idx::bigint * 1000 + j', 32)}, 2))::int
        where e.idx <> f.idx
        order by 1, 2`, [anchor])
      const projects = Math.max(3, Math.round(o.users / 10))
      await tx.unsafe(`
        insert into app.project_follows (user_id, project_id, created_at)
        select distinct f.id, p.id, $1::timestamptz - make_interval(secs => ${700 * DAY} * ${r(`f.idx::bigint * ${projects} + t.n`, 36)})
        from seed_users f
        cross join lateral generate_series(1, floor(8 * power(${r('f.idx', 34)}, 3))::int) j
        join seed_tags t on t.n = floor(${projects} * power(${r('f.idx::bigint * 1000 + j', 35)}, 2))::int
        join app.projects p on p.hashtag = t.hashtag`, [anchor])
      // One member in twenty mutes one to three others.
      await tx.unsafe(`
        insert into app.mutes (user_id, muted_user_id, created_at)
        select distinct f.id, e.id, $1::timestamptz - make_interval(secs => ${700 * DAY} * ${r(`f.idx::bigint * ${o.users} + e.idx`, 39)})
        from seed_users f
        cross join lateral generate_series(1, case when ${r('f.idx', 37)} < 0.05 then 1 + floor(3 * ${r('f.idx', 40)})::int else 0 end) j
        join seed_users e on e.idx = floor(${o.users} * ${r('f.idx::bigint * 1000 + j', 38)})::int
        where e.idx <> f.idx`, [anchor])
    },
  },
  {
    label: 'todos: generate bodies',
    weight: (o) => o.todos / 300_000,
    run: async (ctx) => {
      const { tx, options: o, anchor } = ctx
      const r = (expr: string, salt: number) => rnd(expr, salt, o.seed)
      await tx.unsafe(`
        create temp table seed_todos (
          i bigint primary key, id uuid not null, user_id uuid not null, time_zone text not null,
          body text not null, created_at timestamptz not null
        ) on commit drop`)
      const tags = Math.max(3, Math.round(o.users / 10))
      // Authors: the busiest members write most (member index drawn with density ∝ 1/sqrt).
      // Bodies: a phrase; 30% a #hashtag (80% one of the author's own projects when they make
      // any, so the todo belongs to it); 4% a second, random #hashtag; 15% an @mention.
      // created_at grows with i (number order is time order, as in production) over two years.
      await chunked(ctx, o.todos, (from, to) => tx.unsafe(`
        insert into seed_todos (i, id, user_id, time_zone, body, created_at)
        select k.i, md5('${o.seed}:todo:' || k.i)::uuid, a.id, a.time_zone,
               p.phrase
               || case when k.has_tag then ' #' || case when cardinality(a.hashtags) > 0 and k.own_tag
                       then a.hashtags[1 + floor(k.pick * cardinality(a.hashtags))::int] else t1.hashtag end
                  else '' end
               || case when k.second_tag then ' #' || t2.hashtag else '' end
               || case when k.mention then ' @' || m.username else '' end,
               $1::timestamptz - make_interval(secs => ${TODO_SPAN_SECONDS} * (1 - (k.i - 1 + k.jitter) / ${o.todos}))
        from (
          select g.i,
                 floor(${o.users} * power(${r('g.i', 1)}, 2))::int as author,
                 floor(2000 * ${r('g.i', 2)})::int as phrase,
                 ${r('g.i', 3)} < 0.30 as has_tag,
                 ${r('g.i', 4)} < 0.80 as own_tag,
                 ${r('g.i', 5)} as pick,
                 floor(${tags} * ${r('g.i', 5)})::int as tag1,
                 ${r('g.i', 6)} < 0.04 as second_tag,
                 floor(${tags} * ${r('g.i', 7)})::int as tag2,
                 ${r('g.i', 8)} < 0.15 as mention,
                 floor(${o.users} * ${r('g.i', 10)})::int as mentioned,
                 ${r('g.i', 9)} as jitter
          from generate_series(${from}, ${to}) g(i)
        ) k
        join seed_users a on a.idx = k.author
        join seed_users m on m.idx = k.mentioned
        join seed_phrases p on p.n = k.phrase
        join seed_tags t1 on t1.n = k.tag1
        join seed_tags t2 on t2.n = k.tag2
        order by k.i`, [anchor]))
      await tx.unsafe(`analyze seed_todos`)
    },
  },
  {
    label: 'todos: mentions (app.extract_mentions)',
    weight: (o) => o.todos / 150_000,
    run: async ({ tx }) => {
      await tx.unsafe(`
        create temp table seed_project_mentions on commit drop as
        select s.i as todo_i, s.id as todo_id, s.user_id, p.id as project_id, tag.position
        from seed_todos s
        cross join lateral app.extract_mentions(s.body, '#') tag
        join app.projects p on lower(p.hashtag) = tag.name
        where strpos(s.body, '#') > 0`)
      // The `projects` field: the first #hashtag project of which the author is an accepted maker.
      await tx.unsafe(`
        create temp table seed_todo_project on commit drop as
        select distinct on (pm.todo_i) pm.todo_i, pm.project_id
        from seed_project_mentions pm
        join app.project_makers mk on mk.project_id = pm.project_id and mk.user_id = pm.user_id and mk.accepted
        order by pm.todo_i, pm.position;
        alter table seed_todo_project add primary key (todo_i);
        analyze seed_todo_project`)
      await tx.unsafe(`
        insert into app.todo_project_mentions (todo_id, project_id, position)
        select todo_id, project_id, position from seed_project_mentions`)
      await tx.unsafe(`
        insert into app.todo_user_mentions (todo_id, user_id, position)
        select s.id, u.id, name.position
        from seed_todos s
        cross join lateral app.extract_mentions(s.body, '@') name
        join app.users u on lower(u.username) = name.name
        where strpos(s.body, '@') > 0`)
    },
  },
  {
    label: 'comments and replies',
    weight: (o) => o.todos / 165_000,
    run: async (ctx) => {
      const { tx, options: o, anchor } = ctx
      const r = (expr: string, salt: number) => rnd(expr, salt, o.seed)
      await tx.unsafe(`
        create temp table seed_comments (
          id uuid primary key, todo_i bigint not null, j int not null, todo_id uuid not null, user_id uuid not null,
          parent_id uuid, body text not null, created_at timestamptz not null
        ) on commit drop`)
      // Per todo 0–3 comments (mean about 0.4); from the second on, 40% reply to the first.
      // Bodies: a phrase, 20% @mention the todo's author, 5% a #hashtag.
      await chunked(ctx, o.todos, (from, to) => tx.unsafe(`
        insert into seed_comments (id, todo_i, j, todo_id, user_id, parent_id, body, created_at)
        select md5('${o.seed}:comment:' || s.i || ':' || j)::uuid, s.i, j, s.id, u.id,
               case when j > 1 and ${r('s.i * 64 + j', 43)} < 0.4 then md5('${o.seed}:comment:' || s.i || ':1')::uuid end,
               p.phrase
               || case when ${r('s.i * 64 + j', 44)} < 0.20 then ' @' || a.username else '' end
               || case when ${r('s.i * 64 + j', 45)} < 0.05 then ' #' || t.hashtag else '' end,
               least(s.created_at + make_interval(secs => ${2 * DAY} * j * ${r('s.i * 64 + j', 46)}), $1::timestamptz)
        from seed_todos s
        cross join lateral generate_series(1, floor(4 * power(${r('s.i', 41)}, 6))::int) j
        join seed_users u on u.idx = (floor(${o.users} * ${r('s.i', 42)})::int + 7 * j) % ${o.users}
        join seed_users a on a.id = s.user_id
        join seed_phrases p on p.n = floor(2000 * ${r('s.i * 64 + j', 47)})::int
        join seed_tags t on t.n = floor(${Math.max(3, Math.round(o.users / 10))} * ${r('s.i * 64 + j', 48)})::int
        where s.i between ${from} and ${to}
        order by s.i, j`, [anchor]))
      await tx.unsafe(`analyze seed_comments`)
      await tx.unsafe(`
        insert into app.comment_project_mentions (comment_id, project_id, position)
        select c.id, p.id, tag.position
        from seed_comments c
        cross join lateral app.extract_mentions(c.body, '#') tag
        join app.projects p on lower(p.hashtag) = tag.name
        where strpos(c.body, '#') > 0`)
      await tx.unsafe(`
        insert into app.comment_user_mentions (comment_id, user_id, position)
        select c.id, u.id, name.position
        from seed_comments c
        cross join lateral app.extract_mentions(c.body, '@') name
        join app.users u on lower(u.username) = name.name
        where strpos(c.body, '@') > 0`)
      await tx.unsafe(`
        create temp table seed_comment_counts on commit drop as
        select todo_i, count(*)::int as n from seed_comments group by todo_i;
        alter table seed_comment_counts add primary key (todo_i);
        analyze seed_comment_counts`)
    },
  },
  {
    label: 'reactions on todos and comments',
    weight: (o) => o.todos / 53_000,
    run: async (ctx) => {
      const { tx, options: o, anchor } = ctx
      const r = (expr: string, salt: number) => rnd(expr, salt, o.seed)
      // Per todo: usually 0–11 (mean about 1.5), 0.2% are popular with 20–59. Reactors are
      // consecutive members from a random start, so (todo, member) is unique; never the author.
      // Each chunk also counts what it inserted per todo (by the todo's row number, which the
      // todo insert joins by range): counting afterwards from app.reactions would be another
      // pass over every reaction and a table keyed by todo id that each chunk of the todo
      // insert had to hash whole (every chunk paying for all todos: quadratic in the todos).
      await tx.unsafe(`
        create temp table seed_reaction_counts (todo_i bigint primary key, n int not null) on commit drop`)
      await chunked(ctx, o.todos, (from, to) => tx.unsafe(`
        with made as materialized (
          select s.i, j, md5('${o.seed}:reaction:' || s.i || ':' || j)::uuid as id, u.id as user_id, s.id as todo_id,
                 least(s.created_at + make_interval(secs => ${3 * DAY} * ${r('s.i * 64 + j', 21)}), $1::timestamptz) as created_at
          from seed_todos s
          cross join lateral generate_series(1, least(${o.users - 1}, case when ${r('s.i', 22)} < 0.002 then 20 + floor(40 * ${r('s.i', 23)})::int
                                                                           else floor(12 * power(${r('s.i', 24)}, 5))::int end)) j
          join seed_users u on u.idx = (floor(${o.users} * ${r('s.i', 25)})::int + j) % ${o.users}
          where s.i between ${from} and ${to} and u.id <> s.user_id
        ), inserted as (
          insert into app.reactions (id, user_id, todo_id, created_at)
          select id, user_id, todo_id, created_at from made order by i, j
        )
        insert into seed_reaction_counts (todo_i, n) select i, count(*) from made group by i`, [anchor]))
      await tx.unsafe(`analyze seed_reaction_counts`)
      // Comments: one in ten gets one or two.
      await tx.unsafe(`
        create temp table seed_comment_reaction_counts (comment_id uuid primary key, n int not null) on commit drop`)
      await tx.unsafe(`
        with made as materialized (
          select c.todo_i, c.j, k, md5('${o.seed}:comment-reaction:' || c.id || ':' || k)::uuid as id, u.id as user_id, c.id as comment_id,
                 least(c.created_at + make_interval(secs => ${DAY} * ${r('c.todo_i * 64 + c.j * 4 + k', 51)}), $1::timestamptz) as created_at
          from seed_comments c
          cross join lateral generate_series(1, floor(3 * power(${r('c.todo_i * 64 + c.j', 52)}, 6))::int) k
          join seed_users u on u.idx = (floor(${o.users} * ${r('c.todo_i * 64 + c.j', 53)})::int + k) % ${o.users}
          where u.id <> c.user_id
        ), inserted as (
          insert into app.reactions (id, user_id, comment_id, created_at)
          select id, user_id, comment_id, created_at from made order by todo_i, j, k
        )
        insert into seed_comment_reaction_counts (comment_id, n) select comment_id, count(*) from made group by comment_id`, [anchor])
      await tx.unsafe(`
        insert into app.comments (id, todo_id, user_id, parent_id, body, reactions_count, created_at, updated_at, author_privacy)
        select c.id, c.todo_id, c.user_id, c.parent_id, c.body, coalesce(n.n, 0), c.created_at, c.created_at, u.privacy
        from seed_comments c
        join app.users u on u.id = c.user_id
        left join seed_comment_reaction_counts n on n.comment_id = c.id
        order by c.todo_i, c.j`)
    },
  },
  {
    label: 'todos: insert',
    weight: (o) => o.todos / 73_000,
    run: async (ctx) => {
      const { tx, options: o } = ctx
      // local_date: the creation moment in the author's zone; author_privacy: the author's
      // privacy (both app.tg_todos__prepare); card: app.tg_todos__render_card's.
      await chunked(ctx, o.todos, (from, to) => tx.unsafe(`
        insert into app.todos (id, number, user_id, body, local_date, author_privacy, project_id, reactions_count,
                               comments_count, created_at, updated_at, card)
        overriding system value
        select s.id, s.i, s.user_id, s.body, (s.created_at at time zone s.time_zone)::date, u.privacy, tp.project_id,
               coalesce(rc.n, 0), coalesce(cc.n, 0), s.created_at, s.created_at,
               app.todo_card(s.id, s.created_at, s.created_at)
        from seed_todos s
        join app.users u on u.id = s.user_id
        left join seed_todo_project tp on tp.todo_i = s.i and tp.todo_i between ${from} and ${to}
        left join seed_reaction_counts rc on rc.todo_i = s.i and rc.todo_i between ${from} and ${to}
        left join seed_comment_counts cc on cc.todo_i = s.i and cc.todo_i between ${from} and ${to}
        where s.i between ${from} and ${to}
        order by s.i`))
      // Numbers are 1 … todos (the key on number is rebuilt at the end).
      await tx.unsafe(`select setval(pg_get_serial_sequence('app.todos', 'number'), ${Math.max(o.todos, 1)})`)
      // Every todo is carded above: the cards' backfill has nothing to walk.
      await tx.unsafe(`update app.todo_card_backfill set done = true`)
    },
  },
  {
    label: 'counters and streaks',
    weight: (o) => o.todos / 280_000,
    run: async ({ tx }) => {
      // Streaks as app.refresh_streak defines them: runs of consecutive covered days
      // (a todo or a used freeze); the last run and the longest one.
      await tx.unsafe(`
        with todo_counts as (
          select user_id, count(*)::int as n from app.todos group by user_id
        ), follower_counts as (
          select followee_id as user_id, count(*)::int as n from app.user_follows group by followee_id
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
          followers_count = coalesce(fc.n, 0),
          streak_last_day = s.last_day,
          streak_length = coalesce(s.length, 0),
          best_streak = coalesce(s.best, 0)
        from seed_users su
        left join todo_counts tc on tc.user_id = su.id
        left join follower_counts fc on fc.user_id = su.id
        left join streaks s on s.user_id = su.id
        where u.id = su.id`)
      await tx.unsafe(`
        update app.projects p set followers_count = f.n
        from (select project_id, count(*)::int as n from app.project_follows group by project_id) f
        where p.id = f.project_id`)
      await tx.unsafe(RECOUNT_TODO_TOTALS)
      // Each project's todos per author (app.project_todo_counts: a Project's todos_count).
      await tx`select app.recount_project_todos()`
    },
  },
  {
    label: 'rebuild indexes',
    weight: (o) => o.todos / 125_000,
    run: async ({ tx, indexes, constraints, progress }) => {
      const total = constraints.length + indexes.length
      for (const [n, key] of constraints.entries()) {
        await tx.unsafe(`alter table ${key.table} add constraint ${key.name} ${key.def}`)
        if (key.comment !== null) await tx.unsafe(`comment on constraint ${key.name} on ${key.table} is ${literal(key.comment)}`)
        if (key.index_comment !== null) await tx.unsafe(`comment on index ${key.table.split('.')[0]}.${key.name} is ${literal(key.index_comment)}`)
        progress.update((n + 1) / total)
      }
      for (const [n, index] of indexes.entries()) {
        await tx.unsafe(index.def)
        if (index.comment !== null) await tx.unsafe(`comment on index ${index.name} is ${literal(index.comment)}`)
        progress.update((constraints.length + n + 1) / total)
      }
    },
  },
]

function literal(text: string): string {
  return `'${text.replace(/'/g, "''")}'`
}

// ---------------------------------------------------------------------------------------------
// The fixture: API keys and picked ids for the benchmark, stored with the data
// ---------------------------------------------------------------------------------------------

async function createKey(tx: TransactionSql, userId: string): Promise<string> {
  const key = newApiKey()
  await tx`insert into app.api_keys (user_id, key_hash, read_only) values (${userId}, decode(${await sha256Hex(key)}, 'hex'), false)`
  return key
}

async function benchKey(tx: TransactionSql, user: { id: string; username: string; todos_count: number }): Promise<BenchKey> {
  return {
    id: `user_${user.id.replace(/-/g, '')}`,
    username: user.username,
    api_key: await createKey(tx, user.id),
    todos_count: user.todos_count,
  }
}

const isoDay = (at: Date) => at.toISOString().slice(0, 10)

/** The filtered lists' filters for a data set seeded at `seededAt` (see ListFilters). */
async function listFilters(tx: TransactionSql, seededAt: Date): Promise<ListFilters> {
  const sample = `select search from app.todos where number <= ${WORD_SAMPLE}`
  const [{ n }] = await tx.unsafe(`select count(*)::int as n from app.todos where number <= ${WORD_SAMPLE}`) as unknown as [{ n: number }]
  const words = (order: string) => tx.unsafe(`
    select s.word, s.ndoc from ts_stat($1) s
    where s.word ~ '^[a-z]{3,}$'
      and not exists (select 1 from app.projects p where lower(p.hashtag) = s.word)
      and not exists (select 1 from app.users u where lower(u.username) = s.word)
    order by ${order}, s.word
    limit 1`, [sample]) as unknown as Promise<{ word: string; ndoc: number }[]>
  const [common] = await words('s.ndoc desc')
  const [rare] = await words(`length(s.word) < 5, abs(s.ndoc - ${Math.max(1, Math.round(n / 1000))})`)
  const day = 86_400_000
  return {
    since_all: '1970',
    since_recent: isoDay(new Date(seededAt.getTime() - 30 * day)),
    until: isoDay(new Date(seededAt.getTime() - 365 * day)),
    prefix: (common?.word ?? 'the').slice(0, 1),
    prefix_word: common?.word ?? 'the',
    prefix_word_share: Math.round(((common?.ndoc ?? 0) / Math.max(1, n)) * 1000) / 1000,
    negated: rare?.word ?? 'zzzz',
    negated_share: Math.round(((rare?.ndoc ?? 0) / Math.max(1, n)) * 10000) / 10000,
    sample: n,
  }
}

async function makeFixture(tx: TransactionSql, options: SeedOptions, seconds: number, seededAt = new Date()): Promise<Fixture> {
  // Everything is picked by absolute properties, so a small and a large data set pick members,
  // projects and todos that render the same amount (the scale comparison relies on it): the
  // reader is the active public member whose todos_count is closest to 200.
  const members = await tx<{ id: string; username: string; todos_count: number }[]>`
    select u.id, u.username, u.todos_count from app.users u
    where u.subscription_active and u.privacy = 'public' and u.todos_count > 0
    order by abs(u.todos_count - 200), u.id
    limit 5`
  if (members.length < 2) throw new Error('the data set is too small for a benchmark fixture: seed at least 50 users')
  const [reader, writer, ...others] = [...members] as [typeof members[0], typeof members[0], ...typeof members]

  const [todo] = await tx<{ id: string; number: string; reactions_count: number }[]>`
    select t.id, t.number, t.reactions_count
    from app.todos t join app.users u on u.id = t.user_id
    where u.privacy = 'public' and t.project_id is not null
      and exists (select 1 from app.todo_user_mentions m where m.todo_id = t.id)
    order by (t.reactions_count >= 5) desc, t.number desc
    limit 1`
  if (!todo) throw new Error('no todo with a project and a mention: seed more todos')

  // A public project with two makers (each todo renders it with its owner and makers) and
  // about 150 todos, queried for a word that about 15 of them contain.
  const [project] = await tx<{ id: string; slug: string | null; hashtag: string; todos: number }[]>`
    with counts as (
      select t.project_id, count(*)::int as todos from app.todos t where t.project_id is not null group by t.project_id
    )
    select p.id, p.slug, p.hashtag, c.todos
    from counts c join app.projects p on p.id = c.project_id
    where p.privacy = 'public'
    order by (select count(*) from app.project_makers m where m.project_id = p.id and m.accepted) = 2 desc,
             (c.todos >= 30) desc, abs(c.todos - 150), p.id
    limit 1`
  if (!project) throw new Error('no public project has todos: seed more todos')

  const [word] = await tx<{ word: string; ndoc: number }[]>`
    select s.word, s.ndoc from ts_stat(${`select search from app.todos where project_id = '${project.id}'`}) s
    where length(s.word) >= 5 and s.word ~ '^[a-z]+$'
      and not exists (select 1 from app.projects p where lower(p.hashtag) = s.word)
      and not exists (select 1 from app.users u where lower(u.username) = s.word)
    order by abs(s.ndoc - 15), s.word
    limit 1`

  // More readers: like the reader (todos near 200, 20 to 60 followees), none of the others.
  const moreReaders = await tx<{ id: string; username: string; todos_count: number }[]>`
    select u.id, u.username, u.todos_count from app.users u
    where u.subscription_active and u.privacy = 'public' and u.todos_count > 0
      and u.id <> all (${members.map((m) => m.id)}::uuid[])
      and (select count(*) from app.user_follows f where f.follower_id = u.id) between 20 and 60
    order by abs(u.todos_count - 200), u.id
    limit ${BENCH_READERS - 1}`
  // More writers: active public members besides the readers and the writer, by id (which ones
  // does not matter, only that their posts and likes are spread).
  const moreWriters = await tx<{ id: string; username: string; todos_count: number }[]>`
    select u.id, u.username, u.todos_count from app.users u
    where u.subscription_active and u.privacy = 'public' and u.id <> ${reader.id} and u.id <> ${writer.id}
      and u.id <> all (${moreReaders.map((m) => m.id)}::uuid[])
    order by u.id
    limit ${BENCH_WRITERS - 1}`
  const writerKey = await benchKey(tx, writer)
  const writers = [writerKey]
  for (const member of moreWriters) writers.push(await benchKey(tx, member))

  const readerKey = await benchKey(tx, reader)
  const [mentioned] = await tx<{ username: string }[]>`
    select u.username from app.users u where u.id <> ${writer.id} order by u.followers_count desc, u.id limit 1`

  const counts: Record<string, number> = {}
  for (const table of ['app.users', 'app.projects', 'app.project_makers', 'app.user_follows', 'app.project_follows', 'app.mutes',
    'app.todos', 'app.todo_project_mentions', 'app.todo_user_mentions', 'app.comments', 'app.comment_project_mentions',
    'app.comment_user_mentions', 'app.reactions']) {
    const [row] = await tx.unsafe(`select count(*)::int as n from ${table}`)
    counts[table.replace(/^app\./, '')] = row!.n as number
  }
  const migrations = (await tx<{ version: string }[]>`select version from supabase_migrations.schema_migrations order by version`)
    .map((r) => r.version)

  return {
    format: SEED_FORMAT,
    fixture_format: FIXTURE_FORMAT,
    options,
    seeded_at: seededAt.toISOString(),
    seconds,
    migrations,
    counts,
    reader: readerKey,
    readers: [readerKey, ...await Promise.all(moreReaders.map((r) => benchKey(tx, r)))],
    writer: writerKey,
    writers,
    others: await Promise.all(others.map((o) => benchKey(tx, o))),
    todo: { id: `todo_${todo.id.replace(/-/g, '')}`, number: Number(todo.number), reactions_count: todo.reactions_count },
    project: {
      id: `proj_${project.id.replace(/-/g, '')}`,
      slug: project.slug,
      hashtag: project.hashtag,
      todos: project.todos,
      query: word?.word ?? 'the',
      query_matches: word?.ndoc ?? 0,
    },
    mention: { hashtag: project.hashtag, username: mentioned!.username },
    lists: await listFilters(tx, seededAt),
  }
}

/** Bytes as GiB (MiB below one GiB), for printouts. */
export function gib(bytes: number | undefined): string {
  if (bytes === undefined) return 'unknown size'
  return bytes >= 2 ** 30 ? `${(bytes / 2 ** 30).toFixed(1)} GiB` : `${Math.round(bytes / 2 ** 20)} MiB`
}

/** The fixture stored in a seeded database, or null (not seeded by this tool, or older data). */
export async function readFixture(sql: Sql): Promise<Fixture | null> {
  const [exists] = await sql`select to_regclass('seed.fixture') is not null as found`
  if (!exists?.found) return null
  const [row] = await sql<{ data: Fixture }[]>`select data from seed.fixture where id = 1`
  return row && row.data.format === SEED_FORMAT ? row.data : null
}

/** Picks the fixture again on seeded data (new keys for the picked members). */
export async function refreshFixture(sql: Sql, previous: Fixture): Promise<Fixture> {
  return await sql.begin(async (tx) => {
    // The previous fixture's keys go: they were made for the benchmark only.
    for (const member of [previous.reader, previous.writer, ...previous.others, ...(previous.writers ?? []).slice(1), ...(previous.readers ?? []).slice(1)]) {
      await tx`delete from app.api_keys where key_hash = decode(${await sha256Hex(member.api_key)}, 'hex')`
    }
    const made = await makeFixture(tx, previous.options, previous.seconds, new Date(previous.seeded_at))
    if (previous.steps) made.steps = previous.steps
    if (previous.disk_bytes !== undefined) made.disk_bytes = previous.disk_bytes
    await tx`update seed.fixture set data = ${tx.json(made as never)} where id = 1`
    return made
  })
}

/** Writes the fixture (with its API keys) to DATA_DIR/bench/fixture-<database>.json, mode 0600. */
export async function writeFixtureFile(dataDir: string, database: string, fixture: Fixture): Promise<string> {
  const dir = resolve(dataDir, 'bench')
  await mkdir(dir, { recursive: true })
  const file = resolve(dir, `fixture-${database}.json`)
  await writeFile(file, JSON.stringify(fixture, null, 2) + '\n', { mode: 0o600 })
  return file
}

// ---------------------------------------------------------------------------------------------
// Entry point
// ---------------------------------------------------------------------------------------------

export class SeedError extends Error {}

/**
 * Fills an empty, migrated database. `reset` first deletes every account (and so everything
 * else) and the previous fixture. Runs on one connection of `sql`.
 */
export async function seedDatabase(sql: Sql, options: SeedOptions, progress: Progress, { reset = false, chunk = CHUNK } = {}): Promise<Fixture> {
  if (!Number.isInteger(options.users) || options.users < 50) throw new SeedError('--users must be a whole number of at least 50')
  if (!Number.isInteger(options.todos) || options.todos < 100) throw new SeedError('--todos must be a whole number of at least 100')
  const started = performance.now()
  const anchor = new Date(Math.floor(Date.now() / 60_000) * 60_000)
  // Seconds per step, for the record (a step that grows faster than the data shows here).
  const steps: Record<string, number> = {}
  let stepStarted = { label: '', at: started }
  const endStep = () => {
    if (stepStarted.label) steps[stepStarted.label] = Math.round((performance.now() - stepStarted.at) / 100) / 10
  }
  const outer = progress
  progress = {
    total: (weight) => outer.total(weight),
    step: (label, weight) => {
      endStep()
      stepStarted = { label, at: performance.now() }
      outer.step(label, weight)
    },
    update: (fraction) => outer.update(fraction),
    done: () => {
      endStep()
      stepStarted = { label: '', at: performance.now() }
      outer.done()
    },
  }
  // Steps' weights, plus faker, the fixture and vacuum (their weights below).
  progress.total(STEPS.reduce((sum, s) => sum + s.weight(options), 0) + 0.3 + 1.3 + options.todos / 900_000)

  progress.step('faker: users, projects, phrases', 0.3)
  const vocab = vocabulary(options, anchor)

  const fixture = await sql.begin(async (tx) => {
    await tx.unsafe(`set local client_min_messages = warning`)
    try {
      await tx.unsafe(`set local session_replication_role = replica`)
    } catch (err) {
      throw new SeedError(`the seed skips row triggers with session_replication_role = replica, which needs a superuser (or GRANT SET ON PARAMETER session_replication_role): ${(err as Error).message}`)
    }
    // Only possible before the session's first temporary table: best effort.
    await tx.savepoint((sp) => sp.unsafe(`set local temp_buffers = '1GB'`)).catch(() => {})
    await tx.unsafe(`set local work_mem = '256MB'; set local maintenance_work_mem = '1GB'; set local synchronous_commit = off`)
    if (reset) {
      await tx.unsafe(`truncate auth.users, app.users, app.projects, app.todos, app.reactions, app.streak_freezes restart identity cascade`)
      await tx.unsafe(`truncate app.todo_hours, app.todo_hours_sealed`)
      await tx.unsafe(`drop schema if exists seed cascade`)
    }
    const [existing] = await tx<{ n: number }[]>`select count(*)::int as n from app.users`
    if (existing!.n > 0) {
      throw new SeedError(`the database already has ${existing!.n} users: pass --reset to delete every account first, or --database NAME to seed another database`)
    }
    const ctx: Ctx = { tx, options, anchor, progress, vocab, indexes: [], constraints: [], chunk }
    for (const step of STEPS) {
      progress.step(step.label, step.weight(options))
      await step.run(ctx)
    }
    progress.step('fixture: API keys for bench members', 1.3)
    await tx.unsafe(`set local session_replication_role = origin`)
    const made = await makeFixture(tx, options, 0)
    await tx.unsafe(`
      create schema if not exists seed;
      revoke all on schema seed from public;
      create table if not exists seed.fixture (id integer primary key check (id = 1), data jsonb not null);
      comment on schema seed is 'Written by npm run seed: the benchmark fixture (plain-text API keys of seeded members). Not for production.'`)
    await tx`insert into seed.fixture (id, data) values (1, ${tx.json(made as never)})
             on conflict (id) do update set data = excluded.data`
    return made
  })

  // The todos went in with the triggers off: their hours are counted now, as the storage worker
  // would (app.seal_todo_hours), from scratch (a migration may have sealed the empty database).
  await sql`truncate app.todo_hours, app.todo_hours_sealed`
  await sql`select app.seal_todo_hours()`
  progress.step('vacuum analyze', options.todos / 900_000)
  for (const table of ['app.users', 'app.projects', 'app.project_makers', ...BULK_TABLES]) {
    await sql.unsafe(`vacuum (analyze) ${table}`)
  }
  endStep()
  stepStarted = { label: '', at: performance.now() }
  fixture.seconds = Math.round((performance.now() - started) / 100) / 10
  fixture.steps = steps
  const [size] = await sql<{ bytes: string }[]>`select pg_database_size(current_database())::text as bytes`
  fixture.disk_bytes = Number(size!.bytes)
  await sql`update seed.fixture set data = data || ${sql.json({ seconds: fixture.seconds, steps, disk_bytes: fixture.disk_bytes } as never)} where id = 1`
  progress.done()
  return fixture
}
