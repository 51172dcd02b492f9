// The PostgreSQL the seed and the benchmark use: the server of DATABASE_URL, or the embedded one
// of DATA_DIR (started if needed), and named databases on it, created and migrated on demand.
import postgres from 'postgres'
import { createSql } from '../../functions/lib/sql.ts'
import type { Config } from '../config.ts'
import { openDatabase } from '../database.ts'
import { migrate } from '../migrate.ts'

export interface Server {
  /** URL of the server's default database (DATABASE_URL itself, or `postgres` when embedded). */
  url: string
  embedded: boolean
  stop(): Promise<void>
}

/** `settings` apply to an embedded server this call starts (see startEmbeddedPostgres). */
export async function openServer(config: Config, settings?: Record<string, string>): Promise<Server> {
  const database = await openDatabase(config, { settings })
  return { url: database.url, embedded: database.embedded, stop: () => database.stop() }
}

/** The URL of database `name` on the server of `url`. */
export function databaseUrl(url: string, name: string): string {
  const u = new URL(url)
  u.pathname = `/${encodeURIComponent(name)}`
  return u.toString()
}

export function databaseName(url: string): string {
  return decodeURIComponent(new URL(url).pathname.replace(/^\//, '')) || 'postgres'
}

/** Creates database `name` on the server unless it exists. Returns whether it was created. */
export async function ensureDatabase(serverUrl: string, name: string): Promise<boolean> {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(name)) throw new Error(`database name ${JSON.stringify(name)}: use lower-case letters, digits and _`)
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} })
  try {
    const [row] = await admin`select 1 as found from pg_database where datname = ${name}`
    if (row) return false
    await admin.unsafe(`create database ${name}`)
    return true
  } finally {
    await admin.end({ timeout: 5 })
  }
}

/** Applies pending migrations to the database at `url`; returns the versions applied. */
export async function migrateDatabase(url: string): Promise<string[]> {
  const sql = createSql(url, { max: 1 })
  try {
    return await migrate(sql)
  } finally {
    await sql.end({ timeout: 5 })
  }
}
