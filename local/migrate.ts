// Applies the platform shim and supabase/migrations, recording each migration where the
// Supabase CLI records them (supabase_migrations.schema_migrations), so `supabase db push`
// and `npm start` agree on what has been applied.
import { readFile, readdir } from 'node:fs/promises'
import { resolve } from 'node:path'
import type { Sql } from 'postgres'
import { MIGRATIONS_DIR, PLATFORM_SHIM } from './paths.ts'

export interface Migration {
  version: string
  name: string
  file: string
}

export async function listMigrations(dir = MIGRATIONS_DIR): Promise<Migration[]> {
  const files = (await readdir(dir)).filter((f) => /^\d+_.+\.sql$/.test(f)).sort()
  return files.map((file) => {
    const [, version = '', name = ''] = file.match(/^(\d+)_(.+)\.sql$/) ?? []
    return { version, name, file: resolve(dir, file) }
  })
}

/** Creates the Supabase names plain PostgreSQL lacks; a no-op where they exist. */
export async function applyPlatformShim(sql: Sql): Promise<void> {
  await sql.unsafe(await readFile(PLATFORM_SHIM, 'utf8'))
}

/**
 * Applies pending migrations in order, each in its own transaction, under an advisory lock
 * so that two processes starting at once do not both apply one. Returns the versions applied.
 */
export async function migrate(sql: Sql, options: { shim?: boolean } = {}): Promise<string[]> {
  const applied: string[] = []
  const reserved = await sql.reserve()
  try {
    await reserved`select pg_advisory_lock(hashtext('todo-sharing-service migrations'))`
    await reserved.unsafe(`set client_min_messages = warning`)
    // Migrations may run longer than a request may; the pool's timeout comes back below.
    await reserved.unsafe(`set statement_timeout = 0`)
    if (options.shim ?? true) await applyPlatformShim(reserved as unknown as Sql)
    await reserved.unsafe(`
      create schema if not exists supabase_migrations;
      create table if not exists supabase_migrations.schema_migrations (version text not null primary key);
      alter table supabase_migrations.schema_migrations add column if not exists statements text[];
      alter table supabase_migrations.schema_migrations add column if not exists name text;`)
    const done = new Set(
      (await reserved`select version from supabase_migrations.schema_migrations`).map((r) => r.version as string),
    )
    for (const migration of await listMigrations()) {
      if (done.has(migration.version)) continue
      const text = await readFile(migration.file, 'utf8')
      await reserved.unsafe('begin')
      try {
        await reserved.unsafe(text)
        await reserved`insert into supabase_migrations.schema_migrations (version, name, statements)
                       values (${migration.version}, ${migration.name}, ${[text]})`
        await reserved.unsafe('commit')
      } catch (err) {
        await reserved.unsafe('rollback')
        throw new Error(`migration ${migration.version}_${migration.name} failed: ${(err as Error).message}`)
      }
      applied.push(migration.version)
    }
  } finally {
    await reserved`select pg_advisory_unlock(hashtext('todo-sharing-service migrations'))`.catch(() => {})
    await reserved.unsafe(`reset statement_timeout; reset client_min_messages`).catch(() => {})
    reserved.release()
  }
  return applied
}
