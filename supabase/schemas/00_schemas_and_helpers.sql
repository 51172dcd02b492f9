-- Schemas, conventions and the small helpers every domain uses.
--
-- The desired state of the database, one file per domain, read top to bottom. Supabase's
-- declarative schema: the Supabase CLI applies these files in order (supabase/config.toml,
-- [db.migrations] schema_paths); supabase/migrations are the deltas that deploy them, and
-- test/schema.test.ts proves that the migrations build exactly this. To change the schema,
-- edit the domain file, then `npm run db:diff -- <name>` writes the migration (README,
-- "Changing the schema").
--
-- Layout (after supabase/dbdev and basejump):
--   app  private: tables, policies, helpers. Never exposed through PostgREST.
--   api  one function per endpoint; the HTTP layer calls exactly one per request,
--        as role `authenticated` with `request.jwt.claims` set, so RLS applies.
-- Every file has the same sections: tables (with their comments and indexes), helpers,
-- row-level security and grants (per table: policies, then grants; after the helpers
-- because policies call them), triggers (each trigger function with its triggers), API
-- functions. Functions are executable only where granted: each file ends by revoking
-- execute from public (PostgreSQL grants it on every new function).

-- Function bodies are not checked here: they call functions of later files (the renderers
-- of 70_rendering.sql) and sections. They are the bodies the migrations created and checked,
-- as test/schema.test.ts proves.
set check_function_bodies = off;

-- ============================================================================
-- Schemas and types
-- ============================================================================
create schema app;
comment on schema app is
  'Tables, row-level security and helpers of the todo-sharing service. Private: not exposed through PostgREST.';
grant usage on schema app to authenticated, service_role;

create schema api;
comment on schema api is
  'One function per /v1 endpoint. The HTTP layer calls exactly one per request as role authenticated.';
grant usage on schema api to authenticated, service_role;

create type app.privacy as enum ('public', 'protected', 'private');
comment on type app.privacy is
  'Who may see a user''s todos or a project''s: public everyone; protected the owner (makers) and the followers they approved; private the owner (makers) only.';

-- ============================================================================
-- Tables
-- ============================================================================
create table app.time_zones (
  name text primary key
);
comment on table app.time_zones is
  'IANA time zone identifiers the database can compute local days in. Why a table: pg_timezone_names reads the zoneinfo directory on every call (milliseconds), a primary key lookup does not; and users.time_zone can reference it.';
-- Its rows (every name pg_timezone_names knows) are data, not schema: migration
-- 20261122000100 inserted them, and a schema diff neither sees nor writes rows.

-- ============================================================================
-- Helpers
-- ============================================================================
create function app.http_error(status integer, message text, detail jsonb default null::jsonb)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  raise exception using
    errcode = 'PT' || status::text,
    message = message,
    detail = coalesce(detail::text, '');
end;
$$;
comment on function app.http_error(integer, text, jsonb) is
  'Raises an error that the HTTP layer turns into the given status with body {"error": message}. Why a helper: one spelling of the PostgREST PTxxx convention, so no function invents its own. `detail` (a JSON object) carries extra facts such as retry_after. Volatile on purpose: an immutable call with constant arguments would be folded, and so raised, at plan time.';
grant execute on function app.http_error(integer, text, jsonb) to authenticated, service_role;

create function app.claims()
returns jsonb
language sql
stable
as $$
  select coalesce(nullif(current_setting('request.jwt.claims', true), '')::jsonb, '{}'::jsonb)
$$;
comment on function app.claims() is
  'Inlined (no SET clause, no table access). The claims of the current request, as app.authenticate() resolved them. Why not auth.jwt(): that is the raw token on Supabase, while these carry the facts of the credential (kind, can_write, scopes, first_party, chat) for API keys too.';
grant execute on function app.claims() to authenticated, service_role;

create function app.can_write()
returns boolean
language sql
stable
as $$
  select coalesce((app.claims() ->> 'can_write')::boolean, false)
$$;
comment on function app.can_write() is
  'Inlined (no SET clause, no table access). Whether the credential of this request may create, update or delete (read-write API key, or OAuth token with scope write). Policies check it too, so a read-only credential cannot write even through a buggy function.';
grant execute on function app.can_write() to authenticated, service_role;

create function app.public_url()
returns text
language sql
stable
as $$
  select coalesce(nullif(current_setting('app.public_url', true), ''), 'http://127.0.0.1:54321')
$$;
comment on function app.public_url() is
  'Inlined (no SET clause, no table access). The {base_url} that url fields start with. The HTTP layer sets app.public_url per request (PUBLIC_URL), so the database never hard-codes a host.';
grant execute on function app.public_url() to authenticated, service_role;

create function app.web_url()
returns text
language sql
stable
as $$
  select coalesce(nullif(current_setting('app.web_url', true), ''), app.public_url())
$$;
comment on function app.web_url() is
  'Inlined (no SET clause, no table access). The base of web url fields (/@username, /todos/{n}, /projects/{slug}): WEB_URL, which the HTTP layer sets per request as app.web_url, else the public URL (npm start serves those pages itself). Images and files stay on app.public_url(): the API serves them.';
grant execute on function app.web_url() to authenticated, service_role;

create function app.to_public_id(prefix text, id uuid)
returns text
language sql
immutable
parallel safe
as $$
  select prefix || '_' || replace(id::text, '-', '')
$$;
comment on function app.to_public_id(text, uuid) is
  'Inlined (no SET clause, no table access). Public identifier of a row: `user_` plus its uuid without dashes. Why uuids: stable, opaque (no counts or order leak) and the same key auth.users uses.';
grant execute on function app.to_public_id(text, uuid) to authenticated, service_role;

create function app.from_public_id(prefix text, public_id text)
returns uuid
language sql
immutable
parallel safe
as $$
  select case
    when public_id ~ ('^' || prefix || '_[0-9a-f]{32}$') then substr(public_id, length(prefix) + 2)::uuid
  end
$$;
comment on function app.from_public_id(text, text) is
  'Inlined (no SET clause, no table access). The uuid behind a public identifier, or null when the text is not one of this kind. Null (never an error) so that a malformed id is simply "not found".';
grant execute on function app.from_public_id(text, text) to authenticated, service_role;

create function app.default_header_color(id uuid)
returns text
language sql
immutable
parallel safe
as $$
  select (array['#F97316', '#EF4444', '#EAB308', '#22C55E', '#14B8A6', '#3B82F6', '#8B5CF6', '#EC4899'])
    [1 + abs(hashtext(id::text)) % 8]
$$;
comment on function app.default_header_color(uuid) is
  'Inlined (no SET clause, no table access). A fallback header colour picked from a fixed palette by the row id, so the same user or project always gets the same colour until one is chosen.';
grant execute on function app.default_header_color(uuid) to authenticated, service_role;

-- ============================================================================
-- Row-level security and grants
-- ============================================================================
-- app.time_zones
alter table app.time_zones enable row level security;
create policy "Time zones are readable by every signed-in user" on app.time_zones
  for select to authenticated using (true);
grant select on app.time_zones to authenticated;

-- ============================================================================
-- Triggers
-- ============================================================================
create function app.tg__set_updated_at()
returns trigger
language plpgsql
volatile
set search_path = ''
as $$
begin
  new.updated_at := now();
  return new;
end;
$$;
comment on function app.tg__set_updated_at() is
  'Keeps updated_at honest on every update, whoever writes the row, so no function has to remember it.';

-- ============================================================================
-- Execute only where granted above
-- ============================================================================
revoke execute on all functions in schema app, api from public;
