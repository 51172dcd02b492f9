import { createRoute, z } from '@hono/zod-openapi'
import { PaginationQuery, TODO_TOTAL_COUNT_DESCRIPTION, TodoSchema, UserSchema, errors, jsonContent, paginated } from '../lib/schemas.ts'

export const searchTodos = createRoute({
  method: 'get',
  path: '/v1/search/todos',
  tags: ['Search'],
  summary: 'Full-text search over todos (first-party apps)',
  description: 'Every todo visible to you, newest first, capped at the 100 newest matches: total_count is at most 100 and pagination ends there. Every word is a prefix match; -word excludes. OAuth token with scope public from a first-party app.',
  request: {
    query: PaginationQuery.extend({
      query: z.string().optional().openapi({ description: 'Required. At most 256 characters and 16 search terms as the parser splits them (e-mail is 3), at most 8 from one word; 400 beyond.', example: 'launch -bug' }),
      expand: z.union([z.string(), z.array(z.string())]).optional(),
      'expand[]': z.union([z.string(), z.array(z.string())]).optional(),
    }),
  },
  responses: { 200: jsonContent(paginated(TodoSchema, 'PaginatedTodos', TODO_TOTAL_COUNT_DESCRIPTION), 'Matching todos'), ...errors(400, 401, 403, 404, 422) },
})

export const searchUsers = createRoute({
  method: 'get',
  path: '/v1/search/users',
  tags: ['Search'],
  summary: 'Mention autocomplete (first-party apps)',
  description: 'At most 10 members, not paginated: prefix match on username and names, the people you mention most first. An empty or missing query returns only your frequent mentions.',
  request: { query: z.object({ query: z.string().optional() }) },
  responses: { 200: jsonContent(paginated(UserSchema, 'PaginatedUsers'), 'Matching members'), ...errors(401, 403) },
})
