import { createRoute, z } from '@hono/zod-openapi'
import { NoContent, Params, errors, jsonContent } from '../lib/schemas.ts'

export const ReportSchema = z.object({
  id: z.string().openapi({ example: 'rep_0a1b2c3d4e5f60718293a4b5c6d7e8f9' }),
  created_at: z.string().datetime({ offset: true }),
  reportable_type: z.enum(['Todo', 'Comment', 'User']),
  reportable_id: z.string(),
}).openapi('Report')

export const CreateReportBody = z.object({
  reportable_type: z.string({ error: 'reportable_type is required' }).openapi({ description: '`Todo`, `Comment` or `User`.' }),
  reportable_id: z.string({ error: 'reportable_id is required' }).min(1, { error: 'reportable_id is required' }).openapi({ description: 'todo_, comm_ or user_ ID.' }),
}).openapi('CreateReport')

export const createReport = createRoute({
  method: 'post',
  path: '/v1/reports',
  tags: ['Moderation'],
  summary: 'Report a todo, comment or user',
  request: { body: { required: true, content: { 'application/json': { schema: CreateReportBody } } } },
  responses: { 201: jsonContent(ReportSchema, 'The report'), ...errors(400, 401, 403, 422, 429) },
})

export const mute = createRoute({
  method: 'post',
  path: '/v1/users/{user_id}/mute',
  tags: ['Moderation'],
  summary: 'Mute a member',
  description: "Their todos and comments leave your timeline, GET /v1/todos and comment lists. Idempotent.",
  request: { params: Params.user },
  responses: { 204: NoContent, ...errors(401, 403, 404, 422, 429) },
})

export const unmute = createRoute({
  method: 'delete',
  path: '/v1/users/{user_id}/mute',
  tags: ['Moderation'],
  summary: 'Unmute a member',
  request: { params: Params.user },
  responses: { 204: NoContent, ...errors(401, 403, 404, 422) },
})
