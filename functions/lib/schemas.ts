// zod schemas shared by several resources: the contract's shapes (SPEC section 2), used both
// to validate requests and to generate /v1/openapi.json.
import { z } from '@hono/zod-openapi'

export const ErrorSchema = z.object({ error: z.string() }).openapi('Error')

export const ImageSetSchema = z.object({
  small: z.string().nullable(),
  medium: z.string().nullable(),
  large: z.string().nullable(),
})

export const UserSchema = z
  .object({
    id: z.string().openapi({ example: 'user_0b8e3d6f2a8c4b59a1f07c3e9d2b4a61' }),
    username: z.string(),
    streak: z.number().int(),
    best_streak: z.number().int(),
    streaking: z.boolean(),
    created_at: z.string().datetime({ offset: true }),
    updated_at: z.string().datetime({ offset: true }),
    privacy: z.enum(['public', 'protected', 'private']),
    protected: z.boolean().openapi({ deprecated: true }),
    first_name: z.string().nullable(),
    last_name: z.string().nullable(),
    bio: z.string().nullable(),
    location: z.string().nullable(),
    website_url: z.string().nullable(),
    todos_count: z.number().int(),
    time_zone: z.string(),
    dismissed_time_zone: z.string().nullable().optional().openapi({ description: 'Present only on your own record.' }),
    url: z.string(),
    avatar: ImageSetSchema,
    header: ImageSetSchema.nullable(),
    header_color: z.string(),
    followers_count: z.number().int(),
    following: z.boolean().openapi({ description: 'You follow them (for a protected member: they approved you). False when unauthenticated.' }),
    follows_you: z.boolean(),
    follow_requested: z.boolean().openapi({ description: 'Your request to follow them is pending (they are protected and have not answered it). False for yourself and for public members.' }),
    pro: z.boolean(),
  })
  .openapi('User')

export const ProjectSchema = z
  .object({
    id: z.string().openapi({ example: 'proj_5d0c7a1e9b3f4e2d8c6a4b2f0e9d7c5a' }),
    slug: z.string().nullable(),
    name: z.string(),
    pitch: z.string().nullable(),
    description: z.string().nullable(),
    created_at: z.string().datetime({ offset: true }),
    updated_at: z.string().datetime({ offset: true }),
    hashtag: z.string().nullable(),
    website_url: z.string().nullable(),
    github_url: z.string().nullable(),
    privacy: z.enum(['public', 'protected', 'private']),
    protected: z.boolean().openapi({ description: 'Whether `privacy` is `protected` (its profile is visible to everyone, its todos to its makers and approved followers).' }),
    archived: z.boolean(),
    url: z.string(),
    logo: ImageSetSchema,
    header: ImageSetSchema.nullable(),
    header_color: z.string(),
    owner: UserSchema,
    makers: z.array(UserSchema),
    followers_count: z.number().int().openapi({ description: 'Approved followers.' }),
    todos_count: z.number().int().openapi({ description: 'How many of the project’s todos (those of GET /v1/projects/{project_id}/todos) you may see: its public makers’ todos, your own, and those of protected makers you follow; 0 for a protected project you neither make nor follow. Kept as todos are written, so it costs the same whatever the number of todos.' }),
    following: z.boolean(),
    follow_requested: z.boolean().openapi({ description: 'Your request to follow this protected project is pending (a maker has not answered it).' }),
  })
  .openapi('Project')

/** `limit`/`per_page` and `starting_after`/`after` (SPEC Pagination). */
export const PaginationQuery = z.object({
  limit: z.coerce
    .number({ error: 'limit must be a whole number from 1 to 100' })
    .int({ error: 'limit must be a whole number from 1 to 100' })
    .min(1, { error: 'limit must be a whole number from 1 to 100' })
    .optional()
    .openapi({ description: '1 to 100, default 25; values above 100 are clamped to 100.' }),
  per_page: z.coerce
    .number({ error: 'per_page must be a whole number from 1 to 100' })
    .int({ error: 'per_page must be a whole number from 1 to 100' })
    .min(1, { error: 'per_page must be a whole number from 1 to 100' })
    .optional()
    .openapi({ description: 'Alias of limit.' }),
  starting_after: z.string().optional().openapi({ description: 'The `after` value of the previous page.' }),
  after: z.string().optional().openapi({ description: 'Alias of starting_after.' }),
})

