-- Users and credentials: profiles, follows, API keys, OAuth, authentication.
--
-- A member is an app.users row keyed by the auth.users id. Credentials never leave the
-- database: API keys are stored as SHA-256 hashes, OAuth tokens by jti; app.authenticate
-- turns either into the claims every other function reads (app.claims()).

-- Function bodies are not checked here: they call functions of later files (the renderers
-- of 70_rendering.sql) and sections. They are the bodies the migrations created and checked,
-- as test/schema.test.ts proves.
set check_function_bodies = off;

-- ============================================================================
-- Tables
-- ============================================================================
create table app.users (
  id                  uuid primary key references auth.users(id) on delete cascade,
  username            text not null,
  first_name          text,
  last_name           text,
  bio                 text,
  location            text,
  website_url         text,
  time_zone           text not null default 'UTC' references app.time_zones(name) on delete restrict,
  dismissed_time_zone text references app.time_zones(name) on delete set null,
  privacy             app.privacy not null default 'public',
  subscription_active boolean not null default true,
  avatar_key          text,
  header_key          text,
  header_color        text,
  todos_count         integer not null default 0 check (todos_count >= 0),
  followers_count     integer not null default 0 check (followers_count >= 0),
  created_at          timestamptz not null default now(),
  updated_at          timestamptz not null default now(),
  streak_last_day     date,
  streak_length       integer not null default 0 check (streak_length >= 0),
  best_streak         integer not null default 0 check (best_streak >= 0),
  constraint users_username_format check ((username ~ '^[A-Za-z0-9_]{1,39}$') and (lower(username) <> 'me'))
);
comment on table app.users is
  'A member of the service: the public profile and settings of an auth.users row.';
comment on column app.users.subscription_active is
  'Whether the account has an active paid subscription; without one every request answers 401 with an upgrade URL (the `pro` field).';
comment on column app.users.todos_count is
  'Maintained by triggers on todos, so rendering a user never counts rows.';
comment on column app.users.followers_count is
  'Maintained by triggers on user_follows.';
comment on column app.users.streak_last_day is
  'Last covered local day of the most recent run of consecutive covered days.';
comment on column app.users.streak_length is
  'Length of the run ending at streak_last_day. The current streak is this while streak_last_day is today or yesterday in the member''s zone, else 0.';
