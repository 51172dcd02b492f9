import { createRoute, z } from '@hono/zod-openapi'
import { ConversationSchema, MessageSchema, NoContent, PaginationQuery, errors, jsonContent, paginated } from '../lib/schemas.ts'

const ConversationParam = z.object({
  conversation_id: z.string().min(1).openapi({ param: { name: 'conversation_id', in: 'path' }, description: 'conversation_ ID.' }),
})
const MessageParam = z.object({
  message_id: z.string().min(1).openapi({ param: { name: 'message_id', in: 'path' }, description: 'message_ ID.' }),
})
const chat = 'OAuth token with scope `chat` from an approved application.'

export const PaginatedConversations = paginated(ConversationSchema, 'PaginatedConversations')
  .extend({ unread_count: z.number().int().openapi({ description: 'Conversations with unread messages, across all pages.' }) })
  .openapi('PaginatedConversations')

export const listConversations = createRoute({
  method: 'get',
  path: '/v1/conversations',
  tags: ['Direct messages'],
  summary: 'Your conversations',
  description: `Latest activity first; conversations without messages are left out. ${chat}`,
  request: {
    query: PaginationQuery.extend({
      unread: z.enum(['true', 'false'], { error: 'unread must be true or false' }).optional().openapi({ description: 'true: only conversations with unread messages.' }),
    }),
  },
  responses: { 200: jsonContent(PaginatedConversations, 'A page of conversations'), ...errors(401, 403, 404, 422) },
})

export const openConversation = createRoute({
  method: 'post',
  path: '/v1/conversations',
  tags: ['Direct messages'],
  summary: 'Open a conversation',
  description: `200 with the existing conversation, 201 with a new empty one. ${chat}`,
  request: {
    body: {
      required: true,
      content: { 'application/json': { schema: z.object({ user: z.string({ error: 'user must be a string' }).optional().openapi({ description: 'Required: username or user_ ID.' }) }).openapi('OpenConversation') } },
    },
  },
  responses: {
    200: jsonContent(ConversationSchema, 'The existing conversation'),
    201: jsonContent(ConversationSchema, 'A new conversation'),
    ...errors(400, 401, 403, 404, 422, 429),
  },
})

export const readAll = createRoute({
  method: 'post',
  path: '/v1/conversations/reading',
  tags: ['Direct messages'],
  summary: 'Mark every conversation read',
  responses: { 204: NoContent, ...errors(401, 403, 429) },
})

export const getConversation = createRoute({
  method: 'get',
  path: '/v1/conversations/{conversation_id}',
  tags: ['Direct messages'],
  summary: 'A conversation',
  description: `404 when it does not exist or you are not a participant. ${chat}`,
  request: { params: ConversationParam },
  responses: { 200: jsonContent(ConversationSchema, 'The conversation'), ...errors(401, 403, 404) },
})

export const listMessages = createRoute({
  method: 'get',
  path: '/v1/conversations/{conversation_id}/messages',
  tags: ['Direct messages'],
  summary: 'Messages of a conversation',
  description: 'Newest first.',
  request: { params: ConversationParam, query: PaginationQuery },
  responses: { 200: jsonContent(paginated(MessageSchema, 'PaginatedMessages'), 'A page of messages'), ...errors(401, 403, 404, 422) },
})

export const SendMessageBody = z.object({
  body: z.string({ error: 'body must be a string or null' }).max(10000, { error: 'body must be at most 10000 characters' }).nullable().optional(),
  attachment: z.string({ error: 'attachment must be a signed id' }).nullable().optional().openapi({ description: 'signed_id of an uploaded image or video.' }),
  client_message_id: z.string({ error: 'client_message_id must be a UUID' }).nullable().optional().openapi({ description: 'A client UUID: resending it returns the original message (200).' }),
}).openapi('SendMessage')

export const sendMessage = createRoute({
  method: 'post',
  path: '/v1/conversations/{conversation_id}/messages',
  tags: ['Direct messages'],
  summary: 'Send a message',
  description: 'At most 3 messages to a conversation the other participant has not answered, and at most 5 such conversations per 24 hours (429).',
  request: { params: ConversationParam, body: { required: true, content: { 'application/json': { schema: SendMessageBody } } } },
  responses: {
    201: jsonContent(MessageSchema, 'The message'),
    200: jsonContent(MessageSchema, 'The original message, for a resent client_message_id'),
    ...errors(401, 403, 404, 422, 429),
  },
})

export const readConversation = createRoute({
  method: 'post',
  path: '/v1/conversations/{conversation_id}/reading',
  tags: ['Direct messages'],
  summary: 'Mark a conversation read',
  request: { params: ConversationParam },
  responses: { 204: NoContent, ...errors(401, 403, 404, 429) },
})

export const react = createRoute({
  method: 'post',
  path: '/v1/messages/{message_id}/reactions',
  tags: ['Direct messages'],
  summary: 'React to a message',
  description: 'content: one of 👍 ❤️ 😂 🔥 🙏. Reacting again with the same emoji changes nothing.',
  request: {
    params: MessageParam,
    body: { required: true, content: { 'application/json': { schema: z.object({ content: z.string({ error: 'content must be a string' }).optional() }).openapi('ReactToMessage') } } },
  },
  responses: { 201: jsonContent(z.object({ content: z.string(), created_at: z.string(), user: z.any() }), 'The reaction'), ...errors(400, 401, 403, 404, 422, 429) },
})

export const unreact = createRoute({
  method: 'delete',
  path: '/v1/messages/{message_id}/reactions/{content}',
  tags: ['Direct messages'],
  summary: 'Withdraw a reaction',
  description: '204 also when there was no such reaction.',
  request: { params: MessageParam.extend({ content: z.string().openapi({ param: { name: 'content', in: 'path' }, description: 'The emoji, URL-encoded.' }) }) },
  responses: { 204: NoContent, ...errors(401, 403, 404, 429) },
})
