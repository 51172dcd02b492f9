// Issue 30, item 4 (a representative subset): what `npm run start:edge` runs (local/edge-stack.ts:
// the Deno entry behind the gateway's /functions/v1/api, Storage's REST API and Realtime at the
// same host) serves the contract end to end, uploads with a real PUT and exports included, which
// on the edge go through functions/lib/supabase-storage.ts. The Cron jobs are called here when a
// test needs them (runJob), as the schedule would.
import { createHash } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PNG } from 'pngjs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { JWT_SECRET, type CreatedUser, type TestWorld, startWorld } from './support/app.ts'
import { startReceiver } from './support/receiver.ts'
import { type EdgeStack, startEdgeStack } from '../local/edge-stack.ts'

const STARTUP_MS = 120_000

let world: TestWorld
let alice: CreatedUser
let bob: CreatedUser
let stack: EdgeStack
let storageDir: string
let receiver: Awaited<ReturnType<typeof startReceiver>>

beforeAll(async () => {
  world = await startWorld()
  alice = await world.createUser('alice')
  bob = await world.createUser('bob')
  receiver = await startReceiver()
  storageDir = await mkdtemp(join(tmpdir(), 'todo-edge-storage-'))
  stack = await startEdgeStack({
    databaseUrl: world.databaseUrl, jwtSecret: JWT_SECRET, storageDir, port: 0, cron: false,
    env: { WEBHOOK_ALLOW_PRIVATE: '1', UPGRADE_URL: 'https://todo.test/upgrade' },
  })
}, STARTUP_MS + 60_000)

afterAll(async () => {
  await stack?.stop()
  await receiver?.close()
  await world?.close()
  if (storageDir) await rm(storageDir, { recursive: true, force: true })
})

async function call(method: string, path: string, options: { auth?: string; json?: unknown } = {}) {
  const headers: Record<string, string> = {}
  if (options.auth) headers.authorization = `Bearer ${options.auth}`
  if (options.json !== undefined) headers['content-type'] = 'application/json'
  const res = await fetch(stack.publicUrl + path, { method, headers, body: options.json === undefined ? undefined : JSON.stringify(options.json) })
  const text = await res.text()
  let body: any = text
  try {
    body = JSON.parse(text)
  } catch {}
  return { status: res.status, body, headers: res.headers, text }
}

async function job(route: '/internal/maintenance' | '/internal/exports' | '/internal/webhooks') {
  const res = await stack.runJob(route)
  expect(res.status, await res.clone().text()).toBe(200)
  return await res.json()
}

