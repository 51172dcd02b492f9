-- Users (profiles on top of auth.users), follows between users, and the credentials
-- that act for them: API keys and OAuth clients with their issued tokens.

-- ============================================================================
-- Tables
-- ============================================================================
create table app.users (
  id uuid primary key references auth.users (id) on delete cascade,
  username text not null,
  first_name text,
  last_name text,
  bio text,
  location text,
  website_url text,
  time_zone text not null default 'UTC' references app.time_zones (name) on delete restrict,
  dismissed_time_zone text references app.time_zones (name) on delete set null,
  privacy app.privacy not null default 'public',
  subscription_active boolean not null default true,
  avatar_key text,
  header_key text,
  header_color text,
  todos_count integer not null default 0 check (todos_count >= 0),
  followers_count integer not null default 0 check (followers_count >= 0),
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint users_username_format check (username ~ '^[A-Za-z0-9_]{1,39}$' and lower(username) <> 'me')
);
comment on table app.users is 'A member of the service: the public profile and settings of an auth.users row.';
comment on column app.users.subscription_active is 'Whether the account has an active paid subscription; without one every request answers 401 with an upgrade URL (the `pro` field).';
comment on column app.users.todos_count is 'Maintained by triggers on todos, so rendering a user never counts rows.';
comment on column app.users.followers_count is 'Maintained by triggers on user_follows.';

-- Usernames are unique regardless of case: @Alice and @alice are one person.
create unique index users_username_key on app.users (lower(username));

-- Foreign keys to time_zones are indexed like every other, so a zone can be checked for use.
create index users_time_zone_idx on app.users (time_zone);
create index users_dismissed_time_zone_idx on app.users (dismissed_time_zone) where dismissed_time_zone is not null;

create trigger _100_set_updated_at before update on app.users
  for each row execute function app.tg__set_updated_at();

create table app.user_follows (
  follower_id uuid not null references app.users (id) on delete cascade,
  followee_id uuid not null references app.users (id) on delete cascade,
  created_at timestamptz not null default now(),
  primary key (follower_id, followee_id),
  constraint user_follows_not_self check (follower_id <> followee_id)
);
comment on table app.user_follows is 'Who follows whom. A follower of a protected user may see their todos.';
-- The primary key serves "whom do I follow"; this serves "who follows me".
create index user_follows_followee_idx on app.user_follows (followee_id, follower_id);

create table app.api_keys (
  id uuid primary key default gen_random_uuid(),
  user_id uuid not null references app.users (id) on delete cascade,
  key_hash bytea not null,
  read_only boolean not null default false,
  created_at timestamptz not null default now(),
  constraint api_keys_key_hash_key unique (key_hash)
);
comment on table app.api_keys is 'API keys (svc_sk_…). Only the SHA-256 of a key is stored: a leaked table does not leak keys, and keys carry 256 random bits so no salt or slow hash is needed.';
create index api_keys_user_id_idx on app.api_keys (user_id);

create table app.oauth_clients (
  id uuid primary key default gen_random_uuid(),
  client_id text not null,
  secret_hash bytea not null,
  name text not null,
  first_party boolean not null default false,
  chat_enabled boolean not null default false,
  redirect_uris text[] not null default '{}',
  created_at timestamptz not null default now(),
  constraint oauth_clients_client_id_key unique (client_id)
);
comment on table app.oauth_clients is 'Applications that act for users through OAuth 2.0. first_party: our own apps (search, devices). chat_enabled: approved for the chat scope.';

create table app.oauth_tokens (
  jti uuid primary key,
  client_id uuid not null references app.oauth_clients (id) on delete cascade,
  user_id uuid not null references app.users (id) on delete cascade,
  scopes text[] not null,
  refresh_token_hash bytea,
  expires_at timestamptz not null,
  revoked_at timestamptz,
  created_at timestamptz not null default now(),
  constraint oauth_tokens_refresh_token_hash_key unique (refresh_token_hash)
);
comment on table app.oauth_tokens is 'Every issued access token (a JWT) by its jti, so a token can be revoked before it expires and deleting a client or user ends its tokens.';
create index oauth_tokens_client_id_idx on app.oauth_tokens (client_id);
create index oauth_tokens_user_id_idx on app.oauth_tokens (user_id);

-- ============================================================================
-- Row-level security
-- ============================================================================
alter table app.users enable row level security;
alter table app.user_follows enable row level security;
alter table app.api_keys enable row level security;
alter table app.oauth_clients enable row level security;
alter table app.oauth_tokens enable row level security;

-- Profiles are public to members: privacy governs todos, not the existence of a person
-- (mentions, conversations and followers lists must be able to name them).
create policy "Profiles are visible to every signed-in member" on app.users
  for select to authenticated using (true);
