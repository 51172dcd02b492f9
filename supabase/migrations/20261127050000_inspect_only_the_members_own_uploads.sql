-- Issue 30, review: the attaching request read and recorded the stored file of any upload whose
-- signed id it named, another member's included (app.uploads_to_inspect ran on the API's own
-- connection): a request of Mallory's naming Pat's signed id changed Pat's row (sniffed_type,
-- dimensions, measured_at, updated_at, its card) before the attach refused it. Now the list of
-- uploads to read comes from api.uploads_to_inspect, which runs as the requesting member (RLS and
-- auth.uid()): only the member's own uploads are read. Written from supabase/schemas/60_uploads.sql
-- (test/schema.test.ts). Cheap: one function dropped, one created.

drop function app.uploads_to_inspect(uuid[]);

create function api.uploads_to_inspect(upload_ids jsonb)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select coalesce(jsonb_agg(jsonb_build_object('key', u.key, 'filename', u.filename, 'content_type', u.content_type)), '[]'::jsonb)
  from app.uploads u
  where u.id = any (array(select (value #>> '{}')::uuid from jsonb_array_elements(coalesce(upload_ids, '[]'::jsonb))))
    and u.user_id = (select auth.uid()) and u.sniffed_type is null and u.stored_at is not null
$$;
comment on function api.uploads_to_inspect(jsonb) is
  'Of the uploads a request is about to attach (ids from signed_ids the HTTP layer verified), the requesting member''s own that are stored and whose bytes nobody read yet: the HTTP layer reads their start from storage and records what they are (app.record_upload_inspection) before the request''s own call attaches them. Runs as the member (RLS and auth.uid()), so a request never reads or records anything of another member''s upload, whatever signed id it names.';
grant execute on function api.uploads_to_inspect(jsonb) to authenticated;

revoke execute on function api.uploads_to_inspect(jsonb) from public;
