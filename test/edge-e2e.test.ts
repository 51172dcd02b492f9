// Issue 30, item 4 (a representative subset): what `npm run start:edge` runs (local/edge-stack.ts:
// the Deno entry behind the gateway's /functions/v1/api, Storage's REST API and Realtime at the
// same host) serves the contract end to end, uploads with a real PUT and exports included, which
// on the edge go through functions/lib/supabase-storage.ts. The Cron jobs are called here when a
// test needs them (runJob), as the schedule would.
import { createHash } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { SupabaseClient } from '@supabase/supabase-js'
import { PNG } from 'pngjs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { JWT_SECRET, type CreatedUser, type TestWorld, startWorld } from './support/app.ts'
import { startReceiver } from './support/receiver.ts'
import { listen } from './support/realtime.ts'
import { type EdgeStack, startEdgeStack } from '../local/edge-stack.ts'

const STARTUP_MS = 120_000

let world: TestWorld
let alice: CreatedUser
let bob: CreatedUser
let stack: EdgeStack
let storageDir: string
let receiver: Awaited<ReturnType<typeof startReceiver>>
const clients: SupabaseClient[] = []

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
  await Promise.all(clients.map((client) => client.realtime.disconnect()))
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

/**
 * A GET on both entries at once: 200 and the same body on both, but for url fields, which
 * carry each entry's PUBLIC_URL (the Node world's is http://api.test).
 */
