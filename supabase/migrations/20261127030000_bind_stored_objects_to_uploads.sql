-- Issue 30: a stored file is bound to its upload in the transaction in which Storage records it,
-- and both entries (`npm start` and the edge function) go through Supabase Storage's REST API
-- (locally local/storage-api.ts), so the local storage server's claims are gone.
--
-- * app.tg_storage_objects__bind_upload (triggers app_bind_upload, app_keep_upload on
--   storage.objects, bucket `uploads` only): an object is recorded only for an upload that exists
--   and was never stored, with the declared size, type and (single-part eTag) MD5; it sets
--   app.uploads.stored_at. A stored object is never replaced or renamed. Storage answers the
--   refusal (42501) as AccessDenied with the trigger's message. On Supabase, `postgres` may create
--   triggers on storage.objects: Storage's tables grant all to postgres by default privileges
--   (supabase/postgres, migrations/db/init-scripts/00000000000002-storage-schema.sql).
-- * app.uploads.sniffed_type: what the stored bytes are, read once by the first request that
--   attaches the upload or by the storage worker (app.record_upload_inspection); a named type is
--   attached only when the bytes show it, on Supabase as locally.
-- * Gone: put_started_at and app.begin_stored_file / end_stored_file / record_stored_file (the
--   local PUT server), app.unmeasured_images / record_image_size / record_detected_type (replaced
--   by app.uninspected_uploads and app.record_upload_inspection).
--
-- Existing rows: stored_at from storage.objects; attached uploads passed the old checks, so their
-- sniffed_type is what they were attached as. Unattached stored uploads are read when attached (or
-- by the worker's next pass). Written from supabase/schemas/60_uploads.sql (test/schema.test.ts).
--
-- Cost when pushed: one transaction. Its first ALTER TABLE takes app.uploads' ACCESS EXCLUSIVE lock
-- until the commit, and the backfill updates every stored upload once (its stored card is computed
-- again), so reading and writing uploads (pages with attachments, POST /v1/uploads, attaching)
-- waits for the whole migration; the time grows with the number of uploads and was not measured
-- here. Push it in a quiet hour; `select count(*) from app.uploads` first. Then deploy the
-- function at once: until then the old function's attaches of files nobody read are refused (422
-- "could not be read from storage yet": it does not read them) and its maintenance pass fails
-- (app.unmeasured_images is gone). Deployed first, the new function fails to attach (no
-- app.uploads_to_inspect) until the push.

alter table app.uploads add column stored_at timestamptz;
alter table app.uploads add column sniffed_type text;
alter table app.uploads drop column put_started_at;
comment on table app.uploads is
  'A file a member uploads. Attached to a todo or comment it is an Attachment (id att_…); never attached, it is removed after a day. Its checksum is the MD5 the client declared, which the object Storage records must match (app.tg_storage_objects__bind_upload).';
comment on column app.uploads.stored_at is 'When Storage recorded the file in storage.objects, with the declared size, type and MD5 (app.tg_storage_objects__bind_upload, in Storage''s own transaction); null: not stored. Set once: a signed URL stores one file.';

comment on column app.uploads.sniffed_type is 'What the stored file''s first bytes are (functions/lib/media.ts storedType): the declared type when the file starts as one, else application/octet-stream; for a file declared application/octet-stream, the type found in its bytes or name, else application/octet-stream. Written once by the first request that attaches it or by the storage worker (app.record_upload_inspection); null: not read yet. A named type is attached only when this is it.';

comment on column app.uploads.measured_at is
  'When the file''s bytes were read (app.record_upload_inspection) and, for an image, its dimensions (null: not yet). Set also when the file could not be read as an image, so it is not read again.';

comment on column app.uploads.detected_type is
  'For an upload declared application/octet-stream (any type we do not name is declared so: the PUT carries application/octet-stream): the type found in the file''s bytes (file-type), else the type of its file name''s extension when a name may give it (never an active type: functions/lib/media.ts typeFromName), by the first attaching request or the storage worker (app.record_upload_inspection); null until then or when nothing is recognised. The attachment''s mime_type is this, else content_type. Members cannot write it.';


