-- Chat: conversations, messages, reactions, read receipts, realtime broadcasts.
--
-- Direct conversations between two members. Messages are broadcast by triggers through
-- realtime.send to private topics; the policies on realtime.messages at the end of the
-- row-level security section decide who may join and send.

-- Function bodies are not checked here: they call functions of later files (the renderers
-- of 70_rendering.sql) and sections. They are the bodies the migrations created and checked,
-- as test/schema.test.ts proves.
set check_function_bodies = off;

-- ============================================================================
-- Tables
-- ============================================================================
create table app.conversations (
  id              uuid primary key default gen_random_uuid(),
  user_low        uuid not null references app.users(id) on delete cascade,
  user_high       uuid not null references app.users(id) on delete cascade,
  started_by      uuid not null references app.users(id) on delete cascade,
  last_message_at timestamptz,
  created_at      timestamptz not null default now(),
  updated_at      timestamptz not null default now(),
  messages_count  integer not null default 0 check (messages_count >= 0),
  constraint conversations_ordered_pair check (user_low < user_high),
  constraint conversations_pair_key unique (user_low, user_high)
);
comment on table app.conversations is
  'A direct conversation between two members. The pair is stored ordered (user_low < user_high) and unique, so two members have one conversation however often either opens it.';
comment on column app.conversations.messages_count is
  'How many messages the conversation holds: the total_count of GET /v1/conversations/{id}/messages. Counted up by app.tg_messages__count and down by app.tg_messages__uncount, per statement, in the statement that writes the messages; a count of the messages at every page grew with them (13.7 ms a page at 10,000 messages: every row passed the messages policy; 1.0 ms with the counter).';
create index conversations_user_high_idx on app.conversations (user_high);
create index conversations_started_by_idx on app.conversations (started_by);

create table app.conversation_members (
  conversation_id uuid references app.conversations(id) on delete cascade,
  user_id         uuid references app.users(id) on delete cascade,
  other_user_id   uuid not null references app.users(id) on delete cascade,
  last_message_at timestamptz,
  last_read_at    timestamptz,
  unread          boolean not null default false,
  constraint conversation_members_pkey primary key (conversation_id, user_id)
);
comment on table app.conversation_members is
  'A member''s side of a conversation: its place in their inbox (last_message_at, copied from the conversation) and whether it has messages they have not read. Membership is what RLS and Realtime authorization check.';
comment on column app.conversation_members.unread is
  'True when the other participant wrote after this member last read; kept by triggers, so the unread count is an index count.';
-- The inbox: a member's conversations with messages, by latest activity.
create index conversation_members_inbox_idx on app.conversation_members (user_id, last_message_at desc, conversation_id desc) where (last_message_at is not null);
create index conversation_members_other_user_id_idx on app.conversation_members (other_user_id);

create table app.messages (
  id                uuid primary key default gen_random_uuid(),
  conversation_id   uuid not null references app.conversations(id) on delete cascade,
  user_id           uuid not null references app.users(id) on delete cascade,
  body              text not null default '' check (length(body) <= 10000),
  client_message_id uuid,
  created_at        timestamptz not null default now(),
  updated_at        timestamptz not null default now(),
  constraint messages_client_message_id_key unique (conversation_id, user_id, client_message_id)
);
comment on table app.messages is
  'A direct message. client_message_id (a client UUID) makes a send idempotent: the unique constraint, not a lookup, so concurrent resends create one message.';
create index messages_conversation_id_created_at_idx on app.messages (conversation_id, created_at desc, id desc);
-- "Has the other participant answered?" and the caps count a sender's messages per conversation.
create index messages_user_id_conversation_id_idx on app.messages (user_id, conversation_id, created_at);

create table app.message_reactions (
  message_id uuid references app.messages(id) on delete cascade,
  user_id    uuid references app.users(id) on delete cascade,
  content    text check (content = any (array['👍', '❤️', '😂', '🔥', '🙏'])),
  created_at timestamptz not null default now(),
  constraint message_reactions_pkey primary key (message_id, user_id, content)
);
comment on table app.message_reactions is
  'Quick-set emoji reactions on messages: one of each emoji per member and message (the primary key), so re-reacting is a no-op.';
create index message_reactions_user_id_idx on app.message_reactions (user_id);

