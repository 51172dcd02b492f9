-- add oauth grants and default scopes
--
-- Issue 28 (items 1, 3, 5): default scopes per OAuth app and operator-given client ids;
-- app.refuse_scope for RFC 6750's insufficient_scope challenge; app.oauth_grants (remembered
-- consent, the member's page of authorized apps), Revoke and sign-out. Written by hand during a
-- quiet period (no database could be started) to match supabase/schemas; test/schema.test.ts
-- proves it does. Each statement is headed by the domain file of its object.

-- The diff lists functions by name, so a SQL function may come before one it calls: its body
-- is checked once everything is in place (by test/schema.test.ts), not statement by statement.
set local check_function_bodies = off;

-- app.oauth_clients: supabase/schemas/10_users_and_credentials.sql
alter table app.oauth_clients add column default_scopes text[] not null default '{public}';
alter table app.oauth_clients add constraint oauth_clients_client_id_format check (client_id ~ '^[A-Za-z0-9][A-Za-z0-9._~-]{0,127}$');
alter table app.oauth_clients add constraint oauth_clients_default_scopes_known check (
    cardinality(default_scopes) > 0
    and default_scopes <@ array['public', 'write', 'billing', 'notifications', 'chat']
    and (chat_enabled or not ('chat' = any (default_scopes))));
comment on column app.oauth_clients.default_scopes is
  'What an authorization request without `scope` (or with an empty one) asks the member for (RFC 6749 section 3.3: the server may use a pre-defined default). Per app, because a desktop client that sends an empty scope and then posts needs `public write`, while most apps should get only `public` unless they ask. Set by the operator (`create-oauth-client --default-scopes`); the consent page still shows each scope, so a default grants nothing the member did not approve.';

-- app.oauth_tokens: supabase/schemas/10_users_and_credentials.sql
drop index app.oauth_tokens_user_id_idx;
create index oauth_tokens_user_id_client_id_created_at_idx on app.oauth_tokens (user_id, client_id, created_at);

-- app.oauth_grants: supabase/schemas/85_oauth.sql
create table app.oauth_grants (
  user_id    uuid not null references app.users(id) on delete cascade,
  client_id  uuid not null references app.oauth_clients(id) on delete cascade,
  scopes     text[] not null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint oauth_grants_pkey primary key (user_id, client_id)
);
comment on table app.oauth_grants is
  'What a member approved on the consent page, per app: the union of the scopes they approved for it. Two uses: remembered consent (the same app asking again for these scopes or fewer gets its code without a second consent page; anything wider shows the page again) and the member''s list of authorized apps (GET /oauth/apps), where Revoke deletes the row and ends every token of the app for the member (app.oauth_revoke_grant). Operator-issued tokens (`issue-token`) write no row: no member approved them. No policy and no grant: only the API''s own connection touches it.';
create index oauth_grants_client_id_idx on app.oauth_grants (client_id);
alter table app.oauth_grants enable row level security;

-- app.refuse_scope: supabase/schemas/10_users_and_credentials.sql
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

revoke execute on function app.refuse_scope(text, text) from public;
grant execute on function app.refuse_scope(text, text) to service_role;

-- app.authenticate: supabase/schemas/10_users_and_credentials.sql
create or replace function app.authenticate(credential jsonb, access text)
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


-- app.oauth_authorize_context: supabase/schemas/85_oauth.sql
create or replace function app.oauth_authorize_context(presented_client_id text, session_hash text)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'client', (select jsonb_build_object('name', c.name, 'public', c.secret_hash is null, 'chat', c.chat_enabled,
                                         'redirect_uris', to_jsonb(c.redirect_uris), 'default_scopes', to_jsonb(c.default_scopes))
               from app.oauth_clients c where c.client_id = presented_client_id),
    'member', (select jsonb_build_object('id', app.to_public_id('user', u.id), 'username', u.username)
               from app.oauth_sessions s join app.users u on u.id = s.user_id
               where s.id_hash = decode(session_hash, 'hex') and s.expires_at > now()),
    'granted_scopes', (select to_jsonb(g.scopes)
                       from app.oauth_sessions s
                       join app.oauth_grants g on g.user_id = s.user_id
                       join app.oauth_clients c on c.id = g.client_id
                       where s.id_hash = decode(session_hash, 'hex') and s.expires_at > now() and c.client_id = presented_client_id))
