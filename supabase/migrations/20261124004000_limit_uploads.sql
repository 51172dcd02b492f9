-- Uploads cannot fill the disk (issue 11, items 6 and 9):
--   * a per-member storage quota and an upload rate on POST /v1/uploads (422 / 429);
--   * one completed PUT per signed upload URL: the storage server claims the upload before it
--     takes the body, so two concurrent PUTs cannot both land, and a PUT after a stored file
--     is refused (409);
--   * attaching checks the stored object's type as well as its size and MD5;
--   * the `uploads` bucket takes only the types and sizes we accept (Supabase Storage
--     enforces allowed_mime_types and file_size_limit on every upload to it).

-- ============================================================================
-- The bucket: what Supabase Storage accepts into it
-- ============================================================================
-- Kept equal to ALLOWED_CONTENT_TYPES and MAX_UPLOAD_BYTES of functions/uploads/uploads.routes.ts
-- (test/upload-limits.test.ts compares them). SVG, HTML and anything else scriptable are not in it.
insert into storage.buckets (id, name, public, file_size_limit, allowed_mime_types)
values ('uploads', 'uploads', false, 104857600, array[
  'image/png', 'image/jpeg', 'image/gif', 'image/webp', 'image/heic', 'image/heif', 'image/avif',
  'video/mp4', 'video/quicktime', 'video/webm',
  'application/pdf', 'text/plain', 'text/markdown', 'text/csv', 'application/zip',
  'application/msword',
  'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
  'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
  'application/vnd.openxmlformats-officedocument.presentationml.presentation'])
on conflict (id) do update
  set public = false, file_size_limit = excluded.file_size_limit, allowed_mime_types = excluded.allowed_mime_types;

-- ============================================================================
-- The quota: one row an operator can change without a deploy
-- ============================================================================
create table app.upload_limits (
  id boolean primary key default true check (id),
  member_bytes bigint not null check (member_bytes > 0),
  pending_bytes bigint not null check (pending_bytes > 0),
  description text not null
);
comment on table app.upload_limits is 'The per-member storage quota (one row). member_bytes: all the bytes of the uploads a member holds, attached or not; pending_bytes: of those, the bytes not attached yet (uploads asked for, perhaps never PUT, removed after a day). Read by app.reserve_upload_bytes; documented in docs/uploads.md.';

insert into app.upload_limits (member_bytes, pending_bytes, description) values
  (5::bigint * 1024 * 1024 * 1024, 1::bigint * 1024 * 1024 * 1024,
   '5 GiB held per member, of which at most 1 GiB not attached yet');

alter table app.upload_limits enable row level security;
create policy "The upload quota is public knowledge for members" on app.upload_limits
  for select to authenticated using (true);
grant select on app.upload_limits to authenticated;

-- The upload rate: 60 per 10 minutes (issue 11 item 8: 30 files in ten minutes must pass).
insert into app.rate_limits (action, max_events, per, description) values
  ('upload_create', 60, interval '10 minutes', 'POST /v1/uploads')
on conflict (action) do nothing;

-- ============================================================================
-- The claim of a PUT
-- ============================================================================
alter table app.uploads add column put_started_at timestamptz;
comment on column app.uploads.put_started_at is 'When the storage server began receiving the file (null: no PUT in progress). A claim, so that two PUTs of one signed URL cannot both land; released when a PUT fails, and void after the PUT''s deadline (a crashed server).';

create function app.reserve_upload_bytes(requested bigint)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  member uuid := (select auth.uid());
  quota app.upload_limits;
  held bigint;
  pending bigint;
begin
  select * into quota from app.upload_limits l where l.id;
  -- One member's uploads are counted one request at a time (a transaction-level lock on the
  -- member), so concurrent requests cannot each see room for themselves and together pass it.
  perform pg_advisory_xact_lock(hashtextextended('app.uploads:' || member::text, 0));
  select coalesce(sum(u.byte_size), 0), coalesce(sum(u.byte_size) filter (where u.attached_at is null), 0)
    into held, pending
  from app.uploads u where u.user_id = member;
  if held + requested > quota.member_bytes then
    perform app.http_error(422, format(
      'Storage quota reached: your files take %s of %s; delete some attachments or todos to free space.',
      pg_size_pretty(held), pg_size_pretty(quota.member_bytes)));
  elsif pending + requested > quota.pending_bytes then
    perform app.http_error(422, format(
      'Too many files uploaded but not attached: %s of %s waiting; attach them or wait a day for the unattached ones to expire.',
      pg_size_pretty(pending), pg_size_pretty(quota.pending_bytes)));
  end if;
end;
$$;
comment on function app.reserve_upload_bytes(bigint) is
  'Checks that the current member may hold `requested` more bytes (422 otherwise): all their uploads, attached or pending, against app.upload_limits. Takes a per-member transaction lock first, so concurrent POST /v1/uploads cannot race past the quota; the new upload row is inserted in the same transaction. Security definer: reads the member''s rows whatever the policies, under a lock a member cannot otherwise take.';
grant execute on function app.reserve_upload_bytes(bigint) to authenticated;

