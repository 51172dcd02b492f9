-- Projects, their makers and followers.

-- ============================================================================
-- Tables
-- ============================================================================
create table app.projects (
  id uuid primary key default gen_random_uuid(),
  owner_id uuid not null references app.users (id) on delete cascade,
  slug text,
  name text not null check (length(name) between 1 and 100),
  pitch text,
  description text,
  hashtag text,
  website_url text,
  github_url text,
  privacy app.privacy not null default 'public',
  archived boolean not null default false,
  logo_key text,
  header_key text,
  header_color text,
  followers_count integer not null default 0 check (followers_count >= 0),
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint projects_slug_format check (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
  constraint projects_hashtag_format check (hashtag ~ '^[A-Za-z0-9_]{1,64}$')
);
comment on table app.projects is 'Something members build. #hashtag in a todo mentions it; its makers'' todos count toward it.';
comment on column app.projects.followers_count is 'Maintained by triggers on project_follows.';

create unique index projects_slug_key on app.projects (lower(slug));
create unique index projects_hashtag_key on app.projects (lower(hashtag));
create index projects_owner_id_idx on app.projects (owner_id);
-- Keyset pagination of GET /v1/projects: newest first.
create index projects_created_at_id_idx on app.projects (created_at desc, id desc);

create trigger _100_set_updated_at before update on app.projects
  for each row execute function app.tg__set_updated_at();

create table app.project_makers (
  project_id uuid not null references app.projects (id) on delete cascade,
  user_id uuid not null references app.users (id) on delete cascade,
  accepted boolean not null default true,
  created_at timestamptz not null default now(),
  primary key (project_id, user_id)
);
comment on table app.project_makers is 'Members who make a project. Only accepted makers count: their todos may belong to the project, and they see it whatever its privacy. The owner is always an accepted maker.';
create index project_makers_user_id_idx on app.project_makers (user_id, project_id) where accepted;

create table app.project_follows (
  user_id uuid not null references app.users (id) on delete cascade,
  project_id uuid not null references app.projects (id) on delete cascade,
  created_at timestamptz not null default now(),
  primary key (user_id, project_id)
);
comment on table app.project_follows is 'Members following a project. A follower may see a protected project.';
create index project_follows_project_id_idx on app.project_follows (project_id, user_id);

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

-- ============================================================================
-- Visibility helpers (security definer: policies call them without recursing)
-- ============================================================================
create function app.is_project_maker(project_id uuid, user_id uuid)
returns boolean
language sql
stable
security definer
set search_path = ''
as $$
  select exists (
    select 1 from app.project_makers m
    where m.project_id = is_project_maker.project_id and m.user_id = is_project_maker.user_id and m.accepted)
$$;
comment on function app.is_project_maker(uuid, uuid) is
  'Whether user_id is an accepted maker of project_id. Security definer so project policies can ask without recursing into project_makers policies.';
grant execute on function app.is_project_maker(uuid, uuid) to authenticated, service_role;

create function app.is_project_follower(project_id uuid, user_id uuid)
returns boolean
language sql
stable
security definer
set search_path = ''
as $$
  select exists (
    select 1 from app.project_follows f
    where f.project_id = is_project_follower.project_id and f.user_id = is_project_follower.user_id)
$$;
comment on function app.is_project_follower(uuid, uuid) is
  'Whether user_id follows project_id. Security definer for the same reason as is_project_maker.';
grant execute on function app.is_project_follower(uuid, uuid) to authenticated, service_role;

create function app.can_see_project(project_id uuid, privacy app.privacy, viewer_id uuid)
returns boolean
language sql
stable
set search_path = ''
as $$
  select privacy = 'public'
      or app.is_project_maker(project_id, viewer_id)
      or (privacy = 'protected' and app.is_project_follower(project_id, viewer_id))
$$;
comment on function app.can_see_project(uuid, app.privacy, uuid) is
  'The project privacy rule in one place: public everyone; protected makers and followers; private makers only.';
grant execute on function app.can_see_project(uuid, app.privacy, uuid) to authenticated, service_role;

-- ============================================================================
-- Row-level security
-- ============================================================================
alter table app.projects enable row level security;
alter table app.project_makers enable row level security;
alter table app.project_follows enable row level security;

create policy "Projects are visible to whoever their privacy admits" on app.projects
  for select to authenticated
  using (app.can_see_project(id, privacy, (select auth.uid())));
grant select on app.projects to authenticated;

create policy "Makers are visible with their project" on app.project_makers
  for select to authenticated
  using (exists (select 1 from app.projects p where p.id = project_id));
grant select on app.project_makers to authenticated;

create policy "Project follows are visible with their project" on app.project_follows
  for select to authenticated
  using (exists (select 1 from app.projects p where p.id = project_id));
create policy "Members follow projects they can see in their own name" on app.project_follows
  for insert to authenticated
  with check (user_id = (select auth.uid()) and (select app.can_write())
              and exists (select 1 from app.projects p where p.id = project_id));
create policy "Members unfollow projects in their own name" on app.project_follows
  for delete to authenticated
  using (user_id = (select auth.uid()) and (select app.can_write()));
grant select, insert, delete on app.project_follows to authenticated;

-- ============================================================================
-- Rendering
-- ============================================================================
create function app.project_json(p app.projects)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'id', app.to_public_id('proj', p.id),
    'slug', p.slug,
    'name', p.name,
    'pitch', p.pitch,
    'description', p.description,
    'created_at', p.created_at,
    'updated_at', p.updated_at,
    'hashtag', p.hashtag,
    'website_url', p.website_url,
    'github_url', p.github_url,
    'privacy', p.privacy,
    'archived', p.archived,
    'url', app.public_url() || '/projects/' || coalesce(p.slug, app.to_public_id('proj', p.id)),
    'logo', case when p.logo_key is null
                 then jsonb_build_object('small', null, 'medium', null, 'large', null)
                 else app.image_set('logo', p.logo_key) end,
    'header', case when p.header_key is not null then app.image_set('header', p.header_key) end,
    'header_color', coalesce(p.header_color, app.default_header_color(p.id)),
    'owner', (select app.user_json(u) from app.users u where u.id = p.owner_id),
    'makers', coalesce((
      select jsonb_agg(app.user_json(u) order by u.id = p.owner_id desc, m.created_at, lower(u.username))
      from app.project_makers m join app.users u on u.id = m.user_id
      where m.project_id = p.id and m.accepted), '[]'::jsonb),
    'followers_count', p.followers_count,
    'following', exists (
      select 1 from app.project_follows f where f.project_id = p.id and f.user_id = (select auth.uid())))