$$;
comment on function app.oauth_authorize_context(text, text) is
  'GET /oauth/authorize in one call: the client the request names (its name for the consent page, the registered redirect URIs the HTTP side must match exactly before it may redirect anywhere, and its default scopes for a request without `scope`), the member the session cookie signs in, if any, and the scopes that member already approved for this app (app.oauth_grants; null when none), which decide whether the consent page is shown again.';


-- app.oauth_create_code: supabase/schemas/85_oauth.sql
-- A new argument (remembered, default false, so a caller of the old signature still works while
-- the functions deploy): a new signature, so the old function goes.
drop function app.oauth_create_code(text, text, text, text[], text, text, integer);
create function app.oauth_create_code(session_hash text, presented_client_id text, requested_redirect_uri text, granted_scopes text[],
                                      requested_challenge text, new_code_hash text, code_seconds integer, remembered boolean default false)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  member uuid;
  client app.oauth_clients;
  seen integer;
  rule app.rate_limits;
  approved text[];
begin
  select s.user_id into member from app.oauth_sessions s where s.id_hash = decode(session_hash, 'hex') and s.expires_at > now();
  select * into client from app.oauth_clients c where c.client_id = presented_client_id;
  if member is null or client.id is null or not (requested_redirect_uri = any (client.redirect_uris)) then
    -- 403: the HTTP side shows an error page and redirects nowhere.
    return app.oauth_error('access_denied', 'Your session has ended or the application is unknown; sign in and try again.', 403);
  end if;
  if 'chat' = any (granted_scopes) and not client.chat_enabled then
    return app.oauth_error('invalid_scope', 'The chat scope is for approved applications only.', 400);
  end if;
  if client.secret_hash is null and requested_challenge is null then
    return app.oauth_error('invalid_request', 'Public clients must use PKCE (code_challenge with code_challenge_method=S256).', 400);
  end if;
  -- Codes granted per member (oauth_authorize), counted like every write that grows a table.
  select * into rule from app.rate_limits r where r.action = 'oauth_authorize';
  perform pg_advisory_xact_lock(hashtextextended('app.oauth_create_code ' || member::text, 0));
  -- Remembered consent (no page was shown): the approval must still cover every scope asked,
  -- read here under its row's lock, not from what GET /oauth/authorize read a moment before. A
  -- Revoke (app.oauth_revoke_grant, which deletes this row first) that committed in between
  -- leaves no row: the member sees the consent page, and no code or approval comes back.
  if remembered then
    select g.scopes into approved from app.oauth_grants g where g.user_id = member and g.client_id = client.id for update;
    if approved is null or not (granted_scopes <@ approved) then
      return jsonb_build_object('consent_required', true);
    end if;
  end if;
  select count(*) into seen from app.oauth_authorization_codes a where a.user_id = member and a.created_at > now() - rule.per;
  if seen >= rule.max_events then
    return app.oauth_error('temporarily_unavailable', format('Too many authorizations: at most %s per %s minutes.', rule.max_events, extract(epoch from rule.per)::integer / 60), 429, 60);
  end if;
  delete from app.oauth_authorization_codes a where a.expires_at <= now() - interval '1 day';
  -- An approval on the page is remembered: the union of what the member approved for this app,
  -- in the order of the scopes' list. The row lock this takes is what app.oauth_revoke_grant
  -- takes first, so an approval and a revocation of the same app run one after the other. (A
  -- remembered answer approved nothing new: the row stays as it is.)
  if not remembered then
    insert into app.oauth_grants as g (user_id, client_id, scopes)
    values (member, client.id, granted_scopes)
    on conflict (user_id, client_id) do update
      set scopes = array(select k.scope from unnest(array['public', 'write', 'billing', 'notifications', 'chat']) with ordinality as k(scope, n)
                         where k.scope = any (g.scopes) or k.scope = any (excluded.scopes) order by k.n),
          updated_at = now();
  end if;
  insert into app.oauth_authorization_codes (code_hash, client_id, user_id, redirect_uri, scopes, code_challenge, expires_at)
  values (decode(new_code_hash, 'hex'), client.id, member, requested_redirect_uri, granted_scopes, requested_challenge, now() + make_interval(secs => code_seconds));
  return jsonb_build_object('ok', true);
