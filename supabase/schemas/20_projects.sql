-- Projects: makers, followers and who may see a project.
--
-- A project has makers (its owner is one) and followers; its privacy decides who sees it
-- (app.can_see_project) and its todos (app.is_project_insider). Following a protected project
-- is a request a maker answers. Rendering is in 70_rendering.sql.

-- Function bodies are not checked here: they call functions of later files (the renderers
-- of 70_rendering.sql) and sections. They are the bodies the migrations created and checked,
-- as test/schema.test.ts proves.
set check_function_bodies = off;

-- ============================================================================
-- Tables
-- ============================================================================
create table app.projects (
  id              uuid primary key default gen_random_uuid(),
  owner_id        uuid not null references app.users(id) on delete cascade,
  slug            text,
  name            text not null check ((length(name) >= 1) and (length(name) <= 100)),
  pitch           text,
  description     text,
  hashtag         text,
  website_url     text,
  github_url      text,
  privacy         app.privacy not null default 'public',
  archived        boolean not null default false,
  logo_key        text,
  header_key      text,
  header_color    text,
  followers_count integer not null default 0 check (followers_count >= 0),
  created_at      timestamptz not null default now(),
  updated_at      timestamptz not null default now(),
  constraint projects_hashtag_format check (hashtag ~ '^[A-Za-z0-9_]{1,64}$'),
  constraint projects_slug_format check (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$')
);
comment on table app.projects is
  'Something members build. #hashtag in a todo mentions it; its makers'' todos count toward it.';
comment on column app.projects.followers_count is
  'Maintained by triggers on project_follows.';
create unique index projects_slug_key on app.projects (lower(slug));
create unique index projects_hashtag_key on app.projects (lower(hashtag));
create index projects_owner_id_idx on app.projects (owner_id);
-- Keyset pagination of GET /v1/projects: newest first.
create index projects_created_at_id_idx on app.projects (created_at desc, id desc);

create table app.project_makers (
  project_id uuid references app.projects(id) on delete cascade,
  user_id    uuid references app.users(id) on delete cascade,
  accepted   boolean not null default true,
  created_at timestamptz not null default now(),
  constraint project_makers_pkey primary key (project_id, user_id)
);
comment on table app.project_makers is
  'Members who make a project. Only accepted makers count: their todos may belong to the project, and they see it whatever its privacy. The owner is always an accepted maker.';
create index project_makers_user_id_idx on app.project_makers (user_id, project_id) where accepted;

create table app.project_follows (
  user_id    uuid references app.users(id) on delete cascade,
  project_id uuid references app.projects(id) on delete cascade,
  created_at timestamptz not null default now(),
  constraint project_follows_pkey primary key (user_id, project_id)
);
comment on table app.project_follows is
  'Members following a project: approved followers only. A public project (or one the member makes) is followed at once; a protected one is asked for (app.project_follow_requests) and a maker approves. A follower may see a protected project''s todos.';
create index project_follows_project_id_idx on app.project_follows (project_id, user_id);

create table app.project_follow_requests (
  user_id    uuid references app.users(id) on delete cascade,
  project_id uuid references app.projects(id) on delete cascade,
  created_at timestamptz not null default now(),
  constraint project_follow_requests_pkey primary key (user_id, project_id)
);
comment on table app.project_follow_requests is
  'Pending requests to follow a protected project, answered by any of its makers. A separate table for the reason app.user_follow_requests is: project_follows keeps meaning approved followers everywhere it is read.';
-- The primary key serves "which projects did I ask"; this serves a project's requests, oldest first.
create index project_follow_requests_project_id_idx on app.project_follow_requests (project_id, created_at, user_id);

-- ============================================================================
-- Helpers
-- ============================================================================
create function app.is_project_maker(project_id uuid, user_id uuid)
returns boolean
language plpgsql
stable
security definer
set search_path = ''
as $$
begin
  return exists (
    select 1 from app.project_makers m
    where m.project_id = is_project_maker.project_id and m.user_id = is_project_maker.user_id and m.accepted);
end;
$$;
comment on function app.is_project_maker(uuid, uuid) is
  'Whether user_id is an accepted maker of project_id. Security definer so project policies can ask without recursing into project_makers policies; PL/pgSQL so its plan is kept for the session.';
grant execute on function app.is_project_maker(uuid, uuid) to authenticated, service_role;

create function app.is_project_follower(project_id uuid, user_id uuid)
returns boolean
language plpgsql
stable
security definer
set search_path = ''
as $$
begin
  return exists (
    select 1 from app.project_follows f
    where f.project_id = is_project_follower.project_id and f.user_id = is_project_follower.user_id);
end;
$$;
comment on function app.is_project_follower(uuid, uuid) is
  'Whether user_id follows project_id. Security definer for the same reason as is_project_maker; PL/pgSQL so its plan is kept for the session.';
grant execute on function app.is_project_follower(uuid, uuid) to authenticated, service_role;

create function app.is_project_insider(project_id uuid, privacy app.privacy, viewer_id uuid)
returns boolean
language plpgsql
stable
security definer
set search_path = ''
as $$
begin
  return exists (
           select 1 from app.project_makers m
           where m.project_id = is_project_insider.project_id and m.user_id = viewer_id and m.accepted)
      or (privacy = 'protected' and exists (
           select 1 from app.project_follows f
           where f.project_id = is_project_insider.project_id and f.user_id = viewer_id));
end;
$$;
comment on function app.is_project_insider(uuid, app.privacy, uuid) is
  'Whether viewer_id may see the todos of a project that is not public: an accepted maker, or an (approved) follower of a protected one. Security definer so callers can ask without recursing into the makers'' and followers'' policies.';
grant execute on function app.is_project_insider(uuid, app.privacy, uuid) to authenticated, service_role;

create function app.can_see_project(project_id uuid, privacy app.privacy, viewer_id uuid)
returns boolean
language sql
stable
as $$
  select privacy <> 'private' or app.is_project_maker(project_id, viewer_id)
$$;
comment on function app.can_see_project(uuid, app.privacy, uuid) is
  'Inlined (no SET clause, no table access). Who may see a project itself (its profile, its mentions): public and protected ones everyone, as a protected member''s profile is (its todos are another matter: app.is_project_insider); private ones makers only. Names viewer_id once, so the policy''s (select auth.uid()) can be substituted; membership is asked only for private projects.';
grant execute on function app.can_see_project(uuid, app.privacy, uuid) to authenticated, service_role;

create function app.resolve_project(ref text)
returns uuid
language plpgsql
stable
set search_path = ''
as $$
begin
  if ref ~ '^proj_' then
    return (select p.id from app.projects p where p.id = app.from_public_id('proj', ref));
  end if;
  return (select p.id from app.projects p where lower(p.slug) = lower(ref));
end;
$$;
comment on function app.resolve_project(text) is
  'The uuid named by a {project_id} path parameter (proj_ id or slug), or null. Runs as the caller, so a project the viewer may not see is null, which the API answers with 404.';
grant execute on function app.resolve_project(text) to authenticated, service_role;

create function app.can_follow_project(project_id uuid, viewer_id uuid)
returns boolean
language plpgsql
stable
security definer
set search_path = ''
as $$
begin
  return (select exists (
    select 1 from app.projects p
    where p.id = can_follow_project.project_id
      and (p.privacy = 'public' or app.is_project_maker(p.id, viewer_id))));
end;
$$;
comment on function app.can_follow_project(uuid, uuid) is
  'Whether a member may follow a project at once: public ones, and any project they make. A protected project is asked for (app.project_follow_requests) and a maker approves; a private one only its makers follow. Security definer: a private project is not visible to others. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.can_follow_project(uuid, uuid) to authenticated, service_role;

create function app.lock_project_privacy(project_id uuid)
returns app.privacy
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  return (select p.privacy from app.projects p where p.id = lock_project_privacy.project_id for no key update);
end;
$$;
comment on function app.lock_project_privacy(uuid) is
  'A project''s privacy, its row locked until the transaction ends: a follow decides between following at once and asking by this value, and a privacy change (which approves or drops pending requests, app.tg_projects__answer_follow_requests) waits for it, or it for the change. The lock is the one the followers_count trigger takes anyway. Security definer: members cannot lock rows they may not update.';
grant execute on function app.lock_project_privacy(uuid) to authenticated;

-- ============================================================================
-- Row-level security and grants
-- ============================================================================
-- app.projects
alter table app.projects enable row level security;
create policy "Projects are visible to whoever their privacy admits" on app.projects
  for select to authenticated
  using (app.can_see_project(id, privacy, (select auth.uid())));
grant select on app.projects to authenticated;

-- app.project_makers
alter table app.project_makers enable row level security;
create policy "Makers are visible with their project" on app.project_makers
  for select to authenticated
  using (exists (select 1 from app.projects p where p.id = project_id));
grant select on app.project_makers to authenticated;

-- app.project_follows
alter table app.project_follows enable row level security;
-- A protected project's follower is one a maker approved: a member follows at once only a
-- public project or one they make; any other follow row is made by a maker, out of a request.
create policy "Members follow public projects; makers let in whom they approve" on app.project_follows
  for insert to authenticated
  with check ((select app.can_write())
              and ((user_id = (select auth.uid()) and app.can_follow_project(project_id, (select auth.uid())))
                   or (app.is_project_maker(project_id, (select auth.uid()))
                       and exists (select 1 from app.project_follow_requests r
                                   where r.user_id = project_follows.user_id and r.project_id = project_follows.project_id))));
create policy "Members unfollow projects in their own name" on app.project_follows
  for delete to authenticated
  using (user_id = (select auth.uid()) and (select app.can_write()));
create policy "Project follows are visible with their project" on app.project_follows
  for select to authenticated
  using (exists (select 1 from app.projects p where p.id = project_id));
grant insert, select, delete on app.project_follows to authenticated;

-- app.project_follow_requests
alter table app.project_follow_requests enable row level security;
create policy "Project follow requests are visible to requester and makers" on app.project_follow_requests
  for select to authenticated
  using (user_id = (select auth.uid()) or app.is_project_maker(project_id, (select auth.uid())));
create policy "Members ask to follow protected projects in their own name" on app.project_follow_requests
  for insert to authenticated
  with check (user_id = (select auth.uid()) and (select app.can_write())
              and exists (select 1 from app.projects p where p.id = project_id and p.privacy = 'protected')
              and not app.is_project_maker(project_id, (select auth.uid())));
create policy "Requesters withdraw and the project's makers answer" on app.project_follow_requests
  for delete to authenticated
  using ((user_id = (select auth.uid()) or app.is_project_maker(project_id, (select auth.uid()))) and (select app.can_write()));
grant select, delete on app.project_follow_requests to authenticated;
grant insert (user_id, project_id) on app.project_follow_requests to authenticated;

-- ============================================================================
-- Triggers
-- ============================================================================
-- The owner is a maker from the start, so "makers see it" needs no special case.
create function app.tg_projects__add_owner_as_maker()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  insert into app.project_makers (project_id, user_id, accepted)
  values (new.id, new.owner_id, true)
  on conflict (project_id, user_id) do update set accepted = true;
  return null;
end;
$$;
comment on function app.tg_projects__add_owner_as_maker() is
  'Makes the owner an accepted maker of a new project. Security definer: the maker list is not writable by members directly.';
create trigger _200_add_owner_as_maker after insert on app.projects
  for each row execute function app.tg_projects__add_owner_as_maker();

create trigger _100_set_updated_at before update on app.projects
  for each row execute function app.tg__set_updated_at();

-- ============================================================================
-- API functions
-- ============================================================================
create function api.project_get(project_ref text)
returns text
language plpgsql
stable
set search_path = ''
as $$
declare
  result text;
begin
  select pt.body into result from app.projects_text(array[app.resolve_project(project_ref)]) pt;
  if result is null then
    perform app.http_error(404, format('No project matches %L.', project_ref));
  end if;
  return result;
end;
$$;
comment on function api.project_get(text) is
  'GET /v1/projects/{project_id}: 404 also when the viewer may not see the project, so its existence does not leak. JSON text with URL markers (app.projects_text; the HTTP layer puts the URLs in place).';
grant execute on function api.project_get(text) to authenticated;

create function api.projects_list(page_limit integer, starting_after text)
returns text
language plpgsql
stable
set search_path = ''
as $$
begin
  return app.project_page(null, page_limit, starting_after);
end;
$$;
comment on function api.projects_list(integer, text) is
  'GET /v1/projects: every project the viewer may see, newest first. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined and was parsed and planned again on every call (20-40 us of a 1 ms page).';
grant execute on function api.projects_list(integer, text) to authenticated;

create function api.user_projects(user_ref text, page_limit integer, starting_after text)
returns text
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
comment on function api.user_projects(text, integer, text) is
  'GET /v1/users/{username}/projects and /v1/users/me/projects: projects the user is an accepted maker of, as far as the viewer may see them.';
grant execute on function api.user_projects(text, integer, text) to authenticated;

-- ============================================================================
-- Execute only where granted above
-- ============================================================================
revoke execute on all functions in schema app, api from public;
