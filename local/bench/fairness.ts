// `npm run bench -- --fairness` (issue 25, item 6): what one member's flood of costly requests
// does to another member's reads.
//
// One member (the flooder) keeps 8, then 16, then 32 costly requests in flight (autocannon, one
// request list cycled per connection: the worst full-text and date filters the API still
// accepts), while another member (the victim) reads at a steady rate, open loop: a request
// every 1/rate seconds whatever the answers do, so a slow server cannot slow the probe down and
// hide its own slowness. The victim's p50 and p99 in each flood are reported as ratios to the
// same reads with no flood, measured before the floods and again after them and pooled. Target:
// ≤ 2× at every level (docs/performance.md).
import autocannon from 'autocannon'
import { percentile } from './load.ts'

export interface FairnessPhase {
  /** Concurrent costly requests of the flooder (0: no flood). */
  flood: number
  /** The victim's latencies of successful reads, ms (not written to the results file). */
  latencies?: number[]
  victim: { requests: number; ok: number; p50: number | null; p99: number | null; max: number | null; statuses: Record<string, number> }
  flooder: { responses: number; per_second: number; statuses: Record<string, number> }
}

export interface FairnessBench {
  seconds: number
  rate: number
  victim_paths: string[]
  flood_paths: string[]
  phases: FairnessPhase[]
  /** The victim's reads with no flood: both quiet phases (before and after the floods) pooled. */
  quiet: { requests: number; p50: number | null; p99: number | null }
  /** Victim p50 and p99 in each flood ÷ the same with no flood (`quiet`). */
  ratios: { flood: number; p50: number | null; p99: number | null }[]
  target: number
  met: boolean
}

export interface FairnessOptions {
  baseUrl: string
  victim: { key: string; paths: string[] }
  flooder: { key: string; paths: string[] }
  levels: number[]
  /** Measured seconds per phase; each flood runs 2 s more before the victim is measured. */
  seconds: number
  /** The victim's requests per second. */
  rate: number
  log: (line: string) => void
}

export const FAIRNESS_TARGET = 2

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const round = (v: number | null) => (v === null ? null : Math.round(v * 100) / 100)

/** The victim's open-loop reads for `seconds`. */
async function probe(options: FairnessOptions, seconds: number): Promise<FairnessPhase['victim'] & { latencies: number[] }> {
  const latencies: number[] = []
  const statuses: Record<string, number> = {}
  const pending: Promise<void>[] = []
  const interval = 1000 / options.rate
  const started = performance.now()
  for (let n = 0; performance.now() - started < seconds * 1000; n++) {
    const path = options.victim.paths[n % options.victim.paths.length]!
    const t0 = performance.now()
    pending.push(fetch(options.baseUrl + path, { headers: { authorization: `Bearer ${options.victim.key}` } })
      .then(async (res) => {
        await res.arrayBuffer()
        statuses[res.status] = (statuses[res.status] ?? 0) + 1
        if (res.status === 200) latencies.push(performance.now() - t0)
      }, () => {
        statuses.failed = (statuses.failed ?? 0) + 1
      }))
    // The next request leaves on schedule, however long this one takes.
    const next = started + (n + 1) * interval
    await sleep(Math.max(0, next - performance.now()))
  }
  await Promise.all(pending)
  const sorted = Float64Array.from(latencies).sort()
  return {
    requests: pending.length,
    ok: latencies.length,
    p50: round(percentile(sorted, 0.5)),
    p99: round(percentile(sorted, 0.99)),
    max: round(sorted.length ? sorted[sorted.length - 1]! : null),
    statuses,
    latencies,
  }
}

/** The flooder's autocannon run at `connections`, for `seconds`. */
function flood(options: FairnessOptions, connections: number, seconds: number) {
  const statuses: Record<string, number> = {}
  let responses = 0
  let next = 0
  const requests = options.flooder.paths.map((path) => ({ method: 'GET' as const, path, headers: { authorization: `Bearer ${options.flooder.key}` } }))
  const instance = autocannon({
    url: options.baseUrl,
    connections,
    duration: seconds,
    pipelining: 1,
    timeout: 30,
    setupClient: (client: autocannon.Client) => {
      // Each connection starts at another point of the list, so all inputs are in flight at once.
      const offset = next++ % requests.length
      ;(client as unknown as { setRequests(r: unknown[]): void }).setRequests([...requests.slice(offset), ...requests.slice(0, offset)])
    },
  }) as unknown as autocannon.Instance & Promise<autocannon.Result>
  instance.on('response', (_client: unknown, status: number) => {
    responses++
    statuses[status] = (statuses[status] ?? 0) + 1
  })
  return { done: instance.then(() => ({ responses, per_second: Math.round((responses / seconds) * 10) / 10, statuses })) }
}

export async function measureFairness(options: FairnessOptions): Promise<FairnessBench> {
  const phases: FairnessPhase[] = []
  const quiet = async () => {
    options.log(`  no flood: ${options.rate} reads/s for ${options.seconds}s…`)
    const { latencies, ...victim } = await probe(options, options.seconds)
    phases.push({ flood: 0, latencies, victim, flooder: { responses: 0, per_second: 0, statuses: {} } })
  }
  // Warm both members' paths once, then the quiet baseline.
  await probe(options, 2)
  await quiet()
  for (const level of options.levels) {
    options.log(`  flood of ${level} costly requests at once, ${options.rate} reads/s of the other member…`)
    const running = flood(options, level, options.seconds + 2)
    await sleep(2_000)
    const { latencies, ...victim } = await probe(options, options.seconds)
    const flooder = await running.done
    phases.push({ flood: level, latencies, victim, flooder })
    options.log(`    victim p50 ${victim.p50} ms, p99 ${victim.p99} ms (${JSON.stringify(victim.statuses)}); flooder ${flooder.per_second}/s ${JSON.stringify(flooder.statuses)}`)
    // Requests the flood left in flight finish before the next phase.
    await sleep(2_000)
  }
  await quiet()
  // The baseline pools both quiet phases: one quiet p99 is the third-worst of 300 reads, and a
  // lucky or unlucky second on a shared machine moves it by 2× on its own.
  const quietLatencies = Float64Array.from(phases.filter((p) => p.flood === 0).flatMap((p) => p.latencies ?? [])).sort()
  const base = { requests: quietLatencies.length, p50: round(percentile(quietLatencies, 0.5)), p99: round(percentile(quietLatencies, 0.99)) }
  const ratios = phases.filter((p) => p.flood > 0).map((p) => ({
    flood: p.flood,
    p50: base.p50 && p.victim.p50 !== null ? round(p.victim.p50 / base.p50) : null,
    p99: base.p99 && p.victim.p99 !== null ? round(p.victim.p99 / base.p99) : null,
  }))
  for (const p of phases) delete p.latencies
  return {
    seconds: options.seconds,
    rate: options.rate,
    victim_paths: options.victim.paths,
    flood_paths: options.flooder.paths,
    phases,
    quiet: base,
    ratios,
    target: FAIRNESS_TARGET,
    met: ratios.every((r) => r.p50 !== null && r.p99 !== null && r.p50 <= FAIRNESS_TARGET && r.p99 <= FAIRNESS_TARGET),
  }
}
