-- Accounts: deletion under review, data exports, and the billing scope's endpoint.
--
-- DELETE /v1/account asks for the account to be removed; the operator's team approves or
-- rejects the request with the CLI (local/admin-commands.ts). Approval removes the member in
-- one transaction (app.delete_account): every row of theirs goes by `on delete cascade` from
-- auth.users and app.users, their stored files are queued for deletion in the same
-- transaction (app.file_deletions), and the counter triggers keep everyone else's counts
-- exact. An export is a JSON archive of a member's own data, written by a worker
-- (functions/lib/exports.ts) that claims it with a lease, pages through the data with keyset
-- queries (app.export_page) and streams the archive to storage.

-- Function bodies are not checked here: they call functions of later files (the renderers
-- of 70_rendering.sql) and sections. They are the bodies the migrations created and checked,
-- as test/schema.test.ts proves.
set check_function_bodies = off;

-- ============================================================================
-- Tables
-- ============================================================================
create table app.account_deletion_requests (
  user_id      uuid primary key references app.users(id) on delete cascade,
  requested_at timestamptz not null default now(),
  requested_by jsonb default app.request_credential()
);
comment on table app.account_deletion_requests is
  'A member''s pending request to have their account deleted (DELETE /v1/account), waiting for the operator''s team: approve-deletion removes the account, reject-deletion removes this row. One per member (the primary key), so it never grows past the member count. Until it is decided the account works as before.';
comment on column app.account_deletion_requests.requested_by is
  'What made the request, for the operator''s review: {"kind":"api_key","api_key_id":…} or {"kind":"oauth","client_id":…} (a first-party app: third-party apps may not ask). Filled by its default from the request''s claims; members have no grant on it, so the record is not theirs to write. Not a foreign key: the record outlives a key or an app deleted meanwhile. Null for requests made before it was recorded (the migration that added it had no request to name).';
-- The operator's queue, oldest first.
create index account_deletion_requests_requested_at_idx on app.account_deletion_requests (requested_at, user_id);

create table app.exports (
  id           uuid primary key default gen_random_uuid(),
  user_id      uuid not null references app.users(id) on delete cascade,
  status       text not null default 'pending' constraint exports_status_check check (status in ('pending', 'running', 'ready', 'failed')),
  attempts     integer not null default 0 check (attempts >= 0),
  claim        uuid,
  lease_until  timestamptz,
  file_key     text,
  byte_size    bigint check (byte_size >= 0),
  expires_at   timestamptz,
  error        text,
  created_at   timestamptz not null default now(),
  started_at   timestamptz,
  completed_at timestamptz,
  updated_at   timestamptz not null default now(),
  chunks       integer not null default 0,
  progress     jsonb,
  queued_at    timestamptz not null default now()
);
comment on table app.exports is
  'A member''s data export (POST /v1/exports): pending until a worker claims it, running while one writes the archive (claim and lease_until: a worker that dies leaves it to the next once the lease ends), ready with its archive (file_key) downloadable until expires_at (24 h after completion; the archive is deleted then), or failed after three attempts.';
comment on column app.exports.lease_until is
  'Of a running export: when its worker''s lease ends (then another worker may take it). Of a pending export after a failed attempt: not to be claimed before then.';
comment on column app.exports.file_key is
  'Storage key of the archive (exports/<128 random bits>/export.json, in the private exports bucket). Recorded when an attempt begins writing it (app.export_file_started), so whatever a worker that died leaves (half an archive, or a whole one never marked ready) is queued in app.file_deletions by the next claim, the failure or the account''s deletion; null before an attempt writes and after the archive expired (queued in app.file_deletions).';
comment on column app.exports.progress is
  'Where the archive''s building stands (issue 28): the section being written, the cursor of its last row written and whether its array is open (functions/lib/exports.ts), saved with each chunk (app.save_export_chunk), so the next pass or the next worker goes on from there instead of starting again: no export depends on one invocation''s wall clock. Null before the first chunk and once the export is ready. chunks counts the chunks stored in app.export_chunks.';
comment on column app.exports.queued_at is
  'When the export took its place in the worker''s queue (app.claim_export takes the one waiting longest): at the request, and again at the back each time a pass parks it unfinished (app.park_export) or an attempt fails, so exports take turns. Ordered by created_at, an export of a large account, parked at the head of the queue, was taken up again by every pass until it was done, and every other member''s export waited behind it (issue 28 review).';
comment on column app.exports.claim is
  'The running attempt''s token: every page, chunk and the completion must present it, so a worker whose lease ran out (and whose export another worker took over) cannot write into it. Null on a running export is a pass that ended with the archive unfinished (app.park_export): the next claim goes on with it, which is no new attempt.';