-- Usernames are unique regardless of case: @Alice and @alice are one person.
create unique index users_username_key on app.users (lower(username));
-- Foreign keys to time_zones are indexed like every other, so a zone can be checked for use.
create index users_time_zone_idx on app.users (time_zone);
create index users_dismissed_time_zone_idx on app.users (dismissed_time_zone) where (dismissed_time_zone is not null);
-- Prefix search on names: text_pattern_ops lets LIKE 'x%' use the index under any collation
-- (Supabase's databases are not C-collated).
create index users_username_pattern_idx on app.users (lower(username) text_pattern_ops);
create index users_first_name_pattern_idx on app.users (lower(first_name) text_pattern_ops);
create index users_last_name_pattern_idx on app.users (lower(last_name) text_pattern_ops);
create index users_full_name_pattern_idx on app.users (lower((first_name || ' ') || last_name) text_pattern_ops);

create table app.user_follows (
  follower_id uuid references app.users(id) on delete cascade,
  followee_id uuid references app.users(id) on delete cascade,
  created_at  timestamptz not null default now(),
  constraint user_follows_pkey primary key (follower_id, followee_id),
  constraint user_follows_not_self check (follower_id <> followee_id)
);
comment on table app.user_follows is
  'Who follows whom: approved followers only. Following a public member makes a row at once; following a protected member asks (app.user_follow_requests) and the row is made when the member approves. A follower of a protected user may see their todos.';
-- The primary key serves "whom do I follow"; this serves "who follows me".
create index user_follows_followee_idx on app.user_follows (followee_id, follower_id);

create table app.user_follow_requests (
  requester_id uuid references app.users(id) on delete cascade,
  followee_id  uuid references app.users(id) on delete cascade,
  created_at   timestamptz not null default now(),
  constraint user_follow_requests_pkey primary key (requester_id, followee_id),
  constraint user_follow_requests_not_self check (requester_id <> followee_id)
);
comment on table app.user_follow_requests is
  'Pending requests to follow a protected member. A separate table, not a flag on user_follows: every rule that reads user_follows (the todos policy, followers_count, the todo totals, the timeline) keeps meaning approved followers without a change. Approving moves the row to user_follows; declining, withdrawing, muting the requester and the member turning private delete it; turning public approves them all.';
-- The primary key serves "whom did I ask"; this serves "who asks me", oldest first.
create index user_follow_requests_followee_idx on app.user_follow_requests (followee_id, created_at, requester_id);

create table app.api_keys (
  id         uuid primary key default gen_random_uuid(),
  user_id    uuid not null references app.users(id) on delete cascade,
  key_hash   bytea not null unique,
  read_only  boolean not null default false,
  created_at timestamptz not null default now()
);
comment on table app.api_keys is
  'API keys (svc_sk_…). Only the SHA-256 of a key is stored: a leaked table does not leak keys, and keys carry 256 random bits so no salt or slow hash is needed. No policy and no grant: members never touch this table; security definer functions do.';
create index api_keys_user_id_idx on app.api_keys (user_id);

create table app.oauth_clients (
  id            uuid primary key default gen_random_uuid(),
  client_id     text not null unique,
  secret_hash   bytea,
  name          text not null,
  first_party   boolean not null default false,
  chat_enabled  boolean not null default false,
  redirect_uris text[] not null default '{}',
  created_at    timestamptz not null default now(),
  default_scopes text[] not null default '{public}',
  -- Unreserved URI characters only, so an id travels in URLs, forms and JWT claims unencoded; no
  -- leading '-' or '.', so an id is never read as a command-line option or a path segment.
  constraint oauth_clients_client_id_format check (client_id ~ '^[A-Za-z0-9][A-Za-z0-9._~-]{0,127}$'),
  constraint oauth_clients_default_scopes_known check (
    cardinality(default_scopes) > 0
    and default_scopes <@ array['public', 'write', 'billing', 'notifications', 'chat']
    and (chat_enabled or not ('chat' = any (default_scopes))))
);
comment on table app.oauth_clients is
  'Applications that act for users through OAuth 2.0. first_party: our own apps (search, devices). chat_enabled: approved for the chat scope. No policy and no grant: members never touch this table; security definer functions do.';
comment on column app.oauth_clients.secret_hash is
  'SHA-256 of the client secret of a confidential client; null for a public client (a desktop or mobile app cannot keep a secret), which authenticates with nothing and must use PKCE.';
comment on column app.oauth_clients.redirect_uris is
  'Where authorization responses may go: a redirect_uri must equal one of these exactly (no prefix or pattern match, so no open redirect).';
comment on column app.oauth_clients.default_scopes is
  'What an authorization request without `scope` (or with an empty one) asks the member for (RFC 6749 section 3.3: the server may use a pre-defined default). Per app, because a desktop client that sends an empty scope and then posts needs `public write`, while most apps should get only `public` unless they ask. Set by the operator (`create-oauth-client --default-scopes`); the consent page still shows each scope, so a default grants nothing the member did not approve.';

create table app.oauth_tokens (
  jti                uuid primary key,
  client_id          uuid not null references app.oauth_clients(id) on delete cascade,
  user_id            uuid not null references app.users(id) on delete cascade,
  scopes             text[] not null,
  refresh_token_hash bytea unique,
  expires_at         timestamptz not null,
  revoked_at         timestamptz,
  created_at         timestamptz not null default now(),
  family_id          uuid not null default gen_random_uuid(),
  refreshed_at       timestamptz
);
comment on table app.oauth_tokens is
  'Every issued access token (a JWT) by its jti, with the refresh token issued beside it (its hash), so a token can be revoked before it expires and deleting a client or user ends its tokens. No policy and no grant: members never touch this table; security definer functions do.';
comment on column app.oauth_tokens.family_id is
  'The grant this token descends from: the authorization code''s id for tokens of the code flow (so a replayed code finds what it issued), shared by every token a refresh rotates out of it. Revoking (RFC 7009), a replayed code and a replayed refresh token revoke the whole family.';
comment on column app.oauth_tokens.refreshed_at is
  'When this row''s refresh token was exchanged for a new one (rotation). A refresh token presented again after that was stolen or leaked: the family is revoked.';
create index oauth_tokens_client_id_idx on app.oauth_tokens (client_id);
-- A member's tokens of one app, newest last: the refresh limit counts them, the authorized-apps
-- page reads each app's last use from the newest (app.oauth_member_apps), and user_id leads for
-- the foreign key.
create index oauth_tokens_user_id_client_id_created_at_idx on app.oauth_tokens (user_id, client_id, created_at);
create index oauth_tokens_family_id_idx on app.oauth_tokens (family_id);

-- ============================================================================
-- Helpers
-- ============================================================================
create function app.resolve_user(ref text)
returns uuid
language plpgsql
stable
set search_path = ''
as $$
begin
  if ref = 'me' then
    return auth.uid();
  elsif ref ~ '^user_[0-9a-f]{32}$' then
    return (select u.id from app.users u where u.id = app.from_public_id('user', ref));
  end if;
  return (select u.id from app.users u where lower(u.username) = lower(ref));
end;
$$;
comment on function app.resolve_user(text) is
  'The uuid named by a {username} path parameter: `me`, a user_ id, or a username (case-insensitive); null when nobody matches.';
grant execute on function app.resolve_user(text) to authenticated, service_role;

create function app.lock_member_privacy(member_id uuid)
returns app.privacy
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  return (select u.privacy from app.users u where u.id = member_id for no key update);
end;
$$;
comment on function app.lock_member_privacy(uuid) is
  'A member''s privacy, their row locked until the transaction ends: a follow decides between following at once, asking and refusing by this value, and a privacy change (which approves or drops pending requests, app.tg_users__answer_follow_requests) waits for it, or it for the change. The lock is the one the followers_count trigger takes anyway, so concurrent follows of one member queue as they did. Security definer: members cannot lock rows they may not update.';
grant execute on function app.lock_member_privacy(uuid) to authenticated;

-- The database role of our OAuth access tokens. Signed with the project's JWT secret, a token
-- with role `authenticated` would also be a Supabase session (PostgREST, Storage, Auth) past
-- our scopes and revocation; ours name `api_client` instead (with audience `todo-sharing-api`
-- and the public user id as `sub`, functions/lib/tokens.ts). Only Realtime may become it:
-- PostgREST (authenticator) and Storage are not granted it. It may read our realtime topics
-- and write the typing topics (grants and policies in 50_chat.sql), nothing else.
do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'api_client') then
    -- nologin: only Realtime ever acts as it, by switching to it for a token that names it.
    create role api_client nologin noinherit;
  end if;
  if exists (select 1 from pg_roles where rolname = 'supabase_realtime_admin') then
    -- Realtime's least-privilege runtime role (replacing supabase_admin) may switch to it.
    execute 'grant api_client to supabase_realtime_admin';
  end if;