describe('the edge function behind the gateway, end to end', () => {
  it('auth: a key answers, an unknown key and no credential are 403', async () => {
    expect((await call('GET', '/v1/users/me', { auth: alice.api_key })).body).toMatchObject({ username: 'alice' })
    expect((await call('GET', '/v1/users/me', { auth: 'svc_sk_not-a-real-key' })).status).toBe(403)
    expect((await call('GET', '/v1/users/me')).status).toBe(403)
  })

  it('todos and following: a todo posted on the edge, a follow, both seen as on Node', async () => {
    const todo = await call('POST', '/v1/todos', { auth: alice.api_key, json: { body: 'Shipped from the edge' } })
    expect(todo.status, todo.text).toBe(201)
    expect(todo.body.url).toMatch(new RegExp(`^${stack.publicUrl}/todos/\\d+$`))
    expect((await call('POST', '/v1/users/alice/follow', { auth: bob.api_key })).status).toBe(204)
    const node = await world.get(`/v1/todos/${todo.body.id}`, { auth: bob.api_key })
    const edge = await call('GET', `/v1/todos/${todo.body.id}`, { auth: bob.api_key })
    expect(edge.status).toBe(200)
    // The same todo, its url fields each entry's PUBLIC_URL (the Node world's is http://api.test).
    expect(JSON.parse(JSON.stringify(edge.body).replaceAll(stack.publicUrl, 'http://api.test'))).toEqual(node.body)
  })

  it('uploads: ask, PUT to Supabase Storage\'s signed URL, attach, serve; the maintenance job measures the image', async () => {
    const image = new PNG({ width: 40, height: 30 })
    for (let i = 0; i < image.data.length; i += 4) image.data.set([i % 256, 80, 160, 255], i)
    const file = PNG.sync.write(image)
    const checksum = createHash('md5').update(file).digest('base64')
    const asked = await call('POST', '/v1/uploads', { auth: alice.api_key, json: { filename: 'edge.png', byte_size: file.length, checksum, content_type: 'image/png' } })
    expect(asked.status, asked.text).toBe(200)
    expect(asked.body.url.startsWith(`${stack.url}/storage/v1/object/upload/sign/uploads/`)).toBe(true)
    const put = await fetch(asked.body.url, { method: 'PUT', headers: asked.body.headers, body: new Uint8Array(file) })
    expect(put.status, await put.clone().text()).toBe(200)

    const todo = await call('POST', '/v1/todos', { auth: alice.api_key, json: { body: 'With a picture', attachments: [asked.body.signed_id] } })
    expect(todo.status, todo.text).toBe(201)
    const [attachment] = todo.body.attachments
    expect(attachment).toMatchObject({ mime_type: 'image/png', filename: 'edge.png', url: `${stack.publicUrl}/files/${asked.body.key}` })
    const served = await fetch(attachment.url)
    expect(served.status).toBe(200)
    expect(served.headers.get('content-type')).toBe('image/png')
    expect(Buffer.from(await served.arrayBuffer()).equals(file)).toBe(true)

    expect(await job('/internal/maintenance')).toMatchObject({ measuredImages: 1 })
    expect((await call('GET', `/v1/todos/${todo.body.id}`, { auth: alice.api_key })).body.attachments[0]).toMatchObject({ width: 40, height: 30 })
  })

  it('exports: asked on the edge, written by the exports job into Storage, downloaded through the API', async () => {
    const created = await call('POST', '/v1/exports', { auth: alice.api_key })
    expect(created.status, created.text).toBe(202)
    expect(await job('/internal/exports')).toMatchObject({ ready: 1, failed: 0 })
    const ready = await call('GET', `/v1/exports/${created.body.id}`, { auth: alice.api_key })
    expect(ready.body).toMatchObject({ status: 'ready' })
    expect(ready.body.url.startsWith(`${stack.publicUrl}/exports/`)).toBe(true)
    const archive = await fetch(ready.body.url)
    expect(archive.status).toBe(200)
    expect(archive.headers.get('content-disposition')).toMatch(/attachment/)
    expect(await archive.json()).toMatchObject({ format: 'todo-sharing-export', export_id: created.body.id })
  })

  it('webhooks: a new todo is delivered by the webhooks job', async () => {
    const subscribed = await call('POST', '/v1/webhooks/subscriptions', { auth: alice.api_key, json: { url: `${receiver.url}/edge`, event_type: 'new_todo' } })
    expect(subscribed.status, subscribed.text).toBe(201)
    const todo = await call('POST', '/v1/todos', { auth: alice.api_key, json: { body: 'Hooked on the edge' } })
    expect(todo.status).toBe(201)
    const before = receiver.received.length
    await job('/internal/webhooks')
    const got = receiver.received.slice(before).filter((r) => r.path === '/edge')
    expect(got).toHaveLength(1)
    expect(JSON.parse(got[0]!.body)).toMatchObject({ type: 'new_todo', data: { id: todo.body.id } })
  })

  it('pages: /docs, a member\'s page and /health through the prefix', async () => {
    const docs = await fetch(`${stack.publicUrl}/docs`)
    expect(docs.status).toBe(200)
    expect(await docs.text()).toContain('/functions/v1/api/v1/openapi.json')
    expect((await fetch(`${stack.publicUrl}/@alice`)).status).toBe(200)
    expect((await call('GET', '/health')).body).toEqual({ status: 'ok' })
  })
})
