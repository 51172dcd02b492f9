// Who may join, read and write a Realtime channel, decided as the Supabase Realtime server
// decides it (see SUPABASE-NOTES.md, "How the Realtime server authorizes a private join"):
// the JWT is verified with the project's secret (signature, `exp`, `role`), and a private
// channel's permissions are RLS on realtime.messages, probed inside a transaction that is
// always rolled back.
import { decodeJwt, errors, jwtVerify } from 'jose'
import type { ReservedSql, Sql } from 'postgres'
import { transaction } from '../../functions/lib/sql.ts'

export interface Claims {
  role: string
  exp: number
  sub?: string
  [claim: string]: unknown
}

export type TokenCheck =
  | { ok: true; claims: Claims }
  /** `code` is Supabase's log code; the join error reason is `${code}: ${message}`. */
  | { ok: false; code: string; message: string }

const encoder = new TextEncoder()

export async function verifyRealtimeToken(secret: string, token: unknown): Promise<TokenCheck> {
  if (typeof token !== 'string' || token.trim() === '') {
    return { ok: false, code: 'MalformedJWT', message: 'The token provided is not a valid JWT' }
  }
  const cleaned = token.replace(/\s/g, '')
  try {
    const { payload } = await jwtVerify(cleaned, encoder.encode(secret), { algorithms: ['HS256', 'HS384', 'HS512'] })
    if (typeof payload.role !== 'string' || payload.role === '' || typeof payload.exp !== 'number') {
      return { ok: false, code: 'InvalidJWTToken', message: 'Fields `role` and `exp` are required in JWT' }
    }
    return { ok: true, claims: payload as Claims }
  } catch (err) {
    if (err instanceof errors.JWTExpired) {
      let exp = Math.floor(Date.now() / 1000)
      try {
        exp = Number(decodeJwt(cleaned).exp ?? exp)
      } catch {}
      return { ok: false, code: 'InvalidJWTToken', message: `Token has expired ${Math.max(0, Math.floor(Date.now() / 1000) - exp)} seconds ago` }
    }
    if (err instanceof errors.JWSSignatureVerificationFailed || err instanceof errors.JOSEAlgNotAllowed) {
      return { ok: false, code: 'JwtSignatureError', message: 'Failed to validate JWT signature' }
    }
    if (err instanceof errors.JWTClaimValidationFailed) {
      return { ok: false, code: 'InvalidJWTToken', message: err.message }
    }
    return { ok: false, code: 'MalformedJWT', message: 'The token provided is not a valid JWT' }
  }
}

/** Seconds until the token expires (negative once it has). */
export function secondsLeft(claims: Claims): number {
  return claims.exp - Date.now() / 1000
}

export type Permission =
  | { ok: true; allowed: boolean }
  /** The check itself failed: no database, a missing partition, a policy that raises. */
  | { ok: false; code: string; message: string; policyError: boolean }

const ROLLBACK = Symbol('rollback')

async function probe(sql: Sql, run: (tx: ReservedSql) => Promise<boolean>): Promise<Permission> {
  let allowed = false
  try {
    await transaction(sql, async (tx) => {
      allowed = await run(tx)
      throw ROLLBACK
    })
  } catch (err) {
    if (err === ROLLBACK) return { ok: true, allowed }
    const code = (err as { code?: string }).code
    const postgresError = (err as Error)?.name === 'PostgresError'
    if (code === '23514') {
      return { ok: false, code: 'MissingPartition', message: 'Realtime was unable to find the expected messages partition', policyError: false }
    }
    if (postgresError) return { ok: false, code: 'RlsPolicyError', message: (err as Error).message, policyError: true }
    return { ok: false, code: 'UnableToConnectToProject', message: 'Realtime was unable to connect to the project database', policyError: false }
  }
  return { ok: true, allowed }
}

/** The request context RLS sees: the connecting role becomes the token's role. */
async function setClaims(tx: ReservedSql, topic: string, claims: Claims) {
  await tx`
    select set_config('role', ${claims.role}, true),
           set_config('realtime.topic', ${topic}, true),
           set_config('request.jwt.claims', ${JSON.stringify(claims)}, true),
           set_config('request.jwt.claim.sub', ${typeof claims.sub === 'string' ? claims.sub : ''}, true),
           set_config('request.jwt.claim.role', ${claims.role}, true),
           set_config('request.headers', '{}', true)`
}

/**
 * Read: as the connecting role, insert a probe row; then, as the token's role, try to see it.
 * Visible means the select policies let this user read the topic. Always rolled back.
 */
export function canRead(sql: Sql, topic: string, claims: Claims): Promise<Permission> {
  return probe(sql, async (tx) => {
    const [row] = await tx<{ id: string }[]>`
      insert into realtime.messages (topic, extension, private) values (${topic}, 'broadcast', true) returning id`
    await setClaims(tx, topic, claims)
    const visible = await tx`
      select id from realtime.messages where id = ${row!.id} and topic = ${topic} and extension = 'broadcast'`
    return visible.length > 0
  })
}

/** Write: as the token's role, insert a probe row; 42501 (RLS) means no. Always rolled back. */
export function canWrite(sql: Sql, topic: string, claims: Claims): Promise<Permission> {
  return probe(sql, async (tx) => {
    await setClaims(tx, topic, claims)
    try {
      // No savepoint needed: the probe's transaction is always rolled back, aborted or not.
      await tx`insert into realtime.messages (topic, extension, private) values (${topic}, 'broadcast', true)`
      return true
    } catch (err) {
      if ((err as { code?: string }).code === '42501') return false
      throw err
    }
  })
}

/**
 * Which of our access tokens (their `jti`s) the database still honours: issued, not revoked,
 * member and app still there. Supabase Realtime re-checks a channel's policies only when the
 * client sends a new token, so a revoked token kept receiving until it expired; the local
 * gateway asks this every few seconds instead and closes the channels of the others (issue 11,
 * item 5). Only tokens with our role are asked about: other JWTs are closed by their expiry,
 * as on Supabase.
 */
export async function honouredTokenIds(sql: Sql, jtis: string[]): Promise<Set<string>> {
  const wellFormed = jtis.filter((jti) => UUID.test(jti))
  if (wellFormed.length === 0) return new Set()
  const rows = await sql<{ jti: string }[]>`
    select t.jti::text as jti from app.oauth_tokens t
     where t.jti = any(${wellFormed}::uuid[]) and t.revoked_at is null`
  return new Set(rows.map((row) => row.jti))
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
