-- Notifications: what triggers write, what members read and mark read, their devices and
-- preferences, and the push outbox the worker sends (APNs and Web Push).
--
-- Every notification is written by a trigger in the transaction of its cause (a comment, a
-- like, a mention, a follow, a follow request or its approval), through one function
-- (app.notify) that refuses the cases nobody should be told about: oneself, a member the
-- recipient muted, and content the recipient may not see. A notification is keyed by
-- (recipient, type, actor, subject), so a like withdrawn and given again shows the same
-- notification again and pushes nothing twice. Withdrawing a cause hides its unread
-- notification; deleting a todo or comment deletes every notification about it (cascade).
-- A new notification whose recipient has a device or a browser subscribed gets one row in the
-- push fan-out queue (app.push_fanouts), in the same transaction; the push worker turns it into
-- one row per device and web subscription of the push outbox (app.push_deliveries) when it
-- claims work (app.take_push_deliveries), and functions/lib/push.ts sends them.

-- Function bodies are not checked here: they call functions of earlier files and sections.
-- They are the bodies the migrations created and checked, as test/schema.test.ts proves.
set check_function_bodies = off;

-- ============================================================================
-- Tables
-- ============================================================================
create table app.notifications (
  id         uuid primary key default gen_random_uuid(),
  user_id    uuid not null references app.users(id) on delete cascade,
  type       text not null constraint notifications_type_check check (type in (
               'comment_todo_create', 'comment_comment_create', 'reaction_todo_create', 'reaction_comment_create',
               'mention_todo_create', 'mention_comment_create', 'follow_user_create', 'follow_project_create',
               'follow_request_create', 'follow_request_approve')),
  actor_id   uuid not null references app.users(id) on delete cascade,
  subject_id uuid not null,
  todo_id    uuid references app.todos(id) on delete cascade,
  comment_id uuid references app.comments(id) on delete cascade,
  project_id uuid references app.projects(id) on delete cascade,
  emoji      text,
  title      text,
  text       text,
  url        text,
  read       boolean not null default false,
  hidden     boolean not null default false,
  created_at timestamptz not null default now()
);
comment on table app.notifications is
  'A member''s notification (SPEC "Notification"), written by triggers in the transaction of its cause and rendered then (emoji, title, text, url; the actor is rendered when read, so a renamed actor shows the new name). One per (recipient, type, actor, subject): the subject is the comment of a comment, the liked todo or comment, the todo or comment of a mention, the followee or project of a follow or request.';
comment on column app.notifications.hidden is
  'True once its cause was withdrawn while it was unread (an un-like, an unfollow, a withdrawn or answered request, a mention edited away): left out of every list and count, and shown again without a new push when the cause comes back. Read notifications stay as they are.';
create unique index notifications_dedupe_key on app.notifications (user_id, type, actor_id, subject_id);
-- Keyset pagination, newest first, of what a member sees; and the unread ones (count, badge).
create index notifications_user_id_created_at_idx on app.notifications (user_id, created_at desc, id desc) where (not hidden);
create index notifications_unread_idx on app.notifications (user_id) where (not read and not hidden);
-- Withdrawing a cause by actor and subject (an un-like, whoever the recipient); the actor's FK.
create index notifications_actor_id_idx on app.notifications (actor_id, subject_id);
create index notifications_todo_id_idx on app.notifications (todo_id) where (todo_id is not null);
create index notifications_comment_id_idx on app.notifications (comment_id) where (comment_id is not null);
create index notifications_project_id_idx on app.notifications (project_id) where (project_id is not null);
-- Spent notifications (read, or hidden) by age, for the retention (app.prune_notifications).
create index notifications_spent_idx on app.notifications (created_at) where (read or hidden);

create table app.notification_preferences (
  user_id             uuid references app.users(id) on delete cascade,
  type                text constraint notification_preferences_type_check check (type in (
                        'comment_todo_create', 'comment_comment_create', 'reaction_todo_create', 'reaction_comment_create',
                        'mention_todo_create', 'mention_comment_create', 'follow_user_create', 'follow_project_create',
                        'follow_request_create', 'follow_request_approve')),
  mobile_push_enabled boolean not null,
  updated_at          timestamptz not null default now(),
  constraint notification_preferences_pkey primary key (user_id, type)
);
comment on table app.notification_preferences is
  'A member''s choices that differ from the default (every type pushed to their devices): at most one row per type, so the table grows by ten rows per member at most.';

create table app.devices (
  token            text primary key constraint devices_token_check check (token ~ '^[0-9a-f]{64,200}$'),
  user_id          uuid not null references app.users(id) on delete cascade,
  platform         text not null constraint devices_platform_check check (platform in ('ios', 'macos')),
  apns_environment text not null default 'production' constraint devices_apns_environment_check check (apns_environment in ('production', 'sandbox')),
  created_at       timestamptz not null default now(),
  updated_at       timestamptz not null default now()
);
comment on table app.devices is
  'APNs device tokens of first-party apps (SPEC "DeviceToken"), lower-case hex. A token belongs to one account: registering it again from another account moves it (a shared device that changed hands must not keep receiving the first account''s notifications).';
create index devices_user_id_idx on app.devices (user_id, updated_at);

create table app.web_push_subscriptions (
  id         uuid primary key default gen_random_uuid(),
  user_id    uuid not null references app.users(id) on delete cascade,
  endpoint   text not null constraint web_push_subscriptions_endpoint_check check (endpoint ~ '^https?://' and length(endpoint) <= 2048),
  p256dh     text not null constraint web_push_subscriptions_p256dh_check check (length(p256dh) <= 200),
  auth       text not null constraint web_push_subscriptions_auth_check check (length(auth) <= 100),
  created_at timestamptz not null default now()
);
comment on table app.web_push_subscriptions is
  'Browser push subscriptions of the website (PushSubscription: endpoint, keys p256dh and auth), written by the website (locally: the operator CLI add-web-push-subscription). An endpoint belongs to one account, as a device token does. No policy and no grant: the website (the operator CLI locally) writes, the worker reads.';
create unique index web_push_subscriptions_endpoint_key on app.web_push_subscriptions (endpoint);
create index web_push_subscriptions_user_id_idx on app.web_push_subscriptions (user_id);

create table app.push_fanouts (
  id              bigint generated always as identity primary key,
  notification_id uuid not null
);
comment on table app.push_fanouts is
  'Notifications whose pushes are still to be fanned out: one row each, written by app.notify with the notification (only when its recipient has a device or a web subscription), taken oldest first by the push worker, which writes their deliveries (app.take_push_deliveries). Why not the deliveries themselves on the write path: a delivery row costs four index entries and two foreign-key checks, with one statement joining devices and preferences, about a third of what a like''s notification costs the database (issue 27: notifications on likes at 1.13-1.26x against a goal of 1.15x); this row costs one index entry. No foreign key, on purpose: its check would cost the write path what this table saves, and a row whose notification is gone (deleted with its todo, comment or account) is dropped by the worker''s join. No policy and no grant: app.notify writes, the worker reads.';

