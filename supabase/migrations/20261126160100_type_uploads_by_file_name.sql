-- give the storage worker the file names of the uploads it types (issue 28, item 4):
-- docs/uploads.md, "Types". A file declared application/octet-stream whose bytes match no
-- signature takes the type of its name's extension (never an active type), so the worker, which
-- types such files on Supabase, reads each upload's name with its key.
--
-- Written from supabase/schemas/60_uploads.sql (the desired state): the function as it is
-- there, verbatim; test/schema.test.ts proves the two agree. Its result gains a column, so it
-- is dropped and created again (create or replace cannot change a result type).

drop function app.unmeasured_images(integer);

create function app.unmeasured_images(batch integer)
returns table(key text, filename text)
language sql
stable
security definer
set search_path = ''
as $$
  select u.key, u.filename from app.uploads u
  where u.measured_at is null and (coalesce(u.detected_type, u.content_type) ~ '^image/' or u.content_type = 'application/octet-stream')
    and exists (select 1 from storage.objects o where o.bucket_id = 'uploads' and o.name = u.key)
  order by u.created_at
  limit batch
$$;
comment on function app.unmeasured_images(integer) is
  'Stored images whose dimensions are not known yet, and stored files declared application/octet-stream not read yet (the worker finds their type from the bytes, else from the file name''s extension, then measures them if they are images), oldest first, for the storage worker, with their file names.';
grant execute on function app.unmeasured_images(integer) to service_role;
revoke execute on function app.unmeasured_images(integer) from public;

comment on column app.uploads.detected_type is
  'For an upload declared application/octet-stream (any type we do not name is declared so: the PUT carries application/octet-stream): the type found in the file''s bytes (file-type), else the type of its file name''s extension when a name may give it (never an active type: functions/lib/media.ts typeFromName), by the local storage server on PUT or the storage worker on Supabase; null until then or when nothing is recognised. The attachment''s mime_type is this, else content_type. Members cannot write it.';
