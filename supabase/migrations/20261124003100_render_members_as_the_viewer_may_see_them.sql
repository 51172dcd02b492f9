-- Security (issue 11, item 7): every member rendered as the viewer may see them, in every
-- payload that reaches someone else.
--
-- 1. expand=reactions showed a private member as the reactor to everyone (their comments were
--    hidden, their likes were not). A like is its reactor's activity, so it is now shown where
--    their comment would be: to the todo's owner, to the reactor, and to whoever may see the
--    reactor's content (public: everyone; protected: followers; private: nobody else). The
--    preview shows the newest 5 reactions the viewer may see; reactions_count still counts all.
--    Written out on each candidate reaction (no lookup when the viewer owns the todo or the
--    reaction, else the reactor's row, and a follow only for a protected one), not as a definer
--    call per row: see docs/performance.md.
-- 2. Realtime payloads were rendered in the writer's transaction, so the sender was rendered as
--    on their own record: the recipient received the sender's dismissed_time_zone (and follow
--    flags that meant nothing to them). A conversation payload reaches both participants on one
--    topic; each User in it is now rendered as the *other* participant sees them: message.created
--    is the Message as the recipient sees it (creator: following = the recipient follows the
--    sender, follows_you = the sender follows the recipient; never dismissed_time_zone), and
--    reaction.created / reaction.deleted render the reacting member as the other participant
--    sees them. conversation.read, conversation.created and inbox.updated carry ids, times and
--    counts only.

create or replace function app.todos_json(ids uuid[], expand_reactions boolean)
returns jsonb
language plpgsql
stable
security definer
set search_path = ''
set plan_cache_mode = force_generic_plan
as $$
declare
  viewer_id uuid := auth.uid();
  base_url text := app.public_url();
