// The postgres.js client both runtimes use, configured the same way.
import { Socket } from 'node:net'
import { clearImmediate, clearTimeout, setImmediate, setTimeout } from 'node:timers'
import postgres from 'postgres'

export interface SqlOptions {
  /** Connections in the pool. */
  max?: number
  /** false behind Supabase's transaction pooler (port 6543), which cannot keep prepared statements. */
  prepare?: boolean
  /** Called with the text of every statement sent (tests count round trips with it). */
  onQuery?: (statement: string) => void
  /**
   * statement_timeout of every statement on the pool's connections, in milliseconds (0: none).
   * Sent as a startup parameter, so it is the session's own setting before any statement runs:
   * PostgreSQL arms the timer when a statement starts, which is why setting it inside the
   * request's statement (or per role, when the role is switched inside it) would never apply.
   */
  statementTimeoutMs?: number
  /**
   * How long past statementTimeoutMs a statement may go unanswered before its connection is
   * destroyed as silent (STATEMENT_DEADLINE_MARGIN_MS; default DEFAULT_DEADLINE_MARGIN_MS). Only
   * with a statement timeout: without one nothing bounds how long a statement may rightly take.
   */
  deadlineMarginMs?: number
}

/** How long one request's statement may run unless STATEMENT_TIMEOUT_MS says otherwise. */
export const DEFAULT_STATEMENT_TIMEOUT_MS = 5_000

/** STATEMENT_TIMEOUT_MS as milliseconds: unset or empty is the default; 0 turns the limit off. */
export function statementTimeoutFrom(value: string | undefined): number {
  if (value === undefined || value.trim() === '') return DEFAULT_STATEMENT_TIMEOUT_MS
  const ms = Number(value)
  if (!Number.isInteger(ms) || ms < 0) throw new Error(`STATEMENT_TIMEOUT_MS must be a whole number of milliseconds, got ${JSON.stringify(value)}`)
  return ms
}

/** How long past its statement timeout a statement may wait for PostgreSQL's answer, unless STATEMENT_DEADLINE_MARGIN_MS says otherwise. */
export const DEFAULT_DEADLINE_MARGIN_MS = 2_000

/** STATEMENT_DEADLINE_MARGIN_MS as milliseconds: unset or empty is the default; at least 1. */
export function deadlineMarginFrom(value: string | undefined): number {
  if (value === undefined || value.trim() === '') return DEFAULT_DEADLINE_MARGIN_MS
  const ms = Number(value)
  if (!Number.isInteger(ms) || ms < 1) throw new Error(`STATEMENT_DEADLINE_MARGIN_MS must be a whole number of milliseconds (1 or more), got ${JSON.stringify(value)}`)
  return ms
}

/**
 * The deadline of every statement on a pool: its statement timeout plus the margin, or null
 * without a statement timeout. PostgreSQL answers every statement within its statement timeout
 * (with its result, or with the timeout's error, 57014); the margin is for that answer to reach
 * us (the network, a busy server or event loop). A statement still unanswered then is on a
 * connection nobody answers on any more.
 */
export function statementDeadlineMs(statementTimeoutMs: number | undefined, marginMs = DEFAULT_DEADLINE_MARGIN_MS): number | null {
  return statementTimeoutMs ? statementTimeoutMs + marginMs : null
}

/** The code of the error a connection fails its statements with when it was destroyed as silent. */
export const DATABASE_SILENT = 'DATABASE_SILENT'

/**
 * TCP keepalive of every connection, in seconds of idleness before the first probe (postgres.js's
 * keep_alive; its default is 60). Node (libuv) then probes every second and gives up after 10
 * unanswered probes, so an idle connection to a host that vanished is closed within about 25 s,
 * before a request is sent into it. (Keepalive cannot help a connection with a statement under
 * way: the kernel retransmits unacknowledged data for up to ~15 minutes instead. The deadline
 * does that job.)
 */
export const KEEP_ALIVE_SECONDS = 15

/** How long opening one connection may take (postgres.js's connect_timeout, in seconds). */
export const CONNECT_TIMEOUT_SECONDS = 5

/**
 * How long a pool connection waits before it reconnects after a failure, in seconds: 25 ms
 * doubling to at most 1 s (with jitter), counted across the pool and reset by a connection that
 * succeeds. A request waits for its connection's next attempt, so this bounds how long requests
 * wait while the database restarts before the attempt fails them with a 503: postgres.js's own
 * default grows to 20 s (3^n / 100), and with it every request while PostgreSQL was down (found
 * by test/faults.test.ts). One attempt per waiting connection per delay is no storm either.
 */
