// What keeping renderings on write costs the writes (issue 27, item 3): `npm run bench --
// --render-cost`. The renderings are stored generated columns (app.users.card, app.projects.card,
// app.uploads.card: supabase/schemas/70_rendering.sql) and the todos' cards (app.todos.card, kept
// by the _120_render_card triggers), so "off" is the same tables with those columns' expressions
// dropped (ALTER TABLE … ALTER COLUMN … DROP EXPRESSION: the values stay, nothing computes them)
// and the card triggers disabled, undone by rolling back to a savepoint. As the write-cost section
// of issue 26 (local/bench/write-cost.ts), it times each write's statement on one connection, as
// callApi sends it, in rolled-back rounds whose blocks alternate between kept and off milliseconds
// apart, so the machine's drift hits both alike. Writes: POST /v1/todos (its card; updates the
// author's row: todos_count, streak), POST /v1/reactions and POST /v1/comments (update the todo's
// counters, which moves updated_at: its card is rendered again), PATCH /v1/users/me (a profile
// edit), and a project rename (an operator's UPDATE: the API has no project edit). Goal ≤ 1.15×.
import type { ReservedSql, Sql } from 'postgres'
import { callApi } from '../../functions/lib/db.ts'
import type { Writer } from './write-cost.ts'

export const RENDER_COST_GOAL = 1.15

/** The generated columns that hold renderings; "off" drops their expressions. */
const RENDERINGS = [['app.users', 'card'], ['app.projects', 'card'], ['app.uploads', 'card']] as const
/** The triggers that keep renderings in plain columns; "off" disables them. */
export const RENDERING_TRIGGERS = [['app.todos', '_120_render_card'], ['app.todos', '_120_render_card_on_update']] as const

export interface RenderCostKind {
  kind: string
  /** Mean database time per call, ms, with the renderings kept on write and without. */
  kept_ms: number
  off_ms: number
  /** kept ÷ off. */
  cost: number
  round_costs: number[]
}

export interface RenderCost {
  renderings: string[]
  rounds: number
  blocks: number
  calls_per_block: number
  kinds: RenderCostKind[]
  goal: number
  met: boolean
}

