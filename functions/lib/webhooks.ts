// The webhook worker, the same on both platforms: claims due deliveries from the outbox
// (app.webhook_deliveries, written by the todo trigger), signs them the Standard Webhooks way,
// sends them through a platform's sender, and records each attempt in a statement of its own.
//
// At least once, never twice at once: app.take_webhook_deliveries leases the claimed rows (moves
// their next_attempt_at past the send, in one statement that commits at once; `skip locked`
// against a concurrent claim), so another worker skips them while they are sent; a worker killed
// mid-delivery records nothing, and the delivery is due again with the same webhook-id when its
// lease ends. No transaction stays open during a send: a slow receiver holds no row lock that
// another member's delete or switch-off would wait on.
//
// Fair (issue 25, docs/security.md "Webhook fairness"): the claim takes subscriptions in turn,
// caps what is in flight per member (a quarter of the drain's slots) and per member and host, and
// keeps deliveries to receivers not known to answer to half the slots, across all workers; it
// skips a member's host whose circuit breaker is open (all in app.take_webhook_deliveries). The
// drain claims as slots free up, and a request not answered within SLOW_AFTER_MS leaves its slot
// to wait apart (the waiting room; past it, the oldest waiting request is cut short): so a
// receiver that hangs for its 15 s holds a slot for 2 s, however many accounts bring one.
//
// `npm start` runs it right after each todo its API creates and every second (local/start.ts,
// local/webhook-runner.ts, with the Node sender that pins vetted addresses); on Supabase, pg_cron + pg_net call POST /internal/webhooks every 5 seconds
// (supabase/functions/api, with the Deno sender). Runtime-neutral: Web Crypto and ipaddr.js only.
import ipaddr from 'ipaddr.js'
import type { Sql } from 'postgres'

/** What a sender is asked to POST. */
export interface OutgoingWebhook {
  url: string
  headers: Record<string, string>
  /** A webhook's JSON; bytes for an encrypted Web Push message (local/push-sender.ts sends through the same vetted client). */
  body: string | Uint8Array
  /** The whole exchange, connect to last header, must finish within this. */
  timeoutMs: number
  /** Aborted when the worker cuts the request short (its waiting room is full); the sender then gives up at once. */
  signal?: AbortSignal
}

/** What came back: a status, or no status and why (refused address, timeout, connection error). */
export interface WebhookResponse {
  status: number | null
  /** The Retry-After header of a 429 or 503, as sent. */
  retryAfter?: string | null
  error?: string
}

/** Sends one webhook; never throws (an exception is a failed attempt with its message). */
export type WebhookSender = (request: OutgoingWebhook) => Promise<WebhookResponse>

/** The Standard Webhooks retry schedule after the first attempt: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h. */
export const RETRY_SCHEDULE_MS = [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000]
/** A delivery still failing this long after its first attempt is given up (and its subscription disabled). */
export const GIVE_UP_AFTER_MS = 3 * 24 * 3_600_000
/** The timeout of one attempt. */
export const DELIVERY_TIMEOUT_MS = 15_000
/** The longest wait a Retry-After gets (the schedule's longest step); asking for more is not honoured. */
export const MAX_RETRY_AFTER_MS = 36_000_000
/**
 * Fairness (issue 25; docs/security.md, "Webhook fairness"). At most this many deliveries of one
 * member are in flight to one host (the URL's host, name and port: webhook_subscriptions.host),
 * across every worker: the database counts them (app.webhook_leases). Per member and host, not per
 * host: a receiving host many members share (hooks.slack.com) is not one member's to fill.
 */
export const HOST_CONCURRENCY = 8
/**
 * A request not answered within this long leaves its worker slot and waits apart (the waiting
 * room), so that a receiver that never answers holds a slot for this long, not for its 15 s
 * timeout: another member's delivery waits for no more than this, whoever hangs. Most receivers
 * answer well within it (Slack asks for 3 s).
 */
export const SLOW_AFTER_MS = 2_000
/**
 * The waiting room: requests slower than SLOW_AFTER_MS a drain keeps open besides its slots, as
 * many as this times its slots (npm start: 80 besides 20). Past it, the oldest waiting request is
 * cut short and recorded as no answer (it counts toward its breaker).
 */