$$;
comment on function app.project_json(app.projects) is
  'A project as the API renders it for the current viewer; makers list the owner first, then in the order they joined. Logo urls are null when no logo was uploaded (SPEC allows null there, unlike avatars).';
grant execute on function app.project_json(app.projects) to authenticated, service_role;

create function app.mentioned_project_json(p app.projects)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'id', app.to_public_id('proj', p.id),
    'slug', p.slug,
    'name', p.name,
    'hashtag', p.hashtag,
    'url', app.public_url() || '/projects/' || coalesce(p.slug, app.to_public_id('proj', p.id)),
    'logo', case when p.logo_key is null
                 then jsonb_build_object('small', null, 'medium', null, 'large', null)
                 else app.image_set('logo', p.logo_key) end)
$$;
comment on function app.mentioned_project_json(app.projects) is
  'The slim MentionedProject shape: no makers or counters, so a todo with many #tags stays cheap.';
grant execute on function app.mentioned_project_json(app.projects) to authenticated, service_role;

create function app.resolve_project(ref text)
returns uuid
language sql
stable
set search_path = ''
as $$
  select p.id from app.projects p where p.id = app.from_public_id('proj', ref)
  union all
  select p.id from app.projects p where ref !~ '^proj_' and lower(p.slug) = lower(ref)
  limit 1
$$;
comment on function app.resolve_project(text) is
  'The uuid named by a {project_id} path parameter (proj_ id or slug), or null. Runs as the caller, so a project the viewer may not see is null, which the API answers with 404.';
grant execute on function app.resolve_project(text) to authenticated, service_role;

-- ============================================================================
-- Execute only where granted above (see the first migration)
-- ============================================================================
revoke execute on all functions in schema app, api from public;
