// What we run locally is what Supabase will run: the real Supabase CLI (`supabase db push`)
// applies supabase/migrations to a database that has only the platform shim, and the result
// must be the schema our own migrator builds (the template database), recorded the same way.
import { spawn } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { resolve } from 'node:path'
import type { Sql } from 'postgres'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { createSql } from '../functions/lib/sql.ts'
import { applyPlatformShim, listMigrations, migrate, type Migration } from '../local/migrate.ts'
import { ROOT } from '../local/paths.ts'
import { databaseUrl } from './support/net.ts'

const SUPABASE = resolve(ROOT, 'node_modules/.bin/supabase')
const CLI_TIMEOUT = 180_000

interface CliResult {
  code: number | null
  signal: NodeJS.Signals | null
  stdout: string
  stderr: string
  ms: number
}

/** Runs the Supabase CLI from the repository root (it finds supabase/ there), no terminal. */
function supabase(...args: string[]): Promise<CliResult> {
  const started = Date.now()
  return new Promise((resolvePromise, reject) => {
    const child = spawn(SUPABASE, args, {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, DO_NOT_TRACK: '1', SUPABASE_TELEMETRY_DISABLED: '1', NO_COLOR: '1', CI: '1' },
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk) => (stdout += chunk))
    child.stderr.on('data', (chunk) => (stderr += chunk))
    const timer = setTimeout(() => child.kill('SIGKILL'), CLI_TIMEOUT)
    child.on('error', (err) => {
      clearTimeout(timer)
      reject(err)
    })
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      resolvePromise({ code, signal, stdout, stderr, ms: Date.now() - started })
    })
  })
}

function describeRun(command: string, result: CliResult): string {
  return [
    `$ supabase ${command} -> exit ${result.code}${result.signal ? ` (${result.signal})` : ''} after ${result.ms} ms`,
    '--- stdout ---',
    result.stdout,
    '--- stderr ---',
    result.stderr,
  ].join('\n')
}

/**
 * Everything the migrations decide about schemas app and api, by name only (no OIDs), so that
 * two databases built by different tools can be compared.
 */
async function fingerprint(sql: Sql) {
  const schemas = ['app', 'api']
  return {
    schemas: await sql`
      select n.nspname as schema, pg_get_userbyid(n.nspowner) as owner, n.nspacl::text[] as acl
        from pg_namespace n
       where n.nspname = any (${schemas})
       order by 1`,
    relations: await sql`
      select n.nspname as schema, c.relname as name, c.relkind::text as kind,
             c.relrowsecurity as rls, c.relforcerowsecurity as force_rls,
             c.relacl::text[] as acl, obj_description(c.oid, 'pg_class') as comment
        from pg_class c join pg_namespace n on n.oid = c.relnamespace
       where n.nspname = any (${schemas}) and c.relkind in ('r', 'p', 'v', 'm', 'f', 'S')
       order by 1, 2`,
    columns: await sql`
      select n.nspname as schema, c.relname as table, a.attname as column,
             format_type(a.atttypid, a.atttypmod) as type, a.attnotnull as not_null,
             pg_get_expr(d.adbin, d.adrelid) as default, a.attgenerated::text as generated,
             a.attidentity::text as identity, a.attacl::text[] as acl
        from pg_attribute a
        join pg_class c on c.oid = a.attrelid
        join pg_namespace n on n.oid = c.relnamespace
        left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
       where n.nspname = any (${schemas}) and c.relkind in ('r', 'p', 'v', 'm', 'f')
         and a.attnum > 0 and not a.attisdropped
       order by 1, 2, a.attnum`,
    constraints: await sql`
      select n.nspname as schema, c.relname as table, k.conname as name, pg_get_constraintdef(k.oid) as definition
        from pg_constraint k
        join pg_class c on c.oid = k.conrelid
        join pg_namespace n on n.oid = c.relnamespace
       where n.nspname = any (${schemas})
       order by 1, 2, 3`,
    indexes: await sql`
      select schemaname as schema, tablename as table, indexname as name, indexdef as definition
        from pg_indexes where schemaname = any (${schemas})
       order by 1, 2, 3`,
    triggers: await sql`
      select n.nspname as schema, c.relname as table, t.tgname as name, pg_get_triggerdef(t.oid) as definition,
             t.tgenabled::text as enabled
        from pg_trigger t
        join pg_class c on c.oid = t.tgrelid
        join pg_namespace n on n.oid = c.relnamespace
       where n.nspname = any (${schemas}) and not t.tgisinternal
       order by 1, 2, 3`,
    functions: await sql`
      select n.nspname as schema, p.proname as name,
             pg_get_function_identity_arguments(p.oid) as arguments,
             pg_get_function_result(p.oid) as result, p.prokind::text as kind,
             l.lanname as language, p.provolatile::text as volatility, p.prosecdef as security_definer,
             p.proconfig as config, p.proacl::text[] as acl, md5(p.prosrc) as body_md5
        from pg_proc p
        join pg_namespace n on n.oid = p.pronamespace
        join pg_language l on l.oid = p.prolang
       where n.nspname = any (${schemas})
       order by 1, 2, 3`,
    types: await sql`
      select n.nspname as schema, t.typname as name, t.typtype::text as kind,
             coalesce((select array_agg(e.enumlabel order by e.enumsortorder) from pg_enum e where e.enumtypid = t.oid),
                      '{}') as labels
        from pg_type t join pg_namespace n on n.oid = t.typnamespace
       where n.nspname = any (${schemas}) and t.typtype in ('e', 'd', 'c')
         and not exists (select 1 from pg_class c where c.oid = t.typrelid and c.relkind <> 'c')
       order by 1, 2`,
    // Policies anywhere outside the system schemas: migrations may add some to realtime.messages.
    policies: await sql`
      select schemaname as schema, tablename as table, policyname as name, permissive, roles::text[] as roles,
             cmd, qual, with_check
        from pg_policies
       where schemaname not in ('pg_catalog', 'information_schema')
       order by 1, 2, 3`,
    defaultPrivileges: await sql`
      select pg_get_userbyid(d.defaclrole) as role, n.nspname as schema, d.defaclobjtype::text as type,
             d.defaclacl::text[] as acl
        from pg_default_acl d left join pg_namespace n on n.oid = d.defaclnamespace
       order by 1, 2, 3`,
    publications: await sql`
      select p.pubname as name, pt.schemaname as schema, pt.tablename as table
        from pg_publication p left join pg_publication_tables pt on pt.pubname = p.pubname
       order by 1, 2, 3`,
  }
}

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
