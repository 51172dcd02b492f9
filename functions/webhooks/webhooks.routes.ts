import { createRoute, z } from '@hono/zod-openapi'
import { NoContent, errors, idList, jsonContent } from '../lib/schemas.ts'

export const WebhookSubscriptionSchema = z.object({
  id: z.string().openapi({ example: 'hook_2b3c4d5e6f708192a3b4c5d6e7f80912' }),
  url: z.string(),
  event_type: z.enum(['new_todo']),
  project_ids: z.array(z.string()).openapi({ description: 'proj_ IDs; empty means all projects.' }),
  active: z.boolean().openapi({ description: 'False once the receiver answered 410 Gone or deliveries failed for about three days; PATCH active=true turns it back on. (An addition to SPEC 1.4.0.)' }),
  created_at: z.string().datetime({ offset: true }),
  updated_at: z.string().datetime({ offset: true }),
}).openapi('WebhookSubscription')

export const CreatedWebhookSubscriptionSchema = WebhookSubscriptionSchema.extend({
  secret: z.string().openapi({ description: 'The Standard Webhooks signing secret (whsec_…). Shown only in this response.' }),
}).openapi('CreatedWebhookSubscription')

export const RotatedWebhookSubscriptionSchema = WebhookSubscriptionSchema.extend({
  secret: z.string().openapi({ description: 'The new Standard Webhooks signing secret (whsec_…). Shown only in this response.' }),
  previous_secret_expires_at: z.string().datetime({ offset: true }).openapi({
    description: 'Until then (24 hours) every delivery is signed with both secrets: webhook-signature carries two space-separated `v1,` signatures, the new secret’s first. Then only the new one.',
  }),
}).openapi('RotatedWebhookSubscription')

const url = z.string({ error: 'url must be a string' }).openapi({ description: 'Absolute https URL the deliveries are POSTed to.' })
const eventType = z.string({ error: 'event_type must be a string' }).openapi({ description: 'Only `new_todo`.' })

export const CreateWebhookSubscriptionBody = z.object({
  url: z.string({ error: 'url is required' }).openapi({ description: 'Absolute https URL the deliveries are POSTed to.' }),
  event_type: z.string({ error: 'event_type is required' }).openapi({ description: 'Only `new_todo`.' }),
  project_ids: idList('project_ids').optional().openapi({ description: 'proj_ IDs of projects you can see; empty or omitted: all projects.' }),
}).openapi('CreateWebhookSubscription')

export const UpdateWebhookSubscriptionBody = z.object({
  url: url.optional(),
  event_type: eventType.optional(),
  project_ids: idList('project_ids').optional().openapi({ description: '[] means all projects.' }),
  active: z.boolean({ error: 'active must be true or false' }).optional().openapi({ description: 'true turns a disabled subscription back on; false turns it off.' }),
}).openapi('UpdateWebhookSubscription')

const SubscriptionParam = z.object({
  subscription_id: z.string().min(1).openapi({ param: { name: 'subscription_id', in: 'path' }, description: 'hook_ ID.' }),
})

export const listSubscriptions = createRoute({
  method: 'get',
  path: '/v1/webhooks/subscriptions',
  tags: ['Webhooks'],
  summary: 'Your webhook subscriptions',
  description: 'A plain array, oldest first (not paginated; at most 20). Needs a read-write key or the write scope: subscription URLs often carry the receiver’s credentials.',
  responses: { 200: jsonContent(z.array(WebhookSubscriptionSchema), 'Your subscriptions'), ...errors(401, 403) },
})

export const createSubscription = createRoute({
  method: 'post',
  path: '/v1/webhooks/subscriptions',
  tags: ['Webhooks'],
  summary: 'Subscribe to your new todos',
  description: 'Deliveries are Standard Webhooks POSTs of `{"type":"new_todo","timestamp":…,"data":<Todo>}` signed with the returned secret (README, "Webhooks"). One subscription per url: 409 when you already have one to this url (an addition to SPEC 1.4.0).',
  request: { body: { required: true, content: { 'application/json': { schema: CreateWebhookSubscriptionBody } } } },
  responses: { 201: jsonContent(CreatedWebhookSubscriptionSchema, 'The subscription and its signing secret'), ...errors(401, 403, 409, 422, 429) },
})

export const updateSubscription = createRoute({
  method: 'patch',
  path: '/v1/webhooks/subscriptions/{subscription_id}',
  tags: ['Webhooks'],
  summary: 'Change a webhook subscription',
  description: '409 when another of your subscriptions has the url asked for. A url that changes counts against the creation limit (30 per 10 minutes, 429): a new url is a new receiver.',
  request: { params: SubscriptionParam, body: { required: true, content: { 'application/json': { schema: UpdateWebhookSubscriptionBody } } } },
  responses: { 200: jsonContent(WebhookSubscriptionSchema, 'The subscription'), ...errors(401, 403, 404, 409, 422, 429) },
})

export const deleteSubscription = createRoute({
  method: 'delete',
  path: '/v1/webhooks/subscriptions/{subscription_id}',
  tags: ['Webhooks'],
  summary: 'Delete a webhook subscription',
  request: { params: SubscriptionParam },
  responses: { 204: NoContent, ...errors(401, 403, 404) },
})

export const rotateSecret = createRoute({
  method: 'post',
  path: '/v1/webhooks/subscriptions/{subscription_id}/secret',
  tags: ['Webhooks'],
  summary: 'Rotate the signing secret',
  description: 'A new signing secret, shown only in this response. For 24 hours (`previous_secret_expires_at`) deliveries are signed with both the new and the previous secret (Standard Webhooks: several space-separated `v1,` signatures in webhook-signature; a verifier accepts the delivery when one matches), so the receiver can switch to the new secret without missing a delivery. Rotating again within the 24 hours drops the oldest secret: two signatures at most. 404 for another member’s or an unknown id. (An addition to SPEC 1.4.0.)',
  request: { params: SubscriptionParam },
  responses: { 200: jsonContent(RotatedWebhookSubscriptionSchema, 'The subscription and its new signing secret'), ...errors(401, 403, 404) },
})
