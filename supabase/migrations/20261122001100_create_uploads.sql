-- Uploads and attachments. A client asks for an upload (POST /v1/uploads), PUTs the file
-- straight to storage with the signed URL, then attaches it by its signed_id to a todo or a
-- comment. Storage (Supabase Storage in production, the local storage server otherwise)
-- records each stored file in storage.objects, so SQL can tell an upload that arrived from
-- one that did not, in the same statement that attaches it.

-- The private bucket that holds every uploaded file. Files are served through the API's
-- /files/{key} route (see docs/uploads.md), never straight from the bucket.
insert into storage.buckets (id, name, public) values ('uploads', 'uploads', false)
on conflict (id) do nothing;

-- ============================================================================
-- Tables
-- ============================================================================
create table app.uploads (
  id uuid primary key default gen_random_uuid(),
  user_id uuid not null references app.users (id) on delete cascade,
  key text not null,
  filename text not null check (length(filename) between 1 and 255),
  byte_size bigint not null check (byte_size > 0),
  checksum bytea not null check (length(checksum) = 16),
  content_type text not null,
  width integer check (width > 0),
  height integer check (height > 0),
  todo_id uuid references app.todos (id) on delete cascade,
  comment_id uuid references app.comments (id) on delete cascade,
  attached_at timestamptz,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint uploads_key_key unique (key),
  constraint uploads_one_target check (num_nonnulls(todo_id, comment_id) <= 1),
  constraint uploads_attached_has_time check ((todo_id is null and comment_id is null) = (attached_at is null))
);
comment on table app.uploads is 'A file a member uploads. Attached to a todo or comment it is an Attachment (id att_…); never attached, it is removed after a day. Its checksum is the MD5 the client declared, which storage verifies on PUT.';
comment on column app.uploads.key is 'Storage key in the uploads bucket: 128 random bits and the cleaned file name. Unguessable, so the file URL can be shared with exactly those who may see the attachment.';
create index uploads_user_id_idx on app.uploads (user_id);
create index uploads_todo_id_idx on app.uploads (todo_id, attached_at, id) where todo_id is not null;
create index uploads_comment_id_idx on app.uploads (comment_id, attached_at, id) where comment_id is not null;
create index uploads_unattached_idx on app.uploads (created_at) where attached_at is null;

create trigger _100_set_updated_at before update on app.uploads
  for each row execute function app.tg__set_updated_at();

create table app.file_deletions (
  key text primary key,
  requested_at timestamptz not null default now()
);
comment on table app.file_deletions is 'Outbox of stored files to delete. Written in the same transaction that removes an upload (nothing is lost on a crash); the storage worker deletes the file and then the row.';

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

-- ============================================================================
-- Row-level security
-- ============================================================================
alter table app.uploads enable row level security;
alter table app.file_deletions enable row level security;

create policy "Attachments are visible with what they are attached to; uploads to their owner" on app.uploads
  for select to authenticated
  using (user_id = (select auth.uid())
         or (todo_id is not null and exists (select 1 from app.todos t where t.id = todo_id))
         or (comment_id is not null and exists (select 1 from app.comments c where c.id = comment_id)));
create policy "Members upload in their own name" on app.uploads
  for insert to authenticated
  with check (user_id = (select auth.uid()) and (select app.can_write()));
grant select on app.uploads to authenticated;
grant insert (user_id, key, filename, byte_size, checksum, content_type) on app.uploads to authenticated;
-- Attaching and detaching go through app.attach_uploads / app.detach_uploads (security definer).