create or replace function api.upload_create(filename text, byte_size bigint, checksum_hex text, content_type text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  created app.uploads;
  safe_name text := left(coalesce(nullif(regexp_replace(filename, '[^A-Za-z0-9._-]+', '_', 'g'), ''), 'file'), 100);
begin
  -- '.' and '..' are no file names: as the last part of a key they would name a folder.
  if safe_name ~ '^\.+$' then
    safe_name := 'file';
  end if;
  perform app.hit_rate_limit('upload_create');
  perform app.reserve_upload_bytes(byte_size);
  insert into app.uploads (user_id, key, filename, byte_size, checksum, content_type)
  values ((select auth.uid()), replace(gen_random_uuid()::text, '-', '') || '/' || safe_name,
          filename, byte_size, decode(checksum_hex, 'hex'), content_type)
  returning * into created;
  return jsonb_build_object(
    'id', created.id,
    'key', created.key,
    'filename', created.filename,
    'byte_size', created.byte_size,
    'content_type', created.content_type,
    'checksum_hex', encode(created.checksum, 'hex'));
end;
$$;
comment on function api.upload_create(text, bigint, text, text) is
  'POST /v1/uploads: rate-limited (upload_create, 429), within the member''s storage quota (422, app.reserve_upload_bytes); records the upload the member is about to PUT and picks its storage key (the file name cleaned to [A-Za-z0-9._-], never only dots). The HTTP layer adds the signed PUT URL, its headers and the signed_id (it holds the signing secret).';

create function app.begin_stored_file(object_key text, put_deadline interval)
returns text
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  upload app.uploads;
begin
  select * into upload from app.uploads u where u.key = object_key for update;
  if upload.id is null then
    return 'unknown';
  elsif exists (select 1 from storage.objects o where o.bucket_id = 'uploads' and o.name = object_key) then
    return 'stored';
  elsif upload.put_started_at is not null and upload.put_started_at > now() - put_deadline then
    return 'busy';
  end if;
  update app.uploads u set put_started_at = now() where u.id = upload.id;
  return 'claimed';
end;
$$;
comment on function app.begin_stored_file(text, interval) is
  'The local storage server calls this before it reads a PUT''s body: ''claimed'' (go on), ''unknown'' (no such upload), ''stored'' (a PUT already completed: one per signed URL) or ''busy'' (another PUT is receiving it, started within put_deadline). The row lock makes the claim atomic, so of two concurrent PUTs one is refused. Supabase Storage does the same with its own rule: a signed upload URL without upsert cannot overwrite an object.';
grant execute on function app.begin_stored_file(text, interval) to service_role;

create function app.end_stored_file(object_key text)
returns void
language sql
volatile
security definer
set search_path = ''
as $$
  update app.uploads u set put_started_at = null where u.key = object_key
$$;
comment on function app.end_stored_file(text) is
  'Releases the claim of a PUT that failed (aborted, timed out, another size or MD5), so the client may PUT again with the same URL until it expires. Nothing of the failed PUT is kept.';
grant execute on function app.end_stored_file(text) to service_role;

-- A stored object is never replaced: the first completed PUT stays.
create or replace function app.record_stored_file(object_key text, size bigint, md5_hex text, mime text, image_width integer, image_height integer)
returns boolean
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  upload app.uploads;
  inserted integer;
begin
  select * into upload from app.uploads u where u.key = object_key for update;
  if upload.id is null then
    return false;
  end if;
  insert into storage.objects (bucket_id, name, owner, metadata)
  values ('uploads', object_key, upload.user_id,
          jsonb_build_object('size', size, 'mimetype', mime, 'eTag', '"' || md5_hex || '"', 'contentLength', size))
  on conflict (bucket_id, name) do nothing;
  get diagnostics inserted = row_count;
  if inserted = 0 then
    return false;
  end if;
  update app.uploads u set width = image_width, height = image_height, measured_at = now(), put_started_at = null
  where u.id = upload.id;
  return true;
end;
$$;
comment on function app.record_stored_file(text, bigint, text, text, integer, integer) is
  'Records a file that the local storage server accepted, as Supabase Storage records objects (mime: the type the server found in the file), plus the image dimensions read from it (measured). False when the key names no upload or a file is already stored for it (the caller then discards its file): the first completed PUT stays.';

-- ============================================================================
-- Attaching checks the stored object's type, size and MD5
-- ============================================================================
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
  object_size bigint;
  object_etag text;
  object_type text;
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
    select (o.metadata ->> 'size')::bigint, o.metadata ->> 'eTag', lower(btrim(split_part(o.metadata ->> 'mimetype', ';', 1)))
      into object_size, object_etag, object_type
    from storage.objects o where o.bucket_id = 'uploads' and o.name = upload.key;
    if object_size is null then
      perform app.http_error(422, format('%s: the file %L has not been uploaded yet.', field, upload.filename));
    elsif object_size <> upload.byte_size
       or (object_etag is not null and lower(trim(both '"' from object_etag)) <> encode(upload.checksum, 'hex')) then
      perform app.http_error(422, format('%s: the stored file %L does not match its size or checksum.', field, upload.filename));
    elsif object_type is distinct from upload.content_type then
      perform app.http_error(422, format('%s: the stored file %L is not %s (it was stored as %s).',
        field, upload.filename, upload.content_type, coalesce(object_type, 'an unknown type')));
    end if;
    if target_message is not null and upload.content_type !~ '^(image|video)/' then
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
  'Attaches the caller''s uploads (ids from verified signed_ids) to a todo, comment or message, in order. 422 naming the field when an upload is someone else''s, already attached, not (completely) stored yet, stored with another size, MD5 or type than declared (storage.objects.metadata: the local server records the type it found in the file, Supabase Storage the PUT''s Content-Type, which the bucket limits to allowed_mime_types), or unknown; messages take only images and videos. Security definer: storage.objects is not readable by members. Rows are locked so two requests cannot attach one upload twice.';

revoke execute on all functions in schema app, api from public;
