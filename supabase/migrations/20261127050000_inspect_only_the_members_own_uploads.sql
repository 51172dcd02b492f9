-- Issue 30, review: the attaching request read and recorded the stored file of any upload whose
-- signed id it named, another member's included (app.uploads_to_inspect ran on the API's own
-- connection): a request of Mallory's naming Pat's signed id changed Pat's row (sniffed_type,
-- dimensions, measured_at, updated_at, its card) before the attach refused it. Now the list of
-- uploads to read comes from api.uploads_to_inspect, which runs as the requesting member (RLS and
-- auth.uid()): only the member's own uploads are read. Written from supabase/schemas/60_uploads.sql
-- (test/schema.test.ts).
--
-- Also from the review:
-- * app.forget_file_deletions no longer deletes from storage.objects: the Storage API's DELETE
--   removed the rows with the files, and on Supabase a direct DELETE on storage.objects is refused
--   (statement trigger protect_objects_delete, storage.protect_delete(), supabase/storage
--   migrations/tenant/0050-prevent-direct-deletes.sql), even one that matches no row: every worker
--   pass with queued deletions rolled back there, and the queue never drained.
-- * The trigger refuses a change of an uploads object's version too (Storage serves the version).
-- * Migration 20261127030000 marked every object already stored as bound without its checks: an
--   upload not attached yet whose object has another size, type or (single-part) MD5 than declared
--   is unbound again (stored_at null: never attachable; the worker removes it within a day).
--
-- Cost: the functions are replaced at once; the update reads the unattached stored uploads with
-- their objects (at most a day of uploads).

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

create or replace function app.forget_file_deletions(keys text[])
returns void
language sql
volatile
security definer
set search_path = ''
as $$
  delete from app.file_deletions d where d.key = any (keys);
$$;
comment on function app.forget_file_deletions(text[]) is
  'Marks files as deleted from storage: their outbox entries go. Their storage.objects rows went with the files (the Storage API''s DELETE removes both); deleting from storage.objects here is refused on Supabase (storage.protect_delete: only the Storage API may).';
grant execute on function app.forget_file_deletions(text[]) to service_role;

create or replace function app.tg_storage_objects__bind_upload()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  upload app.uploads;
  stored_size text;
  stored_type text;
  stored_etag text;
begin
  if tg_op = 'UPDATE' then
    -- A stored file is never replaced, renamed or moved into another name: an upsert of a spent
    -- signed URL (two PUTs that both passed Storage's check before either was recorded) lands here.
    if new.bucket_id is distinct from old.bucket_id or new.name is distinct from old.name
       or new.metadata is distinct from old.metadata
       or to_jsonb(new) -> 'version' is distinct from to_jsonb(old) -> 'version' then
      raise exception 'This upload URL has been used: the file is stored and is never replaced. Ask POST /v1/uploads for a new URL to upload another file.'
        using errcode = '42501';
    end if;
    return new;
  end if;
  -- The upload row locked: of two PUTs of one URL, the second waits here and then sees the first stored.
  select * into upload from app.uploads u where u.key = new.name for update;
  if upload.id is null then
    raise exception 'No such upload: it was removed, or never asked for (POST /v1/uploads gives the URL to PUT to).'
      using errcode = '42501';
  elsif upload.stored_at is not null then
    raise exception 'This upload URL has been used: the file is stored. Ask POST /v1/uploads for a new URL to upload another file.'
      using errcode = '42501';
  end if;
  if new.metadata is null then
    -- Storage's permission probe before it reads the body (Uploader.canUpload inserts the row
    -- without metadata and rolls back): an unknown or spent upload is refused before a byte is stored.
    return new;
  end if;
  stored_size := new.metadata ->> 'size';
  stored_type := lower(btrim(split_part(coalesce(new.metadata ->> 'mimetype', ''), ';', 1)));
  stored_etag := lower(btrim(coalesce(new.metadata ->> 'eTag', ''), '"'));
  if stored_size is null or stored_size !~ '^[0-9]{1,19}$' or stored_size::numeric <> upload.byte_size then
    raise exception 'The file is % bytes, but this upload was declared as % bytes: nothing was kept. PUT exactly the file you declared.',
      coalesce(stored_size, 'an unknown number of'), upload.byte_size using errcode = '42501';
  elsif stored_type <> upload.content_type then
    raise exception 'The file was sent as %, but this upload was declared as %: nothing was kept. PUT it with the Content-Type of the upload''s headers.',
      coalesce(nullif(stored_type, ''), 'no type'), upload.content_type using errcode = '42501';
  elsif stored_etag ~ '^[0-9a-f]{32}$' and stored_etag <> encode(upload.checksum, 'hex') then
    -- An MD5 eTag (a single-part upload) is the file's MD5; a multipart eTag (md5-of-parts-N) is not compared.
    raise exception 'The file does not match the checksum declared for this upload (it changed or arrived damaged): nothing was kept.'
      using errcode = '42501';
  end if;
  update app.uploads u set stored_at = clock_timestamp() where u.id = upload.id;
  return new;
end;
$$;
comment on function app.tg_storage_objects__bind_upload() is
  'Binds a stored object of the uploads bucket to its upload row in the transaction in which Storage records it (Uploader.completeUpload of supabase/storage, and the local Storage API): refused (42501, which Storage answers as 403 AccessDenied with this message, HTTP 400) unless the upload exists, was never stored, and the object has the declared size, type and (single-part eTag) MD5; then sets app.uploads.stored_at. A stored object is never replaced (an upsert, two racing PUTs of one URL, another version) nor renamed. So a signed URL stores one file of the declared size, once, and the quota counted from the declared sizes holds. Security definer: Storage writes as its own role, which may not touch app.uploads.';

update app.uploads u set stored_at = null, sniffed_type = null
  from storage.objects o
 where o.bucket_id = 'uploads' and o.name = u.key and u.attached_at is null and u.stored_at is not null
   and (coalesce(o.metadata ->> 'size', '') !~ '^[0-9]{1,19}$'
        or (o.metadata ->> 'size')::numeric <> u.byte_size
        or lower(btrim(split_part(coalesce(o.metadata ->> 'mimetype', ''), ';', 1))) <> u.content_type
        or (lower(btrim(coalesce(o.metadata ->> 'eTag', ''), '"')) ~ '^[0-9a-f]{32}$'
            and lower(btrim(coalesce(o.metadata ->> 'eTag', ''), '"')) <> encode(u.checksum, 'hex')));
