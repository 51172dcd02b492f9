// The realtime.messages policies, exercised exactly as the Supabase Realtime server
// authorizes a private channel (SUPABASE-NOTES.md): insert a probe row, switch to the token's
// role and claims with realtime.topic set, and see whether the probe is visible (read) or
// whether inserting one is allowed (write). No gateway involved: this is the production path.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Sql } from 'postgres'
import { type TestWorld, startWorld } from './support/app.ts'

let world: TestWorld

function claimsOf(token: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString())
}

/** What Realtime does on a private join: may these claims read `topic`? */
async function mayRead(sql: Sql, token: string, topic: string): Promise<boolean> {
  const claims = claimsOf(token)
  let visible = false
  await sql.begin(async (tx) => {
    const [probe] = await tx`insert into realtime.messages (topic, extension, private, event, payload)
                             values (${topic}, 'broadcast', true, 'probe', '{}') returning id`
    await tx`select set_config('role', ${String(claims.role)}, true), set_config('realtime.topic', ${topic}, true),
                    set_config('request.jwt.claims', ${JSON.stringify(claims)}, true),
                    set_config('request.jwt.claim.sub', ${String(claims.sub)}, true),
                    set_config('request.jwt.claim.role', ${String(claims.role)}, true)`
    visible = (await tx`select id from realtime.messages where id = ${probe!.id}`).length === 1
    await tx`rollback and chain`.catch(() => {})
    throw new Error('rollback')
  }).catch((err) => {
    if ((err as Error).message !== 'rollback') throw err
  })
  return visible
}

/** What Realtime does lazily before a client broadcast: may these claims write `topic`? */
async function mayWrite(sql: Sql, token: string, topic: string): Promise<boolean> {
  const claims = claimsOf(token)
  let allowed = false
  await sql.begin(async (tx) => {
    await tx`select set_config('role', ${String(claims.role)}, true), set_config('realtime.topic', ${topic}, true),
                    set_config('request.jwt.claims', ${JSON.stringify(claims)}, true)`
    try {
      await tx.savepoint(async (sp) => {
        await sp`insert into realtime.messages (topic, extension, private, event, payload) values (${topic}, 'broadcast', true, 'typing', '{}')`
      })
      allowed = true
    } catch (err) {
      if ((err as { code?: string }).code !== '42501') throw err
    }
    throw new Error('rollback')
  }).catch((err) => {
    if ((err as Error).message !== 'rollback') throw err
  })
  return allowed
}

let conversationTopic: string
let aliceToken: string
let bobToken: string
let carolToken: string
let aliceId: string

beforeAll(async () => {
  world = await startWorld()
  const alice = await world.createUser('alice')
  aliceId = alice.id
  await world.createUser('bob')
  await world.createUser('carol')
  aliceToken = await world.token('alice', 'public chat', { chat: true })
  bobToken = await world.token('bob', 'public chat', { chat: true })
  carolToken = await world.token('carol', 'public chat', { chat: true })
  const conversation = await world.post('/v1/conversations', { auth: aliceToken, json: { user: 'bob' } })
  conversationTopic = `conversation:${conversation.body.id}`
})
afterAll(() => world.close())

describe('reading a private channel', () => {
  it('participants with a chat token from an approved app may join conversation:<id>', async () => {
    expect(await mayRead(world.sql, aliceToken, conversationTopic)).toBe(true)
    expect(await mayRead(world.sql, bobToken, conversationTopic)).toBe(true)
  })

  it('a non-participant, a token without chat, an unapproved app, a revoked token may not', async () => {
    expect(await mayRead(world.sql, carolToken, conversationTopic)).toBe(false)
    expect(await mayRead(world.sql, await world.token('alice', 'public write', { chat: true }), conversationTopic)).toBe(false)
    expect(await mayRead(world.sql, await world.token('alice', 'public chat'), conversationTopic)).toBe(false)
    const revoked = await world.token('alice', 'public chat', { chat: true })
    await world.admin('revoke-token', '--token', revoked)
    expect(await mayRead(world.sql, revoked, conversationTopic)).toBe(false)
  })

  it('user:<id> is readable by that member only', async () => {
    expect(await mayRead(world.sql, aliceToken, `user:${aliceId}`)).toBe(true)
    expect(await mayRead(world.sql, bobToken, `user:${aliceId}`)).toBe(false)
  })

  it('unknown or malformed topics are refused', async () => {
    for (const topic of ['conversation:conversation_00000000000000000000000000000000', 'conversation:nope', 'anything', '']) {
      expect(await mayRead(world.sql, aliceToken, topic), topic).toBe(false)
    }
  })
})

