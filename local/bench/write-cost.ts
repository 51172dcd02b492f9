// What keeping counts on write costs the writes (issue 26, item 3: "writes that keep the new
// counts cost ≤ 1.10× on POST /v1/todos and DELETE /v1/todos/{id}"), in one run:
// `npm run bench -- --write-cost TRIGGER[,TRIGGER…]`.
//
// The verdict comes from the database (measureDatabaseWriteCost): one connection calls the
// endpoints' statements (functions/lib/db.ts callApi, as the API sends them) in transactions
// that are rolled back, in blocks of calls that alternate between the named triggers enabled
// and disabled (ALTER TABLE … DISABLE TRIGGER inside the transaction, so no other session sees
// it and a killed run leaves nothing disabled). Both scenarios delete the same todos, and
// alternate blocks are milliseconds apart. The database time of a write is what the triggers
// add to, so this ratio is at least the HTTP one. 5-10 s HTTP runs on a shared 2-core machine
// move ±15-30% between rounds, which cannot resolve a 10% goal.
//
// `--write-cost-http` adds the HTTP rounds (measureWriteCost): both endpoints against the API at
// the bench's concurrency, the triggers enabled and disabled for everyone (committed), in
// interleaved rounds, req/s disabled ÷ enabled. A disabled round is consistent on its own: the
// deletion targets are made, the writes run and what they made is removed, all with the
// triggers disabled. The triggers are enabled again after every round; a run killed in one
// leaves them disabled, and the next --write-cost enables them and recounts what they keep
// (repairInterruptedRun).
import type { ReservedSql, Sql } from 'postgres'
import { callApi, type CallContext } from '../../functions/lib/db.ts'
import type { Endpoint } from './endpoints.ts'
import type { Measurement } from './load.ts'
import { RENDERING_TRIGGERS } from './render-cost.ts'

/** Issue 26: a write that keeps the new counts costs at most 1.10× the write without them. */
export const WRITE_COST_GOAL = 1.1

export interface WriteCostRun {
  endpoint: string
  scenario: 'triggers enabled' | 'triggers disabled'
  rps: number
  p50: number | null
  p99: number | null
  errors: number
}

export interface WriteCost {
  /** The triggers, as table.trigger. */
  triggers: string[]
  rounds: number
  /** Per endpoint and scenario, the round with the median req/s. */
  runs: WriteCostRun[]
  /** Per endpoint: req/s with the triggers disabled over req/s with them (the cost, ≥ 1 when they cost). */
  cost: Record<string, number | null>
  goal: number
  met: boolean
}

interface Trigger {
  table: string
  name: string
}

/** The app triggers named `names` (a name, or table.name when it is not unique), or an error listing those of app.todos. */
async function findTriggers(sql: Sql, names: string[]): Promise<Trigger[]> {
  const rows = await sql<{ table: string; name: string; enabled: string }[]>`
    select t.tgrelid::regclass::text as table, t.tgname as name, t.tgenabled as enabled
    from pg_trigger t join pg_class c on c.oid = t.tgrelid join pg_namespace n on n.oid = c.relnamespace
    where n.nspname = 'app' and not t.tgisinternal
    order by 1, 2`
  const found: Trigger[] = []
  for (const name of names) {
    const matches = rows.filter((r) => r.name === name || `${r.table}.${r.name}` === name)
    if (matches.length !== 1) {
      const todos = rows.filter((r) => r.table === 'app.todos').map((r) => r.name).join(', ')
      throw new Error(`--write-cost: ${matches.length === 0 ? 'no' : 'more than one'} trigger ${JSON.stringify(name)} in schema app ` +
        `(write table.name when the name is not unique); app.todos has: ${todos}`)
    }
    if (matches[0]!.enabled === 'D') {
      throw new Error(`--write-cost: trigger ${name} is disabled, so the counts it keeps may be wrong (an interrupted run?): seed again with --reseed`)
    }
    found.push({ table: matches[0]!.table, name: matches[0]!.name })
  }
  return found
}

async function setTriggers(sql: Sql, triggers: Trigger[], enabled: boolean): Promise<void> {
  for (const t of triggers) await sql.unsafe(`alter table ${t.table} ${enabled ? 'enable' : 'disable'} trigger ${JSON.stringify(t.name)}`)
}

