// The webhook worker route of the edge function, on Deno (issue 14, items 5 and 6): what
// Supabase Cron calls. POST /api/internal/webhooks with WORKER_SECRET drains the outbox through
// the Deno sender to a real receiver, and the signature verifies with `standardwebhooks`;
// without WEBHOOK_ALLOW_PRIVATE the Deno sender refuses private addresses before any fetch.
import { type ChildProcess, execFile, spawn } from 'node:child_process'
import { join, resolve } from 'node:path'
import { promisify } from 'node:util'
import { Webhook } from 'standardwebhooks'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { JWT_SECRET, type CreatedUser, type TestWorld, startWorld } from './support/app.ts'
import { freePort } from './support/net.ts'
import { startReceiver } from './support/receiver.ts'

const ROOT = resolve(import.meta.dirname, '..')
const DENO = join(ROOT, 'node_modules', '.bin', 'deno')
const CONFIG = join(ROOT, 'supabase', 'functions', 'api', 'deno.json')
const ENTRY = join(ROOT, 'supabase', 'functions', 'api', 'index.ts')
const STARTUP_MS = 120_000
const SECRET = 'deno-worker-secret'

let world: TestWorld
let receiver: Awaited<ReturnType<typeof startReceiver>>
let alice: CreatedUser
let child: ChildProcess | null = null
let url = ''
let log = ''

beforeAll(async () => {
  world = await startWorld()
  receiver = await startReceiver()
  alice = await world.createUser('alice')
  const port = await freePort()
  url = `http://127.0.0.1:${port}`
  const env: NodeJS.ProcessEnv = { ...process.env }
  for (const name of ['SUPABASE_DB_URL', 'SUPABASE_URL', 'PUBLIC_URL', 'UPGRADE_URL']) delete env[name]
  child = spawn(DENO, ['run', '--allow-net', '--allow-env', '--node-modules-dir=none', '--config', CONFIG, ENTRY], {
    cwd: ROOT,
    env: { ...env, NO_COLOR: '1', DATABASE_URL: world.databaseUrl, JWT_SECRET, PUBLIC_URL: 'http://api.test', PORT: String(port), WORKER_SECRET: SECRET, WEBHOOK_ALLOW_PRIVATE: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  child.stdout!.on('data', (d) => (log = (log + d).slice(-20_000)))
  child.stderr!.on('data', (d) => (log = (log + d).slice(-20_000)))
  const deadline = Date.now() + STARTUP_MS
  for (;;) {
    if (child.exitCode !== null) throw new Error(`deno exited:\n${log}`)
    try {
      await fetch(`${url}/api/v1/openapi.json`, { signal: AbortSignal.timeout(2_000) })
      break
    } catch {
      if (Date.now() > deadline) throw new Error(`deno did not answer:\n${log}`)
      await new Promise((r) => setTimeout(r, 200))
    }
  }
}, STARTUP_MS + 60_000)

afterAll(async () => {
  if (child && child.exitCode === null) {
    const exited = new Promise((r) => child!.once('exit', r))
    child.kill('SIGTERM')
    await exited
  }
  await receiver?.close()
  await world?.close()
})

describe('POST /api/internal/webhooks on Deno', () => {
  it('drains the outbox to the receiver, signed so that standardwebhooks verifies it; 404 without the secret', async () => {
    const created = await fetch(`${url}/api/v1/webhooks/subscriptions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${alice.api_key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ url: `${receiver.url}/edge`, event_type: 'new_todo' }),
    })
    expect(created.status).toBe(201)
    const subscription = (await created.json()) as { secret: string }
    const todo = await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'from the edge' } })

    expect((await fetch(`${url}/api/internal/webhooks`, { method: 'POST', headers: { authorization: 'Bearer nope' } })).status).toBe(404)
    const drained = await fetch(`${url}/api/internal/webhooks`, { method: 'POST', headers: { authorization: `Bearer ${SECRET}` } })
    expect(drained.status, log).toBe(200)
    expect(await drained.json()).toMatchObject({ delivered: 1 })
    const [request] = await receiver.waitFor(1)
    const event = new Webhook(subscription.secret).verify(request!.body, request!.headers) as { type: string; data: { id: string } }
    expect(event).toMatchObject({ type: 'new_todo', data: { id: todo.body.id } })
  }, 60_000)

  it('the Deno sender refuses private and loopback literals, IPv4-mapped and decimal forms included, before fetching', async () => {
    const script = `
      import { denoWebhookSender } from ${JSON.stringify(join(ROOT, 'supabase/functions/api/webhook-sender.ts'))}
      const send = denoWebhookSender({ allowPrivate: false })
      const out = []
      for (const url of ${JSON.stringify([`${receiver.url}/x`, `http://[::ffff:127.0.0.1]:${receiver.port}/x`, `http://2130706433:${receiver.port}/x`, 'http://169.254.169.254/latest'])})
        out.push(await send({ url, headers: {}, body: '{}', timeoutMs: 1000 }))
      console.log(JSON.stringify(out))`
    const before = receiver.received.length
    const { stdout } = await promisify(execFile)(DENO, ['eval', '--node-modules-dir=none', '--config', CONFIG, script], {
      cwd: ROOT,
      env: { ...process.env, NO_COLOR: '1' },
      timeout: STARTUP_MS,
    })
    const results = JSON.parse(stdout.trim().split('\n').pop()!) as { status: number | null; error: string }[]
    expect(results).toHaveLength(4)
    for (const result of results) expect(result).toMatchObject({ status: null, error: expect.stringMatching(/^refused/) })
    expect(receiver.received.length).toBe(before)
  }, STARTUP_MS)
})