async function sameOnBoth(path: string, auth: string) {
  const edge = await call('GET', path, { auth })
  const node = await world.get(path, { auth })
  expect(node.status, `${path} on Node: ${node.text}`).toBe(200)
  expect(edge.status, `${path} on the edge: ${edge.text}`).toBe(200)
  // Both sides: what is stored with its links (a notification's) keeps the writer's PUBLIC_URL.
  const unified = (body: unknown) => JSON.parse(JSON.stringify(body).replaceAll(stack.publicUrl, 'http://api.test'))
  expect(unified(edge.body), path).toEqual(unified(node.body))
  return edge.body
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

  it('uploads: ask, PUT to Supabase Storage\'s signed URL, attach (which reads the bytes: type, dimensions), serve; the maintenance job reads what nobody attached', async () => {
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

    expect(attachment).toMatchObject({ width: 40, height: 30 })

    // Stored, never attached: the maintenance job reads it (its type, its dimensions).
    const later = await call('POST', '/v1/uploads', { auth: alice.api_key, json: { filename: 'later.png', byte_size: file.length, checksum, content_type: 'image/png' } })
    expect((await fetch(later.body.url, { method: 'PUT', headers: later.body.headers, body: new Uint8Array(file) })).status).toBe(200)
    expect(await job('/internal/maintenance')).toMatchObject({ measuredImages: 1 })
    const [read] = await world.sql`select sniffed_type, width, height from app.uploads where key = ${later.body.key}`
    expect(read).toMatchObject({ sniffed_type: 'image/png', width: 40, height: 30 })
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

  it('social, follow requests, projects, lists, search, notifications: written on the edge, read alike on both entries', async () => {
    const carol = await world.createUser('carol', '--privacy', 'protected')
    await world.admin('create-project', '--owner', 'alice', '--name', 'Edge works', '--slug', 'edgeworks', '--hashtag', 'edgeworks')
    const todo = await call('POST', '/v1/todos', { auth: alice.api_key, json: { body: 'Proxied the gateway #edgeworks' } })
    expect(todo.status, todo.text).toBe(201)
    const comment = await call('POST', '/v1/comments', { auth: bob.api_key, json: { commentable_type: 'Todo', commentable_id: todo.body.id, body: 'well done' } })
    expect(comment.status, comment.text).toBe(201)
    const reaction = await call('POST', '/v1/reactions', { auth: bob.api_key, json: { reactable_type: 'Todo', reactable_id: todo.body.id } })
    expect(reaction.status, reaction.text).toBe(201)
    // Following a protected member is a request she approves.
    expect((await call('POST', '/v1/users/carol/follow', { auth: alice.api_key })).status).toBe(204)
    expect((await sameOnBoth('/v1/follow_requests', carol.api_key)).data.map((u: { username: string }) => u.username)).toEqual(['alice'])
    expect((await call('POST', '/v1/follow_requests/alice/approve', { auth: carol.api_key })).status).toBe(204)
    expect(await sameOnBoth('/v1/users/carol', alice.api_key)).toMatchObject({ following: true })

    expect((await sameOnBoth(`/v1/todos/${todo.body.id}`, bob.api_key))).toMatchObject({ comments_count: 1, reactions_count: 1 })
    expect((await sameOnBoth(`/v1/todos/${todo.body.id}/comments`, alice.api_key)).data[0]).toMatchObject({ body: 'well done' })
    expect((await sameOnBoth('/v1/projects/edgeworks/todos', bob.api_key)).data.map((t: { id: string }) => t.id)).toContain(todo.body.id)
    await sameOnBoth('/v1/projects/edgeworks', bob.api_key)
    await sameOnBoth('/v1/users/alice/projects', bob.api_key)
    await sameOnBoth('/v1/users/alice/todos?limit=2', bob.api_key)
    await sameOnBoth('/v1/timeline?limit=3', bob.api_key)
    // Search takes a first-party app's token, never an API key.
    const searcher = await world.token('bob', 'public', { firstParty: true })
    expect((await sameOnBoth('/v1/search/todos?query=proxied', searcher)).data.map((t: { id: string }) => t.id)).toEqual([todo.body.id])
    const notifier = await world.token('alice', 'public write notifications', { firstParty: true })
    expect((await sameOnBoth('/v1/notifications', notifier)).unread_count).toBeGreaterThan(0)
    expect((await call('POST', '/v1/notifications/reading', { auth: notifier })).status).toBe(204)
    expect((await sameOnBoth('/v1/notifications', notifier)).unread_count).toBe(0)
  })

  it('chat with realtime: a message sent on the edge reaches a supabase-js client at the gateway\'s host', async () => {
    const aliceChat = await world.token('alice', 'public chat', { chat: true })
    const bobChat = await world.token('bob', 'public chat', { chat: true })
    const conversation = await call('POST', '/v1/conversations', { auth: aliceChat, json: { user: 'bob' } })
    expect(conversation.status, conversation.text).toBe(201)
    // Realtime at the same host as the function, as supabase-js finds it from SUPABASE_URL.
    const bobListens = await listen(stack.url, clients, bobChat, `conversation:${conversation.body.id}`)
    expect(bobListens.status).toBe('SUBSCRIBED')
    const sent = await call('POST', `/v1/conversations/${conversation.body.id}/messages`, { auth: aliceChat, json: { body: 'sent through the edge' } })
    expect(sent.status, sent.text).toBe(201)
    expect(await bobListens.waitFor('message.created', (m) => m.id === sent.body.id, 30_000)).toMatchObject({ id: sent.body.id, body: 'sent through the edge' })
    await sameOnBoth(`/v1/conversations/${conversation.body.id}/messages`, bobChat)
  })

  it('account: billing alike on both entries; a deletion asked on the edge, approved, ends the account', async () => {
    const dora = await world.createUser('dora')
    expect(await sameOnBoth('/v1/billing', dora.api_key)).toMatchObject({ status: 'active' })
    expect((await call('DELETE', '/v1/account', { auth: dora.api_key })).status).toBe(204)
    // Asked twice: 422 while the request is pending, on the edge as on Node.
    expect((await call('DELETE', '/v1/account', { auth: dora.api_key })).status).toBe(422)
    expect(await world.admin('approve-deletion', '--user', 'dora')).toEqual({ deleted: dora.id })
    expect((await call('GET', '/v1/users/me', { auth: dora.api_key })).status).toBe(403)
    expect((await call('GET', '/v1/users/dora', { auth: alice.api_key })).status).toBe(404)
  })

  it('pages: /docs, a member\'s page and /health through the prefix', async () => {
    const docs = await fetch(`${stack.publicUrl}/docs`)
    expect(docs.status).toBe(200)
    expect(await docs.text()).toContain('/functions/v1/api/v1/openapi.json')
    expect((await fetch(`${stack.publicUrl}/@alice`)).status).toBe(200)
    expect((await call('GET', '/health')).body).toEqual({ status: 'ok' })
  })
})
