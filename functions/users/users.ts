// Users: profiles and your own settings.
import { createRouter } from '../lib/router.ts'
import { respond } from '../lib/respond.ts'
import { pageArgs } from '../lib/schemas.ts'
import * as routes from './users.routes.ts'

export const users = createRouter()
  .openapi(routes.getMe, (c) => respond(c, 'api.user_get', ['me']))
  .openapi(routes.updateMe, (c) => respond(c, 'api.user_update_me', [c.req.valid('json')]))
  .openapi(routes.getUser, (c) => respond(c, 'api.user_get', [c.req.valid('param').username]))
  .openapi(routes.getUserProjects, (c) =>
    respond(c, 'api.user_projects', [c.req.valid('param').username, ...pageArgs(c.req.valid('query'))]))