export async function measureWriteCost(options: {
  /** A superuser connection to the large data set. */
  admin: Sql
  triggers: string[]
  /** POST /v1/todos and DELETE /v1/todos/{id}. */
  endpoints: Endpoint[]
  /** One measured run of `endpoint` against the API (warm-up, targets and cleanup included). */
  run: (endpoint: Endpoint) => Promise<Measurement>
  rounds?: number
  log?: (line: string) => void
}): Promise<WriteCost> {
  const rounds = options.rounds ?? 3
  const log = options.log ?? (() => {})
  const triggers = await findTriggers(options.admin, options.triggers)
  // These rounds commit: with a card trigger off, the todos they touch would keep a stale card.
  const rendering = triggers.filter((t) => RENDERING_TRIGGERS.some(([table, name]) => t.table === table && t.name === name))
  if (rendering.length > 0) {
    throw new Error(`--write-cost-http: ${rendering.map((t) => t.name).join(', ')} keep app.todos.card; their HTTP rounds would commit stale cards. Measure them with --render-cost (rolled back).`)
  }
  const measured: { endpoint: string; scenario: WriteCostRun['scenario']; m: Measurement }[] = []
  try {
    for (let round = 0; round < rounds; round++) {
      // Alternate which scenario goes first, so neither always runs on a fresher machine.
      const order: WriteCostRun['scenario'][] = round % 2 === 0 ? ['triggers enabled', 'triggers disabled'] : ['triggers disabled', 'triggers enabled']
      for (const scenario of order) {
        await setTriggers(options.admin, triggers, scenario === 'triggers enabled')
        try {
          for (const endpoint of options.endpoints) {
            const m = await options.run(endpoint)
            measured.push({ endpoint: endpoint.name, scenario, m })
            log(`  write cost, round ${round + 1}/${rounds}, ${endpoint.name}, ${scenario}: ${m.rps} req/s, p50 ${m.p50} ms, ${m.errors} errors`)
          }
        } finally {
          await setTriggers(options.admin, triggers, true)
        }
      }
    }
  } finally {
    await setTriggers(options.admin, triggers, true)
  }
  const runs: WriteCostRun[] = []
  const cost: Record<string, number | null> = {}
  for (const endpoint of options.endpoints) {
    const median = (scenario: WriteCostRun['scenario']) => {
      const ms = measured.filter((x) => x.endpoint === endpoint.name && x.scenario === scenario).map((x) => x.m).sort((a, b) => a.rps - b.rps)
      const m = ms[Math.floor(ms.length / 2)]!
      runs.push({ endpoint: endpoint.name, scenario, rps: m.rps, p50: m.p50, p99: m.p99, errors: m.errors })
      return m
    }
    const enabled = median('triggers enabled')
    const disabled = median('triggers disabled')
    cost[endpoint.name] = enabled.rps > 0 ? Math.round((disabled.rps / enabled.rps) * 100) / 100 : null
  }
  const met = Object.values(cost).every((c) => c !== null && c <= WRITE_COST_GOAL)
  return { triggers: triggers.map((t) => `${t.table}.${t.name}`), rounds, runs, cost, goal: WRITE_COST_GOAL, met }
}

/** The triggers whose counts repairInterruptedRun can rebuild: app.todo_hours's (the seed seals them the same way). */
const HOURS_TRIGGERS = new Set(['_310_count_sealed_hours', '_310_count_backdated'])
/** …and app.project_todo_counts's (issue 28: a Project's todos_count), recounted by app.recount_project_todos. */
const PROJECT_TRIGGERS = new Set(['_320_count_project_todos', '_320_uncount_project_todos', '_320_move_project_todos'])

/**
 * A --write-cost-http run killed inside a disabled round (SIGTERM stops the embedded server
 * before any handler of ours could run SQL) leaves the named triggers disabled and what they
 * keep missing what its writes did. Enables the hours' and the project counters' triggers again
 * and recounts what they keep from the todos, as the seed does; returns what it repaired. Any
 * other disabled trigger of app is left to findTriggers, which refuses it.
 */
