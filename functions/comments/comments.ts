// Comments on todos, with replies.
import { createRouter } from '../lib/router.ts'
import { respond } from '../lib/respond.ts'
import { pageArgs } from '../lib/schemas.ts'
import { uploadIds } from '../uploads/signed-ids.ts'
import * as routes from './comments.routes.ts'

export const comments = createRouter()
  .openapi(routes.createComment, async (c) => {
    const input = c.req.valid('json')
    return respond(c, 'api.comment_create',
      [input.commentable_type, input.commentable_id, input.body ?? null, await uploadIds(c, input.attachments), input.parent_id ?? null], { status: 201 })
  })
  .openapi(routes.updateComment, async (c) => {
    const patch = c.req.valid('json')
    return respond(c, 'api.comment_update', [c.req.valid('param').comment_id, { ...patch, attachments: await uploadIds(c, patch.attachments) }])
  })
  .openapi(routes.deleteComment, (c) => respond(c, 'api.comment_delete', [c.req.valid('param').comment_id], { status: 204 }))
  .openapi(routes.listComments, (c) =>
    respond(c, 'api.todo_comments', [c.req.valid('param').todo_id, ...pageArgs(c.req.valid('query'))]))