-- GET /v1/exports: a member's exports, newest first (keyset on created_at, id).
create index exports_user_id_created_at_idx on app.exports (user_id, created_at desc, id desc);
-- One export in progress per member, race-free: a second pending or running row is refused.
create unique index exports_one_in_progress_key on app.exports (user_id) where (status in ('pending', 'running'));
-- The worker's queue: pending exports and running ones whose lease may have ended or that a pass
-- parked, longest waiting first (queued_at).
create index exports_queue_idx on app.exports (queued_at, id) where (status in ('pending', 'running'));
-- Archives to delete once their download window closes.
create index exports_expires_at_idx on app.exports (expires_at) where (file_key is not null);
-- GET /exports/{key}: the export an archive belongs to, checked on every download.
create unique index exports_file_key_key on app.exports (file_key) where (file_key is not null);

create table app.export_chunks (
  export_id uuid references app.exports(id) on delete cascade,
  n         integer,
  body      text not null,
  constraint export_chunks_pkey primary key (export_id, n)
);
comment on table app.export_chunks is
  'The archive of a running export as it is built, a chunk of at most EXPORT_CHUNK_ROWS rows of the member''s data at a time (issue 28): each pass of the worker (an edge invocation has 150 s) adds chunks with the export''s progress in one statement (app.save_export_chunk) and stops when its time is spent; once every section is written one pass streams the chunks in order into the archive in storage (app.export_chunk) and they are deleted with the completion, the giving up or the export. No policy and no grant: only the worker''s functions touch it.';

-- ============================================================================
-- Helpers
-- ============================================================================
create function app.export_json(e app.exports)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select jsonb_build_object(
    'id', app.to_public_id('exp', e.id),
    'status', e.status,
    'created_at', e.created_at,
    'completed_at', e.completed_at,
    'expires_at', e.expires_at,
    'byte_size', e.byte_size,
    'url', case when e.status = 'ready' and e.expires_at > now() and e.file_key is not null then app.public_url() || '/' || e.file_key end));
end;
$$;
comment on function app.export_json(app.exports) is
  'An Export as the API renders it to its member: url only while the export is ready and expires_at has not passed; after that the archive is gone and a new export must be asked for. The url is {base_url}/exports/<128 random bits>/export.json, served by the API, which finds the export live (ready, unexpired, its account not deleted) on every download: a link stops the moment its export or account goes, not when the storage worker deletes the file. Stable, not immutable: it reads the clock. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.export_json(app.exports) to authenticated;

create function app.claim_export(lease interval, max_attempts integer)
returns table (export_id uuid, user_id uuid, claim uuid, attempts integer, progress jsonb)
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  -- A running export whose lease ended belongs to a worker that died; after max_attempts
  -- such attempts it is given up.
  -- The archive a dead attempt began is queued for deletion as its export is given up or taken
  -- again (the new attempt writes a new one).
  with given_up as (
    update app.exports e
       set status = 'failed', claim = null, lease_until = null, completed_at = now(), updated_at = now(), file_key = null,
           progress = null, chunks = 0,
           error = coalesce(e.error, 'the export worker stopped before the archive was written')
      from app.exports old
     where old.id = e.id and e.status = 'running' and e.lease_until < now() and e.attempts >= max_attempts
    returning e.id, old.file_key
  ), dropped as (
    delete from app.export_chunks c using given_up g where c.export_id = g.id
  )
  insert into app.file_deletions (key) select g.file_key from given_up g where g.file_key is not null
  on conflict do nothing;
  return query
  with next as (
    select e.id, e.file_key from app.exports e
    where (e.status = 'pending' and (e.lease_until is null or e.lease_until <= now()))
       or (e.status = 'running' and (e.lease_until < now() or e.claim is null))
    order by e.queued_at, e.id
    limit 1
    for update skip locked
  ), left_behind as (
    insert into app.file_deletions (key) select n.file_key from next n where n.file_key is not null
    on conflict do nothing
  )
  -- Going on with a parked export (a pass that ended before the archive was done: running, no
  -- claim) is the same attempt; a pending one, or one whose worker died (its lease ran out), is
  -- a new attempt. Either way the chunks stored stay: the work goes on from its progress.
  update app.exports e
     set status = 'running', attempts = e.attempts + case when e.status = 'running' and e.claim is null then 0 else 1 end,
         claim = gen_random_uuid(), lease_until = now() + lease,
         started_at = coalesce(e.started_at, now()), updated_at = now(), file_key = null
    from next
   where e.id = next.id
  returning e.id, e.user_id, e.claim, e.attempts, e.progress;