export async function repairInterruptedRun(sql: Sql, log: (line: string) => void = () => {}): Promise<string[]> {
  const disabled = await sql<{ name: string }[]>`
    select t.tgname as name from pg_trigger t
    where t.tgrelid = 'app.todos'::regclass and not t.tgisinternal and t.tgenabled = 'D'`
  const repairable = disabled.map((t) => t.name).filter((n) => HOURS_TRIGGERS.has(n) || PROJECT_TRIGGERS.has(n))
  if (repairable.length === 0) return []
  const hours = repairable.some((n) => HOURS_TRIGGERS.has(n))
  const projects = repairable.some((n) => PROJECT_TRIGGERS.has(n))
  await sql.begin(async (tx) => {
    for (const name of repairable) await tx.unsafe(`alter table app.todos enable trigger ${JSON.stringify(name)}`)
    if (hours) {
      await tx.unsafe('truncate app.todo_hours, app.todo_hours_sealed')
      await tx.unsafe('select app.seal_todo_hours()')
    }
    if (projects) await tx.unsafe('select app.recount_project_todos()')
  })
  log(`  an interrupted write-cost run had left ${repairable.join(', ')} disabled: enabled again, ` +
    [hours && 'app.todo_hours', projects && 'app.project_todo_counts'].filter(Boolean).join(' and ') + ' recounted')
  return repairable
}

export interface DatabaseWriteCostKind {
  /** What the call is: an endpoint, and for deletions which hours the todos lie in. */
  kind: string
  /** Mean database time per call over every round, ms. */
  enabled_ms: number
  disabled_ms: number
  /** enabled ÷ disabled: what the triggers add to the call (≥ 1 when they cost). */
  cost: number
  /** Each round's own enabled ÷ disabled: the spread of the measurement. */
  round_costs: number[]
}

export interface DatabaseWriteCost {
  triggers: string[]
  rounds: number
  /** Blocks per round, alternating between the scenarios. */
  blocks: number
  calls_per_block: number
  kinds: DatabaseWriteCostKind[]
  goal: number
  met: boolean
}

/** A member's credential for the calls: a write key, as the bench's writers have. */
export interface Writer {
  id: string
  context: CallContext
}

/**
 * The triggers' cost measured in the database (see the top of this file). Each round is one
 * transaction, rolled back, of `blocks` blocks that alternate between the triggers enabled and
 * disabled (ALTER TABLE in the transaction, then one untimed post, which replans what the change
 * invalidated); a block times `calls` calls of every kind. Kinds: POST /v1/todos; DELETE of a
 * todo of the current hour (made at the round's start, unmeasured: the usual deletion, a todo
 * just posted); DELETE of a todo of a sealed hour (the writers' seeded todos: the case the
 * triggers work in). Blocks are milliseconds apart, so the machine's drift hits both scenarios
 * alike; the sealed todos of block k are deleted with the triggers in even rounds and without in
 * odd ones, so both scenarios delete the same todos. The cost is the total time with the
 * triggers over the total without, per kind.
 */