-- ============================================================================
-- Helpers
-- ============================================================================
create function app.is_conversation_member(conversation_id uuid, user_id uuid)
returns boolean
language plpgsql
stable
security definer
set search_path = ''
as $$
begin
  return (select exists (
    select 1 from app.conversation_members m
    where m.conversation_id = is_conversation_member.conversation_id and m.user_id = is_conversation_member.user_id));
end;
$$;
comment on function app.is_conversation_member(uuid, uuid) is
  'Whether a member takes part in a conversation. Security definer so policies (ours and realtime.messages'') can ask without recursing. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.is_conversation_member(uuid, uuid) to authenticated, service_role;

create function app.can_chat()
returns boolean
language sql
stable
as $$
  select coalesce((app.claims() ->> 'chat')::boolean, false) and coalesce(app.claims() -> 'scopes' ? 'chat', false)
$$;
comment on function app.can_chat() is
  'Inlined (no SET clause, no table access). Whether this request''s credential is an OAuth token with scope chat from an approved app (as app.authenticate resolved it). Chat tables check it too, so no other credential reaches messages even through a buggy function.';
grant execute on function app.can_chat() to authenticated, service_role;

create function app.conversation_topic(conversation_id uuid)
returns text
language sql
immutable
parallel safe
as $$
  select 'conversation:' || app.to_public_id('conversation', conversation_id)
$$;
comment on function app.conversation_topic(uuid) is
  'Inlined (no SET clause, no table access). The Realtime topic of a conversation: conversation:<conversation id as the API shows it>, the channel name clients subscribe to.';
grant execute on function app.conversation_topic(uuid) to authenticated, service_role;

create function app.user_topic(user_id uuid)
returns text
language sql
immutable
parallel safe
as $$
  select 'user:' || app.to_public_id('user', user_id)
$$;
comment on function app.user_topic(uuid) is
  'Inlined (no SET clause, no table access). The Realtime topic of a member''s inbox: user:<user id as the API shows it>.';
grant execute on function app.user_topic(uuid) to authenticated, service_role;

create function app.unread_conversations(member_id uuid)
returns bigint
language plpgsql
stable
security definer
set search_path = ''
as $$
begin
  return (select count(*) from app.conversation_members m
  where m.user_id = member_id and m.unread and m.last_message_at is not null);
end;
$$;
comment on function app.unread_conversations(uuid) is
  'How many of a member''s conversations have unread messages (the badge): an index count. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.unread_conversations(uuid) to service_role;

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
  conversation_ref text;
begin
  -- The connection's token must be one of our OAuth access tokens, still valid, with scope
  -- chat, from an app approved for chat: checked against the database, not just the JWT.
  select t.user_id into member_id
  from app.oauth_tokens t join app.oauth_clients c on c.id = t.client_id
  where coalesce(claims ->> 'jti', '') ~ '^[0-9a-f-]{36}$'
    and t.jti = (claims ->> 'jti')::uuid
    and t.user_id = app.from_public_id('user', claims ->> 'sub')
    and t.revoked_at is null and t.expires_at > now()
    and 'chat' = any (t.scopes) and c.chat_enabled;
  if member_id is null or topic is null then
    return false;
  end if;
  if topic like 'conversation:conversation\_%' then
    -- conversation:<id> (the server's events) or conversation:<id>:typing (the participants').
    conversation_ref := substr(topic, length('conversation:') + 1);
    if conversation_ref like '%:typing' then
      conversation_ref := left(conversation_ref, -length(':typing'));
    end if;
    return app.is_conversation_member(app.from_public_id('conversation', conversation_ref), member_id);
  end if;
  return topic = app.user_topic(member_id);
end;
$$;
comment on function app.realtime_may_join(text) is
  'Whether the Realtime connection (its JWT claims) may read a topic: a valid, unrevoked OAuth token with scope chat from a chat-approved app, and then a participant for conversation:<id> and conversation:<id>:typing, or the member themself for user:<id>. Security definer: tokens and memberships are not readable by members.';
create function app.realtime_may_send(topic text)
returns boolean
language plpgsql
stable
security definer
set search_path = ''
as $$
begin
  -- Only the participants' own topic takes client writes; the server's topics never do, so
  -- nothing a client sends can pass for a message, a reaction or a read receipt.
  return topic ~ '^conversation:conversation_[0-9a-f]{32}:typing$' and app.realtime_may_join(topic);
