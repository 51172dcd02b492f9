import { createRoute } from '@hono/zod-openapi'
import { NoContent, PaginationQuery, Params, UserSchema, errors, jsonContent, paginated } from '../lib/schemas.ts'

export const followUser = createRoute({
  method: 'post',
  path: '/v1/users/{user_id}/follow',
  tags: ['Following'],
  summary: 'Follow a member',
  description: 'Idempotent. A public member is followed at once. Following a protected member asks them: `following` stays false and `follow_requested` is true until they approve (then you see their todos) or decline. A private member cannot be followed (403). Following yourself is 422.',
  request: { params: Params.user },
  responses: { 204: NoContent, ...errors(401, 403, 404, 422, 429) },
})

export const unfollowUser = createRoute({
  method: 'delete',
  path: '/v1/users/{user_id}/follow',
  tags: ['Following'],
  summary: 'Unfollow a member',
  description: 'Idempotent. Also withdraws a pending follow request.',
  request: { params: Params.user },
  responses: { 204: NoContent, ...errors(401, 403, 404, 422) },
})

export const followProject = createRoute({
  method: 'post',
  path: '/v1/projects/{project_id}/follow',
  tags: ['Following'],
  summary: 'Follow a project',
  description: 'Idempotent. A public project (or one you make) is followed at once; following a protected project asks its makers (`follow_requested`) and its todos stay hidden until one approves. A private project is 404 to all but its makers.',
  request: { params: Params.project },
  responses: { 204: NoContent, ...errors(401, 403, 404, 429) },
})

export const unfollowProject = createRoute({
  method: 'delete',
  path: '/v1/projects/{project_id}/follow',
  tags: ['Following'],
  summary: 'Unfollow a project',
  description: 'Idempotent. Also withdraws a pending follow request.',
  request: { params: Params.project },
  responses: { 204: NoContent, ...errors(401, 403, 404) },
})

const PaginatedUsers = paginated(UserSchema, 'PaginatedUsers')

export const listFollowRequests = createRoute({
  method: 'get',
  path: '/v1/follow_requests',
  tags: ['Following'],
  summary: 'Who asked to follow you',
  description: 'Members whose request to follow you is pending, oldest first. Members you muted are left out (muting declines their request).',
  request: { query: PaginationQuery },
  responses: { 200: jsonContent(PaginatedUsers, 'A page of requesters'), ...errors(401, 403, 404, 422) },
})

export const approveFollowRequest = createRoute({
  method: 'post',
  path: '/v1/follow_requests/{user_id}/approve',
  tags: ['Following'],
  summary: 'Approve a follow request',
  description: 'The requester follows you from now on and sees your todos. 404 when they have no pending request to follow you.',
  request: { params: Params.user },
  responses: { 204: NoContent, ...errors(401, 403, 404) },
})

export const declineFollowRequest = createRoute({
  method: 'delete',
  path: '/v1/follow_requests/{user_id}',
  tags: ['Following'],
  summary: 'Decline a follow request',
  description: 'Idempotent; the requester is not told.',
  request: { params: Params.user },
  responses: { 204: NoContent, ...errors(401, 403, 404) },
})

const ProjectRequestParams = Params.project.extend(Params.user.shape)

export const listProjectFollowRequests = createRoute({
  method: 'get',
  path: '/v1/projects/{project_id}/follow_requests',
  tags: ['Following', 'Projects'],
  summary: 'Who asked to follow a project you make',
  description: 'Members whose request to follow the project is pending, oldest first. Makers only (403); 404 when you may not see the project.',
  request: { params: Params.project, query: PaginationQuery },
  responses: { 200: jsonContent(PaginatedUsers, 'A page of requesters'), ...errors(401, 403, 404, 422) },
})

export const approveProjectFollowRequest = createRoute({
  method: 'post',
  path: '/v1/projects/{project_id}/follow_requests/{user_id}/approve',
  tags: ['Following', 'Projects'],
  summary: 'Approve a request to follow a project you make',
  description: 'Any maker may answer. The requester follows the project from now on and sees its todos. 404 when there is no such request; 403 for non-makers.',
  request: { params: ProjectRequestParams },
  responses: { 204: NoContent, ...errors(401, 403, 404) },
})

export const declineProjectFollowRequest = createRoute({
  method: 'delete',
  path: '/v1/projects/{project_id}/follow_requests/{user_id}',
  tags: ['Following', 'Projects'],
  summary: 'Decline a request to follow a project you make',
  description: 'Idempotent; the requester is not told. 403 for non-makers.',
  request: { params: ProjectRequestParams },
  responses: { 204: NoContent, ...errors(401, 403, 404) },
})