begin
  return (
    with visible_authors as materialized (
      select a.user_id from (select distinct t.user_id from app.todos t where t.id = any (ids)) a
      where app.can_see_member_content(a.user_id, viewer_id)
    ), page as materialized (
      select t.*, o.n from unnest(ids) with ordinality o(id, n)
      join app.todos t on t.id = o.id
      where t.user_id in (select va.user_id from visible_authors va)
    ), shown_reactions as materialized (
      select (l.r).todo_id, (l.r).user_id, (l.r).created_at, (l.r).id, l.r as reaction
      from page pt cross join lateral (
        -- The newest 5 reactions the viewer may see: a reactor's like is their activity, shown
        -- where their comment would be (app.can_see_comment's rule, written out on the row).
        -- The owner's and the reactor's own cases need no lookup (the bench's own-todos page).
        select r from app.reactions r
        where r.todo_id = pt.id
          and (pt.user_id = viewer_id or r.user_id = viewer_id or exists (
                 select 1 from app.users ru
                 where ru.id = r.user_id
                   and (ru.privacy = 'public'
                        or (ru.privacy = 'protected' and exists (
                              select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = ru.id)))))
        order by r.created_at desc, r.id desc limit 5) l(r)
      where expand_reactions
    ), people as materialized (
      select pe.id, pe.body from app.users_json(array(
        select pt.user_id from page pt union select r.user_id from shown_reactions r)) pe
    ), owning as materialized (
      select op.id, op.body from app.projects_json(array(
        select distinct pt.project_id from page pt where pt.project_id is not null)) op
    ), attachments as materialized (
      select a.todo_id, jsonb_agg(app.attachment_json(a) order by a.attached_at, a.id) as body
      from app.uploads a where a.todo_id in (select pt.id from page pt) group by a.todo_id
    ), project_mentions as materialized (
      select m.todo_id, jsonb_agg(app.mentioned_project_json_body(p, base_url) order by m.position) as body
      from app.todo_project_mentions m join app.projects p on p.id = m.project_id
      where m.todo_id in (select pt.id from page pt) and app.can_see_project(p.id, p.privacy, viewer_id)
      group by m.todo_id
    ), user_mentions as materialized (
      select m.todo_id, jsonb_agg(app.mentioned_user_json_body(u, base_url) order by m.position) as body
      from app.todo_user_mentions m join app.users u on u.id = m.user_id
      where m.todo_id in (select pt.id from page pt) group by m.todo_id
    ), my_reactions as materialized (
      select r.todo_id, jsonb_agg(jsonb_build_object('id', app.to_public_id('reac', r.id)) order by r.created_at) as body
      from app.reactions r where r.todo_id in (select pt.id from page pt) and r.user_id = viewer_id group by r.todo_id
    ), my_comments as materialized (
      select c.todo_id, jsonb_agg(jsonb_build_object('id', app.to_public_id('comm', c.id)) order by c.created_at, c.id) as body
      from app.comments c where c.todo_id in (select pt.id from page pt) and c.user_id = viewer_id group by c.todo_id
    ), expanded as materialized (
      select r.todo_id, jsonb_agg(app.reaction_json_body(r.reaction, ru.body) order by r.created_at desc, r.id desc) as body
      from shown_reactions r join people ru on ru.id = r.user_id group by r.todo_id
    )
    select jsonb_agg(jsonb_build_object(
        'id', app.to_public_id('todo', t.id),
        'created_at', t.created_at,
        'updated_at', t.updated_at,
        'body', t.body,
        'url', base_url || '/todos/' || t.number,
        'attachments', coalesce(a.body, '[]'::jsonb),
        'creator', c.body,
        'creator_id', app.to_public_id('user', t.user_id),
        'user_id', app.to_public_id('user', t.user_id),
        'projects', case when op.body is null then '[]'::jsonb else jsonb_build_array(op.body) end,
        'mentioned_projects', coalesce(pm.body, '[]'::jsonb),
        'mentioned_users', coalesce(um.body, '[]'::jsonb),
        'reactions_count', t.reactions_count,
        'comments_count', t.comments_count,
        'viewer', jsonb_build_object('reactions', coalesce(mr.body, '[]'::jsonb), 'comments', coalesce(mc.body, '[]'::jsonb)))
      || case when expand_reactions then jsonb_build_object('reactions', coalesce(ex.body, '[]'::jsonb)) else '{}'::jsonb end
      order by t.n)
    from page t
    join people c on c.id = t.user_id
    left join owning op on op.id = t.project_id
    left join attachments a on a.todo_id = t.id
    left join project_mentions pm on pm.todo_id = t.id
    left join user_mentions um on um.todo_id = t.id
    left join my_reactions mr on mr.todo_id = t.id
    left join my_comments mc on mc.todo_id = t.id
    left join expanded ex on ex.todo_id = t.id);
end;
$$;

comment on function app.todos_json(uuid[], boolean) is
  'The todos with these ids that the current viewer may see, as the API renders them, in the order of ids (a JSON array; null when none): creators, reactors, owning projects, mentions, attachments, the viewer''s reactions and comments and (expand_reactions) the newest 5 reactions the viewer may see, each read once for the whole set. A reaction is its reactor''s activity: shown to the todo''s owner, the reactor, and whoever may see the reactor''s content (app.can_see_comment''s rule: public everyone, protected followers, private nobody else); reactions_count still counts every reaction. Security definer so related rows are not filtered by a policy per row: visibility is app.can_see_member_content per distinct author (the function the todos policy calls), the reactor rule on each candidate reaction (a primary-key lookup of its reactor unless the viewer owns the todo or the reaction, no function call) and app.can_see_project for projects; mentions and attachments are visible with their todo, and the viewer''s own comments on a visible todo are visible to them (app.can_see_comment). Acts only for auth.uid().';

-- ============================================================================
-- Realtime: users as the other participant sees them
-- ============================================================================

create function app.user_json_as(u app.users, viewer_id uuid)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select app.user_json_body(u, (now() at time zone u.time_zone)::date, viewer_id, app.public_url(),
    exists (select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = u.id),
    exists (select 1 from app.user_follows f where f.follower_id = u.id and f.followee_id = viewer_id))
$$;
comment on function app.user_json_as(app.users, uuid) is
  'A user as viewer_id sees them (app.user_json_body), whoever runs the statement: for payloads rendered in one member''s transaction and delivered to another (realtime broadcasts), which must not be rendered for the writer. dismissed_time_zone only when viewer_id is the user.';
grant execute on function app.user_json_as(app.users, uuid) to authenticated, service_role;

create function app.message_json_as(m app.messages, viewer_id uuid)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
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
        'mime_type', a.content_type,
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
      from app.message_reactions r where r.message_id = m.id), '[]'::jsonb))