end;
$$;
comment on function app.realtime_may_send(text) is
  'Whether the Realtime connection may broadcast on a topic: only conversation:<id>:typing, and only a participant with a chat token. Why a topic of its own: Supabase authorizes writes per topic, not per event, so a writable conversation:<id> would let a participant forge message.created. Security definer: as realtime_may_join.';
grant execute on function app.realtime_may_join(text), app.realtime_may_send(text) to api_client;

create function app.my_conversation(ref text)
returns app.conversations
language plpgsql
stable
set search_path = ''
as $$
declare
  found_conversation app.conversations;
begin
  select c.* into found_conversation from app.conversations c where c.id = app.from_public_id('conversation', ref);
  if found_conversation.id is null then
    -- Not found and not a participant look the same, so existence does not leak.
    perform app.http_error(404, format('No conversation matches %L.', ref));
  end if;
  return found_conversation;
end;
$$;
comment on function app.my_conversation(text) is
  'The viewer''s conversation named by ref; 404 when it does not exist or the viewer is not a participant (RLS hides it).';
grant execute on function app.my_conversation(text) to authenticated;

create function app.my_message(ref text)
returns app.messages
language plpgsql
stable
set search_path = ''
as $$
declare
  found_message app.messages;
begin
  select m.* into found_message from app.messages m where m.id = app.from_public_id('message', ref);
  if found_message.id is null then
    perform app.http_error(404, format('No message matches %L.', ref));
  end if;
  return found_message;
end;
$$;
comment on function app.my_message(text) is
  'A message of one of the viewer''s conversations; 404 otherwise.';
grant execute on function app.my_message(text) to authenticated;

create function app.open_conversation(me uuid, other uuid)
returns table(conversation_id uuid, created boolean)
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  low uuid := least(me, other);
  high uuid := greatest(me, other);
  found_id uuid;
begin
  if me is distinct from (select auth.uid()) then
    raise exception 'app.open_conversation: only for the requesting member' using errcode = '42501';
  end if;
  insert into app.conversations (user_low, user_high, started_by) values (low, high, me)
  on conflict (user_low, user_high) do nothing
  returning id into found_id;
  if found_id is not null then
    insert into app.conversation_members (conversation_id, user_id, other_user_id)
    values (found_id, me, other), (found_id, other, me);
    perform realtime.send(
      jsonb_build_object('conversation_id', app.to_public_id('conversation', found_id), 'user_id', app.to_public_id('user', me)),
      'conversation.created', app.user_topic(other), true);
    return query select found_id, true;
  else
    return query select c.id, false from app.conversations c where c.user_low = low and c.user_high = high;
  end if;
end;
$$;
comment on function app.open_conversation(uuid, uuid) is
  'The conversation of two members, created with both sides when missing (the unique pair makes concurrent opens agree on one). Announces a new one to the other member''s inbox topic. Security definer: members cannot write the other side.';
grant execute on function app.open_conversation(uuid, uuid) to authenticated;

create function app.my_unread_conversations()
returns bigint
language plpgsql
stable
security definer
set search_path = ''
as $$
begin
  return (select app.unread_conversations((select auth.uid())));
end;
$$;
comment on function app.my_unread_conversations() is
  'The requesting member''s unread conversation count. Members call this; app.unread_conversations (any member) is for the triggers, which run as their owner. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.my_unread_conversations() to authenticated;

create function app.check_message_caps(me uuid, target app.conversations)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  other uuid := case when target.user_low = me then target.user_high else target.user_low end;
  other_name text := (select u.username from app.users u where u.id = other);
  sent integer;
