// The declarative schema is the truth, and the migrations deploy exactly it: one database built
// from sql/platform.sql + supabase/migrations (the template every test file clones), one from
// sql/platform.sql + supabase/schemas/*.sql, and no difference between them, neither in what
// `supabase db diff` sees (pg-delta: tables, constraints, indexes, policies including those on
// realtime.messages, triggers, functions and their bodies, comments, grants) nor in the catalog
// facts test/supabase-cli.test.ts compares. A second case proves the check can fail: a schema
// file changed without a migration is caught, and named.
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Sql } from 'postgres'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { createSql } from '../functions/lib/sql.ts'
import { SCHEMAS_DIR, ROOT } from '../local/paths.ts'
import { applySchemaFiles, diffDatabases, explainDiff, listSchemaFiles, nextVersion, splitStatements } from '../local/schema.ts'
import { fingerprint } from './support/catalog.ts'
import { databaseUrl } from './support/net.ts'

const suffix = `${process.pid}_${Math.random().toString(36).slice(2, 8)}`
const names = { migrations: `todo_mig_${suffix}`, schemas: `todo_schemas_${suffix}`, drifted: `todo_drift_${suffix}` }
const urls = {} as Record<keyof typeof names, string>
let admin: Sql
let driftDir: string

/** Creates a database from the schema files in `dir` and returns its URL. */
async function buildFromSchemaFiles(database: keyof typeof names, dir: string): Promise<void> {
  const sql = createSql(urls[database], { max: 1 })
  try {
    await applySchemaFiles(sql, dir)
  } finally {
    await sql.end({ timeout: 5 })
  }
}

/** How the two databases differ, as a reader needs it: the SQL, each statement headed by its domain file. */
async function difference(from: string, to: string, dir = SCHEMAS_DIR): Promise<string> {
  const diff = await diffDatabases(from, to)
  return diff && (await explainDiff(diff, dir))
}

const HOW_TO_FIX = [
  'supabase/migrations and supabase/schemas disagree. The SQL below would bring a database built by',
  'the migrations to the schema files; each statement is headed by the domain file of its object.',
  '- You edited a schema file: `npm run db:diff -- <name>` writes this as a migration for review.',
  '- You wrote (or merged) a migration: `npm run db:diff -- --fold` prints what it built, each',
  '  statement headed by the domain file to fold it into (README, "Changing the schema").',
  '',
  '',
].join('\n')

beforeAll(async () => {
  const serverUrl = inject('serverUrl')
  admin = createSql(serverUrl, { max: 1 })
  for (const key of Object.keys(names) as (keyof typeof names)[]) urls[key] = databaseUrl(serverUrl, names[key])
  // The migrated side is the template every test file clones: platform shim + every migration.
  await admin.unsafe(`create database ${names.migrations} template ${inject('templateDatabase')}`)
  await admin.unsafe(`create database ${names.schemas}`)
  await admin.unsafe(`create database ${names.drifted}`)
  // A copy of the schema files with one change nobody wrote a migration for.
  driftDir = await mkdtemp(join(tmpdir(), 'todo-schemas-drift-'))
  await cp(SCHEMAS_DIR, driftDir, { recursive: true })
  const todos = join(driftDir, '30_todos.sql')
  const text = await readFile(todos, 'utf8')
  const anchor = 'create index todos_search_idx on app.todos using gin (search);'
  expect(text, `30_todos.sql defines ${anchor}`).toContain(anchor)
  await writeFile(todos, text.replace(anchor, `${anchor}\ncreate index todos_drift_idx on app.todos (updated_at);`))
  await Promise.all([buildFromSchemaFiles('schemas', SCHEMAS_DIR), buildFromSchemaFiles('drifted', driftDir)])
})

afterAll(async () => {
  for (const name of Object.values(names)) await admin?.unsafe(`drop database if exists ${name} with (force)`)
  await admin?.end({ timeout: 5 })
  if (driftDir) await rm(driftDir, { recursive: true, force: true })
})