export function reconnectBackoffSeconds(retries: number): number {
  return Math.min(0.025 * 2 ** retries, 1) * (0.5 + Math.random() / 2)
}

/** Options postgres.js reads (src/index.js) that its type definitions do not list. */
const unlistedOptions = { max_pipeline: 1 }

export function createSql(url: string, options: SqlOptions = {}) {
  const deadlineMs = statementDeadlineMs(options.statementTimeoutMs, options.deadlineMarginMs)
  return postgres(url, {
    max: options.max ?? 10,
    prepare: options.prepare ?? true,
    // At most one statement waiting on a connection behind the one it runs (max_pipeline 1;
    // postgres.js refuses transactions with 0). By default postgres.js pipelines up to 100
    // waiting statements onto busy connections, each behind whatever that connection runs, so
    // under load a request's wait depended on the queue it landed in. With the rest waiting in
    // one queue for the whole pool, the first connection to free up takes the oldest request.
    // At 32 concurrent requests on 4 connections: p99 58 → 33 ms for a todo, 220 → 114 ms for a
    // page (docs/performance.md).
    ...unlistedOptions,
    // A database that does not answer a connection attempt fails the request in 5 s (503), not
    // postgres.js's default 30 s: a request holds its caller for at most this long while the
    // database restarts or is unreachable (a refused connection fails at once).
    connect_timeout: CONNECT_TIMEOUT_SECONDS,
    backoff: reconnectBackoffSeconds,
    // A database that goes silent (a partition, a failover whose old host vanished): keepalive on
    // every connection, and every statement's deadline (see silentDatabaseOptions).
    ...silentDatabaseOptions(deadlineMs),
    // Timestamps leave the database as UTC ISO 8601 whatever the server's zone is.
    connection: {
      TimeZone: 'UTC',
      application_name: 'todo-sharing-api',
      ...(options.statementTimeoutMs ? { statement_timeout: options.statementTimeoutMs } : {}),
      // One request, one process: a parallel plan would give one statement up to three cores
      // (a count over every todo planned two workers), so the fair queue's "two of yours at once"
      // (functions/lib/admission.ts) would be six processes on the machine's two cores, and
      // another member's read would wait for CPU behind them. Lists are index walks that gain
      // nothing from workers; what did gain was the very scans fair share must bound. A string:
      // postgres.js leaves out startup parameters whose value is falsy, 0 included.
      max_parallel_workers_per_gather: '0',
    },
    onnotice: () => {},
    ...(options.onQuery ? { debug: (_connection: number, statement: string) => options.onQuery!(statement) } : {}),
  })
}

/**
 * `sql.begin` on a connection of its own. postgres.js 3.4.9 hands a transaction's BEGIN to a busy
 * connection when every connection of the pool is busy (pipelining it behind the statement that
 * connection runs) and then, because that fills the connection's pipeline (max_pipeline 1 above),
 * skips reserving the connection for the transaction: the BEGIN fails with UNSAFE_TRANSACTION and
 * leaves that connection inside an open transaction, back in the pool, where unrelated requests
 * then run (and their writes are never committed, or fail as "current transaction is aborted")
 * (porsager/postgres#823, #1189). Reserving an idle connection first (waiting for one) never
 * pipelines: BEGIN, the work and COMMIT run on it alone, and it returns to the pool outside any
 * transaction. Used for every transaction of the API, its workers and the operator CLI.
 */
export async function transaction<T>(sql: postgres.Sql, fn: (tx: postgres.ReservedSql) => Promise<T>): Promise<T> {
  const reserved = await sql.reserve()
  try {
    await reserved`begin`
    let result: T
    try {
      result = await fn(reserved)
    } catch (err) {
      await reserved`rollback`.catch(() => {})
      throw err
    }
    await reserved`commit`
    return result
  } finally {
    reserved.release()
  }
}

/** How many connections a postgres.js client opens at most (its `max`). */
export function poolSizeOf(sql: postgres.Sql): number {
  const max = (sql as { options?: { max?: unknown } }).options?.max
  return typeof max === 'number' && max > 0 ? max : 10
}

/**
 * What postgres.js needs to notice a database that went silent, for createSql and the Realtime
 * gateway's own clients: TCP keepalive, and, when statements have a deadline (statementDeadlineMs),
 * sockets that watch it (WatchedSocket, through postgres.js's documented `socket` option).
 */
