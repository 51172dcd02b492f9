-- A todo's comments rendered as text in one statement (issue 27)
--
-- GET /v1/todos/{todo_id}/comments built its page as jsonb, one app.comment_json per comment: a
-- SQL function with a SET clause (parsed and planned again on every call) that called more of
-- them for the creator, attachments and mentions, each with an executor of its own: 4.4 ms of
-- database time for a todo's three comments on the bench's data set, ten times the todo.
-- app.comments_text renders a page from the cards kept on write in one statement planned once
-- per session, as app.todos_text does for todos; api.todo_comments answers JSON text with URL
-- markers (its return type changes, so it is dropped and created again: nothing else calls it),
-- and app.comment_json (the answer of POST and PATCH) is that renderer's one element. Same JSON,
-- value for value: test/render-once.test.ts compares it with the renderer before
-- (test/support/reference-renderer.sql) for every member after random writes.

-- The diff lists functions by name, so a SQL function may come before one it calls: its body
-- is checked once everything is in place (by test/schema.test.ts), not statement by statement.
set local check_function_bodies = off;

-- api.todo_comments: supabase/schemas/40_social.sql
DROP FUNCTION "api"."todo_comments"(text, integer, text);

-- api.todo_comments: supabase/schemas/40_social.sql
CREATE OR REPLACE FUNCTION api.todo_comments (
  todo_ref       text,
  page_limit     integer,
  starting_after text
)
  RETURNS text
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
declare
  target app.todos := app.resolve_todo(todo_ref);
  anchor app.comments;
  page uuid[];
  has_more boolean;
begin
  if target.id is null then
    perform app.http_error(404, format('No todo matches %L.', todo_ref));
  end if;
  if starting_after is not null then
    anchor := app.resolve_comment(starting_after);
    if anchor.id is null or anchor.todo_id <> target.id then
      perform app.http_error(404, format('starting_after: no comment matches %L on this todo.', starting_after));
    end if;
  end if;
  page := array(
    select c.id from app.comments c
    where c.todo_id = target.id
      and not exists (select 1 from app.mutes m where m.user_id = (select auth.uid()) and m.muted_user_id = c.user_id)
      and (anchor.id is null or (c.created_at, c.id) > (anchor.created_at, anchor.id))
    order by c.created_at, c.id
    limit page_limit + 1);
  has_more := cardinality(page) > page_limit;
  page := page[1:page_limit];
  return app.page_envelope_text(
    app.comments_text(page),
    has_more,
    (select count(*) from app.comments c
      where c.todo_id = target.id
        and not exists (select 1 from app.mutes m where m.user_id = (select auth.uid()) and m.muted_user_id = c.user_id)),
    app.to_public_id('comm', page[cardinality(page)]));
end;
$function$;

-- app.comment_json: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.comment_json (
  c app.comments
)
  RETURNS jsonb
  LANGUAGE sql
  STABLE
  SET search_path TO ''
  AS $function$
  select app.resolve_urls(app.comments_text(array[c.id]))::jsonb -> 0
$function$;

