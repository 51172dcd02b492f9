// What keeping counts on write costs the writes (issue 26, item 3: "writes that keep the new
// counts cost ≤ 1.10× on POST /v1/todos and DELETE /v1/todos/{id}"), in one run:
// `npm run bench -- --write-cost TRIGGER[,TRIGGER…]` measures both endpoints against the API on
// the large data set with the named triggers enabled and disabled (the figure without them),
// in interleaved rounds so that drift hits both alike, and reports req/s disabled ÷ enabled.
//
// A disabled round is consistent on its own: the deletion targets are made, the writes run and
// what they made is removed, all with the triggers disabled, so the counts they keep are never
// half-kept; the triggers are enabled again after every round, and in any case at the end.
import type { Sql } from 'postgres'
import type { Endpoint } from './endpoints.ts'
import type { Measurement } from './load.ts'

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
