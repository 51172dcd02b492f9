// local/postgres.ts: a fixed port (npm start's 54322) lies inside the kernel's ephemeral range, so
// an outgoing connection may hold it for a moment. A start refused for its port is tried again;
// a port that stays taken is reported with PostgreSQL's own words.
import { mkdtemp, rm } from 'node:fs/promises'
import { type Server, createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { createSql } from '../functions/lib/sql.ts'
import { freePort } from './support/net.ts'
import { importEmbeddedPostgres } from './support/postgres.ts'

const dirs: string[] = []
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true })
})

async function holdPort(port: number): Promise<Server> {
  const holder = createServer()
  await new Promise<void>((resolve, reject) => holder.once('error', reject).listen(port, '127.0.0.1', resolve))
  return holder
}

describe('starting the embedded PostgreSQL on a port that is taken', () => {
  it('tries again while the port is held for a moment, then serves', async () => {
    const startPostgres = await importEmbeddedPostgres()
    const dataDir = await mkdtemp(join(tmpdir(), 'todo-port-pg-'))
    dirs.push(dataDir)
    const port = await freePort()
    // Initialised first (initdb takes longer than the hold), so the hold covers the start itself.
    const first = await startPostgres({ dataDir, port, password: 'test', initdbFlags: ['--no-sync'] })
    await first.stop()
    const holder = await holdPort(port)
    let released = false
    const starting = startPostgres({ dataDir, port, password: 'test' })
    setTimeout(() => {
      released = true
      holder.close()
    }, 1_500)
    const server = await starting
    try {
      expect(released).toBe(true)
      const sql = createSql(server.url, { max: 1 })
      expect((await sql`select 1 as one`)[0]).toEqual({ one: 1 })
      await sql.end({ timeout: 5 })
    } finally {
      await server.stop()
    }
  }, 60_000)

  it('reports PostgreSQL\'s refusal when the port stays taken', async () => {
    const startPostgres = await importEmbeddedPostgres()
    const dataDir = await mkdtemp(join(tmpdir(), 'todo-port-pg-'))
    dirs.push(dataDir)
    const port = await freePort()
    const first = await startPostgres({ dataDir, port, password: 'test', initdbFlags: ['--no-sync'] })
    await first.stop()
    const holder = await holdPort(port)
    try {
      await expect(startPostgres({ dataDir, port, password: 'test' })).rejects.toThrow(/Address already in use/)
    } finally {
      holder.close()
    }
  }, 60_000)
})
