// Webhook subscriptions (SPEC "Webhook subscriptions"). Delivery is the worker's job
// (functions/lib/webhooks.ts); these routes only manage what it delivers to.
import { ApiError } from '../lib/errors.ts'
import { createRouter } from '../lib/router.ts'
import { respond } from '../lib/respond.ts'
import { normalizedSubscriptionUrl, subscriptionUrlProblem } from '../lib/webhooks.ts'
import type { AppContext } from '../lib/context.ts'
import * as routes from './webhooks.routes.ts'

/**
 * 422 unless the URL may be subscribed (https; http and private literals only with
 * WEBHOOK_ALLOW_PRIVATE); otherwise the URL as it will be stored and sent (its parsed form).
 */
function checkUrl(c: AppContext, url: string | undefined): string | undefined {
  if (url === undefined) return undefined
  const problem = subscriptionUrlProblem(url, c.var.deps.webhookAllowPrivate ?? false)
  if (problem) throw new ApiError(422, problem)
  return normalizedSubscriptionUrl(url)
}

export const webhooks = createRouter()
  .openapi(routes.listSubscriptions, (c) => respond(c, 'api.webhook_subscription_list', []))
  .openapi(routes.createSubscription, (c) => {
    const input = c.req.valid('json')
    const url = checkUrl(c, input.url)
    return respond(c, 'api.webhook_subscription_create', [url, input.event_type, input.project_ids ?? []], { status: 201 })
  })
  .openapi(routes.updateSubscription, (c) => {
    const input = c.req.valid('json')
    const url = checkUrl(c, input.url)
    const args = [c.req.valid('param').subscription_id, url ?? null, input.event_type ?? null, input.project_ids ?? null, input.active ?? null]
    return respond(c, 'api.webhook_subscription_update', args)
  })
  .openapi(routes.deleteSubscription, (c) => respond(c, 'api.webhook_subscription_delete', [c.req.valid('param').subscription_id], { status: 204 }))
  .openapi(routes.rotateSecret, (c) => respond(c, 'api.webhook_subscription_rotate_secret', [c.req.valid('param').subscription_id]))
