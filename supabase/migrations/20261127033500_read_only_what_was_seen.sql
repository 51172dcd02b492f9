-- read only what was seen (issue 31)
--
-- api.conversation_read and api.conversations_read_all set unread = false and last_read_at =
-- now() in one update. A message whose delivery held the member's row while the read waited for
-- it was marked read when the read went on, though the reader never saw it (its snapshot was
-- taken before the message committed): the conversation showed read with an unseen message in
-- it. Both now read the newest message their snapshot sees, and update only a row whose newest
-- message is still that one; last_read_at is never before the newest message read.
-- test/races.test.ts, "a message delivered while a read waits for the row stays unread".
--
-- Written by hand (same bodies as supabase/schemas/50_chat.sql). Replaces two functions; no
-- table is touched, no lock beyond the functions' own.

create or replace function api.conversation_read(conversation_ref text)
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

create or replace function api.conversations_read_all()
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