export function silentDatabaseOptions(deadlineMs: number | null): { keep_alive: number; socket?: (options: SocketOptions) => Socket } {
  if (!deadlineMs) return { keep_alive: KEEP_ALIVE_SECONDS }
  let next = 0
  return {
    keep_alive: KEEP_ALIVE_SECONDS,
    socket(options) {
      const socket = new WatchedSocket(deadlineMs)
      if (options.path) {
        socket.connect(options.path)
      } else {
        // As postgres.js itself does: the hosts of a multi-host URL in turn.
        const i = next++ % options.host.length
        const host = options.host[i]!
        const port = options.port[i] ?? options.port[0]!
        // postgres.js names host and port in its errors, and the host for TLS (its servername).
        Object.assign(socket, { host, port })
        socket.connect(port, host)
      }
      return socket
    },
  }
}

/** The parts of postgres.js's parsed options that a socket factory reads. */
interface SocketOptions {
  host: string[]
  port: number[]
  path?: string | false
}

// PostgreSQL's frontend/backend protocol ("Message Formats"): the codes of the untyped first
// message a client sends, and the type bytes of the messages the watch counts. Everything but
// that first message is a type byte and a length (which counts itself, not the type byte).
const SSL_REQUEST_CODE = 80877103
const GSSENC_REQUEST_CODE = 80877104
const CANCEL_REQUEST_CODE = 80877102
const READY_FOR_QUERY = 0x5a // Z
const NOTIFICATION = 0x41 // A
const NOTICE = 0x4e // N
const PARAMETER_STATUS = 0x53 // S (from the server)
const SYNC = 0x53 // S
const SIMPLE_QUERY = 0x51 // Q
const PARSE = 0x50 // P
const FUNCTION_CALL = 0x46 // F
const FLUSH = 0x48 // H
const TERMINATE = 0x58 // X

/**
 * A connection's socket that destroys itself when PostgreSQL leaves a statement unanswered past
 * its deadline, failing the statement (and any pipelined behind it) with DATABASE_SILENT.
 * postgres.js then takes the connection out of the pool and opens a new one for the next
 * statement: the silent one is never reused.
 *
 * Why the socket: postgres.js has no per-statement deadline, and `query.cancel()` sends its cancel
 * over a new connection, which a silent database leaves unanswered too; PostgreSQL's own
 * statement_timeout cannot reach a client it cannot talk to. Closing the socket is the only way
 * out, and a socket of our own (postgres.js's `socket` option) is how we hold it.
 *
 * How it knows a statement is owed: it reads the message framing both ways, nothing else.
 * Every Sync, simple Query or FunctionCall the client sends is answered by exactly one
 * ReadyForQuery, so their difference is the statements still owed; a Flush is owed some answer;
 * a Terminate or a CancelRequest is owed the server's close. While something is owed, a timer
 * runs: from the moment it is sent, and afresh at each ReadyForQuery that leaves more owed (the
 * next pipelined statement's turn starts then). It stops when nothing is owed, so an idle
 * connection, a transaction waiting for the app between its statements and a LISTEN waiting for
 * notifications never expire. A connection's startup (authentication, until its first
 * ReadyForQuery) is connect_timeout's to bound, not this. A connection that asks for TLS (or GSS
 * encryption) is not watched past that request: what follows is encrypted, and postgres.js
 * wraps it in a TLS socket of its own; such connections rely on keepalive (docs/reliability.md).
 *
 * A statement may rightly outlast the deadline when its session raised its own statement timeout
 * (`set local statement_timeout = 0` before a bulk load or a long migration step). The deadline
 * cannot follow the setting's value (SET, SET LOCAL, set_config, RESET, a savepoint rolled back:
 * that needs PostgreSQL's parser, and PostgreSQL does not report the setting), so it gives up
 * instead: a connection that sends a statement naming `statement_timeout` (in a Parse or a
 * simple Query, any case) is not watched any more, for the rest of its life. It then relies on
 * keepalive, which does reach a long statement on a vanished host: once the statement was
 * acknowledged the connection is idle at the TCP level, so probes go out after KEEP_ALIVE_SECONDS
 * and the peer's kernel answers them while PostgreSQL works (a statement still unacknowledged
 * when the host vanished waits for TCP's retransmissions instead, ~15 minutes). Only the
 * statement texts our code writes are read for it, never a parameter: a client's input never
 * reaches the search. Why not the other ways out (issue 29, docs/reliability.md): a deadline
 * only on pools that never raise the timeout needs a check that can tell which pool a statement
 * runs on, which no static check can; keepalive alone leaves a request sent into a black hole
 * waiting for those retransmissions. A function of our schema cannot raise it for the statements
 * after it: test/static-checks.test.ts keeps `statement_timeout` out of supabase/schemas.
 */
