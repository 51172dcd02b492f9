-- The list envelope takes a list's own members (app.page_envelope_text's more_members)
--
-- GET /v1/conversations added unread_count by cutting the closing brace off the envelope's text
-- (left(..., -1)) and appending its member: correct only while the envelope ends with "}". The
-- envelope now appends members it is given, before its brace. Same answers, byte for byte. The
-- function is dropped and created again (a new argument, with a default: every other caller
-- calls it as before).

-- The diff lists functions by name, so a SQL function may come before one it calls: its body
-- is checked once everything is in place (by test/schema.test.ts), not statement by statement.
set local check_function_bodies = off;

-- app.page_envelope_text: supabase/schemas/70_rendering.sql
DROP FUNCTION "app"."page_envelope_text"(text, boolean, bigint, text);

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
  return app.page_envelope_text(
    (select '[' || string_agg(t.body, ',' order by t.n) || ']' from app.conversation_texts(page) t),
    has_more,
    (select count(*) from app.conversation_members m where m.user_id = me and m.last_message_at is not null and (not unread_only or m.unread)),
    app.to_public_id('conversation', page[cardinality(page)]),
    ',"unread_count":' || app.my_unread_conversations());
end;
$function$;

-- app.page_envelope_text: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.page_envelope_text (
  data         text,
  has_more     boolean,
  total_count  bigint,
  last_id      text,
  more_members text    DEFAULT ''::text
)
  RETURNS text
  LANGUAGE sql
  STABLE
  AS $function$
  select '{"data":' || coalesce(data, '[]')
    || ',"has_more":' || has_more
    || ',"total_count":' || coalesce(total_count::text, 'null')
    || ',"after":' || case when has_more then app.json_text(last_id) else 'null' end
    || coalesce(more_members, '')
    || '}'
$function$;

-- app.page_envelope_text: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."page_envelope_text"(text, boolean, bigint, text, text) IS 'Inlined (no SET clause, no table access). app.page_envelope around data given as JSON text (an array, URLs in place or as markers), as JSON text: the todo lists send their page as the text it was concatenated into (issue 27), never parsed into jsonb and printed again, nor checked by a cast to json (a parse of the whole page: 0.08 ms of a 30 KB page). more_members: members a list adds after the envelope''s own, as JSON text that starts with a comma (GET /v1/conversations'' unread_count).';

-- app.page_envelope_text: supabase/schemas/70_rendering.sql
REVOKE ALL ON FUNCTION "app"."page_envelope_text"(text, boolean, bigint, text, text) FROM PUBLIC;

-- app.page_envelope_text: supabase/schemas/70_rendering.sql
GRANT EXECUTE ON FUNCTION "app"."page_envelope_text"(text, boolean, bigint, text, text) TO "authenticated", "postgres", "service_role";
