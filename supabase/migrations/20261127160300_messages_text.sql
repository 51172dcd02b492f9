-- A conversation's messages rendered as text in one statement (issue 27)
--
-- GET /v1/conversations/{conversation_id}/messages built its page as jsonb, one
-- app.message_json per message: a SQL function with a SET clause (parsed and planned again on
-- every call) that called app.user_json for the creator and for every reactor, each with an
-- executor of its own: 10 ms of database time for a page of 25 messages on the bench's data set.
-- app.messages_text renders the page in one statement planned once per session, as
-- app.todos_text does for todos; api.messages_list answers JSON text with URL markers (its
-- return type changes, so it is dropped and created again: nothing else calls it), and
-- app.message_json (the answer of POST .../messages, a conversation's last message) is that
-- renderer's one element. The realtime event keeps app.message_json_as. Same JSON, value for
-- value: test/render-once.test.ts compares it with the renderer before
-- (test/support/reference-renderer.sql) for every member after random writes.

-- The diff lists functions by name, so a SQL function may come before one it calls: its body
-- is checked once everything is in place (by test/schema.test.ts), not statement by statement.
set local check_function_bodies = off;

-- api.messages_list: supabase/schemas/50_chat.sql
DROP FUNCTION "api"."messages_list"(text, integer, text);

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
    (select count(*) from app.messages m where m.conversation_id = target.id),
    app.to_public_id('message', page[cardinality(page)]));
end;
$function$;

-- app.message_json: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.message_json (
  m app.messages
)
  RETURNS jsonb
  LANGUAGE sql
  STABLE
  SET search_path TO ''
  AS $function$
  select app.resolve_urls(app.messages_text(array[m.id]))::jsonb -> 0
$function$;

-- app.messages_text: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.messages_text (
  ids uuid[]
)
  RETURNS text
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  SET plan_cache_mode TO 'force_generic_plan'
  AS $function$
declare
  -- Read once: auth.uid() in the statement would be evaluated for every row.
  viewer_id uuid := auth.uid();
begin
  -- Not security definer: every table is read under its policies, as the viewer (a participant
  -- sees their conversations' messages; any other caller gets only what its viewer may see of
  -- the ids it names).
  return (
    with page as materialized (
      select m.id, m.conversation_id, m.user_id, m.body, m.client_message_id, m.created_at, m.updated_at, o.n
      from unnest(ids) with ordinality o(id, n)
      join app.messages m on m.id = o.id
    ), reacted as materialized (
      select r.message_id, r.user_id, r.content, r.created_at
      from app.message_reactions r where r.message_id in (select pm.id from page pm)
    ), people as materialized (
      select pe.id, pe.body from app.users_seen_by(viewer_id) pe
      where pe.id in (select pm.user_id from page pm union all select r.user_id from reacted r)
    ), attachments as materialized (
      -- One file a message (the send attaches at most one).
      select distinct on (a.message_id) a.message_id,
             '{"url":' || app.json_url(chr(1), '/files/' || a.key)
             || ',"mime_type":' || app.json_text(coalesce(a.detected_type, a.content_type))
             || ',"filename":' || app.json_text(a.filename)
             || ',"byte_size":' || a.byte_size
             || ',"width":' || coalesce(a.width::text, 'null')
             || ',"height":' || coalesce(a.height::text, 'null')
             || '}' as body
      from app.uploads a where a.message_id in (select pm.id from page pm)
      order by a.message_id, a.attached_at, a.id
    ), reactions as materialized (
      select r.message_id,
             string_agg('{"content":' || app.json_text(r.content) || ',"created_at":' || app.json_time(r.created_at)
                        || ',"user":' || coalesce(ru.body, 'null') || '}', ',' order by r.created_at, r.content) as body
      from reacted r left join people ru on ru.id = r.user_id group by r.message_id
    )
    select '[' || string_agg(
        '{"id":"' || app.to_public_id('message', m.id) || '"'
        || ',"conversation_id":"' || app.to_public_id('conversation', m.conversation_id) || '"'
        || ',"body":' || app.json_text(m.body)
        || ',"client_message_id":' || case when m.client_message_id is null then 'null' else '"' || m.client_message_id || '"' end
        || ',"created_at":' || app.json_time(m.created_at)
        || ',"updated_at":' || app.json_time(m.updated_at)
        || ',"creator":' || coalesce(pe.body, 'null')
        || ',"attachment":' || coalesce(a.body, 'null')
        || ',"reactions":[' || coalesce(rx.body, '') || ']'
        || '}',
        ',' order by m.n) || ']'
    from page m
    left join people pe on pe.id = m.user_id
    left join attachments a on a.message_id = m.id
    left join reactions rx on rx.message_id = m.id);
end;
$function$;

-- api.messages_list: supabase/schemas/50_chat.sql
COMMENT ON FUNCTION "api"."messages_list"(text, integer, text) IS 'GET /v1/conversations/{conversation_id}/messages: newest first, as JSON text with URL markers (app.messages_text; the HTTP layer puts the URLs in place).';

-- app.message_json: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."message_json"(app.messages) IS 'A message as the API renders it for the current viewer (app.messages_text of its id, URLs in place; null when the viewer may not see it), for the answers that hold one message: a sent one, a conversation''s last. The realtime message.created event renders it for the recipient with app.message_json_as (same shape).';

-- app.messages_text: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."messages_text"(uuid[]) IS 'The messages with these ids that the current viewer may see, as the API renders them, in the order of ids: a JSON array as text with URL markers (app.resolve_urls), null when none. Users (creator, reactors) from their cards with the viewer''s flags (app.users_seen_by), the attachment and reactions read for the set, in one statement planned once per session. Why: the jsonb renderer it replaces (app.message_json per message, a SQL function with a SET clause calling app.user_json for the creator and every reactor) was parsed and planned again on every call, with an executor per message and per user: 10 ms of database time for a page of 25 messages. Invoker''s rights: read under every table''s policies, as the viewer.';

-- api.messages_list: supabase/schemas/50_chat.sql
REVOKE ALL ON FUNCTION "api"."messages_list"(text, integer, text) FROM PUBLIC;

-- api.messages_list: supabase/schemas/50_chat.sql
GRANT EXECUTE ON FUNCTION "api"."messages_list"(text, integer, text) TO "authenticated", "postgres";

-- app.messages_text: supabase/schemas/70_rendering.sql
REVOKE ALL ON FUNCTION "app"."messages_text"(uuid[]) FROM PUBLIC;

-- app.messages_text: supabase/schemas/70_rendering.sql
GRANT EXECUTE ON FUNCTION "app"."messages_text"(uuid[]) TO "authenticated", "postgres", "service_role";
