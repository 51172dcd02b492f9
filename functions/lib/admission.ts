// Fair share of the database within one server (issue 25): every SQL call of a request waits
// for a turn here, in a line of its member's own, and the lines are served in turn.
//
// Why: the pool has a few connections (4 on 2 cores) and postgres.js serves waiting statements
// first come, first served, so one member who sent 32 costly requests at once used to hold
// every connection while everyone else waited behind them. Here:
//   - at most `concurrency` calls run at once, all lines together (the pool's size), so no
//     statement is ever pipelined behind another on a busy connection;
//   - at most `perMember` of them are one line's (a quarter of the pool, which is half the
//     machine's cores: one statement is one process on one core), so the rest of the pool and
//     of the CPU stays free for others;
//   - a line's further calls wait in it, at most `waitingPerMember` of them (past it: 429 with
//     Retry-After), and when a connection frees up the next line in turn gets it (round robin),
//     not the oldest request;
//   - a call that waited `maxWaitMs` without a turn is answered 503 (the server is saturated);
//   - lines of callers nobody has vouched for yet (a credential the database has not accepted,
//     requests without one) are strangers: one call at a time each, and together at most half
//     the pool, so made-up keys, each a line of its own, can never crowd the members out.
//
// Only the SQL call holds a turn, never the reading of a request's body: a client that uploads
// slowly holds no connection's turn. Across servers and edge isolates, which share no memory,
// the database bounds a member (app.admit_request: 8 requests at once) and the read counts are
// reconciled through it (ReadLimiter below), so this queue is the fairness and the database the
// bound.
//
// Runtime-neutral: setTimeout only, no Node or Deno import.
import type { Credential } from './db.ts'

export interface AdmissionLimits {
  /** Calls that may run at once, all lines together: the size of the pool they run on. */
  concurrency: number
  /** Calls one line (a member) may have running at once. */
  perMember: number
  /** Calls one line may have waiting for a turn; one more is refused (429). */
  waitingPerMember: number
  /** How long a call may wait for a turn before it is refused (503). */
  maxWaitMs: number
}

/**
 * The limits for a pool of `poolSize` connections (twice the cores: local/config.ts): a quarter
 * of it for one member, at least one. A quarter, not half: a costly statement keeps its core
 * busy, and with half the pool one member's floods used every core of a 2-core machine, so
 * another member's reads shared the CPU with them (p99 up to 2.5× in the fairness bench); with a
 * core left over they did not notice the flood (docs/performance.md, "Fairness").
 */
export function admissionLimitsFor(poolSize: number): AdmissionLimits {
  return {
    concurrency: poolSize,
    perMember: Math.max(1, Math.floor(poolSize / 4)),
    waitingPerMember: 32,
    maxWaitMs: 10_000,
  }
}

/** A call refused a turn: 429 (the line has too much waiting, or too many reads) or 503 (no turn in time). */
export class AdmissionRefused extends Error {
  constructor(
    readonly status: 429 | 503,
    message: string,
    readonly retryAfterSeconds: number,
  ) {
    super(message)
  }
}

/** The caller went away while its call waited for a turn: nobody is left to answer. */
export class CallerGone extends Error {
  constructor() {
    super('The request was abandoned before its turn.')
  }
}

/** Members: callers the database vouched for. Strangers: everyone else, half the pool at most. */
export type LineClass = 'member' | 'stranger'

export interface RunOptions {
  /** The line's class; default member. A stranger's line runs one call at a time unless `running` says otherwise. */
  class?: LineClass
  /** This line's running cap, when not its class's (the shared line of anonymous requests). */
  running?: number
  /** This line's waiting cap, when not waitingPerMember (the shared line of anonymous requests). */
  waiting?: number
  /** Asked only when the call must wait: aborts when the client went away. */
  signal?: () => AbortSignal | undefined
}

interface Waiter {
  start: () => void
}