create policy "Members update their own profile with a writing credential" on app.users
  for update to authenticated
  using (id = (select auth.uid()))
  with check (id = (select auth.uid()) and (select app.can_write()));
grant select on app.users to authenticated;
grant update (time_zone, dismissed_time_zone) on app.users to authenticated;

create policy "Follow relations are visible to every signed-in member" on app.user_follows
  for select to authenticated using (true);
create policy "Members follow others in their own name" on app.user_follows
  for insert to authenticated
  with check (follower_id = (select auth.uid()) and (select app.can_write()));
create policy "Members unfollow in their own name" on app.user_follows
  for delete to authenticated
  using (follower_id = (select auth.uid()) and (select app.can_write()));
grant select, insert, delete on app.user_follows to authenticated;

-- Credentials have no policies for `authenticated`: only app.authenticate (security
-- definer) and the operator CLI read them.

-- ============================================================================
-- Rendering
-- ============================================================================
create function app.image_set(folder text, key text)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select case
    when key is null then jsonb_build_object(
      'small', app.public_url() || '/assets/default-' || folder || '-small.png',
      'medium', app.public_url() || '/assets/default-' || folder || '-medium.png',
      'large', app.public_url() || '/assets/default-' || folder || '-large.png')
    else jsonb_build_object(
      'small', app.public_url() || '/storage/' || key || '?size=small',
      'medium', app.public_url() || '/storage/' || key || '?size=medium',
      'large', app.public_url() || '/storage/' || key || '?size=large')
  end
$$;
comment on function app.image_set(text, text) is
  'The small/medium/large URLs of an avatar, logo or header. Why defaults instead of null for avatars: SPEC requires avatar strings, so a member without one gets the generic image.';
grant execute on function app.image_set(text, text) to authenticated, service_role;

create function app.user_json(u app.users)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'id', app.to_public_id('user', u.id),
    'username', u.username,
    'streak', 0,
    'best_streak', 0,
    'streaking', false,
    'created_at', u.created_at,
    'updated_at', u.updated_at,
    'privacy', u.privacy,
    'protected', u.privacy <> 'public',
    'first_name', u.first_name,
    'last_name', u.last_name,
    'bio', u.bio,
    'location', u.location,
    'website_url', u.website_url,
    'todos_count', u.todos_count,
    'time_zone', u.time_zone,
    'url', app.public_url() || '/@' || u.username,
    'avatar', app.image_set('avatar', u.avatar_key),
    'header', case when u.header_key is not null then app.image_set('header', u.header_key) end,
    'header_color', coalesce(u.header_color, app.default_header_color(u.id)),
    'followers_count', u.followers_count,
    'following', exists (
      select 1 from app.user_follows f where f.follower_id = (select auth.uid()) and f.followee_id = u.id),
    'follows_you', exists (
      select 1 from app.user_follows f where f.follower_id = u.id and f.followee_id = (select auth.uid())),
    'pro', u.subscription_active
  ) || case
    when u.id = (select auth.uid()) then jsonb_build_object('dismissed_time_zone', u.dismissed_time_zone)
    else '{}'::jsonb
  end
$$;
comment on function app.user_json(app.users) is
  'A user as the API renders it, seen by the current viewer (following, follows_you, and dismissed_time_zone only on one''s own record). Streak fields are filled in by the todos migration.';
grant execute on function app.user_json(app.users) to authenticated, service_role;

create function app.mentioned_user_json(u app.users)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'id', app.to_public_id('user', u.id),
    'username', u.username,
    'first_name', u.first_name,
    'last_name', u.last_name,
    'url', app.public_url() || '/@' || u.username,
    'avatar', app.image_set('avatar', u.avatar_key))
$$;
comment on function app.mentioned_user_json(app.users) is
  'The slim MentionedUser shape (mentions, notification actors): no counters, so it costs one row read.';
grant execute on function app.mentioned_user_json(app.users) to authenticated, service_role;

-- ============================================================================
-- Lookups
-- ============================================================================
create function app.resolve_user(ref text)
returns uuid
language sql
stable
set search_path = ''
as $$
  select case
    when ref = 'me' then (select auth.uid())
    when ref ~ '^user_[0-9a-f]{32}$' then (select u.id from app.users u where u.id = app.from_public_id('user', ref))
    else (select u.id from app.users u where lower(u.username) = lower(ref))
  end
$$;
comment on function app.resolve_user(text) is
  'The uuid named by a {username} path parameter: `me`, a user_ id, or a username (case-insensitive); null when nobody matches.';
grant execute on function app.resolve_user(text) to authenticated, service_role;

-- ============================================================================
-- Execute only where granted above (see the first migration)
-- ============================================================================
revoke execute on all functions in schema app, api from public;
