-- Direct messages: conversations between two members, messages (idempotent by client id),
-- message reactions, the caps on unanswered conversations, and realtime delivery: triggers
-- broadcast to private Realtime channels, and RLS on realtime.messages decides who may listen.

-- ============================================================================
-- Tables
-- ============================================================================
create table app.conversations (
  id uuid primary key default gen_random_uuid(),
  user_low uuid not null references app.users (id) on delete cascade,
  user_high uuid not null references app.users (id) on delete cascade,
  started_by uuid not null references app.users (id) on delete cascade,
  last_message_at timestamptz,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint conversations_ordered_pair check (user_low < user_high),
  constraint conversations_pair_key unique (user_low, user_high)
);
comment on table app.conversations is 'A direct conversation between two members. The pair is stored ordered (user_low < user_high) and unique, so two members have one conversation however often either opens it.';
create index conversations_user_high_idx on app.conversations (user_high);
create index conversations_started_by_idx on app.conversations (started_by);

create trigger _100_set_updated_at before update on app.conversations
  for each row execute function app.tg__set_updated_at();

create table app.conversation_members (
  conversation_id uuid not null references app.conversations (id) on delete cascade,
  user_id uuid not null references app.users (id) on delete cascade,
  other_user_id uuid not null references app.users (id) on delete cascade,
  last_message_at timestamptz,
  last_read_at timestamptz,
  unread boolean not null default false,
  primary key (conversation_id, user_id)
);
comment on table app.conversation_members is 'A member''s side of a conversation: its place in their inbox (last_message_at, copied from the conversation) and whether it has messages they have not read. Membership is what RLS and Realtime authorization check.';
comment on column app.conversation_members.unread is 'True when the other participant wrote after this member last read; kept by triggers, so the unread count is an index count.';
-- The inbox: a member's conversations with messages, by latest activity.
create index conversation_members_inbox_idx on app.conversation_members (user_id, last_message_at desc, conversation_id desc)
  where last_message_at is not null;
create index conversation_members_other_user_id_idx on app.conversation_members (other_user_id);

create table app.messages (
  id uuid primary key default gen_random_uuid(),
  conversation_id uuid not null references app.conversations (id) on delete cascade,
  user_id uuid not null references app.users (id) on delete cascade,
  body text not null default '' check (length(body) <= 10000),
  client_message_id uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint messages_client_message_id_key unique (conversation_id, user_id, client_message_id)
);
comment on table app.messages is 'A direct message. client_message_id (a client UUID) makes a send idempotent: the unique constraint, not a lookup, so concurrent resends create one message.';
create index messages_conversation_id_created_at_idx on app.messages (conversation_id, created_at desc, id desc);
-- "Has the other participant answered?" and the caps count a sender's messages per conversation.
create index messages_user_id_conversation_id_idx on app.messages (user_id, conversation_id, created_at);

alter table app.uploads add column message_id uuid references app.messages (id) on delete cascade;
create index uploads_message_id_idx on app.uploads (message_id) where message_id is not null;
alter table app.uploads drop constraint uploads_one_target;
alter table app.uploads add constraint uploads_one_target check (num_nonnulls(todo_id, comment_id, message_id) <= 1);
alter table app.uploads drop constraint uploads_attached_has_time;
alter table app.uploads add constraint uploads_attached_has_time
  check ((todo_id is null and comment_id is null and message_id is null) = (attached_at is null));

create table app.message_reactions (
  message_id uuid not null references app.messages (id) on delete cascade,
  user_id uuid not null references app.users (id) on delete cascade,
  content text not null check (content in ('👍', '❤️', '😂', '🔥', '🙏')),
  created_at timestamptz not null default now(),
  primary key (message_id, user_id, content)
);
comment on table app.message_reactions is 'Quick-set emoji reactions on messages: one of each emoji per member and message (the primary key), so re-reacting is a no-op.';
create index message_reactions_user_id_idx on app.message_reactions (user_id);

-- ============================================================================
-- Helpers
-- ============================================================================
create function app.is_conversation_member(conversation_id uuid, user_id uuid)
returns boolean
language sql
stable
security definer
set search_path = ''
as $$
  select exists (
    select 1 from app.conversation_members m
    where m.conversation_id = is_conversation_member.conversation_id and m.user_id = is_conversation_member.user_id)
$$;
comment on function app.is_conversation_member(uuid, uuid) is 'Whether a member takes part in a conversation. Security definer so policies (ours and realtime.messages'') can ask without recursing.';
grant execute on function app.is_conversation_member(uuid, uuid) to authenticated, service_role;

create function app.can_chat()
returns boolean
language sql
stable
set search_path = ''
as $$
  select coalesce((app.claims() ->> 'chat')::boolean, false) and coalesce(app.claims() -> 'scopes' ? 'chat', false)
$$;
comment on function app.can_chat() is 'Whether this request''s credential is an OAuth token with scope chat from an approved app (as app.authenticate resolved it). Chat tables check it too, so no other credential reaches messages even through a buggy function.';
grant execute on function app.can_chat() to authenticated, service_role;

