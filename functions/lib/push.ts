// The push worker, the same on both platforms: fans queued notifications out into the outbox
// (app.push_fanouts, written with each notification by app.notify, into app.push_deliveries, one
// per device and browser: app.fan_out_pushes), claims due deliveries, sends each to APNs or a
// Web Push service through the platform's transport, and records the outcome in a statement of
// its own. Modelled on the webhook worker (functions/lib/webhooks.ts): leases, not locks held
// while sending; at least once (a worker killed mid-send leaves its rows due again when the
// lease ends); retries with backoff for 429, 5xx and no answer, PUSH_MAX_ATTEMPTS tries at most.
//
// Leases are fenced (issue 28): a claim gives each row a new lease id, and a worker records an
// outcome only while the row still carries its lease id (app.record_push_attempt), so a worker
// whose lease ran out and was claimed by another never marks it (a stale "retry" made the row due
// again under the new holder's send: a third push). And it sends only while its lease has a whole
// send timeout left, timed on its own monotonic clock from before the claim (the lease began in
// the database after that): a worker held up between claim and send (a paused process, a slow
// provider token) lets the lease go instead of sending beside the worker that took it over.
//
// APNs: an ES256 provider token signed with jose (kid = APNS_KEY_ID, iss = APNS_TEAM_ID), shared
// by every worker through app.apns_provider_tokens and renewed after 40 minutes (Apple wants it
// renewed within an hour and refuses renewals more often than every 20 minutes with 429
// TooManyProviderTokenUpdates). The transport speaks HTTP/2: node:http2 on Node
// (local/push-sender.ts), fetch on Deno (supabase/functions/api/push-sender.ts).
// Web Push: the transport encrypts (RFC 8291, aes128gcm) and signs (VAPID) with `web-push`.
import { SignJWT, importPKCS8 } from 'jose'
import type { Sql } from 'postgres'

export const APNS_PRODUCTION_URL = 'https://api.push.apple.com'
export const APNS_SANDBOX_URL = 'https://api.sandbox.push.apple.com'

export interface ApnsConfig {
  keyId: string
  teamId: string
  /** The .p8 key (PKCS #8 PEM); literal `\n` sequences are read as line breaks. */
  privateKey: string
  /** The app's bundle id (apns-topic). */
  topic: string
  /** APNS_URL: one base URL for both environments (tests); unset: Apple's hosts per device. */
  url?: string
}

/** An HTTP/2 request to APNs. */
export interface ApnsRequest {
  url: string
  headers: Record<string, string>
  body: string
  timeoutMs: number
}

/** A Web Push message before encryption: the transport encrypts it for the subscription. */
export interface WebPushRequest {
  endpoint: string
  p256dh: string
  auth: string
  payload: string
  ttlSeconds: number
  timeoutMs: number
}

export interface PushResponse {
  status: number | null
  /** APNs' reason ({"reason": "Unregistered"}) or the push service's body, shortened. */
  reason?: string | null
  retryAfter?: string | null
  error?: string
}

/** How a platform sends: never throws (an exception is a failed attempt with its message). */
export interface PushTransport {
  apns(request: ApnsRequest): Promise<PushResponse>
  web(request: WebPushRequest): Promise<PushResponse>
  close?(): Promise<void>
}

/** Retry delays after each failed attempt: 5 s, 30 s, 2 min, 10 min, 30 min, 1 h (then hourly). */
export const PUSH_RETRY_SCHEDULE_MS = [5_000, 30_000, 120_000, 600_000, 1_800_000, 3_600_000]
/**
 * Tries of one push at most (the first and 7 retries: after about 5 s, 30 s, 2 min, 10 min,
 * 30 min, 1 h and 1 h, so about 2 h 43 min, longer only where Retry-After asks): a push service
 * that keeps answering 429 or 5xx is not called every hour for a day. The 8th failure is final.
 */
