// Fair share of the database within one server (issue 25): every request's SQL call waits for a
// turn here, in a queue of its member's own, and the queues are served in turn.
//
// Why: the pool has a few connections (4 on 2 cores) and postgres.js serves waiting statements
// first come, first served, so one member who sends 32 costly requests at once used to hold
// every connection while everyone else waited behind them. Here:
//   - at most `concurrency` calls run at once, all members together (the pool's size);
//   - at most `perMember` of them are one member's: the rest of the pool stays free for others;
//   - a member's further calls wait in that member's queue, at most `waitingPerMember` of them
//     (past it: 429 with Retry-After), and when a connection frees up the next member in turn
//     gets it (round robin), not the oldest request;
//   - a call that waited `maxWaitMs` without a turn is answered 503 (the server is saturated).
//
// Only the SQL call holds a turn, never the reading of a request's body: a client that uploads
// slowly holds no connection's turn. Across servers and edge isolates, which share no memory,
// the database itself bounds a member (app.admit_request: 8 requests at once, and the read rate
// limit), so this queue is the fairness and the database is the bound.
//
// Runtime-neutral: no timers beyond setTimeout, no Node or Deno import.
import type { Credential } from './db.ts'

export interface AdmissionLimits {
  /** Calls that may run at once, all members together: the size of the pool they run on. */
  concurrency: number
  /** Calls one member may have running at once. */
  perMember: number
  /** Calls one member may have waiting for a turn; one more is refused (429). */
  waitingPerMember: number
  /** How long a call may wait for a turn before it is refused (503). */
  maxWaitMs: number
}

/** The limits for a pool of `poolSize` connections: half of it for one member, at least one. */
export function admissionLimitsFor(poolSize: number): AdmissionLimits {
  return {
    concurrency: poolSize,
    perMember: Math.max(1, Math.floor(poolSize / 2)),
    waitingPerMember: 32,
    maxWaitMs: 10_000,
  }
}

/** A call refused a turn: 429 (this member has too much waiting) or 503 (no turn in time). */
export class AdmissionRefused extends Error {
  constructor(
    readonly status: 429 | 503,
    message: string,
    readonly retryAfterSeconds: number,
  ) {
    super(message)
  }
}

interface Waiter {
  start: () => void
  refuse: (err: AdmissionRefused) => void
}

interface Member {
  /** The key the member's line is known by now (an API key's line is renamed when its member is learned). */
  name: string
  running: number
  waiting: Waiter[]
  /** Whether the member is in the ring of those whose next call may start. */
  inRing: boolean
}

export class FairQueue {
  private running = 0
  private readonly members = new Map<string, Member>()
  /** Members with a waiting call and a free slot of their own, in the order they get turns. */
  private ring: string[] = []

  constructor(readonly limits: AdmissionLimits) {}

  /**
   * Runs `call` when `member` has a turn. Resolves or rejects as `call` does; rejects with
   * AdmissionRefused when no turn is given. `signal` (asked only when the call must wait): aborts
   * when the client went away, whose turn is then not needed.
   */
  async run<T>(member: string, call: () => Promise<T>, signal?: () => AbortSignal | undefined): Promise<T> {
    const state = this.memberState(member)
    // The fast path: a free connection, a free slot of the member's, nobody waiting for a turn
    // (whenever the pool has room, the ring is empty: dispatch() keeps it so).
    if (this.running < this.limits.concurrency && state.running < this.limits.perMember && this.ring.length === 0) {
      this.begin(state)
    } else {
      await this.wait(state, signal?.())
    }
    try {
      return await call()
    } finally {
      this.end(state)
    }
  }

  /**
   * The line known as `from` is `to`'s from now on (an API key whose member was learned): its
   * running and waiting calls count as `to`'s. When `to` already has a line of its own (the
   * member's other credential), the two stay apart until `from`'s drains: callers send new
   * calls as `to` from now on.
   */
  rename(from: string, to: string): void {
    const state = this.members.get(from)
    if (!state || from === to || this.members.has(to)) return
    this.members.delete(from)
    state.name = to
    this.members.set(to, state)
    if (state.inRing) this.ring = this.ring.map((name) => (name === from ? to : name))
  }

  /** Calls running and waiting now (tests, the bench). */
  stats(): { running: number; waiting: number; members: number } {
    let waiting = 0
    for (const m of this.members.values()) waiting += m.waiting.length
    return { running: this.running, waiting, members: this.members.size }
  }

  private memberState(member: string): Member {
    let state = this.members.get(member)
    if (!state) this.members.set(member, (state = { name: member, running: 0, waiting: [], inRing: false }))
    return state
  }

  private begin(state: Member): void {
    this.running++
    state.running++
  }