$$;
comment on function app.message_json_as(app.messages, uuid) is
  'A message as viewer_id sees it: the shape of app.message_json (keep the two equal; test/render-privacy.test.ts compares a broadcast with the recipient''s GET), with every user rendered for viewer_id rather than for whoever runs the statement. Used by the message.created broadcast, rendered for the recipient.';
grant execute on function app.message_json_as(app.messages, uuid) to authenticated, service_role;

create or replace function app.tg_messages__deliver()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  other uuid;
begin
  update app.conversations c set last_message_at = new.created_at where c.id = new.conversation_id;
  update app.conversation_members m
     set last_message_at = new.created_at,
         unread = (m.user_id <> new.user_id),
         last_read_at = case when m.user_id = new.user_id then new.created_at else m.last_read_at end
   where m.conversation_id = new.conversation_id;
  select m.user_id into other from app.conversation_members m
  where m.conversation_id = new.conversation_id and m.user_id <> new.user_id;

  -- Both participants receive this payload: it is the message as the recipient sees it, never
  -- as the sender sees their own record (dismissed_time_zone).
  perform realtime.send(app.message_json_as(new, other), 'message.created', app.conversation_topic(new.conversation_id), true);
  perform realtime.send(
    jsonb_build_object('conversation_id', app.to_public_id('conversation', new.conversation_id),
                       'message_id', app.to_public_id('message', new.id),
                       'unread_count', app.unread_conversations(other)),
    'inbox.updated', app.user_topic(other), true);
  return null;
end;
$$;
comment on function app.tg_messages__deliver() is
  'After a message: moves the conversation to the top of both inboxes, marks it unread for the recipient (read for the sender), and broadcasts message.created (the Message as the recipient sees it: app.message_json_as, so the sender''s own-record fields never reach the recipient) to the conversation topic and inbox.updated (unread count) to the recipient''s topic. realtime.send never fails the write.';

create or replace function app.tg_message_reactions__broadcast()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  changed app.message_reactions := case when tg_op = 'INSERT' then new else old end;
  conversation uuid := (select m.conversation_id from app.messages m where m.id = changed.message_id);
  other uuid;
begin
  if conversation is not null then
    select cm.other_user_id into other from app.conversation_members cm
    where cm.conversation_id = conversation and cm.user_id = changed.user_id;
    perform realtime.send(
      jsonb_build_object(
        'message_id', app.to_public_id('message', changed.message_id),
        'conversation_id', app.to_public_id('conversation', conversation),
        'content', changed.content,
        'created_at', changed.created_at,
        'user', (select app.user_json_as(u, other) from app.users u where u.id = changed.user_id)),
      case when tg_op = 'INSERT' then 'reaction.created' else 'reaction.deleted' end,
      app.conversation_topic(conversation), true);
  end if;
  return null;
end;
$$;
comment on function app.tg_message_reactions__broadcast() is
  'Broadcasts reaction.created / reaction.deleted to the conversation topic, with the reacting member rendered as the other participant sees them (app.user_json_as), never as their own record.';

revoke execute on all functions in schema app, api from public;
