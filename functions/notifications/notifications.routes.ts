import { createRoute, z } from '@hono/zod-openapi'
import { MentionedUserSchema, NoContent, PaginationQuery, errors, jsonContent, paginated } from '../lib/schemas.ts'

const scope = 'OAuth token with scope `notifications` (API keys are refused with 403).'
const firstParty = 'First-party apps only, with scope `notifications` (403 otherwise; API keys too).'

export const NotificationSchema = z
  .object({
    id: z.string().openapi({ example: 'notif_0b8e3d6f2a8c4b59a1f07c3e9d2b4a61' }),
    type: z.string().openapi({ description: 'comment_todo_create, comment_comment_create, reaction_todo_create, reaction_comment_create, mention_todo_create, mention_comment_create, follow_user_create, follow_project_create, follow_request_create or follow_request_approve (GET /v1/notification_preferences lists them).' }),
    created_at: z.string(),
    read: z.boolean(),
    emoji: z.string().nullable(),
    title: z.string().nullable().openapi({ description: 'Plain text.' }),
    text: z.string().nullable(),
    url: z.string().nullable().openapi({ description: 'Web URL of the target.' }),
    actor: MentionedUserSchema.nullable(),
    todo_id: z.string().nullable().optional(),
  })
  .openapi('Notification')

export const PaginatedNotifications = paginated(NotificationSchema, 'PaginatedNotifications')
  .extend({ unread_count: z.number().int().openapi({ description: 'Unread notifications across all pages (the badge).' }) })
  .openapi('PaginatedNotifications')

export const NotificationPreferenceSchema = z
  .object({
    identifier: z.string(),
    name: z.string(),
    description: z.string().nullable(),
    mobile_push_enabled: z.boolean(),
  })
  .openapi('NotificationPreference')

export const DeviceTokenSchema = z
  .object({
    token: z.string(),
    platform: z.enum(['ios', 'macos']),
    apns_environment: z.enum(['production', 'sandbox']),
    created_at: z.string(),
  })
  .openapi('DeviceToken')

export const listNotifications = createRoute({
  method: 'get',
  path: '/v1/notifications',
  tags: ['Notifications'],
  summary: 'Your notifications',
  description: `Newest first. ${scope}`,
  request: {
    query: PaginationQuery.extend({
      unread: z.enum(['true', 'false'], { error: 'unread must be true or false' }).optional().openapi({ description: 'true: only unread notifications.' }),
    }),
  },
  responses: { 200: jsonContent(PaginatedNotifications, 'A page of notifications'), ...errors(401, 403, 404, 422) },
})

export const readNotifications = createRoute({
  method: 'post',
  path: '/v1/notifications/reading',
  tags: ['Notifications'],
  summary: 'Mark every notification read',
  description: `unread_count becomes 0. ${scope}`,
  responses: { 204: NoContent, ...errors(401, 403) },
})

export const markAsRead = createRoute({
  method: 'post',
  path: '/v1/notifications/mark_as_read',
  tags: ['Notifications'],
  summary: 'Mark every notification read (legacy alias)',
  description: `The same as POST /v1/notifications/reading. ${scope}`,
  responses: { 204: NoContent, ...errors(401, 403) },
})

export const registerDevice = createRoute({
  method: 'post',
  path: '/v1/devices',
  tags: ['Notifications'],
  summary: 'Register a device for push',
  description: `An APNs device token in hexadecimal. Idempotent; a token registered to another account moves to yours. ${firstParty}`,
  request: {
    body: {
      required: true,
      content: {
        'application/json': {
          schema: z.object({
            token: z.string({ error: 'token must be a hexadecimal string' }).max(400, { error: 'token must be at most 400 characters' }),
            platform: z.string({ error: 'platform must be ios or macos' }),
            apns_environment: z.string({ error: 'apns_environment must be production or sandbox' }).nullable().optional(),
          }).openapi('RegisterDevice'),
        },
      },
    },
  },
  responses: { 201: jsonContent(DeviceTokenSchema, 'The device'), ...errors(401, 403, 422, 429) },
})

export const deleteDevice = createRoute({
  method: 'delete',
  path: '/v1/devices/{token}',
  tags: ['Notifications'],
  summary: 'Unregister a device',
  description: `204 also when the token is unknown. ${firstParty}`,
  request: { params: z.object({ token: z.string().max(400).openapi({ param: { name: 'token', in: 'path' } }) }) },
  responses: { 204: NoContent, ...errors(401, 403) },
})

export const listPreferences = createRoute({
  method: 'get',
  path: '/v1/notification_preferences',
  tags: ['Notifications'],
  summary: 'Notification preferences',
  description: `Every notification type and whether it is pushed to your devices. Email and web push are managed on the website. ${scope}`,
  responses: {
    200: jsonContent(z.object({ data: z.array(NotificationPreferenceSchema) }).openapi('NotificationPreferences'), 'Every type'),
    ...errors(401, 403),
  },
})

export const updatePreference = createRoute({
  method: 'patch',
  path: '/v1/notification_preferences/{identifier}',
  tags: ['Notifications'],
  summary: 'Change a notification preference',
  description: `404 for an unknown type. ${scope}`,
  request: {
    params: z.object({ identifier: z.string().max(100).openapi({ param: { name: 'identifier', in: 'path' } }) }),
    body: {
      required: true,
      content: { 'application/json': { schema: z.object({ mobile_push_enabled: z.boolean({ error: 'mobile_push_enabled must be true or false' }).optional() }).openapi('UpdateNotificationPreference') } },
    },
  },
  responses: { 200: jsonContent(NotificationPreferenceSchema, 'The preference'), ...errors(401, 403, 404, 422) },
})