export type PaginationArgs = z.infer<typeof PaginationQuery>

/** [limit, cursor] as the api functions take them. */
export function pageArgs(query: PaginationArgs): [number, string | null] {
  const limit = Math.min(query.limit ?? query.per_page ?? 25, 100)
  return [limit, query.starting_after ?? query.after ?? null]
}

/** What total_count means on the todo lists (issue 26): exact, except a full-text count. */
export const TODO_TOTAL_COUNT_DESCRIPTION =
  'How many todos the whole list holds (not just this page), as you may see them. Exact, except with `query`: '
  + 'then matches are counted up to 100, so 100 means 100 or more (keep paging with `after` for the rest; '
  + '/v1/search/todos returns the newest 100 matches at most, and counts those). Unfiltered and with `since`/`until` '
  + 'the count is kept as todos are written, so it costs the same whatever the number of todos.'

export function paginated<T extends z.ZodTypeAny>(item: T, name: string, totalCount?: string) {
  return z
    .object({
      data: z.array(item),
      has_more: z.boolean(),
      total_count: totalCount ? z.number().int().openapi({ description: totalCount }) : z.number().int(),
      after: z.string().nullable(),
    })
    .openapi(name)
}

/** Error responses a route declares, by status. */
export function errors(...statuses: number[]) {
  const descriptions: Record<number, string> = {
    400: 'Bad request',
    401: 'No active subscription (body adds upgrade_url)',
    403: 'Missing, invalid or insufficient credential',
    404: 'Not found',
    409: 'Conflict',
    422: 'Invalid input',
    429: 'Rate limited (Retry-After header)',
  }
  return Object.fromEntries(
    statuses.map((s) => [s, { description: descriptions[s] ?? 'Error', content: { 'application/json': { schema: ErrorSchema } } }]),
  )
}

export function jsonContent<T extends z.ZodTypeAny>(schema: T, description: string) {
  return { description, content: { 'application/json': { schema } } }
}

export const MentionedProjectSchema = z
  .object({
    id: z.string(),
    slug: z.string().nullable(),
    name: z.string(),
    hashtag: z.string().nullable(),
    url: z.string(),
    logo: ImageSetSchema,
  })
  .openapi('MentionedProject')

export const MentionedUserSchema = z
  .object({
    id: z.string(),
    username: z.string(),
    first_name: z.string().nullable(),
    last_name: z.string().nullable(),
    url: z.string(),
    avatar: ImageSetSchema,
  })
  .openapi('MentionedUser')

export const AttachmentSchema = z
  .object({
    id: z.string(),
    created_at: z.string().datetime({ offset: true }),
    updated_at: z.string().datetime({ offset: true }),
    url: z.string(),
    mime_type: z.string(),
    filename: z.string(),
    width: z.number().int().nullable(),
    height: z.number().int().nullable(),
    aspect_ratio: z.number().nullable(),
  })
  .openapi('Attachment')

export const ReactionSchema = z
  .object({
    id: z.string().openapi({ example: 'reac_3c1d0e2f4a5b6c7d8e9f0a1b2c3d4e5f' }),
    created_at: z.string().datetime({ offset: true }),
    reactable_type: z.enum(['Todo', 'Comment']),
    reactable_id: z.string(),
    reactor: UserSchema,
  })
  .openapi('Reaction')

const IdOnly = z.object({ id: z.string() })

export const TodoSchema = z
  .object({
    id: z.string().openapi({ example: 'todo_8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d' }),
    created_at: z.string().datetime({ offset: true }),
    updated_at: z.string().datetime({ offset: true }),
    body: z.string(),
    url: z.string(),
    attachments: z.array(AttachmentSchema),
    creator: UserSchema,
    creator_id: z.string().openapi({ deprecated: true, description: 'Use creator.id.' }),
    user_id: z.string().optional().openapi({ deprecated: true, description: 'Use creator.id.' }),
    projects: z.array(ProjectSchema).max(1),
    mentioned_projects: z.array(MentionedProjectSchema),
    mentioned_users: z.array(MentionedUserSchema),
    reactions_count: z.number().int(),
    reactions: z.array(ReactionSchema).max(5).optional().openapi({ description: 'Only with expand=reactions: the five newest, newest first.' }),
    comments_count: z.number().int(),
    viewer: z.object({ reactions: z.array(IdOnly), comments: z.array(IdOnly) }),
  })
  .openapi('Todo')

