-- Functions planned once per session, not once per transaction (issue 27)
--
-- A SQL function with a SET clause is never inlined, and PostgreSQL 17 parses and plans its body
-- again in every transaction that calls it: each API request is a transaction, so every call
-- site paid that planning on every request. Per request, each its own transaction (begin, the
-- call, rollback; the bench data, the functions before and after alternated in blocks,
-- local/bench/per-transaction.ts):
--   POST /v1/todos       2.231 -> 1.764 ms   (app.extract_mentions four times, app.todo_json)
--   POST /v1/comments    1.853 -> 1.524 ms   (app.extract_mentions, app.comment_json)
--   POST /v1/reactions   1.242 -> 1.030 ms   (app.reaction_json)
--   DELETE /v1/reactions 0.669 -> 0.570 ms   (app.withdraw_notifications)
--   GET /v1/todos        1.319 -> 1.240 ms   (app.filter_moment twice)
--   GET /v1/timeline     2.000 -> 1.880 ms
-- The bench's write-cost sections run their calls inside one transaction a round, so they never
-- saw this: a function is planned once per transaction (docs/performance.md, "Seventh round").
--
-- The functions without table access lose their SET clause and are inlined into the calling
-- statement, whose plan is kept (app.filter_moment, app.extract_mentions, app.user_topic,
-- app.conversation_topic, app.webhook_id: pg_catalog functions and other inlined helpers only,
-- so no search_path can change what they call; test/sql.test.ts checks that each is inlined).
-- The others become PL/pgSQL with the same SET clause, security and volatility: the one-row
-- renderers that answer writes (todo, todos, comment, reaction, message, conversation, user,
-- export, webhook subscription), the chat membership and unread counts
-- (app.is_conversation_member is called by the chat policies), app.withdraw_notifications (an
-- un-like, an unfollow), app.refresh_streak, app.can_follow_project (the project follows
-- policy), app.resolve_comment, the jsonb wrappers of users and projects, and five api
-- functions (billing, devices, notification preferences and reading, webhook subscriptions).
--
-- CREATE OR REPLACE only: a function keeps its grants and the policies that call it, and no
-- table is locked (`npm run db:diff` wrote DROP FUNCTION and DROP/CREATE POLICY for the change of
-- language, which would take an exclusive lock on app.messages and the other tables whose
-- policies call them).

set local check_function_bodies = off;

