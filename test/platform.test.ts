// sql/platform.sql says it only creates what is missing and never changes what a real Supabase
// instance already has (issue 31: auth.uid() and realtime.send() were `create or replace`). Here
// a database stands in for Supabase: the names the platform provides exist, with bodies, grants
// and row-level security of their own that differ from the shim's. Applying the shim must leave
// every one of them as it was; on an empty database it must create them all; applied twice, the
// second run changes nothing.
import type { Sql } from 'postgres'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { createSql } from '../functions/lib/sql.ts'
import { applyPlatformShim } from '../local/migrate.ts'
import { databaseUrl } from './support/net.ts'

const names: string[] = []
let admin: Sql
const opened: Sql[] = []

async function scratchDatabase(): Promise<Sql> {
  const name = `todo_platform_${process.pid}_${names.length}_${Math.random().toString(36).slice(2, 8)}`
  await admin.unsafe(`create database ${name}`)
  names.push(name)
  const sql = createSql(databaseUrl(inject('serverUrl'), name), { max: 1 })
  opened.push(sql)
  return sql
}

/**
 * What the platform provides, as the catalog holds it: each function's definition and grants,
 * each table's columns, row-level security and grants, the roles' attributes.
 */
async function platformState(sql: Sql) {
  const functions = await sql`
    select p.oid::regprocedure::text as name, pg_get_functiondef(p.oid) as definition, coalesce(p.proacl::text, '') as acl
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
    where n.nspname in ('auth', 'realtime', 'storage') order by 1`
  const tables = await sql`
    select c.oid::regclass::text as name, c.relrowsecurity as rls, coalesce(c.relacl::text, '') as acl,
           (select string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' order by a.attnum)
              from pg_attribute a where a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped) as columns
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
    where n.nspname in ('auth', 'realtime', 'storage') and c.relkind in ('r', 'p') and c.relname !~ '^messages_\d' order by 1`
  const roles = await sql`
    select rolname, rolcanlogin, rolinherit, rolbypassrls from pg_roles
    where rolname in ('anon', 'authenticated', 'service_role', 'authenticator') order by 1`
  return { functions, tables, roles }
}

beforeAll(async () => {
  admin = createSql(inject('serverUrl'), { max: 1 })
})
afterAll(async () => {
  for (const sql of opened) await sql.end({ timeout: 5 })
  for (const name of names) await admin.unsafe(`drop database if exists ${name} with (force)`)
  await admin.end({ timeout: 5 })
})

