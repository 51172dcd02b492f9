// The push worker route of the edge function, on Deno: what Supabase Cron calls. POST
// /api/internal/push with WORKER_SECRET drains the outbox through the Deno transport: APNs over
// fetch (HTTP/2 by ALPN) to the local stand-in, which checks the provider token, headers and
// payload, and Web Push to the local service, which decrypts the payload (http_ece, RFC 8291).
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { generateVapidKeys } from '../local/push-sender.ts'
import { JWT_SECRET, type CreatedUser, type TestWorld, startWorld } from './support/app.ts'
import { freePort } from './support/net.ts'
import { browserSubscription, startApnsStandIn, startWebPushService } from './support/push.ts'

const ROOT = resolve(import.meta.dirname, '..')
const DENO = join(ROOT, 'node_modules', '.bin', 'deno')
const CONFIG = join(ROOT, 'supabase', 'functions', 'api', 'deno.json')
const ENTRY = join(ROOT, 'supabase', 'functions', 'api', 'index.ts')
const STARTUP_MS = 120_000
const SECRET = 'deno-push-secret'

let world: TestWorld
let apns: Awaited<ReturnType<typeof startApnsStandIn>>
let webPushService: Awaited<ReturnType<typeof startWebPushService>>
let alice: CreatedUser
let bob: CreatedUser
let child: ChildProcess | null = null
let url = ''
let log = ''
const certDir = mkdtempSync(join(tmpdir(), 'push-deno-'))
const vapid = generateVapidKeys()

beforeAll(async () => {
  world = await startWorld()
  apns = await startApnsStandIn()
  webPushService = await startWebPushService()
  alice = await world.createUser('alice')
  bob = await world.createUser('bob', '--first-name', 'Bob')
  writeFileSync(join(certDir, 'ca.pem'), apns.ca)
  const port = await freePort()
  url = `http://127.0.0.1:${port}`
  const env: NodeJS.ProcessEnv = { ...process.env }
  for (const name of ['SUPABASE_DB_URL', 'SUPABASE_URL', 'PUBLIC_URL', 'UPGRADE_URL']) delete env[name]
  child = spawn(DENO, ['run', '--allow-net', '--allow-env', '--allow-read', '--node-modules-dir=none', '--config', CONFIG, ENTRY], {
    cwd: ROOT,
    env: {
      ...env, NO_COLOR: '1', DATABASE_URL: world.databaseUrl, JWT_SECRET, PUBLIC_URL: 'http://api.test', PORT: String(port),
      WORKER_SECRET: SECRET, WEBHOOK_ALLOW_PRIVATE: '1',
      APNS_KEY_ID: apns.config.keyId, APNS_TEAM_ID: apns.config.teamId, APNS_PRIVATE_KEY: apns.config.privateKey.replace(/\n/g, '\\n'),
      APNS_TOPIC: apns.config.topic, APNS_URL: apns.config.url!, DENO_CERT: join(certDir, 'ca.pem'),
      VAPID_PUBLIC_KEY: vapid.publicKey, VAPID_PRIVATE_KEY: vapid.privateKey, VAPID_SUBJECT: 'https://todo.test',
    },
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
  await apns?.close()
  await webPushService?.close()
  await world?.close()
  rmSync(certDir, { recursive: true, force: true })
})

describe('POST /api/internal/push on Deno', () => {
  it('pushes to a device through APNs over HTTP/2 and to a browser through Web Push', async () => {
    const token = await world.token('alice', 'notifications', { firstParty: true })
    const device = 'a1'.repeat(32)
    const registered = await fetch(`${url}/api/v1/devices`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ token: device, platform: 'ios' }),
    })
    expect(registered.status).toBe(201)
    const sub = browserSubscription(`${webPushService.url}/edge`)
    await world.admin('add-web-push-subscription', '--user', 'alice', '--endpoint', sub.endpoint, `--p256dh=${sub.p256dh}`, `--auth=${sub.auth}`)
    const todo = await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'pushed from the edge' } })
    expect((await world.post('/v1/reactions', { auth: bob.api_key, json: { reactable_type: 'Todo', reactable_id: todo.body.id } })).status).toBe(201)

    expect((await fetch(`${url}/api/internal/push`, { method: 'POST', headers: { authorization: 'Bearer nope' } })).status).toBe(404)
    const drained = await fetch(`${url}/api/internal/push`, { method: 'POST', headers: { authorization: `Bearer ${SECRET}` } })
    expect(drained.status, log).toBe(200)
    const outcome = await drained.json()
    const failures = await world.sql`select last_status, last_error from app.push_deliveries`
    expect(outcome, JSON.stringify(failures) + log).toMatchObject({ delivered: 2 })

    expect(apns.pushes).toHaveLength(1)
    expect(apns.pushes[0]).toMatchObject({
      token: device, problem: null, jwt: { kid: apns.config.keyId, iss: apns.config.teamId },
      payload: { aps: { alert: { title: 'Bob liked your todo', body: 'pushed from the edge' }, badge: 1 }, type: 'reaction_todo_create' },
    })
    const [received] = webPushService.received
    expect(received!.problem).toBeNull()
    expect(JSON.parse(sub.decrypt(received!.body))).toMatchObject({ title: 'Bob liked your todo', body: 'pushed from the edge', badge: 1 })
  }, 60_000)

  it('an APNs answer whose body never ends counts by its status, read no further', async () => {
    const token = await world.token('bob', 'notifications', { firstParty: true })
    const device = 'b2'.repeat(32)
    const registered = await fetch(`${url}/api/v1/devices`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ token: device, platform: 'ios' }),
    })
    expect(registered.status).toBe(201)
    apns.answer((push) => (push.token === device ? { status: 200, body: 'endless' } : { status: 200 }))
    const todo = await world.post('/v1/todos', { auth: bob.api_key, json: { body: 'behind a chatty gateway' } })
    expect((await world.post('/v1/reactions', { auth: alice.api_key, json: { reactable_type: 'Todo', reactable_id: todo.body.id } })).status).toBe(201)
    // A read of the endless body would end in the send's timeout, which is a retry: delivered
    // with no retry is the proof, without a clock (issue 31).
    const drained = await fetch(`${url}/api/internal/push`, { method: 'POST', headers: { authorization: `Bearer ${SECRET}` } })
    expect(drained.status, log).toBe(200)
    expect(await drained.json()).toMatchObject({ delivered: 1, retrying: 0 })
    expect((await world.sql`select 1 from app.push_deliveries where device_token = ${device}`).length).toBe(0)
  }, 60_000)
})