export const WAITING_PER_SLOT = 4
/** A host that gave no answer (timeout, connection failure) to this many attempts in a row is opened: nothing goes to it for a cool-down. */
export const BREAKER_AFTER = 5
/** The first cool-down of an opened host; then one delivery is sent as a probe, and each probe that fails doubles it… */
export const BREAKER_COOLDOWN_MS = 30_000
/** …up to this. */
export const BREAKER_MAX_COOLDOWN_MS = 600_000
/** At most this much of a response body is read (and thrown away); the rest is not waited for. */
export const MAX_RESPONSE_BYTES = 64 * 1024
/** How long a response body may take to arrive (up to MAX_RESPONSE_BYTES) once the status is in. */
export const BODY_GRACE_MS = 1_000

export interface DrainOptions {
  /** Deliveries asked for in one claim. */
  batch?: number
  /**
   * With batch, the worker's slots: at most lanes × batch deliveries in flight at once (npm start:
   * 2 × 10), besides the waiting room's slow ones. One member may hold a quarter of them, and
   * receivers not known to answer half (app.take_webhook_deliveries), across every worker.
   */
  lanes?: number
  /** Retry delays after each failed attempt; the last repeats until giveUpAfterMs. Tests shorten it. */
  scheduleMs?: number[]
  giveUpAfterMs?: number
  timeoutMs?: number
  /** Stop claiming new deliveries after this long (an edge function has a wall-clock limit). */
  budgetMs?: number
  /** Fraction of each delay added or taken at random (0.1: ±10 %), so retries of a burst spread out. */
  jitter?: number
  /** Deliveries of one member in flight to one host, across every worker (HOST_CONCURRENCY). */
  hostCap?: number
  /** One member's deliveries in flight, across every worker; default a quarter of the slots. Tests lift or lower it. */
  memberCap?: number
  /** Deliveries to receivers not known to answer, in slots, across every worker; default half the slots. Tests lift it. */
  unprovenCap?: number
  /** A request unanswered this long leaves its slot for the waiting room (SLOW_AFTER_MS). */
  slowAfterMs?: number
  /** Requests the waiting room holds at most (WAITING_PER_SLOT × the slots); past it the oldest is cut short. */
  waitingSlots?: number
  /** Attempts in a row without an answer that open a host's breaker (BREAKER_AFTER). */
  breakerAfter?: number
  /** How long an opened host gets nothing (BREAKER_COOLDOWN_MS); each failed probe doubles it. */
  breakerCooldownMs?: number
  /** The longest cool-down (BREAKER_MAX_COOLDOWN_MS). */
  breakerMaxCooldownMs?: number
}

export interface DrainResult {
  delivered: number
  retrying: number
  failed: number
}

// ---------------------------------------------------------------------------------------------
// Addresses: only public unicast, unless WEBHOOK_ALLOW_PRIVATE=1
// ---------------------------------------------------------------------------------------------

/**
 * Whether an IP address is public unicast. IPv4-mapped IPv6 (::ffff:127.0.0.1) is judged as the
 * IPv4 address it is; NAT64, 6to4 and Teredo prefixes (which embed an IPv4 address) are not
 * 'unicast' in ipaddr.js and are refused, as are loopback, private, link-local (cloud metadata
 * 169.254.169.254), carrier-grade NAT, multicast, reserved and unspecified (0.0.0.0, ::).
 */
export function isPublicAddress(address: string): boolean {
  const bare = address.replace(/^\[|\]$/g, '').replace(/%.*$/, '')
  if (!ipaddr.isValid(bare)) return false
  const parsed = ipaddr.process(bare)
  // IPv4-compatible IPv6 (::/96, deprecated: ::127.0.0.1) embeds an IPv4 address too, but
  // ipaddr.js calls it unicast.
  if (parsed.kind() === 'ipv6' && parsed.match(ipaddr.parseCIDR('::/96'))) return false
  return parsed.range() === 'unicast'
}

/** The URL's host when it is an IP literal (the WHATWG parser has already turned 2130706433 or 0177.0.0.1 into dotted form). */
export function ipLiteralOf(url: URL): string | null {
  const host = url.hostname.replace(/^\[|\]$/g, '')
  return ipaddr.isValid(host) && (host.includes(':') || ipaddr.IPv4.isValidFourPartDecimal(host)) ? host : null
}

/**
 * Why a subscription URL is not acceptable, or null. Absolute https only; plain http and
 * private IP literals only with allowPrivate. No credentials in the URL (they would be sent
 * as a header to whoever the host is). Host names are checked when delivering, where they resolve.
 */