describe('sql/platform.sql', () => {
  it('on a database where the platform\'s names exist with bodies and grants of their own, changes none of them', async () => {
    const sql = await scratchDatabase()
    // The roles are the cluster's (created by the test template already): as on Supabase, they exist.
    await sql.unsafe(`
      create schema auth;
      create schema realtime;
      create schema storage;
      -- GoTrue's and Realtime's own versions: other bodies, other settings, fewer grants.
      create function auth.uid() returns uuid language sql stable as $$ select '00000000-0000-0000-0000-00000000000a'::uuid $$;
      create function auth.role() returns text language sql stable as $$ select 'platform role'::text $$;
      create function auth.jwt() returns jsonb language sql stable as $$ select '{"platform": true}'::jsonb $$;
      revoke all on function auth.uid(), auth.role(), auth.jwt() from public;
      grant execute on function auth.uid() to authenticated;
      create table realtime.messages (topic text not null, extension text not null, payload jsonb, event text,
        private boolean default false, updated_at timestamp not null default now(), inserted_at timestamp not null default now(),
        id uuid not null default gen_random_uuid(), primary key (id, inserted_at)) partition by range (inserted_at);
      grant select on realtime.messages to authenticated;
      create function realtime.topic() returns text language sql stable as $$ select 'platform topic'::text $$;
      create function realtime.send(payload jsonb, event text, topic text, private boolean default true) returns void
        language plpgsql volatile as $$ begin raise notice 'the platform''s send'; end $$;
      revoke all on function realtime.topic(), realtime.send(jsonb, text, text, boolean) from public;
      create table storage.buckets (id text primary key, name text not null unique, public boolean default false);
      create table storage.objects (id uuid primary key default gen_random_uuid(), bucket_id text references storage.buckets (id), name text);
      -- As on Supabase: Storage's tables have row-level security on (the shim turns it on, which
      -- is no change there).
      alter table storage.buckets enable row level security;
      alter table storage.objects enable row level security;
    `)
    const before = await platformState(sql)
    await applyPlatformShim(sql)
    const after = await platformState(sql)
    // What the platform had is untouched (the shim may add what it lacked: its own helpers).
    const had = new Set([...before.functions, ...before.tables].map((row) => row.name as string))
    const kept = (rows: readonly { name?: unknown }[]) => rows.filter((row) => had.has(row.name as string))
    expect(kept(after.functions)).toEqual(before.functions)
    expect(kept(after.tables)).toEqual(before.tables)
    expect(after.roles).toEqual(before.roles)
    // And the platform's functions still answer as the platform's.
    expect((await sql`select auth.uid()::text as uid, auth.role() as role, realtime.topic() as topic`)[0]).toEqual({
      uid: '00000000-0000-0000-0000-00000000000a', role: 'platform role', topic: 'platform topic',
    })
    expect(before.functions.length).toBe(5)
  })

  it('on an empty database creates every name, and a second run changes nothing', async () => {
    const sql = await scratchDatabase()
    await applyPlatformShim(sql)
    const first = await platformState(sql)
    expect(first.functions.map((f) => f.name)).toEqual(expect.arrayContaining([
      'auth.uid()', 'auth.role()', 'auth.jwt()', 'realtime.topic()', 'realtime.send(jsonb,text,text,boolean)',
    ]))
    expect(first.tables.map((t) => t.name)).toEqual(expect.arrayContaining(['auth.users', 'realtime.messages', 'storage.buckets', 'storage.objects']))
    // The shim's own: grants to the API roles, row-level security on realtime.messages.
    expect(first.functions.find((f) => f.name === 'auth.uid()')!.acl).toContain('authenticated=X')
    expect(first.tables.find((t) => t.name === 'realtime.messages')).toMatchObject({ rls: true, acl: expect.stringContaining('authenticated=arw') })
    await applyPlatformShim(sql)
    expect(await platformState(sql)).toEqual(first)
  })

  it('the auth stand-ins are GoTrue\'s, inlined where they are called; an earlier stand-in with a SET clause is replaced', async () => {
    const sql = await scratchDatabase()
    // The form this file created before issue 27: every call planned its body again.
    await sql.unsafe(`
      create schema if not exists auth;
      create function auth.uid() returns uuid language sql stable set search_path to '' as $$
        select coalesce(nullif(current_setting('request.jwt.claim.sub', true), ''),
                        (nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'sub'))::uuid $$;
      grant execute on function auth.uid() to authenticated;`)
    await applyPlatformShim(sql)
    const functions = await sql<{ name: string; config: string[] | null }[]>`
      select p.oid::regprocedure::text as name, p.proconfig as config from pg_proc p
      where p.pronamespace = 'auth'::regnamespace and p.proname in ('uid', 'role', 'jwt') order by 1`
    expect(functions).toEqual([
      { name: 'auth.jwt()', config: null }, { name: 'auth.role()', config: null }, { name: 'auth.uid()', config: null },
    ])
    // Substituted into the statement: the plan shows the body, not a call.
    const plan = (await sql`explain verbose select auth.uid(), auth.role(), auth.jwt()`).map((r) => r['QUERY PLAN']).join('\n')
    expect(plan).toContain('current_setting')
    expect(plan).not.toMatch(/auth\.(uid|role|jwt)\(/)
    // And it answers as before, its grant kept.
    const [row] = await sql.begin(async (tx) => {
      await tx`select set_config('request.jwt.claims', '{"sub":"00000000-0000-0000-0000-00000000000b","role":"authenticated"}', true)`
      return tx`select auth.uid()::text as uid, auth.role() as role, has_function_privilege('authenticated', 'auth.uid()', 'execute') as granted`
    })
    expect(row).toEqual({ uid: '00000000-0000-0000-0000-00000000000b', role: 'authenticated', granted: true })
  })
})