interface Line {
  /** The key the line is known by now (a credential's line is renamed when its member is learned). */
  name: string
  class: LineClass
  /** Calls it may run at once: perMember for a member, one for a stranger's credential. */
  cap: number
  running: number
  waiting: Waiter[]
  /** Whether the line is in its class's ring of lines whose next call may start. */
  inRing: boolean
}

export class FairQueue {
  private running = 0
  private readonly runningByClass: Record<LineClass, number> = { member: 0, stranger: 0 }
  private readonly lines = new Map<string, Line>()
  /** Per class, the lines with a waiting call and a free slot of their own, in the order they get turns. */
  private readonly rings: Record<LineClass, string[]> = { member: [], stranger: [] }
  /** Which class the next free connection is offered to first (the classes take turns too). */
  private preferred: LineClass = 'member'

  constructor(readonly limits: AdmissionLimits) {}

  /** The most calls strangers may run at once, all together. */
  get strangerShare(): number {
    return Math.max(1, Math.floor(this.limits.concurrency / 2))
  }

  /**
   * Runs `call` when line `name` has a turn. Resolves or rejects as `call` does; rejects with
   * AdmissionRefused when no turn is given, CallerGone when the client left while waiting.
   */
  async run<T>(name: string, call: () => Promise<T>, options: RunOptions = {}): Promise<T> {
    const line = this.lineOf(name, options.class ?? 'member', options.running)
    // The fast path: a free connection, a free slot of the line's and of its class, nobody of
    // its class waiting (whenever the pool has room, every ring that could use it is empty:
    // dispatch() keeps it so).
    if (this.running < this.limits.concurrency && this.mayStart(line) && this.rings[line.class].length === 0) {
      this.begin(line)
    } else {
      await this.wait(line, options)
    }
    try {
      return await call()
    } finally {
      this.end(line)
    }
  }

  /**
   * The line known as `from` is `to`'s from now on (a credential whose member was learned): a
   * member's line, its running and waiting calls counting as the member's. When `to` already has
   * a line (the member's other credential), the two stay apart until `from`'s drains: callers
   * send new calls as `to` from now on.
   */
  rename(from: string, to: string): void {
    const line = this.lines.get(from)
    if (!line || from === to || this.lines.has(to)) return
    this.lines.delete(from)
    const wasInRing = line.inRing
    if (wasInRing) this.rings[line.class] = this.rings[line.class].filter((name) => name !== from)
    this.runningByClass[line.class] -= line.running
    line.name = to
    line.class = 'member'
    line.cap = this.limits.perMember
    line.inRing = false
    this.runningByClass.member += line.running
    this.lines.set(to, line)
    if (line.waiting.length > 0 && line.running < line.cap) this.enterRing(line)
    this.dispatch()
  }

  /** Calls running and waiting now (tests, the bench). */
  stats(): { running: number; waiting: number; lines: number; strangers: number } {
    let waiting = 0
    for (const line of this.lines.values()) waiting += line.waiting.length
    return { running: this.running, waiting, lines: this.lines.size, strangers: this.runningByClass.stranger }
  }

  private lineOf(name: string, lineClass: LineClass, running?: number): Line {
    let line = this.lines.get(name)
    if (!line) {
      const cap = running ?? (lineClass === 'member' ? this.limits.perMember : 1)
      this.lines.set(name, (line = { name, class: lineClass, cap, running: 0, waiting: [], inRing: false }))
    }
    return line
  }

  private mayStart(line: Line): boolean {
    return line.running < line.cap && (line.class === 'member' || this.runningByClass.stranger < this.strangerShare)
  }

  private begin(line: Line): void {
    this.running++
    this.runningByClass[line.class]++
    line.running++
  }