export const PUSH_MAX_ATTEMPTS = 8
/** A push still failing a day after its first attempt is given up: it would arrive stale. */
export const PUSH_GIVE_UP_AFTER_MS = 24 * 3_600_000
/** Apple's limit on a (non-VoIP) notification's payload: 4 KB; more is refused with 413 PayloadTooLarge. */
export const APNS_MAX_PAYLOAD_BYTES = 4096
/**
 * The most of a Web Push message's plaintext: push services take 4096 bytes of encrypted body
 * (RFC 8030 section 7.2), of which aes128gcm (RFC 8188) spends 86 on its header, 16 on the tag
 * and 1 on the padding delimiter.
 */
export const WEB_PUSH_MAX_PAYLOAD_BYTES = 4096 - 86 - 16 - 1
export const PUSH_TIMEOUT_MS = 10_000
/** Failed deliveries are pruned after this many days (app.prune_push_deliveries). */
export const PUSH_FAILED_KEPT_DAYS = 7
/** Provider tokens are renewed after this long (Apple: between 20 and 60 minutes). */
export const PROVIDER_TOKEN_REFRESH_MS = 40 * 60_000

export interface PushDrainOptions {
  batch?: number
  lanes?: number
  scheduleMs?: number[]
  giveUpAfterMs?: number
  timeoutMs?: number
  budgetMs?: number
  jitter?: number
  /** How long a claim is leased (default: the timeout plus 30 s, so a send never outlives it). Tests shorten it. */
  leaseMs?: number
  /** Tries of one push at most (PUSH_MAX_ATTEMPTS). */
  maxAttempts?: number
}

export interface PushDrainResult {
  delivered: number
  retrying: number
  failed: number
  unregistered: number
  dropped: number
  /**
   * Claimed but neither sent nor recorded: the lease had less than a send's timeout left when the
   * push was ready to go, or another worker had claimed the row meanwhile (the fence). The
   * delivery is the current holder's, or due again when the lease ends.
   */
  lapsed: number
}

interface Claimed {
  id: string
  device_token: string | null
  apns_environment: string | null
  endpoint: string | null
  p256dh: string | null
  auth: string | null
  notification_id: string
  type: string
  title: string | null
  body: string | null
  url: string | null
  todo_id: string | null
  hidden: boolean
  badge: number
  attempts: number
  first_attempt_at: Date | null
  /** This claim's lease id (app.take_push_deliveries): the fence app.record_push_attempt checks. */
  lease_id: string
}

/** APNS_* of the environment as an ApnsConfig, or null when APNs is not configured. */
export function apnsConfigFrom(env: (name: string) => string | undefined): ApnsConfig | null {
  const keyId = env('APNS_KEY_ID')
  const teamId = env('APNS_TEAM_ID')
  const privateKey = env('APNS_PRIVATE_KEY')
  const topic = env('APNS_TOPIC')
  if (!keyId || !teamId || !privateKey || !topic) return null
  return { keyId, teamId, privateKey, topic, url: env('APNS_URL') || undefined }
}

const encoder = new TextEncoder()
const ELLIPSIS = '…'

/** Bytes a string takes inside a JSON document (escapes counted), without its quotes. */
function jsonBytes(text: string): number {
  return encoder.encode(JSON.stringify(text)).length - 2
}

let graphemes: Intl.Segmenter | null = null

/**
 * The longest start of `text` that takes at most `bytes` in JSON with an ellipsis after it, cut
 * between user-perceived characters (grapheme clusters: never inside a surrogate pair, an emoji
 * sequence, or a letter and its combining marks), so it stays valid UTF-8 and reads whole.
 * Reads only as far as it keeps: a name of a million characters costs what fits.
 */
export function cutToBytes(text: string, bytes: number): string {
  if (jsonBytes(text) <= bytes) return text
  const room = bytes - jsonBytes(ELLIPSIS)
  if (room <= 0) return ''
  graphemes ??= new Intl.Segmenter(undefined, { granularity: 'grapheme' })
  let used = 0
  let end = 0
  for (const { segment, index } of graphemes.segment(text)) {
    const size = jsonBytes(segment)
    if (used + size > room) break
    used += size
    end = index + segment.length
  }
  return text.slice(0, end).trimEnd() + ELLIPSIS
}

