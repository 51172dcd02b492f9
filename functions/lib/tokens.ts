// Credentials on the HTTP side: API keys are hashed, OAuth access tokens are JWTs signed
// with the project's secret (HS256, like Supabase's), so Supabase Realtime accepts them too.
import { createHash } from 'node:crypto'
import { SignJWT, jwtVerify } from 'jose'

export const API_KEY_PREFIX = 'svc_sk_'

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
  sub: string
  jti: string
  scope: string
  client_id: string
  first_party: boolean
  chat: boolean
}

export async function signAccessToken(secret: string, claims: AccessTokenClaims, expiresInSeconds: number): Promise<string> {
  return await new SignJWT({ ...claims, role: 'authenticated' })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuedAt()
    .setAudience('authenticated')
    .setExpirationTime(Math.floor(Date.now() / 1000) + expiresInSeconds)
    .sign(encoder.encode(secret))
}

/** Verifies signature, algorithm and expiry; returns null for anything that is not our valid token. */
export async function verifyAccessToken(secret: string, token: string): Promise<AccessTokenClaims | null> {
  try {
    const { payload } = await jwtVerify(token, encoder.encode(secret), { algorithms: ['HS256'], audience: 'authenticated' })
    if (typeof payload.sub !== 'string' || typeof payload.jti !== 'string') return null
    return payload as unknown as AccessTokenClaims
  } catch {
    return null
  }
}
