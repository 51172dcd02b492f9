// The Deno sender of webhooks (the edge function's POST /internal/webhooks).
//
// Deno's fetch has no DNS hook (denoland/deno#17165), so the address cannot be pinned as the
// Node sender pins it. What is done instead: resolve the host with Deno.resolveDns (A and
// AAAA), refuse unless every address is public unicast, check IP literals the same way, then
// fetch with redirects off. The remaining window: fetch resolves the name again, so a host
// whose DNS answers a public address to our check and a private one a moment later (DNS
// rebinding with a zero TTL) can still reach a private address from the edge runtime.
// docs/security.md ("Webhooks and SSRF") says when that matters and how to close it (deliver
// from Node with `npm run webhook-worker`, which pins the vetted address).
import { BODY_GRACE_MS, MAX_RESPONSE_BYTES, type OutgoingWebhook, type WebhookResponse, type WebhookSender, ipLiteralOf, isPublicAddress, webhookTarget } from '../../../functions/lib/webhooks.ts'

async function resolveAll(hostname: string): Promise<string[]> {
  const answers = await Promise.allSettled([Deno.resolveDns(hostname, 'A'), Deno.resolveDns(hostname, 'AAAA')])
  return answers.flatMap((a) => (a.status === 'fulfilled' ? a.value : []))
}

/** Reads at most MAX_RESPONSE_BYTES of the body for at most a second, then lets go of it. */
async function drain(response: Response): Promise<void> {
  const reader = response.body?.getReader()
  if (!reader) return
  const deadline = Date.now() + BODY_GRACE_MS
  let read = 0
  try {
    while (read < MAX_RESPONSE_BYTES && Date.now() < deadline) {
      const chunk = await Promise.race([reader.read(), new Promise<null>((r) => setTimeout(() => r(null), Math.max(0, deadline - Date.now())))])
      if (!chunk || chunk.done) break
      read += chunk.value.byteLength
    }
  } finally {
    await reader.cancel().catch(() => {})
  }
}

export function denoWebhookSender(options: { allowPrivate: boolean }): WebhookSender {
  return async (webhook: OutgoingWebhook): Promise<WebhookResponse> => {
    const target = webhookTarget(webhook.url, options.allowPrivate)
    if ('error' in target) return { status: null, error: target.error }
    const { url } = target
    if (!options.allowPrivate && !ipLiteralOf(url)) {
      // Literals were checked by webhookTarget; names are resolved and every address vetted.
      const addresses = await resolveAll(url.hostname)
      if (addresses.length === 0) return { status: null, error: `${url.hostname} does not resolve` }
      const refused = addresses.find((a) => !isPublicAddress(a))
      if (refused) return { status: null, error: `refused: ${url.hostname} resolves to ${refused}, which is not a public address` }
    }
    const timeout = AbortSignal.timeout(webhook.timeoutMs)
    // The worker's signal cuts the request short (functions/lib/webhooks.ts, the waiting room).
    const signal = webhook.signal ? AbortSignal.any([timeout, webhook.signal]) : timeout
    try {
      const response = await fetch(url, { method: 'POST', headers: webhook.headers, body: webhook.body as BodyInit, redirect: 'manual', signal })
      await drain(response)
      return { status: response.status, retryAfter: response.headers.get('retry-after') }
    } catch (err) {
      if (timeout.aborted) return { status: null, error: `no answer within ${webhook.timeoutMs} ms` }
      if (signal.aborted) return { status: null, error: 'cut short by the worker' }
      return { status: null, error: (err as Error).message || String(err) }
    }
  }
}