create table app.push_deliveries (
  id                  bigint generated always as identity primary key,
  notification_id     uuid not null references app.notifications(id) on delete cascade,
  device_token        text references app.devices(token) on delete cascade,
  web_subscription_id uuid references app.web_push_subscriptions(id) on delete cascade,
  status              text not null default 'pending' constraint push_deliveries_status_check check (status in ('pending', 'failed')),
  attempts            integer not null default 0,
  next_attempt_at     timestamptz default now(),
  first_attempt_at    timestamptz,
  last_status         integer,
  last_error          text,
  created_at          timestamptz not null default now(),
  leased_at           timestamptz,
  lease_id            uuid,
  constraint push_deliveries_one_target check (num_nonnulls(device_token, web_subscription_id) = 1)
);
comment on table app.push_deliveries is
  'The push outbox: one row per (notification, device or web subscription), written by the worker''s fan-out (app.take_push_deliveries, from app.push_fanouts); the worker leases due rows (app.take_push_deliveries), sends them outside any transaction, and deletes them once sent. A row that keeps failing is marked failed, kept a week for the operator to see why (app.prune_push_deliveries), and gone with its notification, device or subscription. No policy and no grant: app.notify writes, the worker reads.';
comment on column app.push_deliveries.leased_at is
  'When a worker last claimed it (app.take_push_deliveries): an answer that the token is dead (410) deletes the device only if it was not registered again after this, as Apple asks (a token re-registered while the 410 was in flight is live).';
comment on column app.push_deliveries.lease_id is
  'The current claim''s id, new at every claim (app.take_push_deliveries): the fence. An outcome is recorded only with the lease id the row still carries (app.record_push_attempt), so a worker whose lease ran out and was claimed by another never marks the row: its late "retry" made the row due under the new holder''s send, and a third worker pushed it again (issue 28).';
create index push_deliveries_notification_id_idx on app.push_deliveries (notification_id);
create index push_deliveries_device_token_idx on app.push_deliveries (device_token) where (device_token is not null);
create index push_deliveries_web_subscription_id_idx on app.push_deliveries (web_subscription_id) where (web_subscription_id is not null);
create index push_deliveries_due_idx on app.push_deliveries (next_attempt_at) where (status = 'pending');
-- Pruning failed deliveries by age (app.prune_push_deliveries).
create index push_deliveries_failed_idx on app.push_deliveries (created_at) where (status = 'failed');

create table app.apns_provider_tokens (
  key_id    text,
  team_id   text,
  token     text not null,
  issued_at timestamptz not null,
  constraint apns_provider_tokens_pkey primary key (key_id, team_id)
);
comment on table app.apns_provider_tokens is
  'The APNs provider token (ES256 JWT) every worker uses, per key and team: Apple answers 429 TooManyProviderTokenUpdates when tokens change more often than every 20 minutes and refuses them after an hour, so one worker signs a new one after 40 minutes (app.store_apns_provider_token) and all share it. No policy and no grant: a bearer credential toward Apple; only the worker reads it.';

-- ============================================================================
-- Helpers
-- ============================================================================
create function app.notification_types()
returns table (identifier text, name text, description text, emoji text)
language sql
immutable
parallel safe
as $$
  values
    ('comment_todo_create', 'Comments', 'Someone commented on one of your todos.', '💬'),
    ('comment_comment_create', 'Replies', 'Someone replied to one of your comments.', '💬'),
    ('reaction_todo_create', 'Likes on todos', 'Someone liked one of your todos.', '❤️'),
    ('reaction_comment_create', 'Likes on comments', 'Someone liked one of your comments.', '❤️'),
    ('mention_todo_create', 'Mentions in todos', 'Someone mentioned you in a todo.', '👋'),
    ('mention_comment_create', 'Mentions in comments', 'Someone mentioned you in a comment.', '👋'),
    ('follow_user_create', 'New followers', 'Someone started following you.', '🙌'),
    ('follow_project_create', 'New project followers', 'Someone started following a project you make.', '🙌'),
    ('follow_request_create', 'Follow requests', 'Someone asked to follow you or a project you make.', '🔒'),
    ('follow_request_approve', 'Approved requests', 'Someone approved your request to follow them or their project.', '✅')
$$;
comment on function app.notification_types() is
  'Inlined (no SET clause, no table access). Every notification type, in display order, with its name, description and emoji: the list GET /v1/notification_preferences shows and the documentation names. A function, not a table: they change with the code that writes them, never with data. Inlined into app.notify''s insert, whose plan is kept: with a SET clause it was a function call planned again for every notification written (0.07-0.13 ms of the 0.3 ms a like''s notification costs, issue 27).';
grant execute on function app.notification_types() to authenticated, service_role;

create function app.notification_excerpt(body text)
returns text
language sql
immutable
parallel safe
as $$
  select case when btrim(coalesce(body, '')) = '' then null
              when length(body) <= 200 then body
              else left(body, 199) || '…' end
$$;
comment on function app.notification_excerpt(text) is
  'Inlined (no SET clause, no table access). The supporting text of a notification: the body it is about, at most 200 characters (a push alert shows less, and the full text is a tap away), null when empty.';
grant execute on function app.notification_excerpt(text) to authenticated, service_role;

create function app.notify(recipient uuid, kind text, actor uuid, subject uuid, todo uuid, comment uuid, project uuid, title text, body text, url text)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  created uuid;
  inserted boolean;
begin
  -- Never to oneself, nor to the member doing this (an approval notifies the requester, not
  -- the approver), nor from someone the recipient muted.
  if recipient is null or recipient = actor or recipient = (select auth.uid())
     or exists (select 1 from app.mutes m where m.user_id = recipient and m.muted_user_id = actor) then
    return;
  end if;
  insert into app.notifications as n (user_id, type, actor_id, subject_id, todo_id, comment_id, project_id, emoji, title, text, url)
  values (recipient, kind, actor, subject, todo, comment, project,
          (select t.emoji from app.notification_types() t where t.identifier = kind), title, body, url)
  on conflict (user_id, type, actor_id, subject_id) do update set hidden = false
    where n.hidden
  returning n.id, n.xmax = 0 into created, inserted;
  -- Only a new row goes to the outbox (xmax is 0 for an insert, not for a row shown again).
  if not coalesce(inserted, false) then
    return;
  end if;
  -- Its pushes are fanned out by the worker (app.push_fanouts says why): one row here, and only
  -- when there is somewhere to push it (the same checks the fan-out makes).
  insert into app.push_fanouts (notification_id)
  select created
  where exists (select 1 from app.devices d where d.user_id = recipient)
          and not exists (select 1 from app.notification_preferences p
                          where p.user_id = recipient and p.type = kind and not p.mobile_push_enabled)
     or exists (select 1 from app.web_push_subscriptions w where w.user_id = recipient);