create function app.conversation_topic(conversation_id uuid)
returns text
language sql
immutable
parallel safe
set search_path = ''
as $$
  select 'conversation:' || app.to_public_id('conversation', conversation_id)
$$;
comment on function app.conversation_topic(uuid) is 'The Realtime topic of a conversation: conversation:<conversation id as the API shows it>, the channel name clients subscribe to.';
grant execute on function app.conversation_topic(uuid) to authenticated, service_role;

create function app.user_topic(user_id uuid)
returns text
language sql
immutable
parallel safe
set search_path = ''
as $$
  select 'user:' || app.to_public_id('user', user_id)
$$;
comment on function app.user_topic(uuid) is 'The Realtime topic of a member''s inbox: user:<user id as the API shows it>.';
grant execute on function app.user_topic(uuid) to authenticated, service_role;

create function app.unread_conversations(member_id uuid)
returns bigint
language sql
stable
security definer
set search_path = ''
as $$
  select count(*) from app.conversation_members m
  where m.user_id = member_id and m.unread and m.last_message_at is not null
$$;
comment on function app.unread_conversations(uuid) is 'How many of a member''s conversations have unread messages (the badge): an index count.';
grant execute on function app.unread_conversations(uuid) to authenticated, service_role;

-- ============================================================================
-- Rendering
-- ============================================================================
create function app.message_json(m app.messages)
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
    'creator', (select app.user_json(u) from app.users u where u.id = m.user_id),
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
        'user', (select app.user_json(u) from app.users u where u.id = r.user_id)) order by r.created_at, r.content)
      from app.message_reactions r where r.message_id = m.id), '[]'::jsonb))
$$;
comment on function app.message_json(app.messages) is 'A message as the API (and its realtime message.created event) renders it.';
grant execute on function app.message_json(app.messages) to authenticated, service_role;

create function app.conversation_json(c app.conversations)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'id', app.to_public_id('conversation', c.id),
    'created_at', c.created_at,
    'updated_at', c.updated_at,
    'unread', coalesce(m.unread, false),
    'user', (select app.user_json(u) from app.users u where u.id = m.other_user_id),
    'last_message', (
      select app.message_json(last)
      from app.messages last where last.conversation_id = c.id
      order by last.created_at desc, last.id desc limit 1))
  from app.conversation_members m
  where m.conversation_id = c.id and m.user_id = (select auth.uid())
$$;
comment on function app.conversation_json(app.conversations) is 'A conversation as the current participant sees it: the other participant as `user`, unread from their side, the latest message.';
grant execute on function app.conversation_json(app.conversations) to authenticated;

-- ============================================================================
-- Triggers: inbox bookkeeping and realtime broadcasts
-- ============================================================================
create function app.tg_messages__deliver()
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

  perform realtime.send(app.message_json(new), 'message.created', app.conversation_topic(new.conversation_id), true);
  perform realtime.send(
    jsonb_build_object('conversation_id', app.to_public_id('conversation', new.conversation_id),
                       'message_id', app.to_public_id('message', new.id),
                       'unread_count', app.unread_conversations(other)),
    'inbox.updated', app.user_topic(other), true);
  return null;
end;
$$;
comment on function app.tg_messages__deliver() is
  'After a message: moves the conversation to the top of both inboxes, marks it unread for the recipient (read for the sender), and broadcasts message.created (the rendered Message) to the conversation topic and inbox.updated (unread count) to the recipient''s topic. realtime.send never fails the write.';
create trigger _100_deliver after insert on app.messages
  for each row execute function app.tg_messages__deliver();

create function app.tg_message_reactions__broadcast()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  changed app.message_reactions := case when tg_op = 'INSERT' then new else old end;
  conversation uuid := (select m.conversation_id from app.messages m where m.id = changed.message_id);
begin
  if conversation is not null then
    perform realtime.send(
      jsonb_build_object(
        'message_id', app.to_public_id('message', changed.message_id),
        'conversation_id', app.to_public_id('conversation', conversation),
        'content', changed.content,
        'created_at', changed.created_at,
        'user', (select app.user_json(u) from app.users u where u.id = changed.user_id)),
      case when tg_op = 'INSERT' then 'reaction.created' else 'reaction.deleted' end,
      app.conversation_topic(conversation), true);
  end if;
  return null;
end;
$$;
comment on function app.tg_message_reactions__broadcast() is 'Broadcasts reaction.created / reaction.deleted to the conversation topic.';
create trigger _100_broadcast after insert or delete on app.message_reactions
  for each row execute function app.tg_message_reactions__broadcast();

create function app.tg_conversation_members__read_receipt()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  perform realtime.send(
    jsonb_build_object('conversation_id', app.to_public_id('conversation', new.conversation_id),
                       'user_id', app.to_public_id('user', new.user_id),
                       'read_at', new.last_read_at),
    'conversation.read', app.conversation_topic(new.conversation_id), true);
  perform realtime.send(
    jsonb_build_object('conversation_id', app.to_public_id('conversation', new.conversation_id),
                       'unread_count', app.unread_conversations(new.user_id)),
    'inbox.updated', app.user_topic(new.user_id), true);
  return null;
