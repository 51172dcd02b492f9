// `npm start` runs the webhook worker (issue 14, item 6, the local half): a todo posted to the
// running server reaches a real receiver by itself, signed so that `standardwebhooks`
// verifies it, and the operator CLI (the real `npm run admin` program) shows the delivery log.
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Webhook } from 'standardwebhooks'
import { afterAll, expect, it } from 'vitest'
import { freePort } from './support/net.ts'
import { interrupt, runCli, startServer } from './support/process.ts'
import { startReceiver } from './support/receiver.ts'

const dirs: string[] = []
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true })
})

it('npm start delivers a new todo to its subscription on its own (its worker, nothing called by the test); webhook-deliveries shows it', { timeout: 180_000 }, async () => {
  const receiver = await startReceiver()
  const dataDir = await mkdtemp(join(tmpdir(), 'todo-start-webhooks-'))
  dirs.push(dataDir)
  const env = {
    DATA_DIR: dataDir,
    PORT: String(await freePort()),
    EMBEDDED_POSTGRES_PORT: String(await freePort()),
    DATABASE_URL: '',
    JWT_SECRET: '',
    WEBHOOK_ALLOW_PRIVATE: '1',
  }
  const base = `http://127.0.0.1:${env.PORT}`
  const server = await startServer(env)
  try {
    const created = await runCli(['create-user', '--username', 'alice'], env)
    expect(created.code, created.stderr).toBe(0)
    const { api_key } = JSON.parse(created.stdout)
    const headers = { authorization: `Bearer ${api_key}`, 'content-type': 'application/json' }
    const subscription = await fetch(`${base}/v1/webhooks/subscriptions`, {
      method: 'POST', headers, body: JSON.stringify({ url: `${receiver.url}/hook`, event_type: 'new_todo' }),
    })
    expect(subscription.status).toBe(201)
    const { id, secret } = (await subscription.json()) as { id: string; secret: string }

    const todo = (await (await fetch(`${base}/v1/todos`, { method: 'POST', headers, body: JSON.stringify({ body: 'from npm start' }) })).json()) as { id: string }
    // How soon is the bench's to measure (a clock here fails on a loaded machine: issue 31); the
    // deadline only bounds a run that would otherwise hang.
    const [request] = await receiver.waitFor(1, 60_000)
    const event = new Webhook(secret).verify(request!.body, request!.headers) as { type: string; data: { id: string } }
    expect(event).toMatchObject({ type: 'new_todo', data: { id: todo.id } })

    // The worker records the attempt once the answer is in: ask again until it has.
    let log = await runCli(['webhook-deliveries', '--user', 'alice'], env)
    for (let i = 0; i < 10 && log.code === 0 && !log.stdout.includes('"delivered"'); i++) log = await runCli(['webhook-deliveries', '--user', 'alice'], env)
    expect(log.code, log.stderr).toBe(0)
    expect(JSON.parse(log.stdout)).toEqual({
      data: [{ id: request!.headers['webhook-id'], subscription_id: id, todo_id: todo.id, status: 'delivered', attempts: 1, last_status: 200, next_attempt_at: null }],
    })
  } finally {
    expect([0, 'SIGINT']).toContain(await interrupt(server.child))
    await receiver.close()
  }
})
