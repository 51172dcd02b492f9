// SQL-level tests: run statements as a member, exactly as a request does (role
// `authenticated`, request.jwt.claims set), inside a transaction that is rolled back.
import type { Sql } from 'postgres'

export interface MemberClaims {
  sub: string
  can_write?: boolean
  /** An approved chat app's token (app.can_chat), with scopes that include chat. */
  chat?: boolean
  scopes?: string[]
}

export async function asMember<T>(sql: Sql, claims: MemberClaims, fn: (tx: Sql) => Promise<T>): Promise<T> {
  let result: T
  const rollback = new Error('rollback')
  try {
    await sql.begin(async (tx) => {
      const full = { role: 'authenticated', kind: 'api_key', can_write: true, scopes: ['public', 'write'], ...claims }
      await tx`select set_config('role', 'authenticated', true), set_config('request.jwt.claims', ${JSON.stringify(full)}, true)`
      result = await fn(tx as unknown as Sql)
      throw rollback
    })
  } catch (err) {
    if (err !== rollback) throw err
  }
  return result!
}