describe('writing (typing) to a private channel', () => {
  it('participants may broadcast on conversation:<id>:typing only; others not at all', async () => {
    const typing = `${conversationTopic}:typing`
    expect(await mayRead(world.sql, bobToken, typing)).toBe(true)
    expect(await mayWrite(world.sql, bobToken, typing)).toBe(true)
    expect(await mayWrite(world.sql, aliceToken, typing)).toBe(true)
    expect(await mayRead(world.sql, carolToken, typing)).toBe(false)
    expect(await mayWrite(world.sql, carolToken, typing)).toBe(false)
    expect(await mayWrite(world.sql, await world.token('bob', 'public write', { chat: true }), typing)).toBe(false)
  })

  it('nobody may write on the topics the server publishes on (issue 11, item 4: forged message.created)', async () => {
    expect(await mayWrite(world.sql, bobToken, conversationTopic)).toBe(false)
    expect(await mayWrite(world.sql, aliceToken, conversationTopic)).toBe(false)
    expect(await mayWrite(world.sql, aliceToken, `user:${aliceId}`)).toBe(false)
    expect(await mayWrite(world.sql, aliceToken, `${conversationTopic}:typing:more`)).toBe(false)
    expect(await mayWrite(world.sql, aliceToken, `${conversationTopic}:other`)).toBe(false)
  })
})