end;
$$;
comment on function app.notify(uuid, text, uuid, uuid, uuid, uuid, uuid, text, text, text) is
  'The one way a notification is written (by the triggers below): refuses oneself, the member acting and a muted actor; a notification with the same key that was hidden is shown again (no second push, no duplicate); a new one is queued for the push fan-out (app.push_fanouts) when its recipient has a device (unless they turned mobile_push_enabled off for its type) or a web subscription; the worker writes its deliveries (app.take_push_deliveries). Visibility is the caller''s to check: only it knows what the notification is about. Security definer: members write neither notifications nor the outbox.';

create function app.withdraw_notifications(recipient uuid, kind text, actor uuid, subject uuid)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  update app.notifications n set hidden = true
  where n.type = kind and n.actor_id = actor and n.subject_id = subject and not n.read and not n.hidden
    and (recipient is null or n.user_id = recipient);
end;
$$;
comment on function app.withdraw_notifications(uuid, text, uuid, uuid) is
  'A cause was withdrawn (an un-like, an unfollow, a request withdrawn or answered, a mention edited away): its unread notifications (of one recipient, or of all when recipient is null) leave the lists and counts. Hidden, not deleted, so the cause coming back shows the same row without a second push. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

create function app.notification_name(u app.users)
returns text
language sql
stable
as $$
  select coalesce(nullif(btrim(concat_ws(' ', u.first_name, u.last_name)), ''), u.username)
$$;
comment on function app.notification_name(app.users) is
  'Inlined (no SET clause, no table access). How a notification''s title names a member: their name when they gave one, else their username.';
grant execute on function app.notification_name(app.users) to authenticated, service_role;

create function app.notification_json(n app.notifications, actor app.users, base_url text)
returns jsonb
language sql
stable
as $$
  select jsonb_build_object(
    'id', app.to_public_id('notif', n.id),
    'type', n.type,
    'created_at', n.created_at,
    'read', n.read,
    'emoji', n.emoji,
    'title', n.title,
    'text', n.text,
    'url', n.url,
    'actor', case when actor.id is not null then app.mentioned_user_json_body(actor, base_url) end,
    'todo_id', case when n.todo_id is not null then app.to_public_id('todo', n.todo_id) end)
$$;
comment on function app.notification_json(app.notifications, app.users, text) is
  'Inlined (no SET clause, no table access). A Notification as SPEC renders it: the stored display fields and the actor as a MentionedUser.';
grant execute on function app.notification_json(app.notifications, app.users, text) to authenticated, service_role;

create function app.notification_preference_json(identifier text, name text, description text, enabled boolean)
returns jsonb
language sql
stable
as $$
  select jsonb_build_object('identifier', identifier, 'name', name, 'description', description, 'mobile_push_enabled', coalesce(enabled, true))
$$;
comment on function app.notification_preference_json(text, text, text, boolean) is
  'Inlined (no SET clause, no table access). A NotificationPreference: a type of app.notification_types() and the member''s choice (true unless they turned it off).';
grant execute on function app.notification_preference_json(text, text, text, boolean) to authenticated, service_role;

create function app.my_unread_notifications()
returns integer
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select count(*)::integer from app.notifications n where n.user_id = (select auth.uid()) and not n.read and not n.hidden);
end;
$$;
comment on function app.my_unread_notifications() is
  'The member''s unread notifications (unread_count, the badge): counted on a partial index of unread rows, so no counter has to be kept exact through cascading deletes. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.my_unread_notifications() to authenticated;

create function app.register_device(token text, platform text, apns_environment text)
returns app.devices
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  me uuid := (select auth.uid());
  previous uuid;
  registered app.devices;
begin
  select d.user_id into previous from app.devices d where d.token = register_device.token for update;
  if previous is distinct from me then
    perform app.hit_rate_limit('device_register');
    -- What was queued for the account that had this device is not for the one that has it now.
    delete from app.push_deliveries p where p.device_token = register_device.token;
  end if;
  insert into app.devices as d (token, user_id, platform, apns_environment)
  values (token, me, platform, apns_environment)
  on conflict on constraint devices_pkey do update
    set user_id = excluded.user_id, platform = excluded.platform, apns_environment = excluded.apns_environment, updated_at = now()
  returning * into registered;
  -- At most 20 devices per member: the least recently registered go (a push fans out to each).
  delete from app.devices d
  where d.user_id = me and d.token in (
    select x.token from app.devices x where x.user_id = me order by x.updated_at desc, x.token offset 20);
  return registered;
end;
$$;
comment on function app.register_device(text, text, text) is
  'Registers the member''s device token, moving it from another account if it was registered there (SPEC): security definer because that row is not the member''s to update. A new or moved token counts toward device_register (429); the same token again does not. Keeps the 20 most recently registered devices of a member.';
grant execute on function app.register_device(text, text, text) to authenticated;

create function app.device_json(d app.devices)
returns jsonb
language sql
stable
as $$
  select jsonb_build_object('token', d.token, 'platform', d.platform, 'apns_environment', d.apns_environment, 'created_at', d.created_at)
$$;
comment on function app.device_json(app.devices) is
  'Inlined (no SET clause, no table access). A DeviceToken as SPEC renders it.';
grant execute on function app.device_json(app.devices) to authenticated;

create function app.fan_out_pushes(batch integer)
returns integer
language sql
volatile
security definer
set search_path = ''
as $$
  -- The ids first (an array), then each by its primary key, as app.prune_push_deliveries does;
  -- skip locked: two workers take disjoint rows.
  with fanned as (
    delete from app.push_fanouts f
    where f.id = any (array(select q.id from app.push_fanouts q order by q.id limit batch for update skip locked))
    returning f.notification_id
  ), queued as (
    -- Key-share locks on what the deliveries will reference (the notification, the device, the
    -- subscription): a deletion under way is waited for and its rows are skipped, where the
    -- deliveries' foreign keys would otherwise fail the whole claim; a device being moved to
    -- another account (app.register_device locks it for update first) is read as it is after the
    -- move, so the push never goes to the token's new owner.
    select n.id, n.user_id, n.type from app.notifications n
    where n.id in (select fanned.notification_id from fanned)
    for key share of n
  ), to_devices as (
    select q.id, d.token from queued q join app.devices d on d.user_id = q.user_id
    where not exists (select 1 from app.notification_preferences p
                      where p.user_id = q.user_id and p.type = q.type and not p.mobile_push_enabled)
    for key share of d
  ), to_browsers as (
    select q.id, w.id as subscription_id from queued q join app.web_push_subscriptions w on w.user_id = q.user_id
    for key share of w
  ), written as (
    insert into app.push_deliveries (notification_id, device_token, web_subscription_id)
    select t.id, t.token, null from to_devices t
    union all
    select b.id, null, b.subscription_id from to_browsers b
    returning 1
  )
  select (select count(*)::integer from fanned)
