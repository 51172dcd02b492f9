// Following members and projects, and answering requests to follow protected ones.
import { createRouter } from '../lib/router.ts'
import { respond } from '../lib/respond.ts'
import { pageArgs } from '../lib/schemas.ts'
import * as routes from './following.routes.ts'

export const following = createRouter()
  .openapi(routes.followUser, (c) => respond(c, 'api.user_follow', [c.req.valid('param').user_id, true], { status: 204 }))
  .openapi(routes.unfollowUser, (c) => respond(c, 'api.user_follow', [c.req.valid('param').user_id, false], { status: 204 }))
  .openapi(routes.followProject, (c) => respond(c, 'api.project_follow', [c.req.valid('param').project_id, true], { status: 204 }))
  .openapi(routes.unfollowProject, (c) => respond(c, 'api.project_follow', [c.req.valid('param').project_id, false], { status: 204 }))
  .openapi(routes.listFollowRequests, (c) => respond(c, 'api.follow_requests', pageArgs(c.req.valid('query'))))
  .openapi(routes.approveFollowRequest, (c) =>
    respond(c, 'api.follow_request_answer', [c.req.valid('param').user_id, true], { status: 204 }))
  .openapi(routes.declineFollowRequest, (c) =>
    respond(c, 'api.follow_request_answer', [c.req.valid('param').user_id, false], { status: 204 }))
  .openapi(routes.listProjectFollowRequests, (c) =>
    respond(c, 'api.project_follow_requests', [c.req.valid('param').project_id, ...pageArgs(c.req.valid('query'))]))
  .openapi(routes.approveProjectFollowRequest, (c) => {
    const { project_id, user_id } = c.req.valid('param')
    return respond(c, 'api.project_follow_request_answer', [project_id, user_id, true], { status: 204 })
  })
  .openapi(routes.declineProjectFollowRequest, (c) => {
    const { project_id, user_id } = c.req.valid('param')
    return respond(c, 'api.project_follow_request_answer', [project_id, user_id, false], { status: 204 })
  })