export function subscriptionUrlProblem(value: string, allowPrivate: boolean): string | null {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    return 'url must be an absolute https URL.'
  }
  if (url.protocol !== 'https:' && !(allowPrivate && url.protocol === 'http:')) return 'url must be an absolute https URL.'
  if (url.username || url.password) return 'url must not contain a user name or password.'
  if (value.length > 2048) return 'url may be at most 2048 characters.'
  const literal = ipLiteralOf(url)
  if (literal && !allowPrivate && !isPublicAddress(literal)) return `url must point to a public address; ${literal} is not one.`
  // Names that never resolve to a public address: refused now, not after three days of retries.
  if (!allowPrivate && /(^|\.)(localhost|local|internal|localdomain|home\.arpa)\.?$/i.test(url.hostname)) {
    return `url must point to a public address; ${url.hostname} is not one.`
  }
  return null
}

/**
 * What both senders check before any connection: a URL that parses, with the scheme a
 * subscription may have now (https; http only with allowPrivate, so http subscriptions made
 * while the flag was on stop going out in plain text once it is off), and an IP literal that is
 * public. Host names are vetted where they resolve (the platform's sender).
 */
export function webhookTarget(value: string, allowPrivate: boolean): { url: URL } | { error: string } {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    return { error: 'the URL is not valid' }
  }
  const literal = ipLiteralOf(url)
  if (literal && !allowPrivate && !isPublicAddress(literal)) return { error: `refused: ${literal} is not a public address` }
  if (url.protocol !== 'https:' && !(allowPrivate && url.protocol === 'http:')) return { error: `refused: ${url.protocol} is not https` }
  return { url }
}

/** The URL as stored and sent: the parsed form (lower-case scheme and host, no stray whitespace). */
export function normalizedSubscriptionUrl(value: string): string {
  return new URL(value).href
}

// ---------------------------------------------------------------------------------------------
// Signing: Standard Webhooks (https://www.standardwebhooks.com), verified by the npm package
// ---------------------------------------------------------------------------------------------

function base64(bytes: Uint8Array): string {
  let binary = ''
  for (const b of bytes) binary += String.fromCharCode(b)
  return btoa(binary)
}