end;
$$;
comment on function app.oauth_create_code(text, text, text, text[], text, text, integer, boolean) is
  'POST /oauth/authorize (Approve), and GET /oauth/authorize when the member already approved these scopes for this app (remembered): stores a code for the signed-in member, after checking again what the page checked (the client, the exact redirect URI, chat only for approved apps, PKCE for public clients), since the form comes back from the browser. An approval is remembered (app.oauth_grants, the union of the scopes approved); a remembered answer re-reads that approval under its row lock and answers {consent_required: true} instead of a code when it no longer covers the scopes (revoked meanwhile), so a Revoke racing a silent authorization is never undone by it. oauth_authorize limits codes per member (counted from the codes themselves, kept a day past expiry), remembered ones included, so a page that sends the member''s browser round the authorization loop cannot mint codes without bound. Expired codes older than a day are swept.';
revoke execute on function app.oauth_create_code(text, text, text, text[], text, text, integer, boolean) from public;


-- app.oauth_member_apps: supabase/schemas/85_oauth.sql
create function app.oauth_member_apps(session_hash text)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'member', (select jsonb_build_object('id', app.to_public_id('user', u.id), 'username', u.username)
               from app.oauth_sessions s join app.users u on u.id = s.user_id
               where s.id_hash = decode(session_hash, 'hex') and s.expires_at > now()),
    'apps', coalesce((
      select jsonb_agg(jsonb_build_object('client_id', listed.client_id, 'name', listed.name, 'scopes', to_jsonb(listed.scopes),
                                          'authorized_at', listed.authorized_at, 'last_used_at', listed.last_used_at)
                       order by coalesce(listed.last_used_at, listed.authorized_at) desc, listed.client_id)
      from (select c.client_id, c.name, held.scopes, held.authorized_at, last_use.newest as last_used_at
            from app.oauth_sessions s
            cross join lateral (
              select g.client_id, g.scopes, g.created_at as authorized_at
              from app.oauth_grants g
              where g.user_id = s.user_id
              union all
              -- An app holding a live refresh token with no approval on record (the operator's
              -- issue-token, or tokens from before approvals were recorded) is listed too, with
              -- the scopes of those tokens, so the member can see and revoke everything that acts
              -- for them. Such an app gets no remembered consent.
              select t.client_id, array_agg(distinct k.scope), min(t.created_at)
              from app.oauth_tokens t
              cross join lateral unnest(t.scopes) as k(scope)
              where t.user_id = s.user_id and t.revoked_at is null and t.refreshed_at is null
                and t.created_at > now() - interval '90 days'
                and not exists (select 1 from app.oauth_grants g where g.user_id = s.user_id and g.client_id = t.client_id)
              group by t.client_id
            ) held
            join app.oauth_clients c on c.id = held.client_id
            -- The newest token of the app for the member: one backward step of the (user_id,
            -- client_id, created_at) index, however many tokens the member's refreshes wrote.
            left join lateral (select max(t.created_at) as newest from app.oauth_tokens t
                               where t.user_id = s.user_id and t.client_id = held.client_id) last_use on true
            where s.id_hash = decode(session_hash, 'hex') and s.expires_at > now()
            order by coalesce(last_use.newest, held.authorized_at) desc
            limit 500) listed), '[]'::jsonb))
