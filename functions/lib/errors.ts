// Every error leaves the API as {"error": "sentence"} with the right status: this module is
// the one place that maps database errors, validation failures and HTTP exceptions.
import type { Context } from 'hono'
import { HTTPException } from 'hono/http-exception'
import { NO_RESULT_ROW } from './db.ts'
import { DATABASE_SILENT } from './sql.ts'

/** An error raised on the HTTP side, before or instead of a SQL call. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly extra: Record<string, unknown> = {},
    /** Headers of the answer, such as the Retry-After of a 429. */
    readonly headers: Record<string, string> = {},
  ) {
    super(message)
  }
}

interface PostgresLikeError {
  code?: string
  message: string
  detail?: string
}

function isPostgresError(err: unknown): err is PostgresLikeError {
  return typeof err === 'object' && err !== null && typeof (err as { code?: unknown }).code === 'string'
    && (err as { name?: string }).name === 'PostgresError'
}

/** SQLSTATEs that come from bad input rather than from a bug, and how to answer them. */
const SQLSTATE_STATUS: Record<string, [number, string]> = {
  '22P02': [422, 'A value has the wrong format.'],
  '22021': [422, 'A value contains a character that is not allowed, such as a NUL byte.'],
  // The same NUL byte in a value sent inside a jsonb argument (filters, attachments, …): jsonb
  // cannot hold \u0000, and says so with this code (found by test/fuzz.test.ts).
  '22P05': [422, 'A value contains a character that is not allowed, such as a NUL byte.'],
  '22023': [422, 'A value is not allowed.'],
  '2201X': [422, 'A value is out of range.'],
  '22001': [422, 'A value is too long.'],
  '22003': [422, 'A number is out of range.'],
  '22007': [422, 'A date or time has the wrong format.'],
  '22008': [422, 'A date or time is out of range.'],
  '23502': [422, 'A required value is missing.'],
  '23503': [422, 'A referenced record does not exist.'],
  '23505': [409, 'This record already exists.'],
  '23514': [422, 'A value is not allowed.'],
  '42501': [403, 'You are not allowed to do this.'],
  '57014': [503, 'The request took too long; try again.'],
  '40001': [503, 'The request conflicted with another; try again.'],
  '40P01': [503, 'The request conflicted with another; try again.'],
}

/**
 * The database cannot be reached or is going away (a restart, a failover, a full pool on the
 * server side). PostgreSQL's side: class 08 (connection exception), 57P01-57P03 (admin and crash
 * shutdown, cannot connect now), 53300 (too many connections). postgres.js's side: the socket's
 * errors and its own CONNECTION_* codes (src/errors.js).
 *
 * Two kinds, because a blind retry is safe only for one (a POST sent twice without an
 * Idempotency-Key makes two todos). Not applied: no connection was made, or PostgreSQL ended the
 * session itself, rolling back what was under way (it answers a COMMIT before it acts on a
 * shutdown), or postgres.js never sent the statement. Outcome unknown: the connection broke while
 * a statement (perhaps a COMMIT) was under way, so the write may have been committed with only
 * its answer lost; that answer says so and tells the client to send the request again with its
 * Idempotency-Key (the key commits with the write, so the retry is answered with the first answer
 * if it took effect, and runs once if it did not: functions/lib/idempotency.ts). It carries
 * Retry-After when sending it again is safe (see describeError's `retrySafe`): a request that
 * used its Idempotency-Key, or a read. A write without a key gets none: a client that retries
 * whatever says Retry-After would make a second todo (issue 29: the outcome-unknown 503 "tells
 * the client to retry with its key"; the cancelled statement, 57014, is surely not applied and
 * always has it).
 */
