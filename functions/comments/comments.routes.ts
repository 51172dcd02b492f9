import { createRoute, z } from '@hono/zod-openapi'
import { CommentSchema, NoContent, PaginationQuery, Params, errors, idList, jsonContent, paginated } from '../lib/schemas.ts'

const CommentParam = z.object({
  comment_id: z.string().min(1).openapi({ param: { name: 'comment_id', in: 'path' }, description: 'comm_ ID.' }),
})
const signedIds = idList

export const CreateCommentBody = z.object({
  commentable_type: z.string({ error: 'commentable_type is required' }).openapi({ description: 'Only `Todo`.', example: 'Todo' }),
  commentable_id: z.string({ error: 'commentable_id is required' }).min(1, { error: 'commentable_id is required' }).openapi({ description: 'todo_ ID.' }),
  body: z.string({ error: 'body must be a string' }).max(10000, { error: 'body must be at most 10000 characters' }).nullable().optional()
    .openapi({ description: 'Optional when attachments are given.' }),
  attachments: signedIds('attachments').optional(),
  parent_id: z.string({ error: 'parent_id must be a string' }).nullable().optional()
    .openapi({ description: 'comm_ ID of the comment this one replies to (same todo). An addition to SPEC 1.4.0.' }),
}).openapi('CreateComment')

export const UpdateCommentBody = z.object({
  body: z.string({ error: 'body must be a string' }).trim().min(1, { error: 'body must not be empty' })
    .max(10000, { error: 'body must be at most 10000 characters' }).optional(),
  attachments: signedIds('attachments').optional(),
  remove_attachment_ids: signedIds('remove_attachment_ids').optional(),
}).openapi('UpdateComment')

export const createComment = createRoute({
  method: 'post',
  path: '/v1/comments',
  tags: ['Comments'],
  summary: 'Comment on a todo',
  request: { body: { required: true, content: { 'application/json': { schema: CreateCommentBody } } } },
  responses: { 201: jsonContent(CommentSchema, 'The new comment'), ...errors(400, 401, 403, 422, 429) },
})

export const updateComment = createRoute({
  method: 'patch',
  path: '/v1/comments/{comment_id}',
  tags: ['Comments'],
  summary: 'Edit your comment',
  request: { params: CommentParam, body: { required: true, content: { 'application/json': { schema: UpdateCommentBody } } } },
  responses: { 200: jsonContent(CommentSchema, 'The comment, edited'), ...errors(400, 401, 403, 404, 422, 429) },
})

export const deleteComment = createRoute({
  method: 'delete',
  path: '/v1/comments/{comment_id}',
  tags: ['Comments'],
  summary: 'Delete your comment',
  description: 'Permanently deletes it with its replies, reactions and attachments.',
  request: { params: CommentParam },
  responses: { 204: NoContent, ...errors(401, 403, 404, 429) },
})

export const listComments = createRoute({
  method: 'get',
  path: '/v1/todos/{todo_id}/comments',
  tags: ['Comments', 'Todos'],
  summary: "A todo's comments",
  description: 'Oldest first, replies included (with parent_id); comments of members you muted are left out.',
  request: { params: Params.todo, query: PaginationQuery },
  responses: { 200: jsonContent(paginated(CommentSchema, 'PaginatedComments'), 'A page of comments'), ...errors(401, 403, 404, 422) },
})
