// Per-client limits of the local Realtime gateway (docs/security.md, "Realtime: per-client limits").
//
// Supabase Realtime limits a whole project (its tenant: concurrent connections, joins and
// messages per second, summed over every client) and, per connection, the channels it holds
// (`max_channels_per_client`, 100). The local gateway has no project to share and serves one
// app, so it keeps Supabase's per-connection numbers and adds per-client ones, so that one
// client's burst is refused before it becomes database work and cannot queue ahead of others:
//
//   per address (IPv4, or an IPv6 /64: what a host is given, so that one attacker cannot
//   rotate through its own block):  sockets, join attempts, messages, concurrent checks
//   per member (the token's `sub`, which only an account holder can present): channels,
//   concurrent checks
//   per socket: channels, join attempts, messages
//
// Rates are token buckets: `burst` at once, refilled at `perSecond`.

export interface Rate {
  burst: number
  perSecond: number
}

export interface RealtimeLimits {
  /** Open sockets from one address; the next upgrade is answered 429. */
  socketsPerAddress: number
  /** Channels one socket holds (joined or being joined): Supabase's `max_channels_per_client`. */
  channelsPerSocket: number
  /** Channels one member holds over all their sockets. */
  channelsPerMember: number
  /** Join attempts on one socket. Over it: `ClientJoinRateLimitReached`, and the socket is closed. */
  joinsPerSocket: Rate
  /** Join attempts over all sockets of one address (a fresh socket brings no fresh allowance). */
  joinsPerAddress: Rate
  /** Other frames (broadcasts, token refreshes, leaves, heartbeats) from one socket. */
  messagesPerSocket: Rate
  /** Other frames over all sockets of one address. */
  messagesPerAddress: Rate
  /**
   * Authorization checks (each a database transaction) one address, and one member, may have
   * running at once; the rest wait in the client's own line, not in the pool's.
   */
  checksPerClient: number
}

/**
 * The defaults, modelled on Supabase Realtime's (docs/security.md cites each): 100 channels per
 * connection as on every plan; a socket may join its 100 channels at once (realtime-js rejoins
 * them all after a reconnect), then 10 a second; 200 joins at once per address (one address
 * may be a household or an office), then 20 a second, a fifth of the Free plan's 100 joins a
 * second for a whole project; messages half the Free plan's 100 a second per socket, and that
 * whole 100 per address, after a burst that lets a socket refresh the token of its 100 channels
 * at once (realtime-js sends one `access_token` per channel) and an address do so for a few.
 */
export const DEFAULT_REALTIME_LIMITS: RealtimeLimits = {
  socketsPerAddress: 100,
  channelsPerSocket: 100,
  channelsPerMember: 200,
  joinsPerSocket: { burst: 100, perSecond: 10 },
  joinsPerAddress: { burst: 200, perSecond: 20 },
  messagesPerSocket: { burst: 200, perSecond: 50 },
  messagesPerAddress: { burst: 500, perSecond: 100 },
  checksPerClient: 2,
}

/** Supabase Realtime's join error reason when joins come too fast (the socket is then disconnected). */
export const JOIN_RATE_REASON = 'ClientJoinRateLimitReached: Too many joins per second'
/** Supabase Realtime's join error reason past `max_channels_per_client`. */
export const CHANNELS_REASON = 'ChannelRateLimitReached: Too many channels'
export const MEMBER_CHANNELS_REASON = 'ChannelRateLimitReached: Too many channels for this user'
/** Supabase Realtime's system message when a channel's messages exceed the rate (the channel closes). */
export const MESSAGE_RATE_MESSAGE = 'Too many messages per second'
export const SOCKETS_ERROR = 'Too many Realtime connections from this address.'

export class TokenBucket {
  private tokens: number
  private at: number

  constructor(private readonly rate: Rate, now: number) {
    this.tokens = rate.burst
    this.at = now
  }

  private refill(now: number) {
    if (now > this.at) {
      this.tokens = Math.min(this.rate.burst, this.tokens + ((now - this.at) / 1000) * this.rate.perSecond)
      this.at = now
    }
  }

  available(now: number): boolean {
    this.refill(now)
    return this.tokens >= 1
  }

  take() {
    this.tokens -= 1
  }

  full(now: number): boolean {
    this.refill(now)
    return this.tokens >= this.rate.burst
  }
}

/** A counting semaphore whose waiters are served in order. */
export class Slots {
  inFlight = 0
  private readonly waiters: (() => void)[] = []

  constructor(private readonly limit: number) {}

  acquire(): Promise<void> {
    if (this.inFlight < this.limit) {
      this.inFlight++
      return Promise.resolve()
    }
    return new Promise((resolve) => this.waiters.push(resolve))
  }

  /** The slot passes straight to the next waiter, if any. */
  release() {
    const next = this.waiters.shift()
    if (next) next()
    else this.inFlight--
  }

  get idle(): boolean {
    return this.inFlight === 0 && this.waiters.length === 0
  }
}

/**
 * Who a socket's limits are counted against: its IPv4 address, or the /64 of its IPv6 address
 * (a host is routinely given a whole /64; counting single addresses would let it take 2^64
 * allowances). IPv4-mapped IPv6 addresses count as IPv4.
 */
export function clientKey(address: string | undefined): string {
  if (!address) return 'unknown'
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(address)
  if (mapped) return mapped[1]!
  if (!address.includes(':')) return address
  const bare = address.split('%')[0]!.toLowerCase()
  let groups: string[]
  const gap = bare.indexOf('::')
  if (gap >= 0) {
    const head = bare.slice(0, gap).split(':').filter(Boolean)
    const tail = bare.slice(gap + 2).split(':').filter(Boolean)
    // An embedded IPv4 tail stands for two groups.
    const tailGroups = tail.reduce((n, part) => n + (part.includes('.') ? 2 : 1), 0)
    groups = [...head, ...Array<string>(Math.max(0, 8 - head.length - tailGroups)).fill('0'), ...tail]
  } else {
    groups = bare.split(':')
  }
  const prefix = groups.slice(0, 4).map((group) => (Number.parseInt(group, 16) || 0).toString(16))
  while (prefix.length < 4) prefix.push('0')
  return `${prefix.join(':')}::/64`
}
