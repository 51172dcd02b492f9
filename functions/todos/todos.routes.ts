import { createRoute, z } from '@hono/zod-openapi'
import { TODO_TOTAL_COUNT_DESCRIPTION, TodoListQuery, TodoSchema, errors, idList, jsonContent, paginated } from '../lib/schemas.ts'

const TodoParam = z.object({
  todo_id: z.string().min(1).openapi({ param: { name: 'todo_id', in: 'path' }, description: 'todo_ ID or numeric ID.' }),
})
const UsernameParam = z.object({
  username: z.string().min(1).openapi({ param: { name: 'username', in: 'path' }, description: 'Username, user_ ID, or `me`.' }),
})
const ProjectParam = z.object({
  project_id: z.string().min(1).openapi({ param: { name: 'project_id', in: 'path' }, description: 'proj_ ID or slug.' }),
})
const ExpandQuery = z.object({
  expand: z.union([z.string(), z.array(z.string())]).optional().openapi({ description: 'Only `reactions`.' }),
  'expand[]': z.union([z.string(), z.array(z.string())]).optional(),
})

const body = z.string({ error: 'body must be a string' }).trim().min(1, { error: 'body must not be empty' })
  .max(10000, { error: 'body must be at most 10000 characters' })
const signedIds = idList

export const CreateTodoBody = z.object({
  body,
  attachments: signedIds('attachments').optional().openapi({ description: 'Signed IDs of uploads (POST /v1/uploads).' }),
}).openapi('CreateTodo')

export const CreateTodoForm = z.object({
  body,
  'attachments[]': z.union([z.string(), z.array(z.string())]).optional(),
})

export const UpdateTodoBody = z.object({
  body: body.optional(),
  attachments: signedIds('attachments').optional().openapi({ description: 'Signed IDs to add (additive).' }),
  remove_attachment_ids: signedIds('remove_attachment_ids').optional().openapi({ description: 'IDs of attachments to remove.' }),
}).openapi('UpdateTodo')

const PaginatedTodos = paginated(TodoSchema, 'PaginatedTodos', TODO_TOTAL_COUNT_DESCRIPTION)

export const createTodo = createRoute({
  method: 'post',
  path: '/v1/todos',
  tags: ['Todos'],
  summary: 'Post a finished todo',
  description: 'JSON, or a form-encoded body with the field `body` (and `attachments[]`).',
  request: {
    body: {
      content: {
        'application/json': { schema: CreateTodoBody },
        'application/x-www-form-urlencoded': { schema: CreateTodoForm },
      },
    },
  },
  responses: { 201: jsonContent(TodoSchema, 'The new todo'), ...errors(400, 401, 403, 422, 429) },
})

export const listTodos = createRoute({
  method: 'get',
  path: '/v1/todos',
  tags: ['Todos'],
  summary: 'Todos you can see',
  description: 'Every todo visible to you (public members, members you follow if protected, your own), newest first, with the filters of every todo list.',
  request: { query: TodoListQuery },
  responses: { 200: jsonContent(PaginatedTodos, 'A page of todos'), ...errors(400, 401, 403, 404, 422) },
})

export const getTodo = createRoute({
  method: 'get',
  path: '/v1/todos/{todo_id}',
  tags: ['Todos'],
  summary: 'A todo',
  request: { params: TodoParam, query: ExpandQuery },
  responses: { 200: jsonContent(TodoSchema, 'The todo'), ...errors(400, 401, 403, 404) },
})

export const updateTodo = createRoute({
  method: 'patch',
  path: '/v1/todos/{todo_id}',
  tags: ['Todos'],
  summary: 'Edit your todo',
  request: { params: TodoParam, body: { required: true, content: { 'application/json': { schema: UpdateTodoBody } } } },
  responses: { 200: jsonContent(TodoSchema, 'The todo, edited'), ...errors(400, 401, 403, 404, 422, 429) },
})

export const deleteTodo = createRoute({
  method: 'delete',
  path: '/v1/todos/{todo_id}',
  tags: ['Todos'],
  summary: 'Delete your todo',
  description: 'Permanently deletes it with its comments, reactions and attachments.',
  request: { params: TodoParam },
  responses: { 204: { description: 'Deleted' }, ...errors(401, 403, 404, 429) },
})

export const DeletionPreviewSchema = z.object({
  impact: z.enum(['none', 'empties_today', 'empties_past_day', 'breaks_current_streak']),
  safe_to_delete: z.boolean(),
  date: z.string().nullable(),
  current_streak: z.number().int(),
}).openapi('DeletionPreview')

export const deletionPreview = createRoute({
  method: 'get',
  path: '/v1/todos/{todo_id}/deletion_preview',
  tags: ['Todos'],
  summary: 'What deleting your todo does to your streak',
  request: { params: TodoParam },
  responses: { 200: jsonContent(DeletionPreviewSchema, 'The impact'), ...errors(401, 403, 404) },
})

export const userTodos = createRoute({
  method: 'get',
  path: '/v1/users/{username}/todos',
  tags: ['Todos', 'Users'],
  summary: "A member's todos",
  description: 'Newest first; empty when their privacy does not let you see them.',
  request: { params: UsernameParam, query: TodoListQuery },
  responses: { 200: jsonContent(PaginatedTodos, 'A page of todos'), ...errors(400, 401, 403, 404, 422) },
})

export const projectTodos = createRoute({
  method: 'get',
  path: '/v1/projects/{project_id}/todos',
  tags: ['Todos', 'Projects'],
  summary: "A project's todos",
  description: "Todos that belong to the project: its makers' todos whose first maker #hashtag is this project.",
  request: { params: ProjectParam, query: TodoListQuery },
  responses: { 200: jsonContent(PaginatedTodos, 'A page of todos'), ...errors(400, 401, 403, 404, 422) },
})

export const timeline = createRoute({
  method: 'get',
  path: '/v1/timeline',
  tags: ['Todos'],
  summary: 'Your timeline',
  description: 'Your own todos and those of members and projects you follow, minus members you muted, newest first, with the filters of every todo list.',
  request: { query: TodoListQuery },
  responses: { 200: jsonContent(PaginatedTodos, 'A page of todos'), ...errors(400, 401, 403, 404, 422) },
})