end;
$$;
comment on function app.claim_export(interval, integer) is
  'The export worker''s claim: of the exports waiting (queued_at: longest first, so a large export a pass parked takes turns with the others), a pending one (not waiting to be retried), a running one a pass left unfinished (app.park_export: no claim; the same attempt), or a running one whose lease ended (its worker died: a new attempt), leased for `lease` under a new claim token, in one short statement that commits at once (skip locked: workers never take the same one). Returns the export''s progress: the chunks stored stay, and the work goes on from there (issue 28). Running exports whose lease ended after max_attempts attempts become failed first (their chunks deleted). The archive a dead attempt began writing (file_key) is queued in app.file_deletions either way. Not granted to members: the worker runs as the database owner.';

create function app.export_page(export_id uuid, export_claim uuid, section text, after text, page_size integer, base_url text, lease interval)
returns table (cursor text, item jsonb)
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  member uuid;
  after_at timestamptz := case when after is not null then split_part(after, '|', 1)::timestamptz end;
  after_id uuid := case when after is not null then split_part(after, '|', 2)::uuid end;
begin
  -- Each page renews the lease: an export keeps its worker as long as the worker makes progress.
  update app.exports e set lease_until = now() + lease
   where e.id = export_id and e.claim = export_claim and e.status = 'running'
  returning e.user_id into member;
  if member is null then
    raise exception 'export % is no longer held by this worker', export_id using errcode = 'PT409';
  end if;
  -- The renderers (the profile) read {base_url} from app.public_url(), as in an API request.
  perform set_config('app.public_url', base_url, true);

  if section = 'profile' then
    return query
    select null::text, app.user_json_as(u, u.id) || jsonb_build_object('email', au.email)
    from app.users u left join auth.users au on au.id = u.id
    where u.id = member;
  elsif section = 'todos' then
    return query
    -- Keyset on (created_at, id), the member's own index (todos_user_id_created_at_idx, read
    -- backwards): on the global number index each page scanned every later todo of everyone
    -- (the last page all of them), which past some millions of todos outlasts the statement
    -- timeout, and a member whose todos are old could never export.
    select t.created_at::text || '|' || t.id::text,
      jsonb_build_object(
        'id', app.to_public_id('todo', t.id),
        'number', t.number,
        'url', base_url || '/todos/' || t.number,
        'body', t.body,
        'created_at', t.created_at,
        'updated_at', t.updated_at,
        'local_date', t.local_date,
        'project_id', case when t.project_id is not null then app.to_public_id('proj', t.project_id) end,
        'mentioned_projects', coalesce((
          select jsonb_agg(jsonb_build_object('id', app.to_public_id('proj', p.id), 'hashtag', p.hashtag) order by m.position)
          from app.todo_project_mentions m join app.projects p on p.id = m.project_id
          -- As the API renders them (app.todos_json): a #hashtag of a project the member may not
          -- see names no project, so its id and existence stay hidden.
          where m.todo_id = t.id and app.can_see_project(p.id, p.privacy, member)), '[]'::jsonb),
        'mentioned_users', coalesce((
          select jsonb_agg(jsonb_build_object('id', app.to_public_id('user', mu.id), 'username', mu.username) order by m.position)
          from app.todo_user_mentions m join app.users mu on mu.id = m.user_id where m.todo_id = t.id), '[]'::jsonb),
        'attachments', coalesce((
          select jsonb_agg(jsonb_build_object(
                   'id', app.to_public_id('att', a.id), 'filename', a.filename, 'mime_type', a.content_type,
                   'byte_size', a.byte_size, 'url', base_url || '/files/' || a.key, 'created_at', a.attached_at)
                 order by a.attached_at, a.id)
          from app.uploads a where a.todo_id = t.id), '[]'::jsonb),
        'reactions_count', t.reactions_count,
        'comments_count', t.comments_count)
    from app.todos t
    where t.user_id = member and (after is null or (t.created_at, t.id) > (after_at, after_id))
    order by t.created_at, t.id
    limit page_size;
  elsif section = 'comments' then
    return query
    select c.created_at::text || '|' || c.id::text,
      jsonb_build_object(
        'id', app.to_public_id('comm', c.id),
        'todo_id', app.to_public_id('todo', c.todo_id),
        'parent_id', case when c.parent_id is not null then app.to_public_id('comm', c.parent_id) end,
        'body', c.body,
        'created_at', c.created_at,
        'updated_at', c.updated_at,
        'attachments', coalesce((
          select jsonb_agg(jsonb_build_object(
                   'id', app.to_public_id('att', a.id), 'filename', a.filename, 'mime_type', a.content_type,
                   'byte_size', a.byte_size, 'url', base_url || '/files/' || a.key, 'created_at', a.attached_at)
                 order by a.attached_at, a.id)
          from app.uploads a where a.comment_id = c.id), '[]'::jsonb))
    from app.comments c
    where c.user_id = member and (after is null or (c.created_at, c.id) > (after_at, after_id))
    order by c.created_at, c.id
    limit page_size;
  elsif section = 'reactions' then
    return query
    select r.created_at::text || '|' || r.id::text,
      jsonb_build_object(
        'id', app.to_public_id('reac', r.id),
        'reactable_type', case when r.todo_id is not null then 'Todo' else 'Comment' end,
        'reactable_id', case when r.todo_id is not null then app.to_public_id('todo', r.todo_id) else app.to_public_id('comm', r.comment_id) end,
        'created_at', r.created_at)
    from app.reactions r
    where r.user_id = member and (after is null or (r.created_at, r.id) > (after_at, after_id))
    order by r.created_at, r.id
    limit page_size;
  elsif section = 'projects' then
    return query
    select p.created_at::text || '|' || p.id::text,
      jsonb_build_object(
        'id', app.to_public_id('proj', p.id),
        'name', p.name, 'slug', p.slug, 'hashtag', p.hashtag, 'pitch', p.pitch, 'description', p.description,
        'website_url', p.website_url, 'github_url', p.github_url, 'privacy', p.privacy, 'archived', p.archived,
        'owner', p.owner_id = member,
        'url', base_url || '/projects/' || coalesce(p.slug, app.to_public_id('proj', p.id)),
        'created_at', p.created_at, 'updated_at', p.updated_at)
    from app.project_makers mk join app.projects p on p.id = mk.project_id
    where mk.user_id = member and mk.accepted and (after is null or (p.created_at, p.id) > (after_at, after_id))
    order by p.created_at, p.id
    limit page_size;
  elsif section = 'following' then
    return query
    select f.created_at::text || '|' || f.followee_id::text,
      jsonb_build_object('id', app.to_public_id('user', u.id), 'username', u.username, 'since', f.created_at)
    from app.user_follows f join app.users u on u.id = f.followee_id
    where f.follower_id = member and (after is null or (f.created_at, f.followee_id) > (after_at, after_id))
    order by f.created_at, f.followee_id
    limit page_size;
  elsif section = 'followers' then
    return query
    select f.created_at::text || '|' || f.follower_id::text,
      jsonb_build_object('id', app.to_public_id('user', u.id), 'username', u.username, 'since', f.created_at)
    from app.user_follows f join app.users u on u.id = f.follower_id
    where f.followee_id = member and (after is null or (f.created_at, f.follower_id) > (after_at, after_id))
    order by f.created_at, f.follower_id
    limit page_size;
  elsif section = 'followed_projects' then
    return query
    select f.created_at::text || '|' || f.project_id::text,
      jsonb_build_object('id', app.to_public_id('proj', p.id), 'name', p.name, 'since', f.created_at)
    from app.project_follows f join app.projects p on p.id = f.project_id
    where f.user_id = member and (after is null or (f.created_at, f.project_id) > (after_at, after_id))
    order by f.created_at, f.project_id
    limit page_size;
  elsif section = 'mutes' then
    return query
    select m.created_at::text || '|' || m.muted_user_id::text,
      jsonb_build_object('id', app.to_public_id('user', u.id), 'username', u.username, 'since', m.created_at)
    from app.mutes m join app.users u on u.id = m.muted_user_id
    where m.user_id = member and (after is null or (m.created_at, m.muted_user_id) > (after_at, after_id))
    order by m.created_at, m.muted_user_id
    limit page_size;
  elsif section = 'webhook_subscriptions' then
    return query
    select s.created_at::text || '|' || s.id::text, app.webhook_subscription_json(s)
    from app.webhook_subscriptions s
    where s.user_id = member and (after is null or (s.created_at, s.id) > (after_at, after_id))
    order by s.created_at, s.id
    limit page_size;
  elsif section = 'notification_preferences' then
    -- Every notification type with the member's choice, as GET /v1/notification_preferences
    -- shows them: ten rows, so one page (a second page, after any cursor, is empty).
    return query
    select '-infinity|' || member::text,
      app.notification_preference_json(t.identifier, t.name, t.description, p.mobile_push_enabled)
    from app.notification_types() with ordinality t(identifier, name, description, emoji, n)
    left join app.notification_preferences p on p.user_id = member and p.type = t.identifier
    where after is null
    order by t.n;
  else
    raise exception 'unknown export section %', section;
  end if;
