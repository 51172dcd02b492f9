import { createRoute, z } from '@hono/zod-openapi'
import { PaginationQuery, ProjectSchema, UserSchema, errors, jsonContent, paginated } from '../lib/schemas.ts'

const UsernameParam = z.object({
  username: z.string().min(1).openapi({ param: { name: 'username', in: 'path' }, description: 'Username, user_ ID, or `me`.', example: 'me' }),
})

export const getUser = createRoute({
  method: 'get',
  path: '/v1/users/{username}',
  tags: ['Users'],
  summary: 'A user',
  request: { params: UsernameParam },
  responses: { 200: jsonContent(UserSchema, 'The user'), ...errors(401, 403, 404) },
})

export const getMe = createRoute({
  method: 'get',
  path: '/v1/users/me',
  tags: ['Users'],
  summary: 'The authenticated user',
  responses: { 200: jsonContent(UserSchema, 'You'), ...errors(401, 403, 404) },
})

export const UpdateMeBody = z
  .object({
    time_zone: z.string({ error: 'time_zone must be a string' }).min(1, { error: 'time_zone must not be empty' }).optional()
      .openapi({ description: 'IANA zone identifier. Setting it clears dismissed_time_zone.', example: 'Europe/Berlin' }),
    dismissed_time_zone: z.string({ error: 'dismissed_time_zone must be a string or null' }).nullable().optional()
      .openapi({ description: 'IANA zone identifier the user declined; null clears it.' }),
  })
  .openapi('UpdateMe')

export const updateMe = createRoute({
  method: 'patch',
  path: '/v1/users/me',
  tags: ['Users'],
  summary: 'Update your time zone settings',
  request: { body: { required: true, content: { 'application/json': { schema: UpdateMeBody } } } },
  responses: { 200: jsonContent(UserSchema, 'You, updated'), ...errors(400, 401, 403, 404, 422) },
})

export const getUserProjects = createRoute({
  method: 'get',
  path: '/v1/users/{username}/projects',
  tags: ['Users', 'Projects'],
  summary: 'Projects a user makes',
  description: 'Projects of which the user is an accepted maker, newest first, as far as you may see them.',
  request: { params: UsernameParam, query: PaginationQuery },
  responses: { 200: jsonContent(paginated(ProjectSchema, 'PaginatedProjects'), 'A page of projects'), ...errors(401, 403, 404, 422) },
})
