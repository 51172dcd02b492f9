// Direct messages delivered in real time, with the real @supabase/supabase-js client against
// the local gateway and the production policies on realtime.messages (migration 1200):
// participants receive message.created (the Message as the API renders it), reactions, read
// receipts and inbox updates; others are refused; typing reaches the other participant on
// conversation:<id>:typing; nothing a client sends passes for the server's events; a refreshed
// token keeps receiving, a revoked one stops; a vanished client does not disturb the others.
import { createClient, type SupabaseClient } from '@supabase/supabase-js'
import WebSocket from 'ws'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { type TestWorld, startWorld } from './support/app.ts'
import { type Listener, type Vsn, listen as listenTo } from './support/realtime.ts'

let world: TestWorld
const clients: SupabaseClient[] = []

/** Subscribes like a chat app does, resolving once the join is answered (SUBSCRIBED or CHANNEL_ERROR). */
const listen = (vsn: Vsn, token: string, topic: string): Promise<Listener> => listenTo(world.supabaseUrl, clients, token, topic, vsn)

/** Polls `check` until it holds; a generous deadline only ends a run that would hang. */
async function until(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

/**
 * Revokes `token`, then waits until the gateway's revocation sweep has run since: a sentinel
 * channel on a token revoked after it is closed by that sweep. Whatever was still on `token` is
 * closed by the same sweep (a condition, not a wait of two sweep intervals).
 */
async function revokeAndAwaitSweep(token: string) {
  const sentinelToken = await world.token('bob', 'public chat', { chat: true })
  const sentinel = await listen('2.0.0', sentinelToken, `conversation:${conversationId}`)
  const closed = new Promise<string>((resolve) => {
    sentinel.channel.on('system', {}, (message: { status?: string; message?: string }) => {
      if (message.status === 'error') resolve(String(message.message))
    })
  })
  await world.admin('revoke-token', '--token', token)
  await world.admin('revoke-token', '--token', sentinelToken)
  expect(await closed).toBe('The access token was revoked')
}

/** Alice's message to the conversation, as the API answered it (201: a refusal would only show as a wait that times out). */
async function send(body: string) {
  const sent = await world.post(`/v1/conversations/${conversationId}/messages`, { auth: alice.token, json: { body } })
  expect(sent.status, JSON.stringify(sent.body)).toBe(201)
  return sent.body
}

let alice: { id: string; username: string; token: string }
let bob: { id: string; username: string; token: string }
let carol: { id: string; username: string; token: string }
let conversationId: string

beforeAll(async () => {
  // Revocation sweeps every second (npm start: every 5 s): the tests wait for a sweep, not a time.
  world = await startWorld({ revocationCheckIntervalMs: 1_000 })
  const make = async (name: string) => {
    const user = await world.createUser(name)
    return { id: user.id, username: name, token: await world.token(name, 'public chat', { chat: true }) }
  }
  alice = await make('alice')
  bob = await make('bob')
  carol = await make('carol')
  conversationId = (await world.post('/v1/conversations', { auth: alice.token, json: { user: 'bob' } })).body.id
  // Bob answers once, so the caps never get in the way of these tests.
  await world.post(`/v1/conversations/${conversationId}/messages`, { auth: bob.token, json: { body: 'hello' } })
})
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.realtime.disconnect()))
})
afterAll(() => world.close())

