// The local Realtime gateway (local/realtime.ts) with the real client, @supabase/supabase-js,
// in both protocol versions: private channels authorized by RLS on realtime.messages, rows
// delivered at commit, client broadcasts, token refresh and expiry, robustness, partitions,
// and the end-to-end latency of one message to 100 subscribers.
//
// The chat schema is not needed: this file's own database gets its own policies, on topics
// `room:<sub>` (the user themself) and `team:<id>` (rt_test.members), both requiring the
// token's `chat` claim, so that a refreshed token without it loses access.
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { randomUUID } from 'node:crypto'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { createClient, type RealtimeChannel, type SupabaseClient } from '@supabase/supabase-js'
import { SignJWT } from 'jose'
import WebSocket from 'ws'
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest'
import { createSql } from '../functions/lib/sql.ts'
import { startRealtimeGateway, type RealtimeGatewayOptions } from '../local/realtime.ts'
import { decodeText, encodeText, encodeUserBroadcastPush, type Frame, type Vsn } from '../local/realtime/protocol.ts'
import { JWT_SECRET, startWorld, type TestWorld } from './support/app.ts'

let world: TestWorld
const clients: SupabaseClient[] = []
const raws: RawClient[] = []

beforeAll(async () => {
  // Public channels too: this file tests the protocol as Supabase serves it by default.
  world = await startWorld({ realtimePrivateOnly: false })
  await world.sql.unsafe(`
    create schema rt_test;
    create table rt_test.members (
      topic text not null,
      user_id uuid not null,
      can_write boolean not null default false,
      primary key (topic, user_id)
    );
    grant usage on schema rt_test to authenticated;
    grant select on rt_test.members to authenticated;

    create policy "rt_test: read own room and member teams, with a chat token" on realtime.messages
      for select to authenticated using (
        realtime.messages.extension = 'broadcast'
        and coalesce((auth.jwt() ->> 'chat')::boolean, false)
        and ((select realtime.topic()) = 'room:' || (auth.jwt() ->> 'sub')
             or exists (select 1 from rt_test.members m
                         where m.topic = (select realtime.topic()) and m.user_id = (select auth.uid()))));

    create policy "rt_test: write own room and teams where allowed, with a chat token" on realtime.messages
      for insert to authenticated with check (
        realtime.messages.extension = 'broadcast'
        and coalesce((auth.jwt() ->> 'chat')::boolean, false)
        and ((select realtime.topic()) = 'room:' || (auth.jwt() ->> 'sub')
             or exists (select 1 from rt_test.members m
                         where m.topic = (select realtime.topic()) and m.user_id = (select auth.uid()) and m.can_write)));`)
})

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.realtime.disconnect()))
  for (const raw of raws.splice(0)) raw.ws.terminate()
  // Each test starts from a gateway with nobody connected (its stats are compared).
  await eventually(() => world.realtime.stats().connections === 0, 'the previous test’s sockets to close')
})

afterAll(async () => {
  await world?.close()
})

// ----------------------------------------------------------------------------
// Helpers
// ----------------------------------------------------------------------------

/** Items as they arrive, and a promise for the first that matches (rejects after `timeoutMs`). */
class Inbox<T> {
  items: T[] = []
  private waiters: { match: (item: T) => boolean; resolve: (item: T) => void }[] = []

  push(item: T) {
    this.items.push(item)
    for (const waiter of [...this.waiters]) {
      if (waiter.match(item)) {
        this.waiters.splice(this.waiters.indexOf(waiter), 1)
        waiter.resolve(item)
      }
    }
  }

