// What we run locally is what Supabase will run: the real Supabase CLI (`supabase db push`)
// applies supabase/migrations to a database that has only the platform shim, and the result
// must be the schema our own migrator builds (the template database), recorded the same way.
import { readFile } from 'node:fs/promises'
import type { Sql } from 'postgres'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { createSql } from '../functions/lib/sql.ts'
import { applyPlatformShim, listMigrations, migrate, type Migration } from '../local/migrate.ts'
import { type CliResult, describeRun, supabase as runSupabase } from '../local/supabase-cli.ts'
import { fingerprint } from './support/catalog.ts'
import { databaseUrl } from './support/net.ts'

const CLI_TIMEOUT = 180_000

/** Runs the Supabase CLI from the repository root (it finds supabase/ there), no terminal. */
const supabase = (...args: string[]) => runSupabase(args, { timeoutMs: CLI_TIMEOUT })

const recorded = (sql: Sql) =>
  sql<{ version: string; name: string | null; statements: string[] | null }[]>`
    select version, name, statements from supabase_migrations.schema_migrations order by version`

const name = `todo_cli_${process.pid}_${Math.random().toString(36).slice(2, 8)}`
let admin: Sql
let sql: Sql
let url: string
let migrations: Migration[]
let push: CliResult

beforeAll(async () => {
  const serverUrl = inject('serverUrl')
  admin = createSql(serverUrl, { max: 1 })
  await admin.unsafe(`create database ${name}`)
  url = databaseUrl(serverUrl, name)
  sql = createSql(url, { max: 2 })
  await applyPlatformShim(sql)
  migrations = await listMigrations()
  const cliUrl = new URL(url)
  cliUrl.searchParams.set('sslmode', 'disable')
  url = cliUrl.toString()
  // --skip-vault: with [db.vault] secrets in supabase/config.toml the CLI writes them to
  // vault.secrets before migrating, and the platform shim has no vault (push then exits 1 with
  // `relation "vault.secrets" does not exist`). Secrets are not what this test is about.
  push = await supabase('db', 'push', '--db-url', url, '--yes', '--skip-vault')
  console.info(`supabase db push took ${push.ms} ms`)
}, CLI_TIMEOUT + 60_000)

afterAll(async () => {
  await sql?.end({ timeout: 5 })
  await admin?.unsafe(`drop database if exists ${name} with (force)`)
  await admin?.end({ timeout: 5 })
})

describe('supabase db push on a database with only the platform shim', () => {
  it('exits 0', () => {
    expect(push.code, describeRun('db push --db-url <url> --yes --skip-vault', push)).toBe(0)
  })

  it('records every local migration in supabase_migrations.schema_migrations', async () => {
    expect(migrations.length).toBeGreaterThan(0)
    const rows = await recorded(sql)
    expect(rows.map((r) => r.version), describeRun('db push', push)).toEqual(migrations.map((m) => m.version))
    for (const row of rows) {
      const migration = migrations.find((m) => m.version === row.version)!
      expect(row.name, `name of ${row.version}`).toBe(migration.name)
      expect(row.statements?.length ?? 0, `statements of ${row.version}`).toBeGreaterThan(0)
      // The CLI splits a file into statements (without their semicolons) and records them:
      // put back together they must be the whole file, so its splitter dropped nothing.
      const normalize = (text: string) => text.replace(/\s+/g, '').replace(/;+$/, '')
      expect(normalize(row.statements!.join(';')), `statements of ${row.version} vs its file`).toBe(
        normalize(await readFile(migration.file, 'utf8')),
      )
    }
  })

  it('builds the same schema as our own migrator (the template database)', async () => {
    const template = createSql(databaseUrl(inject('serverUrl'), inject('templateDatabase')), { max: 1 })
    try {
      const [pushed, ours] = await Promise.all([fingerprint(sql), fingerprint(template)])
      // Sanity: the fingerprint is not trivially empty.
      expect(ours.columns.length).toBeGreaterThan(0)
      expect(ours.functions.length).toBeGreaterThan(0)
      expect(ours.policies.length).toBeGreaterThan(0)
      // Soft, so that a failure lists every catalog that differs, not only the first.
      for (const key of Object.keys(ours) as (keyof typeof ours)[]) {
        expect.soft([...pushed[key]], `catalog ${key}: CLI-pushed vs template`).toEqual([...ours[key]])
      }
    } finally {
      await template.end({ timeout: 5 })
    }
  })

  it('leaves nothing for our own migrator to apply', async () => {
    const before = await recorded(sql)
    expect(await migrate(sql)).toEqual([])
    expect(await recorded(sql)).toEqual(before)
  })

  it('supabase migration list shows every local version as applied remotely', async () => {
    const list = await supabase('migration', 'list', '--db-url', url)
    const message = describeRun('migration list --db-url <url>', list)
    expect(list.code, message).toBe(0)
    // A row is local | remote | time, each cell in backticks, for example
    //    `20261122000100` | `20261122000100` | `2026-11-22 00:01:00`
    // and a version missing on one side leaves that cell blank.
    const rows = new Map<string, string>()
    for (const line of (list.stdout + '\n' + list.stderr).split('\n')) {
      const cells = line.split(/[|│]/).map((c) => c.replace(/`/g, '').trim())
      if (cells.length >= 2 && /^\d{14}$/.test(cells[0] ?? '')) rows.set(cells[0]!, cells[1]!)
    }
    for (const migration of migrations) {
      expect(rows.get(migration.version), `${migration.version} local vs remote\n${message}`).toBe(migration.version)
    }
  })
})
