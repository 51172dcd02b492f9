// The one SQL call a request makes.
//
// A request is a single statement, so it is one round trip and its own transaction:
//   1. `auth`  resolves the credential (app.authenticate, security definer): unknown key,
//      revoked token → 403; lapsed subscription → 401 (not for billing, exports and account
//      deletion: a lapsed member may still see why, take their data and leave); credential not
//      allowed → 403.
//   2. `admitted` takes one of the member's 8 slots (app.admit_request): a 9th request of one
//      member at once → 429. It is what bounds one member's share of the database across servers
//      and edge isolates (functions/lib/admission.ts queues within one, and counts reads).
//   3. `ctx`   switches to role `authenticated` and sets `request.jwt.claims`, exactly as
//      PostgREST and Supabase Realtime do, so auth.uid() and every RLS policy apply.
//   4. the endpoint's api function runs and returns the response body as JSON text, and the
//      statement returns the member's id beside it (the admission queue keys API keys by it).
//      The todos come with their URLs as markers (supabase/schemas/70_rendering.sql, "JSON
//      text"): callApiBytes puts the request's URLs in their place, in the bytes as received.
// A request sent with an Idempotency-Key (functions/lib/idempotency.ts) has one step more on
// each side of 4, in the same statement and so in the same transaction as its write:
//   `claim` app.idempotency_claim takes the key's lock (409 while a request with it runs) and
//           finds a stored answer (422 when it was for another request);
//   then either that answer comes back (`replayed`) and the api function is never called, or
//   the function runs and app.idempotency_record stores its answer under the key.
// The CTEs are materialized, so they run before the outer target list calls the function.
// api functions are never inlinable (plpgsql, or `set search_path`), so their queries are
// planned after the role switch, under RLS.
import { Buffer } from 'node:buffer'
import type { Sql } from 'postgres'

/** What a route needs the credential to allow (see app.authenticate). */
export type Access = 'read' | 'write' | 'upload' | 'search' | 'notifications' | 'devices' | 'chat' | 'export' | 'billing' | 'account'

/** A credential as the HTTP layer hands it to the database. */
export type Credential =
  | { kind: 'api_key'; key_hash: string }
  | { kind: 'oauth'; sub: string; jti: string }

export interface CallContext {
  credential: Credential
  access: Access
  publicUrl: string
  /** Base of web url fields (WEB_URL); default publicUrl. */
  webUrl?: string
}

const FIXED_PARAMS = 4
/** The key and the request's fingerprint ($5, $6) of a keyed statement, before the api function's arguments. */
const KEY_PARAMS = 2
const statements = new Map<string, string>()

/** The statement text for an api function with `argc` arguments, with or without an idempotency key, built once and prepared. */
function statementFor(fn: string, argc: number, keyed: boolean): string {
  const key = `${fn}/${argc}/${keyed}`
  let text = statements.get(key)
  if (!text) {
    if (!/^api\.[a-z_]+$/.test(fn)) throw new Error(`not an api function: ${fn}`)
    const first = FIXED_PARAMS + (keyed ? KEY_PARAMS : 0)
    const args = Array.from({ length: argc }, (_, i) => `$${i + 1 + first}`).join(', ')
    const prelude = `with auth as materialized (
  select app.authenticate($1::jsonb, $2::text) as claims
), admitted as materialized (
  select app.admit_request((auth.claims ->> 'sub')::uuid) as slot from auth
), ctx as materialized (
  select set_config('role', 'authenticated', true) as role,
         set_config('request.jwt.claims', auth.claims::text, true) as claims,
         set_config('app.public_url', $3::text, true) as public_url,
         set_config('app.web_url', $4::text, true) as web_url,
         auth.claims ->> 'sub' as member
  from auth, admitted
)`
    text = keyed
      // CASE evaluates its branch only when taken: a replay never calls the api function.
      ? `${prelude}, claim as materialized (
  select app.idempotency_claim($5::text, $6::text) as stored from ctx
)
select case when claim.stored is null then app.idempotency_record($5::text, $6::text, ${fn}(${args})::text)
            else claim.stored ->> 'response' end as body,
       ctx.member, claim.stored is not null as replayed
from ctx, claim`
      : `${prelude}
select ${fn}(${args})::text as body, ctx.member from ctx`
    statements.set(key, text)
  }
  return text
}

/** The code of the error callApi raises when its statement came back without its row (functions/lib/errors.ts). */
export const NO_RESULT_ROW = 'NO_RESULT_ROW'

/** What one api function call returned: its JSON text (or null), and the uuid of the member it ran for. */
export interface ApiResult {
  body: string | null
  member: string
  /** The answer was stored under the request's Idempotency-Key, and the function did not run again. */
  replayed: boolean
}

/** A request's Idempotency-Key and the fingerprint of the request it is bound to (functions/lib/idempotency.ts). */
export interface IdempotencyKey {
  key: string
  requestHash: string
}

/** Runs one api function for one request; resolves to the JSON text it returned (or null). */
export async function callApi(sql: Sql, context: CallContext, fn: string, args: unknown[]): Promise<string | null> {
  return (await callApiAs(sql, context, fn, args)).body
}

/**
 * callApi, also telling whose request it was (the fair queue learns a credential's member from
 * it) and whether the answer is a stored one, replayed for `idempotency`'s key.
 */
export async function callApiAs(sql: Sql, context: CallContext, fn: string, args: unknown[], idempotency?: IdempotencyKey | null): Promise<ApiResult> {
  const { body, member, replayed } = await callApiBytes(sql, context, fn, args, idempotency)
  return { body: body === null ? null : body.toString('utf8'), member, replayed }
}