  private wait(line: Line, options: RunOptions): Promise<void> {
    const cap = options.waiting ?? this.limits.waitingPerMember
    if (line.waiting.length >= cap) {
      this.forgetIfIdle(line)
      return Promise.reject(new AdmissionRefused(429,
        `Too many requests at once: ${line.cap} of yours run at a time and ${cap} may wait; try again in a second.`, 1))
    }
    const signal = options.signal?.()
    if (signal?.aborted) {
      this.forgetIfIdle(line)
      return Promise.reject(new CallerGone())
    }
    return new Promise<void>((resolve, reject) => {
      const leave = (err: Error) => {
        const at = line.waiting.indexOf(waiter)
        if (at < 0) return
        line.waiting.splice(at, 1)
        clearTimeout(timer)
        signal?.removeEventListener('abort', onAbort)
        this.forgetIfIdle(line)
        reject(err)
      }
      const onAbort = () => leave(new CallerGone())
      const waiter: Waiter = {
        start: () => {
          clearTimeout(timer)
          signal?.removeEventListener('abort', onAbort)
          resolve()
        },
      }
      const timer = setTimeout(() => leave(new AdmissionRefused(503,
        `The service is busy: the request waited ${Math.round(this.limits.maxWaitMs / 1000)} seconds without a turn. Try again shortly.`, 2)), this.limits.maxWaitMs)
      signal?.addEventListener('abort', onAbort, { once: true })
      line.waiting.push(waiter)
      if (!line.inRing && line.running < line.cap) this.enterRing(line)
      this.dispatch()
    })
  }

  private end(line: Line): void {
    this.running--
    this.runningByClass[line.class]--
    line.running--
    if (line.waiting.length > 0 && !line.inRing) this.enterRing(line)
    this.dispatch()
    this.forgetIfIdle(line)
  }

  private enterRing(line: Line): void {
    line.inRing = true
    this.rings[line.class].push(line.name)
  }

  /** Which class the next free connection goes to: they take turns; strangers only within their share. */
  private nextClass(): LineClass | null {
    const usable = (c: LineClass) => this.rings[c].length > 0 && (c === 'member' || this.runningByClass.stranger < this.strangerShare)
    const other: LineClass = this.preferred === 'member' ? 'stranger' : 'member'
    if (usable(this.preferred)) return this.preferred
    return usable(other) ? other : null
  }

  /** Gives free connections to the lines in the rings, one call each per round. */
  private dispatch(): void {
    while (this.running < this.limits.concurrency) {
      const lineClass = this.nextClass()
      if (!lineClass) return
      this.preferred = lineClass === 'member' ? 'stranger' : 'member'
      const name = this.rings[lineClass].shift()!
      const line = this.lines.get(name)
      if (!line) continue
      line.inRing = false
      const waiter = line.waiting.shift()
      if (!waiter) {
        this.forgetIfIdle(line)
        continue
      }
      this.begin(line)
      waiter.start()
      // Back of the line: this line's next call comes after one of every other's.
      if (line.waiting.length > 0 && line.running < line.cap) this.enterRing(line)
    }
  }

  private forgetIfIdle(line: Line): void {
    if (line.running === 0 && line.waiting.length === 0 && !line.inRing && this.lines.get(line.name) === line) this.lines.delete(line.name)
  }
}

// ---------------------------------------------------------------------------------------------
// Reads per member: counted here, reconciled through the database
// ---------------------------------------------------------------------------------------------

/** The `read` rule of app.rate_limits: at most `max` reads per `perMs`. */
export interface ReadRule {
  max: number
  perMs: number
}

/** Until the database says otherwise (its `read` row, learned at the first reconciliation). */
export const DEFAULT_READ_RULE: ReadRule = { max: 1200, perMs: 60_000 }

const MEMBER_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
const isMemberId = (name: string) => MEMBER_ID.test(name)

interface ReadCount {
  /** Start of the current bucket (a whole `perMs` window), ms. */
  bucket: number
  /** Reads in the current bucket and the one before: every server's, as of the last reconciliation, plus ours since. */
  current: number
  previous: number
  /** Ours not yet sent to the database. */
  unsent: number
}

/** What reconcile() sends: reads per member uuid since the last time, in the bucket starting at `bucket`. */
export interface ReadReport {
  bucket: number
  reads: Record<string, number>
}