begin
  if me is distinct from (select auth.uid()) then
    raise exception 'app.check_message_caps: only for the requesting member' using errcode = '42501';
  end if;
  -- One sender at a time: concurrent sends of the same member are serialized here, so no
  -- two of them can both see room under a cap. (Transaction-scoped; released at commit.)
  perform pg_advisory_xact_lock(hashtext('app.messages caps'), hashtext(me::text));

  if exists (select 1 from app.messages m where m.conversation_id = target.id and m.user_id = other) then
    return;  -- answered: no caps
  end if;
  select count(*) into sent from app.messages m where m.conversation_id = target.id and m.user_id = me;
  if sent >= 3 then
    perform app.http_error(429, format('You can send at most 3 messages until %s answers.', other_name),
      jsonb_build_object('retry_after', 3600));
  end if;
  if not exists (select 1 from app.messages m
                 where m.conversation_id = target.id and m.user_id = me and m.created_at > now() - interval '24 hours')
     and (select count(distinct m.conversation_id)
          from app.messages m
          join app.conversation_members cm on cm.conversation_id = m.conversation_id and cm.user_id = me
          where m.user_id = me and m.created_at > now() - interval '24 hours'
            and not exists (select 1 from app.messages answer
                            where answer.conversation_id = m.conversation_id and answer.user_id = cm.other_user_id)) >= 5 then
    perform app.http_error(429, 'You can message at most 5 people who have not answered you within 24 hours.',
      jsonb_build_object('retry_after', 3600));
  end if;
end;
$$;
comment on function app.check_message_caps(uuid, app.conversations) is
  'The caps of SPEC section 8 for a conversation the other participant has not answered: at most 3 messages in it, and at most 5 such conversations messaged per 24 hours. Race-free: a transaction-scoped advisory lock per sender serializes their concurrent sends, and each count runs after the lock with a fresh snapshot.';
grant execute on function app.check_message_caps(uuid, app.conversations) to authenticated;

-- ============================================================================
-- Row-level security and grants
-- ============================================================================
-- app.conversations
alter table app.conversations enable row level security;
create policy "Participants see their conversations with a chat token" on app.conversations
  for select to authenticated
  using ((select app.can_chat()) and app.is_conversation_member(id, (select auth.uid())));
grant select on app.conversations to authenticated;

-- app.conversation_members
alter table app.conversation_members enable row level security;
create policy "Participants mark their own side read" on app.conversation_members
  for update to authenticated
  using (user_id = (select auth.uid()) and (select app.can_chat()))
  with check (user_id = (select auth.uid()));
create policy "Participants see both sides of their conversations" on app.conversation_members
  for select to authenticated
  using ((select app.can_chat()) and app.is_conversation_member(conversation_id, (select auth.uid())));
grant select on app.conversation_members to authenticated;
grant update (last_read_at, unread) on app.conversation_members to authenticated;

-- app.messages
alter table app.messages enable row level security;
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

-- app.message_reactions
alter table app.message_reactions enable row level security;
create policy "Participants react in their own name" on app.message_reactions
  for insert to authenticated
  with check (user_id = (select auth.uid()) and (select app.can_chat()) and exists (select 1 from app.messages m where m.id = message_id));
create policy "Participants see reactions in their conversations" on app.message_reactions
  for select to authenticated
  using ((select app.can_chat()) and exists (select 1 from app.messages m where m.id = message_id));
create policy "Participants withdraw their own reactions" on app.message_reactions
  for delete to authenticated
  using (user_id = (select auth.uid()) and (select app.can_chat()));
grant select, delete on app.message_reactions to authenticated;
grant insert (message_id, user_id, content) on app.message_reactions to authenticated;

-- realtime.messages: who may receive and send on our broadcast topics. The server publishes
-- on conversation:<id> and user:<id> (realtime.send in the triggers below); clients may write
-- only conversation:<id>:typing, because Supabase authorizes a write per topic, not per event
-- (a writable conversation:<id> let a participant forge message.created). Both policies are for
-- the token role api_client only, and require the row's own topic to be the channel's.
grant usage on schema realtime to api_client;
grant select, insert on realtime.messages to api_client;
grant execute on function realtime.topic() to api_client;
create policy "Participants with a chat token may broadcast on their conversations' typing topics only" on realtime.messages
  for insert to api_client
  with check (realtime.messages.extension = 'broadcast'
              and realtime.messages.topic = (select realtime.topic())
              and (select app.realtime_may_send(realtime.topic())));
create policy "Participants with a chat token receive their conversations' and inbox broadcasts" on realtime.messages
  for select to api_client
  using (realtime.messages.extension = 'broadcast'
         and realtime.messages.topic = (select realtime.topic())
         and (select app.realtime_may_join(realtime.topic())));