end;
$$;
comment on function app.export_page(uuid, uuid, text, text, integer, text, interval) is
  'One page of one section of a member''s export, for the worker holding the export (claim): rows after the cursor `after` (the last row''s cursor of the previous page; null for the first), at most page_size, each with its cursor. Keyset on an index of each table, so a member with tens of thousands of todos is read in bounded pages, never at once. Renews the lease (a worker making progress keeps its export); raises PT409 when the claim is no longer the export''s. Security definer: the worker runs as the database owner, and the rows are the member''s own; what they name of others is rendered as the API shows it to the member (mentioned projects only when app.can_see_project). base_url makes the attachment URLs, as app.public_url() does for the API.';

create function app.export_file_started(export_id uuid, export_claim uuid, key text)
returns boolean
language sql
volatile
security definer
set search_path = ''
as $$
  update app.exports e set file_key = key, updated_at = now()
   where e.id = export_id and e.claim = export_claim and e.status = 'running'
  returning true
$$;
comment on function app.export_file_started(uuid, uuid, text) is
  'Records the archive key an attempt is about to write, before a byte of it is stored: if the worker dies mid-write, the next claim (app.claim_export), the failure (app.fail_export) or the account''s deletion queues it in app.file_deletions, so no partial or orphaned archive stays in storage. Null when the claim is no longer the export''s. Security definer: the worker runs as the database owner; not granted to members.';

