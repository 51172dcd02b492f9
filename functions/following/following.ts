// Following members and projects.
import { createRouter } from '../lib/router.ts'
import { respond } from '../lib/respond.ts'
import * as routes from './following.routes.ts'

export const following = createRouter()
  .openapi(routes.followUser, (c) => respond(c, 'api.user_follow', [c.req.valid('param').user_id, true], { status: 204 }))
  .openapi(routes.unfollowUser, (c) => respond(c, 'api.user_follow', [c.req.valid('param').user_id, false], { status: 204 }))
  .openapi(routes.followProject, (c) => respond(c, 'api.project_follow', [c.req.valid('param').project_id, true], { status: 204 }))
  .openapi(routes.unfollowProject, (c) => respond(c, 'api.project_follow', [c.req.valid('param').project_id, false], { status: 204 }))