/** `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">` with the whsec_ secret's key bytes. */
export async function signWebhook(secret: string, id: string, timestampSeconds: number, body: string): Promise<string> {
  const keyBytes = Uint8Array.from(atob(secret.replace(/^whsec_/, '')), (c) => c.charCodeAt(0))
  const key = await crypto.subtle.importKey('raw', keyBytes, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign'])
  const mac = await crypto.subtle.sign('HMAC', key, new TextEncoder().encode(`${id}.${timestampSeconds}.${body}`))
  return `v1,${base64(new Uint8Array(mac))}`
}

/**
 * The webhook-signature header for `secrets`: the signing secret, or while a rotation's 24 hours
 * last the new and the previous one, space-separated (app.take_webhook_deliveries). One `v1,…`
 * signature per secret, space-separated, the new one first: Standard Webhooks verifiers accept a
 * delivery when any of them matches their secret.
 */
export async function webhookSignatures(secrets: string, id: string, timestampSeconds: number, body: string): Promise<string> {
  const each = secrets.split(' ').filter((secret) => secret !== '')
  return (await Promise.all(each.map((secret) => signWebhook(secret, id, timestampSeconds, body)))).join(' ')
}

// ---------------------------------------------------------------------------------------------
// Retries
// ---------------------------------------------------------------------------------------------

/** Seconds a Retry-After header asks for (delta-seconds or an HTTP date), or null. */
export function retryAfterMs(header: string | null | undefined, now = Date.now()): number | null {
  if (!header) return null
  const trimmed = header.trim()
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000
  const at = Date.parse(trimmed)
  return Number.isNaN(at) ? null : Math.max(0, at - now)
}

/**
 * When to try again after the `attempt`-th failed attempt (1-based), or null to give up: the
 * schedule's delay with jitter, or what Retry-After asks when that is later (capped at
 * MAX_RETRY_AFTER_MS, 10 h); null once the next try would fall after giveUpAfterMs since the first.
 */
export function nextAttemptAt(
  attempt: number,
  firstAttemptAt: number,
  now: number,
  response: WebhookResponse,
  options: Required<Pick<DrainOptions, 'scheduleMs' | 'giveUpAfterMs' | 'jitter'>>,
): Date | null {
  const schedule = options.scheduleMs
  const step = schedule[Math.min(attempt - 1, schedule.length - 1)] ?? 0
  let delay = step * (1 + (Math.random() * 2 - 1) * options.jitter)
  if (response.status === 429 || response.status === 503) {
    const asked = retryAfterMs(response.retryAfter, now)
    if (asked !== null) delay = Math.max(delay, Math.min(asked, MAX_RETRY_AFTER_MS))
  }
  const at = now + delay
  return at - firstAttemptAt > options.giveUpAfterMs ? null : new Date(at)
}

// ---------------------------------------------------------------------------------------------
// The drain
// ---------------------------------------------------------------------------------------------

interface Claimed {
  subscription_id: string
  todo_id: string
  webhook_id: string
  url: string
  /** The signing secret; while a rotation's 24 hours last, then a space and the previous one. */
  secret: string
  body: string
  attempts: number
  first_attempt_at: Date | null
}

/**
 * A drain under way. Deliveries are claimed as worker slots free up (lanes × batch of them), not
 * a batch at a time, and a request unanswered after slowAfterMs leaves its slot for the waiting
 * room: a delivery that hangs for its 15 s holds a slot for 2 s and no other, and the next claim
 * does not wait for it.
 */
export interface Drain {
  /** The counts, once nothing is in flight and the last claim found nothing more (or the budget is spent, or stop() was called). */
  done: Promise<DrainResult>
  /** Claim again now (a todo was just created); false once the drain has finished (start another). */
  poke(): boolean
  /** Claim nothing more; `done` resolves when the sends under way are recorded. */
  stop(): void
}

/** Sends every due delivery (until none is due or the budget is spent) and records the outcomes. */
export function drainWebhooks(sql: Sql, send: WebhookSender, options: DrainOptions = {}): Promise<DrainResult> {
  return startDrain(sql, send, options).done
}

/** Starts a drain (drainWebhooks, with a handle for the local runner: poke and stop). */
export function startDrain(sql: Sql, send: WebhookSender, options: DrainOptions = {}): Drain {
  const batch = options.batch ?? 10
  const slots = batch * (options.lanes ?? 2)
  const timing = {
    scheduleMs: options.scheduleMs ?? RETRY_SCHEDULE_MS,
    giveUpAfterMs: options.giveUpAfterMs ?? GIVE_UP_AFTER_MS,
    jitter: options.jitter ?? 0.1,
  }
  const timeoutMs = options.timeoutMs ?? DELIVERY_TIMEOUT_MS
  const hostCap = options.hostCap ?? HOST_CONCURRENCY
  const slowAfterMs = options.slowAfterMs ?? SLOW_AFTER_MS
  const memberCap = options.memberCap ?? null
  const unprovenCap = options.unprovenCap ?? null
  const waitingSlots = options.waitingSlots ?? WAITING_PER_SLOT * slots
  const breaker = {
    after: options.breakerAfter ?? BREAKER_AFTER,
    cooldownSeconds: (options.breakerCooldownMs ?? BREAKER_COOLDOWN_MS) / 1000,
    maxCooldownSeconds: (options.breakerMaxCooldownMs ?? BREAKER_MAX_COOLDOWN_MS) / 1000,
  }
  const deadline = Date.now() + (options.budgetMs ?? Number.POSITIVE_INFINITY)
  const result: DrainResult = { delivered: 0, retrying: 0, failed: 0 }

  // A claim is a lease, not a lock held while sending (app.take_webhook_deliveries): it must
  // outlast the longest send (timeout plus the response's grace) with room to record it. The
  // lease is also what the caps count a delivery in flight by.
  const leaseSeconds = Math.ceil((timeoutMs + 30_000) / 1000)

  // Requests under way: `active` of them in a slot; the slow ones in the waiting room, oldest
  // first. A request leaves its slot when slowAfterMs pass without an answer (so the next claim
  // can use the slot), and when the room is full then, the oldest waiting one is cut short.
  let active = 0
  let inFlight = 0
  const waiting: { cut: () => void }[] = []

  async function deliver(row: Claimed): Promise<void> {
    const timestamp = Math.floor(Date.now() / 1000)
    const started = Date.now()
    const abort = new AbortController()
    let cutShort!: (response: WebhookResponse) => void
    const cut = new Promise<WebhookResponse>((resolve) => (cutShort = resolve))
    const place = {
      cut() {
        abort.abort()
        cutShort({
          status: null,
          error: `cut short after ${Date.now() - started} ms: the worker had ${waitingSlots} requests slower than ${slowAfterMs} ms waiting`,
        })
      },
    }
    let slow = false
    const slowTimer = setTimeout(() => {
      slow = true
      active--
      waiting.push(place)
      if (waiting.length > waitingSlots) waiting.shift()!.cut()
      wanted = true
      void pump()
    }, slowAfterMs)
    let response: WebhookResponse
    try {
      const sending = send({
        url: row.url,
        body: row.body,
        timeoutMs,
        signal: abort.signal,
        headers: {
          'content-type': 'application/json',
          'user-agent': 'todo-sharing-webhooks/1',
          'webhook-id': row.webhook_id,
          'webhook-timestamp': String(timestamp),
          'webhook-signature': await webhookSignatures(row.secret, row.webhook_id, timestamp, row.body),
        },
      })
      // A sender that does not heed the signal is not waited for once the request is cut short.
      response = await Promise.race([sending, cut])
    } catch (err) {
      response = { status: null, error: (err as Error).message }
    } finally {
      clearTimeout(slowTimer)
      if (!slow) active--
      else {
        const at = waiting.indexOf(place)
        if (at >= 0) waiting.splice(at, 1)
      }
    }
    const now = Date.now()
    const ok = response.status !== null && response.status >= 200 && response.status <= 299
    let retryAt: Date | null = null
    let disable: string | null = null
    if (!ok) {
      if (response.status === 410) disable = 'the receiver answered 410 Gone'
      else {
        retryAt = nextAttemptAt(row.attempts + 1, row.first_attempt_at?.getTime() ?? now, now, response, timing)
        if (!retryAt) disable = 'deliveries failed for about three days'
      }
    }
    const error = ok ? null : (response.error ?? `the receiver answered ${response.status}`)
    await sql`
      select app.record_webhook_attempt(${row.subscription_id}::uuid, ${row.todo_id}::uuid, ${response.status}::integer, ${error}::text,
        ${retryAt}::timestamptz, ${disable}::text, ${breaker.after}::integer,
        make_interval(secs => ${breaker.cooldownSeconds}), make_interval(secs => ${breaker.maxCooldownSeconds}),
        make_interval(secs => ${timing.giveUpAfterMs / 1000}))`
    if (ok) result.delivered++
    else if (retryAt) result.retrying++
    else result.failed++
  }

  let claiming = false
  // Whether a claim may find something: at the start, after a claim that was filled, after a
  // send ended or left its slot (a slot and perhaps a cap freed), and when poked.
  let wanted = true
  let stopped = false
  let finished = false
  let failure: unknown = null
  let settle!: { resolve: (r: DrainResult) => void; reject: (e: unknown) => void }
  const done = new Promise<DrainResult>((resolve, reject) => (settle = { resolve, reject }))

  function finishIfIdle() {
    if (finished || claiming || inFlight > 0) return
    finished = true
    if (failure === null) settle.resolve(result)
    else settle.reject(failure)
  }

  async function pump(): Promise<void> {
    if (claiming || finished) return
    claiming = true
    try {
      while (wanted && !stopped && failure === null && active < slots && Date.now() < deadline) {
        wanted = false
        const ask = Math.min(batch, slots - active)
        // The claim commits at once; sends and their records happen outside any transaction, so a
        // slow receiver holds no row lock that another member's delete would wait on.
        const rows = await sql<Claimed[]>`
          select * from app.take_webhook_deliveries(${ask}, make_interval(secs => ${leaseSeconds}), ${slots}::integer,
            make_interval(secs => ${slowAfterMs / 1000}), ${hostCap}::integer, ${memberCap}::integer, ${unprovenCap}::integer)`
        for (const row of rows) {
          inFlight++
          active++
          deliver(row)
            .catch((err) => {
              failure ??= err
            })
            .finally(() => {
              inFlight--
              wanted = true
              void pump()
            })
        }
        if (rows.length === ask) wanted = true
      }
    } catch (err) {
      failure ??= err
    } finally {
      claiming = false
    }
    finishIfIdle()
  }

  void pump()
  return {
    done,
    poke() {
      if (finished) return false
      wanted = true
      void pump()
      return true
    },
    stop() {
      stopped = true
      finishIfIdle()
    },
  }
}