-- app.comments_text: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.comments_text (
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
  -- Not security definer: every table is read under its policies, as the viewer, so a comment,
  -- an attachment or a mentioned project the viewer may not see is left out exactly as the
  -- policies say (the comments list passes the ids of its page; any other caller gets only what
  -- its viewer may see of the ids it names).
  return (
    with page as materialized (
      select c.id, c.todo_id, c.user_id, c.parent_id, c.body, c.created_at, c.updated_at, c.reactions_count, o.n
      from unnest(ids) with ordinality o(id, n)
      join app.comments c on c.id = o.id
    ), people as materialized (
      select pe.id, pe.body from app.users_seen_by(viewer_id) pe
      where pe.id in (select pc.user_id from page pc)
    ), numbers as materialized (
      select t.id, t.number from app.todos t where t.id in (select pc.todo_id from page pc)
    ), attachments as materialized (
      select a.comment_id, string_agg(a.card, ',' order by a.attached_at, a.id) as body
      from app.uploads a where a.comment_id in (select pc.id from page pc) group by a.comment_id
    ), project_mentions as materialized (
      select m.comment_id, string_agg(app.project_mention_text(p.card), ',' order by m.position) as body
      from app.comment_project_mentions m join app.projects p on p.id = m.project_id
      where m.comment_id in (select pc.id from page pc) group by m.comment_id
    ), user_mentions as materialized (
      select m.comment_id, string_agg(app.user_mention_text(u.card), ',' order by m.position) as body
      from app.comment_user_mentions m join app.users u on u.id = m.user_id
      where m.comment_id in (select pc.id from page pc) group by m.comment_id
    ), my_reactions as materialized (
      select r.comment_id, string_agg('{"id":"' || app.to_public_id('reac', r.id) || '"}', ',' order by r.created_at) as body
      from app.reactions r
      where r.comment_id in (select pc.id from page pc where pc.reactions_count > 0) and r.user_id = viewer_id
      group by r.comment_id
    )
    select '[' || string_agg(
        '{"id":"' || app.to_public_id('comm', c.id) || '"'
        || ',"body":' || app.json_text(c.body)
        || ',"attachments":[' || coalesce(a.body, '') || ']'
        || ',"created_at":' || app.json_time(c.created_at)
        || ',"updated_at":' || app.json_time(c.updated_at)
        || ',"url":' || case when nb.number is null then 'null'
                             else '"' || chr(2) || '/todos/' || nb.number || '#' || app.to_public_id('comm', c.id) || '"' end
        || ',"reactions_count":' || c.reactions_count
        || ',"viewer":{"reactions":[' || coalesce(mr.body, '') || ']}'
        || ',"creator":' || coalesce(pe.body, 'null')
        || ',"mentioned_projects":[' || coalesce(pm.body, '') || ']'
        || ',"mentioned_users":[' || coalesce(um.body, '') || ']'
        || ',"parent_id":' || case when c.parent_id is null then 'null' else '"' || app.to_public_id('comm', c.parent_id) || '"' end
        || '}',
        ',' order by c.n) || ']'
    from page c
    left join people pe on pe.id = c.user_id
    left join numbers nb on nb.id = c.todo_id
    left join attachments a on a.comment_id = c.id
    left join project_mentions pm on pm.comment_id = c.id
    left join user_mentions um on um.comment_id = c.id
    left join my_reactions mr on mr.comment_id = c.id);
end;
$function$;

-- api.todo_comments: supabase/schemas/40_social.sql
COMMENT ON FUNCTION "api"."todo_comments"(text, integer, text) IS 'GET /v1/todos/{todo_id}/comments: oldest first (a conversation reads top-down), replies included with their parent_id, comments of muted members left out. JSON text with URL markers (app.comments_text; the HTTP layer puts the URLs in place), as the todo lists answer.';

-- app.comment_json: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."comment_json"(app.comments) IS 'A comment as the API renders it for the current viewer, with its attachments (app.comments_text of its id, URLs in place; null when the viewer may not see it), for the writes that answer with the comment they stored. parent_id (null for a top-level comment) is our addition to SPEC''s fields: replies need it.';

-- app.comments_text: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."comments_text"(uuid[]) IS 'The comments with these ids that the current viewer may see, as the API renders them, in the order of ids: a JSON array as text with URL markers (app.resolve_urls), null when none. Concatenated from the renderings kept on write (the creator''s and the mentions'' cards, the attachments'') with the viewer''s flags and reactions added, in one statement planned once per session. Why: the jsonb renderer it replaces (app.comment_json per comment, a SQL function with a SET clause, calling more of them) was parsed and planned again on every call, and started an executor per comment and per nested function: 4.4 ms of database time for a todo''s three comments, ten times the todo. Invoker''s rights: read under every table''s policies, as the viewer, so it leaves out exactly what they may not see.';

-- api.todo_comments: supabase/schemas/40_social.sql
REVOKE ALL ON FUNCTION "api"."todo_comments"(text, integer, text) FROM PUBLIC;

-- api.todo_comments: supabase/schemas/40_social.sql
GRANT EXECUTE ON FUNCTION "api"."todo_comments"(text, integer, text) TO "authenticated", "postgres";

-- app.comments_text: supabase/schemas/70_rendering.sql
REVOKE ALL ON FUNCTION "app"."comments_text"(uuid[]) FROM PUBLIC;

-- app.comments_text: supabase/schemas/70_rendering.sql
GRANT EXECUTE ON FUNCTION "app"."comments_text"(uuid[]) TO "authenticated", "postgres";