const NOT_APPLIED_SQLSTATE = /^(08001|08004|57P0[123]|53300)$/
const OUTCOME_UNKNOWN_SQLSTATE = /^08...$/
const NOT_APPLIED_SOCKET_CODES = new Set([
  'ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'CONNECT_TIMEOUT', 'CONNECTION_ENDED',
])
// CONNECTION_DESTROYED: sql.end() cut the statement under way (at shutdown), which may have
// committed. NO_RESULT_ROW: the statement came back without its row (functions/lib/db.ts).
// DATABASE_SILENT: nobody answered the statement by its deadline (functions/lib/sql.ts); it may
// have committed with only the answer lost on the way.
const OUTCOME_UNKNOWN_SOCKET_CODES = new Set(['ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'CONNECTION_CLOSED', 'CONNECTION_DESTROYED', NO_RESULT_ROW, DATABASE_SILENT])
const UNAVAILABLE_MESSAGE = 'The database is unavailable right now; try again shortly.'
const OUTCOME_UNKNOWN_MESSAGE =
  'The connection to the database broke while the request ran: it may or may not have taken effect. If you sent an Idempotency-Key, send the request again '
  + 'with the same key: you get its answer if it took effect, and it runs once if it did not. Without a key, check before sending it again.'

function databaseFailure(err: unknown): 'not-applied' | 'outcome-unknown' | null {
  if (typeof err !== 'object' || err === null) return null
  const code = (err as { code?: unknown }).code
  if (typeof code !== 'string') return null
  if (isPostgresError(err)) {
    if (NOT_APPLIED_SQLSTATE.test(code)) return 'not-applied'
    return OUTCOME_UNKNOWN_SQLSTATE.test(code) ? 'outcome-unknown' : null
  }
  if (NOT_APPLIED_SOCKET_CODES.has(code)) return 'not-applied'
  return OUTCOME_UNKNOWN_SOCKET_CODES.has(code) ? 'outcome-unknown' : null
}

/** Codes postgres.js (and callApi) give the errors of its connections, beside the socket's own (which name their syscall). */
const DRIVER_CODES = new Set(['CONNECT_TIMEOUT', 'CONNECTION_ENDED', 'CONNECTION_CLOSED', 'CONNECTION_DESTROYED', NO_RESULT_ROW, DATABASE_SILENT])

/** Whether an error comes from the database or its connection: PostgreSQL's answer, a socket error of postgres.js, or its own codes. */
function fromDatabase(err: unknown): boolean {
  if (isPostgresError(err)) return true
  if (typeof err !== 'object' || err === null) return false
  const { code, syscall } = err as { code?: unknown; syscall?: unknown }
  return typeof syscall === 'string' || (typeof code === 'string' && DRIVER_CODES.has(code))
}

export const CLIENT_HUNG_UP_MESSAGE = 'The request did not arrive whole: the client closed the connection before sending all of it.'

/**
 * Whether the client went away before its request was read: it hung up mid-body. Reading the
 * body then fails with the HTTP connection's error (on Node, ECONNRESET "aborted", a code the
 * database's socket errors share), which is neither a lost database nor our bug: it is answered
 * 400 (to nobody; the access log keeps it) and logged as nothing else. Known by the request's own
 * signal, which Node's server and Deno.serve abort when the client's connection closes, and an
 * error that did not come from the database (a lost database at the same moment is still one).
 */
export function clientHungUp(err: unknown, request: Request): boolean {
  // An ApiError is an answer we chose (a 403 before the body was read): it stays what it is.
  return request.signal.aborted && !(err instanceof ApiError) && !fromDatabase(err)
}

/** Whether an error says the database is out of reach or was lost (see databaseFailure), not that the request was wrong. */
export function isDatabaseUnavailable(err: unknown): boolean {
  return databaseFailure(err) !== null
}

/** The one log line of an unreachable database (no stack: it repeats for every request while it restarts). */
export function unavailableLogLine(err: unknown): string {
  const { code, message } = err as { code: string; message?: string }
  return `database unavailable: ${code} ${message ?? ''}`.trim()
}

export interface ErrorBody {
  status: number
  body: Record<string, unknown>
  headers: Record<string, string>
}

export interface DescribeOptions {
  /**
   * Whether sending the request again is safe whatever became of it: a read (GET, HEAD), or a
   * write that used its Idempotency-Key (the retry replays the first answer or runs once). An
   * "outcome unknown" 503 carries Retry-After only then.
   */
  retrySafe?: boolean
}

/** Maps any thrown value to status, body and headers. Unknown errors become a plain 500. */
export function describeError(err: unknown, upgradeUrl: string, options: DescribeOptions = {}): ErrorBody {
  const headers: Record<string, string> = {}
  let status = 500
  let body: Record<string, unknown> = { error: 'Something went wrong on our side.' }
  const lost = databaseFailure(err)

  if (err instanceof ApiError) {
    status = err.status
    body = { error: err.message, ...err.extra }
    Object.assign(headers, err.headers)
  } else if (err instanceof HTTPException && err.status === 415) {
    // SPEC answers bad input with 422; a body in a format the route does not take is that.
    status = 422
    body = { error: 'The request body must be JSON (Content-Type: application/json); POST /v1/todos also takes a form.' }
  } else if (err instanceof HTTPException) {
    status = err.status
    body = { error: err.message || 'The request could not be read.' }
  } else if (lost === 'not-applied') {
    status = 503
    body = { error: UNAVAILABLE_MESSAGE }
  } else if (lost === 'outcome-unknown') {
    // Retry-After only when a retry is safe (see databaseFailure): a write sent without a key
    // may have taken effect, and whether to send it again is the client's call.
    if (options.retrySafe) headers['Retry-After'] = String(RETRY_AFTER_UNAVAILABLE_SECONDS)
    return { status: 503, body: { error: OUTCOME_UNKNOWN_MESSAGE }, headers }
  } else if (isPostgresError(err)) {
    const code = err.code ?? ''
    if (/^PT\d{3}$/.test(code)) {
      status = Number(code.slice(2))
      body = { error: err.message }
      if (err.detail) {
        try {
          const extra = JSON.parse(err.detail) as Record<string, unknown>
          if (typeof extra.retry_after === 'number') headers['Retry-After'] = String(extra.retry_after)
          body = { ...body, ...extra }
        } catch {
          // detail is not JSON: keep the message only
        }
      }
    } else if (SQLSTATE_STATUS[code]) {
      ;[status, body.error] = SQLSTATE_STATUS[code] as [number, string]
    }
  }
  if (status === 401) body.upgrade_url = upgradeUrl
  if (status === 429 && !headers['Retry-After']) headers['Retry-After'] = '60'
  // A cancelled statement (timeout), a lost race or an unreachable database is worth retrying, shortly.
  if (status === 503 && !headers['Retry-After']) headers['Retry-After'] = String(RETRY_AFTER_UNAVAILABLE_SECONDS)
  return { status, body, headers }
}

/** RFC 6750 section 3.1: the challenge of a request whose OAuth access token is expired, revoked, forged or unknown. */
export const INVALID_TOKEN_CHALLENGE = 'Bearer error="invalid_token"'

/**
 * The `WWW-Authenticate` challenge (RFC 6750 section 3.1) of an error that an OAuth access token
 * earned, or null: `invalid_token` when the database refused the token itself
 * (app.refuse_credential), `insufficient_scope` with the scopes that would do when it lacks one
 * (app.refuse_scope, whose hint names them). The status stays SPEC's 403; the challenge is how a
 * generic OAuth client learns to refresh, sign in again, or ask the member for more. API keys
 * get none: they are no OAuth tokens, and nothing is to be renewed.
 */
export function bearerChallenge(err: unknown, credentialKind: string | undefined): string | null {
  if (credentialKind !== 'oauth' || !isPostgresError(err) || err.code !== 'PT403') return null
  const hint = (err as { hint?: unknown }).hint
  if (hint === 'credential refused') return INVALID_TOKEN_CHALLENGE
  const scope = typeof hint === 'string' ? /^insufficient_scope ([a-z]+(?: [a-z]+)*)$/.exec(hint)?.[1] : undefined
  return scope ? `Bearer error="insufficient_scope", scope="${scope}"` : null
}

/** Retry-After of a 503: a statement cancelled by its timeout, a serialization failure, a deadlock, the database out of reach. */
export const RETRY_AFTER_UNAVAILABLE_SECONDS = 2

/**
 * Whether an error is about the request's input, found before the database was asked: these
 * are shown only to a credential that exists (see errorResponse).
 */
export function isInputError(err: unknown): boolean {
  if (err instanceof ApiError) return err.status === 400 || err.status === 422
  return err instanceof HTTPException && (err.status === 400 || err.status === 415)
}

/**
 * Whether the request may be sent again whatever became of it: a read, or a request whose SQL
 * call used its Idempotency-Key (callFor marks it: functions/lib/respond.ts). A key the route
 * did not use (a route outside /v1, a GET) makes nothing safe.
 */
function retrySafe(c: Context): boolean {
  const method = c.req.method
  return method === 'GET' || method === 'HEAD' || (c.var as { idempotencyKeyUsed?: boolean }).idempotencyKeyUsed === true
}

/**
 * The Hono error handler: logs what is ours to fix, answers JSON always. `beforeInputError`
 * runs before an input error is shown and may throw what should be answered instead (a
 * credential that does not exist gets its 403, not our validation rules).
 */
export async function errorResponse(
  err: unknown,
  c: Context,
  upgradeUrl: string,
  beforeInputError?: () => Promise<void>,
): Promise<Response> {
  // A client that hung up mid-body: nothing to log, nothing to ask the database, and nobody to
  // answer (the access log keeps the 400).
  if (clientHungUp(err, c.req.raw)) return c.json({ error: CLIENT_HUNG_UP_MESSAGE }, 400)
  if (beforeInputError && isInputError(err)) {
    try {
      await beforeInputError()
    } catch (refusal) {
      err = refusal
    }
  }
  const { status, body, headers } = describeError(err, upgradeUrl, { retrySafe: retrySafe(c) })
  const challenge = bearerChallenge(err, (c.var as unknown as { credential?: { kind?: string } | null }).credential?.kind)
  if (challenge) headers['WWW-Authenticate'] = challenge
  // An unreachable database is logged in one line, not a stack per request while it restarts.
  if (status >= 500 && isDatabaseUnavailable(err)) console.error(unavailableLogLine(err))
  // An ApiError is an answer we chose (a busy server's 503), not a fault to investigate.
  else if (status >= 500 && !(err instanceof ApiError)) console.error(err)
  return c.json(body, status as 500, headers)
}