/** What one api function call returned, as the UTF-8 bytes of its JSON text (URLs in place). */
export interface ApiBytes {
  body: Buffer | null
  member: string
  replayed: boolean
}

/**
 * callApiAs with the body as the bytes PostgreSQL sent: a response that is sent as it is (a page
 * of todos is 30-70 KB) is neither decoded into a JS string by the driver nor encoded back into
 * UTF-8 to be written, and its URL markers are replaced in the bytes (resolveUrlMarkerBytes).
 * That decode and encode cost Node 0.1-0.3 ms per page of todos.
 */
export async function callApiBytes(sql: Sql, context: CallContext, fn: string, args: unknown[], idempotency?: IdempotencyKey | null): Promise<ApiBytes> {
  // jsonb parameters take JS objects: postgres.js serializes by the type the server describes.
  const params = [context.credential, context.access, context.publicUrl, context.webUrl ?? context.publicUrl,
    ...(idempotency ? [idempotency.key, idempotency.requestHash] : []), ...args]
  // postgres.js sends JS strings and numbers as "unknown", so the function signature types them.
  // raw(): each column as the bytes of its text form, in the statement's order (body, member, replayed).
  const rows = await sql.unsafe(statementFor(fn, args.length, Boolean(idempotency)), params as never[], { prepare: true }).raw()
  // The statement always yields exactly one row (its body may be null). None means postgres.js
  // lost the connection under it and resolved the query empty (seen while PostgreSQL shut down,
  // test/faults.test.ts): answered as a lost database, not as a success with a null body.
  if (rows.length !== 1) throw Object.assign(new Error(`${fn} answered ${rows.length} rows instead of one`), { code: NO_RESULT_ROW })
  const [body, member, replayed] = rows[0] as unknown as (Uint8Array | null)[]
  return {
    body: body == null ? null : resolveUrlMarkerBytes(body, context),
    member: Buffer.from(member!).toString('utf8'),
    // A boolean's text form: t or f.
    replayed: replayed?.[0] === 0x74,
  }
}

/** Where url fields start when PUBLIC_URL is unset: app.public_url()'s default. */
const DEFAULT_PUBLIC_URL = 'http://127.0.0.1:54321'
const PUBLIC_URL_MARKER = '\u0001'
const WEB_URL_MARKER = '\u0002'

/** A URL escaped as inside a JSON string, as app.json_inner escapes it. */
function jsonInner(url: string): string {
  return JSON.stringify(url).slice(1, -1)
}

/**
 * The request's URLs in place of the URL markers in the UTF-8 bytes of JSON text (see
 * resolveUrlMarkers): a marker is the byte 1 or 2, which UTF-8 never uses inside another
 * character. The todos leave the database with their markers: replacing them there cost a
 * 30-70 KB page 0.1 ms of the database's time, the part that cannot be multiplied. Always a new
 * buffer (the row's bytes lie in the driver's read buffer): the pieces between markers and the
 * URLs, copied once.
 */
export function resolveUrlMarkerBytes(body: Uint8Array, context: Pick<CallContext, 'publicUrl' | 'webUrl'>): Buffer {
  const bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength)
  let nextPublic = bytes.indexOf(1)
  let nextWeb = bytes.indexOf(2)
  if (nextPublic < 0 && nextWeb < 0) return Buffer.from(bytes)
  const publicUrl = context.publicUrl || DEFAULT_PUBLIC_URL
  const publicBytes = Buffer.from(jsonInner(publicUrl))
  const webBytes = Buffer.from(jsonInner(context.webUrl || publicUrl))
  const parts: Uint8Array[] = []
  let from = 0
  while (nextPublic >= 0 || nextWeb >= 0) {
    const isPublic = nextWeb < 0 || (nextPublic >= 0 && nextPublic < nextWeb)
    const at = isPublic ? nextPublic : nextWeb
    parts.push(bytes.subarray(from, at), isPublic ? publicBytes : webBytes)
    from = at + 1
    if (isPublic) nextPublic = bytes.indexOf(1, from)
    else nextWeb = bytes.indexOf(2, from)
  }
  parts.push(bytes.subarray(from))
  return Buffer.concat(parts)
}

/**
 * The request's URLs in place of the markers the database renders URLs with (chr(1) the public
 * URL, chr(2) the web URL: supabase/schemas/70_rendering.sql, "JSON text"), as app.resolve_urls
 * would put them, escaped as inside a JSON string: resolveUrlMarkerBytes on the text's UTF-8
 * bytes, for callers that hold a string (the operator CLI, the bench). A raw control character is
 * never part of valid JSON text (the database escapes every one in members' text), so only
 * markers are replaced.
 */
export function resolveUrlMarkers(body: string, context: Pick<CallContext, 'publicUrl' | 'webUrl'>): string {
  if (!body.includes(PUBLIC_URL_MARKER) && !body.includes(WEB_URL_MARKER)) return body
  return resolveUrlMarkerBytes(Buffer.from(body, 'utf8'), context).toString('utf8')
}

/**
 * Raises the 403/401 a request with this credential would get for `access`, or returns. Asked
 * only on the way to an input error, so valid requests never pay this round trip.
 */
export async function assertCredentialAllows(sql: Sql, credential: Credential, access: Access): Promise<void> {
  await sql.unsafe(`select app.authenticate($1::jsonb, $2::text)`, [credential, access] as never[], { prepare: true })
}

/** Whether an error is the database refusing the credential itself (unknown, revoked, expired: app.refuse_credential). */
export function credentialRefused(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: unknown }).code === 'PT403'
    && (err as { hint?: unknown }).hint === 'credential refused'
}