$$;
comment on function app.fan_out_pushes(integer) is
  'The push fan-out (app.push_fanouts says why it is the worker''s): up to `batch` queued notifications, oldest first, become one delivery per device (unless the recipient turned the type''s mobile push off) and per web subscription their recipient has now, in one statement, so a crash loses neither the queue row nor the deliveries. A queued notification that is gone meanwhile, or is being deleted (key-share locks: its deletion is waited for), is dropped; so is a device or subscription being deleted or moved to another account. Returns how many queue rows it took: the worker calls it until that is less than `batch` (functions/lib/push.ts drainPush), and app.take_push_deliveries once before each claim.';

create function app.take_push_deliveries(batch integer, lease interval)
returns table (id bigint, device_token text, apns_environment text, endpoint text, p256dh text, auth text,
               notification_id text, type text, title text, body text, url text, todo_id text, hidden boolean,
               badge integer, attempts integer, first_attempt_at timestamptz, lease_id uuid)
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  perform app.fan_out_pushes(batch);
  return query
  with due as (
    select d.id from app.push_deliveries d
    where d.status = 'pending' and d.next_attempt_at <= now()
    order by d.next_attempt_at
    limit batch
    for update of d skip locked
  ), leased as (
    update app.push_deliveries d set next_attempt_at = now() + lease, leased_at = now(), lease_id = gen_random_uuid()
    from due where d.id = due.id
    returning d.id, d.notification_id, d.device_token, d.web_subscription_id, d.attempts, d.first_attempt_at, d.lease_id
  )
  select l.id, l.device_token, dv.apns_environment, w.endpoint, w.p256dh, w.auth,
         app.to_public_id('notif', n.id), n.type, n.title,
         -- The text as it is now (a retry comes hours later: an edit may have taken it back).
         case when n.comment_id is not null then app.notification_excerpt(c.body)
              when n.todo_id is not null then app.notification_excerpt(t.body)
              else n.text end,
         n.url,
         case when n.todo_id is not null then app.to_public_id('todo', n.todo_id) end,
         -- Dropped unsent: withdrawn meanwhile, its type's mobile push turned off since, or what
         -- it is about out of the recipient's sight now (the triggers' checks, asked again).
         n.hidden or (l.device_token is not null and exists (
           select 1 from app.notification_preferences p where p.user_id = n.user_id and p.type = n.type and not p.mobile_push_enabled))
           -- The device or browser is no longer the recipient's (moved to another account since
           -- the fan-out): never push one member's notification to another's device.
           or (l.device_token is not null and dv.user_id is distinct from n.user_id)
           or (l.web_subscription_id is not null and w.user_id is distinct from n.user_id)
           or (n.todo_id is not null and not app.can_see_member_content(t.user_id, n.user_id))
           or (n.comment_id is not null and not app.can_see_comment(t.user_id, c.user_id, n.user_id)),
         (select count(*)::integer from app.notifications u where u.user_id = n.user_id and not u.read and not u.hidden),
         l.attempts, l.first_attempt_at, l.lease_id
  from leased l
  join app.notifications n on n.id = l.notification_id
  left join app.todos t on t.id = n.todo_id
  left join app.comments c on c.id = n.comment_id
  left join app.devices dv on dv.token = l.device_token
  left join app.web_push_subscriptions w on w.id = l.web_subscription_id;
end;
$$;comment on function app.take_push_deliveries(integer, interval) is
  'The push worker''s claim, as app.take_webhook_deliveries, after the fan-out of up to `batch` queued notifications into deliveries (app.push_fanouts: the devices and web subscriptions their recipient has at the fan-out, a second or so after the notification). Then up to `batch` due deliveries leased for `lease` in one statement that commits at once (sends happen outside any transaction; a worker that dies leaves them due again when the lease ends: at least once), each with a new lease_id, the fence app.record_push_attempt checks. Returns what the push needs: the target, the notification''s display fields, the badge (the recipient''s unread count now), and hidden: true when the push is to be dropped unsent (the notification was withdrawn, the recipient turned its type''s mobile push off after it was queued, or may no longer see the todo or comment it is about). The body is the todo''s or comment''s text as it is at the send, not when queued: a retry hours later must not repeat what an edit took back.';

create function app.record_push_attempt(delivery bigint, lease uuid, outcome text, response_status integer, error text, retry_at timestamptz)
returns boolean
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  target app.push_deliveries;
begin
  -- Fenced: only the worker whose claim the row still carries records (locked until this
  -- transaction ends, so no claim slips in between).
  select * into target from app.push_deliveries d where d.id = delivery and d.lease_id = lease for update;
  if target.id is null then
    -- Its notification, device or subscription went meanwhile, or its lease ran out and another
    -- worker claimed it: that worker's outcome is the one that counts.
    return false;
  end if;
  if outcome in ('delivered', 'dropped') then
    delete from app.push_deliveries d where d.id = delivery;
  elsif outcome = 'unregistered' then
    -- APNs 410 Unregistered, or a push service's 404/410: the token or subscription is dead,
    -- unless the device registered it again after this push was claimed (the app got the token
    -- anew while the 410 was in flight: it is live, and deleting it would silence the device).
    delete from app.devices d where d.token = target.device_token
      and (target.leased_at is null or d.updated_at <= target.leased_at);
    delete from app.web_push_subscriptions w where w.id = target.web_subscription_id;
    delete from app.push_deliveries d where d.id = delivery;
  else
    update app.push_deliveries d
       set attempts = d.attempts + 1,
           first_attempt_at = coalesce(d.first_attempt_at, now()),
           last_status = response_status,
           last_error = left(error, 500),
           status = case when outcome = 'retry' and retry_at is not null then 'pending' else 'failed' end,
           next_attempt_at = case when outcome = 'retry' then retry_at end,
           lease_id = null
     where d.id = delivery;
  end if;
  return true;
end;
$$;
comment on function app.record_push_attempt(bigint, uuid, text, integer, text, timestamptz) is
  'Records one push attempt the worker made under the claim `lease` (the lease_id app.take_push_deliveries gave it); false, and nothing written, when the row carries another claim''s lease id (its lease ran out and another worker took it: the fence, issue 28) or is gone. delivered or dropped (hidden meanwhile) deletes the delivery; unregistered deletes the device token (unless it was registered again after the push was claimed, leased_at) or web subscription, and the delivery; retry keeps it pending until retry_at; failed keeps it as failed (a permanent refusal, or retries given up: the worker stops after PUSH_MAX_ATTEMPTS tries).';

