// Credentials on the HTTP side: API keys are hashed, OAuth access tokens are JWTs signed
// with the project's secret (HS256), so Supabase Realtime accepts them for our chat topics.
//
// An access token is not a Supabase session (issue 11, item 9). Signed with the project's JWT
// secret, a token with role and audience `authenticated` and the member's auth.users id as
// `sub` would also open PostgREST, Storage and Auth as that member, past our scopes and our
// revocation. So our tokens carry:
//   - `aud` ACCESS_TOKEN_AUDIENCE, which only our API accepts;
//   - `role` ACCESS_TOKEN_ROLE, a database role (migration 20261124002100) that no other
//     service can switch to (PostgREST and Storage may only become roles granted to their
//     login roles, and nobody is granted this one) and that may only read our realtime topics;
//   - `sub` the member's public id (`user_…`), not their auth.users uuid, which Supabase Auth
//     refuses ("sub claim must be a UUID") and auth.uid() never yields.
// Supabase Realtime checks only the signature, `exp` and that `role` is present, then runs the
// realtime.messages policies as that role (docs/security.md cites its source).
import { createHash } from 'node:crypto'
import { SignJWT, jwtVerify } from 'jose'

export const API_KEY_PREFIX = 'svc_sk_'
/** The `aud` of our access tokens: this API, not Supabase's `authenticated`. */
export const ACCESS_TOKEN_AUDIENCE = 'todo-sharing-api'
/** The database role of our access tokens; it may use nothing but our realtime topics. */
export const ACCESS_TOKEN_ROLE = 'api_client'
const PUBLIC_USER_ID = /^user_[0-9a-f]{32}$/

const encoder = new TextEncoder()

export function toHex(bytes: ArrayBuffer | Uint8Array): string {
  return Array.from(bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes), (b) => b.toString(16).padStart(2, '0')).join('')
}

/**
 * SHA-256 as hex, for API keys, client secrets and refresh tokens. node:crypto (in Node and in
 * Deno, Supabase's edge runtime included), not WebCrypto: crypto.subtle.digest hands each hash to
 * a thread pool and back through promises, which was 16% of the API server's CPU per request in
 * a profile at 1,000 requests per second; createHash is a synchronous call of a few microseconds.
 */
export async function sha256Hex(text: string): Promise<string> {
  return createHash('sha256').update(text).digest('hex')
}

/** 32 random bytes as URL-safe text: the secret part of keys, client secrets, refresh tokens. */
export function randomToken(bytes = 32): string {
  const raw = crypto.getRandomValues(new Uint8Array(bytes))
  return btoa(String.fromCharCode(...raw)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')
}

export function newApiKey(): string {
  return API_KEY_PREFIX + randomToken(32)
}

export interface AccessTokenClaims {
  /** The member's public id, `user_…`. */
  sub: string
  jti: string
  scope: string
  client_id: string
  first_party: boolean
  chat: boolean
}

export async function signAccessToken(secret: string, claims: AccessTokenClaims, expiresInSeconds: number): Promise<string> {
  return await new SignJWT({ ...claims, role: ACCESS_TOKEN_ROLE })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuedAt()
    .setAudience(ACCESS_TOKEN_AUDIENCE)
    .setExpirationTime(Math.floor(Date.now() / 1000) + expiresInSeconds)
    .sign(encoder.encode(secret))
}

/**
 * Verifies signature, algorithm, expiry (unless `ignoreExpiry`), audience and role; returns null
 * for anything that is not our valid token (a Supabase session signed with the same secret included).
 */
export async function verifyAccessToken(secret: string, token: string, options: { ignoreExpiry?: boolean } = {}): Promise<AccessTokenClaims | null> {
  try {
    const { payload } = await jwtVerify(token, encoder.encode(secret), {
      algorithms: ['HS256'],
      audience: ACCESS_TOKEN_AUDIENCE,
      // Revocation (RFC 7009) takes expired access tokens too: their refresh tokens may live on.
      ...(options.ignoreExpiry ? { clockTolerance: 10 * 365 * 24 * 3600 } : {}),
    })
    if (payload.role !== ACCESS_TOKEN_ROLE || typeof payload.jti !== 'string') return null
    if (typeof payload.sub !== 'string' || !PUBLIC_USER_ID.test(payload.sub)) return null
    return payload as unknown as AccessTokenClaims
  } catch {
    return null
  }
}