$$;
comment on function app.oauth_member_apps(text) is
  'GET /oauth/apps: the member the session cookie signs in (null: the sign-in form) and the apps that act for them: those they approved (app.oauth_grants, with the scopes approved and when), and any other app holding a live refresh token for them (the operator''s issue-token), with its tokens'' scopes. Each with its last use: when the app last got a token for them (a sign-in or a refresh; access tokens live 15 minutes, so an app in use refreshes at least that often). Why not a column written on every API request: that would be a write, and a hot row, per request. The unapproved apps are found among the member''s tokens of the last 90 days (the refresh tokens'' lifetime) by the (user_id, client_id, created_at) index. At most 500 apps (clients are registered by the operator, so a member cannot grow the list).';

revoke execute on function app.oauth_member_apps(text) from public;

-- app.oauth_revoke_grant: supabase/schemas/85_oauth.sql
create function app.oauth_revoke_grant(session_hash text, presented_client_id text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  member uuid;
  client_row uuid;
  family uuid;
begin
  select s.user_id into member from app.oauth_sessions s where s.id_hash = decode(session_hash, 'hex') and s.expires_at > now();
  if member is null then
    return app.oauth_error('access_denied', 'Your session has ended; sign in again.', 403);
  end if;
  select c.id into client_row from app.oauth_clients c where c.client_id = presented_client_id;
  if client_row is null then
    return jsonb_build_object('revoked', false);
  end if;
  -- First the grant (waits for an approval of this app under way, app.oauth_create_code), so
  -- the next authorization asks again.
  delete from app.oauth_grants g where g.user_id = member and g.client_id = client_row;
  -- Then codes approved but not exchanged yet: none becomes a token after this. An exchange
  -- under way holds its code's row: this waits for it, and the next statement sees its token.
  delete from app.oauth_authorization_codes a where a.user_id = member and a.client_id = client_row and a.used_at is null;
  -- Then every family of the app's tokens for the member (the code flow's and the operator's):
  -- live access tokens stop at once, refresh tokens stop refreshing, and the local Realtime
  -- gateway's sweep closes their channels (app.oauth_revoke_family takes each family's lock, so
  -- a refresh under way is either revoked here or finds its token revoked).
  for family in
    select distinct t.family_id from app.oauth_tokens t
    where t.user_id = member and t.client_id = client_row and t.revoked_at is null
  loop
    perform app.oauth_revoke_family(family);
  end loop;
  return jsonb_build_object('revoked', true);
end;
$$;
comment on function app.oauth_revoke_grant(text, text) is
  'POST /oauth/apps (Revoke): ends the signed-in member''s grant to one app: the remembered approval, the codes not yet exchanged, and every token the app holds for the member (each family revoked under its lock), whatever grant it came from. Only the member''s own: the member comes from the session, never from the form, so a forged form can name an app but not a member (and the HTTP side checks the CSRF token and Origin first). An unknown app changes nothing.';

revoke execute on function app.oauth_revoke_grant(text, text) from public;

-- app.oauth_end_session: supabase/schemas/85_oauth.sql
create function app.oauth_end_session(session_hash text)
returns jsonb
language sql
volatile
set search_path = ''
as $$
  with ended as (delete from app.oauth_sessions s where s.id_hash = decode(session_hash, 'hex') returning 1)
  select jsonb_build_object('ended', exists (select 1 from ended))
$$;
comment on function app.oauth_end_session(text) is
  'POST /oauth/logout: signs the member out of the authorization pages by deleting the session, so the cookie (cleared too, but a copy may survive) opens nothing any more. Tokens already issued to apps are not touched: revoking an app is its own action.';

revoke execute on function app.oauth_end_session(text) from public;