export async function measureRenderCost(options: {
  /** A superuser connection to the large data set. */
  admin: Sql
  writers: Writer[]
  body: string
  rounds?: number
  blocks?: number
  calls?: number
  log?: (line: string) => void
}): Promise<RenderCost> {
  const rounds = options.rounds ?? 8
  const blocks = options.blocks ?? 20
  const calls = options.calls ?? 10
  const log = options.log ?? (() => {})
  const writers = options.writers
  if (writers.length === 0) throw new Error('--render-cost: the data set has no writers')
  const perRound = blocks * calls
  // Todos to like and comment on: public todos of members who are not writers, one per call.
  const targets = await options.admin<{ id: string }[]>`
    select 'todo_' || replace(t.id::text, '-', '') as id from app.todos t
    where t.author_privacy = 'public' and t.user_id <> all(${writers.map((w) => w.id)}::uuid[])
    order by t.created_at desc limit ${perRound}`
  if (targets.length < perRound) throw new Error(`--render-cost: ${targets.length} public todos to react to, ${perRound} needed`)
  const [project] = await options.admin<{ id: string }[]>`select id from app.projects order by followers_count desc limit 1`
  if (!project) throw new Error('--render-cost: the data set has no project')

  const kinds = ['POST /v1/todos', 'POST /v1/reactions', 'POST /v1/comments', 'PATCH /v1/users/me', 'project rename'] as const
  type Scenario = 'kept' | 'off'
  const totals = new Map<string, number[]>()
  const add = (kind: string, scenario: Scenario, round: number, ms: number) => {
    const key = `${kind}|${scenario}`
    const list = totals.get(key) ?? Array.from({ length: rounds }, () => 0)
    list[round]! += ms
    totals.set(key, list)
  }
  const writer = (k: number) => writers[k % writers.length]!
  const connection: ReservedSql = await options.admin.reserve()
  try {
    for (let round = 0; round < rounds; round++) {
      await connection.unsafe('begin')
      try {
        await connection.unsafe('set constraints all immediate')
        // Thousands of writes per member and round: the limits would refuse them (rolled back).
        await connection.unsafe('update app.rate_limits set max_events = 1000000000')
        for (let block = 0; block < blocks; block++) {
          const scenario: Scenario = (block + round) % 2 === 0 ? 'kept' : 'off'
          await connection.unsafe('savepoint block')
          if (scenario === 'off') {
            for (const [table, column] of RENDERINGS) await connection.unsafe(`alter table ${table} alter column ${column} drop expression`)
            for (const [table, trigger] of RENDERING_TRIGGERS) await connection.unsafe(`alter table ${table} disable trigger ${trigger}`)
          }
          // Untimed: the first statements after the ALTER replan what it invalidated.
          await callApi(connection, writer(block).context, 'api.todo_create', [options.body, []])
          await connection.unsafe('reset role')
          await callApi(connection, writer(block).context, 'api.user_update_me', [{ bio: `warm ${block}` }])
          await connection.unsafe('reset role')
          const timed = async (kind: string, call: (k: number) => Promise<unknown>) => {
            for (let i = 0; i < calls; i++) {
              const k = block * calls + i
              const t0 = performance.now()
              await call(k)
              add(kind, scenario, round, performance.now() - t0)
              await connection.unsafe('reset role')
            }
          }
          await timed(kinds[0], (k) => callApi(connection, writer(k).context, 'api.todo_create', [options.body, []]))
          await timed(kinds[1], (k) => callApi(connection, writer(k).context, 'api.reaction_create', ['Todo', targets[k]!.id]))
          await timed(kinds[2], (k) => callApi(connection, writer(k).context, 'api.comment_create', ['Todo', targets[k]!.id, 'Nice one, benchmarked', [], null]))
          await timed(kinds[3], (k) => callApi(connection, writer(k).context, 'api.user_update_me', [{ bio: `Benchmarked profile ${round}.${k}`, first_name: `Bench ${k % 7}` }]))
          await timed(kinds[4], (k) => connection`update app.projects set name = ${`Benchmarked ${round}.${k}`} where id = ${project.id}`)
          await connection.unsafe('rollback to savepoint block')
        }
      } finally {
        await connection.unsafe('rollback')
      }
      log(`  render cost, round ${round + 1}/${rounds}: ` + kinds.map((k) =>
        `${k} ${(totals.get(`${k}|kept`)![round]! / totals.get(`${k}|off`)![round]!).toFixed(2)}×`).join('; '))
    }
  } finally {
    connection.release()
  }
  const round3 = (v: number) => Math.round(v * 1000) / 1000
  const sum = (values: number[]) => values.reduce((a, b) => a + b, 0)
  const callsPerScenario = rounds * (blocks / 2) * calls
  const result: RenderCostKind[] = kinds.map((kind) => {
    const kept = totals.get(`${kind}|kept`)!
    const off = totals.get(`${kind}|off`)!
    return {
      kind,
      kept_ms: round3(sum(kept) / callsPerScenario),
      off_ms: round3(sum(off) / callsPerScenario),
      cost: Math.round((sum(kept) / sum(off)) * 100) / 100,
      round_costs: kept.map((e, i) => Math.round((e / off[i]!) * 100) / 100),
    }
  })
  return {
    renderings: [...RENDERINGS.map(([t, c]) => `${t}.${c}`), ...RENDERING_TRIGGERS.map(([t, name]) => `${t} trigger ${name}`)], rounds, blocks, calls_per_block: calls, kinds: result, goal: RENDER_COST_GOAL,
    met: result.every((k) => k.cost <= RENDER_COST_GOAL),
  }
}
