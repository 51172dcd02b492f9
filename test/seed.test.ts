// The benchmark's seed generator loads set-based with the row triggers off, so it computes
// what the triggers would (mentions, owning project, local day, counters, streaks) itself.
// This proves, on a small data set, that what it wrote equals what the triggers compute.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { seedDatabase } from '../local/bench/seed-data.ts'
import { silentProgress } from '../local/bench/progress.ts'
import { type TestWorld, startWorld } from './support/app.ts'

let world: TestWorld
/** The keys, constraints and indexes of schema app (with their comments) as the migrations made them. */
let catalogBefore: unknown[]

const catalog = async () => await world.sql`
  select 'constraint' as kind, c.conrelid::regclass::text as table, c.conname as name, pg_get_constraintdef(c.oid) as def,
         obj_description(c.oid, 'pg_constraint') as comment
  from pg_constraint c join pg_namespace n on n.oid = c.connamespace where n.nspname = 'app'
  union all
  select 'index', i.indrelid::regclass::text, i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid),
         obj_description(i.indexrelid, 'pg_class')
  from pg_index i join pg_class t on t.oid = i.indrelid join pg_namespace n on n.oid = t.relnamespace where n.nspname = 'app'
  order by 1, 2, 3`

beforeAll(async () => {
  world = await startWorld()
  catalogBefore = await catalog()
  // Chunks of 700 todos: the chunked steps (bodies, comments, reactions and their counts, the
  // todo insert joining those counts by range) cross chunk bounds, as they do at 1M.
  await seedDatabase(world.sql, { users: 120, todos: 3000, seed: 7 }, silentProgress, { chunk: 700 })
}, 120_000)
afterAll(() => world.close())

const mismatches = async (query: string) => (await world.sql.unsafe(query)).length

describe('seed generator', () => {
  it('left every key, constraint and index as the migrations made them (it drops and rebuilds some for the load)', async () => {
    expect(catalogBefore.length).toBeGreaterThan(50)
    expect(await catalog()).toEqual(catalogBefore)
  })

  it('made the data set it was asked for', async () => {
    const [row] = await world.sql`select (select count(*) from app.users)::int as users, (select count(*) from app.todos)::int as todos,
                                         (select count(*) from app.reactions)::int as reactions, (select count(*) from app.comments)::int as comments`
    expect(row!.users).toBeGreaterThanOrEqual(120)
    expect(row!.todos).toBe(3000)
    expect(row!.reactions).toBeGreaterThan(0)
    expect(row!.comments).toBeGreaterThan(0)
  })

  it('counters equal the rows they count', async () => {
    expect(await mismatches(`select 1 from app.users u where u.todos_count <> (select count(*) from app.todos t where t.user_id = u.id)`)).toBe(0)
    expect(await mismatches(`select 1 from app.users u where u.followers_count <> (select count(*) from app.user_follows f where f.followee_id = u.id)`)).toBe(0)
    expect(await mismatches(`select 1 from app.projects p where p.followers_count <> (select count(*) from app.project_follows f where f.project_id = p.id)`)).toBe(0)
    expect(await mismatches(`select 1 from app.todo_totals tt where tt.todos <> (select count(*) from app.todos t
                             where t.author_privacy = tt.privacy and app.todo_total_shard(t.user_id) = tt.shard)`)).toBe(0)
    expect(await mismatches(`select 1 from app.todos t where t.reactions_count <> (select count(*) from app.reactions r where r.todo_id = t.id)
                                or t.comments_count <> (select count(*) from app.comments c where c.todo_id = t.id)`)).toBe(0)
    expect(await mismatches(`select 1 from app.comments c where c.reactions_count <> (select count(*) from app.reactions r where r.comment_id = c.id)`)).toBe(0)
    expect(await mismatches(`select 1 from app.project_todo_counts c
                             full join (select project_id, user_id, count(*) as n from app.todos where project_id is not null group by 1, 2) r
                               on r.project_id = c.project_id and r.user_id = c.user_id
                             where coalesce(c.todos, 0) <> coalesce(r.n, 0)`)).toBe(0)
    const [{ n }] = await world.sql`select count(*)::int as n from app.project_todo_counts` as unknown as [{ n: number }]
    expect(n).toBeGreaterThan(0)
  })

  it('local days, authors\' privacy, cards, owning projects and mentions are what the triggers compute', async () => {
    expect(await mismatches(`select 1 from app.todos t join app.users u on u.id = t.user_id
                             where t.local_date <> (t.created_at at time zone u.time_zone)::date`)).toBe(0)
    expect(await mismatches(`select 1 from app.todos t join app.users u on u.id = t.user_id
                             where t.author_privacy <> u.privacy`)).toBe(0)
    // The comments' copy too (triggers are off while the seed writes; comments policy and totals read it).
    expect(await mismatches(`select 1 from app.comments c join app.users u on u.id = c.user_id
                             where c.author_privacy <> u.privacy`)).toBe(0)
    expect(await mismatches(`select 1 from app.todos t
                             where t.card is distinct from app.todo_card(t.id, t.created_at, t.updated_at)`)).toBe(0)
    expect(await mismatches(`select 1 from app.todos t where t.project_id is distinct from (
                               select p.id from app.extract_mentions(t.body, '#') tag
                               join app.projects p on lower(p.hashtag) = tag.name
                               join app.project_makers m on m.project_id = p.id and m.user_id = t.user_id and m.accepted
                               order by tag.position limit 1)`)).toBe(0)
    expect(await mismatches(`(select m.todo_id, m.project_id, m.position from app.todo_project_mentions m
                              except select t.id, p.id, tag.position from app.todos t, app.extract_mentions(t.body, '#') tag
                                     join app.projects p on lower(p.hashtag) = tag.name)
                             union all
                             (select t.id, p.id, tag.position from app.todos t, app.extract_mentions(t.body, '#') tag
                                     join app.projects p on lower(p.hashtag) = tag.name
                              except select m.todo_id, m.project_id, m.position from app.todo_project_mentions m)`)).toBe(0)
    expect(await mismatches(`(select m.todo_id, m.user_id from app.todo_user_mentions m
                              except select t.id, u.id from app.todos t, app.extract_mentions(t.body, '@') name join app.users u on lower(u.username) = name.name)
                             union all
                             (select t.id, u.id from app.todos t, app.extract_mentions(t.body, '@') name join app.users u on lower(u.username) = name.name
                              except select m.todo_id, m.user_id from app.todo_user_mentions m)`)).toBe(0)
  })

  it('streaks are what app.refresh_streak computes', async () => {
    const before = await world.sql`select id, streak_last_day::text, streak_length, best_streak from app.users order by id`
    await world.sql`select app.refresh_streak(id) from app.users`
    const after = await world.sql`select id, streak_last_day::text, streak_length, best_streak from app.users order by id`
    expect(after).toEqual(before)
  })
})