/** No `read` row in app.rate_limits: reads are not limited. */
const UNLIMITED_READS: ReadRule = { max: Number.POSITIVE_INFINITY, perMs: 60_000 }

/** What the database answers: every server's reads per member in that bucket and the one before, and the rule (null: none). */
export interface ReadTotals {
  rule: ReadRule | null
  totals: Record<string, { current: number; previous: number }>
}

/**
 * Counts each member's reads in memory (a read costs the database nothing, writes no row and
 * takes no transaction id), as a sliding window estimated from two buckets, and refuses a read
 * past the rule. Every second or so the counts are sent to the database (app.record_reads), one
 * statement for all members, which answers every server's totals: so the limit holds across
 * servers and edge isolates within about a second of each other's reads. Every read is counted
 * when it is admitted, whatever becomes of it (a failing read costs as much).
 */
export class ReadLimiter {
  private rule: ReadRule = DEFAULT_READ_RULE
  private readonly counts = new Map<string, ReadCount>()
  /** Whether a member's reads may wait to be sent: kept as reads come, so asking costs nothing per request. */
  private unsentMembers = false

  constructor(private readonly now: () => number = Date.now) {}

  /** Counts a read of `member`, or answers the seconds until one fits. */
  take(member: string): number | null {
    const count = this.countOf(member)
    const elapsed = (this.now() - count.bucket) / this.rule.perMs
    if (count.previous * (1 - elapsed) + count.current >= this.rule.max) return this.secondsUntilRoom(count, elapsed)
    count.current++
    count.unsent++
    if (!this.unsentMembers && isMemberId(member)) this.unsentMembers = true
    return null
  }

  /** The reads to send (members' lines with unsent reads; a stranger's are counted here only), marked as sent. */
  report(isMember: (name: string) => boolean = isMemberId): ReadReport | null {
    const reads: Record<string, number> = {}
    let any = false
    const bucket = this.bucketOf(this.now())
    for (const [member, count] of this.counts) {
      this.roll(count, bucket)
      if (count.unsent > 0 && isMember(member)) {
        reads[member] = count.unsent
        count.unsent = 0
        any = true
      }
      if (count.current === 0 && count.previous === 0 && count.unsent === 0) this.counts.delete(member)
    }
    if (isMember === isMemberId) this.unsentMembers = false
    return any ? { bucket, reads } : null
  }

  /**
   * Whether a member's reads may wait to be sent (counted since the last report, or sent for
   * nobody): a flag kept by take, merge and unsend, not a walk over every line, since it is asked
   * on every request (strangers' lines, made-up keys among them, would make that walk as long as
   * an attacker likes). It may say yes when the reads aged out since: the report then finds none.
   */
  hasUnsent(): boolean {
    return this.unsentMembers
  }

  /** Takes the database's totals (every server's reads) for the members it answered about. */
  learn(totals: ReadTotals, sentBucket: number): void {
    this.rule = totals.rule ?? UNLIMITED_READS
    const bucket = this.bucketOf(this.now())
    for (const [member, total] of Object.entries(totals.totals)) {
      const count = this.countOf(member)
      if (count.bucket !== sentBucket || bucket !== sentBucket) continue
      // Every server's reads as the database counted them (ours sent included), plus ours since.
      count.current = total.current + count.unsent
      count.previous = Math.max(count.previous, total.previous)
    }
  }

  /** Reads sent for nobody (the report failed): counted again next time. */
  unsend(report: ReadReport): void {
    for (const [member, reads] of Object.entries(report.reads)) {
      const count = this.counts.get(member)
      if (count && count.bucket === report.bucket) {
        count.unsent += reads
        this.unsentMembers = true
      }
    }
  }

  /** A credential's reads before its member was known count as the member's. */
  merge(from: string, to: string): void {
    const source = this.counts.get(from)
    if (!source || from === to) return
    this.counts.delete(from)
    const target = this.countOf(to)
    this.roll(source, target.bucket)
    target.current += source.current
    target.previous += source.previous
    target.unsent += source.unsent
    if (target.unsent > 0 && isMemberId(to)) this.unsentMembers = true
  }

