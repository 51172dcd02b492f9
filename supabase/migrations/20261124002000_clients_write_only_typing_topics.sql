-- Realtime events cannot be forged (issue 11, item 4). The insert policy on realtime.messages
-- admitted any event on `conversation:<id>`, the topic the server publishes message.created,
-- reaction.* and conversation.read on, so a participant could broadcast a message.created with
-- any creator to the other participant, past the caps and rate limits. Supabase authorizes a
-- write per topic, not per event, so the fix is in the topics: the server's topics
-- (`conversation:<id>`, `user:<id>`) take no client writes at all, and what participants send
-- each other (typing) has a topic of its own, `conversation:<id>:typing`, which they may read
-- and write.

create or replace function app.realtime_may_join(topic text)
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
    and t.user_id::text = claims ->> 'sub'
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
grant execute on function app.realtime_may_send(text) to authenticated;

drop policy "Participants with a chat token may broadcast (typing) in their conversations" on realtime.messages;

create policy "Participants with a chat token may broadcast on their conversations' typing topics only" on realtime.messages
  for insert to authenticated
  with check (realtime.messages.extension = 'broadcast' and (select app.realtime_may_send(realtime.topic())));

revoke execute on function app.realtime_may_send(text) from public;
