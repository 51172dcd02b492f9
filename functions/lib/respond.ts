// From a validated request to the response: one api function call, its JSON text passed
// through untouched (no parse and re-serialize on the hot path).
import { Buffer } from 'node:buffer'
import type { Access } from './db.ts'
import { callApiBytes, credentialRefused } from './db.ts'
import { AdmissionRefused, type ReadReport, type ReadTotals } from './admission.ts'
import type { AppContext } from './context.ts'
import { ApiError } from './errors.ts'
import { accessOf } from './access.ts'
import { weakTag } from './encoding.ts'
import { IDEMPOTENT_REPLAYED_HEADER, idempotencyKeyOf, requestFingerprint } from './idempotency.ts'

/**
 * The one SQL call of a request, returning the function's JSON text. It runs in its member's
 * turn (functions/lib/admission.ts), a read counted first, and the database admits it
 * (app.admit_request). With an Idempotency-Key, the same statement claims the key and answers a
 * stored answer instead of running again (functions/lib/idempotency.ts): the caller shapes it as
 * it would the first, and the answer says `Idempotent-Replayed: true`.
 */
export async function callFor(c: AppContext, fn: string, args: unknown[], access?: Access): Promise<string | null> {
  const body = await callForBytes(c, fn, args, access)
  return body === null ? null : body.toString('utf8')
}

/** callFor with the answer as the UTF-8 bytes of its JSON text, for a response that sends it as it is (respond()). */
export async function callForBytes(c: AppContext, fn: string, args: unknown[], access?: Access): Promise<Buffer | null> {
  const credential = c.var.credential
  if (!credential) throw new ApiError(403, 'Authentication required: send an API key or an OAuth access token.')
  const { sql, publicUrl, webUrl } = c.var.deps
  const key = idempotencyKeyOf(c)
  const idempotency = key ? { key, requestHash: await requestFingerprint(c.req.method, c.req.path, fn, args) } : null
  // A lost answer to this call may be asked again safely (errors.ts: Retry-After on its 503).
  if (idempotency) c.set('idempotencyKeyUsed', true)
  try {
    const { body, member, replayed } = await inTurn(c, () =>
      callApiBytes(sql, { credential, access: access ?? accessOf(c), publicUrl, webUrl }, fn, args, idempotency))
    c.var.admission.learn(credential, member)
    if (replayed) c.header(IDEMPOTENT_REPLAYED_HEADER, 'true')
    return body
  } finally {
    // Whatever the answer (a refused read too), this server's read counts reach the database
    // about once a second, and every other server's come back.
    c.var.admission.reconcile((report) => recordReads(c, report))
  }
}

/** Sends this server's read counts (app.record_reads) in a turn of their own, and answers every server's totals. */
async function recordReads(c: AppContext, report: ReadReport): Promise<ReadTotals> {
  const [row] = await c.var.admission.queue.run('record reads', () => c.var.deps.sql.unsafe(
    'select app.record_reads($1::jsonb, $2::timestamptz) as answer', [report.reads, new Date(report.bucket).toISOString()] as never[], { prepare: true }))
  const answer = row!.answer as { rule: { max: number; per_ms: number } | null; totals: ReadTotals['totals'] }
  return { rule: answer.rule && { max: answer.rule.max, perMs: Number(answer.rule.per_ms) }, totals: answer.totals }
}

/**
 * Runs a SQL call of the request in its line's turn: the credential's (a read counted against
 * the member's read limit), or the strangers' shared line without one. A refused turn is 429 or
 * 503 with Retry-After; a caller that left while waiting gets the hang-up answer (errors.ts).
 */
export async function inTurn<T>(c: AppContext, call: () => Promise<T>): Promise<T> {
  const credential = c.var.credential
  const signal = () => c.req.raw.signal
  try {
    if (!credential) return await c.var.admission.runAnonymous(call, signal)
    return await c.var.admission.run(credential, call, { read: c.req.method === 'GET' || c.req.method === 'HEAD', signal })
  } catch (err) {
    if (err instanceof AdmissionRefused) throw new ApiError(err.status, err.message, {}, { 'Retry-After': String(err.retryAfterSeconds) })
    // Revoked since it was last seen: a stranger again, whose next requests no longer queue as its former member's.
    if (credential && credentialRefused(err)) c.var.admission.forget(credential)
    throw err
  }
}

/** The answer of a function that returned SQL null: the JSON text null. */
const NULL_BODY = new TextEncoder().encode('null')

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
  const body = await callForBytes(c, fn, args, options.access)
  const status = options.status ?? 200
  if (status === 204) return c.body(null, 204)
  // Sent as the bytes PostgreSQL sent (callApiBytes): never decoded, never encoded again.
  const bytes = (body ?? NULL_BODY) as Uint8Array<ArrayBuffer>
  // A GET's ETag from the bytes in hand: conditionalGet() then answers If-None-Match without
  // reading the body back (which costs more than the hash on @hono/node-server).
  if (c.req.method === 'GET' && status === 200) {
    return c.body(bytes, 200, { 'content-type': 'application/json; charset=UTF-8', etag: weakTag(bytes) })
  }
  return c.body(bytes, status, { 'content-type': 'application/json; charset=UTF-8' })
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