-- ============================================================================
-- Attaching
-- ============================================================================
create function app.attach_uploads(upload_ids jsonb, target_todo uuid, target_comment uuid, field text)
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
begin
  for upload in select * from app.uploads u where u.id = any (wanted) order by array_position(wanted, u.id) for update loop
    if upload.user_id <> (select auth.uid()) then
      perform app.http_error(422, format('%s: that upload belongs to someone else.', field));
    elsif upload.attached_at is not null then
      perform app.http_error(422, format('%s: that upload is already attached.', field));
    end if;
    select (o.metadata ->> 'size')::bigint, o.metadata ->> 'eTag' into object_size, object_etag
    from storage.objects o where o.bucket_id = 'uploads' and o.name = upload.key;
    if object_size is null then
      perform app.http_error(422, format('%s: the file %L has not been uploaded yet.', field, upload.filename));
    elsif object_size <> upload.byte_size
       or (object_etag is not null and lower(trim(both '"' from object_etag)) <> encode(upload.checksum, 'hex')) then
      perform app.http_error(422, format('%s: the stored file %L does not match its size or checksum.', field, upload.filename));
    end if;
    update app.uploads u set todo_id = target_todo, comment_id = target_comment, attached_at = clock_timestamp()
    where u.id = upload.id;
  end loop;
  if (select count(*) from app.uploads u where u.id = any (wanted)) < cardinality(wanted) then
    perform app.http_error(422, format('%s: no upload matches one of the signed ids.', field));
  end if;
end;
$$;
comment on function app.attach_uploads(jsonb, uuid, uuid, text) is
  'Attaches the caller''s uploads (ids from verified signed_ids) to a todo or comment, in order. 422 naming the field when an upload is someone else''s, already attached, not (completely) stored yet, or unknown. Security definer: storage.objects is not readable by members. Rows are locked so two requests cannot attach one upload twice.';
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
      and u.attached_at is not null;
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

-- ============================================================================
-- Storage side (the local storage server and the worker, as the service)
-- ============================================================================
create function app.record_stored_file(object_key text, size bigint, md5_hex text, mime text, image_width integer, image_height integer)
returns boolean
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  upload app.uploads;
begin
  select * into upload from app.uploads u where u.key = object_key;
  if upload.id is null then
    return false;
  end if;
  insert into storage.objects (bucket_id, name, owner, metadata)
  values ('uploads', object_key, upload.user_id,
          jsonb_build_object('size', size, 'mimetype', mime, 'eTag', '"' || md5_hex || '"', 'contentLength', size))
  on conflict (bucket_id, name) do update set metadata = excluded.metadata, updated_at = now();
  update app.uploads u set width = image_width, height = image_height where u.id = upload.id;
  return true;
end;
$$;
comment on function app.record_stored_file(text, bigint, text, text, integer, integer) is
  'Records a file that storage accepted, as Supabase Storage records objects, plus the image dimensions read from it. False when the key names no upload (the caller then discards the file).';
grant execute on function app.record_stored_file(text, bigint, text, text, integer, integer) to service_role;

create function app.take_file_deletions(batch integer)
returns setof text
language sql
volatile
security definer
set search_path = ''
as $$
  select d.key from app.file_deletions d order by d.requested_at limit batch for update skip locked
$$;
comment on function app.take_file_deletions(integer) is 'Keys of files waiting to be deleted, locked for this worker (skip locked: workers never collide). Call in a transaction, delete the files, then app.forget_file_deletions.';
grant execute on function app.take_file_deletions(integer) to service_role;

create function app.forget_file_deletions(keys text[])
returns void
language sql
volatile
security definer
set search_path = ''
as $$
  delete from storage.objects o where o.bucket_id = 'uploads' and o.name = any (keys);
  delete from app.file_deletions d where d.key = any (keys);
$$;
comment on function app.forget_file_deletions(text[]) is 'Marks files as deleted from storage: their storage.objects rows and outbox entries go.';
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
comment on function app.remove_stale_uploads(interval) is 'Removes uploads never attached within `older_than` (a day in production); their files are queued for deletion by the trigger.';
grant execute on function app.remove_stale_uploads(interval) to service_role;

-- ============================================================================
-- Rendering
-- ============================================================================
create function app.attachment_json(u app.uploads)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'id', app.to_public_id('att', u.id),
    'created_at', u.attached_at,
    'updated_at', u.updated_at,
    'url', app.public_url() || '/files/' || u.key,
    'mime_type', u.content_type,
    'filename', u.filename,
    'width', u.width,
    'height', u.height,
    'aspect_ratio', case when u.width is not null and u.height is not null then round(u.width::numeric / u.height, 4) end)
$$;
comment on function app.attachment_json(app.uploads) is 'An attachment as the API renders it. width, height and aspect_ratio (width / height) are read from the stored image; null when it is not an image storage could measure.';
grant execute on function app.attachment_json(app.uploads) to authenticated;

