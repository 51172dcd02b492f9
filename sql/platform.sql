-- Supabase platform shim.
--
-- On Supabase these names already exist (created by supabase/postgres, GoTrue and
-- Realtime). Plain PostgreSQL lacks them, so `npm start` and the tests apply this file
-- before supabase/migrations. Every statement is guarded so that it only creates what is
-- missing and never changes what a real Supabase instance already has: running it twice,
-- or against Supabase itself, is a no-op.

-- ============================================================================
-- Roles
-- ============================================================================
do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'anon') then
    create role anon nologin noinherit;
    alter role anon set statement_timeout = '3s';
  end if;
  if not exists (select 1 from pg_roles where rolname = 'authenticated') then
    create role authenticated nologin noinherit;
    alter role authenticated set statement_timeout = '8s';
  end if;
  if not exists (select 1 from pg_roles where rolname = 'service_role') then
    create role service_role nologin noinherit bypassrls;
  end if;
  if not exists (select 1 from pg_roles where rolname = 'authenticator') then
    create role authenticator login noinherit;
    grant anon, authenticated, service_role to authenticator;
  end if;
  -- The connecting role switches to `authenticated` per request with
  -- set_config('role', ...), so it must be a member (as postgres is on Supabase).
  if not pg_has_role(current_user, 'authenticated', 'member') then
    execute format('grant anon, authenticated, service_role to %I', current_user);
  end if;
end
$$;

-- ============================================================================
-- Schemas
-- ============================================================================
create schema if not exists extensions;
create schema if not exists auth;
create schema if not exists realtime;
grant usage on schema extensions, auth, realtime to anon, authenticated, service_role;

-- Supabase relies on RLS rather than grants in `public`.
alter default privileges in schema public grant all on tables to anon, authenticated, service_role;
alter default privileges in schema public grant all on functions to anon, authenticated, service_role;
alter default privileges in schema public grant all on sequences to anon, authenticated, service_role;

-- ============================================================================
-- auth: the GoTrue names migrations expect
-- ============================================================================
create table if not exists auth.users (
  instance_id uuid,
  id uuid primary key,
  aud varchar(255),
  role varchar(255),
  email varchar(255),
  raw_app_meta_data jsonb,
  raw_user_meta_data jsonb,
  created_at timestamptz default now(),
  updated_at timestamptz default now()
);

