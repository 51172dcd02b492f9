// The Deno transport of the push worker (the edge function's POST /internal/push).
//
// APNs: Deno's fetch negotiates HTTP/2 by ALPN, which APNs requires; the connection pool keeps
// the connection open between pushes of one invocation. Web Push: `web-push` encrypts (RFC 8291,
// aes128gcm) and signs VAPID; the request goes out through the webhook sender, so a subscription
// endpoint gets the same address checks as a webhook URL (webhook-sender.ts).
import webPush from 'web-push'
import type { ApnsRequest, PushResponse, PushTransport, WebPushRequest } from '../../../functions/lib/push.ts'
import { BODY_GRACE_MS } from '../../../functions/lib/webhooks.ts'
import { denoWebhookSender } from './webhook-sender.ts'

export interface VapidKeys {
  publicKey: string
  privateKey: string
  subject: string
}

/** The most of an APNs answer's body read: its {"reason": …} is a few dozen bytes. */
const APNS_MAX_BODY_BYTES = 4096

/**
 * The start of an answer's body: at most APNS_MAX_BODY_BYTES, and only what arrives within
 * BODY_GRACE_MS of the status; the rest is cancelled. The answer is the status, so a body that
 * never ends (or a huge one) must neither hold the push until its timeout (then retried: sent
 * twice) nor fill the function's memory.
 */
async function boundedText(response: Response): Promise<string> {
  if (!response.body) return ''
  const reader = response.body.getReader()
  const chunks: Uint8Array[] = []
  let received = 0
  let timer: ReturnType<typeof setTimeout> | undefined
  const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), BODY_GRACE_MS)))
  try {
    while (received < APNS_MAX_BODY_BYTES) {
      const next = await Promise.race([reader.read(), late])
      if (next === 'late' || next.done) break
      chunks.push(next.value.subarray(0, APNS_MAX_BODY_BYTES - received))
      received += next.value.length
    }
  } catch {
    // the body broke off: what arrived is all there is
  } finally {
    clearTimeout(timer)
    reader.cancel().catch(() => {})
  }
  const all = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0))
  let at = 0
  for (const c of chunks) {
    all.set(c, at)
    at += c.length
  }
  return new TextDecoder().decode(all)
}

export function denoPushTransport(options: { vapid: VapidKeys | null; allowPrivate: boolean }): PushTransport {
  const webSender = denoWebhookSender({ allowPrivate: options.allowPrivate })

  async function apns(request: ApnsRequest): Promise<PushResponse> {
    const signal = AbortSignal.timeout(request.timeoutMs)
    try {
      const response = await fetch(request.url, { method: 'POST', headers: request.headers, body: request.body, redirect: 'manual', signal })
      const text = await boundedText(response)
      let reason: string | null = null
      try {
        reason = (JSON.parse(text) as { reason?: string }).reason ?? null
      } catch {
        // an empty body (200)
      }
      return { status: response.status, reason, retryAfter: response.headers.get('retry-after') }
    } catch (err) {
      if (signal.aborted) return { status: null, error: `no answer within ${request.timeoutMs} ms` }
      return { status: null, error: (err as Error).message || String(err) }
    }
  }

  async function web(request: WebPushRequest): Promise<PushResponse> {
    if (!options.vapid) return { status: null, error: 'Web Push is not configured (VAPID_PUBLIC_KEY, VAPID_PRIVATE_KEY, VAPID_SUBJECT)' }
    let details: { endpoint: string; headers: Record<string, string | number>; body: Uint8Array | string | null }
    try {
      details = webPush.generateRequestDetails(
        { endpoint: request.endpoint, keys: { p256dh: request.p256dh, auth: request.auth } },
        request.payload,
        { vapidDetails: options.vapid, TTL: request.ttlSeconds, contentEncoding: 'aes128gcm' },
      ) as never
    } catch (err) {
      return { status: 400, error: `the subscription cannot be used: ${(err as Error).message}` }
    }
    const headers: Record<string, string> = {}
    for (const [name, value] of Object.entries(details.headers)) headers[name.toLowerCase()] = String(value)
    const response = await webSender({ url: details.endpoint, headers, body: details.body ?? '', timeoutMs: request.timeoutMs })
    return { status: response.status, retryAfter: response.retryAfter ?? null, error: response.error }
  }

  return { apns, web }
}