-- ============================================================================
-- Todos and comments render and take attachments
-- ============================================================================
create or replace function app.todo_json(t app.todos, expand_reactions boolean default false)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'id', app.to_public_id('todo', t.id),
    'created_at', t.created_at,
    'updated_at', t.updated_at,
    'body', t.body,
    'url', app.public_url() || '/todos/' || t.number,
    'attachments', coalesce((
      select jsonb_agg(app.attachment_json(a) order by a.attached_at, a.id)
      from app.uploads a where a.todo_id = t.id), '[]'::jsonb),
    'creator', (select app.user_json(u) from app.users u where u.id = t.user_id),
    'creator_id', app.to_public_id('user', t.user_id),
    'user_id', app.to_public_id('user', t.user_id),
    'projects', coalesce((select jsonb_agg(app.project_json(p)) from app.projects p where p.id = t.project_id), '[]'::jsonb),
    'mentioned_projects', coalesce((
      select jsonb_agg(app.mentioned_project_json(p) order by m.position)
      from app.todo_project_mentions m join app.projects p on p.id = m.project_id
      where m.todo_id = t.id), '[]'::jsonb),
    'mentioned_users', coalesce((
      select jsonb_agg(app.mentioned_user_json(u) order by m.position)
      from app.todo_user_mentions m join app.users u on u.id = m.user_id
      where m.todo_id = t.id), '[]'::jsonb),
    'reactions_count', t.reactions_count,
    'comments_count', t.comments_count,
    'viewer', jsonb_build_object(
      'reactions', coalesce((
        select jsonb_agg(jsonb_build_object('id', app.to_public_id('reac', r.id)) order by r.created_at)
        from app.reactions r where r.todo_id = t.id and r.user_id = (select auth.uid())), '[]'::jsonb),
      'comments', coalesce((
        select jsonb_agg(jsonb_build_object('id', app.to_public_id('comm', c.id)) order by c.created_at, c.id)
        from app.comments c where c.todo_id = t.id and c.user_id = (select auth.uid())), '[]'::jsonb))
  ) || case when expand_reactions then jsonb_build_object('reactions', coalesce((
    select jsonb_agg(app.reaction_json(r) order by r.created_at desc, r.id desc)
    from (select * from app.reactions r where r.todo_id = t.id order by r.created_at desc, r.id desc limit 5) r), '[]'::jsonb))
  else '{}'::jsonb end
$$;
comment on function app.todo_json(app.todos, boolean) is
  'A todo as the API renders it for the current viewer, attachments in the order they were attached. Projects and mentions are joined under RLS, so what the viewer may not see is omitted. viewer.comments lists the viewer''s own comments on it. expand_reactions adds the five newest reactions.';

create or replace function app.comment_json(c app.comments)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'id', app.to_public_id('comm', c.id),
    'body', c.body,
    'attachments', coalesce((
      select jsonb_agg(app.attachment_json(a) order by a.attached_at, a.id)
      from app.uploads a where a.comment_id = c.id), '[]'::jsonb),
    'created_at', c.created_at,
    'updated_at', c.updated_at,
    'url', app.public_url() || '/todos/' || (select t.number from app.todos t where t.id = c.todo_id) || '#' || app.to_public_id('comm', c.id),
    'reactions_count', c.reactions_count,
    'viewer', jsonb_build_object('reactions', coalesce((
      select jsonb_agg(jsonb_build_object('id', app.to_public_id('reac', r.id)) order by r.created_at)
      from app.reactions r where r.comment_id = c.id and r.user_id = (select auth.uid())), '[]'::jsonb)),
    'creator', (select app.user_json(u) from app.users u where u.id = c.user_id),
    'mentioned_projects', coalesce((
      select jsonb_agg(app.mentioned_project_json(p) order by m.position)
      from app.comment_project_mentions m join app.projects p on p.id = m.project_id
      where m.comment_id = c.id), '[]'::jsonb),
    'mentioned_users', coalesce((
      select jsonb_agg(app.mentioned_user_json(u) order by m.position)
      from app.comment_user_mentions m join app.users u on u.id = m.user_id
      where m.comment_id = c.id), '[]'::jsonb),
    'parent_id', case when c.parent_id is not null then app.to_public_id('comm', c.parent_id) end)