create function app.api_client_missing_privileges()
returns text[]
language plpgsql
stable
set search_path = ''
as $$
declare
  missing text[] := array[]::text[];
begin
  -- Each privilege on its own: has_table_privilege with a list is true when any one is held.
  if not has_schema_privilege('api_client', 'realtime', 'usage') then missing := missing || 'usage on schema realtime'::text; end if;
  if not has_table_privilege('api_client', 'realtime.messages', 'select') then missing := missing || 'select on realtime.messages'::text; end if;
  if not has_table_privilege('api_client', 'realtime.messages', 'insert') then missing := missing || 'insert on realtime.messages'::text; end if;
  if not has_function_privilege('api_client', 'realtime.topic()', 'execute') then missing := missing || 'execute on realtime.topic()'::text; end if;
  if not has_function_privilege('api_client', 'app.realtime_may_join(text)', 'execute')
     or not has_function_privilege('api_client', 'app.realtime_may_send(text)', 'execute') then
    missing := missing || 'execute on app.realtime_may_join(text) and app.realtime_may_send(text)'::text;
  end if;
  return missing;
end;
$$;
comment on function app.api_client_missing_privileges() is
  'What the token role api_client lacks of what the realtime.messages policies need (empty when nothing). Why: on Supabase the realtime schema belongs to the platform, and where postgres has no grant option there a grant only warns; chat joins then fail closed. The migration that grants them checks with it, and an operator can ask it after a deploy.';

-- ============================================================================
-- Triggers
-- ============================================================================
create function app.tg_messages__order()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  latest timestamptz;
begin
  -- The conversation's row stays locked until this message commits, so the sends of one
  -- conversation commit one at a time, and each is dated after the one before.
  select c.last_message_at into latest from app.conversations c where c.id = new.conversation_id for update;
  if latest is not null and new.created_at <= latest then
    new.created_at := latest + interval '1 microsecond';
    new.updated_at := greatest(new.updated_at, new.created_at);
  end if;
  return new;
end;
$$;
comment on function app.tg_messages__order() is
  'Before a message: takes its conversation''s row lock (held to commit) and dates the message after the conversation''s newest one. Why: created_at defaults to the transaction''s start, so of two concurrent sends the one that started first could commit last; the delivery trigger then moved last_message_at back to its older time (the inbox misordered) and its unread flag fell behind the other participant''s reply in the message order. Serialized, a conversation''s messages are ordered as they committed. Security definer: members cannot lock conversations.';

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
create constraint trigger _100_deliver after insert on app.messages
  deferrable initially deferred
  for each row execute function app.tg_messages__deliver();
create trigger _050_order before insert on app.messages
  for each row execute function app.tg_messages__order();

create function app.tg_messages__count()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  update app.conversations c set messages_count = c.messages_count + added.n
  from (select n.conversation_id, count(*)::integer as n from new_messages n group by n.conversation_id) added
  where c.id = added.conversation_id;
  return null;
end;
$$;
comment on function app.tg_messages__count() is
  'After messages are inserted: counts them into conversations.messages_count, one update per conversation for the statement, at once (not at commit, with the delivery): a read in the same transaction counts them, and a delete there counts out only what was counted in. Resends that ON CONFLICT DO NOTHING skipped are not in the statement''s new rows. The conversation''s row is already locked by app.tg_messages__order for the send.';
create trigger _060_count after insert on app.messages
  referencing new table as new_messages
  for each statement execute function app.tg_messages__count();

create function app.tg_messages__uncount()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  update app.conversations c set messages_count = c.messages_count - gone.n
  from (select o.conversation_id, count(*)::integer as n from old_messages o group by o.conversation_id) gone
  where c.id = gone.conversation_id;
  return null;
end;
$$;
comment on function app.tg_messages__uncount() is
  'After messages are deleted: counts them out of conversations.messages_count, one update per conversation for the whole statement. The API deletes no message; they go with their conversation (an account''s deletion), whose row is gone by then and matches nothing, or by an operator''s hand. Per statement, not per row: a conversation of 100,000 messages deleted whole pays one grouped update, not 100,000 lookups.';