-- api.billing_get: supabase/schemas/88_accounts.sql
CREATE OR REPLACE FUNCTION api.billing_get (
  upgrade_url text
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return (select jsonb_build_object(
    'pro', u.subscription_active,
    'status', case when u.subscription_active then 'active' else 'inactive' end,
    'manage_url', upgrade_url)
  from app.users u where u.id = (select auth.uid()));
end;
$function$;

-- api.device_delete: supabase/schemas/90_notifications.sql
CREATE OR REPLACE FUNCTION api.device_delete (
  token text
)
  RETURNS jsonb
  LANGUAGE plpgsql
  SET search_path TO ''
  AS $function$
begin
  delete from app.devices d where d.token = lower(btrim(device_delete.token)) and d.user_id = (select auth.uid());
  return null;
end;
$function$;

-- api.notification_preferences: supabase/schemas/90_notifications.sql
CREATE OR REPLACE FUNCTION api.notification_preferences()
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return (select jsonb_build_object('data', jsonb_agg(app.notification_preference_json(t.identifier, t.name, t.description, p.mobile_push_enabled) order by t.n))
  from app.notification_types() with ordinality t(identifier, name, description, emoji, n)
  left join app.notification_preferences p on p.user_id = (select auth.uid()) and p.type = t.identifier);
end;
$function$;

-- api.notifications_read: supabase/schemas/90_notifications.sql
CREATE OR REPLACE FUNCTION api.notifications_read()
  RETURNS jsonb
  LANGUAGE plpgsql
  SET search_path TO ''
  AS $function$
begin
  update app.notifications n set read = true where n.user_id = (select auth.uid()) and not n.read and not n.hidden;
  return null;
end;
$function$;

-- api.webhook_subscription_list: supabase/schemas/80_webhooks.sql
CREATE OR REPLACE FUNCTION api.webhook_subscription_list()
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return (select coalesce(jsonb_agg(app.webhook_subscription_json(s) order by s.created_at, s.id), '[]'::jsonb)
  from app.webhook_subscriptions s
  where s.user_id = (select auth.uid()));
end;
$function$;

-- app.attach_uploads: supabase/schemas/60_uploads.sql
CREATE OR REPLACE FUNCTION app.attach_uploads (
  upload_ids     jsonb,
  target_todo    uuid,
  target_comment uuid,
  field          text
)
  RETURNS void
  LANGUAGE plpgsql
  SECURITY DEFINER
  SET search_path TO ''
  AS $function$
begin
  perform app.attach_uploads(upload_ids, target_todo, target_comment, null, field);
end;
$function$;

-- app.can_follow_project: supabase/schemas/20_projects.sql
CREATE OR REPLACE FUNCTION app.can_follow_project (
  project_id uuid,
  viewer_id  uuid
)
  RETURNS boolean
  LANGUAGE plpgsql
  STABLE
  SECURITY DEFINER
  SET search_path TO ''
  AS $function$
begin
  return (select exists (
    select 1 from app.projects p
    where p.id = can_follow_project.project_id
      and (p.privacy = 'public' or app.is_project_maker(p.id, viewer_id))));
end;
$function$;

-- app.comment_json: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.comment_json (
  c app.comments
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return (select app.resolve_urls(app.comments_text(array[c.id]))::jsonb -> 0);
end;
$function$;

-- app.conversation_json: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.conversation_json (
  c app.conversations
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return (select app.resolve_urls(t.body)::jsonb from app.conversation_texts(array[c.id]) t);
end;
$function$;

-- app.conversation_topic: supabase/schemas/50_chat.sql
CREATE OR REPLACE FUNCTION app.conversation_topic (
  conversation_id uuid
)
  RETURNS text
  LANGUAGE sql
  IMMUTABLE
  PARALLEL SAFE
  AS $function$
  select 'conversation:' || app.to_public_id('conversation', conversation_id)
$function$;

-- app.export_json: supabase/schemas/88_accounts.sql
CREATE OR REPLACE FUNCTION app.export_json (
  e app.exports
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
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
$function$;

-- app.extract_mentions: supabase/schemas/30_todos.sql
CREATE OR REPLACE FUNCTION app.extract_mentions (
  body  text,
  sigil text
)
  RETURNS TABLE (
    name       text,
    "position" integer
  )
  LANGUAGE sql
  IMMUTABLE
  PARALLEL SAFE
  ROWS 4
  AS $function$
  select lower(m.match[1]), min(m.ord)::integer
  from regexp_matches(body, '(?:^|[^A-Za-z0-9_])' || sigil || '([A-Za-z0-9_]+)', 'g') with ordinality as m(match, ord)
  group by lower(m.match[1])
$function$;

-- app.filter_moment: supabase/schemas/30_todos.sql
CREATE OR REPLACE FUNCTION app.filter_moment (
  moment jsonb,
  zone   text
)
  RETURNS timestamp WITH time zone
  LANGUAGE sql
  STABLE
  AS $function$
  select case
    when moment is null or jsonb_typeof(moment) <> 'object' then null
    when (moment ->> 'local')::boolean then (moment ->> 'at')::timestamp at time zone zone
    else (moment ->> 'at')::timestamptz
  end
$function$;

-- app.is_conversation_member: supabase/schemas/50_chat.sql
CREATE OR REPLACE FUNCTION app.is_conversation_member (
  conversation_id uuid,
  user_id         uuid
)
  RETURNS boolean
  LANGUAGE plpgsql
  STABLE
  SECURITY DEFINER
  SET search_path TO ''
  AS $function$
begin
  return (select exists (
    select 1 from app.conversation_members m
    where m.conversation_id = is_conversation_member.conversation_id and m.user_id = is_conversation_member.user_id));
end;
$function$;

-- app.message_json: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.message_json (
  m app.messages
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return (select app.resolve_urls(app.messages_text(array[m.id]))::jsonb -> 0);
end;
$function$;

-- app.message_json_as: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.message_json_as (
  m         app.messages,
  viewer_id uuid
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return (select jsonb_build_object(
    'id', app.to_public_id('message', m.id),
    'conversation_id', app.to_public_id('conversation', m.conversation_id),
    'body', m.body,
    'client_message_id', m.client_message_id,
    'created_at', m.created_at,
    'updated_at', m.updated_at,
    'creator', (select app.user_json_as(u, viewer_id) from app.users u where u.id = m.user_id),
    'attachment', (
      select jsonb_build_object(
        'url', app.public_url() || '/files/' || a.key,
        'mime_type', coalesce(a.detected_type, a.content_type),
        'filename', a.filename,
        'byte_size', a.byte_size,
        'width', a.width,
        'height', a.height)
      from app.uploads a where a.message_id = m.id limit 1),
    'reactions', coalesce((
      select jsonb_agg(jsonb_build_object(
        'content', r.content,
        'created_at', r.created_at,
        'user', (select app.user_json_as(u, viewer_id) from app.users u where u.id = r.user_id)) order by r.created_at, r.content)
      from app.message_reactions r where r.message_id = m.id), '[]'::jsonb)));
end;
$function$;

-- app.my_unread_conversations: supabase/schemas/50_chat.sql
CREATE OR REPLACE FUNCTION app.my_unread_conversations()
  RETURNS bigint
  LANGUAGE plpgsql
  STABLE
  SECURITY DEFINER
  SET search_path TO ''
  AS $function$
begin
  return (select app.unread_conversations((select auth.uid())));
end;
$function$;

-- app.my_unread_notifications: supabase/schemas/90_notifications.sql
CREATE OR REPLACE FUNCTION app.my_unread_notifications()
  RETURNS integer
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return (select count(*)::integer from app.notifications n where n.user_id = (select auth.uid()) and not n.read and not n.hidden);
end;
$function$;

-- app.projects_json: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.projects_json (
  ids uuid[]
)
  RETURNS TABLE (
    id   uuid,
    body jsonb
  )
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return query select p.id, app.resolve_urls(p.body)::jsonb from app.projects_text(ids) p;
end;
$function$;

-- app.reaction_json: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.reaction_json (
  r app.reactions
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return (select app.resolve_urls(app.reaction_text(r, (select u.body from app.users_text(array[r.user_id]) u)))::jsonb);
end;
$function$;

-- app.refresh_streak: supabase/schemas/30_todos.sql
CREATE OR REPLACE FUNCTION app.refresh_streak (
  member_id uuid
)
  RETURNS void
  LANGUAGE plpgsql
  SECURITY DEFINER
  SET search_path TO ''
  AS $function$
begin
  with days as (
    select distinct t.local_date as day from app.todos t where t.user_id = member_id
    union
    select f.day from app.streak_freezes f where f.user_id = member_id
  ), islands as (
    select day, day - (row_number() over (order by day))::integer as island from days
  ), runs as (
    select max(day) as last_day, count(*)::integer as length from islands group by island
  )
  update app.users u set
    streak_last_day = (select r.last_day from runs r order by r.last_day desc limit 1),
    streak_length = coalesce((select r.length from runs r order by r.last_day desc limit 1), 0),
    best_streak = coalesce((select max(r.length) from runs r), 0)
  where u.id = member_id;
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
  found app.comments;
begin
  select c.* into found from app.comments c where c.id = app.from_public_id('comm', ref);
  return found;
end;
$function$;

-- app.todo_json: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.todo_json (
  t                app.todos,
  expand_reactions boolean   DEFAULT false
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return (select app.todos_json(array[t.id], expand_reactions) -> 0);
end;
$function$;

-- app.todos_json: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.todos_json (
  ids              uuid[],
  expand_reactions boolean
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return (select app.resolve_urls(app.todos_text(ids, expand_reactions))::jsonb);
end;
$function$;

-- app.unread_conversations: supabase/schemas/50_chat.sql
CREATE OR REPLACE FUNCTION app.unread_conversations (
  member_id uuid
)
  RETURNS bigint
  LANGUAGE plpgsql
  STABLE
  SECURITY DEFINER
  SET search_path TO ''
  AS $function$
begin
  return (select count(*) from app.conversation_members m
  where m.user_id = member_id and m.unread and m.last_message_at is not null);
end;
$function$;

-- app.user_json: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.user_json (
  u app.users
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return (select app.user_json_body(u, (now() at time zone u.time_zone)::date, v.viewer_id, app.public_url(),
    exists (select 1 from app.user_follows f where f.follower_id = v.viewer_id and f.followee_id = u.id),
    exists (select 1 from app.user_follows f where f.follower_id = u.id and f.followee_id = v.viewer_id),
    exists (select 1 from app.user_follow_requests r where r.requester_id = v.viewer_id and r.followee_id = u.id))
  from (select auth.uid() as viewer_id) v);
end;
$function$;

-- app.user_json_as: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.user_json_as (
  u         app.users,
  viewer_id uuid
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return (select app.user_json_body(u, (now() at time zone u.time_zone)::date, viewer_id, app.public_url(),
    exists (select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = u.id),
    exists (select 1 from app.user_follows f where f.follower_id = u.id and f.followee_id = viewer_id),
    exists (select 1 from app.user_follow_requests r where r.requester_id = viewer_id and r.followee_id = u.id)));
end;
$function$;

-- app.user_topic: supabase/schemas/50_chat.sql
CREATE OR REPLACE FUNCTION app.user_topic (
  user_id uuid
)
  RETURNS text
  LANGUAGE sql
  IMMUTABLE
  PARALLEL SAFE
  AS $function$
  select 'user:' || app.to_public_id('user', user_id)
$function$;

-- app.users_json: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.users_json (
  ids uuid[]
)
  RETURNS TABLE (
    id   uuid,
    body jsonb
  )
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return query select u.id, app.resolve_urls(u.body)::jsonb from app.users_text(ids) u;
end;
$function$;

-- app.webhook_id: supabase/schemas/80_webhooks.sql
CREATE OR REPLACE FUNCTION app.webhook_id (
  subscription_id uuid,
  todo_id         uuid
)
  RETURNS text
  LANGUAGE sql
  IMMUTABLE
  PARALLEL SAFE
  AS $function$
  select 'msg_' || md5(subscription_id::text || todo_id::text)
$function$;

-- app.webhook_subscription_json: supabase/schemas/80_webhooks.sql
CREATE OR REPLACE FUNCTION app.webhook_subscription_json (
  s app.webhook_subscriptions
)
  RETURNS jsonb
  LANGUAGE plpgsql
  IMMUTABLE
  SET search_path TO ''
  AS $function$
begin
  return (select jsonb_build_object(
    'id', app.to_public_id('hook', s.id),
    'url', s.url,
    'event_type', s.event_type,
    'project_ids', to_jsonb(array(select app.to_public_id('proj', p) from unnest(s.project_ids) with ordinality u(p, n) order by u.n)),
    'active', s.active,
    'created_at', s.created_at,
    'updated_at', s.updated_at));
end;
$function$;

-- app.withdraw_notifications: supabase/schemas/90_notifications.sql
CREATE OR REPLACE FUNCTION app.withdraw_notifications (
  recipient uuid,
  kind      text,
  actor     uuid,
  subject   uuid
)
  RETURNS void
  LANGUAGE plpgsql
  SECURITY DEFINER
  SET search_path TO ''
  AS $function$
begin
  update app.notifications n set hidden = true
  where n.type = kind and n.actor_id = actor and n.subject_id = subject and not n.read and not n.hidden
    and (recipient is null or n.user_id = recipient);
end;
$function$;

-- api.billing_get: supabase/schemas/88_accounts.sql
COMMENT ON FUNCTION "api"."billing_get"(text) IS 'GET /v1/billing, the endpoint of the billing scope: whether the member''s subscription is active, and where to manage or renew it (the upgrade URL, passed in by the HTTP layer, which holds it). Answered for a lapsed account too: seeing why access stopped is what billing is for. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- api.device_delete: supabase/schemas/90_notifications.sql
COMMENT ON FUNCTION "api"."device_delete"(text) IS 'DELETE /v1/devices/{token}: 204 whether or not the member had it (SPEC); another account''s token is left alone. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- api.notification_preferences: supabase/schemas/90_notifications.sql
COMMENT ON FUNCTION "api"."notification_preferences"() IS 'GET /v1/notification_preferences: every notification type with the member''s mobile_push_enabled (true unless turned off). PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- api.notifications_read: supabase/schemas/90_notifications.sql
COMMENT ON FUNCTION "api"."notifications_read"() IS 'POST /v1/notifications/reading (and the legacy /mark_as_read): every unread notification read, so unread_count (and the next push''s badge) is 0. Writes nothing when nothing is unread, and grows no table, so it has no rate limit. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- api.webhook_subscription_list: supabase/schemas/80_webhooks.sql
COMMENT ON FUNCTION "api"."webhook_subscription_list"() IS 'GET /v1/webhooks/subscriptions: the member''s subscriptions, oldest first, a plain array (SPEC: not paginated; at most 20 exist). Needs a writing credential (functions/lib/access.ts): subscription URLs often carry the receiver''s own credential. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.attach_uploads: supabase/schemas/60_uploads.sql
COMMENT ON FUNCTION "app"."attach_uploads"(jsonb, uuid, uuid, text) IS 'Attaches uploads to a todo or comment: the five-argument app.attach_uploads without a message. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.can_follow_project: supabase/schemas/20_projects.sql
COMMENT ON FUNCTION "app"."can_follow_project"(uuid, uuid) IS 'Whether a member may follow a project at once: public ones, and any project they make. A protected project is asked for (app.project_follow_requests) and a maker approves; a private one only its makers follow. Security definer: a private project is not visible to others. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.comment_json: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."comment_json"(app.comments) IS 'A comment as the API renders it for the current viewer, with its attachments (app.comments_text of its id, URLs in place; null when the viewer may not see it), for the writes that answer with the comment they stored. parent_id (null for a top-level comment) is our addition to SPEC''s fields: replies need it. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.conversation_json: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."conversation_json"(app.conversations) IS 'A conversation as the current participant sees it (app.conversation_texts of its id, URLs in place; null when they take no part in it), for the answer of POST /v1/conversations. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.conversation_topic: supabase/schemas/50_chat.sql
COMMENT ON FUNCTION "app"."conversation_topic"(uuid) IS 'Inlined (no SET clause, no table access). The Realtime topic of a conversation: conversation:<conversation id as the API shows it>, the channel name clients subscribe to.';

-- app.export_json: supabase/schemas/88_accounts.sql
COMMENT ON FUNCTION "app"."export_json"(app.exports) IS 'An Export as the API renders it to its member: url only while the export is ready and expires_at has not passed; after that the archive is gone and a new export must be asked for. The url is {base_url}/exports/<128 random bits>/export.json, served by the API, which finds the export live (ready, unexpired, its account not deleted) on every download: a link stops the moment its export or account goes, not when the storage worker deletes the file. Stable, not immutable: it reads the clock. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.extract_mentions: supabase/schemas/30_todos.sql
COMMENT ON FUNCTION "app"."extract_mentions"(text, text) IS 'Inlined (no SET clause, no table access). The distinct lower-cased names after a sigil (# or @) in body order. A sigil glued to a word (mail@example.com, a#b) is not a mention.';

-- app.filter_moment: supabase/schemas/30_todos.sql
COMMENT ON FUNCTION "app"."filter_moment"(jsonb, text) IS 'Inlined (no SET clause, no table access). A since/until bound as the HTTP layer parsed it: {at, local}. Local moments (dates and date-times without a zone) are read in the viewer''s time zone.';

-- app.is_conversation_member: supabase/schemas/50_chat.sql
COMMENT ON FUNCTION "app"."is_conversation_member"(uuid, uuid) IS 'Whether a member takes part in a conversation. Security definer so policies (ours and realtime.messages'') can ask without recursing. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.message_json: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."message_json"(app.messages) IS 'A message as the API renders it for the current viewer (app.messages_text of its id, URLs in place; null when the viewer may not see it), for the answers that hold one message: a sent one, a conversation''s last. The realtime message.created event renders it for the recipient with app.message_json_as (same shape). PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.message_json_as: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."message_json_as"(app.messages, uuid) IS 'A message as viewer_id sees it: the shape of app.message_json (keep the two equal; test/render-privacy.test.ts compares a broadcast with the recipient''s GET), with every user rendered for viewer_id rather than for whoever runs the statement. Used by the message.created broadcast, rendered for the recipient. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.my_unread_conversations: supabase/schemas/50_chat.sql
COMMENT ON FUNCTION "app"."my_unread_conversations"() IS 'The requesting member''s unread conversation count. Members call this; app.unread_conversations (any member) is for the triggers, which run as their owner. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.my_unread_notifications: supabase/schemas/90_notifications.sql
COMMENT ON FUNCTION "app"."my_unread_notifications"() IS 'The member''s unread notifications (unread_count, the badge): counted on a partial index of unread rows, so no counter has to be kept exact through cascading deletes. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.projects_json: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."projects_json"(uuid[]) IS 'app.projects_text as jsonb, URLs in place, for the renderers that still build jsonb. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.reaction_json: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."reaction_json"(app.reactions) IS 'A reaction as the API renders it, with its reactor as the current viewer sees them (app.reaction_text). PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.refresh_streak: supabase/schemas/30_todos.sql
COMMENT ON FUNCTION "app"."refresh_streak"(uuid) IS 'Recomputes a member''s runs of consecutive covered days (a todo or a used freeze) from their history: an index-only walk over one member''s days. Called only when a day becomes covered or uncovered, so reading a streak never touches history. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.resolve_comment: supabase/schemas/40_social.sql
COMMENT ON FUNCTION "app"."resolve_comment"(text) IS 'The comment named by a comm_ id, as far as the viewer may see it; a row of nulls otherwise (callers test its id, as for app.resolve_todo). PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.todo_json: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."todo_json"(app.todos, boolean) IS 'A todo as the API renders it for the current viewer: app.todos_json of its id (null when the viewer may not see it). Called after the statement that wrote it, so it renders the stored row. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.todos_json: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."todos_json"(uuid[], boolean) IS 'app.todos_text as jsonb, URLs in place: for writes that keep the rendering (the webhook outbox, the created todo) rather than send it. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.unread_conversations: supabase/schemas/50_chat.sql
COMMENT ON FUNCTION "app"."unread_conversations"(uuid) IS 'How many of a member''s conversations have unread messages (the badge): an index count. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.user_json: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."user_json"(app.users) IS 'A user as the API renders it for the current viewer (app.user_json_body), for callers holding one row, e.g. the row an update just returned. Sets of users: app.users_json. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.user_json_as: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."user_json_as"(app.users, uuid) IS 'A user as viewer_id sees them (app.user_json_body), whoever runs the statement: for payloads rendered in one member''s transaction and delivered to another (realtime broadcasts), which must not be rendered for the writer. dismissed_time_zone only when viewer_id is the user. follow_requested reads app.user_follow_requests under the runner''s policy (requests are visible to the requester and the member asked): right for the two participants of a conversation, the only users these payloads name. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.user_topic: supabase/schemas/50_chat.sql
COMMENT ON FUNCTION "app"."user_topic"(uuid) IS 'Inlined (no SET clause, no table access). The Realtime topic of a member''s inbox: user:<user id as the API shows it>.';

-- app.users_json: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."users_json"(uuid[]) IS 'app.users_text as jsonb, URLs in place, for the renderers that still build jsonb (the user search and follower lists). PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.webhook_id: supabase/schemas/80_webhooks.sql
COMMENT ON FUNCTION "app"."webhook_id"(uuid, uuid) IS 'Inlined (no SET clause, no table access). The webhook-id header of a delivery (Standard Webhooks: the same on every retry, so receivers deduplicate on it), derived from its key; the operator CLI shows it as the delivery''s id.';

-- app.webhook_subscription_json: supabase/schemas/80_webhooks.sql
COMMENT ON FUNCTION "app"."webhook_subscription_json"(app.webhook_subscriptions) IS 'A WebhookSubscription as the API renders it (SPEC fields plus `active`). Never the secret: that is added to the create response only. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.withdraw_notifications: supabase/schemas/90_notifications.sql
COMMENT ON FUNCTION "app"."withdraw_notifications"(uuid, text, uuid, uuid) IS 'A cause was withdrawn (an un-like, an unfollow, a request withdrawn or answered, a mention edited away): its unread notifications (of one recipient, or of all when recipient is null) leave the lists and counts. Hidden, not deleted, so the cause coming back shows the same row without a second push. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
