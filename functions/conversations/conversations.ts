// Direct messages: conversations, messages, reading, message reactions. Every route needs an
// OAuth token with scope chat from an approved app (access 'chat').
import { createRouter } from '../lib/router.ts'
import { respond, respondWithStatus } from '../lib/respond.ts'
import { pageArgs } from '../lib/schemas.ts'
import { uploadIds } from '../uploads/signed-ids.ts'
import * as routes from './conversations.routes.ts'

const chat = { access: 'chat' as const }

export const conversations = createRouter()
  .openapi(routes.listConversations, (c) => {
    const query = c.req.valid('query')
    return respond(c, 'api.conversations_list', [query.unread === 'true', ...pageArgs(query)], chat)
  })
  .openapi(routes.openConversation, (c) => respondWithStatus(c, 'api.conversation_open', [c.req.valid('json').user ?? null], 'chat'))
  .openapi(routes.readAll, (c) => respond(c, 'api.conversations_read_all', [], { ...chat, status: 204 }))
  .openapi(routes.getConversation, (c) => respond(c, 'api.conversation_get', [c.req.valid('param').conversation_id], chat))
  .openapi(routes.listMessages, (c) =>
    respond(c, 'api.messages_list', [c.req.valid('param').conversation_id, ...pageArgs(c.req.valid('query'))], chat))
  .openapi(routes.sendMessage, async (c) => {
    const input = c.req.valid('json')
    const [upload] = input.attachment ? await uploadIds(c, [input.attachment], 'attachment') : []
    return respondWithStatus(c, 'api.message_send',
      [c.req.valid('param').conversation_id, input.body ?? null, upload ?? null, input.client_message_id ?? null], 'chat')
  })
  .openapi(routes.readConversation, (c) =>
    respond(c, 'api.conversation_read', [c.req.valid('param').conversation_id], { ...chat, status: 204 }))
  .openapi(routes.react, (c) =>
    respond(c, 'api.message_react', [c.req.valid('param').message_id, c.req.valid('json').content ?? null], { ...chat, status: 201 }))
  .openapi(routes.unreact, (c) => {
    const { message_id, content } = c.req.valid('param')
    return respond(c, 'api.message_unreact', [message_id, content], { ...chat, status: 204 })
  })