create trigger _100_uncount after delete on app.messages
  referencing old table as old_messages
  for each statement execute function app.tg_messages__uncount();

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
comment on function app.tg_conversation_members__read_receipt() is
  'When a member reads a conversation that had unread messages: a read receipt (conversation.read) to the conversation topic and the new unread count to their inbox topic.';
create trigger _100_read_receipt after update of unread on app.conversation_members
  for each row when (old.unread and not new.unread)
  execute function app.tg_conversation_members__read_receipt();

create trigger _100_set_updated_at before update on app.conversations
  for each row execute function app.tg__set_updated_at();

-- ============================================================================
-- API functions
-- ============================================================================
create function api.conversation_open(user_ref text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  me uuid := (select auth.uid());
  other uuid := app.resolve_user(user_ref);
  opened record;
begin
  if coalesce(btrim(user_ref), '') = '' then
    perform app.http_error(400, 'user is required: the username or user_ ID to talk to.');
  elsif other is null then
    perform app.http_error(404, format('No user matches %L.', user_ref));
  elsif other = me then
    perform app.http_error(422, 'user: you cannot start a conversation with yourself.');
  end if;
  -- Open first, count after: only the request that made the conversation counts toward
  -- conversation_create, and past the limit its new rows roll back with the 429. Checking for the
  -- pair before opening counted every one of concurrent opens of one new conversation (all saw it
  -- missing), so the requests that only found it got 429.
  select * into opened from app.open_conversation(me, other);
  if opened.created then
    perform app.hit_rate_limit('conversation_create');
  end if;
  return jsonb_build_object(
    'status', case when opened.created then 201 else 200 end,
    'body', (select app.conversation_json(c) from app.conversations c where c.id = opened.conversation_id));
end;
$$;
comment on function api.conversation_open(text) is
  'POST /v1/conversations: 200 with the existing conversation, or 201 with a new empty one (rate-limited: conversation_create). 404 unknown user, 422 yourself.';
grant execute on function api.conversation_open(text) to authenticated;

create function api.conversation_get(conversation_ref text)
returns text
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select t.body from app.conversation_texts(array[(app.my_conversation(conversation_ref)).id]) t);
end;
$$;
comment on function api.conversation_get(text) is
  'GET /v1/conversations/{conversation_id}: 404 for non-participants, never 403 (app.my_conversation). JSON text with URL markers (app.conversation_texts; the HTTP layer puts the URLs in place).';
grant execute on function api.conversation_get(text) to authenticated;

create function api.conversations_list(unread_only boolean, page_limit integer, starting_after text)
returns text
language plpgsql
stable
set search_path = ''
as $$
declare
  me uuid := (select auth.uid());
  anchor app.conversation_members;
  page uuid[];
  has_more boolean;
begin
  if starting_after is not null then
    select m.* into anchor from app.conversation_members m
    where m.conversation_id = app.from_public_id('conversation', starting_after) and m.user_id = me;
    if anchor.conversation_id is null or anchor.last_message_at is null or (unread_only and not anchor.unread) then
      perform app.http_error(404, format('starting_after: %L is not a conversation of this list.', starting_after));
    end if;
  end if;
  page := array(
    select m.conversation_id from app.conversation_members m
    where m.user_id = me and m.last_message_at is not null
      and (not unread_only or m.unread)
      and (anchor.conversation_id is null or (m.last_message_at, m.conversation_id) < (anchor.last_message_at, anchor.conversation_id))
    order by m.last_message_at desc, m.conversation_id desc
    limit page_limit + 1);
  has_more := cardinality(page) > page_limit;
  page := page[1:page_limit];
  return app.page_envelope_text(
    (select '[' || string_agg(t.body, ',' order by t.n) || ']' from app.conversation_texts(page) t),
    has_more,
    (select count(*) from app.conversation_members m where m.user_id = me and m.last_message_at is not null and (not unread_only or m.unread)),
    app.to_public_id('conversation', page[cardinality(page)]),
    ',"unread_count":' || app.my_unread_conversations());
end;
$$;
comment on function api.conversations_list(boolean, integer, text) is
  'GET /v1/conversations, as JSON text with URL markers (app.conversation_texts): the viewer''s conversations with messages, latest activity first (index on the inbox), optionally only unread ones; unread_count counts across all pages. A cursor that is not in the list is 404.';