  private wait(state: Member, signal?: AbortSignal): Promise<void> {
    if (state.waiting.length >= this.limits.waitingPerMember) {
      this.forgetIfIdle(state)
      return Promise.reject(new AdmissionRefused(429,
        `Too many requests at once: ${this.limits.perMember} of yours run at a time and ${this.limits.waitingPerMember} may wait; try again in a second.`, 1))
    }
    return new Promise<void>((resolve, reject) => {
      const leave = (err: AdmissionRefused) => {
        const at = state.waiting.indexOf(waiter)
        if (at < 0) return
        state.waiting.splice(at, 1)
        clearTimeout(timer)
        signal?.removeEventListener('abort', onAbort)
        this.forgetIfIdle(state)
        reject(err)
      }
      const onAbort = () => leave(new AdmissionRefused(503, 'The request was abandoned before its turn.', 1))
      const waiter: Waiter = {
        start: () => {
          clearTimeout(timer)
          signal?.removeEventListener('abort', onAbort)
          resolve()
        },
        refuse: leave,
      }
      const timer = setTimeout(() => leave(new AdmissionRefused(503,
        `The service is busy: the request waited ${Math.round(this.limits.maxWaitMs / 1000)} seconds without a turn. Try again shortly.`, 2)), this.limits.maxWaitMs)
      signal?.addEventListener('abort', onAbort, { once: true })
      state.waiting.push(waiter)
      if (!state.inRing && state.running < this.limits.perMember) this.enterRing(state)
      this.dispatch()
    })
  }

  private end(state: Member): void {
    this.running--
    state.running--
    if (state.waiting.length > 0 && !state.inRing) this.enterRing(state)
    this.dispatch()
    this.forgetIfIdle(state)
  }

  private enterRing(state: Member): void {
    state.inRing = true
    this.ring.push(state.name)
  }

  /** Gives free connections to the members in the ring, one call each per round. */
  private dispatch(): void {
    while (this.running < this.limits.concurrency && this.ring.length > 0) {
      const member = this.ring.shift()!
      const state = this.members.get(member)
      if (!state) continue
      state.inRing = false
      const waiter = state.waiting.shift()
      if (!waiter) {
        this.forgetIfIdle(state)
        continue
      }
      this.begin(state)
      waiter.start()
      // Back of the line: the next call of this member comes after one of every other's.
      if (state.waiting.length > 0 && state.running < this.limits.perMember) this.enterRing(state)
    }
  }

  private forgetIfIdle(state: Member): void {
    if (state.running === 0 && state.waiting.length === 0 && !state.inRing && this.members.get(state.name) === state) this.members.delete(state.name)
  }
}

// ---------------------------------------------------------------------------------------------
// Whose turn a request is
// ---------------------------------------------------------------------------------------------

/** How many API keys' members are remembered (a key's member never changes; a full map starts over). */
const REMEMBERED_KEYS = 50_000

/**
 * The queue of one server, keyed by member: an OAuth token names its member (`sub`); an API key
 * is known by its hash until its first answer says whose it is, and by its member from then on,
 * so a member with several keys still has one queue.
 */
export class Admission {
  private readonly queue: FairQueue
  private readonly keyMembers = new Map<string, string>()

  constructor(limits: AdmissionLimits) {
    this.queue = new FairQueue(limits)
  }

  /** Runs `call` (a request's SQL call) in its member's turn (see FairQueue.run). */
  run<T>(credential: Credential, call: () => Promise<T>, signal?: () => AbortSignal | undefined): Promise<T> {
    return this.queue.run(this.keyOf(credential), call, signal)
  }

  /** Remembers whose an API key is (what its request's statement answered), so its next requests queue as that member. */
  learn(credential: Credential, member: string): void {
    if (credential.kind !== 'api_key' || this.keyMembers.has(credential.key_hash)) return
    if (this.keyMembers.size >= REMEMBERED_KEYS) this.keyMembers.clear()
    this.keyMembers.set(credential.key_hash, member)
    // The calls of this key already running or waiting keep counting toward one line, the member's.
    this.queue.rename(`key ${credential.key_hash}`, member)
  }

  stats() {
    return this.queue.stats()
  }

  private keyOf(credential: Credential): string {
    if (credential.kind === 'oauth') return memberOfPublicId(credential.sub)
    return this.keyMembers.get(credential.key_hash) ?? `key ${credential.key_hash}`
  }
}

/** user_<32 hex> → the uuid the database answers with; anything else as it is. */
function memberOfPublicId(publicId: string): string {
  const hex = /^user_([0-9a-f]{32})$/.exec(publicId)?.[1]
  return hex ? `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}` : publicId
}