describe('access tokens are no Supabase session (issue 11, item 9)', () => {
  it('the token names the api_client role, our own audience and the public user id', async () => {
    expect(claimsOf(aliceToken)).toMatchObject({ role: 'api_client', aud: 'todo-sharing-api', sub: aliceId })
  })

  it('only Realtime may become api_client: PostgREST (authenticator) and Storage cannot switch to it', async () => {
    const members = await world.sql`select m.member::regrole::text as member from pg_auth_members m where m.roleid = 'api_client'::regrole`
    // Only its creator (postgres, which needs admin to grant it) and, on Supabase, Realtime's runtime role.
    expect(members.map((m) => m.member).filter((m) => m !== 'postgres' && m !== 'supabase_realtime_admin')).toEqual([])
    for (const service of ['authenticator', 'authenticated', 'anon', 'service_role']) {
      const [row] = await world.sql`select pg_has_role(${service}, 'api_client', 'member') as member`
      expect(row!.member, service).toBe(false)
    }
    const [role] = await world.sql`select rolcanlogin, rolsuper, rolbypassrls, rolinherit from pg_roles where rolname = 'api_client'`
    expect(role).toEqual({ rolcanlogin: false, rolsuper: false, rolbypassrls: false, rolinherit: false })
  })

  it('api_client may touch realtime.messages and nothing else: no table, no api function', async () => {
    const tables = await world.sql`select distinct table_schema || '.' || table_name as name, privilege_type
      from information_schema.role_table_grants where grantee = 'api_client' order by 1, 2`
    expect(tables.map((t) => `${t.name} ${t.privilege_type}`)).toEqual(['realtime.messages INSERT', 'realtime.messages SELECT'])
    const functions = await world.sql`select p.oid::regprocedure::text as fn from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname in ('app', 'api') and has_function_privilege('api_client', p.oid, 'execute') and p.prorettype <> 'trigger'::regtype order by 1`
    expect(functions.map((f) => f.fn)).toEqual(['app.realtime_may_join(text)', 'app.realtime_may_send(text)'])
    await expect(world.sql.begin(async (tx) => {
      await tx`set local role api_client`
      await tx`select count(*) from app.todos`
    })).rejects.toMatchObject({ code: '42501' })
  })

  it('a Supabase session for the same member (role authenticated) is refused on our topics', async () => {
    const session = { ...claimsOf(aliceToken), role: 'authenticated', aud: 'authenticated' }
    const asSession = ['x', Buffer.from(JSON.stringify(session)).toString('base64url'), 'x'].join('.')
    expect(await mayRead(world.sql, aliceToken, conversationTopic)).toBe(true)
    expect(await mayRead(world.sql, asSession, conversationTopic)).toBe(false)
    expect(await mayWrite(world.sql, asSession, `${conversationTopic}:typing`)).toBe(false)
    // Our role with the auth.users uuid as sub (the old token shape) names nobody either.
    const uuid = aliceId.replace(/^user_(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5')
    const oldShape = ['x', Buffer.from(JSON.stringify({ ...claimsOf(aliceToken), sub: uuid })).toString('base64url'), 'x'].join('.')
    expect(await mayRead(world.sql, oldShape, conversationTopic)).toBe(false)
  })

  it('a row is read and written only under its own topic: a typing writer cannot plant a row on the server\'s topic', async () => {
    const claims = claimsOf(bobToken)
    const typing = `${conversationTopic}:typing`
    let planted = 'unset'
    await world.sql.begin(async (tx) => {
      await tx`select set_config('role', 'api_client', true), set_config('realtime.topic', ${typing}, true),
                      set_config('request.jwt.claims', ${JSON.stringify(claims)}, true)`
      planted = await tx.savepoint((sp) => sp`insert into realtime.messages (topic, extension, private, event, payload)
        values (${conversationTopic}, 'broadcast', true, 'message.created', '{}')`).then(() => 'inserted', (err) => err.code)
      throw new Error('rollback')
    }).catch((err) => { if ((err as Error).message !== 'rollback') throw err })
    expect(planted).toBe('42501')
  })

  it('the migration can tell what api_client lacks, one privilege at a time', async () => {
    expect((await world.sql`select app.api_client_missing_privileges() as missing`)[0]!.missing).toEqual([])
    await world.sql.begin(async (tx) => {
      await tx`revoke insert on realtime.messages from api_client`
      expect((await tx`select app.api_client_missing_privileges() as missing`)[0]!.missing).toEqual(['insert on realtime.messages'])
      throw new Error('rollback')
    }).catch((err) => { if ((err as Error).message !== 'rollback') throw err })
  })
})

describe('what the triggers broadcast', () => {
  it('message.created carries the Message as the API renders it; inbox.updated the unread count', async () => {
    const conversationId = conversationTopic.slice('conversation:'.length)
    const sent = await world.post(`/v1/conversations/${conversationId}/messages`, { auth: aliceToken, json: { body: 'broadcast me' } })
    expect(sent.status, JSON.stringify(sent.body)).toBe(201)
    const rows = await world.sql`select topic, event, payload, private from realtime.messages where event in ('message.created', 'inbox.updated') order by inserted_at`
    const created = rows.find((r) => r.event === 'message.created')!
    expect(created).toMatchObject({ topic: conversationTopic, private: true })
    // realtime.send keeps a payload's own id (it adds one only when missing). The payload is the
    // message as the recipient sees it (issue 11, item 7): never the sender's dismissed_time_zone.
    const { dismissed_time_zone: _ownOnly, ...creator } = sent.body.creator
    expect(created.payload).toEqual({ ...sent.body, creator })
    const inbox = rows.find((r) => r.event === 'inbox.updated')!
    expect(inbox.payload).toMatchObject({ conversation_id: conversationId, message_id: sent.body.id, unread_count: 1 })
    expect(inbox.topic).toMatch(/^user:user_/)
  })

  it('reactions and read receipts are broadcast to the conversation', async () => {
    const conversationId = conversationTopic.slice('conversation:'.length)
    const message = (await world.post(`/v1/conversations/${conversationId}/messages`, { auth: aliceToken, json: { body: 'react' } })).body
    await world.post(`/v1/messages/${message.id}/reactions`, { auth: bobToken, json: { content: '🔥' } })
    await world.delete(`/v1/messages/${message.id}/reactions/${encodeURIComponent('🔥')}`, { auth: bobToken })
    await world.post(`/v1/conversations/${conversationId}/reading`, { auth: bobToken })
    const events = (await world.sql`select event from realtime.messages where topic = ${conversationTopic} order by inserted_at`).map((r) => r.event)
    expect(events).toEqual(expect.arrayContaining(['reaction.created', 'reaction.deleted', 'conversation.read']))
  })
})
