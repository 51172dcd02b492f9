-- Conversations rendered as text in one statement (issue 27)
--
-- GET /v1/conversations (the inbox) and GET /v1/conversations/{id} rendered each conversation
-- through app.conversation_json, a SQL function with a SET clause (planned again on every call)
-- that called app.user_json and app.message_json, each with executors of their own: 20 ms of
-- database time for an inbox of 18 conversations on the bench's data set. app.conversation_texts
-- renders a page in one statement planned once per session, its last messages through
-- app.message_texts (app.messages_text's rows, which app.messages_text now aggregates);
-- api.conversations_list and api.conversation_get answer JSON text with URL markers (their
-- return type changes, so they are dropped and created again), and app.conversation_json (the
-- answer of POST /v1/conversations) is the renderer's one row. Same JSON, value for value:
-- test/render-once.test.ts compares them with the renderer before for every participant.

-- The diff lists functions by name, so a SQL function may come before one it calls: its body
-- is checked once everything is in place (by test/schema.test.ts), not statement by statement.
set local check_function_bodies = off;

-- api.conversation_get: supabase/schemas/50_chat.sql
DROP FUNCTION "api"."conversation_get"(text);

-- api.conversations_list: supabase/schemas/50_chat.sql
DROP FUNCTION "api"."conversations_list"(boolean, integer, text);

-- api.conversation_get: supabase/schemas/50_chat.sql
CREATE OR REPLACE FUNCTION api.conversation_get (
  conversation_ref text
)
  RETURNS text
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return (select t.body from app.conversation_texts(array[(app.my_conversation(conversation_ref)).id]) t);
end;
$function$;

-- api.conversations_list: supabase/schemas/50_chat.sql
CREATE OR REPLACE FUNCTION api.conversations_list (
  unread_only    boolean,
  page_limit     integer,
  starting_after text
)
  RETURNS text
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
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
  -- The envelope with unread_count as its last member (the envelope's closing brace replaced).
  return left(app.page_envelope_text(
    (select '[' || string_agg(t.body, ',' order by t.n) || ']' from app.conversation_texts(page) t),
    has_more,
    (select count(*) from app.conversation_members m where m.user_id = me and m.last_message_at is not null and (not unread_only or m.unread)),
    app.to_public_id('conversation', page[cardinality(page)])), -1)
    || ',"unread_count":' || app.my_unread_conversations() || '}';
end;
$function$;

-- app.conversation_json: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.conversation_json (
  c app.conversations
)
  RETURNS jsonb
  LANGUAGE sql
  STABLE
  SET search_path TO ''
  AS $function$
  select app.resolve_urls(t.body)::jsonb from app.conversation_texts(array[c.id]) t
$function$;

-- app.conversation_texts: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.conversation_texts (
  ids uuid[]
)
  RETURNS TABLE (
    id   uuid,
    n    bigint,
    body text
  )
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  SET plan_cache_mode TO 'force_generic_plan'
  AS $function$
declare
  -- Read once: auth.uid() in the statement would be evaluated for every row.
  viewer_id uuid := auth.uid();
begin
  -- Not security definer: read under the chat tables' policies, as the viewer. A conversation
  -- the viewer takes no part in has no side of theirs, and no row here.
  return query
    with page as materialized (
      select c.id, c.created_at, c.updated_at, o.n, m.unread, m.other_user_id
      from unnest(ids) with ordinality o(id, n)
      join app.conversations c on c.id = o.id
      join app.conversation_members m on m.conversation_id = c.id and m.user_id = viewer_id
    ), people as materialized (
      select pe.id, pe.body from app.users_seen_by(viewer_id) pe
      where pe.id in (select pc.other_user_id from page pc)
    ), lasts as materialized (
      select pc.id as conversation_id, l.id as message_id
      from page pc cross join lateral (
        select lm.id from app.messages lm where lm.conversation_id = pc.id
        order by lm.created_at desc, lm.id desc limit 1) l
    ), last_texts as materialized (
      select t.id, t.body from app.message_texts(array(select l.message_id from lasts l)) t
    )
    select c.id, c.n,
        '{"id":"' || app.to_public_id('conversation', c.id) || '"'
        || ',"created_at":' || app.json_time(c.created_at)
        || ',"updated_at":' || app.json_time(c.updated_at)
        || ',"unread":' || coalesce(c.unread, false)
        || ',"user":' || coalesce(pe.body, 'null')
        || ',"last_message":' || coalesce(lt.body, 'null')
        || '}'
    from page c
    left join people pe on pe.id = c.other_user_id
    left join lasts l on l.conversation_id = c.id
    left join last_texts lt on lt.id = l.message_id;
end;
$function$;

-- app.message_texts: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.message_texts (
  ids uuid[]
)
  RETURNS TABLE (
    id   uuid,
    n    bigint,
    body text
  )
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
  return query
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
    select m.id, m.n,
        '{"id":"' || app.to_public_id('message', m.id) || '"'
        || ',"conversation_id":"' || app.to_public_id('conversation', m.conversation_id) || '"'
        || ',"body":' || app.json_text(m.body)
        || ',"client_message_id":' || case when m.client_message_id is null then 'null' else '"' || m.client_message_id || '"' end
        || ',"created_at":' || app.json_time(m.created_at)
        || ',"updated_at":' || app.json_time(m.updated_at)
        || ',"creator":' || coalesce(pe.body, 'null')
        || ',"attachment":' || coalesce(a.body, 'null')
        || ',"reactions":[' || coalesce(rx.body, '') || ']'
        || '}'
    from page m
    left join people pe on pe.id = m.user_id
    left join attachments a on a.message_id = m.id
    left join reactions rx on rx.message_id = m.id;
end;
$function$;

-- app.messages_text: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.messages_text (
  ids uuid[]
)
  RETURNS text
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return (select '[' || string_agg(t.body, ',' order by t.n) || ']' from app.message_texts(ids) t);
end;
$function$;

-- api.conversation_get: supabase/schemas/50_chat.sql
COMMENT ON FUNCTION "api"."conversation_get"(text) IS 'GET /v1/conversations/{conversation_id}: 404 for non-participants, never 403 (app.my_conversation). JSON text with URL markers (app.conversation_texts; the HTTP layer puts the URLs in place).';

-- api.conversations_list: supabase/schemas/50_chat.sql
COMMENT ON FUNCTION "api"."conversations_list"(boolean, integer, text) IS 'GET /v1/conversations, as JSON text with URL markers (app.conversation_texts): the viewer''s conversations with messages, latest activity first (index on the inbox), optionally only unread ones; unread_count counts across all pages. A cursor that is not in the list is 404.';

-- app.conversation_json: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."conversation_json"(app.conversations) IS 'A conversation as the current participant sees it (app.conversation_texts of its id, URLs in place; null when they take no part in it), for the answer of POST /v1/conversations.';

-- app.conversation_texts: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."conversation_texts"(uuid[]) IS 'The conversations with these ids as the current participant sees them, one row each with its place n in ids: JSON text with URL markers (the other participant as `user`, unread from their side, the latest message by app.message_texts), in one statement planned once per session. Why: the jsonb renderer it replaces (app.conversation_json per conversation, a SQL function with a SET clause calling app.user_json and app.message_json) was planned again for every conversation, with executors per user and message: 20 ms of database time for an inbox of 18. Invoker''s rights: read under the chat tables'' policies.';

-- app.message_texts: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."message_texts"(uuid[]) IS 'The messages with these ids that the current viewer may see, as the API renders them, one row each with its place n in ids: JSON text with URL markers (app.resolve_urls). Users (creator, reactors) from their cards with the viewer''s flags (app.users_seen_by), the attachment and reactions read for the set, in one statement planned once per session. Why: the jsonb renderer it replaces (app.message_json per message, a SQL function with a SET clause calling app.user_json for the creator and every reactor) was parsed and planned again on every call, with an executor per message and per user: 10 ms of database time for a page of 25 messages. Invoker''s rights: read under every table''s policies, as the viewer.';

-- app.messages_text: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."messages_text"(uuid[]) IS 'The messages with these ids that the current viewer may see (app.message_texts), as one JSON array in the order of ids, as text with URL markers; null when none. A page of GET /v1/conversations/{id}/messages.';

-- api.conversation_get: supabase/schemas/50_chat.sql
REVOKE ALL ON FUNCTION "api"."conversation_get"(text) FROM PUBLIC;

-- api.conversation_get: supabase/schemas/50_chat.sql
GRANT EXECUTE ON FUNCTION "api"."conversation_get"(text) TO "authenticated", "postgres";

-- api.conversations_list: supabase/schemas/50_chat.sql
REVOKE ALL ON FUNCTION "api"."conversations_list"(boolean, integer, text) FROM PUBLIC;

-- api.conversations_list: supabase/schemas/50_chat.sql
GRANT EXECUTE ON FUNCTION "api"."conversations_list"(boolean, integer, text) TO "authenticated", "postgres";

-- app.conversation_texts: supabase/schemas/70_rendering.sql
REVOKE ALL ON FUNCTION "app"."conversation_texts"(uuid[]) FROM PUBLIC;

-- app.conversation_texts: supabase/schemas/70_rendering.sql
GRANT EXECUTE ON FUNCTION "app"."conversation_texts"(uuid[]) TO "authenticated", "postgres";

-- app.message_texts: supabase/schemas/70_rendering.sql
REVOKE ALL ON FUNCTION "app"."message_texts"(uuid[]) FROM PUBLIC;

-- app.message_texts: supabase/schemas/70_rendering.sql
GRANT EXECUTE ON FUNCTION "app"."message_texts"(uuid[]) TO "authenticated", "postgres", "service_role";