/**
 * The payload `build` makes of a title and a body, within `limit` bytes: as it is when it fits;
 * else the title is cut first (a long actor or project name is what makes it large: the body is
 * an excerpt of at most 200 characters), then, if that is not enough, the body too, each on a
 * character boundary with an ellipsis.
 */
export function fitPayload(build: (title: string, body: string) => string, title: string, body: string, limit: number): string {
  const whole = build(title, body)
  if (encoder.encode(whole).length <= limit) return whole
  const room = limit - encoder.encode(build('', '')).length
  // The body keeps what the title leaves, and at least half of the room when both are long.
  const bodyRoom = Math.min(jsonBytes(body), Math.max(Math.floor(room / 2), room - jsonBytes(title)))
  const cutBody = cutToBytes(body, Math.max(0, bodyRoom))
  const cutTitle = cutToBytes(title, Math.max(0, room - jsonBytes(cutBody)))
  return build(cutTitle, cutBody)
}

/**
 * The APNs payload: the alert, the badge, and the notification's id and url as custom data,
 * within Apple's 4 KB (APNS_MAX_PAYLOAD_BYTES; the title and body cut to fit, fitPayload).
 */
export function apnsPayload(row: Pick<Claimed, 'notification_id' | 'type' | 'title' | 'body' | 'url' | 'todo_id' | 'badge'>): string {
  return fitPayload((title, body) => JSON.stringify({
    aps: { alert: { title, body }, badge: row.badge, sound: 'default', 'thread-id': row.type },
    notification_id: row.notification_id,
    url: row.url,
    type: row.type,
    todo_id: row.todo_id,
  }), row.title ?? '', row.body ?? '', APNS_MAX_PAYLOAD_BYTES)
}

/** The Web Push message (before encryption), within what a push service takes (WEB_PUSH_MAX_PAYLOAD_BYTES). */
export function webPushPayload(row: Pick<Claimed, 'notification_id' | 'type' | 'title' | 'body' | 'url' | 'todo_id' | 'badge'>): string {
  return fitPayload((title, body) => JSON.stringify({
    title: row.title === null ? null : title,
    body: row.body === null ? null : body,
    url: row.url, notification_id: row.notification_id, type: row.type, todo_id: row.todo_id, badge: row.badge,
  }), row.title ?? '', row.body ?? '', WEB_PUSH_MAX_PAYLOAD_BYTES)
}

/** The apns-id of a notification's push: its uuid (APNs wants a UUID; the same on every retry). */
export function apnsId(notificationId: string): string {
  const hex = notificationId.replace(/^notif_/, '')
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
}

/**
 * The provider token every worker uses. Cached in the process; the shared row of
 * app.apns_provider_tokens decides which token is current, so two workers (or two edge
 * invocations) never renew it twice within PROVIDER_TOKEN_REFRESH_MS.
 */
export class ProviderTokens {
  #cached: { token: string; issuedAt: number } | null = null
  #key: CryptoKey | null = null
  constructor(private readonly sql: Sql, private readonly config: ApnsConfig, private readonly refreshMs = PROVIDER_TOKEN_REFRESH_MS) {}

