import { createRoute } from '@hono/zod-openapi'
import { NoContent, Params, errors } from '../lib/schemas.ts'

export const followUser = createRoute({
  method: 'post',
  path: '/v1/users/{user_id}/follow',
  tags: ['Following'],
  summary: 'Follow a member',
  description: 'Idempotent. Following yourself is 422.',
  request: { params: Params.user },
  responses: { 204: NoContent, ...errors(401, 403, 404, 422, 429) },
})

export const unfollowUser = createRoute({
  method: 'delete',
  path: '/v1/users/{user_id}/follow',
  tags: ['Following'],
  summary: 'Unfollow a member',
  request: { params: Params.user },
  responses: { 204: NoContent, ...errors(401, 403, 404, 422) },
})

export const followProject = createRoute({
  method: 'post',
  path: '/v1/projects/{project_id}/follow',
  tags: ['Following'],
  summary: 'Follow a project',
  request: { params: Params.project },
  responses: { 204: NoContent, ...errors(401, 403, 404, 429) },
})

export const unfollowProject = createRoute({
  method: 'delete',
  path: '/v1/projects/{project_id}/follow',
  tags: ['Following'],
  summary: 'Unfollow a project',
  request: { params: Params.project },
  responses: { 204: NoContent, ...errors(401, 403, 404) },
})
