// Row-level security and the SQL conventions, checked in the catalog and as a member.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type TestWorld, startWorld } from './support/app.ts'
import { asMember } from './support/sql.ts'

let world: TestWorld
let alice: string
let bob: string

beforeAll(async () => {
  world = await startWorld()
  await world.createUser('alice')
  await world.createUser('bob')
  const rows = await world.sql`select id, username from app.users`
  alice = rows.find((r) => r.username === 'alice')!.id
  bob = rows.find((r) => r.username === 'bob')!.id
  await world.admin('create-project', '--owner', 'bob', '--name', 'Secret', '--slug', 'secret', '--privacy', 'private')
  await world.admin('create-project', '--owner', 'bob', '--name', 'Open', '--slug', 'open')
})
afterAll(() => world.close())

describe('conventions, from the catalog', () => {
  it('every table in app has row-level security enabled', async () => {
    const rows = await world.sql`
      select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = 'app' and c.relkind in ('r', 'p') and not c.relrowsecurity`
    expect(rows.map((r) => r.relname)).toEqual([])
  })

  it('every function in app and api sets search_path to empty (so it is never inlined and never hijacked)', async () => {
    const rows = await world.sql`
      select p.oid::regprocedure::text as fn from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname in ('app', 'api') and not coalesce('search_path=""' = any (p.proconfig), false)`
    expect(rows.map((r) => r.fn)).toEqual([])
  })

  it('every function in app and api has a comment that explains it', async () => {
    const rows = await world.sql`
      select p.oid::regprocedure::text as fn from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname in ('app', 'api') and coalesce(obj_description(p.oid, 'pg_proc'), '') = ''`
    expect(rows.map((r) => r.fn)).toEqual([])
  })

  it('every foreign key says what happens on delete, and has an index leading with its columns', async () => {
    const fks = await world.sql`
      select c.conname, c.confdeltype,
             exists (select 1 from pg_index i
                     where i.indrelid = c.conrelid
                       and (i.indkey::int2[])[0:cardinality(c.conkey) - 1] = c.conkey
                       and (i.indpred is null or cardinality(c.conkey) = 1)) as indexed
      from pg_constraint c join pg_namespace n on n.oid = c.connamespace
      where c.contype = 'f' and n.nspname = 'app'`
    expect(fks.length).toBeGreaterThan(5)
    expect(fks.filter((f) => f.confdeltype === 'a').map((f) => f.conname)).toEqual([])
    expect(fks.filter((f) => !f.indexed).map((f) => f.conname)).toEqual([])
  })

  it('members cannot execute functions they were not granted (execute is revoked by default)', async () => {
    const rows = await world.sql`
      select p.oid::regprocedure::text as fn from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname in ('app', 'api') and has_function_privilege('public', p.oid, 'execute')
        and p.prorettype <> 'trigger'::regtype`
    expect(rows.map((r) => r.fn)).toEqual([])
    await expect(asMember(world.sql, { sub: alice }, (tx) => tx`select app.authenticate('{}', 'read')`)).rejects.toMatchObject({ code: '42501' })
  })
})

describe('policies, as a member', () => {
  it('credentials are invisible to members', async () => {
    for (const table of ['api_keys', 'oauth_clients', 'oauth_tokens']) {
      await expect(asMember(world.sql, { sub: alice }, (tx) => tx.unsafe(`select * from app.${table}`)), table)
        .rejects.toMatchObject({ code: '42501' })
    }
  })

  it('a member updates only their own profile, only the granted columns, only with a writing credential', async () => {
    const others = await asMember(world.sql, { sub: alice }, (tx) => tx`update app.users set time_zone = 'Asia/Tokyo' where id = ${bob} returning id`)
    expect(others).toHaveLength(0)
    const own = await asMember(world.sql, { sub: alice }, (tx) => tx`update app.users set time_zone = 'Asia/Tokyo' where id = ${alice} returning id`)
    expect(own).toHaveLength(1)
    await expect(asMember(world.sql, { sub: alice, can_write: false }, (tx) => tx`update app.users set time_zone = 'Asia/Tokyo' where id = ${alice}`))
      .rejects.toMatchObject({ code: '42501' })
    await expect(asMember(world.sql, { sub: alice }, (tx) => tx`update app.users set subscription_active = true where id = ${alice}`))
      .rejects.toMatchObject({ code: '42501' })
  })

  it('a private project is invisible to non-makers, with its makers', async () => {
    const seenByAlice = await asMember(world.sql, { sub: alice }, (tx) => tx`select slug from app.projects order by slug`)
    expect(seenByAlice.map((r) => r.slug)).toEqual(['open'])
    const makers = await asMember(world.sql, { sub: alice }, (tx) => tx`select count(*)::int as n from app.project_makers`)
    expect(makers[0]!.n).toBe(1)
    const seenByBob = await asMember(world.sql, { sub: bob }, (tx) => tx`select slug from app.projects order by slug`)
    expect(seenByBob.map((r) => r.slug)).toEqual(['open', 'secret'])
  })

  it('members cannot make themselves makers or insert projects directly', async () => {
    await expect(asMember(world.sql, { sub: alice }, (tx) =>
      tx`insert into app.project_makers (project_id, user_id) select id, ${alice} from app.projects where slug = 'open'`))
      .rejects.toMatchObject({ code: '42501' })
    await expect(asMember(world.sql, { sub: alice }, (tx) => tx`insert into app.projects (owner_id, name) values (${alice}, 'x')`))
      .rejects.toMatchObject({ code: '42501' })
  })

  it('a member follows only in their own name', async () => {
    await expect(asMember(world.sql, { sub: alice }, (tx) => tx`insert into app.user_follows (follower_id, followee_id) values (${bob}, ${alice})`))
      .rejects.toMatchObject({ code: '42501' })
    const ok = await asMember(world.sql, { sub: alice }, (tx) => tx`insert into app.user_follows (follower_id, followee_id) values (${alice}, ${bob}) returning 1`)
    expect(ok).toHaveLength(1)
  })

  it('security-definer helpers act only for the requesting member', async () => {
    await expect(asMember(world.sql, { sub: alice }, (tx) => tx`select * from app.open_conversation(${bob}, ${alice})`))
      .rejects.toMatchObject({ code: '42501' })
    await expect(asMember(world.sql, { sub: alice }, (tx) => tx`select app.unread_conversations(${bob})`))
      .rejects.toMatchObject({ code: '42501' })
    await expect(asMember(world.sql, { sub: alice }, (tx) => tx`select app.check_message_caps(${bob}, null::app.conversations)`))
      .rejects.toMatchObject({ code: '42501' })
  })

  it('anon has no way into the app schema', async () => {
    await expect(world.sql.begin(async (tx) => {
      await tx`set local role anon`
      await tx`select * from app.users`
    })).rejects.toMatchObject({ code: '42501' })
  })
})