export async function measureDatabaseWriteCost(options: {
  /** A superuser connection to the large data set. */
  admin: Sql
  triggers: string[]
  writers: Writer[]
  /** The body of posted todos (with a #hashtag and @mention, as POST /v1/todos's run). */
  body: string
  rounds?: number
  blocks?: number
  calls?: number
  log?: (line: string) => void
}): Promise<DatabaseWriteCost> {
  const rounds = options.rounds ?? 12
  const blocks = options.blocks ?? 20
  const calls = options.calls ?? 10
  const log = options.log ?? (() => {})
  const triggers = await findTriggers(options.admin, options.triggers)
  const writerIds = options.writers.map((w) => w.id)
  const byId = new Map(options.writers.map((w) => [w.id, w]))
  const perRound = blocks * calls
  const sealed = await options.admin<{ id: string; user_id: string }[]>`
    select 'todo_' || replace(t.id::text, '-', '') as id, t.user_id::text as user_id
    from app.todos t
    where t.user_id = any(${writerIds}::uuid[])
      and t.created_at < (select s.until from app.todo_hours_sealed s)
    order by t.id
    limit ${perRound}`
  if (sealed.length < perRound) throw new Error(`--write-cost: the writers have ${sealed.length} todos in sealed hours, ${perRound} needed`)
  const kinds = ['POST /v1/todos', 'DELETE /v1/todos/{id}, a todo of this hour', 'DELETE /v1/todos/{id}, a todo of a sealed hour'] as const
  type Scenario = 'enabled' | 'disabled'
  // Per kind, scenario and round: the summed ms of its timed calls.
  const totals = new Map<string, number[]>()
  const add = (kind: string, scenario: Scenario, round: number, ms: number) => {
    const key = `${kind}|${scenario}`
    const list = totals.get(key) ?? Array.from({ length: rounds }, () => 0)
    list[round]! += ms
    totals.set(key, list)
  }
  const connection: ReservedSql = await options.admin.reserve()
  try {
    for (let round = 0; round < rounds; round++) {
      await connection.unsafe('begin')
      try {
        // Deferred constraint checks run at the end of each statement instead of at commit:
        // ALTER TABLE refuses a table with trigger events still pending, and a request pays
        // those checks at its commit anyway.
        await connection.unsafe('set constraints all immediate')
        const fresh = await connection<{ id: string; user_id: string }[]>`
          insert into app.todos (user_id, body)
          select w.id, 'Made by the benchmark to be deleted ' || n
          from generate_series(1, ${perRound}) n
          cross join lateral (select (${writerIds}::uuid[])[1 + n % ${writerIds.length}] as id) w
          returning 'todo_' || replace(id::text, '-', '') as id, user_id::text as user_id`
        for (let block = 0; block < blocks; block++) {
          const scenario: Scenario = (block + round) % 2 === 0 ? 'enabled' : 'disabled'
          for (const t of triggers) await connection.unsafe(`alter table ${t.table} ${scenario === 'enabled' ? 'enable' : 'disable'} trigger ${JSON.stringify(t.name)}`)
          const post = (k: number) => callApi(connection, contextOf(byId, writerIds[k % writerIds.length]!), 'api.todo_create', [options.body, []])
          // Untimed: the first statement after the ALTER replans what it invalidated.
          await post(block)
          await connection.unsafe('reset role')
          const timed = async (kind: string, call: (k: number) => Promise<unknown>) => {
            for (let i = 0; i < calls; i++) {
              const k = block * calls + i
              const t0 = performance.now()
              await call(k)
              add(kind, scenario, round, performance.now() - t0)
              // callApi switches to the member's role for the rest of the transaction.
              await connection.unsafe('reset role')
            }
          }
          await timed(kinds[0], post)
          await timed(kinds[1], (k) => callApi(connection, contextOf(byId, fresh[k]!.user_id), 'api.todo_delete', [fresh[k]!.id]))
          await timed(kinds[2], (k) => callApi(connection, contextOf(byId, sealed[k]!.user_id), 'api.todo_delete', [sealed[k]!.id]))
        }
      } finally {
        await connection.unsafe('rollback')
      }
      log(`  write cost in the database, round ${round + 1}/${rounds}: ` + kinds.map((k) =>
        `${k} ${(totals.get(`${k}|enabled`)![round]! / totals.get(`${k}|disabled`)![round]!).toFixed(2)}×`).join('; '))
    }
  } finally {
    connection.release()
  }
  const round3 = (v: number) => Math.round(v * 1000) / 1000
  const sum = (values: number[]) => values.reduce((a, b) => a + b, 0)
  // Each scenario ran blocks/2 blocks of `calls` calls per round.
  const callsPerScenario = rounds * (blocks / 2) * calls
  const result: DatabaseWriteCostKind[] = kinds.map((kind) => {
    const enabled = totals.get(`${kind}|enabled`)!
    const disabled = totals.get(`${kind}|disabled`)!
    return {
      kind,
      enabled_ms: round3(sum(enabled) / callsPerScenario),
      disabled_ms: round3(sum(disabled) / callsPerScenario),
      cost: Math.round((sum(enabled) / sum(disabled)) * 100) / 100,
      round_costs: enabled.map((e, i) => Math.round((e / disabled[i]!) * 100) / 100),
    }
  })
  return {
    triggers: triggers.map((t) => `${t.table}.${t.name}`), rounds, blocks, calls_per_block: calls, kinds: result, goal: WRITE_COST_GOAL,
    met: result.every((k) => k.cost <= WRITE_COST_GOAL),
  }
}

function contextOf(byId: Map<string, Writer>, id: string): CallContext {
  const writer = byId.get(id)
  if (!writer) throw new Error(`--write-cost: no credential for writer ${id}`)
  return writer.context
}
