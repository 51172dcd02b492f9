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
    following: z.boolean(),
    follows_you: z.boolean(),
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
    archived: z.boolean(),
    url: z.string(),
    logo: ImageSetSchema,
    header: ImageSetSchema.nullable(),
    header_color: z.string(),
    owner: UserSchema,
    makers: z.array(UserSchema),
    followers_count: z.number().int(),
    following: z.boolean(),
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

/** [limit, cursor] as the api functions take them. */
export function pageArgs(query: z.infer<typeof PaginationQuery>): [number, string | null] {
  const limit = Math.min(query.limit ?? query.per_page ?? 25, 100)
  return [limit, query.starting_after ?? query.after ?? null]
}

export function paginated<T extends z.ZodTypeAny>(item: T, name: string) {
  return z
    .object({
      data: z.array(item),
      has_more: z.boolean(),
      total_count: z.number().int(),
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
