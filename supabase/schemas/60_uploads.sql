-- Uploads: attachments of todos, comments and messages, and their stored files.
--
-- Files uploaded with signed URLs, then attached to a todo, comment or message. Deleting an
-- upload queues its stored file for deletion (app.file_deletions), drained by the worker.

-- Function bodies are not checked here: they call functions of later files (the renderers
-- of 70_rendering.sql) and sections. They are the bodies the migrations created and checked,
-- as test/schema.test.ts proves.
set check_function_bodies = off;

-- ============================================================================
-- Tables
-- ============================================================================
create table app.uploads (
  id           uuid primary key default gen_random_uuid(),
  user_id      uuid not null references app.users(id) on delete cascade,
  key          text not null unique,
  filename     text not null check ((length(filename) >= 1) and (length(filename) <= 255)),
  byte_size    bigint not null check (byte_size > 0),
  checksum     bytea not null check (length(checksum) = 16),
  content_type text not null,
  width        integer check (width > 0),
  height       integer check (height > 0),
  todo_id      uuid references app.todos(id) on delete cascade,
  comment_id   uuid references app.comments(id) on delete cascade,
  attached_at  timestamptz,
  created_at   timestamptz not null default now(),
  updated_at   timestamptz not null default now(),
  message_id   uuid references app.messages(id) on delete cascade,
  measured_at  timestamptz,
  detected_type text,
  constraint uploads_attached_has_time check (((todo_id is null) and (comment_id is null) and (message_id is null)) = (attached_at is null)),
  constraint uploads_one_target check (num_nonnulls(todo_id, comment_id, message_id) <= 1)
);
comment on table app.uploads is
  'A file a member uploads. Attached to a todo or comment it is an Attachment (id att_…); never attached, it is removed after a day. Its checksum is the MD5 the client declared, which the object Storage records must match (app.tg_storage_objects__bind_upload).';
comment on column app.uploads.key is
  'Storage key in the uploads bucket: 128 random bits and the cleaned file name. Unguessable, so the file URL can be shared with exactly those who may see the attachment.';
comment on column app.uploads.measured_at is
  'When the file''s bytes were read (app.record_upload_inspection) and, for an image, its dimensions (null: not yet). Set also when the file could not be read as an image, so it is not read again.';
comment on column app.uploads.detected_type is
  'For an upload declared application/octet-stream (any type we do not name is declared so: the PUT carries application/octet-stream): the type found in the file''s bytes (file-type), else the type of its file name''s extension when a name may give it (never an active type: functions/lib/media.ts typeFromName), by the first attaching request or the storage worker (app.record_upload_inspection); null until then or when nothing is recognised. The attachment''s mime_type is this, else content_type. Members cannot write it.';
create index uploads_user_id_idx on app.uploads (user_id);
create index uploads_todo_id_idx on app.uploads (todo_id, attached_at, id) where (todo_id is not null);
create index uploads_comment_id_idx on app.uploads (comment_id, attached_at, id) where (comment_id is not null);
create index uploads_unattached_idx on app.uploads (created_at) where (attached_at is null);
create index uploads_message_id_idx on app.uploads (message_id) where (message_id is not null);
-- stored_at and sniffed_type (issue 30) come after the rendered card: 70_rendering.sql adds them, in migration order.

create table app.file_deletions (
  key          text primary key,
  requested_at timestamptz not null default now()
);
comment on table app.file_deletions is
  'Outbox of stored files to delete. Written in the same transaction that removes an upload (nothing is lost on a crash); the storage worker deletes the file and then the row. No policy and no grant: the uploads trigger writes, the storage worker deletes the file and then the row.';

