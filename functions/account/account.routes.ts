import { createRoute, z } from '@hono/zod-openapi'
import { NoContent, errors, jsonContent } from '../lib/schemas.ts'

export const BillingSchema = z.object({
  pro: z.boolean().openapi({ description: 'Whether the subscription is active (the `pro` field of your User).' }),
  status: z.enum(['active', 'inactive']).openapi({ description: '`inactive`: the subscription lapsed; every other endpoint answers 401 until it is renewed, except the exports and DELETE /v1/account (your data rights).' }),
  manage_url: z.string().openapi({ description: 'Where to subscribe, renew or manage the subscription (the upgrade URL of a 401).' }),
}).openapi('Billing')

export const deleteAccount = createRoute({
  method: 'delete',
  path: '/v1/account',
  tags: ['Account'],
  summary: 'Ask for your account to be deleted',
  description: 'Records a request that the operator’s team reviews. Until it is decided the account works as before; once approved, '
    + 'everything of yours (todos, comments, reactions, follows, uploads and their files, webhooks, conversations, credentials…) is '
    + 'removed permanently and your username becomes free. 422 while a request is pending. Answered without an active '
    + 'subscription too (never 401): leaving needs no subscription.',
  responses: { 204: NoContent, ...errors(403, 422) },
})

export const getBilling = createRoute({
  method: 'get',
  path: '/v1/billing',
  tags: ['Account'],
  summary: 'Your subscription status and where to manage it',
  description: 'The endpoint of the `billing` scope: any API key, or an OAuth token with `billing`. Answered for a lapsed account too (200 with `status: inactive`), which is what it is for.',
  responses: { 200: jsonContent(BillingSchema, 'Your subscription'), ...errors(403) },
})
