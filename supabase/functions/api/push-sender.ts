// The Deno transport of the push worker (the edge function's POST /internal/push).
//
// APNs: Deno's fetch negotiates HTTP/2 by ALPN, which APNs requires; the connection pool keeps
// the connection open between pushes of one invocation. Web Push: `web-push` encrypts (RFC 8291,
// aes128gcm) and signs VAPID; the request goes out through the webhook sender, so a subscription
// endpoint gets the same address checks as a webhook URL (webhook-sender.ts).
import webPush from 'web-push'
import type { ApnsRequest, PushResponse, PushTransport, WebPushRequest } from '../../../functions/lib/push.ts'
import { denoWebhookSender } from './webhook-sender.ts'

export interface VapidKeys {
  publicKey: string
  privateKey: string
  subject: string
}

export function denoPushTransport(options: { vapid: VapidKeys | null; allowPrivate: boolean }): PushTransport {
  const webSender = denoWebhookSender({ allowPrivate: options.allowPrivate })

  async function apns(request: ApnsRequest): Promise<PushResponse> {
    const signal = AbortSignal.timeout(request.timeoutMs)
    try {
      const response = await fetch(request.url, { method: 'POST', headers: request.headers, body: request.body, redirect: 'manual', signal })
      const text = (await response.text()).slice(0, 4096)
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