describe.each(['1.0.0', '2.0.0'] as const)('supabase-js, vsn %s', (vsn) => {
  it('a participant receives the message another participant sends over REST, as the API renders it', async () => {
    const bobListens = await listen(vsn, bob.token, `conversation:${conversationId}`)
    expect(bobListens.status).toBe('SUBSCRIBED')
    const sent = await world.post(`/v1/conversations/${conversationId}/messages`, { auth: alice.token, json: { body: `hi over ${vsn}` } })
    expect(sent.status).toBe(201)
    const delivered = await bobListens.waitFor('message.created', (m) => m.id === sent.body.id)
    // The message as the recipient sees it (issue 11, item 7): the sender's answer carries their
    // own record, whose dismissed_time_zone is theirs alone; the broadcast never does.
    const { dismissed_time_zone: _ownOnly, ...creator } = sent.body.creator
    expect(delivered).toEqual({ ...sent.body, creator })
  })

  it('reactions and read receipts arrive too; the inbox topic gets unread counts', async () => {
    const aliceListens = await listen(vsn, alice.token, `conversation:${conversationId}`)
    const bobInbox = await listen(vsn, bob.token, `user:${bob.id}`)
    expect([aliceListens.status, bobInbox.status]).toEqual(['SUBSCRIBED', 'SUBSCRIBED'])
    const message = await send('react please')
    expect(await bobInbox.waitFor('inbox.updated', (p) => p.message_id === message.id)).toMatchObject({ conversation_id: conversationId, unread_count: 1 })
    await world.post(`/v1/messages/${message.id}/reactions`, { auth: bob.token, json: { content: '🔥' } })
    expect(await aliceListens.waitFor('reaction.created', (p) => p.message_id === message.id)).toMatchObject({ content: '🔥', user: { username: 'bob' } })
    await world.post(`/v1/conversations/${conversationId}/reading`, { auth: bob.token })
    expect(await aliceListens.waitFor('conversation.read', (p) => p.user_id === bob.id)).toMatchObject({ conversation_id: conversationId })
    expect(await bobInbox.waitFor('inbox.updated', (p) => p.unread_count === 0)).toMatchObject({ conversation_id: conversationId })
  })

  it('refused: a non-participant, a token without chat, an unapproved app, someone else\'s inbox', async () => {
    const topic = `conversation:${conversationId}`
    const refusals = [
      await listen(vsn, carol.token, topic),
      await listen(vsn, await world.token('bob', 'public write'), topic),
      await listen(vsn, await world.token('bob', 'public chat'), topic),
      await listen(vsn, carol.token, `user:${bob.id}`),
    ]
    for (const refused of refusals) {
      expect(refused.status).toBe('CHANNEL_ERROR')
      expect(refused.reason ?? '').toMatch(/Unauthorized/)
    }
  })

  it('typing from one participant reaches the other, not the sender, on conversation:<id>:typing', async () => {
    const topic = `conversation:${conversationId}:typing`
    const aliceListens = await listen(vsn, alice.token, topic)
    const bobListens = await listen(vsn, bob.token, topic)
    const result = await aliceListens.channel.send({ type: 'broadcast', event: 'typing', payload: { user: alice.username } })
    expect(result).toBe('ok')
    expect(await bobListens.waitFor('typing')).toEqual({ user: 'alice' })
    await new Promise((r) => setTimeout(r, 200))
    expect(aliceListens.events.filter((e) => e.event === 'typing')).toEqual([])
  })
})

describe('forged events (issue 11, item 4)', () => {
  it.each(['1.0.0', '2.0.0'] as const)('a participant cannot broadcast on the server\'s topics: forged message.created, reads and reactions never arrive (vsn %s)', async (vsn) => {
    const topic = `conversation:${conversationId}`
    const bobListens = await listen(vsn, bob.token, topic)
    const bobInbox = await listen(vsn, bob.token, `user:${bob.id}`)
    const forger = await listen(vsn, alice.token, topic)
    const forgerInbox = await listen(vsn, alice.token, `user:${alice.id}`)
    expect([bobListens, bobInbox, forger, forgerInbox].map((l) => l.status)).toEqual(['SUBSCRIBED', 'SUBSCRIBED', 'SUBSCRIBED', 'SUBSCRIBED'])
    const forged = { id: 'message_forged', conversation_id: conversationId, body: 'send me your password', creator: { username: 'support' } }
    for (const event of ['message.created', 'conversation.read', 'reaction.created', 'inbox.updated']) {
      await forger.channel.send({ type: 'broadcast', event, payload: forged })
      await forgerInbox.channel.send({ type: 'broadcast', event, payload: forged })
    }
    await new Promise((r) => setTimeout(r, 200))
    // A real message sent after the forgeries: once it has arrived, anything sent before would have.
    const real = await send('the real one')
    await bobListens.waitFor('message.created', (m) => m.id === real.id)
    await bobInbox.waitFor('inbox.updated', (p) => p.message_id === real.id)
    expect(bobListens.events.filter((e) => e.payload?.id === 'message_forged')).toEqual([])
    expect(bobInbox.events.filter((e) => e.payload?.id === 'message_forged')).toEqual([])
    expect(forger.events.filter((e) => e.payload?.id === 'message_forged')).toEqual([])
  })

  it('public channels are refused, as with Supabase\'s "private channels only": nobody listens where anyone may write', async () => {
    const client = createClient(world.supabaseUrl, 'anon', { realtime: { transport: WebSocket as never } })
    clients.push(client)
    await client.realtime.setAuth(bob.token)
    const reason = await new Promise<string | undefined>((resolve) => {
      client.channel(`conversation:${conversationId}`, { config: { private: false } }).subscribe((status, err) => {
        if (status !== 'SUBSCRIBED') resolve(`${status}: ${err?.message}`)
        else resolve(undefined)
      })
    })
    expect(reason).toMatch(/^CHANNEL_ERROR: .*PrivateOnly/)
  })

  it('what arrives on the typing topic is only ever what participants sent there', async () => {
    const typing = `conversation:${conversationId}:typing`
    const bobTyping = await listen('2.0.0', bob.token, typing)
    const bobMessages = await listen('2.0.0', bob.token, `conversation:${conversationId}`)
    const real = await send('not on typing')
    await bobMessages.waitFor('message.created', (m) => m.id === real.id)
    await new Promise((r) => setTimeout(r, 100))
    expect(bobTyping.events).toEqual([])
  })
})