$$;
comment on function app.comment_json(app.comments) is
  'A comment as the API renders it for the current viewer, with its attachments. parent_id (null for a top-level comment) is our addition to SPEC''s fields: replies need it.';

create or replace function api.todo_create(body text, attachments jsonb)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  created app.todos;
begin
  insert into app.todos (user_id, body) values ((select auth.uid()), body) returning * into created;
  perform app.attach_uploads(attachments, created.id, null, 'attachments');
  return app.todo_json(created);
end;
$$;
comment on function api.todo_create(text, jsonb) is 'POST /v1/todos: attachments are upload ids from verified signed_ids, attached in order (422 when foreign, not stored, or already attached).';

create or replace function api.todo_update(todo_ref text, patch jsonb)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.todos := app.own_todo(todo_ref);
begin
  perform app.hit_rate_limit('todo_update');
  perform app.detach_uploads(patch -> 'remove_attachment_ids', target.id, null, 'remove_attachment_ids');
  perform app.attach_uploads(patch -> 'attachments', target.id, null, 'attachments');
  if patch ? 'body' then
    update app.todos t set body = patch ->> 'body' where t.id = target.id returning * into target;
  end if;
  return app.todo_json(target);
end;
$$;
comment on function api.todo_update(text, jsonb) is 'PATCH /v1/todos/{todo_id}: own todos only (403), rate-limited (429). remove_attachment_ids first, then attachments are added (additive); mentions and the owning project follow the new body.';

create or replace function api.comment_create(commentable_type text, commentable_id text, body text, attachments jsonb, parent_ref text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.todos;
  parent app.comments;
  created app.comments;
begin
  if commentable_type is distinct from 'Todo' then
    perform app.http_error(422, 'commentable_type must be Todo.');
  end if;
  target := app.resolve_todo(commentable_id);
  if target.id is null or commentable_id !~ '^todo_' then
    perform app.http_error(422, format('commentable_id: no todo matches %L.', commentable_id));
  end if;
  if coalesce(btrim(body), '') = '' and jsonb_array_length(coalesce(attachments, '[]'::jsonb)) = 0 then
    perform app.http_error(422, 'body is required unless attachments are given.');
  end if;
  if parent_ref is not null then
    parent := app.resolve_comment(parent_ref);
    if parent.id is null or parent.todo_id <> target.id then
      perform app.http_error(422, format('parent_id: no comment matches %L on this todo.', parent_ref));
    end if;
  end if;
  insert into app.comments (todo_id, user_id, parent_id, body)
  values (target.id, (select auth.uid()), parent.id, coalesce(body, ''))
  returning * into created;
  perform app.attach_uploads(attachments, null, created.id, 'attachments');
  return app.comment_json(created);
end;
$$;
comment on function api.comment_create(text, text, text, jsonb, text) is
  'POST /v1/comments: on a todo the viewer can see (422 otherwise), optionally as a reply (parent_id, a comment on the same todo). body may be empty when attachments are given.';

create or replace function api.comment_update(comment_ref text, patch jsonb)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.comments := app.own_comment(comment_ref);
begin
  perform app.hit_rate_limit('comment_update');
  perform app.detach_uploads(patch -> 'remove_attachment_ids', null, target.id, 'remove_attachment_ids');
  perform app.attach_uploads(patch -> 'attachments', null, target.id, 'attachments');
  if patch ? 'body' then
    update app.comments c set body = patch ->> 'body' where c.id = target.id returning * into target;
  end if;
  return app.comment_json(target);
end;
$$;
comment on function api.comment_update(text, jsonb) is 'PATCH /v1/comments/{comment_id}: own comments only (403), rate-limited (429); attachments additive, remove_attachment_ids removes.';

-- ============================================================================
-- Endpoint: POST /v1/uploads
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
  'POST /v1/uploads: records the upload the member is about to PUT and picks its storage key. The HTTP layer adds the signed PUT URL, its headers and the signed_id (it holds the signing secret).';
grant execute on function api.upload_create(text, bigint, text, text) to authenticated;

revoke execute on all functions in schema app, api from public;
