-- Projects answered as text (issue 27)
--
-- GET /v1/projects, GET /v1/users/{username}/projects and GET /v1/projects/{project_id} built
-- their answers as jsonb, each project through app.project_json: a SQL function with a SET
-- clause (parsed and planned again on every call) that went through app.projects_json and
-- app.projects_text once per project, each with an executor of its own: 8.6 ms of database time
-- for a page of 25 on the bench's data set. app.project_page now renders the page in one call
-- of app.projects_text and answers JSON text with URL markers, as the todo lists do; the three
-- api functions answer text (their return type changes, so they are dropped and created
-- again), and app.project_json, left without a caller, is dropped. A maker's projects are found
-- from their rows in project_makers, no longer by asking every project whether they make it.
-- Same JSON, value for value: test/render-once.test.ts compares the pages with the renderer
-- before issue 27.

-- The diff lists functions by name, so a SQL function may come before one it calls: its body
-- is checked once everything is in place (by test/schema.test.ts), not statement by statement.
set local check_function_bodies = off;

-- api.project_get: supabase/schemas/20_projects.sql
DROP FUNCTION "api"."project_get"(text);

-- api.projects_list: supabase/schemas/20_projects.sql
DROP FUNCTION "api"."projects_list"(integer, text);

-- api.user_projects: supabase/schemas/20_projects.sql
DROP FUNCTION "api"."user_projects"(text, integer, text);

-- app.project_json: no caller left (api.project_get and app.project_page use app.projects_text)
DROP FUNCTION "app"."project_json"(app.projects);

-- app.project_page: supabase/schemas/70_rendering.sql
DROP FUNCTION "app"."project_page"(uuid, integer, text);

-- api.project_get: supabase/schemas/20_projects.sql
CREATE OR REPLACE FUNCTION api.project_get (
  project_ref text
)
  RETURNS text
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
declare
  result text;
begin
  select pt.body into result from app.projects_text(array[app.resolve_project(project_ref)]) pt;
  if result is null then
    perform app.http_error(404, format('No project matches %L.', project_ref));
  end if;
  return result;
end;
$function$;

-- api.projects_list: supabase/schemas/20_projects.sql
CREATE OR REPLACE FUNCTION api.projects_list (
  page_limit     integer,
  starting_after text
)
  RETURNS text
  LANGUAGE sql
  STABLE
  SET search_path TO ''
  AS $function$
  select app.project_page(null, page_limit, starting_after)
$function$;

-- api.user_projects: supabase/schemas/20_projects.sql
CREATE OR REPLACE FUNCTION api.user_projects (
  user_ref       text,
  page_limit     integer,
  starting_after text
)
  RETURNS text
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
declare
  maker_id uuid := app.resolve_user(user_ref);
begin
  if maker_id is null then
    perform app.http_error(404, format('No user matches %L.', user_ref));
  end if;
  return app.project_page(maker_id, page_limit, starting_after);
end;
$function$;

-- app.project_page: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.project_page (
  maker_id       uuid,
  page_limit     integer,
  starting_after text
)
  RETURNS text
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
declare
  anchor app.projects;
  page uuid[];
  has_more boolean;
  total bigint;
begin
  if starting_after is not null then
    select p.* into anchor from app.projects p where p.id = app.from_public_id('proj', starting_after);
    if anchor.id is null then
      perform app.http_error(404, format('starting_after: no project matches %L.', starting_after));
    end if;
  end if;
  -- Under the projects policy: the projects the viewer may see. A maker's projects are found
  -- from their accepted makers' rows (project_makers_user_id_idx), never by walking every
  -- project to ask each whether they make it (0.9 ms for none at 1,000 projects).
  if maker_id is null then
    page := array(
      select p.id from app.projects p
      where anchor.id is null or (p.created_at, p.id) < (anchor.created_at, anchor.id)
      order by p.created_at desc, p.id desc
      limit page_limit + 1);
    total := (select count(*) from app.projects p);
  else
    page := array(
      select p.id from app.project_makers m join app.projects p on p.id = m.project_id
      where m.user_id = maker_id and m.accepted
        and (anchor.id is null or (p.created_at, p.id) < (anchor.created_at, anchor.id))
      order by p.created_at desc, p.id desc
      limit page_limit + 1);
    total := (select count(*) from app.project_makers m join app.projects p on p.id = m.project_id
              where m.user_id = maker_id and m.accepted);
  end if;
  has_more := cardinality(page) > page_limit;
  page := page[1:page_limit];
  return app.page_envelope_text(
    (select '[' || string_agg(pt.body, ',' order by o.n) || ']'
     from unnest(page) with ordinality o(id, n) join app.projects_text(page) pt on pt.id = o.id),
    has_more,
    total,
    app.to_public_id('proj', page[cardinality(page)]));
end;
$function$;

-- api.project_get: supabase/schemas/20_projects.sql
COMMENT ON FUNCTION "api"."project_get"(text) IS 'GET /v1/projects/{project_id}: 404 also when the viewer may not see the project, so its existence does not leak. JSON text with URL markers (app.projects_text; the HTTP layer puts the URLs in place).';

-- api.projects_list: supabase/schemas/20_projects.sql
COMMENT ON FUNCTION "api"."projects_list"(integer, text) IS 'GET /v1/projects: every project the viewer may see, newest first.';

-- api.user_projects: supabase/schemas/20_projects.sql
COMMENT ON FUNCTION "api"."user_projects"(text, integer, text) IS 'GET /v1/users/{username}/projects and /v1/users/me/projects: projects the user is an accepted maker of, as far as the viewer may see them.';

-- app.project_page: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."project_page"(uuid, integer, text) IS 'One page of projects visible to the viewer, newest first, optionally only those maker_id makes, as JSON text with URL markers (app.projects_text renders the page in one statement; the HTTP layer puts the URLs in place). Keyset on (created_at, id); the cursor is the last project''s id. Why text: as jsonb, each project went through app.project_json, a SQL function with a SET clause planned again on every call, with an executor of its own: 8.6 ms of database time for a page of 25 on the bench''s data set.';

-- api.project_get: supabase/schemas/20_projects.sql
REVOKE ALL ON FUNCTION "api"."project_get"(text) FROM PUBLIC;

-- api.project_get: supabase/schemas/20_projects.sql
GRANT EXECUTE ON FUNCTION "api"."project_get"(text) TO "authenticated", "postgres";

-- api.projects_list: supabase/schemas/20_projects.sql
REVOKE ALL ON FUNCTION "api"."projects_list"(integer, text) FROM PUBLIC;

-- api.projects_list: supabase/schemas/20_projects.sql
GRANT EXECUTE ON FUNCTION "api"."projects_list"(integer, text) TO "authenticated", "postgres";

-- api.user_projects: supabase/schemas/20_projects.sql
REVOKE ALL ON FUNCTION "api"."user_projects"(text, integer, text) FROM PUBLIC;

-- api.user_projects: supabase/schemas/20_projects.sql
GRANT EXECUTE ON FUNCTION "api"."user_projects"(text, integer, text) TO "authenticated", "postgres";

-- app.project_page: supabase/schemas/70_rendering.sql
REVOKE ALL ON FUNCTION "app"."project_page"(uuid, integer, text) FROM PUBLIC;

-- app.project_page: supabase/schemas/70_rendering.sql
GRANT EXECUTE ON FUNCTION "app"."project_page"(uuid, integer, text) TO "authenticated", "postgres";