-- Each function only where it is missing (issue 31): on Supabase, GoTrue's auth.uid(),
-- auth.role(), auth.jwt() and Realtime's realtime.topic(), realtime.send() exist, and their
-- bodies and grants are the platform's, never replaced (test/platform.test.ts).
-- The auth stand-ins are GoTrue's definitions: SQL without a SET clause, which PostgreSQL
-- substitutes into the calling statement. Until issue 27 they had `set search_path to ''`, which
-- made every call plan its body again (a tenth of a notification's cost in the database); a
-- stand-in of that earlier form (its exact SET clause and body) is replaced, nothing else is.
do $guard$
declare
  earlier_stand_in constant text[] := array['search_path=""'];
begin
  if to_regprocedure('auth.uid()') is null
     or exists (select from pg_proc p where p.oid = to_regprocedure('auth.uid()') and p.proconfig = earlier_stand_in
                  and p.prosrc like '%request.jwt.claim.sub%') then
    create or replace function auth.uid() returns uuid
    language sql stable as $fn$
      select coalesce(
        nullif(current_setting('request.jwt.claim.sub', true), ''),
        (nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'sub')
      )::uuid
    $fn$;
    grant execute on function auth.uid() to anon, authenticated, service_role;
  end if;
  if to_regprocedure('auth.role()') is null
     or exists (select from pg_proc p where p.oid = to_regprocedure('auth.role()') and p.proconfig = earlier_stand_in
                  and p.prosrc like '%request.jwt.claim.role%') then
    create or replace function auth.role() returns text
    language sql stable as $fn$
      select coalesce(
        nullif(current_setting('request.jwt.claim.role', true), ''),
        (nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'role')
      )::text
    $fn$;
    grant execute on function auth.role() to anon, authenticated, service_role;
  end if;
  if to_regprocedure('auth.jwt()') is null
     or exists (select from pg_proc p where p.oid = to_regprocedure('auth.jwt()') and p.proconfig = earlier_stand_in
                  and p.prosrc like '%request.jwt.claims%') then
    create or replace function auth.jwt() returns jsonb
    language sql stable as $fn$
      select coalesce(
        nullif(current_setting('request.jwt.claim', true), ''),
        nullif(current_setting('request.jwt.claims', true), '')
      )::jsonb
    $fn$;
    grant execute on function auth.jwt() to anon, authenticated, service_role;
  end if;
end
$guard$;

-- ============================================================================
-- realtime: broadcast from the database (see SUPABASE-NOTES.md)
-- ============================================================================
-- The table, its row-level security and grants only where it is missing: Realtime's own is left
-- as it is.
do $guard$
begin
  if to_regclass('realtime.messages') is null then
    create table realtime.messages (
      topic text not null,
      extension text not null,
      payload jsonb,
      event text,
      private boolean default false,
      updated_at timestamp not null default now(),
      inserted_at timestamp not null default now(),
      id uuid not null default gen_random_uuid(),
      binary_payload bytea,
      primary key (id, inserted_at)
    ) partition by range (inserted_at);
    alter table realtime.messages enable row level security;
    grant insert, select, update on realtime.messages to anon, authenticated, service_role;
  end if;
  if to_regprocedure('realtime.topic()') is null then
    create function realtime.topic() returns text
    language sql stable set search_path to '' as $fn$
      select nullif(current_setting('realtime.topic', true), '')::text
    $fn$;
    grant execute on function realtime.topic() to anon, authenticated, service_role;
  end if;
  if to_regprocedure('realtime.send(jsonb, text, text, boolean)') is null then
    create function realtime.send(payload jsonb, event text, topic text, private boolean default true)
    returns void
    language plpgsql volatile set search_path to '' as $fn$
    begin
      begin
        perform set_config('realtime.topic', topic, true);
        -- As Supabase's current version: an id is added only when the payload has none.
        insert into realtime.messages (payload, event, topic, private, extension)
        values (case when payload ? 'id' then payload else payload || jsonb_build_object('id', gen_random_uuid()) end,
                event, topic, private, 'broadcast');
      exception when others then
        -- Supabase turns any failure into a warning: a broadcast must never abort the write.
        raise warning 'ErrorSendingBroadcastMessage: %', sqlerrm;
      end;
    end;
    $fn$;
    grant execute on function realtime.send(jsonb, text, text, boolean) to anon, authenticated, service_role;
  end if;
end
$guard$;

-- Daily partitions, as the Realtime server keeps them: yesterday through today + 3.
create or replace function realtime.ensure_partitions() returns void
language plpgsql volatile set search_path to '' as $$
declare
  day date;
begin
  for day in select generate_series(current_date - 1, current_date + 3, interval '1 day')::date loop
    execute format(
      'create table if not exists realtime.%I partition of realtime.messages for values from (%L) to (%L)',
      'messages_' || to_char(day, 'YYYY_MM_DD'), day, day + 1);
  end loop;
end;
$$;

select realtime.ensure_partitions();

-- What the Realtime server itself does, for the local gateway (local/realtime.ts). Only where
-- no Realtime server owns realtime.messages: on Supabase (and the Supabase CLI's stack) the
-- role supabase_realtime_admin and the table realtime.schema_migrations exist, and this is skipped.
--  * realtime.local_gateway_notify(): after each broadcast row is inserted, NOTIFY
--    `realtime_messages` with the row's id and inserted_at (its partition key), its privacy and,
--    when short, its topic; never the payload, since a NOTIFY carries at most 8000 bytes. The
--    notification is sent at commit, so a rolled-back row (an authorization probe) never is.
--  * realtime.drop_old_partitions(): drops the daily partitions entirely older than 72 hours,
--    as the Realtime server's janitor does; the gateway runs it with ensure_partitions() hourly.
do $local$
begin
  if exists (select 1 from pg_roles where rolname = 'supabase_realtime_admin')
     or to_regclass('realtime.schema_migrations') is not null then
    return;
  end if;

  create or replace function realtime.local_gateway_notify() returns trigger
  language plpgsql set search_path to '' as $fn$
  begin
    perform pg_notify('realtime_messages', json_build_object(
      'id', new.id,
      'inserted_at', new.inserted_at,
      'private', coalesce(new.private, false),
      'topic', case when octet_length(new.topic) <= 1000 then new.topic end)::text);
    return null;
  end;
  $fn$;

  if not exists (
    select 1 from pg_trigger
     where tgrelid = 'realtime.messages'::regclass and tgname = 'local_gateway_notify' and tgparentid = 0
  ) then
    create trigger local_gateway_notify after insert on realtime.messages
      for each row when (new.extension = 'broadcast') execute function realtime.local_gateway_notify();
  end if;

  create or replace function realtime.drop_old_partitions(older_than interval default interval '72 hours')
  returns setof text
  language plpgsql volatile set search_path to '' as $fn$
  declare
    part record;
  begin
    for part in
      select c.relname
        from pg_inherits i
        join pg_class c on c.oid = i.inhrelid
       where i.inhparent = 'realtime.messages'::regclass
         and c.relname ~ '^messages_[0-9]{4}_[0-9]{2}_[0-9]{2}$'
         and to_date(substr(c.relname, 10), 'YYYY_MM_DD') + 1 <= localtimestamp - older_than
       order by c.relname
    loop
      execute format('drop table realtime.%I', part.relname);
      return next part.relname;
    end loop;
  end;
  $fn$;
end
$local$;

-- An empty publication, as on Supabase.
do $$
begin
  if not exists (select 1 from pg_publication where pubname = 'supabase_realtime') then
    create publication supabase_realtime;
  end if;
end
$$;

-- ============================================================================
-- storage: the Supabase Storage tables our SQL reads (a stored object's existence, size,
-- type and MD5). Locally the storage server in local/ writes them, as Storage does.
-- ============================================================================
create schema if not exists storage;
grant usage on schema storage to anon, authenticated, service_role;

create table if not exists storage.buckets (
  id text primary key,
  name text not null unique,
  owner uuid,
  public boolean default false,
  file_size_limit bigint,
  allowed_mime_types text[],
  created_at timestamptz default now(),
  updated_at timestamptz default now()
);

create table if not exists storage.objects (
  id uuid primary key default gen_random_uuid(),
  bucket_id text references storage.buckets (id),
  name text,
  owner uuid,
  metadata jsonb,
  created_at timestamptz default now(),
  updated_at timestamptz default now(),
  last_accessed_at timestamptz default now(),
  unique (bucket_id, name)
);

alter table storage.buckets enable row level security;
alter table storage.objects enable row level security;
-- Supabase refuses a direct DELETE on storage.objects (only the Storage API, which sets the
-- setting below, may: supabase/storage migrations/tenant/0050-prevent-direct-deletes.sql). Here
-- too, and only where no such function exists (a real instance keeps its own).
do $$
begin
  if to_regprocedure('storage.protect_delete()') is null then
    create function storage.protect_delete() returns trigger language plpgsql as $fn$
    begin
      if coalesce(current_setting('storage.allow_delete_query', true), 'false') <> 'true' then
        raise exception 'Direct deletion from storage tables is not allowed. Use the Storage API instead.'
          using errcode = '42501', hint = 'This prevents accidental data loss from orphaned objects.';
      end if;
      return null;
    end
    $fn$;
    create trigger protect_objects_delete before delete on storage.objects
      for each statement execute function storage.protect_delete();
  end if;
end
$$;
