// Idempotency keys (issue 29): a client that lost an answer sends the same request again with
// the same `Idempotency-Key` and gets the first answer, never a second todo.
//
// The HTTP side only reads the key and fingerprints the request; the database claims the key,
// replays a stored answer or runs the endpoint and stores its answer, all in the request's one
// statement (functions/lib/db.ts, supabase/schemas/16_idempotency.sql). docs/security.md,
// "Idempotency keys", has the rules and their numbers.
import type { AppContext } from './context.ts'
import { ApiError } from './errors.ts'
import { sha256Hex } from './tokens.ts'

export const IDEMPOTENCY_KEY_HEADER = 'Idempotency-Key'
/** Sent as `true` on an answer replayed from a stored one (Stripe's name for it). */
export const IDEMPOTENT_REPLAYED_HEADER = 'Idempotent-Replayed'
export const MAX_IDEMPOTENCY_KEY_LENGTH = 255
/** How long a stored answer is replayed (app.idempotency_claim; the storage worker forgets it after). */
export const IDEMPOTENCY_WINDOW_HOURS = 24

/** Visible ASCII without `"` and `\`: what app.idempotency_key_hash accepts too. */
const KEY = /^[!#-[\]-~]{1,255}$/

export const BAD_KEY_MESSAGE =
  `The ${IDEMPOTENCY_KEY_HEADER} header must be 1 to ${MAX_IDEMPOTENCY_KEY_LENGTH} visible ASCII characters, without spaces, quotes or backslashes.`

/** Whether a method takes a key: the ones that change something. GET and HEAD are idempotent already, and ignore it. */
export function takesIdempotencyKey(method: string): boolean {
  return method === 'POST' || method === 'PATCH' || method === 'DELETE'
}

/**
 * The request's Idempotency-Key, or null when it sent none or its method ignores it; 400 for a
 * malformed one. The draft standard (draft-ietf-httpapi-idempotency-key-header) spells the key
 * as a structured-field string, in double quotes; Stripe's clients send it bare: both are the
 * same key.
 */
export function idempotencyKeyOf(c: AppContext): string | null {
  if (!takesIdempotencyKey(c.req.method)) return null
  const sent = c.req.header(IDEMPOTENCY_KEY_HEADER)
  if (sent === undefined) return null
  const trimmed = sent.trim()
  const key = trimmed.length >= 2 && trimmed.startsWith('"') && trimmed.endsWith('"') ? trimmed.slice(1, -1) : trimmed
  if (!KEY.test(key)) throw new ApiError(400, BAD_KEY_MESSAGE)
  return key
}

/**
 * The fingerprint a key is bound to: SHA-256 of the method, the path and the request as the API
 * read it (the endpoint's function and its validated arguments), as hex. Taken from what was
 * validated, not from the raw bytes: a form and the same JSON, or JSON with other spacing or key
 * order, are the same request, and a multipart body is never hashed by its random boundary. The
 * body was read whole by then under the 1 MiB limit (functions/app.ts), and files never pass
 * through the API (they go to storage by the signed PUT), so nothing more is read or buffered.
 */
export async function requestFingerprint(method: string, path: string, fn: string, args: unknown[]): Promise<string> {
  return await sha256Hex(JSON.stringify([method, path, fn, args]))
}

/** An OpenAPI 3.1 document as far as documentIdempotencyKeys touches it. */
interface OpenApiDocument {
  paths?: Record<string, Record<string, {
    parameters?: unknown[]
    responses?: Record<string, { description: string; headers?: Record<string, unknown>; content?: unknown }>
  }>>
  components?: Record<string, Record<string, unknown> | undefined>
}

const KEYED_OPERATIONS = ['post', 'patch', 'delete']
/** The answers a key itself may cause, by status. */
const KEY_ERRORS: Record<string, string> = {
  400: 'The Idempotency-Key header is malformed',
  409: 'A request with this Idempotency-Key is still running (Retry-After: 1)',
  422: 'This Idempotency-Key was used for a different request within 24 hours',
}

/**
 * Adds the Idempotency-Key header to every POST, PATCH and DELETE of /v1 in the generated
 * document (one parameter component, referenced), `Idempotent-Replayed` to their successful
 * answers, and the 400, 409 and 422 a key may cause to their answers (added, or named beside
 * the operation's own). Done on the document rather than in every route's schema: every such
 * route takes the key, by the same code (callFor), so one place says so.
 */
export function documentIdempotencyKeys<T extends object>(generated: T): T {
  const document = generated as OpenApiDocument
  const components = (document.components ??= {})
  components.parameters = {
    ...components.parameters,
    IdempotencyKey: {
      name: IDEMPOTENCY_KEY_HEADER,
      in: 'header',
      required: false,
      description: `Makes a retry safe: the first request with a key runs; the same request (method, path and body) with the same key within ${IDEMPOTENCY_WINDOW_HOURS} hours `
        + `is answered with the first one's status and body and \`${IDEMPOTENT_REPLAYED_HEADER}: true\`, and does nothing. `
        + 'The same key with a different request is 422; while the first is still running, 409 with `Retry-After: 1`. '
        + 'Only answers of requests that took effect are stored: after an error (4xx, 5xx), nothing happened and the same key runs the request again. '
        + 'Keys belong to the credential that sent them (an API key, or an OAuth app) of the member. '
        + `1 to ${MAX_IDEMPOTENCY_KEY_LENGTH} visible ASCII characters without spaces, quotes or backslashes (a UUID v4 is a good key), `
        + 'bare or as a structured-field string in double quotes; 400 otherwise. GET ignores it.',
      schema: { type: 'string', minLength: 1, maxLength: MAX_IDEMPOTENCY_KEY_LENGTH, pattern: '^[!#-\\[\\]-~]+$' },
      example: '8e03978e-40d5-43e8-bc93-6894a57f9324',
    },
  }
  components.headers = {
    ...components.headers,
    IdempotentReplayed: {
      description: 'Present (`true`) when this answer is the stored answer of an earlier request with the same Idempotency-Key, which did not run again.',
      schema: { type: 'string', enum: ['true'] },
    },
  }
  for (const [path, operations] of Object.entries(document.paths ?? {})) {
    if (!path.startsWith('/v1/')) continue
    for (const [method, operation] of Object.entries(operations)) {
      if (!KEYED_OPERATIONS.includes(method)) continue
      operation.parameters = [...(operation.parameters ?? []), { $ref: '#/components/parameters/IdempotencyKey' }]
      const responses = (operation.responses ??= {})
      for (const [status, response] of Object.entries(responses)) {
        if (/^2\d\d$/.test(status)) response.headers = { ...response.headers, [IDEMPOTENT_REPLAYED_HEADER]: { $ref: '#/components/headers/IdempotentReplayed' } }
      }
      for (const [status, description] of Object.entries(KEY_ERRORS)) {
        const response = responses[status]
        if (response) response.description += `; or ${description[0]!.toLowerCase()}${description.slice(1)}`
        else responses[status] = { description, content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } }
      }
    }
  }
  return generated
}