export class WatchedSocket extends Socket {
  /** ReadyForQuery messages owed: one per Sync, Query or FunctionCall sent. */
  private owed = 0
  /** The startup's ReadyForQuery is still to come. */
  private starting = true
  /** A Flush was sent and nothing has come back since. */
  private flushed = false
  /** A Terminate or a CancelRequest was sent: the server owes its close. */
  private closing = false
  private watching = true
  private timer: ReturnType<typeof setTimeout> | null = null
  /** The destruction decided by an expired timer, one turn of the event loop later. */
  private doom: ReturnType<typeof setImmediate> | null = null
  /** Why this socket was destroyed, once it was destroyed as silent: reported at its close. */
  private silence: Error | null = null
  private readonly out = new Framer(true)
  private readonly in = new Framer(false)
  /** Finds `statement_timeout` in the statement texts sent. */
  private readonly raise = new Needle(STATEMENT_TIMEOUT)

  constructor(private readonly deadlineMs: number) {
    super()
    this.on('data', (chunk: Buffer) => this.received(chunk))
    // Registered before postgres.js's own listeners, so this runs first (see expired()).
    this.on('close', () => this.onClose())
  }

  // What is sent, seen where the stream hands it to the socket: every write and end(chunk) passes
  // here once, in order. (Not by overriding write(): net.Socket.connect() resets an own write.)
  override _write(chunk: unknown, encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.sent(chunk)
    super._write(chunk, encoding, callback)
  }

  override _writev(chunks: { chunk: unknown; encoding: BufferEncoding }[], callback: (error?: Error | null) => void): void {
    for (const { chunk } of chunks) this.sent(chunk)
    super._writev!(chunks, callback)
  }

  private sent(chunk: unknown) {
    if (!this.watching || !(chunk instanceof Uint8Array)) return
    const before = this.expecting()
    let encrypted = false
    let raised = false
    this.out.feed(
      chunk,
      (type, code) => {
        if (type === null) {
          if (code === SSL_REQUEST_CODE || code === GSSENC_REQUEST_CODE) encrypted = true
          else if (code === CANCEL_REQUEST_CODE) this.closing = true
          // Anything else untyped is the StartupMessage (whose statement_timeout is the pool's own).
          return false
        }
        if (type === SYNC || type === SIMPLE_QUERY || type === FUNCTION_CALL) this.owed++
        else if (type === FLUSH) this.flushed = true
        else if (type === TERMINATE) this.closing = true
        // A statement's text is read for the setting that would let it outlast the deadline.
        if (type !== PARSE && type !== SIMPLE_QUERY) return false
        this.raise.reset()
        return true
      },
      (text) => {
        if (!raised && this.raise.find(text)) raised = true
      },
    )
    if (encrypted || raised) return this.unwatch()
    if (!before && this.expecting()) this.arm()
  }

  private received(chunk: Buffer) {
    if (!this.watching) return
    let turns = false
    this.in.feed(chunk, (type) => {
      // What the server may send unasked (a notification, a notice, a parameter's new value) is
      // no answer to a Flush.
      if (type !== NOTIFICATION && type !== NOTICE && type !== PARAMETER_STATUS) this.flushed = false
      if (type !== READY_FOR_QUERY) return
      if (this.starting) this.starting = false
      else if (this.owed > 0) {
        this.owed--
        turns = true
      }
    })
    if (!this.expecting()) this.disarm()
    else if (turns || (!this.timer && !this.doom)) this.arm()
  }

  /** Whether the server owes this connection an answer that the deadline bounds. */
  private expecting(): boolean {
    return !this.starting && (this.owed > 0 || this.flushed || this.closing)
  }

  private arm() {
    this.disarm()
    this.timer = setTimeout(() => this.expired(), this.deadlineMs)
    this.timer.unref?.()
  }

  private disarm() {
    if (this.timer) clearTimeout(this.timer)
    if (this.doom) clearImmediate(this.doom)
    this.timer = this.doom = null
  }