  waitFor(match: (item: T) => boolean, label: string, timeoutMs = 5_000): Promise<T> {
    const found = this.items.find(match)
    if (found !== undefined) return Promise.resolve(found)
    return new Promise<T>((resolve, reject) => {
      const waiter = {
        match,
        resolve: (item: T) => {
          clearTimeout(timer)
          resolve(item)
        },
      }
      const timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1)
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${label}; received ${JSON.stringify(this.items).slice(0, 2000)}`))
      }, timeoutMs)
      this.waiters.push(waiter)
    })
  }
}

/** Polls a condition that has no event to await (the server's own bookkeeping). */
async function eventually(check: () => boolean, label: string, timeoutMs = 5_000) {
  const started = Date.now()
  while (!check()) {
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${label}`)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

interface Broadcast {
  type: 'broadcast'
  event: string
  payload: any
  meta?: { id: string }
  /** performance.now() when the client's callback ran. */
  at: number
}

interface Joined {
  supabase: SupabaseClient
  channel: RealtimeChannel
  messages: Inbox<Broadcast>
  statuses: Inbox<{ status: string; error?: Error }>
  system: Inbox<any>
  /** The first status the subscribe callback reported. */
  first: { status: string; error?: Error }
}

function newClient(vsn: Vsn, baseUrl = world.baseUrl): SupabaseClient {
  const supabase = createClient(baseUrl, 'anon-key', {
    realtime: { transport: WebSocket as never, vsn },
    auth: { persistSession: false, autoRefreshToken: false, detectSessionInUrl: false },
  })
  clients.push(supabase)
  return supabase
}

interface ChannelConfig {
  private?: boolean
  broadcast?: { self?: boolean; ack?: boolean }
}

/** A new client (its own socket) with `token`, subscribed to `topic`; resolves on the first status. */
async function join(vsn: Vsn, token: string, topic: string, config: ChannelConfig = { private: true }, baseUrl = world.baseUrl): Promise<Joined> {
  const supabase = newClient(vsn, baseUrl)
  await supabase.realtime.setAuth(token)
  const messages = new Inbox<Broadcast>()
  const statuses = new Inbox<{ status: string; error?: Error }>()
  const system = new Inbox<any>()
  const channel = supabase.channel(topic, { config })
  channel.on('broadcast', { event: '*' }, (message) => messages.push({ ...(message as Omit<Broadcast, 'at'>), at: performance.now() }))
  channel.on('system', {}, (message) => system.push(message))
  channel.subscribe((status, error) => statuses.push({ status, error }))
  const first = await statuses.waitFor(() => true, `a subscribe status for ${topic}`, 10_000)
  return { supabase, channel, messages, statuses, system, first }
}

/** realtime.send from the superuser connection, in a transaction; returns when COMMIT was sent. */
async function send(topic: string, payload: Record<string, unknown>, event = 'something.happened', isPrivate = true): Promise<number> {
  let commitAt = 0
  await world.sql.begin(async (tx) => {
    await tx`select realtime.send(${tx.json(payload as never)}, ${event}, ${topic}, ${isPrivate})`
    commitAt = performance.now()
  })
  return commitAt
}

/**
 * A JWT as any Supabase project might mint one (role `authenticated`, the member's uuid as
 * `sub`): the gateway stands in for Supabase Realtime, which takes any token signed with the
 * project's secret that carries `role` and `exp`; this file's policies decide the rest.
 */
function sign(user: User | string, options: { chat?: boolean; ttl?: number; secret?: string } = {}): Promise<string> {
  const sub = typeof user === 'string' ? user : user.id
  return new SignJWT({ sub, role: 'authenticated', jti: randomUUID(), chat: options.chat ?? true })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuedAt()
    .setExpirationTime(Math.floor(Date.now() / 1000) + (options.ttl ?? 3600))
    .sign(new TextEncoder().encode(options.secret ?? JWT_SECRET))
}

interface User {
  username: string
  /** The uuid a token's `sub` carries (CreatedUser.id is the public id). */
  id: string
}

let userCount = 0
async function newUser(prefix: string): Promise<User> {
  const created = await world.createUser(`${prefix}${++userCount}`)
  const [row] = await world.sql<{ id: string }[]>`select id from app.users where username = ${created.username}`
  return { username: created.username, id: row!.id }
}

/** The protocol by hand, for what the client library never sends (malformed frames, raw bytes). */
class RawClient {
  frames = new Inbox<Frame & { binary?: Buffer }>()
  private ref = 0

  private constructor(readonly ws: WebSocket, readonly vsn: Vsn) {
    ws.on('message', (data, isBinary) => {
      const buffer = data as Buffer
      if (isBinary) this.frames.push({ join_ref: null, ref: null, topic: '', event: 'binary', payload: null, binary: buffer })
      else this.frames.push(decodeText(buffer.toString('utf8'))!)
    })
    ws.on('error', () => {})
  }

  static async open(vsn: Vsn, baseUrl = world.baseUrl): Promise<RawClient> {
    const ws = new WebSocket(`${baseUrl.replace(/^http/, 'ws')}/realtime/v1/websocket?apikey=anon-key&vsn=${vsn}`)
    await once(ws, 'open')
    const raw = new RawClient(ws, vsn)
    raws.push(raw)
    return raw
  }

  nextRef(): string {
    return String(++this.ref)
  }

  push(topic: string, event: string, payload: unknown, joinRef: string | null = null): string {
    const ref = this.nextRef()
    this.ws.send(encodeText(this.vsn, { join_ref: joinRef, ref, topic, event, payload }))
    return ref
  }

  reply(ref: string, timeoutMs = 5_000) {
    return this.frames.waitFor((f) => f.event === 'phx_reply' && f.ref === ref, `phx_reply to ref ${ref}`, timeoutMs)
  }

  async join(topic: string, token: string, config: ChannelConfig = { private: true }): Promise<string> {
    const joinRef = this.nextRef()
    this.ws.send(
      encodeText(this.vsn, {
        join_ref: joinRef,
        ref: joinRef,
        topic: `realtime:${topic}`,
        event: 'phx_join',
        payload: {
          config: { broadcast: { ack: false, self: false, ...config.broadcast }, presence: { key: '', enabled: false }, postgres_changes: [], private: config.private ?? false },
          access_token: token,
        },
      }),
    )
    const reply = await this.reply(joinRef)
    expect(reply.payload).toEqual({ status: 'ok', response: { postgres_changes: [] } })
    return joinRef
  }
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!
}

// ----------------------------------------------------------------------------
// With the real client, in both protocol versions
// ----------------------------------------------------------------------------
describe.each(['1.0.0', '2.0.0'] as const)('realtime-js, vsn %s', (vsn) => {
  it('a permitted user joins a private channel and receives rows at commit, in commit order', async () => {
    const alice = await newUser('alice')
    const token = await sign(alice)
    const topic = `room:${alice.id}`
    const a = await join(vsn, token, topic)
    expect(a.first.status, a.first.error?.message).toBe('SUBSCRIBED')

    // A row sent inside a transaction still open is not delivered; one committed meanwhile is.
    const open = await world.sql.reserve()
    try {
      await open`begin`
      await open`select realtime.send('{"x":1}'::jsonb, 'something.happened', ${topic}, true)`
      await send(topic, { x: 2 })
      await a.messages.waitFor((m) => m.payload.x === 2, 'the committed row')
      expect(a.messages.items.map((m) => m.payload.x)).toEqual([2])
      await open`commit`
    } finally {
      open.release()
    }
    const first = await a.messages.waitFor((m) => m.payload.x === 1, 'the row at its commit')
    expect(first).toMatchObject({
      type: 'broadcast',
      event: 'something.happened',
      payload: { x: 1, id: expect.any(String) },
      meta: { id: expect.any(String) },
    })
    const [row] = await world.sql`select topic, event, private from realtime.messages where id = ${first.meta!.id}`
    expect(row).toEqual({ topic, event: 'something.happened', private: true })
    expect(a.messages.items.map((m) => m.payload.x)).toEqual([2, 1])
  })

  it('a forbidden topic gets CHANNEL_ERROR with the Unauthorized reason, and is not joined', async () => {
    const bob = await newUser('bob')
    const stranger = randomUUID()
    const before = world.realtime.stats().channels
    const refused = await join(vsn, await sign(bob), `room:${stranger}`)
    expect(refused.first.status).toBe('CHANNEL_ERROR')
    expect(refused.first.error?.message).toBe(`Unauthorized: You do not have permissions to read from this Channel topic: room:${stranger}`)
    // Its own room, but a token without the chat claim: refused by the same policy.
    const noChat = await join(vsn, await sign(bob, { chat: false }), `room:${bob.id}`)
    expect(noChat.first.status).toBe('CHANNEL_ERROR')
    expect(noChat.first.error?.message).toBe(`Unauthorized: You do not have permissions to read from this Channel topic: room:${bob.id}`)
    expect(world.realtime.stats().channels).toBe(before)
  })

  it('refuses invalid, expired, forged and incomplete tokens, on private and public channels', async () => {
    const carol = await newUser('carol')
    const topic = `room:${carol.id}`
    const missingRole = await new SignJWT({ sub: carol.id })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setExpirationTime('1h')
      .sign(new TextEncoder().encode(JWT_SECRET))
    const cases: [string, string | RegExp][] = [
      ['not-a-jwt', 'MalformedJWT: The token provided is not a valid JWT'],
      [await sign(carol, { ttl: -30 }), /^InvalidJWTToken: Token has expired (29|30|31) seconds ago$/],
      [await sign(carol, { secret: 'another-secret-that-is-long-enough-for-hs256' }), 'JwtSignatureError: Failed to validate JWT signature'],
      [missingRole, 'InvalidJWTToken: Fields `role` and `exp` are required in JWT'],
    ]
    for (const [token, reason] of cases) {
      for (const isPrivate of [true, false]) {
        const refused = await join(vsn, token, topic, { private: isPrivate })
        expect(refused.first.status).toBe('CHANNEL_ERROR')
        expect(refused.first.error?.message).toMatch(reason)
      }
    }
  })

  it('private rows never reach public channels, nor public rows private ones', async () => {
    const dave = await newUser('dave')
    const token = await sign(dave)
    const topic = `room:${dave.id}`
    const pub = await join(vsn, token, topic, { private: false })
    const priv = await join(vsn, token, topic, { private: true })
    expect([pub.first.status, priv.first.status]).toEqual(['SUBSCRIBED', 'SUBSCRIBED'])
    await send(topic, { n: 1 }, 'e', true)
    await send(topic, { n: 2 }, 'e', false)
    await send(topic, { n: 3 }, 'e', true)
    // Rows go out in commit order on one socket each: by the time a later row arrived, an earlier one would have.
    await pub.messages.waitFor((m) => m.payload.n === 2, 'the public row')
    await priv.messages.waitFor((m) => m.payload.n === 3, 'the last private row')
    await send(topic, { n: 4 }, 'e', false)
    await pub.messages.waitFor((m) => m.payload.n === 4, 'the second public row')
    expect(pub.messages.items.map((m) => m.payload.n)).toEqual([2, 4])
    expect(priv.messages.items.map((m) => m.payload.n)).toEqual([1, 3])
  })

  it('a client broadcast reaches the others on the topic but not the sender; self and ack are honoured; no write permission, no broadcast', async () => {
    const [ann, ben, cid, dan] = [await newUser('ann'), await newUser('ben'), await newUser('cid'), await newUser('dan')]
    const topic = `team:${randomUUID()}`
    await world.sql`insert into rt_test.members (topic, user_id, can_write) values
      (${topic}, ${ann.id}, true), (${topic}, ${ben.id}, true), (${topic}, ${cid.id}, false), (${topic}, ${dan.id}, true)`
    const a = await join(vsn, await sign(ann), topic)
    const b = await join(vsn, await sign(ben), topic)
    const c = await join(vsn, await sign(cid), topic, { private: true, broadcast: { ack: true } })
    const d = await join(vsn, await sign(dan), topic, { private: true, broadcast: { self: true, ack: true } })
    expect([a, b, c, d].map((j) => j.first.status)).toEqual(['SUBSCRIBED', 'SUBSCRIBED', 'SUBSCRIBED', 'SUBSCRIBED'])

    expect(await a.channel.send({ type: 'broadcast', event: 'typing', payload: { who: 'ann' } })).toBe('ok')
    for (const other of [b, c, d]) {
      const got = await other.messages.waitFor((m) => m.event === 'typing', 'ann typing')
      expect(got).toMatchObject({ type: 'broadcast', event: 'typing', payload: { who: 'ann' } })
    }
    // self + ack: the server acknowledges and echoes to the sender too.
    expect(await d.channel.send({ type: 'broadcast', event: 'typing', payload: { who: 'dan' } })).toBe('ok')
    await d.messages.waitFor((m) => m.payload?.who === 'dan', 'dan hearing himself')
    await a.messages.waitFor((m) => m.payload?.who === 'dan', 'dan typing at ann')
    // Read-only member with ack: refused, and nobody hears it.
    expect(await c.channel.send({ type: 'broadcast', event: 'typing', payload: { who: 'cid' } })).toBe('error')

    // A row from the database after all that: once it arrived, anything sent before would have.
    await send(topic, { marker: true }, 'marker')
    for (const j of [a, b, c, d]) await j.messages.waitFor((m) => m.event === 'marker', 'the marker')
    expect(a.messages.items.map((m) => m.payload?.who ?? 'marker')).toEqual(['dan', 'marker'])
    expect(b.messages.items.map((m) => m.payload?.who ?? 'marker')).toEqual(['ann', 'dan', 'marker'])
    expect(c.messages.items.map((m) => m.payload?.who ?? 'marker')).toEqual(['ann', 'dan', 'marker'])
    expect(d.messages.items.map((m) => m.payload?.who ?? 'marker')).toEqual(['ann', 'dan', 'marker'])
  })

  it('a refreshed token keeps the channel open past the old one’s expiry; an unrefreshed one is closed at expiry', async () => {
    const eve = await newUser('eve')
    const topic = `room:${eve.id}`
    const kept = await join(vsn, await sign(eve, { ttl: 2 }), topic)
    const lapsed = await join(vsn, await sign(eve, { ttl: 2 }), topic)
    expect([kept.first.status, lapsed.first.status]).toEqual(['SUBSCRIBED', 'SUBSCRIBED'])
    await kept.supabase.realtime.setAuth(await sign(eve))

    const notice = await lapsed.system.waitFor(() => true, 'the expiry notice', 5_000)
    expect(notice).toEqual({ extension: 'system', status: 'error', message: expect.stringMatching(/^Token has expired \d+ seconds ago$/), channel: topic })
    await lapsed.statuses.waitFor((s) => s.status === 'CLOSED', 'CLOSED after expiry')

    await send(topic, { after: 'expiry' })
    await kept.messages.waitFor((m) => m.payload.after === 'expiry', 'a row after the first token expired')
    expect(kept.system.items).toEqual([])
    expect(kept.statuses.items.map((s) => s.status)).toEqual(['SUBSCRIBED'])
  })

  it('a client whose new token loses access gets a system error and is closed', async () => {
    const fay = await newUser('fay')
    const gus = await newUser('gus')
    const room = `room:${fay.id}`
    const team = `team:${randomUUID()}`
    await world.sql`insert into rt_test.members (topic, user_id) values (${team}, ${gus.id})`

    // The token itself loses the right: no chat claim.
    const f = await join(vsn, await sign(fay), room)
    expect(f.first.status).toBe('SUBSCRIBED')
    const channelsBefore = world.realtime.stats().channels
    await f.supabase.realtime.setAuth(await sign(fay, { chat: false }))
    expect(await f.system.waitFor(() => true, 'the revocation notice')).toEqual({
      extension: 'system',
      status: 'error',
      message: `You do not have permissions to read from this Channel topic: ${room}`,
      channel: room,
    })
    await f.statuses.waitFor((s) => s.status === 'CLOSED', 'CLOSED')
    expect(world.realtime.stats().channels).toBe(channelsBefore - 1)

    // The membership goes; the next token (policies re-run) closes the channel.
    const g = await join(vsn, await sign(gus), team)
    expect(g.first.status).toBe('SUBSCRIBED')
    await world.sql`delete from rt_test.members where topic = ${team} and user_id = ${gus.id}`
    await g.supabase.realtime.setAuth(await sign(gus))
    expect((await g.system.waitFor(() => true, 'the revocation notice')).message).toBe(
      `You do not have permissions to read from this Channel topic: ${team}`,
    )
    await g.statuses.waitFor((s) => s.status === 'CLOSED', 'CLOSED')
  })

  it('survives a client whose socket is destroyed mid-stream: the others receive everything, its channel is gone', async () => {
    const hal = await newUser('hal')
    const token = await sign(hal)
    const topic = `room:${hal.id}`
    const b = await join(vsn, token, topic)
    const c = await join(vsn, token, topic)
    const victim = await RawClient.open(vsn)
    await victim.join(topic, token)
    const before = world.realtime.stats()

    let cut = false
    victim.ws.on('message', () => {
      if (!cut && victim.frames.items.filter((f) => f.event === 'broadcast').length >= 5) {
        cut = true
        ;(victim.ws as unknown as { _socket: { destroy(): void } })._socket.destroy()
      }
    })
    const count = 60
    await Promise.all(Array.from({ length: count }, (_, i) => send(topic, { i })))
    for (const j of [b, c]) await j.messages.waitFor((m) => j.messages.items.length >= count && m.payload.i !== undefined, `all ${count} rows`, 10_000)
    expect(cut).toBe(true)
    for (const j of [b, c]) expect(new Set(j.messages.items.map((m) => m.payload.i)).size).toBe(count)
    await eventually(() => world.realtime.stats().connections === before.connections - 1, 'the dead socket to be dropped')
    expect(world.realtime.stats().channels).toBe(before.channels - 1)

    // And it still serves: a new client joins and receives.
    const d = await join(vsn, token, topic)
    await send(topic, { after: 'cut' })
    await d.messages.waitFor((m) => m.payload.after === 'cut', 'a row after the cut')
  })

  it('answers heartbeats, and unsubscribe leaves the channel', async () => {
    const ivy = await newUser('ivy')
    const topic = `room:${ivy.id}`
    const a = await join(vsn, await sign(ivy), topic)
    const beats = new Inbox<string>()
    a.supabase.realtime.onHeartbeat((status) => beats.push(status))
    await a.supabase.realtime.sendHeartbeat()
    await beats.waitFor((s) => s === 'ok', 'heartbeat ok')

    const before = world.realtime.stats().channels
    expect(await a.channel.unsubscribe()).toBe('ok')
    await eventually(() => world.realtime.stats().channels === before - 1, 'the channel to be left')
  })

  it('delivers one message to 100 subscribed clients (end-to-end latency from commit)', { timeout: 120_000 }, async () => {
    const kim = await newUser('kim')
    const token = await sign(kim)
    const topic = `room:${kim.id}`
    const started = performance.now()
    const subscribers = await Promise.all(Array.from({ length: 100 }, () => join(vsn, token, topic)))
    const joinMs = performance.now() - started
    expect(subscribers.every((s) => s.first.status === 'SUBSCRIBED')).toBe(true)

    const rounds = 20
    const latencies: number[] = []
    for (let round = 0; round < rounds; round++) {
      const commitAt = await send(topic, { round })
      const received = await Promise.all(subscribers.map((s) => s.messages.waitFor((m) => m.payload.round === round, `round ${round}`, 10_000)))
      latencies.push(...received.map((m) => m.at - commitAt))
    }
    for (const s of subscribers) expect(s.messages.items.map((m) => m.payload.round)).toEqual(Array.from({ length: rounds }, (_, i) => i))
    latencies.sort((x, y) => x - y)
    const [p50, p99, max] = [percentile(latencies, 50), percentile(latencies, 99), latencies.at(-1)!]
    console.log(
      `realtime vsn ${vsn}: 100 clients joined in ${joinMs.toFixed(0)} ms; ${rounds} messages × 100 deliveries, ` +
        `commit → client callback p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms, max ${max.toFixed(1)} ms`,
    )
    expect(latencies).toHaveLength(rounds * 100)
  })
})

// ----------------------------------------------------------------------------
// The protocol by hand
// ----------------------------------------------------------------------------
describe('the wire protocol', () => {
  it.each(['1.0.0', '2.0.0'] as const)('vsn %s: malformed frames are ignored or answered, never fatal', async (vsn) => {
    const raw = await RawClient.open(vsn)
    for (const text of ['garbage', '[]', '[1,2,3]', '{"topic":5}', 'null', '"x"', '[null,null,"","x",{}]', '{"topic":"t","event":"e","ref":{}}']) {
      raw.ws.send(text)
    }
    for (const bytes of [[], [3], [3, 255, 255, 255, 255, 255, 1], [9, 1, 2, 3], [3, 0, 0, 1, 1, 0, 7, 120, 121], [3, 0, 0, 1, 1, 0, 1, 120, 121, 123]]) {
      raw.ws.send(Buffer.from(bytes))
    }
    // A join whose payload is not an object: no token, the apikey is not a JWT.
    const badJoin = raw.push('realtime:room:x', 'phx_join', 'not an object', '99')
    expect((await raw.reply(badJoin)).payload).toEqual({ status: 'error', response: { reason: 'MalformedJWT: The token provided is not a valid JWT' } })
    // A topic that is not realtime:…, an empty sub-topic, a push to a topic never joined.
    expect((await raw.reply(raw.push('elsewhere', 'phx_join', {}))).payload).toEqual({ status: 'error', response: { reason: 'unmatched topic' } })
    expect((await raw.reply(raw.push('realtime:', 'phx_join', {}))).payload).toEqual({
      status: 'error',
      response: { reason: 'TopicNameRequired: You must provide a topic name' },
    })
    const stray = raw.push('realtime:never-joined', 'broadcast', { type: 'broadcast', event: 'e', payload: {} })
    expect((await raw.reply(stray)).payload).toEqual({ status: 'error', response: { reason: 'unmatched topic' } })
    // Still alive.
    const beat = raw.push('phoenix', 'heartbeat', {})
    const reply = await raw.reply(beat)
    expect(reply).toEqual({ join_ref: null, ref: beat, topic: 'phoenix', event: 'phx_reply', payload: { status: 'ok', response: {} } })
  })

  it('vsn 2.0.0 binary pushes: JSON payloads reach both versions as text, raw bytes reach 2.0.0 as kind 4 only; ack and phx_leave', async () => {
    const lea = await newUser('lea')
    const token = await sign(lea)
    const topic = `room:${lea.id}`
    const sender = await RawClient.open('2.0.0')
    const senderJoin = await sender.join(topic, token, { private: true, broadcast: { ack: true } })
    const v1 = await RawClient.open('1.0.0')
    await v1.join(topic, token)
    const v2 = await RawClient.open('2.0.0')
    await v2.join(topic, token)

    const ref = sender.nextRef()
    sender.ws.send(encodeUserBroadcastPush({ join_ref: senderJoin, ref, topic: `realtime:${topic}` }, 'moved', { x: 1 }))
    expect((await sender.reply(ref)).payload).toEqual({ status: 'ok', response: {} })
    for (const r of [v1, v2]) {
      const got = await r.frames.waitFor((f) => f.event === 'broadcast', 'the JSON broadcast')
      expect(got).toEqual({ join_ref: null, ref: null, topic: `realtime:${topic}`, event: 'broadcast', payload: { type: 'broadcast', event: 'moved', payload: { x: 1 } } })
    }

    const bytesRef = sender.nextRef()
    sender.ws.send(encodeUserBroadcastPush({ join_ref: senderJoin, ref: bytesRef, topic: `realtime:${topic}` }, 'blob', new Uint8Array([1, 2, 3])))
    await sender.reply(bytesRef)
    const binary = await v2.frames.waitFor((f) => f.event === 'binary', 'the kind-4 frame')
    const fullTopic = `realtime:${topic}`
    expect([...binary.binary!.subarray(0, 5)]).toEqual([4, fullTopic.length, 4, 0, 0])
    expect(binary.binary!.subarray(5, 5 + fullTopic.length).toString()).toBe(fullTopic)
    expect([...binary.binary!.subarray(5 + fullTopic.length + 4)]).toEqual([1, 2, 3])

    // phx_leave: ok, then phx_close; then nothing more for that socket.
    const leave = v1.push(`realtime:${topic}`, 'phx_leave', {}, '1')
    expect((await v1.reply(leave)).payload).toEqual({ status: 'ok', response: {} })
    await v1.frames.waitFor((f) => f.event === 'phx_close', 'phx_close')
    await send(topic, { after: 'leave' })
    await v2.frames.waitFor((f) => f.event === 'broadcast' && (f.payload as any).payload?.after === 'leave', 'the row at v2')
    // v1: the JSON broadcast only (the bytes were not for it), and nothing after leaving.
    expect(v1.frames.items.filter((f) => f.event === 'broadcast')).toHaveLength(1)
  })

  it('refuses upgrades on other paths and unsupported protocol versions', async () => {
    const base = world.baseUrl.replace(/^http/, 'ws')
    for (const [path, status] of [['/realtime/v1/websocket?vsn=3.0.0', 403], ['/elsewhere', 404]] as const) {
      const ws = new WebSocket(base + path)
      const [, response] = (await once(ws, 'unexpected-response')) as [unknown, { statusCode: number }]
      expect(response.statusCode).toBe(status)
      ws.on('error', () => {})
    }
  })
})

// ----------------------------------------------------------------------------
// The database side
// ----------------------------------------------------------------------------
describe('the database side', () => {
  it('the LISTEN connection reconnects when it drops, and what committed meanwhile still arrives once', async () => {
    const max = await newUser('max')
    const topic = `room:${max.id}`
    const a = await join('2.0.0', await sign(max), topic)
    const killed = await world.sql`
      select pg_terminate_backend(pid) from pg_stat_activity
       where datname = current_database() and application_name = 'realtime-gateway-listen'`
    expect(killed).toHaveLength(1)
    await send(topic, { gap: 1 })
    await a.messages.waitFor((m) => m.payload.gap === 1, 'the row sent while the listener was down', 10_000)
    await send(topic, { gap: 2 })
    await a.messages.waitFor((m) => m.payload.gap === 2, 'a row after the reconnect', 10_000)
    expect(a.messages.items.map((m) => m.payload.gap)).toEqual([1, 2])
    const listeners = await world.sql`
      select 1 from pg_stat_activity where datname = current_database() and application_name = 'realtime-gateway-listen'`
    expect(listeners).toHaveLength(1)
  })

  it('NOTIFY carries ids, never payloads: a message far over 8000 bytes is delivered', async () => {
    const ned = await newUser('ned')
    const topic = `room:${ned.id}`
    const a = await join('1.0.0', await sign(ned), topic)
    const big = 'x'.repeat(100_000)
    await send(topic, { big })
    const got = await a.messages.waitFor((m) => typeof m.payload.big === 'string', 'the large message')
    expect(got.payload.big).toHaveLength(100_000)
  })

  it('keeps partitions: ensures yesterday … today+3 and drops those older than 72 hours', async () => {
    const [{ future }] = (await world.sql<{ future: string }[]>`select 'messages_' || to_char(current_date + 3, 'YYYY_MM_DD') as future`) as unknown as [{ future: string }]
    await world.sql.unsafe(`drop table realtime.${future}`)
    await world.sql.unsafe(`create table realtime.messages_2020_01_01 partition of realtime.messages for values from ('2020-01-01') to ('2020-01-02')`)
    const dropped = await world.realtime.maintain()
    expect(dropped).toEqual(['messages_2020_01_01'])
    const partitions = (
      await world.sql<{ name: string }[]>`
        select c.relname as name from pg_inherits i join pg_class c on c.oid = i.inhrelid
         where i.inhparent = 'realtime.messages'::regclass order by 1`
    ).map((p) => p.name)
    const [{ expected }] = (await world.sql<{ expected: string[] }[]>`
      select array_agg('messages_' || to_char(d, 'YYYY_MM_DD') order by d) as expected
        from generate_series(current_date - 1, current_date + 3, interval '1 day') d`) as unknown as [{ expected: string[] }]
    expect(partitions).toEqual(expect.arrayContaining(expected))
    expect(partitions).not.toContain('messages_2020_01_01')
  })
})

// ----------------------------------------------------------------------------
// A second gateway on its own server, to break things without breaking the world's
// ----------------------------------------------------------------------------
describe('lifecycle', () => {
  async function secondGateway(options: Partial<RealtimeGatewayOptions> = {}) {
    const logs: string[] = []
    const gateway = await startRealtimeGateway({
      databaseUrl: world.databaseUrl,
      jwtSecret: JWT_SECRET,
      applicationName: 'realtime-gateway-2',
      log: (message) => logs.push(message),
      ...options,
    })
    const server: Server = createServer((_req, res) => res.writeHead(404).end())
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    gateway.attach(server)
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    return {
      gateway,
      url,
      logs,
      async close() {
        await gateway.close()
        server.closeAllConnections()
        await new Promise((resolve) => server.close(resolve))
      },
    }
  }

  it('rows committed while the listener cannot even reconnect are caught up, once each, when it can', async () => {
    const second = await secondGateway({ healthCheckIntervalMs: 200 })
    const database = new URL(world.databaseUrl).pathname.slice(1)
    // ALTER DATABASE … allow_connections must come from another database.
    const server = createSql(inject('serverUrl'), { max: 1 })
    try {
      const olga = await newUser('olga')
      const topic = `room:${olga.id}`
      const a = await join('2.0.0', await sign(olga), topic, { private: true }, second.url)
      expect(a.first.status).toBe('SUBSCRIBED')
      await send(topic, { n: 1 })
      await a.messages.waitFor((m) => m.payload.n === 1, 'a row before the outage')

      await server.unsafe(`alter database "${database}" with allow_connections false`)
      try {
        const killed = await world.sql`
          select pg_terminate_backend(pid) from pg_stat_activity
           where datname = current_database() and application_name = 'realtime-gateway-2-listen'`
        expect(killed).toHaveLength(1)
        const listening = async () =>
          (await world.sql`select 1 from pg_stat_activity where datname = current_database() and application_name = 'realtime-gateway-2-listen'`).length
        for (let i = 0; (await listening()) > 0; i++) {
          if (i > 500) throw new Error('the listener backend did not go away')
          await new Promise((resolve) => setTimeout(resolve, 10))
        }
        await send(topic, { n: 2 })
        await send(topic, { n: 3 })
      } finally {
        await server.unsafe(`alter database "${database}" with allow_connections true`)
      }
      await a.messages.waitFor((m) => m.payload.n === 3, 'the rows committed during the outage', 15_000)
      await send(topic, { n: 4 })
      await a.messages.waitFor((m) => m.payload.n === 4, 'a row after the recovery', 10_000)
      expect(a.messages.items.map((m) => m.payload.n)).toEqual([1, 2, 3, 4])
    } finally {
      await second.close()
      await server.end()
    }
  })

  it('a listener that stops hearing (a half-open connection) is replaced, and what it missed caught up', async (ctx) => {
    const second = await secondGateway({ healthCheckIntervalMs: 200 })
    try {
      const [row] = await world.sql<{ pid: number }[]>`
        select pid from pg_stat_activity where datname = current_database() and application_name = 'realtime-gateway-2-listen'`
      const pid = row!.pid
      // Freeze the listener's backend: its TCP connection stays up, it just never speaks again.
      // Only against the embedded server this run started (its backends are local processes).
      let cmdline = ''
      try {
        cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8')
      } catch {}
      if (process.env.DATABASE_URL || !cmdline.includes('postgres')) return ctx.skip()
      const quinn = await newUser('quinn')
      const topic = `room:${quinn.id}`
      const a = await join('1.0.0', await sign(quinn), topic, { private: true }, second.url)
      process.kill(pid, 'SIGSTOP')
      try {
        await send(topic, { n: 1 })
        await a.messages.waitFor((m) => m.payload.n === 1, 'the row the frozen listener never heard', 10_000)
      } finally {
        process.kill(pid, 'SIGCONT')
      }
      expect(second.gateway.stats().listenerRestarts).toBe(1)
      expect(second.logs).toEqual(['realtime: the LISTEN connection stopped hearing; reconnecting'])
      await send(topic, { n: 2 })
      await a.messages.waitFor((m) => m.payload.n === 2, 'a row to the new listener')
      expect(a.messages.items.map((m) => m.payload.n)).toEqual([1, 2])
    } finally {
      await second.close()
    }
  })

  it('close() says goodbye to connected clients (1001) and does not wait on one that never answers; silent sockets are dropped', async () => {
    const second = await secondGateway({ idleTimeoutMs: 300 })
    const pia = await newUser('pia')
    const token = await sign(pia)
    const topic = `room:${pia.id}`
    const silent = await RawClient.open('1.0.0', second.url)
    const [code] = (await once(silent.ws, 'close')) as [number]
    expect(code).toBe(1006) // terminated without a close frame: it never spoke
    const a = await join('2.0.0', token, topic, { private: true }, second.url)
    expect(a.first.status).toBe('SUBSCRIBED')
    const raw = await RawClient.open('1.0.0', second.url)
    await raw.join(topic, token)
    // A client that never reads again (its socket paused): it will not answer the close frame.
    const deaf = await RawClient.open('1.0.0', second.url)
    await deaf.join(topic, token)
    expect(second.gateway.stats()).toMatchObject({ connections: 3, channels: 3 })
    ;(deaf.ws as unknown as { _socket: { pause(): void } })._socket.pause()
    const closed = once(raw.ws, 'close')
    // close() returns, the deaf client cut off (ws itself would wait 30 s for its answer, past the
    // test's timeout): the proof of "does not wait", with no clock to flake (issue 31).
    await second.close()
    expect(((await closed) as [number])[0]).toBe(1001)
    expect(second.gateway.stats()).toMatchObject({ connections: 0, channels: 0, topics: 0 })
    expect(second.logs).toEqual([])
  })
})