update app.uploads u set stored_at = o.created_at
  from storage.objects o where o.bucket_id = 'uploads' and o.name = u.key and u.stored_at is null;
update app.uploads u set sniffed_type = coalesce(u.detected_type, u.content_type)
  where u.attached_at is not null and u.stored_at is not null and u.sniffed_type is null;

drop index app.uploads_unmeasured_idx;
create index uploads_uninspected_idx on app.uploads (stored_at) where ((sniffed_type is null) and (stored_at is not null));

drop function app.record_stored_file(text, bigint, text, text, integer, integer);
drop function app.begin_stored_file(text, interval);
drop function app.end_stored_file(text);
drop function app.unmeasured_images(integer);
drop function app.record_image_size(text, integer, integer);
drop function app.record_detected_type(text, text);

create function app.uninspected_uploads(batch integer)
returns table(key text, filename text, content_type text)
language sql
stable
security definer
set search_path = ''
as $$
  select u.key, u.filename, u.content_type from app.uploads u
  where u.sniffed_type is null and u.stored_at is not null
  order by u.stored_at
  limit batch
$$;
comment on function app.uninspected_uploads(integer) is
  'Stored files whose bytes nobody read yet (no attach tried them), oldest first, with their names and declared types, for the storage worker: it finds what they are (functions/lib/inspect.ts) and measures images.';
grant execute on function app.uninspected_uploads(integer) to service_role;

create function app.uploads_to_inspect(upload_ids uuid[])
returns table(key text, filename text, content_type text)
language sql
stable
security definer
set search_path = ''
as $$
  select u.key, u.filename, u.content_type from app.uploads u
  where u.id = any (upload_ids) and u.sniffed_type is null and u.stored_at is not null
$$;
comment on function app.uploads_to_inspect(uuid[]) is
  'Of the uploads a request is about to attach (ids from signed_ids the HTTP layer verified, so only ids we issued), those stored and whose bytes nobody read yet: the HTTP layer reads their start from storage and records what they are (app.record_upload_inspection) before attaching. Whose they are is checked by app.attach_uploads; reading a file records only the truth about it. Called by the API''s own connection, not as a member.';
grant execute on function app.uploads_to_inspect(uuid[]) to service_role;

create function app.record_upload_inspection(object_key text, sniffed text, image_width integer, image_height integer)
returns void
language sql
volatile
security definer
set search_path = ''
as $$
  update app.uploads u
     set sniffed_type = sniffed,
         detected_type = case when u.content_type = 'application/octet-stream' and u.detected_type is null
                              then nullif(sniffed, 'application/octet-stream') else u.detected_type end,
         width = image_width, height = image_height, measured_at = now()
   where u.key = object_key and u.stored_at is not null and u.sniffed_type is null and sniffed is not null
$$;
comment on function app.record_upload_inspection(text, text, integer, integer) is
  'Records what the bytes of a stored file are, once (the first of the attaching request and the storage worker): sniffed_type (the declared type when the file starts as one, else application/octet-stream; for a file declared application/octet-stream the type found in its bytes or name), detected_type for those declared application/octet-stream, and the dimensions of an image (null when unreadable). Called by the API''s own connection (the attaching request) and the storage worker, never as a member: members cannot write these columns.';
grant execute on function app.record_upload_inspection(text, text, integer, integer) to service_role;

