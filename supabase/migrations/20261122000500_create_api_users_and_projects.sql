-- Endpoints: users and projects.
--
-- Each api function is one endpoint. It runs as `authenticated` (security invoker), so
-- row-level security decides what exists for the viewer; the function raises 404/422
-- deliberately and returns the response body as JSON.

-- ============================================================================
-- Shared: the pagination envelope
-- ============================================================================
create function app.page_envelope(data jsonb, has_more boolean, total_count bigint, last_id text)
returns jsonb
language sql
immutable
set search_path = ''
as $$
  select jsonb_build_object(
    'data', coalesce(data, '[]'::jsonb),
    'has_more', has_more,
    'total_count', total_count,
    'after', case when has_more then last_id end)
$$;
comment on function app.page_envelope(jsonb, boolean, bigint, text) is
  'The envelope every paginated list returns: data, has_more, total_count, after (the id of the last item, to pass as starting_after; null on the last page). Why the last id as cursor: clients already hold it, and SPEC''s conversations list treats the cursor as an item that must exist.';
grant execute on function app.page_envelope(jsonb, boolean, bigint, text) to authenticated, service_role;

-- ============================================================================
-- Users
-- ============================================================================
create function api.user_get(user_ref text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  result jsonb;
begin
  select app.user_json(u) into result from app.users u where u.id = app.resolve_user(user_ref);
  if result is null then
    perform app.http_error(404, format('No user matches %L.', user_ref));
  end if;
  return result;
end;
$$;
comment on function api.user_get(text) is 'GET /v1/users/{username} and GET /v1/users/me.';
grant execute on function api.user_get(text) to authenticated;

create function api.user_update_me(patch jsonb)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  me app.users;
begin
  if patch ? 'time_zone' and not exists (select 1 from app.time_zones z where z.name = patch ->> 'time_zone') then
    perform app.http_error(422, 'time_zone must be an IANA time zone identifier, such as "Europe/Berlin".');
  end if;
  if patch ? 'dismissed_time_zone' and patch ->> 'dismissed_time_zone' is not null
     and not exists (select 1 from app.time_zones z where z.name = patch ->> 'dismissed_time_zone') then
    perform app.http_error(422, 'dismissed_time_zone must be an IANA time zone identifier, such as "Europe/Berlin".');
  end if;

  update app.users u set
    time_zone = case when patch ? 'time_zone' then patch ->> 'time_zone' else u.time_zone end,
    -- Setting time_zone clears a stored dismissal, unless the same request names one.
    dismissed_time_zone = case
      when patch ? 'dismissed_time_zone' then patch ->> 'dismissed_time_zone'
      when patch ? 'time_zone' then null
      else u.dismissed_time_zone end
  where u.id = (select auth.uid())
  returning * into me;

  if me.id is null then
    perform app.http_error(404, 'Your user record was not found.');
  end if;
  return app.user_json(me);
end;
$$;
comment on function api.user_update_me(jsonb) is
  'PATCH /v1/users/me. Takes the validated JSON patch so that "absent" and "null" stay distinct. Zones are checked against app.time_zones (422).';
grant execute on function api.user_update_me(jsonb) to authenticated;

-- ============================================================================
-- Projects
-- ============================================================================
create function api.project_get(project_ref text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  result jsonb;
begin
  select app.project_json(p) into result from app.projects p where p.id = app.resolve_project(project_ref);
  if result is null then
    perform app.http_error(404, format('No project matches %L.', project_ref));
  end if;
  return result;
end;
$$;
comment on function api.project_get(text) is 'GET /v1/projects/{project_id}: 404 also when the viewer may not see the project, so its existence does not leak.';
grant execute on function api.project_get(text) to authenticated;

create function app.project_page(maker_id uuid, page_limit integer, starting_after text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  anchor app.projects;
  result jsonb;
begin
  if starting_after is not null then
    select p.* into anchor from app.projects p where p.id = app.from_public_id('proj', starting_after);
    if anchor.id is null then
      perform app.http_error(404, format('starting_after: no project matches %L.', starting_after));
    end if;
  end if;

  with candidates as materialized (
    select p.*
    from app.projects p
    where (maker_id is null or exists (
             select 1 from app.project_makers m
             where m.project_id = p.id and m.user_id = maker_id and m.accepted))
      and (anchor.id is null or (p.created_at, p.id) < (anchor.created_at, anchor.id))
    order by p.created_at desc, p.id desc
    limit page_limit + 1
  ), page as (
    select * from candidates order by created_at desc, id desc limit page_limit
  )
  select app.page_envelope(
    (select jsonb_agg(app.project_json(x::app.projects) order by x.created_at desc, x.id desc) from page x),
    (select count(*) from candidates) > page_limit,
    (select count(*) from app.projects p
      where maker_id is null or exists (
        select 1 from app.project_makers m where m.project_id = p.id and m.user_id = maker_id and m.accepted)),
    (select app.to_public_id('proj', x.id) from page x order by x.created_at, x.id limit 1))
  into result;
  return result;
end;
$$;
comment on function app.project_page(uuid, integer, text) is
  'One page of projects visible to the viewer, newest first, optionally only those maker_id makes. Keyset on (created_at, id); the cursor is the last project''s id.';
grant execute on function app.project_page(uuid, integer, text) to authenticated;

create function api.projects_list(page_limit integer, starting_after text)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select app.project_page(null, page_limit, starting_after)
$$;
comment on function api.projects_list(integer, text) is 'GET /v1/projects: every project the viewer may see, newest first.';
grant execute on function api.projects_list(integer, text) to authenticated;

create function api.user_projects(user_ref text, page_limit integer, starting_after text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  maker_id uuid := app.resolve_user(user_ref);
begin
  if maker_id is null then
    perform app.http_error(404, format('No user matches %L.', user_ref));
  end if;
  return app.project_page(maker_id, page_limit, starting_after);
end;
$$;
comment on function api.user_projects(text, integer, text) is 'GET /v1/users/{username}/projects and /v1/users/me/projects: projects the user is an accepted maker of, as far as the viewer may see them.';
grant execute on function api.user_projects(text, integer, text) to authenticated;

-- ============================================================================
-- Execute only where granted above (see the first migration)
-- ============================================================================
revoke execute on all functions in schema app, api from public;
