// What a write or read costs the database per request, each call its own transaction, with two
// versions of some functions alternated in blocks: `npx tsx local/bench/per-transaction.ts
// --before BEFORE.sql --after AFTER.sql [--kind todo|comment|reaction|unlike|list|timeline|page]`,
// DATABASE_URL naming the bench's large database (a superuser: it commits the two files in turn).
//
// Why not the write-cost sections (local/bench/write-cost.ts, render-cost.ts): they run a round's
// calls in one rolled-back transaction, so a cost paid once per transaction is paid once a round
// there, and once a request in production. PostgreSQL 17 plans the body of a SQL function with a
// SET clause again in every transaction that calls it (issue 27, seventh round): invisible to
// those sections, 0.1-0.5 ms a request here. Each call is `begin`, the call as the API sends it
// (functions/lib/db.ts callApi, the bench members' credentials from seed.fixture), `rollback`;
// only the call is timed. BEFORE.sql and AFTER.sql are CREATE OR REPLACE statements (a migration
// and the definitions it replaces); AFTER.sql is left in place at the end.
import { readFileSync } from 'node:fs'
import { createHash } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import { parseArgs } from 'node:util'
import postgres from 'postgres'
import { callApi, type CallContext } from '../../functions/lib/db.ts'
import { writerIds } from './endpoints.ts'
import type { Fixture } from './seed-data.ts'

const { values } = parseArgs({ options: {
  before: { type: 'string' }, after: { type: 'string' }, kind: { type: 'string', default: 'reaction' },
  blocks: { type: 'string', default: '16' }, calls: { type: 'string', default: '25' }, rounds: { type: 'string', default: '3' },
} })
if (!values.before || !values.after || !process.env.DATABASE_URL) {
  console.error('usage: DATABASE_URL=postgres://…/todo_bench_… npx tsx local/bench/per-transaction.ts --before BEFORE.sql --after AFTER.sql [--kind …]')
  process.exit(2)
}
const before = readFileSync(values.before, 'utf8')
const after = readFileSync(values.after, 'utf8')
const [blocks, calls, rounds] = [Number(values.blocks), Number(values.calls), Number(values.rounds)]
const sql = postgres(process.env.DATABASE_URL, { max: 1, onnotice: () => {} })
const [row] = await sql<{ data: Fixture }[]>`select data from seed.fixture where id = 1`
if (!row) throw new Error('DATABASE_URL names no seeded bench database (seed.fixture is empty)')
const fixture = row.data
const context = (member: { api_key: string }, access: CallContext['access']): CallContext => ({
  credential: { kind: 'api_key', key_hash: createHash('sha256').update(member.api_key).digest('hex') },
  access, publicUrl: 'http://127.0.0.1:1/api', webUrl: 'http://127.0.0.1:1',
})
const writers = fixture.writers.map((w) => context(w, 'write'))
const reader = context(fixture.reader, 'read')
// Public todos of members who are not writers, one per call: liked, commented, unliked.
const targets = (await sql<{ id: string }[]>`
  select 'todo_' || replace(t.id::text, '-', '') as id from app.todos t
  where t.author_privacy = 'public' and t.user_id <> all(${writerIds(fixture)}::uuid[])
  order by t.created_at desc limit ${blocks * calls}`).map((t) => t.id)

const connection = await sql.reserve()
let liked = ''
const call = (k: number) => {
  const writer = writers[k % writers.length]!
  switch (values.kind) {
    case 'todo': return callApi(connection, writer, 'api.todo_create', [`Shipped the #launch with @${fixture.writers[0]!.username} today ${k}`, []])
    case 'comment': return callApi(connection, writer, 'api.comment_create', ['Todo', targets[k]!, `Nice one @${fixture.writers[0]!.username}`, [], null])
    case 'reaction': return callApi(connection, writer, 'api.reaction_create', ['Todo', targets[k]!])
    case 'unlike': return callApi(connection, writer, 'api.reaction_delete', [liked])
    case 'list': return callApi(connection, reader, 'api.todos_list', [{}, 25, null, false])
    case 'timeline': return callApi(connection, reader, 'api.timeline', [{}, 25, null, false])
    // The web page /@username as functions/web/pages.ts asks for it (anonymous: no credential).
    case 'page': return connection`select app.web_page('user', ${fixture.writers[0]!.username})::text as page`
    default: throw new Error(`--kind ${values.kind}: todo, comment, reaction, unlike, list, timeline or page`)
  }
}
const total = { before: 0, after: 0 }
try {
  for (let round = 0; round < rounds; round++) {
    for (let block = 0; block < blocks; block++) {
      const side = (block + round) % 2 ? 'after' : 'before'
      await connection.unsafe('begin')
      await connection.unsafe(side === 'after' ? after : before)
      await connection.unsafe('commit')
      // Two untimed calls first: the session plans what the replaced functions invalidated.
      for (let i = -2; i < calls; i++) {
        const k = block * calls + Math.max(i, 0)
        await connection.unsafe('begin')
        if (values.kind === 'unlike') {
          liked = JSON.parse((await callApi(connection, writers[k % writers.length]!, 'api.reaction_create', ['Todo', targets[k]!]))!).id
          await connection.unsafe('reset role')
        }
        const started = performance.now()
        await call(k)
        if (i >= 0) total[side] += performance.now() - started
        await connection.unsafe('rollback')
      }
    }
  }
} finally {
  await connection.unsafe('rollback').catch(() => {})
  await connection.unsafe('begin')
  await connection.unsafe(after)
  await connection.unsafe('commit')
  connection.release()
  await sql.end()
}
const n = (rounds * blocks * calls) / 2
console.log(`${values.kind}: before ${(total.before / n).toFixed(3)} ms, after ${(total.after / n).toFixed(3)} ms a call (${n} calls each): ${(total.after / total.before).toFixed(3)}×`)
