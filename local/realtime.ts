// The local Realtime gateway: what Supabase Realtime does for this project, on the API's own
// port at /realtime/v1/websocket, for the real @supabase/realtime-js client (vsn 1.0.0 and 2.0.0).
//
// - Joins verify the JWT with the project's secret; a private channel is authorized by RLS on
//   realtime.messages exactly as Supabase does it (local/realtime/authorize.ts).
// - The database is the source of truth: an AFTER INSERT trigger of the platform shim NOTIFYs
//   `realtime_messages` with the row's id (never the payload: NOTIFY carries at most 8000
//   bytes); the gateway LISTENs on a dedicated connection, reads the committed row and sends it
//   to every channel joined to its topic (private rows to private channels, public rows to
//   public ones). Client broadcasts go straight to the other sockets on the topic.
// - The listener is checked by a ping through NOTIFY; when it stops hearing, it is rebuilt and
//   the rows committed meanwhile are caught up from the table (each row is delivered once).
// - A database that goes silent: every connection has TCP keepalive and every statement the
//   API's deadline (functions/lib/sql.ts); the ping and the listener's start have bounds of
//   their own, and a ping without an answer is logged (docs/reliability.md, section 4).
// - Partitions are kept as the Realtime server keeps them: yesterday … today+3 ensured at start
//   and hourly, partitions older than 72 hours dropped.
// - Unlike Supabase, which checks only a token's expiry, the channels of our access tokens are
//   checked against revocation every few seconds and closed once revoked (docs/security.md).
//
// - Per-client limits (local/realtime/limits.ts): sockets per address, channels per socket and
//   per member, token buckets on join attempts and messages per socket and per address, and at
//   most a few authorization checks (database work) in flight per address and per member, so
//   that one client's flood is refused before it is database work and never queues ahead of
//   another client's join. Refusals are answered as Supabase answers them.
//
// What it does not do: presence (pushes are answered with an error), postgres_changes (joins
// asking for it are refused), the REST broadcast endpoint, replay, payload size
// limits beyond the frame limit, asymmetric JWTs (JWKS), and the apikey is not checked at
// connect (there is no anon key locally): a join needs a valid JWT, from `access_token` or
// else the apikey.
import { randomUUID } from 'node:crypto'
import type { IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import postgres, { type Sql } from 'postgres'
import { WebSocket, WebSocketServer, type RawData } from 'ws'
import {
  CONNECT_TIMEOUT_SECONDS, DATABASE_SILENT, DEFAULT_STATEMENT_TIMEOUT_MS, reconnectBackoffSeconds, silentDatabaseOptions, statementDeadlineMs,
} from '../functions/lib/sql.ts'
import { ACCESS_TOKEN_ROLE } from '../functions/lib/tokens.ts'
import { canRead, canWrite, honouredTokenIds, secondsLeft, verifyRealtimeToken, type Claims, type Permission, type TokenCheck } from './realtime/authorize.ts'
import {
  CHANNELS_REASON, clientKey, DEFAULT_REALTIME_LIMITS, JOIN_RATE_REASON, MEMBER_CHANNELS_REASON, MESSAGE_RATE_MESSAGE, Slots, SOCKETS_ERROR,
  TokenBucket, type RealtimeLimits,
} from './realtime/limits.ts'
import { decodeBinary, decodeText, encodeText, encodeUserBroadcast, parseVsn, type Frame, type Vsn } from './realtime/protocol.ts'

export { DEFAULT_REALTIME_LIMITS, type RealtimeLimits } from './realtime/limits.ts'

export const REALTIME_PATH = '/realtime/v1/websocket'
/** The NOTIFY channel the shim's trigger on realtime.messages speaks on. */
export const NOTIFY_CHANNEL = 'realtime_messages'

export interface RealtimeGatewayOptions {
  databaseUrl: string
  jwtSecret: string
  /** Connections for authorization probes and reading rows (the listener has its own). */
  poolSize?: number
  /** Partition upkeep (ensure yesterday … today+3, drop older than 72 h). Default: hourly. */
  maintenanceIntervalMs?: number
  /** How often the listener proves it still hears NOTIFY. Default 10 s. */
  healthCheckIntervalMs?: number
  /** statement_timeout of its connections (the API's STATEMENT_TIMEOUT_MS). Default 5 s; 0: none. */
  statementTimeoutMs?: number
  /**
   * How long past the statement timeout a statement may go unanswered before its connection is
   * destroyed as silent (STATEMENT_DEADLINE_MARGIN_MS, functions/lib/sql.ts). Default 2 s.
   */
  deadlineMarginMs?: number
  /**
   * How often the channels of our access tokens are checked against revocation (a revoked
   * token's channels close within this). Default 5 s. Supabase itself only checks expiry.
   */
  revocationCheckIntervalMs?: number
  /**
   * Refuse public channels, as Supabase's "private channels only" Realtime setting does (which
   * production turns on: docs/deploy.md). `npm start` and the test world set it; default off,
   * Supabase's default.
   */
  privateOnly?: boolean
  /** A socket silent this long (no heartbeat, no message) is dropped, as Phoenix does. Default 60 s. */
  idleTimeoutMs?: number
  /** A socket that does not read and lets this much pile up is dropped. Default 16 MiB. */
  maxBufferedBytes?: number
  /** Largest frame accepted from a client. Default 1 MiB. */
  maxFrameBytes?: number
  /** application_name of its connections (the listener's gets `-listen`). Default `realtime-gateway`. */
  applicationName?: string
  /** Per-client limits; each one not given is DEFAULT_REALTIME_LIMITS' (docs/security.md). */
  limits?: Partial<RealtimeLimits>
  /** The rate limits' clock in ms (tests move it by hand). Default `performance.now`. */
  clock?: () => number
  log?: (message: string, error?: unknown) => void
}

export interface RealtimeStats {
  connections: number
  /** Joined channels over all sockets. */
  channels: number
  /** Distinct (topic, privacy) pairs with at least one channel. */
  topics: number
  /** Database rows sent (one per row, however many sockets received it). */
  deliveredRows: number
  listenerRestarts: number
  /** Authorization checks run, each a database transaction (joins, token refreshes, first writes). */
  authorizationChecks: number
  /** Channels moved to a refreshed token (`access_token` checked and applied). */
  tokensRefreshed: number
  /** The most checks one address or one member has had running at once. */
  maxChecksInFlightPerClient: number
  /** What the per-client limits refused: upgrades, joins (rate or channel caps), messages. */
  refused: { sockets: number; joins: number; channels: number; messages: number }
}

export interface UpgradeServer {
  on(event: 'upgrade', listener: (req: IncomingMessage, socket: Duplex, head: Buffer) => void): unknown
  off(event: 'upgrade', listener: (req: IncomingMessage, socket: Duplex, head: Buffer) => void): unknown
  listenerCount(event: 'upgrade'): number
}

export interface RealtimeGateway {
  /** Serves /realtime/v1/websocket on this HTTP server (its `upgrade` event). */
  attach(server: UpgradeServer): void
  /** Partition upkeep now; returns the partitions dropped. */
  maintain(): Promise<string[]>
  stats(): RealtimeStats
  close(): Promise<void>
}

/** One address's share (an IPv4 address or an IPv6 /64: limits.ts). */
interface Client {
  key: string
  sockets: number
  joins: TokenBucket
  messages: TokenBucket
  checks: Slots
}

/** One member's share (a token's `sub`), over all their sockets. */
interface Member {
  key: string
  channels: number
  /** Joins under way (counted against the cap while their check runs). */
  pending: number
  checks: Slots
}

interface Connection {
  ws: WebSocket
  vsn: Vsn
  apikey: string | null
  client: Client
  joins: TokenBucket
  messages: TokenBucket
  /** Joins under way on this socket (counted against the channel cap while their check runs). */
  joining: number
  /** Refused for its rate and closing: whatever else it sent is ignored. */
  refusing: boolean
  /** The last token verified on this socket (realtime-js sends the same one with every join). */
  verified: { token: string; check: Promise<TokenCheck> } | null
  /** By full topic (`realtime:<sub-topic>`). */
  channels: Map<string, Channel>
  /** One queue per topic: a channel handles its messages in order, as a Phoenix channel process does. */
  queues: Map<string, Promise<void>>
  queued: number
  lastSeen: number
  closed: boolean
}

interface Channel {
  conn: Connection
  topic: string
  subTopic: string
  joinRef: string | null
  private: boolean
  self: boolean
  ack: boolean
  token: string
  claims: Claims
  /** Checked on the first broadcast, cached for the join, reset when the token changes. */
  canWrite: boolean | null
  expiryTimer: NodeJS.Timeout | null
  /** Whose channel cap it counts against (null: a token without `sub`). */
  member: Member | null
  /** Closing for its socket's message rate (once). */
  overRate: boolean
}

interface Notification {
  id: string
  insertedAt: string
  topic?: string
  private?: boolean
}

interface MessageRow {
  id: string
  topic: string
  event: string | null
  payload: unknown
  private: boolean | null
  binary_payload: Buffer | null
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i
const MAX_QUEUED_PER_SOCKET = 1000
const FETCH_BATCH = 500
/** How far back a catch-up looks before the last moment the listener was known to hear. */
const CATCH_UP_WINDOW_MS = 60_000
const SEEN_MAX = 200_000

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !Buffer.isBuffer(value)
}

/** A `timestamp without time zone` as text (from JSON or ::text) → ms, read as UTC. */
function timestampMs(text: string): number {
  return Date.parse(text.replace(' ', 'T') + 'Z')
}

function timestampText(ms: number): string {
  return new Date(ms).toISOString().replace('Z', '')
}

function toBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data
  if (Array.isArray(data)) return Buffer.concat(data)
  return Buffer.from(data)
}

