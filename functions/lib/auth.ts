// Reads the credential of a request (SPEC section 5). Nothing here touches the database:
// whether a key exists, a token was revoked or a subscription lapsed is decided in the same
// SQL statement as the endpoint (app.authenticate).
import type { MiddlewareHandler } from 'hono'
import { type Credential, assertCredentialAllows } from './db.ts'
import { accessOf } from './access.ts'
import type { AppContext, AppEnv } from './context.ts'
import { ApiError, INVALID_TOKEN_CHALLENGE } from './errors.ts'
import { inTurn } from './respond.ts'
import { API_KEY_PREFIX, sha256Hex, verifyAccessToken } from './tokens.ts'

/**
 * The query parameter wins over the header when both are sent (SPEC rule 2). It takes API keys
 * only: an OAuth access token there is refused, not read, because a URL ends up in browser
 * history, proxies' logs and Referer headers, and a token (unlike a key) is handed to apps that
 * should never learn to put it there.
 */
function presentedSecret(url: URL, authorization: string | undefined): string | null {
  const fromQuery = url.searchParams.get('api_key')
  if (fromQuery) {
    if (!fromQuery.startsWith(API_KEY_PREFIX)) {
      throw new ApiError(403, 'Only API keys may be sent in the api_key query parameter; send an OAuth access token in the Authorization header.')
    }
    return fromQuery
  }
  const match = authorization?.match(/^Bearer\s+(\S+)\s*$/i)
  return match?.[1] ?? null
}

export async function readCredential(secret: string | null, jwtSecret: string): Promise<Credential | null> {
  if (!secret) return null
  if (secret.startsWith(API_KEY_PREFIX)) return { kind: 'api_key', key_hash: await sha256Hex(secret) }
  const claims = await verifyAccessToken(jwtSecret, secret)
  // A forged or expired token is as good as none: the endpoint answers 403.
  return claims ? { kind: 'oauth', sub: claims.sub, jti: claims.jti } : null
}

/** Paths under /v1 that need no credential. */
const PUBLIC_PATHS = new Set(['/v1/openapi.json'])

/**
 * Reads the credential and refuses a request without a usable one (403) before anything else
 * looks at it, so a stranger learns nothing from validation errors. Whether a key exists and
 * what it may do is decided in SQL, in the request's one statement.
 */
export const credentials: MiddlewareHandler<AppEnv> = async (c, next) => {
  const url = new URL(c.req.url)
  const secret = presentedSecret(url, c.req.header('authorization'))
  const credential = await readCredential(secret, c.var.deps.jwtSecret)
  if (!credential && !PUBLIC_PATHS.has(c.req.path)) {
    // A bearer token that is no API key and did not verify (expired, forged, not ours): RFC 6750
    // section 3.1's invalid_token, so an OAuth client knows to refresh or sign in again. An API
    // key, or nothing at all, gets no challenge (SPEC's 403 as ever).
    const headers: Record<string, string> = secret && !secret.startsWith(API_KEY_PREFIX) ? { 'WWW-Authenticate': INVALID_TOKEN_CHALLENGE } : {}
    throw new ApiError(403, 'Authentication required: send an API key or an OAuth access token.', {}, headers)
  }
  c.set('credential', credential)
  await next()
}

/**
 * Throws the 403/401 the request would get from its credential: unknown key, revoked token,
 * lapsed account, or a credential that may not use this route (read-only key on a write,
 * missing scope). Called only before an input error is answered: input is validated before
 * the database decides on the credential (one round trip per request), so without this a
 * made-up `svc_sk_…` key would be told our input rules, and a read-only key would get 422
 * where SPEC says 403.
 */
export async function refuseUnknownCredential(c: AppContext): Promise<void> {
  const credential = c.get('credential')
  // In the member's turn like every SQL call of a request: a flood of invalid requests queues too.
  if (credential) await inTurn(c, () => assertCredentialAllows(c.var.deps.sql, credential, accessOf(c)))
}