create table app.upload_limits (
  id boolean primary key default true check (id),
  member_bytes bigint not null check (member_bytes > 0),
  pending_bytes bigint not null check (pending_bytes > 0),
  description text not null
);
comment on table app.upload_limits is 'The per-member storage quota (one row). member_bytes: all the bytes of the uploads a member holds, attached or not; pending_bytes: of those, the bytes not attached yet (uploads asked for, perhaps never PUT, removed after a day). Read by app.reserve_upload_bytes; documented in docs/uploads.md.';
-- Its one row (5 GiB held, 1 GiB not yet attached) is data: migration 20261124004000 inserts it.

-- ============================================================================
-- Helpers
-- ============================================================================
create function app.attach_uploads(upload_ids jsonb, target_todo uuid, target_comment uuid, target_message uuid, field text)
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

create function app.attach_uploads(upload_ids jsonb, target_todo uuid, target_comment uuid, field text)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  perform app.attach_uploads(upload_ids, target_todo, target_comment, null, field);
end;
$$;
comment on function app.attach_uploads(jsonb, uuid, uuid, text) is
  'Attaches uploads to a todo or comment: the five-argument app.attach_uploads without a message. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.attach_uploads(jsonb, uuid, uuid, text) to authenticated;

create function app.detach_uploads(attachment_ids jsonb, target_todo uuid, target_comment uuid, field text)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  ref text;
  removed integer;
begin
  for ref in select value #>> '{}' from jsonb_array_elements(coalesce(attachment_ids, '[]'::jsonb)) loop
    delete from app.uploads u
    where u.id = app.from_public_id('att', ref)
      and u.todo_id is not distinct from target_todo and u.comment_id is not distinct from target_comment
      and u.attached_at is not null
      and u.user_id = (select auth.uid());
    get diagnostics removed = row_count;
    if removed = 0 then
      perform app.http_error(422, format('%s: there is no attachment %L here.', field, ref));
    end if;
  end loop;
end;
$$;
comment on function app.detach_uploads(jsonb, uuid, uuid, text) is
  'Removes attachments (att_ ids) from the given todo or comment; their files are queued for deletion by the uploads trigger. 422 naming the field for an id that is not attached there. The caller has already proven it owns the target.';
grant execute on function app.detach_uploads(jsonb, uuid, uuid, text) to authenticated;

create function app.take_file_deletions(batch integer)
returns setof text
language sql
volatile
security definer
set search_path = ''
as $$
  select d.key from app.file_deletions d order by d.requested_at limit batch for update skip locked
$$;
comment on function app.take_file_deletions(integer) is
  'Keys of files waiting to be deleted, locked for this worker (skip locked: workers never collide). Call in a transaction, delete the files, then app.forget_file_deletions.';
grant execute on function app.take_file_deletions(integer) to service_role;

create function app.forget_file_deletions(keys text[])
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

create function app.remove_stale_uploads(older_than interval)
returns integer
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  removed integer;
begin
  delete from app.uploads u where u.attached_at is null and u.created_at < now() - older_than;
  get diagnostics removed = row_count;
  return removed;
end;
$$;
comment on function app.remove_stale_uploads(interval) is
  'Removes uploads never attached within `older_than` (a day in production); their files are queued for deletion by the trigger.';
grant execute on function app.remove_stale_uploads(interval) to service_role;

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

create function app.record_upload_inspection(object_key text, sniffed text, image_width integer, image_height integer)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  update app.uploads u
     set sniffed_type = sniffed,
         detected_type = case when u.content_type = 'application/octet-stream' and u.detected_type is null
                              then nullif(sniffed, 'application/octet-stream') else u.detected_type end,
         width = image_width, height = image_height, measured_at = now()
   where u.key = object_key and u.stored_at is not null and u.sniffed_type is null and sniffed is not null;
end;
$$;
comment on function app.record_upload_inspection(text, text, integer, integer) is
  'Records what the bytes of a stored file are, once (the first of the attaching request and the storage worker): sniffed_type (the declared type when the file starts as one, else application/octet-stream; for a file declared application/octet-stream the type found in its bytes or name), detected_type for those declared application/octet-stream, and the dimensions of an image (null when unreadable). Called by the API''s own connection (the attaching request) and the storage worker, never as a member: members cannot write these columns. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.record_upload_inspection(text, text, integer, integer) to service_role;

