-- A member and the user search answered as text (issue 27)
--
-- GET /v1/users/{username} (and /me) and GET /v1/search/users rendered each member through
-- app.user_json, a SQL function with a SET clause, parsed and planned again on every call: a
-- member cost 0.8 ms of database time, twice a todo, and the search 2.4 ms. Both now render
-- through app.users_text (one statement planned once per session) and answer JSON text with URL
-- markers; their return type changes, so they are dropped and created again. Same JSON, value
-- for value: test/render-once.test.ts compares every member's answer with the renderer before
-- issue 27.

-- The diff lists functions by name, so a SQL function may come before one it calls: its body
-- is checked once everything is in place (by test/schema.test.ts), not statement by statement.
set local check_function_bodies = off;

-- api.search_users: supabase/schemas/10_users_and_credentials.sql
DROP FUNCTION "api"."search_users"(text);

-- api.user_get: supabase/schemas/10_users_and_credentials.sql
DROP FUNCTION "api"."user_get"(text);

-- api.search_users: supabase/schemas/10_users_and_credentials.sql
CREATE OR REPLACE FUNCTION api.search_users (
  query text
)
  RETURNS text
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
declare
  me uuid := (select auth.uid());
  -- Every name starting with the prefix lies in [prefix, prefix || U+10FFFF) in byte order
  -- (text_pattern_ops): a range each name index answers, in a generic plan too.
  prefix text := lower(btrim(coalesce(query, '')));
  beyond text := lower(btrim(coalesce(query, ''))) || chr(1114111);
begin
  return (
  with frequent as (
    select f.user_id, f.mentions from app.frequent_mentions() f
  ), candidates as (
    -- The frequent mentions, and the first 100 of each name index from the prefix on: at most
    -- 400 rows read whatever the number of members (issue 25). Each branch returns its rows
    -- (never joined back to every member), and LIMIT keeps each lateral a loop of index lookups.
    select x.u from frequent f, lateral (select u from app.users u where u.id = f.user_id limit 1) x
    union all
    select x.u from lateral (
      select u from app.users u where lower(u.username) ~>=~ prefix and lower(u.username) ~<~ beyond
      order by lower(u.username) using ~<~ limit 100) x where prefix <> ''
    union all
    select x.u from lateral (
      select u from app.users u where lower(u.first_name) ~>=~ prefix and lower(u.first_name) ~<~ beyond
      order by lower(u.first_name) using ~<~ limit 100) x where prefix <> ''
    union all
    select x.u from lateral (
      select u from app.users u where lower(u.last_name) ~>=~ prefix and lower(u.last_name) ~<~ beyond
      order by lower(u.last_name) using ~<~ limit 100) x where prefix <> ''
    union all
    select x.u from lateral (
      select u from app.users u
      where lower((u.first_name || ' ') || u.last_name) ~>=~ prefix and lower((u.first_name || ' ') || u.last_name) ~<~ beyond
      order by lower((u.first_name || ' ') || u.last_name) using ~<~ limit 100) x where prefix <> ''
  ), found as (
    select c.u, coalesce(f.mentions, 0) as mentions
    from (select distinct on ((candidates.u).id) candidates.u from candidates) c
    left join frequent f on f.user_id = (c.u).id
    where (c.u).id is distinct from me
      and case
        when prefix = '' then f.mentions is not null
        else starts_with(lower((c.u).username), prefix)
          or starts_with(lower((c.u).first_name), prefix)
          or starts_with(lower((c.u).last_name), prefix)
          or starts_with(lower(((c.u).first_name || ' ') || (c.u).last_name), prefix)
      end
    order by coalesce(f.mentions, 0) desc, (lower((c.u).username) = prefix) desc, length((c.u).username), lower((c.u).username)
    limit 10
  )
  select app.page_envelope_text(
    (select '[' || string_agg(ut.body, ',' order by f.mentions desc, (lower((f.u).username) = prefix) desc, length((f.u).username), lower((f.u).username)) || ']'
     from found f join app.users_text(array(select (x.u).id from found x)) ut on ut.id = (f.u).id),
    false,
    (select count(*) from found),
    null)
  );
end;
$function$;

-- api.user_get: supabase/schemas/10_users_and_credentials.sql
CREATE OR REPLACE FUNCTION api.user_get (
  user_ref text
)
  RETURNS text
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
declare
  result text;
begin
  select ut.body into result from app.users_text(array[app.resolve_user(user_ref)]) ut;
  if result is null then
    perform app.http_error(404, format('No user matches %L.', user_ref));
  end if;
  return result;
end;
$function$;

-- api.search_users: supabase/schemas/10_users_and_credentials.sql
COMMENT ON FUNCTION "api"."search_users"(text) IS 'GET /v1/search/users: mention autocomplete, as JSON text with URL markers (the users rendered by app.users_text in one call). Prefix match (starts_with: % and _ are characters) on username, first, last and full name; people the viewer mentions most in their 1000 newest todos come first, then an exact username, then shorter usernames; an empty query returns only those frequent mentions. At most 10, not paginated. Bounded whatever the number of members (issue 25: it read every member, 0.5 s at 500k): candidates are the frequent mentions and the first 100 matches of each name index in byte order, so the ranking is exact while no name has more than 100 matches, and among those 100 per name beyond.';

-- api.user_get: supabase/schemas/10_users_and_credentials.sql
COMMENT ON FUNCTION "api"."user_get"(text) IS 'GET /v1/users/{username} and GET /v1/users/me, as JSON text with URL markers (app.users_text, planned once per session; the HTTP layer puts the URLs in place). Not app.user_json: a SQL function with a SET clause is planned again on every call (0.8 ms for one member, twice a todo).';

-- api.search_users: supabase/schemas/10_users_and_credentials.sql
REVOKE ALL ON FUNCTION "api"."search_users"(text) FROM PUBLIC;

-- api.search_users: supabase/schemas/10_users_and_credentials.sql
GRANT EXECUTE ON FUNCTION "api"."search_users"(text) TO "authenticated", "postgres";

-- api.user_get: supabase/schemas/10_users_and_credentials.sql
REVOKE ALL ON FUNCTION "api"."user_get"(text) FROM PUBLIC;

-- api.user_get: supabase/schemas/10_users_and_credentials.sql
GRANT EXECUTE ON FUNCTION "api"."user_get"(text) TO "authenticated", "postgres";