/** The most IDs one request may send in an array (attachments, remove_attachment_ids, project_ids). */
export const MAX_IDS_PER_REQUEST = 20

/** An array of IDs in a request body: strings, at most MAX_IDS_PER_REQUEST (422 above). */
export const idList = (field: string) =>
  z.array(z.string({ error: `${field} must be an array of strings` }), { error: `${field} must be an array of strings` })
    .max(MAX_IDS_PER_REQUEST, { error: `${field} may hold at most ${MAX_IDS_PER_REQUEST} items` })

/** Query parameters of every todo list (SPEC "Todo filter parameters" and "Expansion"). */
export const TodoListQuery = PaginationQuery.extend({
  since: z.string().optional().openapi({ description: 'Created at or after: Unix seconds or milliseconds, YYYY, YYYY-MM, YYYY-MM-DD or ISO 8601. Dates and times without a zone are in your time zone.' }),
  until: z.string().optional().openapi({ description: 'Created up to: same forms as since; a date or period includes all of it.' }),
  query: z.string().optional().openapi({ description: 'Full text: every word a prefix match, -word excludes. At most 256 characters and 16 search terms as the parser splits them (e-mail is 3), at most 8 from one word; 400 beyond.', example: 'feature -bug' }),
  expand: z.union([z.string(), z.array(z.string())]).optional().openapi({ description: 'Only `reactions`. Comma-separated or repeated; `expand[]` is accepted too.' }),
  'expand[]': z.union([z.string(), z.array(z.string())]).optional(),
})

export const CommentSchema = z
  .object({
    id: z.string().openapi({ example: 'comm_1f2e3d4c5b6a79880716253443526170' }),
    body: z.string(),
    attachments: z.array(AttachmentSchema),
    created_at: z.string().datetime({ offset: true }),
    updated_at: z.string().datetime({ offset: true }),
    url: z.string(),
    reactions_count: z.number().int(),
    viewer: z.object({ reactions: z.array(IdOnly) }),
    creator: UserSchema,
    mentioned_projects: z.array(MentionedProjectSchema),
    mentioned_users: z.array(MentionedUserSchema),
    parent_id: z.string().nullable().openapi({ description: 'The comment this one replies to; null for a top-level comment. (An addition to SPEC 1.4.0.)' }),
  })
  .openapi('Comment')

/** Path parameters shared by several resources. */
export const Params = {
  todo: z.object({
    todo_id: z.string().min(1).openapi({ param: { name: 'todo_id', in: 'path' }, description: 'todo_ ID or numeric ID.' }),
  }),
  user: z.object({
    user_id: z.string().min(1).openapi({ param: { name: 'user_id', in: 'path' }, description: 'Username, user_ ID, or `me`.' }),
  }),
  project: z.object({
    project_id: z.string().min(1).openapi({ param: { name: 'project_id', in: 'path' }, description: 'proj_ ID or slug.' }),
  }),
}

/** The 204 of idempotent actions. */
export const NoContent = { description: 'Done (no body)' }

export const MessageSchema = z
  .object({
    id: z.string().openapi({ example: 'message_6a5b4c3d2e1f00112233445566778899' }),
    conversation_id: z.string(),
    body: z.string(),
    client_message_id: z.string().nullable(),
    created_at: z.string().datetime({ offset: true }),
    updated_at: z.string().datetime({ offset: true }),
    creator: UserSchema,
    attachment: z.object({
      url: z.string(),
      mime_type: z.string(),
      filename: z.string(),
      byte_size: z.number().int(),
      width: z.number().int().nullable().optional(),
      height: z.number().int().nullable().optional(),
    }).nullable().openapi('MessageAttachment'),
    reactions: z.array(z.object({ content: z.string(), created_at: z.string().datetime({ offset: true }), user: UserSchema }).openapi('MessageReaction')),
  })
  .openapi('Message')

export const ConversationSchema = z
  .object({
    id: z.string().openapi({ example: 'conversation_00112233445566778899aabbccddeeff' }),
    created_at: z.string().datetime({ offset: true }),
    updated_at: z.string().datetime({ offset: true }),
    unread: z.boolean(),
    user: UserSchema,
    last_message: MessageSchema.nullable(),
  })
  .openapi('Conversation')