create function app.save_export_chunk(export_id uuid, export_claim uuid, chunk text, next_progress jsonb, lease interval)
returns boolean
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  chunk_index integer;
begin
  update app.exports e
     set chunks = e.chunks + 1, progress = next_progress, lease_until = now() + lease, updated_at = now()
   where e.id = save_export_chunk.export_id and e.claim = export_claim and e.status = 'running'
  returning e.chunks - 1 into chunk_index;
  if chunk_index is null then
    return false;
  end if;
  insert into app.export_chunks (export_id, n, body) values (save_export_chunk.export_id, chunk_index, chunk);
  return true;
end;
$$;
comment on function app.save_export_chunk(uuid, uuid, text, jsonb, interval) is
  'Stores the next chunk of the worker''s export with the progress after it, in one transaction (a chunk is never stored without the progress that says it is, nor the other way round), and renews the lease. False (nothing stored) when the claim is no longer the export''s. Security definer: the worker runs as the database owner; not granted to members.';

create function app.park_export(export_id uuid, export_claim uuid)
returns boolean
language sql
volatile
security definer
set search_path = ''
as $$
  update app.exports e set claim = null, lease_until = null, queued_at = now(), updated_at = now()
   where e.id = export_id and e.claim = export_claim and e.status = 'running'
  returning true
$$;
comment on function app.park_export(uuid, uuid) is
  'Ends a pass over the worker''s export with the archive unfinished (its time was spent): running without a claim, so a next pass (app.claim_export) goes on with it at once, as the same attempt, rather than after a lease; at the back of the queue (queued_at), so the exports that waited meanwhile go first and a large account''s export takes turns with the others instead of holding every pass. Null when the claim is no longer the export''s.';

create function app.export_chunk(export_id uuid, export_claim uuid, chunk_number integer, lease interval)
returns text
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  member uuid;
  chunk text;
begin
  update app.exports e set lease_until = now() + lease
   where e.id = export_chunk.export_id and e.claim = export_claim and e.status = 'running'
  returning e.user_id into member;
  if member is null then
    raise exception 'export % is no longer held by this worker', export_chunk.export_id using errcode = 'PT409';
  end if;
  select c.body into chunk from app.export_chunks c where c.export_id = export_chunk.export_id and c.n = chunk_number;
  return chunk;
end;
$$;
comment on function app.export_chunk(uuid, uuid, integer, interval) is
  'One stored chunk of the worker''s export, read in order as the archive is streamed to storage (one chunk in memory at a time); renews the lease, and raises PT409 when the claim is no longer the export''s. Security definer: not granted to members.';

create function app.complete_export(export_id uuid, export_claim uuid, key text, size bigint, valid_until timestamptz)
returns boolean
language sql
volatile
security definer
set search_path = ''
as $$
  with done as (
    update app.exports e
       set status = 'ready', file_key = key, byte_size = size, expires_at = valid_until,
           completed_at = now(), claim = null, lease_until = null, error = null, updated_at = now(),
           progress = null, chunks = 0
     where e.id = export_id and e.claim = export_claim and e.status = 'running'
    returning e.id
  ), dropped as (
    delete from app.export_chunks c using done d where c.export_id = d.id
  )
  select true from done
$$;
comment on function app.complete_export(uuid, uuid, text, bigint, timestamptz) is
  'Marks the worker''s export ready with its archive, downloadable until valid_until; null (nothing changed) when the claim is no longer the export''s (its lease ended and another worker took it over), in which case the caller deletes the archive it wrote. The chunks it was built from go with the completion.';

