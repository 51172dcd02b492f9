// Projects: what members build.
import { createRouter } from '../lib/router.ts'
import { respond } from '../lib/respond.ts'
import { pageArgs } from '../lib/schemas.ts'
import * as routes from './projects.routes.ts'

export const projects = createRouter()
  .openapi(routes.listProjects, (c) => respond(c, 'api.projects_list', pageArgs(c.req.valid('query'))))
  .openapi(routes.getProject, (c) => respond(c, 'api.project_get', [c.req.valid('param').project_id]))
