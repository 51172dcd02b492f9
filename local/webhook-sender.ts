// The Node sender of webhooks (npm start, tests, the bench): undici with the address pinned.
//
// SSRF: the host is resolved by our own lookup, every address it resolves to must be public
// unicast (functions/lib/webhooks.ts isPublicAddress), and the socket connects to exactly the
// address that was vetted (undici Agent, connect.lookup), so DNS rebinding cannot swap it
// between the check and the connect. IP-literal hosts never reach a lookup, so they are checked
// before. TLS still verifies the certificate against the host name (SNI), not the address.
// No redirects (undici's request never follows them), a 15 s budget for the whole exchange,
// and at most 64 KiB of the response read: a receiver that never answers or streams forever
// costs one timeout.
import { lookup as systemLookup } from 'node:dns/promises'
import type { LookupAddress } from 'node:dns'
import { Agent, request } from 'undici'
import { BODY_GRACE_MS, MAX_RESPONSE_BYTES, type OutgoingWebhook, type WebhookResponse, type WebhookSender, isPublicAddress, webhookTarget } from '../functions/lib/webhooks.ts'

export interface NodeSenderOptions {
  /** WEBHOOK_ALLOW_PRIVATE=1: loopback and private addresses allowed (tests, local use). */
  allowPrivate: boolean
  /** How host names resolve; the system resolver unless a test names its own. */
  resolve?: (hostname: string) => Promise<LookupAddress[]>
  /**
   * Connections kept to one origin at most; default none. Webhooks need none: what goes to one
   * host is bounded per member by the database (HOST_CONCURRENCY for each member) and in all by
   * the drain's slots and waiting room, and a limit per origin here would queue one member's
   * deliveries behind another member's hanging ones on a host they share (hooks.slack.com).
   */
  connectionsPerOrigin?: number | null
}

class RefusedAddress extends Error {}


export function nodeWebhookSender(options: NodeSenderOptions): WebhookSender & { close: () => Promise<void> } {
  const resolve = options.resolve ?? ((hostname: string) => systemLookup(hostname, { all: true, verbatim: true }))

  /** Resolves, vets every address, and hands net.connect only vetted ones. */
  async function vetted(hostname: string): Promise<LookupAddress[]> {
    const addresses = await resolve(hostname)
    if (addresses.length === 0) throw new Error(`${hostname} does not resolve`)
    if (!options.allowPrivate) {
      const refused = addresses.find((a) => !isPublicAddress(a.address))
      if (refused) throw new RefusedAddress(`refused: ${hostname} resolves to ${refused.address}, which is not a public address`)
    }
    return addresses
  }

  const agent = new Agent({
    connections: options.connectionsPerOrigin ?? null,
    keepAliveTimeout: 4_000,
    connect: {
      // net.connect and tls.connect call this instead of the system resolver.
      lookup: (hostname: string, lookupOptions: { all?: boolean }, callback: (...args: unknown[]) => void) => {
        vetted(hostname).then(
          (addresses) => {
            if (lookupOptions.all) callback(null, addresses)
            else callback(null, addresses[0]!.address, addresses[0]!.family)
          },
          (err) => callback(err),
        )
      },
    } as never,
  })

  const send = async (webhook: OutgoingWebhook): Promise<WebhookResponse> => {
    const target = webhookTarget(webhook.url, options.allowPrivate)
    if ('error' in target) return { status: null, error: target.error }
    const { url } = target
    const timeout = AbortSignal.timeout(webhook.timeoutMs)
    // The worker's signal cuts the request short (functions/lib/webhooks.ts, the waiting room).
    const signal = webhook.signal ? AbortSignal.any([timeout, webhook.signal]) : timeout
    try {
      const response = await request(url, {
        method: 'POST',
        headers: webhook.headers,
        body: webhook.body,
        dispatcher: agent,
        signal,
        headersTimeout: webhook.timeoutMs,
        bodyTimeout: webhook.timeoutMs,
      })
      // The answer is the status. A short body is read so the connection can be reused; past
      // MAX_RESPONSE_BYTES, or a body still trickling after a second, the connection is dropped.
      let timer: ReturnType<typeof setTimeout> | undefined
      await Promise.race([
        response.body.dump({ limit: MAX_RESPONSE_BYTES }).catch(() => {}),
        new Promise((resolve) => (timer = setTimeout(resolve, BODY_GRACE_MS))),
      ])
      clearTimeout(timer)
      response.body.destroy()
      const retryAfter = response.headers['retry-after']
      return { status: response.statusCode, retryAfter: Array.isArray(retryAfter) ? retryAfter[0] : (retryAfter ?? null) }
    } catch (err) {
      const cause = (err as { cause?: unknown }).cause
      const refused = err instanceof RefusedAddress ? err : cause instanceof RefusedAddress ? cause : null
      if (refused) return { status: null, error: refused.message }
      if (timeout.aborted) return { status: null, error: `no answer within ${webhook.timeoutMs} ms` }
      if (signal.aborted) return { status: null, error: 'cut short by the worker' }
      return { status: null, error: (err as Error).message || String(err) }
    }
  }
  return Object.assign(send, { close: () => agent.close() })
}