  private countOf(member: string): ReadCount {
    const bucket = this.bucketOf(this.now())
    let count = this.counts.get(member)
    if (!count) this.counts.set(member, (count = { bucket, current: 0, previous: 0, unsent: 0 }))
    this.roll(count, bucket)
    return count
  }

  private bucketOf(ms: number): number {
    return Math.floor(ms / this.rule.perMs) * this.rule.perMs
  }

  /** Moves a count to `bucket`: the current bucket becomes the previous one, or both age out. */
  private roll(count: ReadCount, bucket: number): void {
    if (count.bucket === bucket) return
    count.previous = count.bucket === bucket - this.rule.perMs ? count.current : 0
    count.current = 0
    if (count.bucket < bucket - this.rule.perMs) count.unsent = 0
    count.bucket = bucket
  }

  /** Seconds until the estimate falls below the rule with no more reads. */
  private secondsUntilRoom(count: ReadCount, elapsed: number): number {
    const { max, perMs } = this.rule
    const fraction = count.current < max && count.previous > 0
      ? (1 - (max - count.current) / count.previous) - elapsed
      : (1 - elapsed) + Math.max(0, 1 - max / Math.max(count.current, 1))
    return Math.min(Math.max(1, Math.ceil((fraction * perMs) / 1000)), Math.ceil((2 * perMs) / 1000))
  }

  /** The rule in force (tests). */
  get currentRule(): ReadRule {
    return this.rule
  }

  /** The sliding-window estimate of `member`'s reads now, every server's as far as known (tests). */
  estimate(member: string): number {
    const count = this.counts.get(member)
    if (!count) return 0
    this.roll(count, this.bucketOf(this.now()))
    return count.previous * (1 - (this.now() - count.bucket) / this.rule.perMs) + count.current
  }
}

// ---------------------------------------------------------------------------------------------
// Whose turn a request is
// ---------------------------------------------------------------------------------------------

/** How often a server sends its read counts to the database (and learns every other server's). */
export const RECONCILE_EVERY_MS = 1_000

/** How many credentials' members are remembered; the oldest is forgotten first. */
const REMEMBERED_CREDENTIALS = 50_000

/** The shared line of requests without a credential (files, export downloads, OAuth endpoints). */
export const ANONYMOUS_LINE = 'anonymous'
/** Its waiting cap: a web page asks for many files at once, and each is a primary-key lookup. */
const ANONYMOUS_WAITING = 1_000

/** A credential's own name: its key's hash, or its token's id (never its claimed member). */
function credentialName(credential: Credential): string {
  return credential.kind === 'api_key' ? `key ${credential.key_hash}` : `token ${credential.jti}`
}

/**
 * The queue and the read limiter of one server, keyed by member. A credential is a stranger until
 * the database accepts it: made-up keys, revoked keys and revoked tokens never queue in a member's
 * line, and strangers share half the pool. Its first successful call says whose it is (the
 * statement returns the member's id beside the body); from then on its line and its reads are
 * the member's, so a member with several keys and apps has one line. When the database refuses a
 * credential it remembered (revoked since), it is forgotten.
 */
export class Admission {
  readonly queue: FairQueue
  readonly reads: ReadLimiter
  private readonly members = new Map<string, string>()
  private reconciledAt = Number.NEGATIVE_INFINITY
  private reconciling = false
  private followUp: ReturnType<typeof setTimeout> | null = null
  private readonly now: () => number
  private readonly reconcileEveryMs: number

  constructor(limits: AdmissionLimits, options: { now?: () => number; reconcileEveryMs?: number } = {}) {
    this.now = options.now ?? Date.now
    this.reconcileEveryMs = options.reconcileEveryMs ?? RECONCILE_EVERY_MS
    this.queue = new FairQueue(limits)
    this.reads = new ReadLimiter(this.now)
  }