create function app.fail_export(export_id uuid, export_claim uuid, reason text, max_attempts integer, retry_after interval)
returns text
language sql
volatile
security definer
set search_path = ''
as $$
  with failed as (
    update app.exports e
       set status = case when e.attempts >= max_attempts then 'failed' else 'pending' end,
           completed_at = case when e.attempts >= max_attempts then now() end,
           error = left(reason, 500), claim = null, file_key = null,
           progress = case when e.attempts < max_attempts then e.progress end,
           chunks = case when e.attempts < max_attempts then e.chunks else 0 end,
           lease_until = case when e.attempts < max_attempts then now() + retry_after end, queued_at = now(), updated_at = now()
      from app.exports old
     where old.id = e.id and e.id = export_id and e.claim = export_claim and e.status = 'running'
    returning e.id, e.status, old.file_key
  ), dropped as (
    delete from app.export_chunks c using failed f where c.export_id = f.id and f.status = 'failed'
  ), queued as (
    insert into app.file_deletions (key) select f.file_key from failed f where f.file_key is not null
    on conflict do nothing
  )
  select f.status from failed f
$$;
comment on function app.fail_export(uuid, uuid, text, integer, interval) is
  'Records a failed attempt of the worker''s export: pending again, not to be claimed before retry_after has passed (lease_until of a pending export: a failing export is not retried in a tight loop), or failed after max_attempts. Returns the new status (null when the claim is no longer the export''s). The archive the attempt began is queued in app.file_deletions (the worker also deletes it at once). The chunks already built stay for the next attempt, which goes on from them; a failed export''s go.';

create function app.expire_exports()
returns integer
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  expired integer;
begin
  with due as (
    select x.id, x.file_key from app.exports x
    where x.file_key is not null and x.expires_at <= now()
    for update skip locked
  ), gone as (
    update app.exports e set file_key = null, updated_at = now()
      from due
     where e.id = due.id
    returning due.file_key as key
  )
  insert into app.file_deletions (key) select g.key from gone g where g.key is not null
  on conflict do nothing;
  get diagnostics expired = row_count;
  return expired;
end;
$$;
comment on function app.expire_exports() is
  'Archives whose 24-hour download window closed: their keys go to the file deletion outbox (the storage worker deletes them) and the export keeps its row without a URL. Called by the export worker on each pass.';

create function app.delete_account(member uuid)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  deleted_id text := app.to_public_id('user', member);
  topics text[];
  others uuid[];
  conversation_refs text[];
  gone_projects text[];
  other uuid;
