-- GET /v1/todos, the timeline and GET /v1/projects in PL/pgSQL (issue 27)
--
-- api.todos_list, api.timeline and api.projects_list were SQL functions with a SET clause: such a
-- function is never inlined, and PostgreSQL parsed and planned its one statement again on every
-- call (20-40 us of a 1 ms page of todos, measured). As PL/pgSQL their statement is planned
-- once per session, as the other list functions' are. Same signatures, same answers.

-- The diff lists functions by name, so a SQL function may come before one it calls: its body
-- is checked once everything is in place (by test/schema.test.ts), not statement by statement.
set local check_function_bodies = off;

-- api.projects_list: supabase/schemas/20_projects.sql
DROP FUNCTION "api"."projects_list"(integer, text);

-- api.timeline: supabase/schemas/40_social.sql
DROP FUNCTION "api"."timeline"(jsonb, integer, text, boolean);

-- api.todos_list: supabase/schemas/30_todos.sql
DROP FUNCTION "api"."todos_list"(jsonb, integer, text, boolean);

-- api.projects_list: supabase/schemas/20_projects.sql
CREATE OR REPLACE FUNCTION api.projects_list (
  page_limit     integer,
  starting_after text
)
  RETURNS text
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return app.project_page(null, page_limit, starting_after);
end;
$function$;

-- api.timeline: supabase/schemas/40_social.sql
CREATE OR REPLACE FUNCTION api.timeline (
  filters          jsonb,
  page_limit       integer,
  starting_after   text,
  expand_reactions boolean
)
  RETURNS text
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return app.todo_page('timeline', null, filters, page_limit, starting_after, expand_reactions);
end;
$function$;

-- api.todos_list: supabase/schemas/30_todos.sql
CREATE OR REPLACE FUNCTION api.todos_list (
  filters          jsonb,
  page_limit       integer,
  starting_after   text,
  expand_reactions boolean
)
  RETURNS text
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
begin
  return app.todo_page('all', null, filters, page_limit, starting_after, expand_reactions);
end;
$function$;

-- api.projects_list: supabase/schemas/20_projects.sql
COMMENT ON FUNCTION "api"."projects_list"(integer, text) IS 'GET /v1/projects: every project the viewer may see, newest first. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined and was parsed and planned again on every call (20-40 us of a 1 ms page).';

-- api.timeline: supabase/schemas/40_social.sql
COMMENT ON FUNCTION "api"."timeline"(jsonb, integer, text, boolean) IS 'GET /v1/timeline: the viewer''s own todos and those of followed members and followed projects, minus muted members, newest first, with the filters of every todo list. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined and was parsed and planned again on every call (20-40 us of a 1 ms page).';

-- api.todos_list: supabase/schemas/30_todos.sql
COMMENT ON FUNCTION "api"."todos_list"(jsonb, integer, text, boolean) IS 'GET /v1/todos: every todo the viewer may see, newest first, with the filters of every todo list. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined and was parsed and planned again on every call (20-40 us of a 1 ms page).';

-- api.projects_list: supabase/schemas/20_projects.sql
REVOKE ALL ON FUNCTION "api"."projects_list"(integer, text) FROM PUBLIC;

-- api.projects_list: supabase/schemas/20_projects.sql
GRANT EXECUTE ON FUNCTION "api"."projects_list"(integer, text) TO "authenticated", "postgres";

-- api.timeline: supabase/schemas/40_social.sql
REVOKE ALL ON FUNCTION "api"."timeline"(jsonb, integer, text, boolean) FROM PUBLIC;

-- api.timeline: supabase/schemas/40_social.sql
GRANT EXECUTE ON FUNCTION "api"."timeline"(jsonb, integer, text, boolean) TO "authenticated", "postgres";

-- api.todos_list: supabase/schemas/30_todos.sql
REVOKE ALL ON FUNCTION "api"."todos_list"(jsonb, integer, text, boolean) FROM PUBLIC;

-- api.todos_list: supabase/schemas/30_todos.sql
GRANT EXECUTE ON FUNCTION "api"."todos_list"(jsonb, integer, text, boolean) TO "authenticated", "postgres";
