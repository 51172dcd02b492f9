// `npm run soak -- --minutes 10 --connections 16`: a soak test (docs/reliability.md, "6. Soak").
// Starts an embedded PostgreSQL in a scratch DATA_DIR, migrates and seeds it (local/bench/seed-data.ts),
// raises its rate limits (a scratch database: the soak measures the server, not the limiter), then
// runs the API as `npm start` does, as a child process (`tsx local/start.ts` with DATABASE_URL), and
// drives it with mixed reads and writes of many members at a fixed concurrency for a fixed time.
// Every minute one line: requests, error rate (5xx and network errors; 4xx apart), p50/p99 latency,
// the server's RSS (/proc/<pid>/status VmRSS) and PostgreSQL's (the postmaster and its children).
// At the end a verdict on memory growth; exit 1 on an error rate above 0.1% or unbounded growth
// (PostgreSQL may grow by as much as its shared buffers in use grew: a cache of fixed size filling up).
//
//   --minutes N      duration (default 10)
//   --connections C  concurrent requests (default 16)
//   --users U        seeded members (default 500)
//   --todos T        seeded todos (default 20000)
//
// Traffic goes only to 127.0.0.1. Child processes are stopped on exit and on Ctrl-C.
import { spawn, type ChildProcess } from 'node:child_process'
import { rmSync } from 'node:fs'
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import postgres from 'postgres'
import { readConfig } from './config.ts'
import { migrateDatabase, openServer, type Server } from './bench/databases.ts'
import { progressBar } from './bench/progress.ts'
import { seedDatabase, type Fixture } from './bench/seed-data.ts'
import { percentile } from './bench/load.ts'
import { freePort } from './net.ts'
import { runAdmin } from './admin-commands.ts'

const ERROR_RATE_LIMIT = 0.001
/**
 * Growth allowed between the first minute after warm-up and the mean of the last two: 25% or 64 MB,
 * whichever is more. A leak of even 1 KB per request grows the server by hundreds of MB over a
 * 10-minute run (~100k requests), far past that; caches, JIT and pools that fill up stay within it.
 */
const GROWTH_RATIO = 0.25
const GROWTH_FLOOR_KB = 64 * 1024

function whole(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback
  const n = Number(value.replace(/_/g, ''))
  if (!Number.isInteger(n) || n <= 0) throw new Error(`--${name} must be a positive whole number, got ${JSON.stringify(value)}`)
  return n
}

async function rssKb(pid: number): Promise<number> {
  try {
    const status = await readFile(`/proc/${pid}/status`, 'utf8')
    const m = /VmRSS:\s+(\d+)/.exec(status)
    return m ? Number(m[1]) : 0
  } catch {
    return 0
  }
}

async function parentOf(pid: number): Promise<number> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8')
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
  } catch {
    return -1
  }
}

/** PSS (proportional set size: each shared page divided among the processes that map it), kB. */
async function pssKb(pid: number): Promise<number> {
  try {
    const m = /^Pss:\s+(\d+)/m.exec(await readFile(`/proc/${pid}/smaps_rollup`, 'utf8'))
    return m ? Number(m[1]) : 0
  } catch {
    return 0
  }
}

/**
 * Memory of the postmaster and its children (backends, checkpointer, walwriter, …), kB: the sum
 * of RSS, which counts a shared-buffer page once per process that touched it, and the sum of PSS,
 * which counts it once in all (the memory PostgreSQL really holds).
 */
async function postgresMemoryKb(postmaster: number): Promise<{ rss: number; pss: number }> {
  let rss = await rssKb(postmaster)
  let pss = await pssKb(postmaster)
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    const pid = Number(entry)
    if ((await parentOf(pid)) === postmaster) {
      rss += await rssKb(pid)
      pss += await pssKb(pid)
    }
  }
  return { rss, pss }
}

interface Member { key: string; id: string; username: string; token?: string }
type Op = { method: string; path: string; body?: unknown; key: string; after?: (status: number, json: unknown) => void }