-- ============================================================================
-- Row-level security and grants
-- ============================================================================
-- app.uploads
alter table app.uploads enable row level security;
create policy "Attachments are visible with what they are attached to; uploads to their owner" on app.uploads
  for select to authenticated
  using (user_id = (select auth.uid())
         or (todo_id is not null and exists (select 1 from app.todos t where t.id = todo_id))
         or (comment_id is not null and exists (select 1 from app.comments c where c.id = comment_id))
         or (message_id is not null and exists (select 1 from app.messages m where m.id = message_id)));
create policy "Members upload in their own name with a writing or chat credential" on app.uploads
  for insert to authenticated
  with check (user_id = (select auth.uid()) and ((select app.can_write()) or (select app.can_chat())));
grant select on app.uploads to authenticated;
grant insert (user_id, key, filename, byte_size, checksum, content_type) on app.uploads to authenticated;

-- app.file_deletions
alter table app.file_deletions enable row level security;
-- No policy and no grant: the uploads trigger writes, the storage worker deletes the file and then the row.

alter table app.upload_limits enable row level security;
create policy "The upload quota is public knowledge for members" on app.upload_limits
  for select to authenticated using (true);
grant select on app.upload_limits to authenticated;
-- No policy and no grant: members never touch this table; security definer functions do.

-- ============================================================================
-- Triggers
-- ============================================================================
create function app.tg_uploads__queue_file_deletion()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  insert into app.file_deletions (key) values (old.key) on conflict do nothing;
  return null;
end;
$$;
comment on function app.tg_uploads__queue_file_deletion() is
  'Queues the stored file of a removed upload for deletion, whatever removed it: detaching, deleting its todo or comment (cascade), the account, or the cleanup of unattached uploads.';
create trigger _200_queue_file_deletion after delete on app.uploads
  for each row execute function app.tg_uploads__queue_file_deletion();

create trigger _100_set_updated_at before update on app.uploads
  for each row execute function app.tg__set_updated_at();

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
create trigger app_bind_upload before insert on storage.objects
  for each row when (new.bucket_id = 'uploads') execute function app.tg_storage_objects__bind_upload();
create trigger app_keep_upload before update on storage.objects
  for each row when (old.bucket_id = 'uploads' or new.bucket_id = 'uploads') execute function app.tg_storage_objects__bind_upload();


-- ============================================================================
-- API functions
-- ============================================================================
create function api.upload_create(filename text, byte_size bigint, checksum_hex text, content_type text)
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
grant execute on function api.upload_create(text, bigint, text, text) to authenticated;

create function api.uploads_to_inspect(upload_ids jsonb)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select coalesce(jsonb_agg(jsonb_build_object('key', u.key, 'filename', u.filename, 'content_type', u.content_type)), '[]'::jsonb)
  from app.uploads u
  where u.id = any (array(select (value #>> '{}')::uuid from jsonb_array_elements(coalesce(upload_ids, '[]'::jsonb))))
    and u.user_id = (select auth.uid()) and u.sniffed_type is null and u.stored_at is not null);
end;
$$;
comment on function api.uploads_to_inspect(jsonb) is
  'Of the uploads a request is about to attach (ids from signed_ids the HTTP layer verified), the requesting member''s own that are stored and whose bytes nobody read yet: the HTTP layer reads their start from storage and records what they are (app.record_upload_inspection) before the request''s own call attaches them. Runs as the member (RLS and auth.uid()), so a request never reads or records anything of another member''s upload, whatever signed id it names. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function api.uploads_to_inspect(jsonb) to authenticated;

-- ============================================================================
-- Execute only where granted above
-- ============================================================================
revoke execute on all functions in schema app, api from public;