end;
$$;
comment on function app.tg_conversation_members__read_receipt() is 'When a member reads a conversation that had unread messages: a read receipt (conversation.read) to the conversation topic and the new unread count to their inbox topic.';
create trigger _100_read_receipt after update of unread on app.conversation_members
  for each row when (old.unread and not new.unread)
  execute function app.tg_conversation_members__read_receipt();

-- ============================================================================
-- Row-level security
-- ============================================================================
alter table app.conversations enable row level security;
alter table app.conversation_members enable row level security;
alter table app.messages enable row level security;
alter table app.message_reactions enable row level security;

create policy "Participants see their conversations with a chat token" on app.conversations
  for select to authenticated
  using ((select app.can_chat()) and app.is_conversation_member(id, (select auth.uid())));
grant select on app.conversations to authenticated;

create policy "Participants see both sides of their conversations" on app.conversation_members
  for select to authenticated
  using ((select app.can_chat()) and app.is_conversation_member(conversation_id, (select auth.uid())));
create policy "Participants mark their own side read" on app.conversation_members
  for update to authenticated
  using (user_id = (select auth.uid()) and (select app.can_chat()))
  with check (user_id = (select auth.uid()));
grant select on app.conversation_members to authenticated;
grant update (unread, last_read_at) on app.conversation_members to authenticated;

create policy "Participants read the messages of their conversations" on app.messages
  for select to authenticated
  using ((select app.can_chat()) and app.is_conversation_member(conversation_id, (select auth.uid())));
-- Scope chat alone grants sending (SPEC: "read and send direct messages"); write is for todos.
create policy "Participants write in their own name" on app.messages
  for insert to authenticated
  with check (user_id = (select auth.uid()) and (select app.can_chat())
              and app.is_conversation_member(conversation_id, (select auth.uid())));
grant select on app.messages to authenticated;
grant insert (conversation_id, user_id, body, client_message_id) on app.messages to authenticated;

create policy "Participants see reactions in their conversations" on app.message_reactions
  for select to authenticated
  using ((select app.can_chat()) and exists (select 1 from app.messages m where m.id = message_id));
create policy "Participants react in their own name" on app.message_reactions
  for insert to authenticated
  with check (user_id = (select auth.uid()) and (select app.can_chat()) and exists (select 1 from app.messages m where m.id = message_id));
create policy "Participants withdraw their own reactions" on app.message_reactions
  for delete to authenticated
  using (user_id = (select auth.uid()) and (select app.can_chat()));
grant select, insert (message_id, user_id, content), delete on app.message_reactions to authenticated;

-- ============================================================================
-- Realtime authorization: who may join which private channel
-- ============================================================================
create function app.realtime_may_join(topic text)
returns boolean
language plpgsql
stable
security definer
set search_path = ''
as $$
declare
  claims jsonb := coalesce(auth.jwt(), '{}'::jsonb);
  member_id uuid;
begin
  -- The connection's token must be one of our OAuth access tokens, still valid, with scope
  -- chat, from an app approved for chat: checked against the database, not just the JWT.
  select t.user_id into member_id
  from app.oauth_tokens t join app.oauth_clients c on c.id = t.client_id
  where coalesce(claims ->> 'jti', '') ~ '^[0-9a-f-]{36}$'
    and t.jti = (claims ->> 'jti')::uuid
    and t.user_id::text = claims ->> 'sub'
    and t.revoked_at is null and t.expires_at > now()
    and 'chat' = any (t.scopes) and c.chat_enabled;
  if member_id is null or topic is null then
    return false;
  end if;
  if topic like 'conversation:conversation\_%' then
    return app.is_conversation_member(app.from_public_id('conversation', substr(topic, length('conversation:') + 1)), member_id);
  end if;
  return topic = app.user_topic(member_id);
end;
$$;
comment on function app.realtime_may_join(text) is
  'Whether the Realtime connection (its JWT claims) may use a topic: a valid, unrevoked OAuth token with scope chat from a chat-approved app, and then a participant for conversation:<id> or the member themself for user:<id>. Security definer: tokens and memberships are not readable by members.';
grant execute on function app.realtime_may_join(text) to authenticated;

create policy "Participants with a chat token receive their conversations' and inbox broadcasts" on realtime.messages
  for select to authenticated
  using (realtime.messages.extension = 'broadcast' and (select app.realtime_may_join(realtime.topic())));

create policy "Participants with a chat token may broadcast (typing) in their conversations" on realtime.messages
  for insert to authenticated
  with check (realtime.messages.extension = 'broadcast'
              and (select realtime.topic()) like 'conversation:%'
              and (select app.realtime_may_join(realtime.topic())));

revoke execute on all functions in schema app, api from public;