begin
  if not exists (select 1 from app.users u where u.id = member for update) then
    perform app.http_error(404, format('No user %s.', deleted_id));
  end if;

  -- Projects the member owns with other accepted makers stay theirs: the earliest of them takes
  -- over (the project is their work too). Projects nobody else makes go with the member.
  update app.projects p
     set owner_id = (select mk.user_id from app.project_makers mk
                     where mk.project_id = p.id and mk.accepted and mk.user_id <> member
                     order by mk.created_at, mk.user_id limit 1)
   where p.owner_id = member
     and exists (select 1 from app.project_makers mk where mk.project_id = p.id and mk.accepted and mk.user_id <> member);

  -- Other members' webhook payloads: a todo's body is rendered once, when it is created
  -- (app.webhook_events), and sent with every retry for up to three days. Where it names the
  -- member (mentioned_users) or a project that goes with them (mentioned_projects), that entry is
  -- removed now, as the API stops rendering it, before the mention rows that find them cascade.
  select array_agg(app.to_public_id('proj', p.id)) into gone_projects
  from app.projects p where p.owner_id = member;
  update app.webhook_events e
     set payload = jsonb_set(jsonb_set(e.payload,
           '{data,mentioned_users}', coalesce((
             select jsonb_agg(x.item order by x.n) from jsonb_array_elements(e.payload #> '{data,mentioned_users}') with ordinality x(item, n)
             where x.item ->> 'id' is distinct from deleted_id), '[]'::jsonb)),
           '{data,mentioned_projects}', coalesce((
             select jsonb_agg(x.item order by x.n) from jsonb_array_elements(e.payload #> '{data,mentioned_projects}') with ordinality x(item, n)
             where not (x.item ->> 'id' = any (coalesce(gone_projects, '{}')))), '[]'::jsonb))
   where e.todo_id in (select m.todo_id from app.todo_user_mentions m where m.user_id = member
                       union
                       select m.todo_id from app.todo_project_mentions m join app.projects p on p.id = m.project_id where p.owner_id = member)
     and jsonb_typeof(e.payload #> '{data,mentioned_users}') = 'array'
     and jsonb_typeof(e.payload #> '{data,mentioned_projects}') = 'array';

  -- Conversations go first and whole (both sides, messages, reactions, attachments), before the
  -- member's own rows cascade: their message reactions then go with their messages, whose
  -- reaction.deleted trigger finds no message and broadcasts nothing. The realtime topics that
  -- carried the member are emptied, and the other participants' inboxes told their unread count.
  select array_agg(app.conversation_topic(c.id)) || array_agg(app.conversation_topic(c.id) || ':typing'),
         array_agg(case when c.user_low = member then c.user_high else c.user_low end),
         array_agg(app.to_public_id('conversation', c.id))
    into topics, others, conversation_refs
  from app.conversations c where c.user_low = member or c.user_high = member;
  delete from app.conversations c where c.user_low = member or c.user_high = member;
  foreach other in array coalesce(others, '{}') loop
    perform realtime.send(jsonb_build_object('unread_count', app.unread_conversations(other)),
                          'inbox.updated', app.user_topic(other), true);
  end loop;
  begin
    -- Also what the other participants' inboxes were told of these conversations
    -- (conversation.created names the member; inbox.updated the conversation and its message):
    -- Supabase Realtime can replay a private topic's stored messages to a client that joins it.
    delete from realtime.messages m
     where m.topic = any (coalesce(topics, '{}') || app.user_topic(member))
        or (m.topic = any (array(select app.user_topic(o) from unnest(coalesce(others, '{}')) o))
            and m.payload ->> 'conversation_id' = any (conversation_refs));
  exception when insufficient_privilege then
    -- Where the platform keeps realtime.messages to itself, its rows expire within three days.
    null;
  end;

  -- Stored objects name their uploader in storage.objects.owner, which older Supabase projects
  -- still tie to auth.users with a plain foreign key (no on delete): unset it, so the account can
  -- go now while the storage worker deletes the files (their rows go with them).
  begin
    update storage.objects o set owner = null where o.owner = member;
  exception when insufficient_privilege then
    null;
  end;

  -- Everything else cascades from auth.users (Supabase's account) and app.users: todos with their
  -- comments, reactions and attachments; the member's comments, reactions, follows, requests,
  -- mutes, reports, uploads (their files queued by app.tg_uploads__queue_file_deletion), exports
  -- (archives queued by app.tg_exports__queue_file_deletion), webhook subscriptions with secrets
  -- and deliveries, API keys, OAuth tokens (so every credential stops at once) and whatever later
  -- domains reference app.users with on delete cascade. The counter triggers fire per deleted row,
  -- so other members' reactions_count, comments_count, followers_count and totals stay exact.
  delete from auth.users au where au.id = member;
  delete from app.users u where u.id = member;
  return jsonb_build_object('deleted', deleted_id);
end;
$$;
comment on function app.delete_account(uuid) is
  'Permanently removes a member (the operator''s approve-deletion), in the caller''s transaction: projects others also make pass to the earliest other maker, other members'' stored webhook payloads lose the entries naming the member or their projects, conversations go whole (their realtime history with them, on the other participant''s inbox topic too; the other participant gets inbox.updated), then the auth.users and app.users rows, from which every other row of the member cascades, stored files queued in app.file_deletions by the triggers. Other members'' counters stay exact through the counter triggers. Not granted to members: approval is the operator''s.';

-- ============================================================================
-- Row-level security and grants
-- ============================================================================
-- app.account_deletion_requests
alter table app.account_deletion_requests enable row level security;
create policy "Members see their own deletion request" on app.account_deletion_requests
  for select to authenticated using (user_id = (select auth.uid()));
create policy "Members ask to delete their account with their own credential" on app.account_deletion_requests
  for insert to authenticated
  with check (user_id = (select auth.uid()) and (select app.can_write()) and (select app.credential_is_members_own()));
grant select on app.account_deletion_requests to authenticated;
grant insert (user_id) on app.account_deletion_requests to authenticated;

-- app.exports
alter table app.exports enable row level security;
create policy "Members see their own exports" on app.exports
  for select to authenticated using (user_id = (select auth.uid()));
create policy "Members export their own data, with a writing credential" on app.exports
  for insert to authenticated with check (user_id = (select auth.uid()) and (select app.can_write()));
grant select on app.exports to authenticated;
grant insert (user_id) on app.exports to authenticated;

-- app.export_chunks
alter table app.export_chunks enable row level security;
-- No policy and no grant: only the worker's functions touch it.

-- ============================================================================
-- Triggers
-- ============================================================================
create function app.tg_exports__queue_file_deletion()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  insert into app.file_deletions (key) values (old.file_key) on conflict do nothing;
  return null;
end;
$$;
comment on function app.tg_exports__queue_file_deletion() is
  'Queues the archive of a removed export (the member''s account deleted) for deletion, in the same transaction, as uploads are.';
create trigger _200_queue_file_deletion after delete on app.exports
  for each row when (old.file_key is not null)
  execute function app.tg_exports__queue_file_deletion();

create trigger _100_set_updated_at before update on app.exports
  for each row execute function app.tg__set_updated_at();

-- ============================================================================
-- API functions
-- ============================================================================
create function api.account_delete()
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  -- Before anything else: a third-party app learns nothing, not even whether a request is pending.
  if not app.credential_is_members_own() then
    perform app.http_error(403, 'Only you can ask for your account''s deletion: with your API key or our own app, not a third-party app.');
  end if;
  if exists (select 1 from app.account_deletion_requests r where r.user_id = (select auth.uid())) then
    perform app.http_error(422, 'Your account''s deletion is already requested and waiting for review.');
  end if;
  insert into app.account_deletion_requests (user_id) values ((select auth.uid()))
  on conflict do nothing;
  if not found then
    perform app.http_error(422, 'Your account''s deletion is already requested and waiting for review.');
  end if;
end;
$$;
comment on function api.account_delete() is
  'DELETE /v1/account: records a request to delete the member''s account for the operator''s team to review (204), with what asked (requested_by, from the claims). Only the member''s own credential may ask: an API key or a first-party app''s token with write; a third-party app gets 403 whatever its scopes. 422 while one is pending (concurrent requests too: the primary key decides), whatever credential asks again: the record keeps naming what made the request under review. Nothing else changes until it is approved: the account keeps working.';
grant execute on function api.account_delete() to authenticated;

create function api.billing_get(upgrade_url text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select jsonb_build_object(
    'pro', u.subscription_active,
    'status', case when u.subscription_active then 'active' else 'inactive' end,
    'manage_url', upgrade_url)
  from app.users u where u.id = (select auth.uid()));
end;
$$;
comment on function api.billing_get(text) is
  'GET /v1/billing, the endpoint of the billing scope: whether the member''s subscription is active, and where to manage or renew it (the upgrade URL, passed in by the HTTP layer, which holds it). Answered for a lapsed account too: seeing why access stopped is what billing is for. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function api.billing_get(text) to authenticated;

create function api.export_create()
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  member_id uuid := (select auth.uid());
  created app.exports;
begin
  if exists (select 1 from app.exports e where e.user_id = member_id and e.status in ('pending', 'running')) then
    perform app.http_error(429, 'An export of your data is already in progress; wait for it to finish.', jsonb_build_object('retry_after', 30));
  end if;
  perform app.hit_rate_limit('export_create');
  begin
    insert into app.exports (user_id) values (member_id) returning * into created;
  exception when unique_violation then
    perform app.http_error(429, 'An export of your data is already in progress; wait for it to finish.', jsonb_build_object('retry_after', 30));
  end;
  return app.export_json(created);
end;
$$;
comment on function api.export_create() is
  'POST /v1/exports: 202 with a pending export that the worker turns into an archive. One in progress per member (429, race-free through the partial unique index), and rate-limited (export_create, 429).';
grant execute on function api.export_create() to authenticated;

create function api.export_get(export_ref text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  result jsonb;
begin
  select app.export_json(e) into result from app.exports e
  where e.id = app.from_public_id('exp', export_ref) and e.user_id = (select auth.uid());
  if result is null then
    perform app.http_error(404, format('No export matches %L.', export_ref));
  end if;
  return result;
end;
$$;
comment on function api.export_get(text) is
  'GET /v1/exports/{export_id}: the member''s own export (404 for anyone else''s, so ids cannot be probed), with its download url while it is ready.';
grant execute on function api.export_get(text) to authenticated;

create function api.exports_list(page_limit integer, starting_after text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  member_id uuid := (select auth.uid());
  anchor app.exports;
  result jsonb;
begin
  if starting_after is not null then
    select e.* into anchor from app.exports e
    where e.id = app.from_public_id('exp', starting_after) and e.user_id = member_id;
    if anchor.id is null then
      perform app.http_error(404, format('starting_after: no export matches %L.', starting_after));
    end if;
  end if;
  with candidates as materialized (
    select e.* from app.exports e
    where e.user_id = member_id and (anchor.id is null or (e.created_at, e.id) < (anchor.created_at, anchor.id))
    order by e.created_at desc, e.id desc
    limit page_limit + 1
  ), page as (
    select * from candidates order by created_at desc, id desc limit page_limit
  )
  select app.page_envelope(
    (select jsonb_agg(app.export_json(x::app.exports) order by x.created_at desc, x.id desc) from page x),
    (select count(*) from candidates) > page_limit,
    (select count(*) from app.exports e where e.user_id = member_id),
    (select app.to_public_id('exp', x.id) from page x order by x.created_at, x.id limit 1))
  into result;
  return result;
end;
$$;
comment on function api.exports_list(integer, text) is
  'GET /v1/exports: the member''s exports, newest first, paginated (keyset on created_at, id; the cursor is the last export''s id).';
grant execute on function api.exports_list(integer, text) to authenticated;

-- ============================================================================
-- Execute only where granted above
-- ============================================================================
revoke execute on all functions in schema app, api from public;