  async token(now = Date.now()): Promise<string> {
    if (this.#cached && now - this.#cached.issuedAt < this.refreshMs) return this.#cached.token
    const { keyId, teamId } = this.config
    const read = async () => {
      const [row] = await this.sql<{ token: string; issued_ms: number }[]>`
        select t.token, (extract(epoch from t.issued_at) * 1000)::float8 as issued_ms
        from app.apns_provider_tokens t where t.key_id = ${keyId} and t.team_id = ${teamId}`
      return row
    }
    let row = await read()
    if (!row || now - row.issued_ms >= this.refreshMs) {
      this.#key ??= await importPKCS8(this.config.privateKey.replace(/\\n/g, '\n'), 'ES256')
      const signed = await new SignJWT({})
        .setProtectedHeader({ alg: 'ES256', kid: keyId })
        .setIssuer(teamId)
        .setIssuedAt(Math.floor(now / 1000))
        .sign(this.#key)
      await this.sql`select app.store_apns_provider_token(${keyId}, ${teamId}, ${signed}, make_interval(secs => ${this.refreshMs / 1000}))`
      row = await read()
    }
    this.#cached = { token: row!.token, issuedAt: row!.issued_ms }
    return row!.token
  }

  /** Forget the process's copy (APNs said it expired): the next push reads the shared row again. */
  forget(): void {
    this.#cached = null
  }
}

function retryAfterMs(header: string | null | undefined, now: number): number | null {
  if (!header) return null
  if (/^\d+$/.test(header.trim())) return Number(header.trim()) * 1000
  const at = Date.parse(header)
  return Number.isNaN(at) ? null : Math.max(0, at - now)
}

type Outcome = 'delivered' | 'retry' | 'failed' | 'unregistered' | 'dropped'

/** What an answer means for the delivery. */
export function classify(kind: 'apns' | 'web', response: PushResponse): Outcome {
  const { status } = response
  if (status !== null && status >= 200 && status <= 299) return 'delivered'
  if (kind === 'apns') {
    if (status === 410) return 'unregistered'
    if (status === 400 && (response.reason === 'BadDeviceToken' || response.reason === 'DeviceTokenNotForTopic')) return 'unregistered'
    // 403 ExpiredProviderToken / InvalidProviderToken: our token, not the device; try again.
    if (status === 403 || status === 429 || status === null || status >= 500) return 'retry'
    return 'failed'
  }
  if (status === 404 || status === 410) return 'unregistered'
  if (status === 429 || status === null || status >= 500) return 'retry'
  return 'failed'
}

/** Sends every due push (until none is due or the budget is spent) and records the outcomes. */
export async function drainPush(
  sql: Sql,
  transport: PushTransport,
  apns: { config: ApnsConfig; tokens: ProviderTokens } | null,
  options: PushDrainOptions = {},
): Promise<PushDrainResult> {
  const batch = options.batch ?? 50
  const lanes = options.lanes ?? 2
  const schedule = options.scheduleMs ?? PUSH_RETRY_SCHEDULE_MS
  const giveUpAfterMs = options.giveUpAfterMs ?? PUSH_GIVE_UP_AFTER_MS
  const jitter = options.jitter ?? 0.1
  const timeoutMs = options.timeoutMs ?? PUSH_TIMEOUT_MS
  const deadline = Date.now() + (options.budgetMs ?? Number.POSITIVE_INFINITY)
  const maxAttempts = options.maxAttempts ?? PUSH_MAX_ATTEMPTS
  const result: PushDrainResult = { delivered: 0, retrying: 0, failed: 0, unregistered: 0, dropped: 0, lapsed: 0 }
  const leaseMs = options.leaseMs ?? timeoutMs + 30_000
  const leaseSeconds = leaseMs / 1000

  async function record(row: Claimed, outcome: Outcome, response: PushResponse): Promise<void> {
    let retryAt: Date | null = null
    let gaveUp = false
    if (outcome === 'retry' && row.attempts + 1 >= maxAttempts) {
      // The last of its tries (PUSH_MAX_ATTEMPTS): failed, whatever the service says next time.
      outcome = 'failed'
      gaveUp = true
    }
    if (outcome === 'retry') {
      const now = Date.now()
      const step = schedule[Math.min(row.attempts, schedule.length - 1)] ?? 0
      let delay = step * (1 + (Math.random() * 2 - 1) * jitter)
      const asked = retryAfterMs(response.retryAfter, now)
      if (asked !== null) delay = Math.max(delay, Math.min(asked, 3_600_000))
      const first = row.first_attempt_at?.getTime() ?? now
      if (now + delay - first > giveUpAfterMs) outcome = 'failed'
      else retryAt = new Date(now + delay)
    }
    const error = outcome === 'delivered' || outcome === 'dropped' ? null
      : (response.error ?? `answered ${response.status}${response.reason ? ` ${response.reason}` : ''}`) + (gaveUp ? ` (given up after ${maxAttempts} tries)` : '')
    // Fenced: recorded only while the row still carries this claim's lease id.
    const [recorded] = await sql<{ ok: boolean }[]>`
      select app.record_push_attempt(${row.id}::bigint, ${row.lease_id}::uuid, ${outcome}, ${response.status}::integer, ${error}::text, ${retryAt}::timestamptz) as ok`
    if (!recorded?.ok) result.lapsed++
    else result[outcome === 'retry' ? 'retrying' : outcome]++
  }

  async function deliver(row: Claimed, leaseEnds: number): Promise<void> {
    if (row.hidden) return record(row, 'dropped', { status: null })
    // Sends only while the lease has a whole send (its timeout) left: past that, another worker
    // may claim the row while this send is under way, and the device would get it twice.
    const leaseLeft = () => performance.now() + timeoutMs < leaseEnds
    let response: PushResponse
    let kind: 'apns' | 'web'
    try {
      if (row.device_token) {
        kind = 'apns'
        if (!apns) return record(row, 'failed', { status: null, error: 'APNs is not configured (APNS_KEY_ID, APNS_TEAM_ID, APNS_PRIVATE_KEY, APNS_TOPIC)' })
        const base = apns.config.url?.replace(/\/+$/, '') ?? (row.apns_environment === 'sandbox' ? APNS_SANDBOX_URL : APNS_PRODUCTION_URL)
        const providerToken = await apns.tokens.token()
        if (!leaseLeft()) {
          result.lapsed++
          return
        }
        response = await transport.apns({
          url: `${base}/3/device/${row.device_token}`,
          timeoutMs,
          body: apnsPayload(row),
          headers: {
            authorization: `bearer ${providerToken}`,
            'apns-push-type': 'alert',
            'apns-topic': apns.config.topic,
            'apns-id': apnsId(row.notification_id),
            'apns-priority': '10',
            'apns-expiration': String(Math.floor(Date.now() / 1000) + 86_400),
            'content-type': 'application/json',
          },
        })
        if (response.status === 403 && response.reason === 'ExpiredProviderToken') apns.tokens.forget()
      } else {
        kind = 'web'
        if (!leaseLeft()) {
          result.lapsed++
          return
        }
        response = await transport.web({
          endpoint: row.endpoint!,
          p256dh: row.p256dh!,
          auth: row.auth!,
          ttlSeconds: 86_400,
          timeoutMs,
          payload: webPushPayload(row),
        })
      }
    } catch (err) {
      kind = row.device_token ? 'apns' : 'web'
      response = { status: null, error: (err as Error).message || String(err) }
    }
    await record(row, classify(kind, response), response)
  }

  async function lane(): Promise<void> {
    while (Date.now() < deadline) {
      // Before the claim: the lease starts in the database after this instant, so it ends no
      // sooner than leaseEnds (a duration on this process's monotonic clock, no clock compared).
      const leaseEnds = performance.now() + leaseMs
      const rows = await sql<Claimed[]>`select * from app.take_push_deliveries(${batch}, make_interval(secs => ${leaseSeconds}))`
      await Promise.all(rows.map((row) => deliver(row, leaseEnds)))
      if (rows.length < batch) return
    }
  }

  // Failed deliveries are kept a week for the operator, then go: the outbox must not grow with
  // every push that could not be sent.
  await sql`select app.prune_push_deliveries(make_interval(days => ${PUSH_FAILED_KEPT_DAYS}), 1000)`
  // The fan-out queue first, a batch a transaction, until it is drained: each claim fans out a
  // batch too, but a lane ends at a claim of fewer than `batch` pushes, and queue rows that yield
  // none (their notification deleted, their devices gone) would end it with the queue still full.
  while (Date.now() < deadline) {
    const [row] = await sql<{ taken: number }[]>`select app.fan_out_pushes(${batch}) as taken`
    if (row!.taken < batch) break
  }
  await Promise.all(Array.from({ length: lanes }, () => lane()))
  return result
}