  /**
   * The deadline passed. Destroyed after the event loop's next poll for I/O, not at once: when
   * the process itself stalled past the deadline (timers run before I/O once it wakes), an
   * answer already waiting in the socket is read first and saves the connection.
   *
   * Destroyed without an error, which is reported at the close instead (onClose()): postgres.js
   * fails a connection's statements at its socket's 'error' but takes the connection out of the
   * pool only at its 'close', a turn of the event loop later, and a statement handed to it in
   * between (by a caller reacting to the failure at once) was never answered nor failed: it hung.
   * Reported just before postgres.js hears the close, both happen together.
   */
  private expired() {
    this.timer = null
    this.doom = setImmediate(() => {
      this.doom = null
      this.silence = Object.assign(
        new Error(`PostgreSQL did not answer within ${this.deadlineMs} ms (the statement timeout plus its margin): the connection was destroyed`),
        { code: DATABASE_SILENT },
      )
      this.destroy()
    })
  }

  private unwatch() {
    this.watching = false
    this.disarm()
  }

  private onClose() {
    this.watching = false
    this.disarm()
    if (this.silence && this.listenerCount('error') > 0) this.emit('error', this.silence)
  }
}

/**
 * Cuts a PostgreSQL byte stream into messages, calling `message(type, code)` for each as soon
 * as its header is complete: `type` is the message's type byte, or null for the untyped first
 * message a client sends (its protocol code in `code`). When `message` returns true, the
 * message's body is handed to `body` as it passes, in pieces; other bodies are skipped. Only
 * headers are kept between chunks.
 */
class Framer {
  /** Bytes of the current message still to pass. */
  private skip = 0
  /** Whether the current message's body goes to `body`. */
  private reading = false
  private header: number[] = []

  constructor(private untypedFirst: boolean) {}

  feed(chunk: Uint8Array, message: (type: number | null, code: number) => boolean | void, body?: (bytes: Uint8Array) => void) {
    let i = 0
    while (i < chunk.length) {
      if (this.skip > 0) {
        const n = Math.min(this.skip, chunk.length - i)
        if (this.reading) body?.(chunk.subarray(i, i + n))
        this.skip -= n
        i += n
        continue
      }
      const size = this.untypedFirst ? 8 : 5
      while (this.header.length < size && i < chunk.length) this.header.push(chunk[i++]!)
      if (this.header.length < size) return
      const h = this.header
      this.header = []
      if (this.untypedFirst) {
        this.untypedFirst = false
        const length = ((h[0]! << 24) | (h[1]! << 16) | (h[2]! << 8) | h[3]!) >>> 0
        this.reading = message(null, ((h[4]! << 24) | (h[5]! << 16) | (h[6]! << 8) | h[7]!) >>> 0) === true
        this.skip = Math.max(0, length - 8)
      } else {
        const length = ((h[1]! << 24) | (h[2]! << 16) | (h[3]! << 8) | h[4]!) >>> 0
        this.reading = message(h[0]!, 0) === true
        this.skip = Math.max(0, length - 4)
      }
    }
  }
}

/** The setting a session may raise to let its statements outlast the deadline (see WatchedSocket). */
const STATEMENT_TIMEOUT = new TextEncoder().encode('statement_timeout')

/**
 * Finds a lower-case ASCII word in a byte stream that arrives in pieces, in any letter case:
 * Knuth-Morris-Pratt, so the search costs one step per byte and keeps one number between pieces.
 */
export class Needle {
  private matched = 0
  /** For each prefix of the word: the length of its longest proper prefix that is also its suffix. */
  private readonly fallback: number[]

  constructor(private readonly word: Uint8Array) {
    this.fallback = new Array<number>(word.length).fill(0)
    for (let i = 1, k = 0; i < word.length; i++) {
      while (k > 0 && word[i] !== word[k]) k = this.fallback[k - 1]!
      if (word[i] === word[k]) k++
      this.fallback[i] = k
    }
  }

  /** Forgets what was read: the next piece starts a new text. */
  reset() {
    this.matched = 0
  }

  /** Whether the word ends in `bytes`, read after the pieces before it. */
  find(bytes: Uint8Array): boolean {
    for (const raw of bytes) {
      const b = raw >= 0x41 && raw <= 0x5a ? raw | 0x20 : raw
      while (this.matched > 0 && b !== this.word[this.matched]) this.matched = this.fallback[this.matched - 1]!
      if (b === this.word[this.matched]) this.matched++
      if (this.matched === this.word.length) {
        this.matched = 0
        return true
      }
    }
    return false
  }
}
