// Todos: post, read, edit, delete, preview a deletion, and every list of todos.
import { ApiError } from '../lib/errors.ts'
import { type TodoFilterQuery, expandsReactions, todoFilters } from '../lib/filters.ts'
import { createRouter, describeIssue } from '../lib/router.ts'
import { respond } from '../lib/respond.ts'
import { MAX_IDS_PER_REQUEST, type PaginationArgs, pageArgs } from '../lib/schemas.ts'
import { uploadIds } from '../uploads/signed-ids.ts'
import * as routes from './todos.routes.ts'

/** The todo to create, from JSON or from a form (`body`, `attachments[]`). */
function createInput(contentType: string | undefined, json: unknown, form: unknown): { body: string; attachments: string[] } {
  if (/^application\/([a-z.+-]*\+)?json/i.test(contentType ?? '')) {
    const input = json as { body: string; attachments?: string[] }
    return { body: input.body, attachments: input.attachments ?? [] }
  }
  if (/^(application\/x-www-form-urlencoded|multipart\/form-data)/i.test(contentType ?? '')) {
    const input = form as { body: string; 'attachments[]'?: string | string[] }
    const attachments = input['attachments[]'] === undefined ? [] : [input['attachments[]']].flat()
    if (attachments.length > MAX_IDS_PER_REQUEST) throw new ApiError(422, `attachments may hold at most ${MAX_IDS_PER_REQUEST} items`)
    return { body: input.body, attachments }
  }
  throw new ApiError(422, 'Send the todo as JSON (application/json) or as a form (application/x-www-form-urlencoded) with a body field.')
}

/** The filter, page and expand arguments every todo list function takes, in order. */
function listArgs(query: TodoFilterQuery & PaginationArgs, url: string): unknown[] {
  return [todoFilters(query), ...pageArgs(query), expandsReactions(url)]
}

export const todos = createRouter()
  .openapi(routes.createTodo, async (c) => {
    const contentType = c.req.header('content-type')
    const isJson = /json/i.test(contentType ?? '')
    const input = createInput(contentType, isJson ? c.req.valid('json') : undefined, isJson ? undefined : c.req.valid('form'))
    if (!input.body) throw new ApiError(422, describeIssue({ path: ['body'], message: 'body is required' }))
    const response = await respond(c, 'api.todo_create', [input.body, await uploadIds(c, input.attachments)], { status: 201 })
    c.var.deps.onTodoCreated?.()
    return response
  })
  .openapi(routes.timeline, (c) => respond(c, 'api.timeline', listArgs(c.req.valid('query'), c.req.url)))
  .openapi(routes.listTodos, (c) => respond(c, 'api.todos_list', listArgs(c.req.valid('query'), c.req.url)))
  .openapi(routes.getTodo, (c) => respond(c, 'api.todo_get', [c.req.valid('param').todo_id, expandsReactions(c.req.url)]))
  .openapi(routes.updateTodo, async (c) => {
    const patch = c.req.valid('json')
    return respond(c, 'api.todo_update', [c.req.valid('param').todo_id, { ...patch, attachments: await uploadIds(c, patch.attachments) }])
  })
  .openapi(routes.deleteTodo, (c) => respond(c, 'api.todo_delete', [c.req.valid('param').todo_id], { status: 204 }))
  .openapi(routes.deletionPreview, (c) =>
    respond(c, 'api.todo_deletion_preview', [c.req.valid('param').todo_id], { access: 'read' }))
  .openapi(routes.userTodos, (c) =>
    respond(c, 'api.user_todos', [c.req.valid('param').username, ...listArgs(c.req.valid('query'), c.req.url)]))
  .openapi(routes.projectTodos, (c) =>
    respond(c, 'api.project_todos', [c.req.valid('param').project_id, ...listArgs(c.req.valid('query'), c.req.url)]))