create or replace function app.attach_uploads(upload_ids jsonb, target_todo uuid, target_comment uuid, target_message uuid, field text)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  wanted uuid[] := array(select (value #>> '{}')::uuid from jsonb_array_elements(coalesce(upload_ids, '[]'::jsonb)));
  upload app.uploads;
begin
  -- Only onto what the requesting member wrote (the callers check too; this keeps it true).
  if (target_todo is not null and not exists (select 1 from app.todos t where t.id = target_todo and t.user_id = (select auth.uid())))
     or (target_comment is not null and not exists (select 1 from app.comments c where c.id = target_comment and c.user_id = (select auth.uid())))
     or (target_message is not null and not exists (select 1 from app.messages m where m.id = target_message and m.user_id = (select auth.uid()))) then
    raise exception 'app.attach_uploads: only onto the requesting member''s own content' using errcode = '42501';
  end if;
  for upload in select * from app.uploads u where u.id = any (wanted) order by array_position(wanted, u.id) for update loop
    if upload.user_id <> (select auth.uid()) then
      perform app.http_error(422, format('%s: that upload belongs to someone else.', field));
    elsif upload.attached_at is not null then
      perform app.http_error(422, format('%s: that upload is already attached.', field));
    end if;
    if upload.stored_at is null then
      perform app.http_error(422, format('%s: the file %L has not been uploaded yet.', field, upload.filename));
    elsif upload.sniffed_type is null then
      -- The attaching request reads every stored file it names first; null means storage had it not.
      perform app.http_error(422, format('%s: the file %L could not be read from storage yet; try again.', field, upload.filename));
    elsif upload.content_type <> 'application/octet-stream' and upload.sniffed_type <> upload.content_type then
      perform app.http_error(422, format('%s: the stored file %L is not %s (its bytes are %s).',
        field, upload.filename, upload.content_type, upload.sniffed_type));
    end if;
    if target_message is not null and coalesce(upload.detected_type, upload.content_type) !~ '^(image|video)/' then
      perform app.http_error(422, format('%s must be an image or a video.', field));
    end if;
    update app.uploads u
       set todo_id = target_todo, comment_id = target_comment, message_id = target_message, attached_at = clock_timestamp()
    where u.id = upload.id;
  end loop;
  if (select count(*) from app.uploads u where u.id = any (wanted)) < cardinality(wanted) then
    perform app.http_error(422, format('%s: no upload matches one of the signed ids.', field));
  end if;
end;
$$;
comment on function app.attach_uploads(jsonb, uuid, uuid, uuid, text) is
  'Attaches the caller''s uploads (ids from verified signed_ids) to a todo, comment or message, in order. 422 naming the field when an upload is someone else''s, already attached, not stored yet (stored_at: Storage recorded it with the declared size, type and MD5, app.tg_storage_objects__bind_upload), not read yet, or of a named type its bytes do not show (sniffed_type; an upload declared application/octet-stream takes what its bytes are, its detected_type), or unknown; messages take only images and videos. Security definer: it reads and locks rows of the member''s uploads whatever the policies. Rows are locked so two requests cannot attach one upload twice.';
grant execute on function app.attach_uploads(jsonb, uuid, uuid, uuid, text) to authenticated;

create function app.tg_storage_objects__bind_upload()
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
       or new.metadata is distinct from old.metadata then
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
  'Binds a stored object of the uploads bucket to its upload row in the transaction in which Storage records it (Uploader.completeUpload of supabase/storage, and the local Storage API): refused (42501, which Storage answers as 403 AccessDenied with this message, HTTP 400) unless the upload exists, was never stored, and the object has the declared size, type and (single-part eTag) MD5; then sets app.uploads.stored_at. A stored object is never replaced (an upsert, two racing PUTs of one URL) nor renamed. So a signed URL stores one file of the declared size, once, and the quota counted from the declared sizes holds. Security definer: Storage writes as its own role, which may not touch app.uploads.';
create trigger app_bind_upload before insert on storage.objects
  for each row when (new.bucket_id = 'uploads') execute function app.tg_storage_objects__bind_upload();
create trigger app_keep_upload before update on storage.objects
  for each row when (old.bucket_id = 'uploads' or new.bucket_id = 'uploads') execute function app.tg_storage_objects__bind_upload();

revoke execute on function app.uninspected_uploads(integer) from public;
revoke execute on function app.uploads_to_inspect(uuid[]) from public;
revoke execute on function app.record_upload_inspection(text, text, integer, integer) from public;
revoke execute on function app.tg_storage_objects__bind_upload() from public;