grant execute on function api.conversations_list(boolean, integer, text) to authenticated;

create function api.conversation_read(conversation_ref text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.conversations := app.my_conversation(conversation_ref);
  seen timestamptz;
begin
  perform app.hit_rate_limit('conversations_read');
  -- The newest message this read can answer for: the one its snapshot sees.
  select m.last_message_at into seen from app.conversation_members m
  where m.conversation_id = target.id and m.user_id = (select auth.uid());
  -- A message delivered since (its delivery holds this row until it commits, and the update then
  -- reads the row again) changed last_message_at: the row no longer matches, and stays unread.
  update app.conversation_members m set unread = false, last_read_at = greatest(now(), seen)
  where m.conversation_id = target.id and m.user_id = (select auth.uid())
    and m.last_message_at is not distinct from seen;
  return null;
end;
$$;
comment on function api.conversation_read(text) is
  'POST /v1/conversations/{conversation_id}/reading: marks it read (a read receipt goes to the conversation topic); rate-limited. Why in two statements: it marks read only up to the newest message its snapshot saw. Set to now() in one update, a message committed while the read waited for the row (the delivery holds it) was marked read too, though the reader never saw it; now such a message leaves the conversation unread. last_read_at is never before the newest message read (the transaction may have started before it was dated).';
grant execute on function api.conversation_read(text) to authenticated;

create function api.conversations_read_all()
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  seen_ids uuid[];
  seen_at timestamptz[];
begin
  perform app.hit_rate_limit('conversations_read');
  -- The unread conversations this read's snapshot sees, each with its newest message then.
  select coalesce(array_agg(m.conversation_id), '{}'), coalesce(array_agg(m.last_message_at), '{}')
    into seen_ids, seen_at
  from app.conversation_members m where m.user_id = (select auth.uid()) and m.unread;
  update app.conversation_members m set unread = false, last_read_at = greatest(now(), seen.last_message_at)
  from unnest(seen_ids, seen_at) as seen (conversation_id, last_message_at)
  where m.user_id = (select auth.uid()) and m.unread
    and m.conversation_id = seen.conversation_id and m.last_message_at is not distinct from seen.last_message_at;
  return null;
end;
$$;
comment on function api.conversations_read_all() is
  'POST /v1/conversations/reading: marks every conversation read, so the unread count is 0, up to the newest message of each that its snapshot saw (as api.conversation_read: a message delivered while the read waited for its row leaves that conversation unread); rate-limited.';
grant execute on function api.conversations_read_all() to authenticated;

create function api.messages_list(conversation_ref text, page_limit integer, starting_after text)
returns text
language plpgsql
stable
set search_path = ''
as $$
declare
  target app.conversations := app.my_conversation(conversation_ref);
  anchor app.messages;
  page uuid[];
  has_more boolean;
begin
  if starting_after is not null then
    select m.* into anchor from app.messages m
    where m.id = app.from_public_id('message', starting_after) and m.conversation_id = target.id;
    if anchor.id is null then
      perform app.http_error(404, format('starting_after: no message matches %L in this conversation.', starting_after));
    end if;
  end if;
  page := array(
    select m.id from app.messages m
    where m.conversation_id = target.id
      and (anchor.id is null or (m.created_at, m.id) < (anchor.created_at, anchor.id))
    order by m.created_at desc, m.id desc
    limit page_limit + 1);
  has_more := cardinality(page) > page_limit;
  page := page[1:page_limit];
  return app.page_envelope_text(
    app.messages_text(page),
    has_more,
    target.messages_count,
    app.to_public_id('message', page[cardinality(page)]));
end;
$$;
comment on function api.messages_list(text, integer, text) is
  'GET /v1/conversations/{conversation_id}/messages: newest first, as JSON text with URL markers (app.messages_text; the HTTP layer puts the URLs in place). total_count is the conversation''s messages_count, kept on write: counting the messages passed each through the messages policy (13.7 ms a page at 10,000 messages).';
grant execute on function api.messages_list(text, integer, text) to authenticated;

create function api.message_send(conversation_ref text, body text, attachment_upload_id uuid, client_ref text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  me uuid := (select auth.uid());
  target app.conversations := app.my_conversation(conversation_ref);
  client_id uuid;
  sent app.messages;
begin
  -- The sender's lock of app.check_message_caps, taken before the resend lookup (and so before
  -- the rate limit's lock, the order every send takes): concurrent resends of one
  -- client_message_id wait for the first to commit, then find it and answer 200. Looked up
  -- without the lock, they all missed it, and the caps (3 messages to an unanswered
  -- conversation) or the rate limit answered them 429 once the first had counted.
  perform pg_advisory_xact_lock(hashtext('app.messages caps'), hashtext(me::text));
  if client_ref is not null then
    if client_ref !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' then
      perform app.http_error(422, 'client_message_id must be a UUID.');
    end if;
    client_id := client_ref::uuid;
    -- A resend returns the original (200), before any cap or limit counts it.
    select m.* into sent from app.messages m where m.conversation_id = target.id and m.user_id = me and m.client_message_id = client_id;
    if sent.id is not null then
      return jsonb_build_object('status', 200, 'body', app.message_json(sent));
    end if;
  end if;
  if coalesce(message_send.body, '') = '' and attachment_upload_id is null then
    perform app.http_error(422, 'A message needs a body or an attachment.');
  end if;

  perform app.hit_rate_limit('message_send');
  perform app.check_message_caps(me, target);

  insert into app.messages (conversation_id, user_id, body, client_message_id)
  values (target.id, me, coalesce(message_send.body, ''), client_id)
  on conflict (conversation_id, user_id, client_message_id) do nothing
  returning * into sent;
  if sent.id is null then
    -- A concurrent resend won the race: answer with its message.
    select m.* into sent from app.messages m where m.conversation_id = target.id and m.user_id = me and m.client_message_id = client_id;
    return jsonb_build_object('status', 200, 'body', app.message_json(sent));
  end if;
  if attachment_upload_id is not null then
    perform app.attach_uploads(jsonb_build_array(attachment_upload_id), null, null, sent.id, 'attachment');
  end if;
  return jsonb_build_object('status', 201, 'body', app.message_json(sent));
end;
$$;
comment on function api.message_send(text, text, uuid, text) is
  'POST /v1/conversations/{conversation_id}/messages: 201 with the new message, or 200 with the original when client_message_id was already used (also under concurrent resends: unique constraint). Rate limit, then the unanswered-conversation caps (429).';
grant execute on function api.message_send(text, text, uuid, text) to authenticated;

create function api.message_react(message_ref text, content text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.messages := app.my_message(message_ref);
  reaction app.message_reactions;
begin
  if content is null then
    perform app.http_error(400, 'content is required: one of the quick-set emoji.');
  elsif content not in ('👍', '❤️', '😂', '🔥', '🙏') then
    perform app.http_error(422, 'content must be one of the quick-set emoji: 👍 ❤️ 😂 🔥 🙏');
  end if;
  perform app.hit_rate_limit('message_reaction');
  insert into app.message_reactions (message_id, user_id, content) values (target.id, (select auth.uid()), content)
  on conflict do nothing
  returning * into reaction;
  if reaction.message_id is null then
    select r.* into reaction from app.message_reactions r
    where r.message_id = target.id and r.user_id = (select auth.uid()) and r.content = message_react.content;
  end if;
  return jsonb_build_object(
    'content', reaction.content,
    'created_at', reaction.created_at,
    'user', (select app.user_json(u) from app.users u where u.id = reaction.user_id));
end;
$$;
comment on function api.message_react(text, text) is
  'POST /v1/messages/{message_id}/reactions: one of the five quick-set emoji (422 otherwise); re-reacting returns the existing reaction.';
grant execute on function api.message_react(text, text) to authenticated;

create function api.message_unreact(message_ref text, content text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.messages := app.my_message(message_ref);
begin
  perform app.hit_rate_limit('message_reaction');
  delete from app.message_reactions r
  where r.message_id = target.id and r.user_id = (select auth.uid()) and r.content = message_unreact.content;
  return null;
end;
$$;
comment on function api.message_unreact(text, text) is
  'DELETE /v1/messages/{message_id}/reactions/{content}: 204 also when there was no such reaction.';
grant execute on function api.message_unreact(text, text) to authenticated;

-- ============================================================================
-- Execute only where granted above
-- ============================================================================
revoke execute on all functions in schema app, api from public;