function routingKey(isPrivate: boolean, subTopic: string): string {
  return (isPrivate ? 'private:' : 'public:') + subTopic
}

function rejectUpgrade(socket: Duplex, status: number, text: string) {
  socket.on('error', () => {})
  socket.end(
    `HTTP/1.1 ${status} ${text}\r\nConnection: close\r\nContent-Type: text/plain\r\n` +
      `Content-Length: ${Buffer.byteLength(text)}\r\n\r\n${text}`,
  )
}

/** 429 with our error shape and Retry-After, as Supabase answers an upgrade past its connection cap. */
function refuseUpgrade(socket: Duplex, error: string, retryAfterSeconds: number) {
  const body = JSON.stringify({ error })
  socket.on('error', () => {})
  socket.end(
    `HTTP/1.1 429 Too Many Requests\r\nConnection: close\r\nContent-Type: application/json\r\n` +
      `Retry-After: ${retryAfterSeconds}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  )
}

/** `promise`, or a DATABASE_SILENT error once `ms` have passed without it settling. */
function withDeadline<T>(promise: PromiseLike<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(Object.assign(new Error(`${what}: no answer from the database within ${ms} ms`), { code: DATABASE_SILENT })), ms)
    timer.unref()
  })
  return Promise.race([promise, late]).finally(() => clearTimeout(timer))
}

export async function startRealtimeGateway(options: RealtimeGatewayOptions): Promise<RealtimeGateway> {
  const log = options.log ?? ((message: string, error?: unknown) => console.error(message, error ?? ''))
  const idleTimeoutMs = options.idleTimeoutMs ?? 60_000
  const healthCheckIntervalMs = options.healthCheckIntervalMs ?? 10_000
  const pingTimeoutMs = Math.min(5_000, Math.max(100, healthCheckIntervalMs))
  const maxBufferedBytes = options.maxBufferedBytes ?? 16 * 1024 * 1024
  const applicationName = options.applicationName ?? 'realtime-gateway'
  const limits: RealtimeLimits = { ...DEFAULT_REALTIME_LIMITS, ...options.limits }
  const clock = options.clock ?? (() => performance.now())
  const statementTimeoutMs = options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS
  const deadlineMs = statementDeadlineMs(statementTimeoutMs, options.deadlineMarginMs)
  const connectionOptions = {
    TimeZone: 'UTC', application_name: applicationName, ...(statementTimeoutMs ? { statement_timeout: statementTimeoutMs } : {}),
  }
  // The API's reconnect pacing (functions/lib/sql.ts): while the database restarts, a join is
  // refused within a second rather than after postgres.js's backoff of up to 20 s. And the API's
  // answer to a database that goes silent: keepalive, and a deadline on every statement (the
  // statement timeout plus a margin) past which its connection is destroyed.
  const reconnecting = { connect_timeout: CONNECT_TIMEOUT_SECONDS, backoff: reconnectBackoffSeconds, ...silentDatabaseOptions(deadlineMs) }
  // The health ping's statement and the listener's start are bounded on their own as well (a
  // connection that asked for TLS is not watched by its socket: functions/lib/sql.ts): the
  // statement's deadline, or the connect timeout and then that deadline, and a second more.
  const pingDeadlineMs = (deadlineMs ?? DEFAULT_STATEMENT_TIMEOUT_MS) + 1_000
  const listenDeadlineMs = CONNECT_TIMEOUT_SECONDS * 1000 + pingDeadlineMs
  const sql = postgres(options.databaseUrl, { max: options.poolSize ?? 4, connection: connectionOptions, onnotice: () => {}, ...reconnecting })
  const sweeper = postgres(options.databaseUrl, {
    max: 1,
    ...reconnecting,
    connection: { ...connectionOptions, application_name: `${applicationName}-revocations` },
    onnotice: () => {},
  })

  const connections = new Set<Connection>()
  /** routingKey(private, sub-topic) → the channels that receive what is sent there. */
  const routes = new Map<string, Set<Channel>>()
  const wss = new WebSocketServer({ noServer: true, maxPayload: options.maxFrameBytes ?? 1024 * 1024, perMessageDeflate: false })
  const detachers: (() => void)[] = []
  let stopping = false
  let closed: Promise<void> | null = null
  let deliveredRows = 0
  let listenerRestarts = 0
  let authorizationChecks = 0
  let tokensRefreshed = 0
  let maxChecksInFlightPerClient = 0
  const refused = { sockets: 0, joins: 0, channels: 0, messages: 0 }
  /** By clientKey(remote address). Kept while it has sockets or its buckets are not yet full again. */
  const clients = new Map<string, Client>()
  /** By the token's `sub`. Kept while it has channels, joins or checks. */
  const members = new Map<string, Member>()

  // --------------------------------------------------------------------------
  // Sending
  // --------------------------------------------------------------------------
  function send(conn: Connection, data: string | Buffer) {
    if (conn.closed || conn.ws.readyState !== WebSocket.OPEN) return
    if (conn.ws.bufferedAmount > maxBufferedBytes) {
      // A client that stopped reading: drop it rather than hold its backlog.
      conn.ws.terminate()
      return
    }
    try {
      conn.ws.send(data)
    } catch {
      conn.ws.terminate()
    }
  }

  function sendFrame(conn: Connection, frame: Frame) {
    send(conn, encodeText(conn.vsn, frame))
  }

  function reply(conn: Connection, to: Frame, status: 'ok' | 'error', response: Record<string, unknown>) {
    sendFrame(conn, { join_ref: to.join_ref, ref: to.ref, topic: to.topic, event: 'phx_reply', payload: { status, response } })
  }

  /**
   * Sends a broadcast to every channel routed at `key` (but `except`). JSON payloads go as text
   * (encoded once per protocol version); raw bytes go as a kind-4 frame, to 2.0.0 sockets only.
   */
  function fanOut(key: string, topic: string, payload: Record<string, unknown>, bytes: Buffer | null, except?: Channel) {
    const routed = routes.get(key)
    if (!routed || routed.size === 0) return
    const frames: Partial<Record<Vsn, string | Buffer | null>> = {}
    const frameFor = (vsn: Vsn): string | Buffer | null => {
      if (frames[vsn] !== undefined) return frames[vsn]!
      let frame: string | Buffer | null
      if (bytes) frame = vsn === '2.0.0' ? encodeUserBroadcast(topic, String(payload.event ?? ''), payload.meta, bytes) : null
      else frame = encodeText(vsn, { join_ref: null, ref: null, topic, event: 'broadcast', payload })
      frames[vsn] = frame
      return frame
    }
    for (const channel of [...routed]) {
      if (channel === except) continue
      const frame = frameFor(channel.conn.vsn)
      if (frame !== null) send(channel.conn, frame)
    }
  }

  // --------------------------------------------------------------------------
  // Per-client limits (local/realtime/limits.ts)
  // --------------------------------------------------------------------------
  function clientFor(key: string): Client {
    let client = clients.get(key)
    if (!client) {
      const now = clock()
      client = {
        key,
        sockets: 0,
        joins: new TokenBucket(limits.joinsPerAddress, now),
        messages: new TokenBucket(limits.messagesPerAddress, now),
        checks: new Slots(limits.checksPerClient),
      }
      clients.set(key, client)
    }
    return client
  }

  /** Forgets addresses with nothing open whose allowances are whole again (so a reconnect gains nothing). */
  function forgetIdleClients() {
    const now = clock()
    for (const [key, client] of clients) {
      if (client.sockets === 0 && client.checks.idle && client.joins.full(now) && client.messages.full(now)) clients.delete(key)
    }
  }

  function memberFor(claims: Claims): Member | null {
    const key = typeof claims.sub === 'string' && claims.sub !== '' ? claims.sub : null
    if (key === null) return null
    let member = members.get(key)
    if (!member) members.set(key, (member = { key, channels: 0, pending: 0, checks: new Slots(limits.checksPerClient) }))
    return member
  }

  function forgetMemberIfIdle(member: Member | null) {
    if (member && member.channels === 0 && member.pending === 0 && member.checks.idle && members.get(member.key) === member) {
      members.delete(member.key)
    }
  }

  /** A join attempt takes one token from the socket's bucket and one from its address's; both must have one. */
  function takeJoin(conn: Connection): boolean {
    const now = clock()
    if (!conn.joins.available(now) || !conn.client.joins.available(now)) return false
    conn.joins.take()
    conn.client.joins.take()
    return true
  }

  function takeMessage(conn: Connection): boolean {
    const now = clock()
    if (!conn.messages.available(now) || !conn.client.messages.available(now)) return false
    conn.messages.take()
    conn.client.messages.take()
    return true
  }

  /**
   * As Supabase does past its join rate: the join is answered ClientJoinRateLimitReached and the
   * socket is disconnected. Its joins still waiting for a check are dropped (no database work).
   */
  function refuseJoinRate(conn: Connection, frame: Frame) {
    refused.joins++
    reply(conn, frame, 'error', { reason: JOIN_RATE_REASON })
    conn.refusing = true
    conn.ws.close(1008, 'Too many joins per second')
    // A client that never answers the close is cut off rather than held for ws's 30 s.
    setTimeout(() => conn.ws.terminate(), 1_000).unref()
  }

  /**
   * Runs an authorization check (a database transaction) once the socket's address, and the
   * token's member, each have fewer than `checksPerClient` running: a client's burst waits in its
   * own line, and the pool keeps connections for everyone else. Null: the socket went away meanwhile.
   */
  async function authorize(conn: Connection, member: Member | null, run: () => Promise<Permission>): Promise<Permission | null> {
    const { client } = conn
    await client.checks.acquire()
    try {
      if (member) await member.checks.acquire()
      try {
        if (conn.closed || conn.refusing || stopping) return null
        authorizationChecks++
        maxChecksInFlightPerClient = Math.max(maxChecksInFlightPerClient, client.checks.inFlight, member?.checks.inFlight ?? 0)
        return await run()
      } finally {
        member?.checks.release()
      }
    } finally {
      client.checks.release()
    }
  }

  // --------------------------------------------------------------------------
  // Channels
  // --------------------------------------------------------------------------
  function isCurrent(channel: Channel): boolean {
    return !channel.conn.closed && channel.conn.channels.get(channel.topic) === channel
  }

  function addChannel(channel: Channel) {
    channel.conn.channels.set(channel.topic, channel)
    if (channel.member) channel.member.channels++
    const key = routingKey(channel.private, channel.subTopic)
    let routed = routes.get(key)
    if (!routed) routes.set(key, (routed = new Set()))
    routed.add(channel)
  }

  function removeChannel(channel: Channel) {
    if (channel.expiryTimer) clearTimeout(channel.expiryTimer)
    channel.expiryTimer = null
    if (channel.conn.channels.get(channel.topic) === channel) channel.conn.channels.delete(channel.topic)
    const key = routingKey(channel.private, channel.subTopic)
    const routed = routes.get(key)
    if (routed?.delete(channel)) {
      if (routed.size === 0) routes.delete(key)
      if (channel.member) {
        channel.member.channels--
        forgetMemberIfIdle(channel.member)
      }
    }
  }

  function sendClose(channel: Channel) {
    sendFrame(channel.conn, { join_ref: channel.joinRef, ref: channel.joinRef, topic: channel.topic, event: 'phx_close', payload: {} })
  }

  /** Supabase's shutdown_response: a system error message, then the channel closes. */
  function shutdown(channel: Channel, message: string) {
    if (!isCurrent(channel)) return
    removeChannel(channel)
    sendFrame(channel.conn, {
      join_ref: channel.joinRef,
      ref: null,
      topic: channel.topic,
      event: 'system',
      payload: { extension: 'system', status: 'error', message, channel: channel.subTopic },
    })
    sendClose(channel)
  }

  /** The channel closes when its token expires (re-armed at most hourly, like Supabase's confirm_token). */
  function scheduleExpiry(channel: Channel) {
    if (channel.expiryTimer) clearTimeout(channel.expiryTimer)
    const ms = Math.min(Math.max(0, secondsLeft(channel.claims) * 1000), 3_600_000)
    channel.expiryTimer = setTimeout(() => {
      channel.expiryTimer = null
      enqueue(channel.conn, channel.topic, async () => {
        if (!isCurrent(channel)) return
        const left = secondsLeft(channel.claims)
        if (left > 0) scheduleExpiry(channel)
        else shutdown(channel, `Token has expired ${Math.floor(-left)} seconds ago`)
      })
    }, ms)
    channel.expiryTimer.unref()
  }

  function permissionFailed(permission: Exclude<Permission, { ok: true }>, subTopic: string) {
    if (permission.code === 'MissingPartition') void maintain().catch(() => {})
    if (!stopping) log(`realtime: authorization check for ${JSON.stringify(subTopic)} failed: ${permission.code}: ${permission.message}`)
  }

  /**
   * A socket's joins carry the same token: its signature is checked once (100 joins at once
   * verified one by one kept the crypto thread pool from other clients' joins), its expiry
   * every time. A failure is shared by the joins that awaited it, and not kept after.
   */
  async function verifyOnce(conn: Connection, token: unknown): Promise<TokenCheck> {
    if (typeof token !== 'string') return verifyRealtimeToken(options.jwtSecret, token)
    if (conn.verified?.token === token) {
      const kept = await conn.verified.check
      if (!kept.ok || secondsLeft(kept.claims) > 0) return kept
    }
    const check = verifyRealtimeToken(options.jwtSecret, token)
    conn.verified = { token, check }
    const checked = await check
    if (!checked.ok && conn.verified?.check === check) conn.verified = null
    return checked
  }

  const refusedRead = (subTopic: string) => `You do not have permissions to read from this Channel topic: ${subTopic}`

  async function join(conn: Connection, frame: Frame) {
    const refuse = (reason: string) => reply(conn, frame, 'error', { reason })
    if (!frame.topic.startsWith('realtime:')) return refuse('unmatched topic')
    const subTopic = frame.topic.slice('realtime:'.length)
    if (subTopic === '') return refuse('TopicNameRequired: You must provide a topic name')
    const payload = isObject(frame.payload) ? frame.payload : {}
    const config = isObject(payload.config) ? payload.config : {}
    const broadcast = isObject(config.broadcast) ? config.broadcast : {}
    const isPrivate = config.private === true
    if (!isPrivate && options.privateOnly) return refuse('PrivateOnly: This project only allows private channels')
    if (Array.isArray(config.postgres_changes) && config.postgres_changes.length > 0) {
      return refuse('PostgresChangesNotSupported: the local Realtime gateway serves broadcast only; send from the database with realtime.send()')
    }
    const token =
      typeof payload.access_token === 'string' ? payload.access_token
      : typeof payload.user_token === 'string' ? payload.user_token
      : conn.apikey
    const checked = await verifyOnce(conn, token)
    if (!checked.ok) return refuse(`${checked.code}: ${checked.message}`)
    if (conn.closed || conn.refusing || stopping) return
    // The channel caps, counting the joins still under way (a rejoin of a topic replaces its
    // channel, so it adds none on this socket, nor for its member if the member is the same).
    const replaced = conn.channels.get(frame.topic)
    if (!replaced && conn.channels.size + conn.joining >= limits.channelsPerSocket) {
      refused.channels++
      return refuse(CHANNELS_REASON)
    }
    const member = memberFor(checked.claims)
    if (member && replaced?.member !== member && member.channels + member.pending >= limits.channelsPerMember) {
      refused.channels++
      forgetMemberIfIdle(member)
      return refuse(MEMBER_CHANNELS_REASON)
    }
    conn.joining++
    if (member) member.pending++
    try {
      if (isPrivate) {
        const read = await authorize(conn, member, () => canRead(sql, subTopic, checked.claims))
        if (read === null) return
        if (!read.ok) {
          permissionFailed(read, subTopic)
          if (!read.policyError) return refuse(`${read.code}: ${read.message}`)
        }
        if (!read.ok || !read.allowed) return refuse(`Unauthorized: ${refusedRead(subTopic)}`)
      }
      if (conn.closed || conn.refusing || stopping) return
      const previous = conn.channels.get(frame.topic)
      if (previous) {
        // Phoenix closes the older channel of a duplicate join.
        removeChannel(previous)
        sendClose(previous)
      }
      const channel: Channel = {
        conn,
        topic: frame.topic,
        subTopic,
        joinRef: frame.join_ref,
        private: isPrivate,
        self: broadcast.self === true,
        ack: broadcast.ack === true,
        token: token as string,
        claims: checked.claims,
        canWrite: null,
        expiryTimer: null,
        member,
        overRate: false,
      }
      // Routed before the reply: whatever commits after the client hears "ok" reaches it.
      addChannel(channel)
      reply(conn, frame, 'ok', { postgres_changes: [] })
      scheduleExpiry(channel)
    } finally {
      conn.joining--
      if (member) {
        member.pending--
        forgetMemberIfIdle(member)
      }
    }
  }

  function leave(channel: Channel, frame: Frame) {
    removeChannel(channel)
    reply(channel.conn, frame, 'ok', {})
    sendClose(channel)
  }

  async function clientBroadcast(channel: Channel, frame: Frame) {
    const { conn } = channel
    const push = frame.payload
    if (!isObject(push)) return
    const acknowledge = channel.ack && frame.ref !== null
    if (channel.private) {
      if (channel.canWrite === null) {
        const write = await authorize(conn, channel.member, () => canWrite(sql, channel.subTopic, channel.claims))
        if (write === null) return
        if (!write.ok) {
          permissionFailed(write, channel.subTopic)
          if (acknowledge && isCurrent(channel)) reply(conn, frame, 'error', { reason: `${write.code}: ${write.message}` })
          return
        }
        channel.canWrite = write.allowed
      }
      if (!channel.canWrite) {
        // Supabase drops it without a word; with ack the client would wait for its timeout, so say why.
        if (acknowledge && isCurrent(channel)) {
          reply(conn, frame, 'error', { reason: `Unauthorized: You do not have permissions to write to this Channel topic: ${channel.subTopic}` })
        }
        return
      }
    }
    if (!isCurrent(channel)) return
    // The push goes on as it came (Supabase forwards the client's map); raw bytes as kind 4.
    fanOut(routingKey(channel.private, channel.subTopic), channel.topic, push, frame.bytes ?? null, channel.self ? undefined : channel)
    if (acknowledge) reply(conn, frame, 'ok', {})
  }

  /** `access_token`: verify the new token, re-run the read policy; losing either closes the channel. */
  async function refreshToken(channel: Channel, frame: Frame) {
    const token = isObject(frame.payload) ? frame.payload.access_token : undefined
    if (typeof token !== 'string' || token === channel.token || token.startsWith('sb_')) return
    const checked = await verifyRealtimeToken(options.jwtSecret, token)
    if (!checked.ok) return shutdown(channel, checked.message)
    if (channel.private) {
      const read = await authorize(channel.conn, channel.member, () => canRead(sql, channel.subTopic, checked.claims))
      if (read === null) return
      if (!read.ok) {
        permissionFailed(read, channel.subTopic)
        if (!read.policyError) return shutdown(channel, read.message)
      }
      if (!read.ok || !read.allowed) return shutdown(channel, refusedRead(channel.subTopic))
    }
    if (!isCurrent(channel)) return
    channel.token = token
    channel.claims = checked.claims
    channel.canWrite = null
    scheduleExpiry(channel)
    tokensRefreshed++
  }

  async function handle(conn: Connection, frame: Frame) {
    if (frame.event === 'phx_join') return join(conn, frame)
    const channel = conn.channels.get(frame.topic)
    if (!channel) {
      if (frame.ref !== null) reply(conn, frame, 'error', { reason: 'unmatched topic' })
      return
    }
    switch (frame.event) {
      case 'phx_leave':
        return leave(channel, frame)
      case 'broadcast':
        return clientBroadcast(channel, frame)
      case 'access_token':
        return refreshToken(channel, frame)
      case 'presence':
        if (frame.ref !== null) reply(conn, frame, 'error', { reason: 'PresenceNotSupported: the local Realtime gateway serves broadcast only' })
        return
      default:
        // Supabase ignores other client messages.
        return
    }
  }

  /** Closes the channels of our access tokens that were revoked since they joined. */
  let sweeping = false
  async function closeRevoked() {
    if (sweeping || stopping) return
    sweeping = true
    try {
      const ours: Channel[] = []
      for (const conn of connections) {
        for (const channel of conn.channels.values()) {
          if (channel.claims.role === ACCESS_TOKEN_ROLE && typeof channel.claims.jti === 'string') ours.push(channel)
        }
      }
      if (ours.length === 0) return
      // Its own connection: a flood of joins on the shared pool cannot hold revocation back.
      const honoured = await honouredTokenIds(sweeper, [...new Set(ours.map((c) => c.claims.jti as string))])
      for (const channel of ours) {
        const jti = channel.claims.jti as string
        if (honoured.has(jti)) continue
        // In the channel's queue, after whatever it is doing: a refresh meanwhile brought a new token.
        enqueue(channel.conn, channel.topic, async () => {
          if (isCurrent(channel) && channel.claims.jti === jti) shutdown(channel, 'The access token was revoked')
        })
      }
    } catch (err) {
      if (!stopping) log('realtime: checking tokens against revocation failed', err)
    } finally {
      sweeping = false
    }
  }

  // --------------------------------------------------------------------------
  // Sockets
  // --------------------------------------------------------------------------
  function enqueue(conn: Connection, topic: string, task: () => Promise<void>) {
    if (conn.closed) return
    if (++conn.queued > MAX_QUEUED_PER_SOCKET) {
      conn.ws.terminate()
      return
    }
    const previous = conn.queues.get(topic) ?? Promise.resolve()
    const next = previous
      .then(() => (conn.closed || conn.refusing ? undefined : task()))
      .catch((err) => {
        if (!stopping) log(`realtime: handling a message on ${JSON.stringify(topic)} failed`, err)
      })
      .finally(() => {
        conn.queued--
        if (conn.queues.get(topic) === next) conn.queues.delete(topic)
      })
    conn.queues.set(topic, next)
  }

  function onMessage(conn: Connection, data: RawData, isBinary: boolean) {
    if (conn.refusing) return
    conn.lastSeen = Date.now()
    const buffer = toBuffer(data)
    // Malformed frames are ignored, as a Phoenix socket that cannot decode one drops it.
    const frame = isBinary ? decodeBinary(buffer) : decodeText(buffer.toString('utf8'))
    // Counted before anything is done for it: a join against the join rates, any other frame
    // (malformed ones too) against the message rates.
    if (frame?.event === 'phx_join' && frame.topic !== 'phoenix') {
      if (!takeJoin(conn)) return refuseJoinRate(conn, frame)
    } else if (!takeMessage(conn)) {
      // Dropped; as Supabase closes a channel over its message rate, the channel it was for
      // closes, after what it had already accepted (in its queue).
      refused.messages++
      const channel = frame ? conn.channels.get(frame.topic) : undefined
      if (channel && !channel.overRate) {
        channel.overRate = true
        enqueue(conn, channel.topic, async () => shutdown(channel, MESSAGE_RATE_MESSAGE))
      }
      return
    }
    if (!frame) return
    if (frame.topic === 'phoenix') {
      if (frame.event === 'heartbeat') reply(conn, frame, 'ok', {})
      return
    }
    enqueue(conn, frame.topic, () => handle(conn, frame))
  }

  function dropConnection(conn: Connection) {
    if (conn.closed) return
    conn.closed = true
    for (const channel of [...conn.channels.values()]) removeChannel(channel)
    conn.channels.clear()
    connections.delete(conn)
    conn.client.sockets--
  }

  function onConnection(ws: WebSocket, vsn: Vsn, apikey: string | null, client: Client) {
    const now = clock()
    const conn: Connection = {
      ws,
      vsn,
      apikey,
      client,
      joins: new TokenBucket(limits.joinsPerSocket, now),
      messages: new TokenBucket(limits.messagesPerSocket, now),
      joining: 0,
      refusing: false,
      verified: null,
      channels: new Map(),
      queues: new Map(),
      queued: 0,
      lastSeen: Date.now(),
      closed: false,
    }
    client.sockets++
    connections.add(conn)
    ws.on('message', (data, isBinary) => {
      try {
        onMessage(conn, data, isBinary)
      } catch (err) {
        log('realtime: a client frame could not be handled', err)
      }
    })
    // ws closes the socket after an error (bad frame, reset); 'close' does the cleanup.
    ws.on('error', () => {})
    ws.on('close', () => dropConnection(conn))
    if (stopping) ws.close(1001, 'server shutting down')
  }

  function upgradeHandler(server: UpgradeServer) {
    return (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      let url: URL
      try {
        url = new URL(req.url ?? '/', 'http://localhost')
      } catch {
        return rejectUpgrade(socket, 400, 'Bad Request')
      }
      if (url.pathname.replace(/\/+$/, '') !== REALTIME_PATH) {
        // Someone else's upgrade, if anyone else listens; otherwise nobody serves it.
        if (server.listenerCount('upgrade') <= 1) rejectUpgrade(socket, 404, 'Not Found')
        return
      }
      if (stopping) return rejectUpgrade(socket, 503, 'Service Unavailable')
      const vsn = parseVsn(url.searchParams.get('vsn'))
      if (!vsn) return rejectUpgrade(socket, 403, 'Unsupported protocol version (vsn 1.0.0 or 2.0.0)')
      // The socket's own address: a header would be the client's to choose.
      const key = clientKey(req.socket.remoteAddress)
      if ((clients.get(key)?.sockets ?? 0) >= limits.socketsPerAddress) {
        refused.sockets++
        return refuseUpgrade(socket, SOCKETS_ERROR, 10)
      }
      socket.on('error', () => {})
      // ws calls back synchronously (no verifyClient), so the count cannot be raced past.
      wss.handleUpgrade(req, socket, head, (ws) => onConnection(ws, vsn, url.searchParams.get('apikey'), clientFor(key)))
    }
  }

  // --------------------------------------------------------------------------
  // The database → channels: NOTIFY, then the committed row
  // --------------------------------------------------------------------------
  const [databaseNow] = await sql<{ now: string }[]>`select localtimestamp::text as now`.catch(async (err) => {
    await sql.end({ timeout: 0 })
    throw err
  })
  const startedAt = timestampMs(databaseNow!.now)
  /** The latest database time the listener is known to have been hearing (ms, DB clock). */
  let aliveAt = startedAt
  /** Row ids already handled (delivered or not wanted), so that a catch-up never repeats one. */
  const seen = new Map<string, number>()
  const pending: Notification[] = []
  // Timestamps travel as text (`::text::timestamp`): a parameter typed timestamp would go
  // through a JS Date and lose its microseconds, and with them the row.
  let fetching = false
  let fetchFailures = 0
  let retryTimer: NodeJS.Timeout | null = null

  function markAlive(insertedAt: unknown) {
    if (typeof insertedAt !== 'string') return
    const ms = timestampMs(insertedAt)
    if (Number.isFinite(ms) && ms > aliveAt) aliveAt = ms
  }

  function accept(note: Notification) {
    if (seen.has(note.id)) return
    const ms = timestampMs(note.insertedAt)
    if (!Number.isFinite(ms)) return
    seen.set(note.id, ms)
    if (seen.size > SEEN_MAX) seen.delete(seen.keys().next().value!)
    markAlive(note.insertedAt)
    // Nobody listens to this topic now: nothing to read.
    if (typeof note.topic === 'string' && !routes.has(routingKey(note.private === true, note.topic))) return
    pending.push(note)
    void flush()
  }

  async function flush() {
    if (fetching || retryTimer || stopping || pending.length === 0) return
    fetching = true
    const batch = pending.splice(0, FETCH_BATCH)
    try {
      // The partition key bounds the lookup (±1 ms: JS time has no microseconds).
      const times = batch.map((n) => timestampMs(n.insertedAt))
      const rows = await sql<MessageRow[]>`
        select id, topic, event, payload, private, binary_payload
          from realtime.messages
         where id = any(${batch.map((n) => n.id)}::uuid[])
           and inserted_at >= ${timestampText(Math.min(...times) - 1)}::text::timestamp
           and inserted_at <= ${timestampText(Math.max(...times) + 1)}::text::timestamp
           and extension = 'broadcast'`
      fetchFailures = 0
      const byId = new Map(rows.map((row) => [row.id, row]))
      // In NOTIFY order, which is commit order.
      for (const note of batch) {
        const row = byId.get(note.id)
        if (row) deliverRow(row)
      }
    } catch (err) {
      if (stopping) return
      fetchFailures++
      if (fetchFailures >= 5) {
        log(`realtime: dropped ${batch.length} message(s) that could not be read`, err)
        fetchFailures = 0
      } else {
        pending.unshift(...batch)
        retryTimer = setTimeout(() => {
          retryTimer = null
          void flush()
        }, 100 * 2 ** fetchFailures)
        retryTimer.unref()
      }
    } finally {
      fetching = false
    }
    if (pending.length > 0) void flush()
  }

  function deliverRow(row: MessageRow) {
    const key = routingKey(row.private === true, row.topic)
    if (!routes.has(key)) return
    deliveredRows++
    const topic = 'realtime:' + row.topic
    const meta = { id: row.id }
    if (row.binary_payload) fanOut(key, topic, { type: 'broadcast', event: row.event, meta }, Buffer.from(row.binary_payload))
    else fanOut(key, topic, { type: 'broadcast', event: row.event, payload: row.payload, meta }, null)
  }

  const pings = new Map<string, (heard: boolean) => void>()

  function onNotify(text: string) {
    let note: Record<string, unknown>
    try {
      note = JSON.parse(text)
    } catch {
      return
    }
    if (!isObject(note)) return
    if (typeof note.ping === 'string') {
      markAlive(note.at)
      pings.get(note.ping)?.(true)
      return
    }
    if (typeof note.id !== 'string' || !UUID.test(note.id) || typeof note.inserted_at !== 'string') return
    accept({
      id: note.id.toLowerCase(),
      insertedAt: note.inserted_at,
      topic: typeof note.topic === 'string' ? note.topic : undefined,
      private: note.private === true,
    })
  }

  /** Rows committed while the listener was deaf, read back from the table. */
  async function catchUp() {
    const since = Math.max(startedAt, aliveAt - CATCH_UP_WINDOW_MS)
    const rows = await sql<{ id: string; inserted_at: string; topic: string; private: boolean | null }[]>`
      select id, inserted_at::text as inserted_at, topic, private
        from realtime.messages
       where extension = 'broadcast' and inserted_at >= ${timestampText(since)}::text::timestamp
       order by inserted_at, id
       limit 10000`
    for (const row of rows) accept({ id: row.id, insertedAt: row.inserted_at, topic: row.topic, private: row.private === true })
  }

  let listener: Sql | null = null
  let generation = 0

  async function startListener() {
    const mine = ++generation
    const instance = postgres(options.databaseUrl, {
      max: 1,
      ...reconnecting,
      connection: { ...connectionOptions, application_name: `${applicationName}-listen` },
      onnotice: () => {},
    })
    listener = instance
    let first = true
    try {
      await withDeadline(instance.listen(
        NOTIFY_CHANNEL,
        (payload) => {
          if (mine === generation) onNotify(payload)
        },
        () => {
          // postgres.js re-listens by itself after a dropped connection: catch up on the gap.
          if (first) first = false
          else if (mine === generation && !stopping) catchUp().catch((err) => log('realtime: catch-up failed', err))
        },
      ), listenDeadlineMs, 'LISTEN')
    } catch (err) {
      if (listener === instance) listener = null
      await instance.end({ timeout: 0 }).catch(() => {})
      throw err
    }
  }

  async function restartListener() {
    listenerRestarts++
    const old = listener
    listener = null
    generation++
    await old?.end({ timeout: 0 }).catch(() => {})
    await startListener()
    await catchUp()
  }

  let checking = false
  async function healthCheck() {
    if (checking || stopping) return
    checking = true
    const nonce = randomUUID()
    try {
      if (!listener) {
        await restartListener()
        return
      }
      const heard = new Promise<boolean>((resolve) => {
        pings.set(nonce, resolve)
        setTimeout(() => resolve(false), pingTimeoutMs).unref()
      })
      try {
        await withDeadline(sql`select pg_notify(${NOTIFY_CHANNEL}, json_build_object('ping', ${nonce}::text, 'at', localtimestamp)::text)`, pingDeadlineMs, 'the health ping')
      } catch (err) {
        // The database is unreachable, or silent (its connection was destroyed at the deadline):
        // said once per ping, and tried again at the next.
        const { code, message } = err as { code?: string; message?: string }
        if (!stopping) log(`realtime: health ping got no answer from the database (${code ?? 'error'}: ${message ?? String(err)}); trying again in ${healthCheckIntervalMs} ms`)
        return
      }
      if (await heard) {
        for (const [id, ms] of seen) if (ms < aliveAt - 2 * CATCH_UP_WINDOW_MS) seen.delete(id)
      } else if (!stopping) {
        log('realtime: the LISTEN connection stopped hearing; reconnecting')
        await restartListener()
      }
    } catch (err) {
      if (!stopping) log('realtime: reconnecting the LISTEN connection failed', err)
    } finally {
      pings.delete(nonce)
      checking = false
    }
  }

  // --------------------------------------------------------------------------
  // Partitions, as the Realtime server keeps them
  // --------------------------------------------------------------------------
  async function maintain(): Promise<string[]> {
    await sql`select realtime.ensure_partitions()`
    const dropped = await sql<{ name: string }[]>`select realtime.drop_old_partitions() as name`
    return dropped.map((row) => row.name)
  }

  await maintain().catch((err) => log('realtime: partition upkeep failed', err))
  await startListener().catch(async (err) => {
    await sql.end({ timeout: 0 })
    throw err
  })

  const timers = [
    setInterval(() => void maintain().catch((err) => !stopping && log('realtime: partition upkeep failed', err)), options.maintenanceIntervalMs ?? 3_600_000),
    setInterval(() => void healthCheck(), healthCheckIntervalMs),
    setInterval(() => void closeRevoked(), options.revocationCheckIntervalMs ?? 5_000),
    setInterval(() => {
      const limit = Date.now() - idleTimeoutMs
      for (const conn of connections) if (conn.lastSeen < limit) conn.ws.terminate()
      forgetIdleClients()
    }, Math.min(15_000, Math.max(1_000, Math.floor(idleTimeoutMs / 4)))),
  ]
  for (const timer of timers) timer.unref()

  return {
    attach(server) {
      const handler = upgradeHandler(server)
      server.on('upgrade', handler)
      detachers.push(() => server.off('upgrade', handler))
    },
    maintain,
    stats() {
      let channels = 0
      for (const conn of connections) channels += conn.channels.size
      return {
        connections: connections.size,
        channels,
        topics: routes.size,
        deliveredRows,
        listenerRestarts,
        authorizationChecks,
        tokensRefreshed,
        maxChecksInFlightPerClient,
        refused: { ...refused },
      }
    },
    close() {
      stopping = true
      closed ??= (async () => {
        for (const timer of timers) clearInterval(timer)
        if (retryTimer) clearTimeout(retryTimer)
        for (const detach of detachers) detach()
        for (const resolve of pings.values()) resolve(false)
        const open = [...connections]
        for (const conn of open) {
          for (const channel of conn.channels.values()) if (channel.expiryTimer) clearTimeout(channel.expiryTimer)
          conn.ws.close(1001, 'server shutting down')
        }
        // Clients answer the close at once; whoever does not within a moment is cut off.
        await new Promise<void>((resolve) => {
          const started = Date.now()
          const wait = setInterval(() => {
            if (connections.size === 0 || Date.now() - started > 1_000) {
              clearInterval(wait)
              resolve()
            }
          }, 10)
        })
        for (const conn of [...connections]) {
          conn.ws.terminate()
          dropConnection(conn)
        }
        wss.close()
        generation++
        await Promise.all([
          listener?.end({ timeout: 0 }).catch(() => {}),
          sql.end({ timeout: 2 }).catch(() => {}),
          sweeper.end({ timeout: 2 }).catch(() => {}),
        ])
        listener = null
      })()
      return closed
    },
  }
}