create function app.prune_push_deliveries(older_than interval, batch integer)
returns integer
language sql
volatile
security definer
set search_path = ''
as $$
  with gone as (
    -- The ids first (an array), then each by its primary key: `d.id in (select …)` could be
    -- planned as a hash join over a scan of the whole outbox (issue 28 review).
    delete from app.push_deliveries d
    where d.id = any (array(select f.id from app.push_deliveries f
                            where f.status = 'failed' and f.created_at < now() - older_than
                            order by f.created_at limit batch))
    returning 1
  )
  select count(*)::integer from gone
$$;
comment on function app.prune_push_deliveries(interval, integer) is
  'Deletes up to `batch` failed push deliveries older than `older_than` (the worker asks once per drain: a week, 1000). Without it every push that could not be sent (APNs not configured, a permanent refusal, a day of failures) stayed forever, so the outbox grew with every notification times the recipient''s devices. Security definer: the worker''s role reads the outbox through definer functions only; one index range scan on the partial index of failed rows.';

create function app.prune_notifications(older_than interval, batch integer)
returns integer
language sql
volatile
security definer
set search_path = ''
as $$
  with gone as (
    -- The ids first (an array), then each by its primary key: written `n.id in (select …)`, the
    -- plan hashed the batch and scanned the whole table for it (1M rows: 16,000 pages a statement).
    delete from app.notifications n
    where n.id = any (array(select o.id from app.notifications o
                            where (o.read or o.hidden) and o.created_at < now() - older_than
                            order by o.created_at limit batch))
    returning 1
  )
  select count(*)::integer from gone
$$;
comment on function app.prune_notifications(interval, integer) is
  'The retention of spent notifications (issue 28): deletes up to `batch` notifications older than `older_than` that are read, or hidden (their cause withdrawn), with whatever of their pushes is left (on delete cascade). Unread ones stay, whatever their age: the member has not seen them. The storage worker calls it every minute (functions/lib/maintenance.ts: 90 days, 1,000 a statement, 10 statements a run at most). A cause withdrawn and given again after that is a new notification, with its push. One range of the partial index notifications_spent_idx, then a primary-key probe per row: never a scan of the table (as `id in (subquery)` the generic plan was a hash join over a sequential scan of every notification, issue 28 review). Security definer: members never delete notifications.';
grant execute on function app.prune_notifications(interval, integer) to service_role;

create function app.store_apns_provider_token(key_id text, team_id text, token text, refresh_after interval)
returns text
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  current_token text;
begin
  insert into app.apns_provider_tokens as t (key_id, team_id, token, issued_at)
  values (key_id, team_id, token, now())
  on conflict on constraint apns_provider_tokens_pkey do update
    set token = excluded.token, issued_at = excluded.issued_at
    where t.issued_at <= now() - refresh_after
  returning t.token into current_token;
  if current_token is null then
    select t.token into current_token from app.apns_provider_tokens t
    where t.key_id = store_apns_provider_token.key_id and t.team_id = store_apns_provider_token.team_id;
  end if;
  return current_token;
end;
$$;
comment on function app.store_apns_provider_token(text, text, text, interval) is
  'Offers a freshly signed provider token and returns the one to use: the offer when none is stored or the stored one is older than refresh_after, else the stored one (another worker refreshed first). So however many workers run, the token changes at most once per refresh_after (Apple: not more often than every 20 minutes, 429 TooManyProviderTokenUpdates).';

-- ============================================================================
-- Row-level security and grants
-- ============================================================================
-- app.notifications
alter table app.notifications enable row level security;
create policy "Members see their own notifications" on app.notifications
  for select to authenticated
  using (user_id = (select auth.uid()));
create policy "Members mark their own notifications read" on app.notifications
  for update to authenticated
  using (user_id = (select auth.uid()))
  with check (user_id = (select auth.uid()));
grant select on app.notifications to authenticated;
grant update (read) on app.notifications to authenticated;

-- app.notification_preferences
alter table app.notification_preferences enable row level security;
create policy "Members see their own notification preferences" on app.notification_preferences
  for select to authenticated
  using (user_id = (select auth.uid()));
create policy "Members set their own notification preferences" on app.notification_preferences
  for insert to authenticated
  with check (user_id = (select auth.uid()));
create policy "Members change their own notification preferences" on app.notification_preferences
  for update to authenticated
  using (user_id = (select auth.uid()))
  with check (user_id = (select auth.uid()));
grant select on app.notification_preferences to authenticated;
grant insert (user_id, type, mobile_push_enabled), update (mobile_push_enabled, updated_at) on app.notification_preferences to authenticated;

-- app.devices
alter table app.devices enable row level security;
create policy "Members see their own devices" on app.devices
  for select to authenticated
  using (user_id = (select auth.uid()));
create policy "Members remove their own devices" on app.devices
  for delete to authenticated
  using (user_id = (select auth.uid()));
grant select, delete on app.devices to authenticated;
-- No insert or update grant: app.register_device (security definer) writes, as it may move a
-- token from another account.

-- app.web_push_subscriptions
alter table app.web_push_subscriptions enable row level security;
-- No policy and no grant: the website (the operator CLI locally) writes, the worker reads.

-- app.push_fanouts
alter table app.push_fanouts enable row level security;
-- A queue: every row is deleted within seconds, and the worker's ordered scan walks the dead
-- entries until they are vacuumed, so vacuum it after a thousand of them, not a fifth of the table.
alter table app.push_fanouts set (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
-- No policy and no grant: app.notify writes, the worker reads.

-- app.push_deliveries
alter table app.push_deliveries enable row level security;
-- No policy and no grant: the worker writes and reads.

-- app.apns_provider_tokens
alter table app.apns_provider_tokens enable row level security;
-- No policy and no grant: a bearer credential toward Apple; only the worker reads it.

-- ============================================================================
-- Triggers
-- ============================================================================
create function app.tg_comments__notify()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  todo app.todos;
  actor app.users;
  parent_author uuid;
  link text;
begin
  select * into todo from app.todos t where t.id = new.todo_id;
  select * into actor from app.users u where u.id = new.user_id;
  link := app.public_url() || '/todos/' || todo.number || '#' || app.to_public_id('comm', new.id);
  if new.parent_id is not null then
    select c.user_id into parent_author from app.comments c where c.id = new.parent_id;
    -- The reply's author must be able to see the todo and this comment (they could have lost
    -- access to the todo since they commented).
    if parent_author is not null and app.can_see_member_content(todo.user_id, parent_author)
       and app.can_see_comment(todo.user_id, new.user_id, parent_author) then
      perform app.notify(parent_author, 'comment_comment_create', new.user_id, new.id, todo.id, new.id, null,
                         app.notification_name(actor) || ' replied to your comment', app.notification_excerpt(new.body), link);
    end if;
  end if;
  if parent_author is distinct from todo.user_id then
    perform app.notify(todo.user_id, 'comment_todo_create', new.user_id, new.id, todo.id, new.id, null,
                       app.notification_name(actor) || ' commented on your todo', app.notification_excerpt(new.body), link);
  end if;
  return null;
