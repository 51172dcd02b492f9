// Load generators with one measure: successful requests per second, and latency percentiles
// of successful requests (ms, not rounded), over a fixed duration at a fixed concurrency.
//   - HTTP: autocannon, one request list per connection (setupClient).
//   - SQL:  the statement functions/lib/db.ts sends, through postgres.js, one loop per
//           "connection" (concurrent caller) over a pool of the same size as the servers'.
import autocannon from 'autocannon'
import type { Sql } from 'postgres'
import { callApi, type CallContext } from '../../functions/lib/db.ts'

export interface Measurement {
  /** Successful (2xx / no error) requests per second. */
  rps: number
  /** Latency percentiles of successful requests, ms; null when none succeeded. */
  p50: number | null
  p99: number | null
  ok: number
  /** Non-2xx answers, failed or timed-out requests. */
  errors: number
  seconds: number
}

export function percentile(sorted: Float64Array, q: number): number | null {
  if (sorted.length === 0) return null
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!
}

function measurement(latencies: number[], errors: number, seconds: number): Measurement {
  const sorted = Float64Array.from(latencies).sort()
  const round = (v: number | null) => (v === null ? null : Math.round(v * 100) / 100)
  return {
    rps: Math.round((latencies.length / seconds) * 10) / 10,
    p50: round(percentile(sorted, 0.5)),
    p99: round(percentile(sorted, 0.99)),
    ok: latencies.length,
    errors,
    seconds: Math.round(seconds * 100) / 100,
  }
}

export interface HttpRequest {
  method: 'GET' | 'POST' | 'DELETE'
  path: string
  headers: Record<string, string>
  body?: string
}

/** Drives `baseUrl` with autocannon; connection i cycles through perConnection[i]. */
export async function runHttp(options: {
  baseUrl: string
  perConnection: HttpRequest[][]
  connections: number
  seconds: number
}): Promise<Measurement> {
  const latencies: number[] = []
  let failed = 0
  let next = 0
  const started = performance.now()
  // Without a callback autocannon returns its instance, which is also a promise of the result.
  const instance = autocannon({
    url: options.baseUrl,
    connections: options.connections,
    duration: options.seconds,
    pipelining: 1,
    timeout: Math.max(10, options.seconds * 2),
    setupClient: (client: autocannon.Client) => {
      const requests = options.perConnection[next++ % options.perConnection.length]!
      ;(client as unknown as { setRequests(r: HttpRequest[]): void }).setRequests(requests)
    },
  }) as unknown as autocannon.Instance & Promise<autocannon.Result>
  instance.on('response', (_client: unknown, status: number, _bytes: number, ms: number) => {
    if (status >= 200 && status < 300) latencies.push(ms)
    else failed++
  })
  const result = await instance
  const seconds = Math.min(result.duration || options.seconds, (performance.now() - started) / 1000)
  return measurement(latencies, failed + result.errors + result.timeouts, seconds)
}

/**
 * Calls `fn` exactly as a request handler does (functions/lib/db.ts callApi), from
 * `connections` concurrent callers; caller i cycles through perConnection[i] (argument lists).
 * `atEnd` runs when the window closes (bench.ts cancels statements still running then);
 * calls that finish after it are not counted.
 */
export async function runSql(options: {
  sql: Sql
  context: CallContext
  fn: string
  perConnection: unknown[][][]
  /** The credential of each call, parallel to perConnection (writes spread over members); else `context`. */
  contexts?: CallContext[][]
  connections: number
  seconds: number
  atEnd: () => Promise<void>
}): Promise<Measurement> {
  const latencies: number[] = []
  let errors = 0
  const started = performance.now()
  const end = started + options.seconds * 1000
  let open = true
  const callers = Array.from({ length: options.connections }, async (_, i) => {
    const calls = options.perConnection[i % options.perConnection.length]!
    const contexts = options.contexts?.[i % options.perConnection.length]
    for (let n = 0; open && performance.now() < end; n++) {
      const t0 = performance.now()
      try {
        await callApi(options.sql, contexts?.[n % calls.length] ?? options.context, options.fn, calls[n % calls.length]!)
        const t1 = performance.now()
        if (t1 <= end) latencies.push(t1 - t0)
      } catch {
        if (performance.now() <= end) errors++
      }
    }
  })
  await new Promise((resolve) => setTimeout(resolve, options.seconds * 1000))
  open = false
  await options.atEnd()
  await Promise.all(callers)
  return measurement(latencies, errors, options.seconds)
}
