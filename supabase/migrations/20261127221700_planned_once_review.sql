-- Functions planned once: a review's fixes (issue 27)
--
-- From an attacker's review of 20261127212559 and 20261127213252:
-- - PL/pgSQL plans a function's first calls with the arguments' values, and the planner folds a
--   function of constants wherever it stands: app.oauth_authenticate_client decoded the
--   presented secret hash even for a public client, so anything but hex raised an error where the
--   SQL function never reached it. It now tests for a SHA-256 in hex first (the HTTP layer sends
--   only that or null): anything else authenticates no client. app.web_page says why its
--   ref::bigint stays after the tests of kind and form.
-- - The row variables of app.resolve_comment and app.oauth_authenticate_client were named
--   `found`, hiding PL/pgSQL's FOUND; now `result`.
-- - api.uploads_to_inspect and app.record_upload_inspection, on the path of every request that
--   attaches a fresh upload, become PL/pgSQL too.
--
-- CREATE OR REPLACE only (the diff wrote DROP FUNCTION first): grants stay, nothing is locked.

set local check_function_bodies = off;

-- api.uploads_to_inspect: supabase/schemas/60_uploads.sql
CREATE OR REPLACE FUNCTION api.uploads_to_inspect (
  upload_ids jsonb
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return (select coalesce(jsonb_agg(jsonb_build_object('key', u.key, 'filename', u.filename, 'content_type', u.content_type)), '[]'::jsonb)
  from app.uploads u
  where u.id = any (array(select (value #>> '{}')::uuid from jsonb_array_elements(coalesce(upload_ids, '[]'::jsonb))))
    and u.user_id = (select auth.uid()) and u.sniffed_type is null and u.stored_at is not null);
end;
$function$;

-- app.oauth_authenticate_client: supabase/schemas/85_oauth.sql
CREATE OR REPLACE FUNCTION app.oauth_authenticate_client (
  presented_client_id   text,
  presented_secret_hash text
)
  RETURNS app.oauth_clients
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
declare
  result app.oauth_clients;
begin
  -- The hash is tested before it is decoded: PL/pgSQL plans its first calls with the arguments'
  -- values, and the planner decodes a constant wherever it stands, even in a branch no row takes.
  -- Anything but a SHA-256 in hex (functions/oauth/oauth.ts sends only that, or null)
  -- authenticates no client, where decoding it would raise an error.
  select c.* into result
  from app.oauth_clients c
  where c.client_id = presented_client_id
    and case when c.secret_hash is null then presented_secret_hash is null
             else presented_secret_hash ~ '^[0-9a-f]{64}$' and c.secret_hash = decode(presented_secret_hash, 'hex') end;
  return result;
end;
$function$;

-- app.record_upload_inspection: supabase/schemas/60_uploads.sql
CREATE OR REPLACE FUNCTION app.record_upload_inspection (
  object_key   text,
  sniffed      text,
  image_width  integer,
  image_height integer
)
  RETURNS void
  LANGUAGE plpgsql
  SECURITY DEFINER
  SET search_path TO ''
  AS $function$
begin
  update app.uploads u
     set sniffed_type = sniffed,
         detected_type = case when u.content_type = 'application/octet-stream' and u.detected_type is null
                              then nullif(sniffed, 'application/octet-stream') else u.detected_type end,
         width = image_width, height = image_height, measured_at = now()
   where u.key = object_key and u.stored_at is not null and u.sniffed_type is null and sniffed is not null;
end;
$function$;

-- app.resolve_comment: supabase/schemas/40_social.sql
CREATE OR REPLACE FUNCTION app.resolve_comment (
  ref text
)
  RETURNS app.comments
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
declare
  result app.comments;
begin
  select c.* into result from app.comments c where c.id = app.from_public_id('comm', ref);
  return result;
end;
$function$;

-- app.web_page: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.web_page (
  kind text,
  ref  text
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SECURITY DEFINER
  SET search_path TO ''
  AS $function$
begin
  return (with web as (select app.web_url() as base, app.public_url() as api),
  member as (
    select u.* from app.users u
    where kind = 'user' and lower(u.username) = lower(ref) and u.privacy <> 'private'),
  todo as (
    -- ref::bigint stays after the tests of kind and form: the planner folds a cast of a constant
    -- (PL/pgSQL plans its first calls with the arguments' values) unless a condition before it
    -- is already false, and /@alice must not fail on 'alice'::bigint.
    select t.* from app.todos t
    where kind = 'todo' and ref ~ '^[0-9]{1,18}$' and t.number = ref::bigint and t.author_privacy = 'public'),
  project as (
    select p.* from app.projects p
    where kind = 'project' and (p.id = app.from_public_id('proj', ref) or lower(p.slug) = lower(ref)) and p.privacy <> 'private')
  select coalesce(
    (select jsonb_build_object(
       'kind', 'user', 'title', coalesce(nullif(btrim(concat_ws(' ', m.first_name, m.last_name)), ''), m.username),
       'username', m.username, 'bio', m.bio, 'url', web.base || '/@' || m.username,
       'image', app.picture_urls(web.api, 'avatar', m.avatar_key, coalesce(nullif(btrim(concat_ws(' ', m.first_name, m.last_name)), ''), m.username), coalesce(m.header_color, app.default_header_color(m.id))) ->> 'large',
       'todos_hidden', m.privacy <> 'public',
       'todos', case when m.privacy = 'public' then coalesce((
         select jsonb_agg(jsonb_build_object('body', t.body, 'created_at', t.created_at, 'url', web.base || '/todos/' || t.number) order by t.created_at desc)
         from (select * from app.todos t where t.user_id = m.id and t.author_privacy = 'public' order by t.created_at desc limit 20) t), '[]') else '[]' end)
     from member m, web),
    (select jsonb_build_object(
       'kind', 'todo', 'title', left(t.body, 80), 'body', t.body, 'created_at', t.created_at, 'url', web.base || '/todos/' || t.number,
       'author', jsonb_build_object('username', u.username, 'url', web.base || '/@' || u.username),
       'reactions_count', t.reactions_count, 'comments_count', t.comments_count,
       'attachments', coalesce((
         select jsonb_agg(jsonb_build_object('filename', a.filename, 'url', web.api || '/files/' || a.key) order by a.attached_at, a.id)
         from app.uploads a where a.todo_id = t.id), '[]'))
     from todo t join app.users u on u.id = t.user_id, web),
    (select jsonb_build_object(
       'kind', 'project', 'title', p.name, 'pitch', p.pitch, 'description', p.description,
       'url', web.base || '/projects/' || coalesce(p.slug, app.to_public_id('proj', p.id)),
       'image', app.picture_urls(web.api, 'logo', p.logo_key, p.name, coalesce(p.header_color, app.default_header_color(p.id))) ->> 'large',
       'todos_hidden', p.privacy <> 'public',
       'todos', case when p.privacy = 'public' then coalesce((
         select jsonb_agg(jsonb_build_object('body', t.body, 'created_at', t.created_at, 'url', web.base || '/todos/' || t.number) order by t.created_at desc)
         from (select t.* from app.todos t
               where t.project_id = p.id and t.author_privacy = 'public' order by t.created_at desc limit 20) t), '[]') else '[]' end)
     from project p, web)));
end;
$function$;

-- api.uploads_to_inspect: supabase/schemas/60_uploads.sql
COMMENT ON FUNCTION "api"."uploads_to_inspect"(jsonb) IS 'Of the uploads a request is about to attach (ids from signed_ids the HTTP layer verified), the requesting member''s own that are stored and whose bytes nobody read yet: the HTTP layer reads their start from storage and records what they are (app.record_upload_inspection) before the request''s own call attaches them. Runs as the member (RLS and auth.uid()), so a request never reads or records anything of another member''s upload, whatever signed id it names. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.record_upload_inspection: supabase/schemas/60_uploads.sql
COMMENT ON FUNCTION "app"."record_upload_inspection"(text, text, integer, integer) IS 'Records what the bytes of a stored file are, once (the first of the attaching request and the storage worker): sniffed_type (the declared type when the file starts as one, else application/octet-stream; for a file declared application/octet-stream the type found in its bytes or name), detected_type for those declared application/octet-stream, and the dimensions of an image (null when unreadable). Called by the API''s own connection (the attaching request) and the storage worker, never as a member: members cannot write these columns. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
