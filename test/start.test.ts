// `npm start` on a fresh DATA_DIR: embedded PostgreSQL as the current user (root included),
// migrations, the API; the CLI reaches the same database; Ctrl-C stops everything; a second
// start reuses the data.
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, expect, it } from 'vitest'
import { connect } from 'node:net'
import { freePort } from './support/net.ts'
import { interrupt, runCli, startServer } from './support/process.ts'

const dirs: string[] = []

function serverAccepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1')
    socket.on('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.on('error', () => resolve(false))
  })
}
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true })
})

it('serves GET /v1/users/me with a key from the CLI, stops on Ctrl-C, and keeps the data', { timeout: 180_000 }, async () => {
  const dataDir = await mkdtemp(join(tmpdir(), 'todo-start-'))
  dirs.push(dataDir)
  const env = {
    DATA_DIR: dataDir,
    PORT: String(await freePort()),
    EMBEDDED_POSTGRES_PORT: String(await freePort()),
    DATABASE_URL: '',
    JWT_SECRET: '',
  }
  const base = `http://127.0.0.1:${env.PORT}`

  const started = Date.now()
  const first = await startServer(env)
  expect(first.output()).toContain(`listening on ${base}`)
  expect(first.output()).toMatch(/Applied \d+ migration/)

  const created = await runCli(['create-user', '--username', 'alice'], env)
  expect(created.code, created.stderr).toBe(0)
  const { api_key } = JSON.parse(created.stdout)
  const me = await fetch(`${base}/v1/users/me`, { headers: { authorization: `Bearer ${api_key}` } })
  expect(me.status).toBe(200)
  expect((await me.json()).username).toBe('alice')
  expect(Date.now() - started).toBeLessThan(30_000)

  // npm start runs the export worker: an export is ready within seconds and downloads.
  const auth = { authorization: `Bearer ${api_key}` }
  const asked = await fetch(`${base}/v1/exports`, { method: 'POST', headers: auth })
  expect(asked.status).toBe(202)
  const { id } = await asked.json()
  let exported: { status: string; url: string | null } = { status: 'pending', url: null }
  for (let i = 0; i < 100 && exported.status !== 'ready'; i++) {
    await new Promise((r) => setTimeout(r, 100))
    exported = await (await fetch(`${base}/v1/exports/${id}`, { headers: auth })).json()
  }
  expect(exported.status).toBe('ready')
  const archive = await fetch(exported.url!)
  expect(archive.status).toBe(200)
  expect((await archive.json()).profile.username).toBe('alice')

  expect([0, 'SIGINT']).toContain(await interrupt(first.child))
  expect(first.output()).toContain('SIGINT: stopping')
  await expect(fetch(`${base}/v1/users/me`)).rejects.toThrow()
  // The embedded PostgreSQL stopped with it: its port is free again.
  await expect(serverAccepts(Number(env.EMBEDDED_POSTGRES_PORT))).resolves.toBe(false)

  const second = await startServer(env)
  expect(second.output()).not.toMatch(/Applied \d+ migration/)
  const again = await fetch(`${base}/v1/users/me?api_key=${api_key}`)
  expect(again.status).toBe(200)
  expect([0, 'SIGINT']).toContain(await interrupt(second.child))
  await expect(serverAccepts(Number(env.EMBEDDED_POSTGRES_PORT))).resolves.toBe(false)
})