end;
$$;
comment on function app.tg_comments__notify() is
  'A new comment notifies the todo''s owner (comment_todo_create) and, for a reply, the parent comment''s author when they may still see the todo and the reply (comment_comment_create; an owner replied to is told once, as the reply).';
create trigger _500_notify after insert on app.comments
  for each row execute function app.tg_comments__notify();

create function app.tg_reactions__notify()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  todo app.todos;
  comment app.comments;
  actor app.users;
begin
  if tg_op = 'DELETE' then
    if old.todo_id is not null then
      perform app.withdraw_notifications(null, 'reaction_todo_create', old.user_id, old.todo_id);
    else
      perform app.withdraw_notifications(null, 'reaction_comment_create', old.user_id, old.comment_id);
    end if;
    return null;
  end if;
  select * into actor from app.users u where u.id = new.user_id;
  if new.todo_id is not null then
    select * into todo from app.todos t where t.id = new.todo_id;
    perform app.notify(todo.user_id, 'reaction_todo_create', new.user_id, todo.id, todo.id, null, null,
                       app.notification_name(actor) || ' liked your todo', app.notification_excerpt(todo.body),
                       app.public_url() || '/todos/' || todo.number);
  else
    select * into comment from app.comments c where c.id = new.comment_id;
    select * into todo from app.todos t where t.id = comment.todo_id;
    -- The comment's author must still see the todo, and the liker's activity (a like shows
    -- where the liker's comments would).
    if app.can_see_member_content(todo.user_id, comment.user_id) and app.can_see_comment(todo.user_id, new.user_id, comment.user_id) then
      perform app.notify(comment.user_id, 'reaction_comment_create', new.user_id, comment.id, todo.id, comment.id, null,
                         app.notification_name(actor) || ' liked your comment', app.notification_excerpt(comment.body),
                         app.public_url() || '/todos/' || todo.number || '#' || app.to_public_id('comm', comment.id));
    end if;
  end if;
  return null;
end;
$$;
comment on function app.tg_reactions__notify() is
  'A like notifies the todo''s owner (reaction_todo_create) or the comment''s author (reaction_comment_create, when they may see the todo and the liker''s activity); an un-like hides the unread notification, and liking again shows it again without a second push (app.notify''s key).';
create trigger _500_notify after insert or delete on app.reactions
  for each row execute function app.tg_reactions__notify();

create function app.tg_todo_user_mentions__notify()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  todo app.todos;
  actor app.users;
begin
  if tg_op = 'DELETE' then
    select * into todo from app.todos t where t.id = old.todo_id;
    if todo.id is not null then
      perform app.withdraw_notifications(old.user_id, 'mention_todo_create', todo.user_id, todo.id);
    end if;
    return null;
  end if;
  -- The first ten members a todo names are told; a body naming hundreds notifies no more.
  if (select count(*) from app.todo_user_mentions m where m.todo_id = new.todo_id and m.position < new.position) >= 10 then
    return null;
  end if;
  select * into todo from app.todos t where t.id = new.todo_id;
  if app.can_see_member_content(todo.user_id, new.user_id) then
    select * into actor from app.users u where u.id = todo.user_id;
    perform app.notify(new.user_id, 'mention_todo_create', todo.user_id, todo.id, todo.id, null, null,
                       app.notification_name(actor) || ' mentioned you in a todo', app.notification_excerpt(todo.body),
                       app.public_url() || '/todos/' || todo.number);
  end if;
  return null;
end;
$$;
comment on function app.tg_todo_user_mentions__notify() is
  'An @mention in a todo notifies the member named when they may see the todo (mention_todo_create; the first ten named only, so one post cannot page a crowd); an edit that removes the mention hides the unread notification (the mention rows are rewritten on every edit, and a mention kept is shown again, never pushed twice).';
create trigger _500_notify after insert or delete on app.todo_user_mentions
  for each row execute function app.tg_todo_user_mentions__notify();

create function app.tg_comment_user_mentions__notify()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  comment app.comments;
  todo app.todos;
  actor app.users;
begin
  select * into comment from app.comments c where c.id = coalesce(new.comment_id, old.comment_id);
  if comment.id is null then
    return null;
  end if;
  if tg_op = 'DELETE' then
    perform app.withdraw_notifications(old.user_id, 'mention_comment_create', comment.user_id, comment.id);
    return null;
  end if;
  if (select count(*) from app.comment_user_mentions m where m.comment_id = new.comment_id and m.position < new.position) >= 10 then
    return null;
  end if;
  select * into todo from app.todos t where t.id = comment.todo_id;
  -- The todo's owner and the author replied to hear of this comment already.
  if new.user_id = todo.user_id
     or exists (select 1 from app.comments p where p.id = comment.parent_id and p.user_id = new.user_id) then
    return null;
  end if;
  if app.can_see_member_content(todo.user_id, new.user_id) and app.can_see_comment(todo.user_id, comment.user_id, new.user_id) then
    select * into actor from app.users u where u.id = comment.user_id;
    perform app.notify(new.user_id, 'mention_comment_create', comment.user_id, comment.id, todo.id, comment.id, null,
                       app.notification_name(actor) || ' mentioned you in a comment', app.notification_excerpt(comment.body),
                       app.public_url() || '/todos/' || todo.number || '#' || app.to_public_id('comm', comment.id));
  end if;
  return null;
end;
$$;
comment on function app.tg_comment_user_mentions__notify() is
  'An @mention in a comment notifies the member named when they may see the todo and the comment (mention_comment_create; the first ten named only), unless they own the todo or wrote the comment replied to (they are told of the comment itself); an edit that removes it hides the unread notification.';
create trigger _500_notify after insert or delete on app.comment_user_mentions
  for each row execute function app.tg_comment_user_mentions__notify();

create function app.tg_user_follows__notify()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  actor app.users;
begin
  if tg_op = 'DELETE' then
    perform app.withdraw_notifications(old.followee_id, 'follow_user_create', old.follower_id, old.followee_id);
    return null;
  end if;
  if (select auth.uid()) = new.followee_id then
    -- The followee let them in: an approval (of a request, or all of them by turning public).
    select * into actor from app.users u where u.id = new.followee_id;
    perform app.notify(new.follower_id, 'follow_request_approve', new.followee_id, new.followee_id, null, null, null,
                       app.notification_name(actor) || ' approved your follow request', null,
                       app.public_url() || '/@' || actor.username);
  else
    select * into actor from app.users u where u.id = new.follower_id;
    perform app.notify(new.followee_id, 'follow_user_create', new.follower_id, new.followee_id, null, null, null,
                       app.notification_name(actor) || ' started following you', null,
                       app.public_url() || '/@' || actor.username);
  end if;
  return null;
end;
$$;
comment on function app.tg_user_follows__notify() is
  'A follow notifies the followee (follow_user_create); a follow the followee made (approving a request) notifies the follower instead (follow_request_approve). An unfollow hides the unread notification.';
create trigger _500_notify after insert or delete on app.user_follows
  for each row execute function app.tg_user_follows__notify();

create function app.tg_user_follow_requests__notify()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  actor app.users;
begin
  if tg_op = 'DELETE' then
    perform app.withdraw_notifications(old.followee_id, 'follow_request_create', old.requester_id, old.followee_id);
    return null;
  end if;
  select * into actor from app.users u where u.id = new.requester_id;
  perform app.notify(new.followee_id, 'follow_request_create', new.requester_id, new.followee_id, null, null, null,
                     app.notification_name(actor) || ' asked to follow you', null,
                     app.public_url() || '/follow_requests');
  return null;
end;
$$;
comment on function app.tg_user_follow_requests__notify() is
  'A request to follow a protected member notifies them (follow_request_create; not when they muted the requester); an answered or withdrawn request hides the unread notification.';
create trigger _500_notify after insert or delete on app.user_follow_requests
  for each row execute function app.tg_user_follow_requests__notify();

create function app.tg_project_follows__notify()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  project app.projects;
  actor app.users;
  me uuid := (select auth.uid());
begin
  if tg_op = 'DELETE' then
    perform app.withdraw_notifications(null, 'follow_project_create', old.user_id, old.project_id);
    return null;
  end if;
  select * into project from app.projects p where p.id = new.project_id;
  if me is not null and me <> new.user_id and app.is_project_maker(project.id, me) then
    -- A maker let them in: an approval.
    select * into actor from app.users u where u.id = me;
    perform app.notify(new.user_id, 'follow_request_approve', me, project.id, null, null, project.id,
                       app.notification_name(actor) || ' approved your request to follow ' || project.name, null,
                       app.public_url() || '/projects/' || coalesce(project.slug, app.to_public_id('proj', project.id)));
  else
    select * into actor from app.users u where u.id = new.user_id;
    perform app.notify(m.user_id, 'follow_project_create', new.user_id, project.id, null, null, project.id,
                       app.notification_name(actor) || ' started following ' || project.name, null,
                       app.public_url() || '/projects/' || coalesce(project.slug, app.to_public_id('proj', project.id)))
    from app.project_makers m where m.project_id = project.id and m.accepted;
  end if;
  return null;
end;
$$;
comment on function app.tg_project_follows__notify() is
  'A project follow notifies its accepted makers (follow_project_create); a follow a maker made (approving a request) notifies the follower instead (follow_request_approve). An unfollow hides the unread notifications.';
create trigger _500_notify after insert or delete on app.project_follows
  for each row execute function app.tg_project_follows__notify();

create function app.tg_project_follow_requests__notify()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  project app.projects;
  actor app.users;
begin
  if tg_op = 'DELETE' then
    perform app.withdraw_notifications(null, 'follow_request_create', old.user_id, old.project_id);
    return null;
  end if;
  select * into project from app.projects p where p.id = new.project_id;
  select * into actor from app.users u where u.id = new.user_id;
  perform app.notify(m.user_id, 'follow_request_create', new.user_id, project.id, null, null, project.id,
                     app.notification_name(actor) || ' asked to follow ' || project.name, null,
                     app.public_url() || '/projects/' || coalesce(project.slug, app.to_public_id('proj', project.id)) || '/follow_requests')
  from app.project_makers m where m.project_id = project.id and m.accepted;
  return null;
end;
$$;
comment on function app.tg_project_follow_requests__notify() is
  'A request to follow a protected project notifies its accepted makers (follow_request_create); an answered or withdrawn request hides their unread notifications.';
create trigger _500_notify after insert or delete on app.project_follow_requests
  for each row execute function app.tg_project_follow_requests__notify();

create function app.tg_mutes__hide_notifications()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  -- What the muted member caused before the mute: unread, it leaves the lists, the count and
  -- the outbox (app.take_push_deliveries drops hidden rows), as app.notify refuses it from now on.
  update app.notifications n set hidden = true
  where n.user_id = new.user_id and n.actor_id = new.muted_user_id and not n.read and not n.hidden;
  return null;
end;
$$;
comment on function app.tg_mutes__hide_notifications() is
  'Muting a member hides the unread notifications they caused the muter (and so their queued pushes, dropped unsent): a harasser''s burst must not keep reaching the phone after the mute. Security definer: hidden is not the member''s to write. Read ones stay as they are; an unmute shows nothing again until a cause comes back.';
create trigger _500_hide_notifications after insert on app.mutes
  for each row execute function app.tg_mutes__hide_notifications();

-- ============================================================================
-- API functions
-- ============================================================================
create function api.notifications_list(unread_only boolean, page_limit integer, starting_after text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  me uuid := (select auth.uid());
  anchor app.notifications;
  page uuid[];
  has_more boolean;
  base_url text := app.public_url();
  unread bigint := app.my_unread_notifications();
  total bigint;
begin
  if starting_after is not null then
    select n.* into anchor from app.notifications n
    where n.id = app.from_public_id('notif', starting_after) and n.user_id = me and not n.hidden;
    if anchor.id is null or (unread_only and anchor.read) then
      perform app.http_error(404, format('starting_after: %L is not a notification of this list.', starting_after));
    end if;
  end if;
  page := array(
    select n.id from app.notifications n
    where n.user_id = me and not n.hidden and (not coalesce(unread_only, false) or not n.read)
      and (anchor.id is null or (n.created_at, n.id) < (anchor.created_at, anchor.id))
    order by n.created_at desc, n.id desc
    limit page_limit + 1);
  has_more := cardinality(page) > page_limit;
  page := page[1:page_limit];
  -- Counted from the indexes alone: the unread ones are the badge's count; all of them a
  -- statement of its own that names no `read` (one statement for both read each row's `read`
  -- from the table: 30.8 ms a page at 100,000 notifications, docs/performance.md).
  if coalesce(unread_only, false) then
    total := unread;
  else
    total := (select count(*) from app.notifications n where n.user_id = me and not n.hidden);
  end if;
  return app.page_envelope(
    -- The text is what the notification is about as it is now, read as the member (the todos
    -- and comments policies): an edit shows the edited text, and a todo or comment the member
    -- may no longer see (its author turned private, a follower removed) shows none. The stored
    -- excerpt is what the push carried when the notification was written.
    (select jsonb_agg(app.notification_json(n, u, base_url)
                      || jsonb_build_object('text', case when n.comment_id is not null then app.notification_excerpt(c.body)
                                                         when n.todo_id is not null then app.notification_excerpt(t.body)
                                                         else n.text end)
                      order by array_position(page, n.id))
     from app.notifications n
     left join app.users u on u.id = n.actor_id
     left join app.todos t on t.id = n.todo_id
     left join app.comments c on c.id = n.comment_id
     where n.id = any (page)),
    has_more,
    total,
    app.to_public_id('notif', page[cardinality(page)]))
    || jsonb_build_object('unread_count', unread);
end;
$$;
comment on function api.notifications_list(boolean, integer, text) is
  'GET /v1/notifications: the member''s notifications, newest first (keyset on the partial index), optionally unread only; unread_count counts across all pages. A cursor that is not in the list is 404. The text is the todo''s or comment''s current body, through the member''s own policies: edited text as edited, none once the member may no longer see it.';
grant execute on function api.notifications_list(boolean, integer, text) to authenticated;

create function api.notifications_read()
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
begin
  update app.notifications n set read = true where n.user_id = (select auth.uid()) and not n.read and not n.hidden;
  return null;
end;
$$;
comment on function api.notifications_read() is
  'POST /v1/notifications/reading (and the legacy /mark_as_read): every unread notification read, so unread_count (and the next push''s badge) is 0. Writes nothing when nothing is unread, and grows no table, so it has no rate limit. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function api.notifications_read() to authenticated;

create function api.device_register(token text, platform text, apns_environment text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  hex text := lower(btrim(coalesce(token, '')));
begin
  if hex !~ '^[0-9a-f]{64,200}$' or length(hex) % 2 <> 0 then
    perform app.http_error(422, 'token must be the device token in hexadecimal (at least 64 digits).');
  end if;
  if platform is null or platform not in ('ios', 'macos') then
    perform app.http_error(422, 'platform must be ios or macos.');
  end if;
  if coalesce(apns_environment, 'production') not in ('production', 'sandbox') then
    perform app.http_error(422, 'apns_environment must be production or sandbox.');
  end if;
  return app.device_json(app.register_device(hex, platform, coalesce(apns_environment, 'production')));
end;
$$;
comment on function api.device_register(text, text, text) is
  'POST /v1/devices: validates the hex token (422), platform and environment, then registers it for the member (app.register_device: idempotent, moves a token from another account). First-party apps with scope notifications only (app.authenticate, access devices).';
grant execute on function api.device_register(text, text, text) to authenticated;

create function api.device_delete(token text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
begin
  delete from app.devices d where d.token = lower(btrim(device_delete.token)) and d.user_id = (select auth.uid());
  return null;
end;
$$;
comment on function api.device_delete(text) is
  'DELETE /v1/devices/{token}: 204 whether or not the member had it (SPEC); another account''s token is left alone. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function api.device_delete(text) to authenticated;

create function api.notification_preferences()
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select jsonb_build_object('data', jsonb_agg(app.notification_preference_json(t.identifier, t.name, t.description, p.mobile_push_enabled) order by t.n))
  from app.notification_types() with ordinality t(identifier, name, description, emoji, n)
  left join app.notification_preferences p on p.user_id = (select auth.uid()) and p.type = t.identifier);
end;
$$;
comment on function api.notification_preferences() is
  'GET /v1/notification_preferences: every notification type with the member''s mobile_push_enabled (true unless turned off). PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function api.notification_preferences() to authenticated;

create function api.notification_preference_update(identifier text, mobile_push_enabled boolean)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  kind record;
  enabled boolean;
begin
  select * into kind from app.notification_types() t where t.identifier = notification_preference_update.identifier;
  if kind.identifier is null then
    perform app.http_error(404, format('No notification type matches %L.', identifier));
  end if;
  if mobile_push_enabled is null then
    select p.mobile_push_enabled into enabled from app.notification_preferences p
    where p.user_id = (select auth.uid()) and p.type = kind.identifier;
  else
    insert into app.notification_preferences as p (user_id, type, mobile_push_enabled)
    values ((select auth.uid()), kind.identifier, mobile_push_enabled)
    on conflict on constraint notification_preferences_pkey do update
      set mobile_push_enabled = excluded.mobile_push_enabled, updated_at = now()
    returning p.mobile_push_enabled into enabled;
  end if;
  return app.notification_preference_json(kind.identifier, kind.name, kind.description, enabled);
end;
$$;
comment on function api.notification_preference_update(text, boolean) is
  'PATCH /v1/notification_preferences/{identifier}: sets mobile_push_enabled of one type (404 unknown type). At most one row per member and type, so no rate limit: it cannot grow a table past ten rows per member.';
grant execute on function api.notification_preference_update(text, boolean) to authenticated;

-- ============================================================================
-- Production: Supabase Cron drains the push outbox
-- ============================================================================
create function app.schedule_push_worker()
returns text
language plpgsql
volatile
set search_path = ''
as $$
begin
  if not exists (select 1 from pg_extension where extname = 'pg_cron')
     or not exists (select 1 from pg_extension where extname = 'pg_net') then
    raise exception 'pg_cron and pg_net are needed: enable both (Supabase Dashboard, Integrations: Cron), then call app.schedule_push_worker() again';
  end if;
  perform cron.schedule('todo-push-deliveries', '5 seconds', $job$
    select net.http_post(
      url := (select decrypted_secret from vault.decrypted_secrets where name = 'todo_api_url') || '/internal/push',
      headers := jsonb_build_object('Authorization', 'Bearer ' || (select decrypted_secret from vault.decrypted_secrets where name = 'todo_worker_secret')),
      timeout_milliseconds := 55000)
    where exists (select 1 from vault.decrypted_secrets where name = 'todo_api_url')
      and exists (select 1 from vault.decrypted_secrets where name = 'todo_worker_secret')
  $job$);
  return 'todo-push-deliveries';
end;
$$;
comment on function app.schedule_push_worker() is
  'Schedules the Supabase Cron job that wakes the edge function''s push worker every 5 seconds (POST <todo_api_url>/internal/push with Bearer <todo_worker_secret>, both from Supabase Vault, as app.schedule_webhook_worker does). Not granted to members: the database owner runs it.';

do $do$
begin
  if exists (select 1 from pg_extension where extname = 'pg_cron')
     and exists (select 1 from pg_extension where extname = 'pg_net') then
    perform app.schedule_push_worker();
  end if;
end
$do$;

-- ============================================================================
-- Execute only where granted above
-- ============================================================================
revoke execute on all functions in schema app, api from public;