  /**
   * Sends the reads counted here to the database and takes every server's totals back, at most
   * once every RECONCILE_EVERY_MS (a second) and never two at once; returns at once (the request that
   * triggers it does not wait). Reads counted while a report was in flight, or within the second
   * after one, are sent by a follow-up when it ends: without it, a burst's last reads stayed on
   * this server until its next request, and the other servers let the member past the shared limit.
   * A report that failed is not followed up (the database is away: the next request tries again),
   * so a server without requests never retries on its own. On Edge the follow-up is best effort:
   * the isolate may be gone before it fires.
   */
  reconcile(send: (report: ReadReport) => Promise<ReadTotals>): void {
    const now = this.now()
    if (this.reconciling) return
    const wait = this.reconciledAt + this.reconcileEveryMs - now
    if (wait > 0) {
      if (this.followUp === null && this.reads.hasUnsent()) this.followUpIn(wait, send)
      return
    }
    const report = this.reads.report()
    if (!report) return
    this.reconciling = true
    this.reconciledAt = now
    let sent = false
    send(report).then(
      (totals) => {
        this.reads.learn(totals, report.bucket)
        sent = true
      },
      () => this.reads.unsend(report),
    ).finally(() => {
      this.reconciling = false
      if (sent && this.reads.hasUnsent()) this.followUpIn(Math.max(0, this.reconciledAt + this.reconcileEveryMs - this.now()), send)
    })
  }

  /** One pending follow-up report at most; it does not keep a process alive on its own. */
  private followUpIn(ms: number, send: (report: ReadReport) => Promise<ReadTotals>): void {
    if (this.followUp !== null) return
    const timer = setTimeout(() => {
      this.followUp = null
      this.reconcile(send)
    }, ms)
    ;(timer as { unref?: () => void }).unref?.()
    this.followUp = timer
  }

  /** Runs `call` (a SQL call of a request with `credential`) in its line's turn; a read is counted first. */
  run<T>(credential: Credential, call: () => Promise<T>, options: { read: boolean; signal?: () => AbortSignal | undefined }): Promise<T> {
    const name = this.lineOf(credential)
    if (options.read) {
      const wait = this.reads.take(name)
      if (wait !== null) {
        const { max, perMs } = this.reads.currentRule
        return Promise.reject(new AdmissionRefused(429, `Too many requests: at most ${max} reads per ${describePeriod(perMs)}. Try again in ${wait} seconds.`, wait))
      }
    }
    return this.queue.run(name, call, { class: this.members.has(credentialName(credential)) ? 'member' : 'stranger', signal: options.signal })
  }

  /** Runs a SQL call of a request without a credential, in the strangers' shared line. */
  runAnonymous<T>(call: () => Promise<T>, signal?: () => AbortSignal | undefined): Promise<T> {
    return this.queue.run(ANONYMOUS_LINE, call, { class: 'stranger', running: this.queue.strangerShare, waiting: ANONYMOUS_WAITING, signal })
  }

  /** The database accepted `credential` for `member`: its line and reads are the member's from now on. */
  learn(credential: Credential, member: string): void {
    const name = credentialName(credential)
    const known = this.members.get(name)
    if (known === member) {
      // Most recently used last: the map forgets the least recently used first.
      this.members.delete(name)
      this.members.set(name, member)
      return
    }
    if (this.members.size >= REMEMBERED_CREDENTIALS) this.members.delete(this.members.keys().next().value!)
    this.members.set(name, member)
    this.queue.rename(name, member)
    this.reads.merge(name, member)
  }

  /** The database refused `credential` (unknown, revoked, expired): it is a stranger again. */
  forget(credential: Credential): void {
    this.members.delete(credentialName(credential))
  }

  private lineOf(credential: Credential): string {
    const name = credentialName(credential)
    return this.members.get(name) ?? name
  }
}

function describePeriod(ms: number): string {
  if (ms >= 3_600_000) return `${Math.round(ms / 3_600_000)} hour(s)`
  if (ms >= 60_000) return `${Math.round(ms / 60_000)} minute(s)`
  return `${Math.round(ms / 1000)} second(s)`
}
