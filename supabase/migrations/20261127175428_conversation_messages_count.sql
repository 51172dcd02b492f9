-- A conversation's messages counted on write (conversations.messages_count)
--
-- GET /v1/conversations/{id}/messages counted the conversation's messages for its total_count on
-- every page, each one through the messages policy (app.is_conversation_member per row): 27 ms a
-- page at 10,000 messages, growing with the conversation. The count is now kept on the
-- conversation's row: up by one in the trigger that already moves last_message_at as a message
-- commits, down by a statement-level trigger when messages are deleted (the API deletes none;
-- they go with their conversation). The backfill below counts every conversation once, while
-- ADD COLUMN holds app.conversations' exclusive lock, so no message commits between the count and
-- the new trigger.

-- The diff lists functions by name, so a SQL function may come before one it calls: its body
-- is checked once everything is in place (by test/schema.test.ts), not statement by statement.
set local check_function_bodies = off;

-- app.conversations: supabase/schemas/50_chat.sql
ALTER TABLE "app"."conversations"
  ADD COLUMN "messages_count" integer NOT NULL DEFAULT 0;

-- Every conversation's messages, counted once (one pass over app.messages, grouped). A count is
-- not a change clients see: the conversations' updated_at stays as it was.
alter table app.conversations disable trigger _100_set_updated_at;
update app.conversations c set messages_count = n.messages
from (select m.conversation_id, count(*)::integer as messages from app.messages m group by m.conversation_id) n
where c.id = n.conversation_id;
alter table app.conversations enable trigger _100_set_updated_at;

-- api.messages_list: supabase/schemas/50_chat.sql
CREATE OR REPLACE FUNCTION api.messages_list (
  conversation_ref text,
  page_limit       integer,
  starting_after   text
)
  RETURNS text
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
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
$function$;

-- app.tg_messages__deliver: supabase/schemas/50_chat.sql
CREATE OR REPLACE FUNCTION app.tg_messages__deliver()
  RETURNS TRIGGER
  LANGUAGE plpgsql
  SECURITY DEFINER
  SET search_path TO ''
  AS $function$
declare
  other uuid;
begin
  update app.conversations c set last_message_at = new.created_at, messages_count = c.messages_count + 1 where c.id = new.conversation_id;
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
$function$;

-- app.tg_messages__uncount: supabase/schemas/50_chat.sql
CREATE OR REPLACE FUNCTION app.tg_messages__uncount()
  RETURNS TRIGGER
  LANGUAGE plpgsql
  SECURITY DEFINER
  SET search_path TO ''
  AS $function$
begin
  update app.conversations c set messages_count = c.messages_count - gone.n
  from (select o.conversation_id, count(*)::integer as n from old_messages o group by o.conversation_id) gone
  where c.id = gone.conversation_id;
  return null;
end;
$function$;

-- app.conversations: supabase/schemas/50_chat.sql
ALTER TABLE "app"."conversations"
  ADD CONSTRAINT "conversations_messages_count_check" CHECK ((messages_count >= 0));

-- trigger _100_uncount on app.messages: supabase/schemas/50_chat.sql
CREATE TRIGGER _100_uncount
  AFTER DELETE ON app.messages REFERENCING OLD TABLE AS old_messages
  FOR EACH STATEMENT
  EXECUTE FUNCTION app.tg_messages__uncount();

-- app.conversations: supabase/schemas/50_chat.sql
COMMENT ON COLUMN "app"."conversations"."messages_count" IS 'How many messages the conversation holds: the total_count of GET /v1/conversations/{id}/messages. Counted up with last_message_at as each message commits (app.tg_messages__deliver) and down by app.tg_messages__uncount; a count of the messages at every page cost 2.7 ms per 1,000 messages (27 ms a page at 10,000: every row passed the messages policy).';

-- api.messages_list: supabase/schemas/50_chat.sql
COMMENT ON FUNCTION "api"."messages_list"(text, integer, text) IS 'GET /v1/conversations/{conversation_id}/messages: newest first, as JSON text with URL markers (app.messages_text; the HTTP layer puts the URLs in place). total_count is the conversation''s messages_count, kept on write: counting the messages passed each through the messages policy (27 ms a page at 10,000 messages).';

-- app.tg_messages__deliver: supabase/schemas/50_chat.sql
COMMENT ON FUNCTION "app"."tg_messages__deliver"() IS 'After a message: counts it (conversations.messages_count), moves the conversation to the top of both inboxes, marks it unread for the recipient (read for the sender), and broadcasts message.created (the Message as the recipient sees it: app.message_json_as, so the sender''s own-record fields never reach the recipient) to the conversation topic and inbox.updated (unread count) to the recipient''s topic. realtime.send never fails the write.';

-- app.tg_messages__uncount: supabase/schemas/50_chat.sql
COMMENT ON FUNCTION "app"."tg_messages__uncount"() IS 'After messages are deleted: counts them out of conversations.messages_count, one update per conversation for the whole statement. The API deletes no message; they go with their conversation (an account''s deletion), whose row is gone by then and matches nothing, or by an operator''s hand. Per statement, not per row: a conversation of 100,000 messages deleted whole pays one grouped update, not 100,000 lookups.';

-- app.tg_messages__uncount: supabase/schemas/50_chat.sql
REVOKE ALL ON FUNCTION "app"."tg_messages__uncount"() FROM PUBLIC;

-- app.tg_messages__uncount: supabase/schemas/50_chat.sql
GRANT EXECUTE ON FUNCTION "app"."tg_messages__uncount"() TO "postgres";
