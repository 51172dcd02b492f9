// Reactions (likes) on todos and comments.
import { createRouter } from '../lib/router.ts'
import { respond } from '../lib/respond.ts'
import * as routes from './reactions.routes.ts'

export const reactions = createRouter()
  .openapi(routes.createReaction, (c) => {
    const input = c.req.valid('json')
    return respond(c, 'api.reaction_create', [input.reactable_type, input.reactable_id], { status: 201 })
  })
  .openapi(routes.deleteReaction, (c) => respond(c, 'api.reaction_delete', [c.req.valid('param').reaction_id], { status: 204 }))
