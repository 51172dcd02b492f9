// Moderation: reports for the operator's team, and mutes.
import { createRouter } from '../lib/router.ts'
import { respond } from '../lib/respond.ts'
import * as routes from './moderation.routes.ts'

export const moderation = createRouter()
  .openapi(routes.createReport, (c) => {
    const input = c.req.valid('json')
    return respond(c, 'api.report_create', [input.reportable_type, input.reportable_id], { status: 201 })
  })
  .openapi(routes.mute, (c) => respond(c, 'api.user_mute', [c.req.valid('param').user_id, true], { status: 204 }))
  .openapi(routes.unmute, (c) => respond(c, 'api.user_mute', [c.req.valid('param').user_id, false], { status: 204 }))
