// Issue 30, item 2: `npm run start:edge` serves the edge function under /functions/v1/api, with
// Storage's REST API and Realtime at the same host, runs the Cron jobs on their own, and stops on
// Ctrl-C. On a test world's migrated database (DATABASE_URL), so no second PostgreSQL starts.
import { type ChildProcess, spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import WebSocket from 'ws'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { ROOT } from '../local/paths.ts'
import { JWT_SECRET, type CreatedUser, type TestWorld, startWorld } from './support/app.ts'
import { freePort } from './support/net.ts'
import { interrupt } from './support/process.ts'

let world: TestWorld
let alice: CreatedUser
let dataDir: string
let child: ChildProcess | null = null

beforeAll(async () => {
  world = await startWorld()
  alice = await world.createUser('alice')
  dataDir = await mkdtemp(join(tmpdir(), 'todo-start-edge-'))
})

afterAll(async () => {
  if (child && child.exitCode === null) await interrupt(child).catch(() => process.kill(-child!.pid!, 'SIGKILL'))
  await world?.close()
  if (dataDir) await rm(dataDir, { recursive: true, force: true })
})

/** Polls `check` until it holds (generous deadline: a loaded machine). */
async function until(what: string, check: () => boolean, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
}

it('serves the function, Storage and Realtime at one host, runs the Cron jobs, stops on Ctrl-C', { timeout: 240_000 }, async () => {
  const port = await freePort()
  const base = `http://127.0.0.1:${port}`
  const env = { DATA_DIR: dataDir, PORT: String(port), DATABASE_URL: world.databaseUrl, JWT_SECRET, PUBLIC_URL: '', WEB_URL: '', WORKER_SECRET: '' }
  let output = ''
  child = spawn('npm', ['run', 'start:edge'], { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true })
  child.stdout!.on('data', (d: Buffer) => (output += d))
  child.stderr!.on('data', (d: Buffer) => (output += d))
  await until('start:edge to listen', () => output.includes('listening on') || child!.exitCode !== null, 180_000)
  expect(output).toContain(`listening on ${base}/functions/v1/api`)

  const auth = { authorization: `Bearer ${alice.api_key}` }
  const me = await fetch(`${base}/functions/v1/api/v1/users/me`, { headers: auth })
  expect(me.status).toBe(200)
  expect(((await me.json()) as { username: string }).username).toBe('alice')

  // An upload's PUT goes to Storage's REST API on the same host.
  const file = Buffer.from('plain text, uploaded through the edge')
  const asked = await fetch(`${base}/functions/v1/api/v1/uploads`, {
    method: 'POST', headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ filename: 'note.txt', byte_size: file.length, checksum: createHash('md5').update(file).digest('base64'), content_type: 'text/plain' }),
  })
  expect(asked.status).toBe(200)
  const upload = (await asked.json()) as { url: string; headers: Record<string, string> }
  expect(upload.url.startsWith(`${base}/storage/v1/object/upload/sign/uploads/`)).toBe(true)
  expect((await fetch(upload.url, { method: 'PUT', headers: upload.headers, body: new Uint8Array(file) })).status).toBe(200)

  // Realtime's websocket at the same host.
  const opened = await new Promise<boolean>((resolve) => {
    const socket = new WebSocket(`${base.replace(/^http/, 'ws')}/realtime/v1/websocket?vsn=1.0.0`)
    socket.on('open', () => {
      socket.close()
      resolve(true)
    })
    socket.on('error', () => resolve(false))
  })
  expect(opened).toBe(true)

  // The Cron jobs call the worker routes on their own (webhooks and push every 5 s, after 1 s).
  await until('the webhooks and push jobs', () => /POST \/api\/internal\/webhooks 200/.test(output) && /POST \/api\/internal\/push 200/.test(output))
  await until('the maintenance and exports jobs', () => /POST \/api\/internal\/maintenance 200/.test(output) && /POST \/api\/internal\/exports 200/.test(output))

  expect([0, 'SIGINT']).toContain(await interrupt(child))
  child = null
  expect(output).toContain('SIGINT: stopping')
  await expect(fetch(`${base}/functions/v1/api/health`)).rejects.toThrow()
})
