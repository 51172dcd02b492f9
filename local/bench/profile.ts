// `npm run bench -- --profile`: where the time of each endpoint's SQL goes. The api.*
// functions are plpgsql building dynamic SQL, so a plain EXPLAIN of the request statement
// shows one opaque function call; auto_explain with log_nested_statements shows every
// statement run inside it, each with EXPLAIN (ANALYZE, BUFFERS). The plans arrive as notices
// (auto_explain.log_level = notice), so no server log is needed.
//
// For each endpoint: the statement the handler sends (functions/lib/db.ts callApi) runs twice
// warm, then once with track_functions = all for the time per function (calls, self, total),
// then once with auto_explain for the full plans of every statement, nested ones included,
// that took 1 ms or more. Writes run in a transaction that is rolled back.
import { mkdir, writeFile } from 'node:fs/promises'
import { resolve } from 'node:path'
import postgres, { type Sql } from 'postgres'
import { callApi, type Credential } from '../../functions/lib/db.ts'
import { sha256Hex } from '../../functions/lib/tokens.ts'
import type { Endpoint } from './endpoints.ts'
import type { Fixture } from './seed-data.ts'

interface ProfileInput {
  dataset: { name: string; url: string; fixture: Fixture }
  endpoints: Endpoint[]
  publicUrl: string
  dataDir: string
}

class Rollback extends Error {}

export async function profile(input: ProfileInput): Promise<string> {
  const notices: string[] = []
  const sql = postgres(input.dataset.url, {
    max: 1,
    prepare: true,
    connection: { TimeZone: 'UTC', application_name: 'todo-bench-profile' },
    onnotice: (notice) => notices.push(String(notice.message ?? '')),
  })
  const out: string[] = []
  const w = (line = '') => out.push(line)
  const fixture = input.dataset.fixture
  w(`Profile of ${input.dataset.name}: ${fixture.counts.users} users, ${fixture.counts.todos} todos, ${fixture.counts.reactions} reactions, ${fixture.counts.comments} comments`)
  w(`Taken ${new Date().toISOString()}. Reader ${fixture.reader.username}, writer ${fixture.writer.username}, todo ${fixture.todo.id}, project ${fixture.project.slug} query "${fixture.project.query}".`)
  w('Per endpoint: warm timings, time per function (track_functions = all), then auto_explain (log_analyze, log_buffers, log_nested_statements) plans of every statement of 1 ms or more.')

  try {
    const [version] = await sql`select current_setting('server_version') as v`
    w(`PostgreSQL ${version!.v}`)
    await sql.unsafe(`load 'auto_explain'`)
    for (const endpoint of input.endpoints) {
      const member = fixture[endpoint.as]
      const credential: Credential = { kind: 'api_key', key_hash: await sha256Hex(member.api_key) }
      const [{ since }] = await sql<{ since: Date }[]>`select now() as since` as unknown as [{ since: Date }]
      const prepared = endpoint.prepare ? await endpoint.prepare(sql, fixture, 4) : []
      const calls = endpoint.calls({ fixture, client: 0, connections: 1, prepared })
      const context = { credential, access: endpoint.access, publicUrl: input.publicUrl }
      const run = async (n: number) => {
        const call = calls[n % calls.length]!
        const t0 = performance.now()
        if (endpoint.read) {
          await callApi(sql, context, endpoint.fn, call.args)
        } else {
          await sql.begin(async (tx) => {
            await callApi(tx as unknown as Sql, context, endpoint.fn, call.args)
            throw new Rollback()
          }).catch((err) => { if (!(err instanceof Rollback)) throw err })
        }
        return performance.now() - t0
      }
      const explain = async (minMs: number) => {
        await sql.unsafe(`set auto_explain.log_min_duration = '${minMs}ms'; set auto_explain.log_analyze = on;
          set auto_explain.log_buffers = on; set auto_explain.log_nested_statements = on; set auto_explain.log_timing = on;
          set auto_explain.log_format = text; set auto_explain.log_level = notice; set client_min_messages = notice`)
        notices.length = 0
        try {
          return await run(2)
        } finally {
          await sql.unsafe(`set auto_explain.log_min_duration = -1; set client_min_messages = warning`)
        }
      }

      const warm = [await run(0), await run(1)]
      w('')
      w('='.repeat(100))
      w(`${endpoint.name}  →  ${endpoint.fn}(${calls[0]!.args.map((a) => JSON.stringify(a)).join(', ')})`)
      w(`warm calls without auto_explain: ${warm.map((ms) => `${ms.toFixed(1)} ms`).join(', ')}`)

      // Time per function (track_functions): calls, total and self time of every plpgsql and
      // non-inlined SQL function the request ran, without a notice per call.
      const functions = async () => {
        await sql`select pg_stat_force_next_flush()`
        await sql`select pg_stat_clear_snapshot()`
        return new Map((await sql<{ fn: string; calls: number; total: number; self: number }[]>`
          select funcid::regprocedure::text as fn, calls::int as calls, total_time as total, self_time as self
          from pg_stat_user_functions`).map((r) => [r.fn, r]))
      }
      await sql.unsafe(`set track_functions = 'all'`)
      const before = await functions()
      const tracked = await run(2)
      const after = await functions()
      await sql.unsafe(`set track_functions = 'none'`)
      const deltas = [...after.values()].map((a) => {
        const b = before.get(a.fn)
        return { fn: a.fn, calls: a.calls - (b?.calls ?? 0), total: a.total - (b?.total ?? 0), self: a.self - (b?.self ?? 0) }
      }).filter((d) => d.calls > 0).sort((x, y) => y.self - x.self)
      w(`with track_functions: ${tracked.toFixed(1)} ms. Functions by self time (total includes what they call):`)
      w(`${'self ms'.padStart(10)} ${'total ms'.padStart(10)} ${'calls'.padStart(8)}  function`)
      for (const d of deltas.slice(0, 15)) {
        w(`${d.self.toFixed(2).padStart(10)} ${d.total.toFixed(2).padStart(10)} ${String(d.calls).padStart(8)}  ${d.fn}`)
      }

      const analyzed = await explain(1)
      w('')
      w(`With auto_explain (analyze adds timing overhead to every nested statement): ${analyzed.toFixed(1)} ms.`)
      w('Plans of the statements that took 1 ms or more, innermost first:')
      for (const notice of notices) {
        const m = notice.match(/^duration: ([\d.]+) ms\s+plan:\s*([\s\S]*)$/)
        if (!m) continue
        w('')
        w(`-- ${m[1]} ms`)
        w(m[2]!.trimEnd())
      }
      // What prepare made (a deletion's targets) goes.
      if (endpoint.cleanup) await endpoint.cleanup(sql, fixture, since)
    }
  } finally {
    await sql.end({ timeout: 5 })
  }

  const dir = resolve(input.dataDir, 'bench')
  await mkdir(dir, { recursive: true })
  const file = resolve(dir, `profile-${new Date().toISOString().replace(/[:.]/g, '-')}.txt`)
  await writeFile(file, out.join('\n') + '\n')
  return file
}
