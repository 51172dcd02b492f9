import { createRoute, z } from '@hono/zod-openapi'
import { NoContent, ReactionSchema, errors, jsonContent } from '../lib/schemas.ts'

export const CreateReactionBody = z.object({
  reactable_type: z.string({ error: 'reactable_type is required' }).openapi({ description: '`Todo` or `Comment`.' }),
  reactable_id: z.string({ error: 'reactable_id is required' }).min(1, { error: 'reactable_id is required' }).openapi({ description: 'todo_ or comm_ ID.' }),
}).openapi('CreateReaction')

export const createReaction = createRoute({
  method: 'post',
  path: '/v1/reactions',
  tags: ['Reactions'],
  summary: 'Like a todo or a comment',
  description: 'If you already reacted, the existing reaction is returned (also 201).',
  request: { body: { required: true, content: { 'application/json': { schema: CreateReactionBody } } } },
  responses: { 201: jsonContent(ReactionSchema, 'The reaction'), ...errors(400, 401, 403, 422, 429) },
})

export const deleteReaction = createRoute({
  method: 'delete',
  path: '/v1/reactions/{reaction_id}',
  tags: ['Reactions'],
  summary: 'Withdraw your reaction',
  request: { params: z.object({ reaction_id: z.string().min(1).openapi({ param: { name: 'reaction_id', in: 'path' }, description: 'reac_ ID.' }) }) },
  responses: { 204: NoContent, ...errors(401, 403, 404) },
})