end
$$;
grant usage on schema app to api_client;

-- Turning a credential into the claims of a request. The HTTP layer hashes an API key, or
-- verifies an OAuth JWT's signature and expiry, and passes the result here in the same
-- statement that runs the endpoint's function. This function decides everything that depends
-- on stored state: does the key or token still exist, is the subscription active, may this
-- credential do this kind of thing.
create function app.refuse_credential(message text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  raise exception using
    errcode = 'PT403',
    message = message,
    hint = 'credential refused';
end;
$$;
comment on function app.refuse_credential(text) is
  'Raises the 403 of a credential that does not exist (an unknown API key, a revoked or unknown token), as app.http_error would, with the hint ''credential refused'': the fair queue (functions/lib/admission.ts) then forgets whose the credential was, so a revoked key never again queues in its former member''s line. Volatile so it is never folded at plan time.';
grant execute on function app.refuse_credential(text) to service_role;

create function app.refuse_scope(message text, needed text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  raise exception using
    errcode = 'PT403',
    message = message,
    hint = 'insufficient_scope ' || needed;
end;
$$;
comment on function app.refuse_scope(text, text) is
  'Raises the 403 of an OAuth access token that lacks a scope the request needs, as app.http_error would, with the hint ''insufficient_scope <scopes>'': the HTTP layer answers it with `WWW-Authenticate: Bearer error="insufficient_scope", scope="<scopes>"` (RFC 6750 section 3.1), so a generic OAuth client knows to ask the member for that scope, while the status stays SPEC''s 403 and the body {"error": message}. Only for what a scope would fix: a third-party app refused a first-party endpoint gets a plain 403. Volatile so it is never folded at plan time.';
grant execute on function app.refuse_scope(text, text) to service_role;

create function app.authenticate(credential jsonb, access text)
returns jsonb
language plpgsql
stable
security definer
set search_path = ''
as $$
declare
  kind text := credential ->> 'kind';
  member_id uuid;
  subscribed boolean;
  read_only boolean := false;
  granted text[];
  first_party boolean := false;
  chat_approved boolean := false;
  may_write boolean;
  key_id uuid;
  app_client_id text;
begin
  if kind = 'api_key' then
    select k.user_id, k.read_only, u.subscription_active, k.id
      into member_id, read_only, subscribed, key_id
      from app.api_keys k
      join app.users u on u.id = k.user_id
     where k.key_hash = decode(credential ->> 'key_hash', 'hex');
    if member_id is null then
      perform app.refuse_credential('The API key is not valid.');
    end if;
    granted := case when read_only then array['public'] else array['public', 'write'] end;
  elsif kind = 'oauth' and coalesce(credential ->> 'jti', '') ~ '^[0-9a-f-]{36}$' then
    select t.user_id, t.scopes, c.first_party, c.chat_enabled, u.subscription_active, c.client_id
      into member_id, granted, first_party, chat_approved, subscribed, app_client_id
      from app.oauth_tokens t
      join app.oauth_clients c on c.id = t.client_id
      join app.users u on u.id = t.user_id
     where t.jti = (credential ->> 'jti')::uuid
       and t.user_id = app.from_public_id('user', credential ->> 'sub')
       and t.revoked_at is null
       and t.expires_at > now();
    if member_id is null then
      perform app.refuse_credential('The access token is not valid: it was revoked, has expired or was never issued.');
    end if;
  else
    perform app.http_error(403, 'Authentication required: send an API key or an OAuth access token.');
  end if;

  -- A lapsed account keeps what is not paid for (issue 28): billing, to see why access stopped,
  -- and its data rights: taking its data (exports) and leaving (account deletion).
  if not subscribed and access not in ('billing', 'export', 'account') then
    perform app.http_error(401, 'This account has no active subscription.');
  end if;

  may_write := 'write' = any (granted);

  if access = 'read' and not ('public' = any (granted)) then
    -- Reads show profiles and activity, which is what `public` grants; a token granted only
    -- billing or notifications reads nothing else (API keys always carry public).
    perform app.refuse_scope('This access token lacks the public scope.', 'public');
  elsif access in ('write', 'account') and not may_write then
    if kind = 'api_key' then
      perform app.http_error(403, 'This API key is read-only.');
    end if;
    perform app.refuse_scope('This access token lacks the write scope.', 'write');
  elsif access = 'upload' and not (may_write or ('chat' = any (granted) and chat_approved)) then
    -- Uploads serve todos and comments (write) and direct messages (chat: "send direct messages").
    if kind = 'api_key' then
      perform app.http_error(403, 'This API key is read-only.');
    end if;
    perform app.refuse_scope('This access token needs the write or the chat scope to upload.', 'write');
  elsif access in ('search', 'notifications', 'devices', 'chat') and kind <> 'oauth' then
    perform app.http_error(403, 'This endpoint requires an OAuth access token; API keys are not accepted.');
  elsif access = 'search' and not ('public' = any (granted) and first_party) then
    -- A scope helps only a first-party app; a third-party app gets no challenge to ask for one.
    if first_party then
      perform app.refuse_scope('Search is available to first-party apps with the public scope only.', 'public');
    end if;
    perform app.http_error(403, 'Search is available to first-party apps with the public scope only.');
  elsif access = 'notifications' and not ('notifications' = any (granted)) then
    perform app.refuse_scope('This access token lacks the notifications scope.', 'notifications');
  elsif access = 'devices' and not ('notifications' = any (granted) and first_party) then
    if first_party then
      perform app.refuse_scope('Devices are available to first-party apps with the notifications scope only.', 'notifications');
    end if;
    perform app.http_error(403, 'Devices are available to first-party apps with the notifications scope only.');
  elsif access = 'chat' and not ('chat' = any (granted) and chat_approved) then
    if chat_approved then
      perform app.refuse_scope('Direct messages need the chat scope from an approved application.', 'chat');
    end if;
    perform app.http_error(403, 'Direct messages need the chat scope from an approved application.');
  elsif access = 'export' and not (may_write and (kind = 'api_key' or first_party)) then
    -- A data export holds what no scope grants (the account's e-mail address, the mutes): the
    -- member's own read-write key, or our own apps with write; never a third-party app.
    if kind = 'oauth' and first_party then
      perform app.refuse_scope('This access token lacks the write scope.', 'write');
    end if;
    perform app.http_error(403, case
      when kind = 'api_key' then 'This API key is read-only.'
      when not may_write then 'This access token lacks the write scope.'
      else 'Data exports are available to API keys and first-party apps only.' end);
  elsif access = 'billing' and kind <> 'api_key' and not ('billing' = any (granted)) then
    -- API keys are the account's own (read-only ones too); tokens need the billing scope.
    perform app.refuse_scope('This access token lacks the billing scope.', 'billing');
  elsif access not in ('read', 'write', 'upload', 'search', 'notifications', 'devices', 'chat', 'export', 'billing', 'account') then
    raise exception 'unknown access kind %', access;
  end if;

  return jsonb_build_object(
    'sub', member_id,
    'role', 'authenticated',
    'kind', kind,
    'can_write', may_write,
    'scopes', to_jsonb(granted),
    'first_party', first_party,
    'chat', chat_approved,
    'api_key_id', key_id,
    'client_id', app_client_id);
end;
$$;


comment on function app.authenticate(jsonb, text) is
  'Resolves a credential ({kind: api_key, key_hash} or a verified OAuth JWT payload) into request claims, or raises 403/401. Why in SQL: the key lookup, the revocation check and the subscription check ride in the same statement as the endpoint itself, so a request stays one round trip. Order: unknown credential 403, lapsed subscription 401 (except for billing, which a lapsed account may read, and its data rights, export and account: a lapsed member may still take their data and leave), then what the credential may do 403: read (scope public), write (scope write), account (DELETE /v1/account: as write; api.account_delete refuses third-party apps), upload (write, or chat from an approved app), search (public, first-party), notifications, devices (first-party), chat (approved app), export (read-write API key, or write from a first-party app: an archive holds the e-mail address and mutes, which no scope grants), billing (any API key, or scope billing). The claims also name the credential (api_key_id, or the app''s client_id), so a request can record what made it (DELETE /v1/account). The HTTP layer also asks it before answering an input error (unknown credentials never see validation details). A scope an OAuth token lacks is refused through app.refuse_scope, so the 403 carries RFC 6750''s insufficient_scope challenge. Security definer: credentials have no policies for members.';
grant execute on function app.authenticate(jsonb, text) to service_role;

create function app.request_credential()
returns jsonb
language sql
stable
as $$
  select case app.claims() ->> 'kind'
    when 'api_key' then jsonb_build_object('kind', 'api_key', 'api_key_id', app.claims() -> 'api_key_id')
    when 'oauth' then jsonb_build_object('kind', 'oauth', 'client_id', app.claims() -> 'client_id')
  end
$$;
comment on function app.request_credential() is
  'Inlined (no SET clause, no table access). The credential of the current request as a record: the API key''s id, or the OAuth app''s client_id (as app.authenticate named them in the claims); null outside a request. Why: a member''s account deletion must say what asked for it, so the operator can tell the member''s own request from an app''s.';
grant execute on function app.request_credential() to authenticated;

create function app.credential_is_members_own()
returns boolean
language sql
stable
as $$
  select coalesce(app.claims() ->> 'kind' = 'api_key' or (app.claims() ->> 'first_party')::boolean, false)
$$;
comment on function app.credential_is_members_own() is
  'Inlined (no SET clause, no table access). Whether the request comes from the member themselves: one of their API keys, or a token of our own (first-party) app. A third-party app acts for the member only within its scopes, and no scope covers ending the account.';
grant execute on function app.credential_is_members_own() to authenticated;

-- ============================================================================
-- Row-level security and grants
-- ============================================================================
-- app.users
alter table app.users enable row level security;
create policy "Members update their own profile with a writing credential" on app.users
  for update to authenticated
  using (id = (select auth.uid()))
  with check (id = (select auth.uid()) and (select app.can_write()));
-- Profiles are public to members: privacy governs todos, not the existence of a person
-- (mentions, conversations and followers lists must be able to name them).
create policy "Profiles are visible to every signed-in member" on app.users
  for select to authenticated using (true);
grant select on app.users to authenticated;
grant update (time_zone, dismissed_time_zone) on app.users to authenticated;

-- app.user_follows
alter table app.user_follows enable row level security;
create policy "Follow relations are visible to every signed-in member" on app.user_follows
  for select to authenticated using (true);
-- A protected member's follower is one they approved: a member follows at once only a public
-- member; any other follow row is made by the followee, out of a pending request.
create policy "Members follow public members, and let in whom they approve" on app.user_follows
  for insert to authenticated
  with check ((select app.can_write())
              and ((follower_id = (select auth.uid())
                    and exists (select 1 from app.users u where u.id = followee_id and u.privacy = 'public'))
                   or (followee_id = (select auth.uid())
                       and exists (select 1 from app.user_follow_requests r
                                   where r.requester_id = user_follows.follower_id and r.followee_id = (select auth.uid())))));
create policy "Members unfollow in their own name" on app.user_follows
  for delete to authenticated
  using (follower_id = (select auth.uid()) and (select app.can_write()));
grant insert, select, delete on app.user_follows to authenticated;

-- app.user_follow_requests
alter table app.user_follow_requests enable row level security;
create policy "Follow requests are visible to requester and the member asked" on app.user_follow_requests
  for select to authenticated
  using (requester_id = (select auth.uid()) or followee_id = (select auth.uid()));
create policy "Members ask to follow protected members in their own name" on app.user_follow_requests
  for insert to authenticated
  with check (requester_id = (select auth.uid()) and (select app.can_write())
              and exists (select 1 from app.users u where u.id = followee_id and u.privacy = 'protected'));
create policy "Requesters withdraw and the member asked answers" on app.user_follow_requests
  for delete to authenticated
  using ((requester_id = (select auth.uid()) or followee_id = (select auth.uid())) and (select app.can_write()));
grant select, delete on app.user_follow_requests to authenticated;
grant insert (requester_id, followee_id) on app.user_follow_requests to authenticated;

-- app.api_keys
alter table app.api_keys enable row level security;
-- No policy and no grant: members never touch this table; security definer functions do.

-- app.oauth_clients
alter table app.oauth_clients enable row level security;
-- No policy and no grant: members never touch this table; security definer functions do.

-- app.oauth_tokens
alter table app.oauth_tokens enable row level security;
-- No policy and no grant: members never touch this table; security definer functions do.

-- ============================================================================
-- Triggers
-- ============================================================================
create trigger _100_set_updated_at before update on app.users
  for each row execute function app.tg__set_updated_at();

-- ============================================================================
-- API functions
-- ============================================================================
create function api.user_get(user_ref text)
returns text
language plpgsql
stable
set search_path = ''
as $$
declare
  result text;
begin
  select ut.body into result from app.users_text(array[app.resolve_user(user_ref)]) ut;
  if result is null then
    perform app.http_error(404, format('No user matches %L.', user_ref));
  end if;
  return result;
end;
$$;
comment on function api.user_get(text) is
  'GET /v1/users/{username} and GET /v1/users/me, as JSON text with URL markers (app.users_text, planned once per session; the HTTP layer puts the URLs in place). Not app.user_json: a SQL function with a SET clause is planned again on every call (0.8 ms for one member, twice a todo).';
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

create function app.frequent_mentions()
returns table(user_id uuid, mentions bigint)
language plpgsql
stable
security definer
set search_path = ''
as $$
declare
  recent uuid[];
begin
  -- The viewer's 1000 newest todos: whom they mention most is read from these, so a long history
  -- costs no more than a short one. EXECUTE plans with the viewer's id, so a member with many
  -- todos gets the ordered index scan that stops at 1000 (a generic plan sorted all of them).
  execute 'select array(select t.id from app.todos t where t.user_id = $1 order by t.created_at desc, t.id desc limit 1000)'
    into recent using (select auth.uid());
  return query
    select m.user_id, count(*)
      from unnest(recent) r(id) join app.todo_user_mentions m on m.todo_id = r.id
     group by m.user_id;
end;
$$;
comment on function app.frequent_mentions() is
  'Whom the current viewer mentions in their 1000 newest todos, and how often: the ranking of GET /v1/search/users (issue 25). Security definer so the mentions of the viewer''s own todos, which the viewer always sees, are read without their visibility policy per row: under it, the planner of a small table hashed every visible todo to check 1000 mentions (found with the covering indexes of issue 26). Acts only for auth.uid().';
grant execute on function app.frequent_mentions() to authenticated;

create function api.search_users(query text)
returns text
language plpgsql
stable
set search_path = ''
as $$
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
$$;
comment on function api.search_users(text) is
  'GET /v1/search/users: mention autocomplete, as JSON text with URL markers (the users rendered by app.users_text in one call). Prefix match (starts_with: % and _ are characters) on username, first, last and full name; people the viewer mentions most in their 1000 newest todos come first, then an exact username, then shorter usernames; an empty query returns only those frequent mentions. At most 10, not paginated. Bounded whatever the number of members (issue 25: it read every member, 0.5 s at 500k): candidates are the frequent mentions and the first 100 matches of each name index in byte order, so the ranking is exact while no name has more than 100 matches, and among those 100 per name beyond.';
grant execute on function api.search_users(text) to authenticated;

-- ============================================================================
-- Execute only where granted above
-- ============================================================================
revoke execute on all functions in schema app, api from public;