describe('supabase/schemas is the current schema, and the migrations build exactly it', () => {
  it('supabase/config.toml registers the schema files for the Supabase CLI, in file name order', async () => {
    const config = await readFile(join(ROOT, 'supabase/config.toml'), 'utf8')
    expect(config).toMatch(/^\[db\.migrations\]\s*\nschema_paths = \["\.\/schemas\/\*\.sql"\]/m)
    const files = await listSchemaFiles()
    expect(files.length).toBeGreaterThan(5)
    expect(files.every((f) => /\/\d\d_[a-z_]+\.sql$/.test(f)), files.join('\n')).toBe(true)
  })

  it('supabase db diff finds no difference between the migrations and the schema files', async () => {
    const diff = await difference(urls.migrations, urls.schemas)
    expect(diff, HOW_TO_FIX + diff).toBe('')
  })

  it('the catalogs agree too (functions, policies, indexes, triggers, grants, comments)', async () => {
    const migrated = createSql(urls.migrations, { max: 1 })
    const declared = createSql(urls.schemas, { max: 1 })
    try {
      const [fromMigrations, fromSchemas] = await Promise.all([fingerprint(migrated), fingerprint(declared)])
      expect(fromMigrations.functions.length).toBeGreaterThan(100)
      for (const key of Object.keys(fromMigrations) as (keyof typeof fromMigrations)[]) {
        expect.soft([...fromSchemas[key]], `catalog ${key}: schema files vs migrations`).toEqual([...fromMigrations[key]])
      }
    } finally {
      await migrated.end({ timeout: 5 })
      await declared.end({ timeout: 5 })
    }
  })

  it('a schema file changed without a migration is caught, and the report names the object and its domain file', async () => {
    const diff = await difference(urls.migrations, urls.drifted, driftDir)
    expect(diff).toContain('CREATE INDEX todos_drift_idx ON app.todos')
    expect(diff).toContain('-- index todos_drift_idx on app.todos: supabase/schemas/30_todos.sql')
    // The message a developer would see, for the record.
    console.info(HOW_TO_FIX + diff)
  })
})

describe('npm run db:diff helpers', () => {
  it('a generated migration sorts after every landed one, even when the clock is behind', () => {
    expect(nextVersion('20261124001000', new Date('2026-11-25T08:09:10Z'))).toBe('20261125080910')
    expect(nextVersion('20261124004999', new Date('2026-11-24T00:00:00Z'))).toBe('20261124005000')
    expect(nextVersion(undefined, new Date('2026-11-25T08:09:10Z'))).toBe('20261125080910')
  })

  it('statements are split at top-level semicolons only (not in bodies, strings or comments)', () => {
    const sql = "create function f() returns int as $function$ select 1; $function$;\ncomment on function f() is 'a; b'; -- c; d\nselect 2"
    expect(splitStatements(sql)).toEqual([
      'create function f() returns int as $function$ select 1; $function$',
      "comment on function f() is 'a; b'",
      '-- c; d\nselect 2',
    ])
  })

  it('a statement is headed by what it is, not by a policy or trigger its body mentions', async () => {
    const diff = [
      'CREATE OR REPLACE FUNCTION api.user_follow(user_ref text, follow boolean) RETURNS jsonb LANGUAGE plpgsql AS $$ begin -- the policy "Members follow public members" on app.user_follows admits it\n return null; end $$',
      'CREATE POLICY "Members follow public members, and let in whom they approve" ON app.user_follows FOR INSERT TO authenticated WITH CHECK (true)',
      'CREATE INDEX user_follow_requests_followee_idx ON app.user_follow_requests USING btree (followee_id)',
    ].join(';\n')
    const heads = (await explainDiff(diff)).split('\n').filter((line) => line.startsWith('-- '))
    expect(heads).toEqual([
      '-- api.user_follow: supabase/schemas/40_social.sql',
      '-- policy "Members follow public members, and let in whom they approve" on app.user_follows: supabase/schemas/10_users_and_credentials.sql',
      '-- index user_follow_requests_followee_idx on app.user_follow_requests: supabase/schemas/10_users_and_credentials.sql',
    ])
  })
})