const mb = (kb: number) => (kb / 1024).toFixed(0)

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: { minutes: { type: 'string' }, connections: { type: 'string' }, users: { type: 'string' }, todos: { type: 'string' } },
    strict: true,
  })
  const minutes = whole('minutes', values.minutes, 10)
  const connections = whole('connections', values.connections, 16)
  const users = whole('users', values.users, 500)
  const todos = whole('todos', values.todos, 20_000)

  const dataDir = await mkdtemp(join(tmpdir(), 'todo-soak-'))
  const pgPort = await freePort()
  const apiPort = await freePort()
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, EMBEDDED_POSTGRES_PORT: String(pgPort), HOST: '127.0.0.1', PORT: String(apiPort) }
  delete env.DATABASE_URL
  delete env.PUBLIC_URL
  let server: Server | null = null
  let child: ChildProcess | null = null
  let cleaned = false
  const cleanup = async () => {
    if (cleaned) return
    cleaned = true
    if (child && child.exitCode === null) {
      child.kill('SIGTERM')
      await Promise.race([new Promise((r) => child!.once('exit', r)), new Promise((r) => setTimeout(r, 20_000))])
      if (child.exitCode === null) child.kill('SIGKILL')
    }
    await server?.stop().catch(() => {})
    await rm(dataDir, { recursive: true, force: true }).catch(() => {})
  }
  let interrupted = false
  const onSignal = () => {
    if (interrupted) return
    interrupted = true
    console.error('\nInterrupted: stopping the server and PostgreSQL…')
    cleanup().finally(() => process.exit(130))
  }
  // On Ctrl-C embedded-postgres' exit hook stops PostgreSQL and exits before cleanup() is done:
  // the scratch directory goes last, synchronously, whatever way the process ends.
  process.on('exit', () => {
    if (child && child.exitCode === null) child.kill('SIGKILL')
    try { rmSync(dataDir, { recursive: true, force: true }) } catch {}
  })
  process.on('SIGINT', onSignal)
  process.on('SIGTERM', onSignal)

  try {
    const config = readConfig(env)
    server = await openServer(config)
    await migrateDatabase(server.url)
    const sql = postgres(server.url, { max: 1, onnotice: () => {}, connection: { application_name: 'todo-soak', TimeZone: 'UTC' } })
    let fixture: Fixture
    let todoIds: string[]
    let followIds: string[]
    let members: Member[]
    try {
      // How much of the shared buffers is in use, each minute (the verdict allows for their filling).
      await sql`create extension if not exists pg_buffercache`
      fixture = await seedDatabase(sql, { users, todos, seed: 1 }, progressBar('seed', 1))
      // A scratch database: the limits would otherwise be what is measured.
      await sql`update app.rate_limits set max_events = 100000000`
      todoIds = (await sql<{ id: string }[]>`
        select 'todo_' || replace(t.id::text, '-', '') as id
        from app.todos t join app.users u on u.id = t.user_id
        where u.privacy = 'public' order by t.created_at desc limit 2000`).map((r) => r.id)
      followIds = (await sql<{ id: string }[]>`
        select 'user_' || replace(id::text, '-', '') as id from app.users where privacy = 'public' limit 400`).map((r) => r.id)
      members = [...fixture.writers, ...fixture.others].map((w) => ({ key: w.api_key, id: w.id, username: w.username }))
      if (members.length === 0) members = [{ key: fixture.writer.api_key, id: fixture.writer.id, username: fixture.writer.username }]
      // Notifications take an OAuth token of a first-party app (API keys get 403): made with the operator CLI's commands.
      const ctx = { sql, jwtSecret: config.jwtSecret, publicUrl: config.publicUrl }
      const { client_id: client } = await runAdmin(ctx, ['create-oauth-client', '--name', 'Soak', '--first-party']) as { client_id: string }
      for (const member of members.slice(0, 64)) {
        member.token = (await runAdmin(ctx, ['issue-token', '--user', member.username, '--client', client, '--scopes', 'public notifications']) as { access_token: string }).access_token
      }
    } finally {
      await sql.end({ timeout: 5 })
    }
    const postmaster = Number((await readFile(join(dataDir, 'postgres', 'postmaster.pid'), 'utf8')).split('\n')[0])

    // The API, as `npm start` runs it, on the database the soak seeded.
    child = spawn(process.execPath, ['--import', 'tsx', 'local/start.ts'], {
      env: { ...env, DATABASE_URL: server.url }, stdio: ['ignore', 'ignore', 'pipe'],
    })
    let stderr = ''
    child.stderr!.on('data', (d: Buffer) => { stderr = (stderr + d.toString()).slice(-4000) })
    const base = `http://127.0.0.1:${apiPort}`
    for (let i = 0; ; i++) {
      if (child.exitCode !== null) throw new Error(`the server exited (${child.exitCode}):\n${stderr}`)
      try { if ((await fetch(`${base}/v1/users/me`, { headers: { authorization: `Bearer ${members[0]!.key}` } })).status < 500) break } catch {}
      if (i > 600) throw new Error('the server did not start within 60 s')
      await new Promise((r) => setTimeout(r, 100))
    }
    // node --import tsx: the same loader `npm start` (tsx) uses, in one process whose RSS is the server's.
    const serverPid = child.pid!

    console.log(`Soak: ${minutes} min, ${connections} connections, ${users} users / ${todos} todos seeded in ${fixture.seconds}s; `
      + `server pid ${serverPid} on ${base}, PostgreSQL postmaster pid ${postmaster}`)
    console.log('minute  requests   5xx+net  err%     4xx   p50 ms   p99 ms  server MB  postgres MB (RSS sum / PSS sum)  buffers MB')

    // One minute's counters.
    let latencies: number[] = []
    let requests = 0, failures = 0, clientErrors = 0
    const errorSamples = new Map<string, number>()
    /**
     * False once the last minute's line is printed: what answers after it (the requests still in
     * flight while the workers stop) is counted in no minute, so in no sample either, and the
     * "Non-2xx answers" line adds up to the total's 4xx (run 3 of docs/reliability.md printed
     * 404 ×313 beside a total of 312: one 404 came after minute 30).
     */
    let counting = true
    let n = 0
    const send = async (op: Op) => {
      const t0 = performance.now()
      try {
        const res = await fetch(base + op.path, {
          method: op.method,
          headers: { authorization: `Bearer ${op.key}`, accept: 'application/json', ...(op.body ? { 'content-type': 'application/json' } : {}) },
          body: op.body ? JSON.stringify(op.body) : undefined,
          signal: AbortSignal.timeout(30_000),
        })
        const text = await res.text()
        latencies.push(performance.now() - t0)
        requests++
        if (res.status >= 400) {
          if (res.status >= 500) failures++
          else clientErrors++
          const what = `${op.method} ${op.path.replace(/\/(todo|user|reac)_[0-9a-f]+/g, '/{id}')} ${res.status}`
          if (counting) errorSamples.set(what, (errorSamples.get(what) ?? 0) + 1)
        }
        op.after?.(res.status, text ? JSON.parse(text) : null)
      } catch (err) {
        requests++
        failures++
        const what = `${op.method} ${op.path.replace(/\/(todo|user|reac)_[0-9a-f]+/g, '/{id}')} ${(err as Error).name}`
        if (counting) errorSamples.set(what, (errorSamples.get(what) ?? 0) + 1)
      }
    }

    const pick = <T,>(xs: T[]) => xs[Math.floor(Math.random() * xs.length)]!
    const end = performance.now() + minutes * 60_000
    /** A bound on requests besides time: far more than the server can answer in the time. */
    const maxRequests = minutes * 60 * 5000
    const worker = async (w: number) => {
      const reactions: string[] = []
      while (performance.now() < end && n < maxRequests) {
        n++
        const member = members[(w + connections * (n % 97)) % members.length]!
        const roll = Math.random()
        const todo = pick(todoIds)
        let op: Op
        if (roll < 0.16) op = { method: 'GET', path: '/v1/todos', key: member.key }
        else if (roll < 0.32) op = { method: 'GET', path: '/v1/timeline', key: member.key }
        else if (roll < 0.46) op = { method: 'GET', path: `/v1/todos/${todo}`, key: member.key }
        else if (roll < 0.56) op = { method: 'GET', path: '/v1/users/me', key: member.key }
        else if (roll < 0.64) {
          const holder = members[n % Math.min(64, members.length)]!
          op = { method: 'GET', path: '/v1/notifications', key: holder.token ?? holder.key }
        }
        else if (roll < 0.72) op = { method: 'POST', path: '/v1/todos', body: { body: `Soaked the server #${fixture.mention.hashtag} with @${fixture.mention.username}` }, key: member.key }
        else if (roll < 0.78) op = { method: 'POST', path: '/v1/comments', body: { commentable_type: 'Todo', commentable_id: todo, body: 'Still holding up.' }, key: member.key }
        else if (roll < 0.86) {
          op = { method: 'POST', path: '/v1/reactions', body: { reactable_type: 'Todo', reactable_id: todo }, key: member.key,
            after: (status, json) => { const id = (json as { id?: string } | null)?.id; if (status === 201 && id) reactions.push(`${member.key}|${id}`) } }
        } else if (roll < 0.92 && reactions.length > 0) {
          const [key, id] = reactions.shift()!.split('|') as [string, string]
          await send({ method: 'DELETE', path: `/v1/reactions/${id}`, key })
          continue
        } else {
          let target = pick(followIds)
          while (target === member.id) target = pick(followIds)
          op = { method: roll < 0.96 ? 'POST' : 'DELETE', path: `/v1/users/${target}/follow`, key: member.key }
        }
        await send(op)
      }
    }

    interface Row { minute: number; requests: number; failures: number; clientErrors: number; p50: number; p99: number; serverKb: number; postgresKb: number; postgresPssKb: number; buffersKb: number }
    // One connection of the soak's own that reads pg_buffercache once a minute.
    const monitor = postgres(server.url, { max: 1, onnotice: () => {}, connection: { application_name: 'todo-soak-monitor' } })
    const buffersInUseKb = async () => Number((await monitor`
      select count(*) * current_setting('block_size')::bigint / 1024 as kb from pg_buffercache where relfilenode is not null`)[0]!.kb)
    const rows: Row[] = []
    const workers = Array.from({ length: connections }, (_, w) => worker(w))
    const started = performance.now()
    for (let minute = 1; minute <= minutes; minute++) {
      const at = started + minute * 60_000
      await new Promise((r) => setTimeout(r, Math.max(0, at - performance.now())))
      const sorted = Float64Array.from(latencies).sort()
      const row: Row = {
        minute, requests, failures, clientErrors,
        p50: percentile(sorted, 0.5) ?? 0, p99: percentile(sorted, 0.99) ?? 0,
        serverKb: await rssKb(serverPid), postgresKb: 0, postgresPssKb: 0, buffersKb: await buffersInUseKb(),
      }
      const pg = await postgresMemoryKb(postmaster)
      row.postgresKb = pg.rss
      row.postgresPssKb = pg.pss
      latencies = []; requests = 0; failures = 0; clientErrors = 0
      rows.push(row)
      const rate = row.requests ? (100 * row.failures) / row.requests : 0
      console.log(`${String(minute).padStart(6)}  ${String(row.requests).padStart(8)}  ${String(row.failures).padStart(8)}  ${rate.toFixed(3).padStart(6)}  ${String(row.clientErrors).padStart(6)}`
        + `  ${row.p50.toFixed(1).padStart(7)}  ${row.p99.toFixed(1).padStart(7)}  ${mb(row.serverKb).padStart(9)}  ${mb(row.postgresKb).padStart(11)} / ${mb(row.postgresPssKb).padStart(3)}  ${mb(row.buffersKb).padStart(12)}`)
    }
    counting = false
    await Promise.all(workers)
    await monitor.end({ timeout: 2 })
    if (errorSamples.size > 0) console.log(`Non-2xx answers: ${[...errorSamples].sort((x, y) => y[1] - x[1]).slice(0, 12).map(([k, v]) => `${k} ×${v}`).join('; ')}`)

    const total = rows.reduce((s, r) => s + r.requests, 0)
    const failed = rows.reduce((s, r) => s + r.failures, 0)
    const errorRate = total ? failed / total : 1
    let ok = true
    console.log(`Total: ${total} requests, ${failed} 5xx/network errors (${(100 * errorRate).toFixed(3)}%), ${rows.reduce((s, r) => s + r.clientErrors, 0)} 4xx.`)
    if (errorRate > ERROR_RATE_LIMIT) { ok = false; console.log(`FAIL: error rate above ${100 * ERROR_RATE_LIMIT}%`) }
    // Growth: the first minute is warm-up (JIT, pools, caches); compare minute 2 with the mean of the last two.
    if (rows.length >= 3) {
      const tail = rows.slice(-2)
      const middle = rows[Math.floor(rows.length / 2)]!
      // PostgreSQL by PSS: its RSS sum rises as each backend touches more of the shared buffers
      // (the tables grow under the writes) without PostgreSQL holding more memory. Its PSS rises
      // too, as shared buffers fill with the growing tables, up to their fixed size: the growth
      // of the buffers in use (pg_buffercache) is allowed on top, a cache that stops at its
      // configured size being bounded by definition; what grows beyond it is the backends' own.
      const measures = [
        ['server (RSS)', (r: Row) => r.serverKb, 0],
        ['PostgreSQL (PSS)', (r: Row) => r.postgresPssKb, Math.max(0, rows.at(-1)!.buffersKb - rows[1]!.buffersKb)],
      ] as const
      for (const [name, get, cacheKb] of measures) {
        const first = get(rows[1]!)
        const last = tail.reduce((s, r) => s + get(r), 0) / tail.length
        const allowed = Math.max(first * GROWTH_RATIO, GROWTH_FLOOR_KB) + cacheKb
        const bounded = last - first <= allowed
        if (!bounded) ok = false
        const signed = (kb: number) => `${kb >= 0 ? '+' : ''}${mb(kb)}`
        console.log(`Memory, ${name}: ${mb(first)} MB after warm-up (minute 2) → ${mb(last)} MB (mean of the last two minutes), `
          + `${signed(last - first)} MB (${signed(last - get(middle))} MB since minute ${middle.minute}); allowed +${mb(allowed)} MB`
          + `${cacheKb ? ` (+${mb(cacheKb)} MB of it the shared buffers filling)` : ''}: ${bounded ? 'bounded' : 'UNBOUNDED GROWTH'}`)
      }
    } else {
      console.log('Memory: too short a run for a verdict on growth (needs 3 minutes or more).')
    }
    console.log(ok ? 'Verdict: PASS' : 'Verdict: FAIL')
    return ok ? 0 : 1
  } finally {
    await cleanup()
  }
}

main().then((code) => process.exit(code), (err) => {
  console.error(err instanceof Error ? err.stack ?? err.message : err)
  process.exit(1)
})
