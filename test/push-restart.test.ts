// The push worker as its own process (`npm run push-worker`), killed with kill -9 while APNs
// holds its request: nothing is lost. The killed worker recorded nothing, its lease runs out
// (here at once, rather than waiting the lease), and a restarted worker pushes the notification,
// with the same apns-id. The APNs stand-in's certificate is trusted through NODE_EXTRA_CA_CERTS.
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ROOT } from '../local/paths.ts'
import { type TestWorld, startWorld } from './support/app.ts'
import { startApnsStandIn } from './support/push.ts'

let world: TestWorld
let apns: Awaited<ReturnType<typeof startApnsStandIn>>
const dir = mkdtempSync(join(tmpdir(), 'push-restart-'))

beforeAll(async () => {
  world = await startWorld()
  apns = await startApnsStandIn()
  writeFileSync(join(dir, 'ca.pem'), apns.ca)
})

afterAll(async () => {
  await apns?.close()
  await world?.close()
  rmSync(dir, { recursive: true, force: true })
})

function spawnWorker() {
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', 'local/push-worker.ts'], {
    cwd: ROOT,
    env: {
      ...process.env, DATABASE_URL: world.databaseUrl, DATA_DIR: dir, NODE_EXTRA_CA_CERTS: join(dir, 'ca.pem'),
      APNS_KEY_ID: apns.config.keyId, APNS_TEAM_ID: apns.config.teamId, APNS_PRIVATE_KEY: apns.config.privateKey,
      APNS_TOPIC: apns.config.topic, APNS_URL: apns.config.url!,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout!.on('data', (d) => (output += d))
  child.stderr!.on('data', (d) => (output += d))
  const exited = new Promise((resolve) => child.on('exit', resolve))
  return {
    output: () => output,
    async kill(signal: NodeJS.Signals) {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal)
      await exited
    },
  }
}

describe('npm run push-worker', () => {
  it('killed (kill -9) mid-push: a restarted worker pushes it, nothing lost', async () => {
    const alice = await world.createUser('alice')
    const bob = await world.createUser('bob', '--first-name', 'Bob')
    const token = await world.token('alice', 'notifications', { firstParty: true })
    const device = 'c3'.repeat(32)
    expect((await world.post('/v1/devices', { auth: token, json: { token: device, platform: 'ios' } })).status).toBe(201)
    const todo = await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'survives a crash' } })
    expect((await world.post('/v1/comments', { auth: bob.api_key, json: { commentable_type: 'Todo', commentable_id: todo.body.id, body: 'still here' } })).status).toBe(201)

    apns.answer(() => 'hang')
    const first = spawnWorker()
    try {
      await apns.waitFor(1, 30_000)
    } finally {
      await first.kill('SIGKILL')
    }
    const [leased] = await world.sql`select attempts, status, next_attempt_at from app.push_deliveries`
    expect(leased).toMatchObject({ attempts: 0, status: 'pending' })
    expect((leased!.next_attempt_at as Date).getTime()).toBeGreaterThan(Date.now() + 20_000)
    await world.sql`update app.push_deliveries set next_attempt_at = now() where status = 'pending'`

    apns.answer(() => ({ status: 200 }))
    const second = spawnWorker()
    try {
      await apns.waitFor(2, 30_000)
      for (let i = 0; i < 50 && (await world.sql`select 1 from app.push_deliveries`).length > 0; i++) await new Promise((r) => setTimeout(r, 100))
    } finally {
      await second.kill('SIGTERM')
    }
    expect(apns.pushes).toHaveLength(2)
    expect(apns.pushes[1]!.headers['apns-id']).toBe(apns.pushes[0]!.headers['apns-id'])
    expect(apns.pushes[1]!.payload).toEqual(apns.pushes[0]!.payload)
    expect(apns.pushes[1]!.payload).toMatchObject({ aps: { alert: { title: 'Bob commented on your todo', body: 'still here' }, badge: 1 } })
    expect((await world.sql`select 1 from app.push_deliveries`).length).toBe(0)
    // Both processes used the one provider token the first stored.
    expect(apns.pushes[1]!.jwt.raw).toBe(apns.pushes[0]!.jwt.raw)
  }, 90_000)
})
