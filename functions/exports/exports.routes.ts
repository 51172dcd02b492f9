import { createRoute, z } from '@hono/zod-openapi'
import { PaginationQuery, UserSchema, errors, jsonContent, paginated } from '../lib/schemas.ts'
import { NotificationPreferenceSchema } from '../notifications/notifications.routes.ts'

export const ExportSchema = z.object({
  id: z.string().openapi({ example: 'exp_1f2e3d4c5b6a79880716253443526170' }),
  status: z.enum(['pending', 'running', 'ready', 'failed']).openapi({
    description: '`pending` until the worker starts, `running` while it writes the archive, `ready` once it can be downloaded, `failed` after three failed attempts (ask again).',
  }),
  created_at: z.string().datetime({ offset: true }),
  completed_at: z.string().datetime({ offset: true }).nullable().openapi({ description: 'When it became ready or failed.' }),
  expires_at: z.string().datetime({ offset: true }).nullable().openapi({ description: 'When `url` stops working and the archive is deleted: 24 hours after completion.' }),
  byte_size: z.number().int().nullable().openapi({ description: 'Size of the archive once ready.' }),
  url: z.string().nullable().openapi({ description: 'Download link of the archive (an ExportArchive, JSON), while ready and before expires_at; null otherwise. The link is the capability (no credential needed) and works only while the export does: not after expires_at, nor once the account is deleted.' }),
}).openapi('Export')

const Attachment = z.object({
  id: z.string(), filename: z.string(), mime_type: z.string(), byte_size: z.number().int(), url: z.string(), created_at: z.string().nullable(),
})
const Since = z.object({ id: z.string(), username: z.string(), since: z.string() })

/** What the download `url` serves: the documentation of the archive's shape (the worker writes it, functions/lib/exports.ts). */
export const ExportArchiveSchema = z.object({
  format: z.literal('todo-sharing-export'),
  version: z.literal(1),
  export_id: z.string(),
  exported_at: z.string().datetime({ offset: true }),
  profile: UserSchema.extend({ email: z.string().nullable() }).openapi({ description: 'You, as GET /v1/users/me shows you, with the e-mail address of the account.' }),
  todos: z.array(z.object({
    id: z.string(), number: z.number().int(), url: z.string(), body: z.string(),
    created_at: z.string(), updated_at: z.string(), local_date: z.string().openapi({ description: 'The day it counts toward (streaks).' }),
    project_id: z.string().nullable(),
    mentioned_projects: z.array(z.object({ id: z.string(), hashtag: z.string().nullable() })),
    mentioned_users: z.array(z.object({ id: z.string(), username: z.string() })),
    attachments: z.array(Attachment).openapi({ description: 'With the URL each file is served at.' }),
    reactions_count: z.number().int(), comments_count: z.number().int(),
  })).openapi({ description: 'All your todos, oldest first.' }),
  comments: z.array(z.object({
    id: z.string(), todo_id: z.string(), parent_id: z.string().nullable(), body: z.string(),
    created_at: z.string(), updated_at: z.string(), attachments: z.array(Attachment),
  })).openapi({ description: 'Every comment and reply you wrote, on anyone’s todo, oldest first.' }),
  reactions: z.array(z.object({ id: z.string(), reactable_type: z.enum(['Todo', 'Comment']), reactable_id: z.string(), created_at: z.string() })),
  projects: z.array(z.object({
    id: z.string(), name: z.string(), slug: z.string().nullable(), hashtag: z.string().nullable(), pitch: z.string().nullable(),
    description: z.string().nullable(), website_url: z.string().nullable(), github_url: z.string().nullable(),
    privacy: z.enum(['public', 'protected', 'private']), archived: z.boolean(), owner: z.boolean(), url: z.string(),
    created_at: z.string(), updated_at: z.string(),
  })).openapi({ description: 'Projects you make (accepted maker); owner: you own it.' }),
  following: z.array(Since).openapi({ description: 'Members you follow.' }),
  followers: z.array(Since).openapi({ description: 'Members who follow you.' }),
  followed_projects: z.array(z.object({ id: z.string(), name: z.string(), since: z.string() })),
  mutes: z.array(Since),
  webhook_subscriptions: z.array(z.object({
    id: z.string(), url: z.string(), event_type: z.string(), project_ids: z.array(z.string()), active: z.boolean(),
    created_at: z.string(), updated_at: z.string(),
  })).openapi({ description: 'Without their signing secrets.' }),
  notification_preferences: z.array(NotificationPreferenceSchema).openapi({ description: 'Your notification preferences: every type, as GET /v1/notification_preferences shows them.' }),
}).openapi('ExportArchive')

const ExportParam = z.object({
  export_id: z.string().min(1).openapi({ param: { name: 'export_id', in: 'path' }, description: 'exp_ ID.' }),
})

const ACCESS = 'Needs a read-write key, or the write scope from a first-party app: an archive holds your e-mail address, your mutes and your webhook URLs (which often carry receivers’ credentials), which third-party apps are never shown. Answered without an active subscription too (never 401): your data is yours to take whether or not you pay.'

export const createExport = createRoute({
  method: 'post',
  path: '/v1/exports',
  tags: ['Exports'],
  summary: 'Export your data',
  description: `Starts an export of your own data: 202 with a pending Export; poll GET /v1/exports/{export_id} until it is ready, then download its url (an ExportArchive, JSON). One export at a time (429 while one is pending or running), at most 10 a day (429). No request body. ${ACCESS}`,
  responses: { 202: jsonContent(ExportSchema, 'The export, pending'), ...errors(403, 429) },
})

export const listExports = createRoute({
  method: 'get',
  path: '/v1/exports',
  tags: ['Exports'],
  summary: 'Your exports',
  description: `Newest first. ${ACCESS}`,
  request: { query: PaginationQuery },
  responses: { 200: jsonContent(paginated(ExportSchema, 'PaginatedExports'), 'A page of exports'), ...errors(403, 404, 422) },
})

export const getExport = createRoute({
  method: 'get',
  path: '/v1/exports/{export_id}',
  tags: ['Exports'],
  summary: 'An export: its progress, and once ready its download link',
  description: `404 for anyone else’s. While \`ready\`, \`url\` downloads the archive until \`expires_at\` (24 hours). ${ACCESS}`,
  request: { params: ExportParam },
  responses: { 200: jsonContent(ExportSchema, 'The export'), ...errors(403, 404) },
})
