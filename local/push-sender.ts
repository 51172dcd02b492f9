// The Node transport of the push worker (npm start, tests, the bench).
//
// APNs: HTTP/2 with node:http2 (Node's fetch speaks HTTP/1.1 only; APNs requires HTTP/2), one
// session per origin kept open and reused for every push, as Apple asks (opening a connection per
// push is treated as a denial-of-service attack). A session that errors or closes is replaced,
// and so is one that let a push go unanswered past its timeout (it may be half-open).
// Web Push: `web-push` encrypts the payload (RFC 8291, aes128gcm) and signs the VAPID header;
// the request goes out through the webhook sender, so a subscription endpoint gets the same SSRF
// vetting as a webhook URL (public addresses only unless WEBHOOK_ALLOW_PRIVATE=1).
import http2 from 'node:http2'
import webPush from 'web-push'
import type { ApnsRequest, PushResponse, PushTransport, WebPushRequest } from '../functions/lib/push.ts'
import { BODY_GRACE_MS } from '../functions/lib/webhooks.ts'
import { nodeWebhookSender } from './webhook-sender.ts'

/** The most of an APNs answer's body read: its {"reason": …} is a few dozen bytes. */
export const APNS_MAX_BODY_BYTES = 4096

export interface VapidKeys {
  publicKey: string
  privateKey: string
  subject: string
}

export interface NodePushOptions {
  vapid: VapidKeys
  /** WEBHOOK_ALLOW_PRIVATE=1: web push endpoints may be http and loopback/private (tests, local use). */
  allowPrivate: boolean
  /** Extra trusted certificate (PEM) for the APNs connection: tests' self-signed stand-in. */
  apnsCa?: string
}

export function nodePushTransport(options: NodePushOptions): PushTransport & { close(): Promise<void> } {
  const sessions = new Map<string, http2.ClientHttp2Session>()
  // Eight connections to a push service's origin at most, as before webhooks lifted the default.
  const webSender = nodeWebhookSender({ allowPrivate: options.allowPrivate, connectionsPerOrigin: 8 })

  function session(origin: string): http2.ClientHttp2Session {
    const open = sessions.get(origin)
    if (open && !open.closed && !open.destroyed) return open
    const created = http2.connect(origin, options.apnsCa ? { ca: options.apnsCa } : {})
    created.on('error', () => sessions.delete(origin))
    created.on('close', () => sessions.delete(origin))
    created.on('goaway', () => sessions.delete(origin))
    sessions.set(origin, created)
    return created
  }

  /** Takes a session out of use: no new streams on it, destroyed after `graceMs`. */
  function retire(origin: string, retired: http2.ClientHttp2Session, graceMs: number): void {
    if (sessions.get(origin) === retired) sessions.delete(origin)
    if (retired.closed || retired.destroyed) return
    retired.close()
    setTimeout(() => retired.destroy(), graceMs).unref()
  }

  function apns(request: ApnsRequest): Promise<PushResponse> {
    return new Promise<PushResponse>((resolve) => {
      const url = new URL(request.url)
      let settled = false
      let grace: ReturnType<typeof setTimeout> | undefined
      const done = (response: PushResponse) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        clearTimeout(grace)
        resolve(response)
      }
      const timer = setTimeout(() => {
        stream?.close(http2.constants.NGHTTP2_CANCEL)
        // No answer in time: the connection may be half-open (a NAT or load balancer that forgot
        // it answers nothing, and no error or close ever comes), and every later push on it would
        // time out too. The next push opens a fresh one; this one may finish what it carries
        // (each stream has its own timer) and is destroyed after another timeout.
        if (used) retire(url.origin, used, request.timeoutMs)
        done({ status: null, error: `no answer within ${request.timeoutMs} ms` })
      }, request.timeoutMs)
      let stream: http2.ClientHttp2Stream | undefined
      let used: http2.ClientHttp2Session | undefined
      try {
        used = session(url.origin)
        stream = used.request({ ':method': 'POST', ':path': url.pathname, ...request.headers })
      } catch (err) {
        done({ status: null, error: (err as Error).message })
        return
      }
      let status: number | null = null
      let retryAfter: string | null = null
      const chunks: Buffer[] = []
      let received = 0
      // The answer is the status; the body only says why ({"reason": …}, a few bytes). What goes
      // past APNS_MAX_BODY_BYTES, or still trickles BODY_GRACE_MS after the status, is not read:
      // a body that never ends must not hold the push until its timeout (then retried: sent twice).
      const finish = (cut: boolean) => {
        if (settled) return
        clearTimeout(grace)
        let reason: string | null = null
        try {
          reason = (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { reason?: string }).reason ?? null
        } catch {
          // an empty body (200), not JSON, or cut short
        }
        if (cut && !stream!.closed && !stream!.destroyed) stream!.close(http2.constants.NGHTTP2_CANCEL)
        done({ status, reason, retryAfter })
      }
      stream.on('response', (headers) => {
        status = Number(headers[':status'])
        const value = headers['retry-after']
        retryAfter = Array.isArray(value) ? value[0]! : (value ?? null)
        grace = setTimeout(() => finish(true), BODY_GRACE_MS)
      })
      stream.on('data', (chunk: Buffer) => {
        if (settled) return
        chunks.push(chunk.subarray(0, APNS_MAX_BODY_BYTES - received))
        received += chunk.length
        if (received >= APNS_MAX_BODY_BYTES) finish(true)
      })
      stream.on('end', () => finish(false))
      stream.on('error', (err) => done({ status: null, error: err.message }))
      stream.on('close', () => {
        done({ status, retryAfter, error: status === null ? 'the stream closed without an answer' : undefined })
      })
      stream.end(request.body)
    })
  }

  async function web(request: WebPushRequest): Promise<PushResponse> {
    let details: ReturnType<typeof webPush.generateRequestDetails>
    try {
      details = webPush.generateRequestDetails(
        { endpoint: request.endpoint, keys: { p256dh: request.p256dh, auth: request.auth } },
        request.payload,
        { vapidDetails: options.vapid, TTL: request.ttlSeconds, contentEncoding: 'aes128gcm' },
      )
    } catch (err) {
      return { status: 400, error: `the subscription cannot be used: ${(err as Error).message}` }
    }
    const headers: Record<string, string> = {}
    for (const [name, value] of Object.entries(details.headers)) headers[name.toLowerCase()] = String(value)
    const response = await webSender({ url: details.endpoint, headers, body: details.body as Buffer, timeoutMs: request.timeoutMs })
    return { status: response.status, retryAfter: response.retryAfter ?? null, error: response.error }
  }

  return {
    apns,
    web,
    async close() {
      // The runner stops after its drain, so nothing is in flight; a hung stream must not hold the close.
      for (const s of sessions.values()) s.destroy()
      sessions.clear()
      await webSender.close()
    },
  }
}

/** VAPID keys: VAPID_PUBLIC_KEY/VAPID_PRIVATE_KEY/VAPID_SUBJECT when set, else the generated ones of DATA_DIR. */
export function generateVapidKeys(): { publicKey: string; privateKey: string } {
  return webPush.generateVAPIDKeys()
}