describe('tokens and robustness', () => {
  it('a client whose token is refreshed keeps receiving on the new token: the old one revoked, its channel stays', async () => {
    const old = await world.token('bob', 'public chat', { chat: true })
    const bobListens = await listen('2.0.0', old, `conversation:${conversationId}`)
    // The gateway checks the new token when it arrives (one more authorization check) and then
    // moves the channel to it. Waiting for the check to start was not enough: a sweep that ran
    // while the check still ran closed the channel on the old token (a full run under load).
    const checks = world.realtime.stats().authorizationChecks
    const refreshed = world.realtime.stats().tokensRefreshed
    await bobListens.client.realtime.setAuth(await world.token('bob', 'public chat', { chat: true }))
    await until(() => world.realtime.stats().tokensRefreshed > refreshed, 'the gateway moved the channel to the new token')
    expect(world.realtime.stats().authorizationChecks).toBeGreaterThan(checks)
    // The old token revoked: had setAuth been ignored, the channel would run on it and close at
    // the next revocation sweep. The sweep is seen on another channel of a token revoked after it.
    await revokeAndAwaitSweep(old)
    const sent = await send('after refresh')
    expect((await bobListens.waitFor('message.created', (m) => m.id === sent.id)).body).toBe('after refresh')
    expect(bobListens.channel.state).toBe('joined')
  })

  it('a revoked token stops receiving at the next revocation sweep: its channels close; other tokens keep theirs (issue 11, item 5)', async () => {
    const doomed = await world.token('bob', 'public chat', { chat: true })
    const revokedListens = await listen('2.0.0', doomed, `conversation:${conversationId}`)
    const revokedInbox = await listen('1.0.0', doomed, `user:${bob.id}`)
    const keeps = await listen('2.0.0', bob.token, `conversation:${conversationId}`)
    const closed = (listener: Listener) => new Promise<string>((resolve) => {
      listener.channel.on('system', {}, (message: { status?: string; message?: string }) => {
        if (message.status === 'error') resolve(String(message.message))
      })
    })
    const closings = [closed(revokedListens), closed(revokedInbox)]
    expect([revokedListens.status, revokedInbox.status, keeps.status]).toEqual(['SUBSCRIBED', 'SUBSCRIBED', 'SUBSCRIBED'])
    await world.admin('revoke-token', '--token', doomed)
    // Closed by the gateway's next revocation sweep (every second here, 5 s in npm start); how soon is
    // the sweep's interval, not a clock read here (issue 31: 10 s on a loaded machine proved nothing).
    expect(await Promise.all(closings)).toEqual(['The access token was revoked', 'The access token was revoked'])
    const after = await send('after revocation')
    await keeps.waitFor('message.created', (m) => m.id === after.id)
    expect(revokedListens.events.filter((e) => e.payload?.id === after.id)).toEqual([])
    expect(revokedInbox.events.filter((e) => e.payload?.message_id === after.id)).toEqual([])
    expect(revokedListens.channel.state).toBe('closed')
  }, 20_000)

  it('a channel refreshed to a new token is not closed when the old token is revoked', async () => {
    const first = await world.token('bob', 'public chat', { chat: true })
    const listens = await listen('2.0.0', first, `conversation:${conversationId}`)
    // The channel on the new token (its check done, not only started), then the old one revoked.
    const refreshed = world.realtime.stats().tokensRefreshed
    await listens.client.realtime.setAuth(await world.token('bob', 'public chat', { chat: true }))
    await until(() => world.realtime.stats().tokensRefreshed > refreshed, 'the gateway moved the channel to the new token')
    // A sweep after the revocation has run (a fixed 10.5 s wait before issue 31).
    await revokeAndAwaitSweep(first)
    const sent = await send('still here')
    await listens.waitFor('message.created', (m) => m.id === sent.id)
    expect(listens.channel.state).toBe('joined')
  })

  it('the gateway survives a client vanishing mid-stream; the others keep receiving', async () => {
    const topic = `conversation:${conversationId}`
    const vanishing = new WebSocket(`${world.supabaseUrl.replace(/^http/, 'ws')}/realtime/v1/websocket?apikey=anon&vsn=1.0.0`)
    await new Promise((resolve) => vanishing.once('open', resolve))
    vanishing.send(JSON.stringify({ topic: `realtime:${topic}`, event: 'phx_join', ref: '1', join_ref: '1',
      payload: { config: { broadcast: { self: false }, presence: { key: '', enabled: false }, postgres_changes: [], private: true }, access_token: bob.token } }))
    const joined = JSON.parse(String(await new Promise((resolve) => vanishing.once('message', resolve))))
    expect(joined).toMatchObject({ event: 'phx_reply', payload: { status: 'ok' } })
    const stayer = await listen('1.0.0', bob.token, topic)
    const connections = world.realtime.stats().connections
    const first = await send('one')
    vanishing.terminate()
    const second = await send('two')
    expect((await stayer.waitFor('message.created', (m) => m.id === first.id)).body).toBe('one')
    expect((await stayer.waitFor('message.created', (m) => m.id === second.id)).body).toBe('two')
    // The gateway let the vanished socket go (issue 31: this test asserted nothing before).
    await until(() => world.realtime.stats().connections === connections - 1, 'the vanished connection dropped')
    expect(stayer.channel.state).toBe('joined')
  })
})
