// The local Realtime gateway's per-client limits (local/realtime/limits.ts; docs/security.md,
// "Realtime: per-client limits"): sockets per address, join attempts per socket and per address,
// channels per socket and per member, messages per socket and per address, and at most two
// authorization checks (database work) at a time per client, so that one client's flood costs
// the database little and never queues ahead of another client's join.
//
// Every test has a gateway of its own with the default limits, on its own HTTP server; clients
// are told apart by their address, each test's from its own loopback addresses (127.0.0.x,
// bound with `localAddress`). Where a test counts tokens, the gateway's rate clock is a variable
// the test moves by hand, so nothing depends on how fast this machine runs.
import { once } from 'node:events'
import { randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { createClient, type SupabaseClient } from '@supabase/supabase-js'
import { SignJWT } from 'jose'
import WebSocket from 'ws'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { DEFAULT_REALTIME_LIMITS, startRealtimeGateway, type RealtimeGateway, type RealtimeGatewayOptions } from '../local/realtime.ts'
import { clientKey } from '../local/realtime/limits.ts'
import { decodeText, encodeText, type Frame } from '../local/realtime/protocol.ts'
import { JWT_SECRET, startWorld, type TestWorld } from './support/app.ts'

const JOIN_RATE = 'ClientJoinRateLimitReached: Too many joins per second'

let world: TestWorld
const supabases: SupabaseClient[] = []
const raws: Raw[] = []
const gateways: { close(): Promise<void> }[] = []

beforeAll(async () => {
  world = await startWorld()
  // Members may read their own rooms: `room:<sub>` and `room:<sub>:<anything>`.
  await world.sql.unsafe(`
    create policy "rt_limits: own rooms" on realtime.messages for select to authenticated using (
      realtime.messages.extension = 'broadcast'
      and ((select realtime.topic()) = 'room:' || (auth.jwt() ->> 'sub')
           or starts_with((select realtime.topic()), 'room:' || (auth.jwt() ->> 'sub') || ':')))`)
})

afterEach(async () => {
  await Promise.all(supabases.splice(0).map((s) => s.realtime.disconnect()))
  for (const raw of raws.splice(0)) raw.ws.terminate()
  for (const gateway of gateways.splice(0)) await gateway.close()
})

afterAll(async () => {
  await world?.close()
})

// ----------------------------------------------------------------------------
// Helpers
// ----------------------------------------------------------------------------

/** A gateway of its own (default limits unless given), served on its own HTTP server. */
async function gateway(options: Partial<RealtimeGatewayOptions> = {}): Promise<{ gateway: RealtimeGateway; url: string }> {
  const started = await startRealtimeGateway({
    databaseUrl: world.databaseUrl,
    jwtSecret: JWT_SECRET,
    applicationName: 'realtime-limits',
    log: () => {},
    ...options,
  })
  const server: Server = createServer((_req, res) => res.writeHead(404).end())
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  started.attach(server)
  gateways.push({
    async close() {
      await started.close()
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    },
  })
  return { gateway: started, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }
}

/** A JWT as the project would accept it: role `authenticated`, the member as `sub`. */
function sign(sub: string, exp = Math.floor(Date.now() / 1000) + 3600): Promise<string> {
  return new SignJWT({ sub, role: 'authenticated', jti: randomUUID() })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuedAt()
    .setExpirationTime(exp)
    .sign(new TextEncoder().encode(JWT_SECRET))
}

/** `ws` bound to a loopback address of the test's choosing: another address is another client. */
function transportFrom(localAddress: string) {
  return class extends WebSocket {
    constructor(url: string | URL, protocols?: string | string[]) {
      super(url, protocols, { localAddress })
    }
  }
}

function socketUrl(url: string): string {
  return `${url.replace(/^http/, 'ws')}/realtime/v1/websocket?apikey=anon&vsn=2.0.0`
}

async function eventually(check: () => boolean, label: string, timeoutMs = 10_000) {
  const started = Date.now()
  while (!check()) {
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${label}`)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

/** The protocol by hand (vsn 2.0.0), for floods and exact counts. */
class Raw {
  frames: Frame[] = []
  closed: Promise<number>
  private ref = 0
  private waiters: { match: (f: Frame) => boolean; resolve: (f: Frame) => void }[] = []

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data) => {
      const frame = decodeText((data as Buffer).toString('utf8'))!
      this.frames.push(frame)
      for (const w of [...this.waiters]) {
        if (w.match(frame)) {
          this.waiters.splice(this.waiters.indexOf(w), 1)
          w.resolve(frame)
        }
      }
    })
    ws.on('error', () => {})
    this.closed = once(ws, 'close').then(([code]) => code as number)
  }

  static async open(url: string, from: string): Promise<Raw> {
    const ws = new WebSocket(socketUrl(url), { localAddress: from })
    const raw = new Raw(ws)
    raws.push(raw)
    await once(ws, 'open')
    return raw
  }

  push(topic: string, event: string, payload: unknown, joinRef: string | null = null): string {
    const ref = String(++this.ref)
    this.ws.send(encodeText('2.0.0', { join_ref: joinRef ?? ref, ref, topic: `realtime:${topic}`, event, payload }))
    return ref
  }

  /** Sends a join (does not wait); returns its ref. */
  join(topic: string, token: string, config: { private?: boolean; ack?: boolean } = { private: true }): string {
    return this.push(topic, 'phx_join', {
      config: { broadcast: { ack: config.ack ?? false, self: false }, presence: { key: '', enabled: false }, postgres_changes: [], private: config.private ?? true },
      access_token: token,
    })
  }

  heartbeat(): string {
    const ref = String(++this.ref)
    this.ws.send(encodeText('2.0.0', { join_ref: null, ref, topic: 'phoenix', event: 'heartbeat', payload: {} }))
    return ref
  }

  replies(): Frame[] {
    return this.frames.filter((f) => f.event === 'phx_reply' && f.topic !== 'phoenix')
  }

  waitFor(match: (f: Frame) => boolean, label: string, timeoutMs = 10_000): Promise<Frame> {
    const seen = this.frames.find(match)
    if (seen) return Promise.resolve(seen)
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`timed out waiting for ${label}; got ${JSON.stringify(this.frames.slice(-5))}`)), timeoutMs)
      this.waiters.push({ match, resolve: (f) => { clearTimeout(timer); resolve(f) } })
    })
  }

  reply(ref: string, timeoutMs?: number): Promise<Frame> {
    return this.waitFor((f) => f.event === 'phx_reply' && f.ref === ref, `the reply to ${ref}`, timeoutMs)
  }
}

const reason = (frame: Frame) => (frame.payload as { response?: { reason?: string } }).response?.reason

/** supabase-js from `address`, its token set, as an app uses it. */
async function supabaseFrom(url: string, address: string, token: string): Promise<SupabaseClient> {
  const supabase = createClient(url, 'anon', {
    realtime: { transport: transportFrom(address) as never, vsn: '2.0.0' },
    auth: { persistSession: false, autoRefreshToken: false, detectSessionInUrl: false },
  })
  supabases.push(supabase)
  await supabase.realtime.setAuth(token)
  return supabase
}

/** Subscribes a private channel; resolves on the first answer, with how long it took. */
function subscribe(supabase: SupabaseClient, topic: string): Promise<{ status: string; message?: string; ms: number }> {
  const started = performance.now()
  return new Promise((resolve) => {
    let done = false
    supabase.channel(topic, { config: { private: true } }).subscribe((status, error) => {
      if (done || (status !== 'SUBSCRIBED' && status !== 'CHANNEL_ERROR' && status !== 'TIMED_OUT')) return
      done = true
      resolve({ status, message: error?.message, ms: performance.now() - started })
    })
  })
}

// ----------------------------------------------------------------------------
// The tests
// ----------------------------------------------------------------------------
describe('Realtime per-client limits', () => {
  it('the defaults are the numbers docs/security.md gives', () => {
    expect(DEFAULT_REALTIME_LIMITS).toEqual({
      socketsPerAddress: 100,
      channelsPerSocket: 100,
      channelsPerMember: 200,
      joinsPerSocket: { burst: 100, perSecond: 10 },
      joinsPerAddress: { burst: 200, perSecond: 20 },
      messagesPerSocket: { burst: 200, perSecond: 50 },
      messagesPerAddress: { burst: 500, perSecond: 100 },
      checksPerClient: 2,
    })
  })

  it('a client is its IPv4 address, or its IPv6 /64 (a host cannot rotate through its own block)', () => {
    expect(clientKey('127.0.0.1')).toBe('127.0.0.1')
    expect(clientKey('::ffff:10.1.2.3')).toBe('10.1.2.3')
    expect(clientKey('2001:db8:1:2:3:4:5:6')).toBe('2001:db8:1:2::/64')
    expect(clientKey('2001:0db8:0001:0002::1')).toBe('2001:db8:1:2::/64')
    expect(clientKey('2001:db8:1:2:ffff::9%eth0')).toBe('2001:db8:1:2::/64')
    expect(clientKey('2001:db8::1')).toBe('2001:db8:0:0::/64')
    expect(clientKey('::1')).toBe('0:0:0:0::/64')
    expect(clientKey('2001:db8:1:3::1')).not.toBe(clientKey('2001:db8:1:2::1'))
    expect(clientKey(undefined)).toBe('unknown')
  })

  it('one address is refused past 100 open sockets (429, Retry-After, {error}); another address still connects and subscribes; a closed socket frees its place', async () => {
    const { gateway: gw, url } = await gateway()
    const flood = await Promise.all(Array.from({ length: 100 }, () => Raw.open(url, '127.0.0.11')))
    expect(gw.stats().connections).toBe(100)

    const refused = new WebSocket(socketUrl(url), { localAddress: '127.0.0.11' })
    refused.on('error', () => {})
    raws.push({ ws: refused } as Raw)
    const response = await new Promise<IncomingMessage | 'opened'>((resolve) => {
      refused.once('open', () => resolve('opened'))
      refused.once('unexpected-response', (_req, res) => resolve(res))
    })
    if (response === 'opened') throw new Error('the 101st socket from one address was accepted')
    let body = ''
    for await (const chunk of response) body += chunk
    expect(response.statusCode).toBe(429)
    expect(response.headers['retry-after']).toBe('10')
    expect(response.headers['content-type']).toBe('application/json')
    expect(JSON.parse(body)).toEqual({ error: 'Too many Realtime connections from this address.' })
    expect(gw.stats().refused.sockets).toBe(1)

    // Another client, from another address, connects and subscribes as usual.
    const sub = randomUUID()
    const other = await supabaseFrom(url, '127.0.0.12', await sign(sub))
    expect(await subscribe(other, `room:${sub}`)).toMatchObject({ status: 'SUBSCRIBED' })

    // The cap counts open sockets: once one closes, the address may open another.
    flood[0]!.ws.terminate()
    await eventually(() => gw.stats().connections === 100, 'the closed socket to be dropped')
    const again = await Raw.open(url, '127.0.0.11')
    expect(again.ws.readyState).toBe(WebSocket.OPEN)
  })

  it('1,000 joins on one socket: the one past the burst gets ClientJoinRateLimitReached and the socket is closed; the flood costs at most its burst in database checks', async () => {
    const { gateway: gw, url } = await gateway({ clock: () => 0 })
    const flooder = await Raw.open(url, '127.0.0.13')
    const token = await sign(randomUUID())
    // Topics the member may not read: each join the gateway lets through is a database check.
    const refs = Array.from({ length: 1000 }, (_, i) => flooder.join(`flood:${i}`, token))
    expect(await flooder.closed).toBe(1008)

    const refusal = flooder.replies().filter((f) => reason(f) === JOIN_RATE)
    expect(refusal.map((f) => f.ref)).toEqual([refs[100]]) // the 101st, and only it
    for (const f of flooder.replies()) {
      if (f.ref !== refs[100]) expect(reason(f)).toMatch(/^Unauthorized: /)
      // Nothing after the refusal was answered: the socket was done.
      expect(Number(f.ref)).toBeLessThanOrEqual(101)
    }
    await eventually(() => gw.stats().connections === 0, 'the flooder to be dropped')
    const stats = gw.stats()
    expect(stats.refused.joins).toBe(1)
    // At most the burst went to the database (joins still waiting for a check when the socket
    // was refused were dropped), where the old gateway ran all 1,000.
    expect(stats.authorizationChecks).toBeLessThanOrEqual(DEFAULT_REALTIME_LIMITS.joinsPerSocket.burst)
    expect(stats.maxChecksInFlightPerClient).toBeLessThanOrEqual(2)
  })

  it('a burst of 100 joins runs at most 2 checks at a time, and another client’s join is answered before the burst is half done', async () => {
    const { gateway: gw, url } = await gateway()
    const victimSub = randomUUID()
    const victim = await supabaseFrom(url, '127.0.0.15', await sign(victimSub))
    const idle = await subscribe(victim, `room:${victimSub}`)
    expect(idle.status).toBe('SUBSCRIBED')

    const flooder = await Raw.open(url, '127.0.0.14')
    const token = await sign(randomUUID())
    const refs = Array.from({ length: 100 }, (_, i) => flooder.join(`flood:${i}`, token))
    // The burst is in the gateway: its first check has been answered.
    await flooder.reply(refs[0]!)
    const joined = await subscribe(victim, `room:${victimSub}:second`)
    const floodAnsweredBefore = flooder.replies().length
    expect(joined.status).toBe('SUBSCRIBED')

    await Promise.all(refs.map((ref) => flooder.reply(ref, 30_000)))
    for (const f of flooder.replies()) expect(reason(f)).toMatch(/^Unauthorized: /)
    console.log(
      `realtime limits: a join took ${idle.ms.toFixed(1)} ms idle and ${joined.ms.toFixed(1)} ms during another client's burst of 100 joins ` +
        `(answered after ${floodAnsweredBefore} of the burst's 100)`,
    )
    // The old gateway queued the victim's check behind the whole burst in the shared pool.
    expect(floodAnsweredBefore).toBeLessThan(50)
    const stats = gw.stats()
    expect(stats.authorizationChecks).toBe(102)
    expect(stats.maxChecksInFlightPerClient).toBe(2)
    expect(stats.refused).toEqual({ sockets: 0, joins: 0, channels: 0, messages: 0 })
  })

  it('a socket’s joins verify its token’s signature once, its expiry every time: an expired token is refused on the socket that used it', async () => {
    const { url } = await gateway()
    const sub = randomUUID()
    const exp = Math.floor(Date.now() / 1000) + 2
    const token = await sign(sub, exp)
    const raw = await Raw.open(url, '127.0.0.24')
    expect((await raw.reply(raw.join(`room:${sub}`, token))).payload).toMatchObject({ status: 'ok' })
    await eventually(() => Date.now() / 1000 > exp + 1, 'the token to expire')
    expect(reason(await raw.reply(raw.join(`room:${sub}:later`, token)))).toMatch(/^InvalidJWTToken: Token has expired \d+ seconds ago$/)
    // A forged token after a good one is checked on its own.
    const forged = token.slice(0, token.lastIndexOf('.') + 1) + 'x'.repeat(43)
    expect(reason(await raw.reply(raw.join(`room:${sub}:forged`, forged)))).toBe('JwtSignatureError: Failed to validate JWT signature')
  })

  it('join rates are per socket and per address (a new socket brings no new allowance), refill with time, and supabase-js shows CHANNEL_ERROR with the reason', async () => {
    let now = 0
    const { gateway: gw, url } = await gateway({ clock: () => now })
    // Joins with a token that is no JWT: answered at once, no database work; they count all the same.
    const burst = async (raw: Raw, count: number) => {
      const refs = Array.from({ length: count }, (_, i) => raw.join(`room:${i}`, 'not-a-jwt'))
      return Promise.all(refs.map((ref) => raw.reply(ref).then(reason)))
    }
    const malformed = 'MalformedJWT: The token provided is not a valid JWT'

    // Socket A: its 100, then refused (the address has 100 left).
    const a = await Raw.open(url, '127.0.0.16')
    expect(new Set(await burst(a, 100))).toEqual(new Set([malformed]))
    expect(await burst(a, 1)).toEqual([JOIN_RATE])
    expect(await a.closed).toBe(1008)
    // Socket B from the same address: the address's other 100, then refused.
    const b = await Raw.open(url, '127.0.0.16')
    expect(new Set(await burst(b, 100))).toEqual(new Set([malformed]))
    expect(await burst(b, 1)).toEqual([JOIN_RATE])
    // Socket C: a fresh socket, but the address has nothing left.
    const c = await Raw.open(url, '127.0.0.16')
    expect(await burst(c, 1)).toEqual([JOIN_RATE])
    expect(await c.closed).toBe(1008)
    // supabase-js from there: CHANNEL_ERROR with Supabase's reason.
    const sub = randomUUID()
    const app = await supabaseFrom(url, '127.0.0.16', await sign(sub))
    expect(await subscribe(app, `room:${sub}`)).toMatchObject({ status: 'CHANNEL_ERROR', message: JOIN_RATE })
    await app.realtime.disconnect()
    // Another address is not affected.
    const elsewhere = await Raw.open(url, '127.0.0.17')
    expect(await burst(elsewhere, 1)).toEqual([malformed])

    // A second later the address has 20 more.
    now += 1_000
    const d = await Raw.open(url, '127.0.0.16')
    expect(new Set(await burst(d, 20))).toEqual(new Set([malformed]))
    expect(await burst(d, 1)).toEqual([JOIN_RATE])
    // Ten seconds later it is whole again, and supabase-js subscribes.
    now += 10_000
    const app2 = await supabaseFrom(url, '127.0.0.16', await sign(sub))
    expect(await subscribe(app2, `room:${sub}`)).toMatchObject({ status: 'SUBSCRIBED' })
    expect(gw.stats().refused.joins).toBe(5)
  })

  it('channels: 100 per socket (ChannelRateLimitReached, the socket stays), 200 per member over all their sockets', async () => {
    let now = 0
    const { gateway: gw, url } = await gateway({ clock: () => now })
    const sub = randomUUID()
    const token = await sign(sub)
    const app = await supabaseFrom(url, '127.0.0.18', token)
    const first = await Promise.all(Array.from({ length: 100 }, (_, i) => subscribe(app, `room:${sub}:${i}`)))
    expect(first.every((s) => s.status === 'SUBSCRIBED')).toBe(true)
    // A token refresh sends one access_token per channel at once: within the message limit, each
    // channel's read policy is checked again, and every channel stays.
    await app.realtime.setAuth(await sign(sub))
    await eventually(() => gw.stats().authorizationChecks === 200, 'the 100 channels to check the new token')
    expect(gw.stats()).toMatchObject({ channels: 100, refused: { sockets: 0, joins: 0, channels: 0, messages: 0 } })
    now += 1_000 // past the join rate: what refuses the next one is the channel cap
    expect(await subscribe(app, `room:${sub}:100`)).toMatchObject({ status: 'CHANNEL_ERROR', message: 'ChannelRateLimitReached: Too many channels' })
    expect(gw.stats()).toMatchObject({ connections: 1, channels: 100 })

    // The same member on another socket (another address, for a fresh join allowance): 100 more.
    const second = await Raw.open(url, '127.0.0.19')
    const refs = Array.from({ length: 100 }, (_, i) => second.join(`room:${sub}:b${i}`, token))
    for (const ref of refs) expect((await second.reply(ref, 30_000)).payload).toEqual({ status: 'ok', response: { postgres_changes: [] } })
    // A third socket: not for this member (any of their tokens), but for anyone else.
    const third = await Raw.open(url, '127.0.0.20')
    expect(reason(await third.reply(third.join(`room:${sub}:c`, await sign(sub))))).toBe('ChannelRateLimitReached: Too many channels for this user')
    const other = randomUUID()
    expect((await third.reply(third.join(`room:${other}`, await sign(other)))).payload).toMatchObject({ status: 'ok' })
    // Once the member leaves some, they may join again.
    second.ws.terminate()
    await eventually(() => gw.stats().channels === 101, 'the second socket’s channels to close')
    expect((await third.reply(third.join(`room:${sub}:c`, token))).payload).toMatchObject({ status: 'ok' })
  })

  it('messages: past 200 at once a socket’s frames are dropped and the channel they were for closes with "Too many messages per second"; 500 per address; the allowance refills', async () => {
    let now = 0
    const { gateway: gw, url } = await gateway({ clock: () => now, privateOnly: false })
    const token = await sign(randomUUID())
    const listener = await Raw.open(url, '127.0.0.21')
    const listenRef = listener.join('lobby', token, { private: false })
    await listener.reply(listenRef)
    const sender = await Raw.open(url, '127.0.0.22')
    const joinRef = sender.join('lobby', token, { private: false, ack: true })
    await sender.reply(joinRef)

    const refs = Array.from({ length: 201 }, (_, i) => sender.push('lobby', 'broadcast', { type: 'broadcast', event: 'n', payload: { i } }, joinRef))
    await Promise.all(refs.slice(0, 200).map((ref) => sender.reply(ref)))
    const system = await sender.waitFor((f) => f.event === 'system', 'the system message')
    expect(system.payload).toEqual({ extension: 'system', status: 'error', message: 'Too many messages per second', channel: 'lobby' })
    await sender.waitFor((f) => f.event === 'phx_close', 'phx_close')
    expect(sender.frames.some((f) => f.ref === refs[200])).toBe(false)
    await eventually(() => listener.frames.filter((f) => f.event === 'broadcast').length === 200, 'the 200 broadcasts')
    expect(gw.stats().refused.messages).toBe(1)

    // A second later the socket has 50 more: it rejoins and is heard again.
    now += 1_000
    const rejoin = sender.join('lobby', token, { private: false, ack: true })
    await sender.reply(rejoin)
    await sender.reply(sender.push('lobby', 'broadcast', { type: 'broadcast', event: 'n', payload: { i: 'after' } }, rejoin))
    await listener.waitFor((f) => f.event === 'broadcast' && (f.payload as any).payload?.i === 'after', 'the broadcast after the refill')

    // Per address: three sockets spend its 500 (heartbeats count); a fourth's first message is refused.
    now += 60_000
    for (const count of [200, 200, 100]) {
      const raw = await Raw.open(url, '127.0.0.23')
      await Promise.all(Array.from({ length: count }, () => raw.heartbeat()).map((ref) => raw.waitFor((f) => f.ref === ref && f.topic === 'phoenix', 'a heartbeat reply')))
    }
    const fourth = await Raw.open(url, '127.0.0.23')
    const fourthJoin = fourth.join('lobby', token, { private: false })
    await fourth.reply(fourthJoin)
    fourth.push('lobby', 'broadcast', { type: 'broadcast', event: 'n', payload: { i: 'fourth' } }, fourthJoin)
    await fourth.waitFor((f) => f.event === 'system' && (f.payload as any).message === 'Too many messages per second', 'the refusal')
    expect(gw.stats().refused.messages).toBe(2)
  })
})
