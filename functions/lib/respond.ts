// From a validated request to the response: one api function call, its JSON text passed
// through untouched (no parse and re-serialize on the hot path).
import type { Access } from './db.ts'
import { callApi } from './db.ts'
import type { AppContext } from './context.ts'
import { ApiError } from './errors.ts'
import { accessOf } from './access.ts'
import { weakTag } from './encoding.ts'

/** The one SQL call of a request, returning the function's JSON text. */
export async function callFor(c: AppContext, fn: string, args: unknown[], access?: Access): Promise<string | null> {
  const credential = c.var.credential
  if (!credential) throw new ApiError(403, 'Authentication required: send an API key or an OAuth access token.')
  const { sql, publicUrl, webUrl } = c.var.deps
  return await callApi(sql, { credential, access: access ?? accessOf(c), publicUrl, webUrl }, fn, args)
}

export interface RespondOptions {
  /** Defaults to the route's row of the authorization table (functions/lib/access.ts). */
  access?: Access
  /** Success status; 204 sends no body. */
  status?: 200 | 201 | 204
}

/**
 * The result is typed `any` on purpose: the body is JSON text built by SQL, not a typed
 * object, so the route's zod response schema is enforced by the contract tests (which
 * parse every response with it) rather than by the compiler.
 */
// biome-ignore lint/suspicious/noExplicitAny: see above
export async function respond(c: AppContext, fn: string, args: unknown[], options: RespondOptions = {}): Promise<any> {
  const body = await callFor(c, fn, args, options.access)
  const status = options.status ?? 200
  if (status === 204) return c.body(null, 204)
  const text = body ?? 'null'
  // A GET's ETag from the text in hand: conditionalGet() then answers If-None-Match without
  // reading the body back (which costs more than the hash on @hono/node-server).
  if (c.req.method === 'GET' && status === 200) {
    return c.body(text, 200, { 'content-type': 'application/json; charset=UTF-8', etag: await weakTag(text) })
  }
  return c.body(text, status, { 'content-type': 'application/json; charset=UTF-8' })
}

/**
 * For the few endpoints whose success status depends on the data (200 existing / 201 new):
 * the function returns {"status": n, "body": …}.
 */
// biome-ignore lint/suspicious/noExplicitAny: see respond()
export async function respondWithStatus(c: AppContext, fn: string, args: unknown[], access?: Access): Promise<any> {
  const { status, body } = JSON.parse((await callFor(c, fn, args, access)) ?? '{}') as { status: 200 | 201; body: unknown }
  return c.json(body, status)
}
