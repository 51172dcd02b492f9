-- OAuth 2.0 authorization server (issue 16): sign-in for the consent page, authorization codes
-- with PKCE, refresh-token rotation with reuse detection, introspection, revocation.
--
-- Clients and issued tokens live in 10_users_and_credentials.sql (app.oauth_clients,
-- app.oauth_tokens), where app.authenticate reads them. This file holds what only the protocol
-- needs. The HTTP side (functions/oauth/) hashes every secret before it gets here and makes one
-- call per request to one function below; each decides the whole request in its transaction
-- (a code is spent and its tokens written at once, so two racing exchanges of one code cannot
-- both succeed). Errors of the token, introspection and revocation endpoints are returned as
-- JSON ({error, error_description, status}), not raised: what a failed request records (a
-- replayed code revoking its tokens, a counted failure) must commit. Only hashes of login
-- codes, session ids, authorization codes and refresh tokens are stored.
--
-- These functions are called by the API's own (owner) connection, never by members: no grant.

-- Function bodies are not checked here: they call functions of earlier files. They are the
-- bodies the migrations created and checked, as test/schema.test.ts proves.
set check_function_bodies = off;

-- ============================================================================
-- Tables
-- ============================================================================
create table app.oauth_login_codes (
  code_hash  bytea primary key,
  user_id    uuid not null references app.users(id) on delete cascade,
  expires_at timestamptz not null,
  created_at timestamptz not null default now()
);
comment on table app.oauth_login_codes is
  'One-time sign-in codes for the local consent page, made by the operator CLI (`login-code --user U`): valid 10 minutes, deleted when used. In production the website''s Supabase Auth session signs members in instead (docs/oauth.md). No policy and no grant: only the API''s own connection and the operator CLI touch it.';
create index oauth_login_codes_user_id_idx on app.oauth_login_codes (user_id);
-- Expired codes are swept by expiry.
create index oauth_login_codes_expires_at_idx on app.oauth_login_codes (expires_at);

create table app.oauth_sessions (
  id_hash    bytea primary key,
  user_id    uuid not null references app.users(id) on delete cascade,
  expires_at timestamptz not null,
  created_at timestamptz not null default now()
);
comment on table app.oauth_sessions is
  'Signed-in members of the authorization pages (the consent page): the session cookie carries a random id, only its SHA-256 is stored. The consent form''s CSRF token is an HMAC of the id, so it needs no column. No policy and no grant: only the API''s own connection touches it.';
create index oauth_sessions_user_id_idx on app.oauth_sessions (user_id);
create index oauth_sessions_expires_at_idx on app.oauth_sessions (expires_at);

create table app.oauth_authorization_codes (
  id             uuid primary key default gen_random_uuid(),
  code_hash      bytea not null unique,
  client_id      uuid not null references app.oauth_clients(id) on delete cascade,
  user_id        uuid not null references app.users(id) on delete cascade,
  redirect_uri   text not null,
  scopes         text[] not null,
  code_challenge text,
  expires_at     timestamptz not null,
  used_at        timestamptz,
  created_at     timestamptz not null default now(),
  constraint oauth_authorization_codes_challenge_format check (code_challenge ~ '^[A-Za-z0-9_-]{43}$')
);
comment on table app.oauth_authorization_codes is
  'Codes a member granted on the consent page, by hash. Single use: used_at is set by the exchange and the row is kept until it expires, so a replayed code is recognised and the tokens it issued (family_id = id) are revoked (RFC 6749 section 4.1.2). No policy and no grant: only the API''s own connection touches it.';
comment on column app.oauth_authorization_codes.code_challenge is
  'The PKCE S256 challenge (RFC 7636), required of public clients; the exchange must present the verifier whose SHA-256 (base64url) it is.';
create index oauth_authorization_codes_client_id_idx on app.oauth_authorization_codes (client_id);
create index oauth_authorization_codes_user_id_idx on app.oauth_authorization_codes (user_id);
create index oauth_authorization_codes_expires_at_idx on app.oauth_authorization_codes (expires_at);

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

create table app.keyed_rate_limit_counters (
  action       text references app.rate_limits(action) on delete cascade,
  subject      text,
  window_start timestamptz,
  events       integer not null,
  last_at      timestamptz not null default now(),
  constraint keyed_rate_limit_counters_pkey primary key (action, subject, window_start)
);
comment on table app.keyed_rate_limit_counters is
  'Like app.rate_limit_counters, for limits whose subject is not a member: failed sign-ins and failed token requests per client address, before anyone is known (or per confidential client once it authenticated, app.oauth_failure_subject). Same sliding window (buckets of a tenth of the period), thresholds in app.rate_limits. No policy and no grant: only the API''s own connection touches it.';

-- ============================================================================
-- Helpers
-- ============================================================================
create function app.keyed_rate_limit(limited_action text, limited_subject text, record boolean)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  rule app.rate_limits;
  seen integer;
  wait_seconds integer;
  bucket timestamptz;
begin
  select * into rule from app.rate_limits r where r.action = limited_action;
  if rule.action is null then
    raise exception 'unknown rate-limited action %', limited_action;
  end if;
  if record then
    -- Only a recording call queues: checks alone (every request, successful ones included) never
    -- wait for each other, so one subject's requests are not serialized until commit.
    perform pg_advisory_xact_lock(hashtextextended('app.keyed_rate_limit ' || rule.action || ' ' || limited_subject, 0));
  end if;
  select coalesce(sum(c.events), 0)::integer into seen
  from app.keyed_rate_limit_counters c
  where c.action = rule.action and c.subject = limited_subject and c.last_at > now() - rule.per;
  if seen >= rule.max_events then
    select ceil(extract(epoch from aging.last_at + rule.per - now()))::integer into wait_seconds
    from (select c.last_at, sum(c.events) over (order by c.last_at, c.window_start) as aged
          from app.keyed_rate_limit_counters c
          where c.action = rule.action and c.subject = limited_subject and c.last_at > now() - rule.per) aging
    where aging.aged >= seen - rule.max_events + 1
    order by aging.last_at
    limit 1;
    return least(greatest(1, coalesce(wait_seconds, 1)), ceil(extract(epoch from rule.per))::integer);
  end if;
  if record then
    bucket := date_bin(rule.per / 10, now(), timestamptz '2000-01-01 00:00:00+00');
    insert into app.keyed_rate_limit_counters as c (action, subject, window_start, events, last_at)
    values (rule.action, limited_subject, bucket, 1, now())
    on conflict (action, subject, window_start) do update
      set events = c.events + 1, last_at = greatest(c.last_at, excluded.last_at);
    delete from app.keyed_rate_limit_counters c
    where c.action = rule.action and c.subject = limited_subject and c.last_at <= now() - rule.per;
  end if;
  return 0;
end;
$$;
comment on function app.keyed_rate_limit(text, text, boolean) is
  'The sliding-window limit of app.hit_rate_limit for a subject that is not a member (a client address): returns the seconds to wait when the subject is at its limit, else 0, and counts one event when `record`. Returns instead of raising, because the callers answer in RFC 6749''s error shape and the counted failure must commit with that answer. Asked once without recording before the work (refuse early), once recording after a failure: only failures count. Recording is serialized per action and subject by an advisory lock held to commit; a check alone takes no lock (it may miss a failure committing at that moment), so the successful requests of one address or client do not queue behind each other.';

create function app.oauth_error(code text, description text, status integer default 400, retry_after integer default null)
returns jsonb
language plpgsql
immutable
set search_path = ''
as $$
begin
  return jsonb_strip_nulls(jsonb_build_object('error', code, 'error_description', description, 'status', status, 'retry_after', retry_after));
end;
$$;
comment on function app.oauth_error(text, text, integer, integer) is
  'The RFC 6749 section 5.2 error the HTTP side answers, with its status (400, 401 for client authentication, 429), as the JSON the OAuth functions return. One constructor, so every endpoint answers the same shape. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

create function app.oauth_authenticate_client(presented_client_id text, presented_secret_hash text)
returns app.oauth_clients
language plpgsql
stable
set search_path = ''
as $$
declare
  result app.oauth_clients;
begin
  -- The hash is tested before it is decoded: PL/pgSQL plans its first calls with the arguments'
  -- values, and the planner decodes a constant wherever it stands, even in a branch no row takes.
  -- Anything but a SHA-256 in hex (functions/oauth/oauth.ts sends only that, or null)
  -- authenticates no client, where decoding it would raise an error.
  select c.* into result
  from app.oauth_clients c
  where c.client_id = presented_client_id
    and case when c.secret_hash is null then presented_secret_hash is null
             else presented_secret_hash ~ '^[0-9a-f]{64}$' and c.secret_hash = decode(presented_secret_hash, 'hex') end;
  return result;
end;
$$;
comment on function app.oauth_authenticate_client(text, text) is
  'The client, when the credentials authenticate it: a confidential client by its secret (compared as SHA-256 hashes, so the comparison''s timing tells nothing about the secret), a public client by presenting none (it has none; PKCE protects its codes). A public client sending a secret is refused too: it is not who it claims. Null row otherwise (invalid_client). Unknown or not authenticated: a row of nulls (callers test its id). PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

create function app.oauth_failure_subject(client app.oauth_clients, requester text)
returns text
language plpgsql
immutable
set search_path = ''
as $$
begin
  return case when client.id is not null and client.secret_hash is not null then 'client ' || client.client_id else requester end;
end;
$$;
comment on function app.oauth_failure_subject(app.oauth_clients, text) is
  'Whom the failed-request limit (oauth_token_failure) counts against: a confidential client that authenticated with its secret, by its client_id; anyone else (a failed client authentication, a public client, whose client_id anyone may send) by client address. So strangers failing at an address a confidential client shares (a cloud egress, or a spoofed X-Forwarded-For on the edge) cannot lock that client out, and its own failures limit only itself. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

create function app.oauth_pkce_matches(code_challenge text, code_verifier text)
returns boolean
language plpgsql
immutable
set search_path = ''
as $$
begin
  return code_challenge is null and code_verifier is null
      or (code_challenge is not null and code_verifier is not null
          and translate(encode(sha256(convert_to(code_verifier, 'UTF8')), 'base64'), '+/=', '-_') = code_challenge);
end;
$$;
comment on function app.oauth_pkce_matches(text, text) is
  'RFC 7636 S256: BASE64URL(SHA256(verifier)) = challenge. A code made without a challenge (a confidential client that sent none) takes no verifier, so a verifier cannot be added after the fact, nor one left out when a challenge was made. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

create function app.oauth_token_json(client app.oauth_clients, token app.oauth_tokens)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select jsonb_build_object(
    'sub', app.to_public_id('user', token.user_id),
    'jti', token.jti,
    'scope', array_to_string(token.scopes, ' '),
    'client_id', client.client_id,
    'first_party', client.first_party,
    'chat', client.chat_enabled,
    'expires_in', greatest(0, floor(extract(epoch from token.expires_at - now())))::integer));
end;
$$;
comment on function app.oauth_token_json(app.oauth_clients, app.oauth_tokens) is
  'What the HTTP side needs to sign a newly issued access token with exactly the claims app.authenticate and Realtime expect (sub, jti, scope, client_id, first_party, chat) and to answer RFC 6749 section 5.1. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

create function app.oauth_lock_family(family uuid)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform pg_advisory_xact_lock(hashtextextended('app.oauth_family ' || family::text, 0));
end;
$$;
comment on function app.oauth_lock_family(uuid) is
  'Serializes what adds to a grant''s family (a refresh) and what revokes it, until commit. Without it a revocation''s UPDATE, whose snapshot predates a concurrent refresh''s insert, would miss the token that refresh issues, and that token (a thief''s, refreshing from another address while the app revokes or replays) would outlive the revocation. Taken before any row lock of the family, so the two never wait for each other in a cycle. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

create function app.oauth_revoke_family(family uuid)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform app.oauth_lock_family(family);
  -- A statement after the lock: its snapshot includes every token a refresh of this family committed.
  update app.oauth_tokens t set revoked_at = now() where t.family_id = family and t.revoked_at is null;
end;
$$;
comment on function app.oauth_revoke_family(uuid) is
  'Revokes every access and refresh token of one grant: what revocation, a replayed code and a replayed refresh token all do. Live access tokens stop at once (app.authenticate, the realtime sweep). Holds the family''s lock (app.oauth_lock_family), so a refresh running at the same time either finishes first and its new token is revoked here, or starts after and finds its refresh token revoked.';

-- ============================================================================
-- Row-level security and grants
-- ============================================================================
-- app.oauth_login_codes
alter table app.oauth_login_codes enable row level security;
-- No policy and no grant: only the API's own connection and the operator CLI touch it.

-- app.oauth_sessions
alter table app.oauth_sessions enable row level security;
-- No policy and no grant: only the API's own connection touches it.

-- app.oauth_authorization_codes
alter table app.oauth_authorization_codes enable row level security;
-- No policy and no grant: only the API's own connection touches it.

-- app.oauth_grants
alter table app.oauth_grants enable row level security;
-- No policy and no grant: only the API's own connection touches it.

-- app.keyed_rate_limit_counters
alter table app.keyed_rate_limit_counters enable row level security;
-- No policy and no grant: only the API's own connection touches it.

-- ============================================================================
-- Protocol functions (one per request; called by the API's own connection)
-- ============================================================================
create function app.oauth_authorize_context(presented_client_id text, session_hash text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select jsonb_build_object(
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
                       where s.id_hash = decode(session_hash, 'hex') and s.expires_at > now() and c.client_id = presented_client_id)));
end;
$$;
comment on function app.oauth_authorize_context(text, text) is
  'GET /oauth/authorize in one call: the client the request names (its name for the consent page, the registered redirect URIs the HTTP side must match exactly before it may redirect anywhere, and its default scopes for a request without `scope`), the member the session cookie signs in, if any, and the scopes that member already approved for this app (app.oauth_grants; null when none), which decide whether the consent page is shown again. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

create function app.oauth_start_session(login_code_hash text, member_id uuid, requester text, session_hash text, session_seconds integer)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  wait_seconds integer;
  member uuid := member_id;
begin
  -- Only codes are guessed: a member the HTTP side verified from the website's session is not
  -- refused for the failures of others at their address (a shared one, or a spoofed
  -- X-Forwarded-For on the edge).
  wait_seconds := case when login_code_hash is null then 0 else app.keyed_rate_limit('oauth_sign_in_failure', requester, false) end;
  if wait_seconds > 0 then
    return app.oauth_error('temporarily_unavailable', format('Too many failed sign-ins from your address. Try again in %s seconds.', wait_seconds), 429, wait_seconds);
  end if;
  if login_code_hash is not null then
    delete from app.oauth_login_codes c where c.code_hash = decode(login_code_hash, 'hex') and c.expires_at > now()
    returning c.user_id into member;
  elsif member is not null then
    member := (select u.id from app.users u where u.id = member);
  end if;
  if member is null then
    perform app.keyed_rate_limit('oauth_sign_in_failure', requester, true);
    return app.oauth_error('access_denied', 'That sign-in code is not valid: it may have expired or been used already.', 400);
  end if;
  delete from app.oauth_login_codes c where c.expires_at <= now();
  delete from app.oauth_sessions s where s.expires_at <= now();
  -- A member keeps at most their 10 newest sessions: signing in again and again (with the
  -- website's session, which is not single use) cannot grow the table.
  delete from app.oauth_sessions s
  where s.user_id = member
    and s.id_hash not in (select n.id_hash from app.oauth_sessions n where n.user_id = member order by n.created_at desc limit 9);
  insert into app.oauth_sessions (id_hash, user_id, expires_at)
  values (decode(session_hash, 'hex'), member, now() + make_interval(secs => session_seconds));
  return jsonb_build_object('member', app.to_public_id('user', member));
end;
$$;
comment on function app.oauth_start_session(text, uuid, text, text, integer) is
  'POST /oauth/login: spends a one-time sign-in code (or takes a member the HTTP side verified from a Supabase Auth session) and opens a session. Failed codes are counted per client address (oauth_sign_in_failure) and codes refused past the limit (a verified website session is not: there is nothing to guess); expired codes and sessions are swept here, and a member keeps at most 10 sessions (the oldest go), so repeated sign-ins cannot grow the table.';

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

create function app.oauth_exchange_code(presented_client_id text, presented_secret_hash text, requester text, presented_code_hash text,
                                        presented_redirect_uri text, code_verifier text, new_jti uuid, refresh_hash text, access_seconds integer)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  client app.oauth_clients;
  grant_row app.oauth_authorization_codes;
  token app.oauth_tokens;
  wait_seconds integer;
  subject text;
  failure jsonb;
begin
  -- Client authentication first: the limit counts a confidential client's failures against it,
  -- everyone else's against their address (app.oauth_failure_subject).
  client := app.oauth_authenticate_client(presented_client_id, presented_secret_hash);
  subject := app.oauth_failure_subject(client, requester);
  wait_seconds := app.keyed_rate_limit('oauth_token_failure', subject, false);
  if wait_seconds > 0 then
    return app.oauth_error('temporarily_unavailable', format('Too many failed token requests from your %s. Try again in %s seconds.',
                                                             case when subject = requester then 'address' else 'client' end, wait_seconds), 429, wait_seconds);
  end if;
  if client.id is null then
    failure := app.oauth_error('invalid_client', 'Client authentication failed: unknown client, wrong secret, or a secret from a public client.', 401);
  else
    select * into grant_row from app.oauth_authorization_codes a where a.code_hash = decode(presented_code_hash, 'hex') for update;
    if grant_row.id is null or grant_row.client_id <> client.id then
      failure := app.oauth_error('invalid_grant', 'The authorization code is not valid.');
    elsif grant_row.used_at is not null then
      -- A code seen twice was intercepted: whatever the first exchange issued is revoked.
      perform app.oauth_revoke_family(grant_row.id);
      failure := app.oauth_error('invalid_grant', 'The authorization code was already used; the tokens issued for it are revoked.');
    elsif grant_row.expires_at <= now() then
      failure := app.oauth_error('invalid_grant', 'The authorization code has expired.');
    elsif grant_row.redirect_uri is distinct from presented_redirect_uri then
      failure := app.oauth_error('invalid_grant', 'redirect_uri does not match the one of the authorization request.');
    elsif not app.oauth_pkce_matches(grant_row.code_challenge, code_verifier) then
      failure := app.oauth_error('invalid_grant', case when grant_row.code_challenge is null then 'This code was issued without PKCE: send no code_verifier.'
                                                  else 'PKCE verification failed: code_verifier does not match the code_challenge.' end);
    end if;
  end if;
  if failure is not null then
    perform app.keyed_rate_limit('oauth_token_failure', subject, true);
    return failure;
  end if;

  update app.oauth_authorization_codes a set used_at = now() where a.id = grant_row.id;
  insert into app.oauth_tokens (jti, client_id, user_id, scopes, refresh_token_hash, expires_at, family_id)
  values (new_jti, client.id, grant_row.user_id, grant_row.scopes, decode(refresh_hash, 'hex'),
          now() + make_interval(secs => access_seconds), grant_row.id)
  returning * into token;
  return app.oauth_token_json(client, token);
end;
$$;
comment on function app.oauth_exchange_code(text, text, text, text, text, text, uuid, text, integer) is
  'POST /oauth/token, grant_type=authorization_code, in one transaction: client authentication, the code (this client''s, unused, unexpired, row-locked so two racing exchanges cannot both win), the exact redirect_uri, PKCE; then the code is spent and the first token of its family written. A replayed code revokes that family. Failures are counted per client address, or per confidential client once it authenticated (oauth_token_failure, app.oauth_failure_subject).';

create function app.oauth_refresh(presented_client_id text, presented_secret_hash text, requester text, refresh_hash text,
                                  requested_scopes text[], new_jti uuid, new_refresh_hash text, access_seconds integer)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  client app.oauth_clients;
  old app.oauth_tokens;
  token app.oauth_tokens;
  wait_seconds integer;
  subject text;
  failure jsonb;
  rule app.rate_limits;
  seen integer;
begin
  -- Client authentication first: the limit counts a confidential client's failures against it,
  -- everyone else's against their address (app.oauth_failure_subject).
  client := app.oauth_authenticate_client(presented_client_id, presented_secret_hash);
  subject := app.oauth_failure_subject(client, requester);
  wait_seconds := app.keyed_rate_limit('oauth_token_failure', subject, false);
  if wait_seconds > 0 then
    return app.oauth_error('temporarily_unavailable', format('Too many failed token requests from your %s. Try again in %s seconds.',
                                                             case when subject = requester then 'address' else 'client' end, wait_seconds), 429, wait_seconds);
  end if;
  if client.id is null then
    failure := app.oauth_error('invalid_client', 'Client authentication failed: unknown client, wrong secret, or a secret from a public client.', 401);
  else
    -- The family's lock before the row's (as app.oauth_revoke_family takes it): a revocation of
    -- the family that began first has committed when the row is read below, and one that begins
    -- later waits for this refresh and then revokes what it issues.
    perform app.oauth_lock_family(t.family_id) from app.oauth_tokens t where t.refresh_token_hash = decode(refresh_hash, 'hex');
    select * into old from app.oauth_tokens t where t.refresh_token_hash = decode(refresh_hash, 'hex') for update;
    if old.jti is null or old.client_id <> client.id then
      failure := app.oauth_error('invalid_grant', 'The refresh token is not valid.');
    elsif old.refreshed_at is not null then
      -- A rotated refresh token presented again: one of its two holders is not the app.
      perform app.oauth_revoke_family(old.family_id);
      failure := app.oauth_error('invalid_grant', 'The refresh token was already used; every token of this grant is revoked. Sign in again.');
    elsif old.revoked_at is not null then
      failure := app.oauth_error('invalid_grant', 'The refresh token was revoked.');
    elsif old.created_at <= now() - interval '90 days' then
      failure := app.oauth_error('invalid_grant', 'The refresh token has expired. Sign in again.');
    elsif requested_scopes is not null and not (requested_scopes <@ old.scopes) then
      failure := app.oauth_error('invalid_scope', 'A refresh may narrow the scope, never widen it: request only scopes of the original grant.');
    end if;
  end if;
  if failure is not null then
    perform app.keyed_rate_limit('oauth_token_failure', subject, true);
    return failure;
  end if;

  -- Every refresh writes a row: bounded like every write that grows a table, per member and
  -- app (counted from the tokens themselves, by the user_id index). Per app, not per member: one
  -- app refreshing as fast as the limit allows must not stop the member's other apps from
  -- refreshing (their access tokens expire in 15 minutes).
  select * into rule from app.rate_limits r where r.action = 'oauth_refresh';
  perform pg_advisory_xact_lock(hashtextextended('app.oauth_refresh ' || old.user_id::text || ' ' || client.id::text, 0));
  select count(*) into seen from app.oauth_tokens t where t.user_id = old.user_id and t.client_id = client.id and t.created_at > now() - rule.per;
  if seen >= rule.max_events then
    return app.oauth_error('temporarily_unavailable', format('Too many tokens: at most %s per hour for one member and app.', rule.max_events), 429, 60);
  end if;

  update app.oauth_tokens t set refreshed_at = now() where t.jti = old.jti;
  insert into app.oauth_tokens (jti, client_id, user_id, scopes, refresh_token_hash, expires_at, family_id)
  values (new_jti, client.id, old.user_id, coalesce(requested_scopes, old.scopes), decode(new_refresh_hash, 'hex'),
          now() + make_interval(secs => access_seconds), old.family_id)
  returning * into token;
  return app.oauth_token_json(client, token);
end;
$$;
comment on function app.oauth_refresh(text, text, text, text, text[], uuid, text, integer) is
  'POST /oauth/token, grant_type=refresh_token: rotation. The presented refresh token (this client''s, live, at most 90 days old; its family locked against a concurrent revocation, then its row locked) is spent and a new access and refresh token of the same family issued, with the same scopes or fewer (invalid_scope for more). A spent refresh token presented again revokes the whole family, live access tokens included. The previous access token stays valid until it expires (revoke it to end it sooner). oauth_refresh bounds the tokens a member''s refreshes write per hour for each app (counting every token of the member and app, so one app cannot spend the limit of the others).';

create function app.oauth_introspect(presented_client_id text, presented_secret_hash text, requester text, token_jti uuid, refresh_hash text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  client app.oauth_clients;
  wait_seconds integer;
  subject text;
  result jsonb;
begin
  -- Client authentication first: the limit counts a confidential client's failures against it,
  -- everyone else's against their address (app.oauth_failure_subject).
  client := app.oauth_authenticate_client(presented_client_id, presented_secret_hash);
  subject := app.oauth_failure_subject(client, requester);
  wait_seconds := app.keyed_rate_limit('oauth_token_failure', subject, false);
  if wait_seconds > 0 then
    return app.oauth_error('temporarily_unavailable', format('Too many failed token requests from your %s. Try again in %s seconds.',
                                                             case when subject = requester then 'address' else 'client' end, wait_seconds), 429, wait_seconds);
  end if;
  if client.id is null then
    perform app.keyed_rate_limit('oauth_token_failure', subject, true);
    return app.oauth_error('invalid_client', 'Client authentication failed: unknown client, wrong secret, or a secret from a public client.', 401);
  end if;
  select jsonb_build_object(
    'active', true,
    'scope', array_to_string(t.scopes, ' '),
    'client_id', client.client_id,
    'username', u.username,
    'sub', app.to_public_id('user', t.user_id),
    'exp', floor(extract(epoch from case when token_jti is not null then t.expires_at else t.created_at + interval '90 days' end))::bigint,
    'iat', floor(extract(epoch from t.created_at))::bigint,
    'token_type', case when token_jti is not null then 'Bearer' else 'refresh_token' end)
  into result
  from app.oauth_tokens t
  join app.users u on u.id = t.user_id
  where t.client_id = client.id
    and t.revoked_at is null
    and case when token_jti is not null then t.jti = token_jti and t.expires_at > now()
             else t.refresh_token_hash = decode(refresh_hash, 'hex') and t.refreshed_at is null and t.created_at > now() - interval '90 days' end;
  return coalesce(result, jsonb_build_object('active', false));
end;
$$;
comment on function app.oauth_introspect(text, text, text, uuid, text) is
  'POST /oauth/introspect (RFC 7662): the token''s state for the client it was issued to. Anything expired, revoked, spent, unknown or issued to another client is {"active": false}, so a client cannot probe other apps'' tokens. Volatile only because a failed client authentication is counted.';

create function app.oauth_revoke(presented_client_id text, presented_secret_hash text, requester text, token_jti uuid, refresh_hash text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  client app.oauth_clients;
  family uuid;
  wait_seconds integer;
  subject text;
begin
  -- Client authentication first: the limit counts a confidential client's failures against it,
  -- everyone else's against their address (app.oauth_failure_subject).
  client := app.oauth_authenticate_client(presented_client_id, presented_secret_hash);
  subject := app.oauth_failure_subject(client, requester);
  wait_seconds := app.keyed_rate_limit('oauth_token_failure', subject, false);
  if wait_seconds > 0 then
    return app.oauth_error('temporarily_unavailable', format('Too many failed token requests from your %s. Try again in %s seconds.',
                                                             case when subject = requester then 'address' else 'client' end, wait_seconds), 429, wait_seconds);
  end if;
  if client.id is null then
    perform app.keyed_rate_limit('oauth_token_failure', subject, true);
    return app.oauth_error('invalid_client', 'Client authentication failed: unknown client, wrong secret, or a secret from a public client.', 401);
  end if;
  select t.family_id into family from app.oauth_tokens t
  where t.client_id = client.id
    and (t.jti = token_jti or t.refresh_token_hash = decode(refresh_hash, 'hex'));
  if family is not null then
    perform app.oauth_revoke_family(family);
  end if;
  return jsonb_build_object('revoked', family is not null);
end;
$$;
comment on function app.oauth_revoke(text, text, text, uuid, text) is
  'POST /oauth/revoke (RFC 7009): revokes the family of the access or refresh token, if it was issued to the authenticated client; an unknown, foreign or already revoked token changes nothing and is answered 200 all the same, as the RFC asks (nothing to learn from the answer).';

create function app.oauth_token_info(token_jti uuid, token_sub text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select jsonb_build_object(
    'resource_owner_id', app.to_public_id('user', t.user_id),
    'scope', to_jsonb(t.scopes),
    'expires_in', greatest(0, floor(extract(epoch from t.expires_at - now())))::integer,
    'application', jsonb_build_object('uid', c.client_id),
    'created_at', floor(extract(epoch from t.created_at))::bigint)
  from app.oauth_tokens t
  join app.oauth_clients c on c.id = t.client_id
  where t.jti = token_jti
    and t.user_id = app.from_public_id('user', token_sub)
    and t.revoked_at is null
    and t.expires_at > now());
end;
$$;
comment on function app.oauth_token_info(uuid, text) is
  'GET /oauth/token/info: what an access token (already verified: signature, expiry, audience) still is, in the shape of Doorkeeper''s token info, which clients of the API we mirror read; null once revoked or expired (401). PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- ============================================================================
-- The member's pages: authorized apps, revocation, sign-out
-- ============================================================================
create function app.oauth_member_apps(session_hash text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select jsonb_build_object(
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
            limit 500) listed), '[]'::jsonb)));
end;
$$;
comment on function app.oauth_member_apps(text) is
  'GET /oauth/apps: the member the session cookie signs in (null: the sign-in form) and the apps that act for them: those they approved (app.oauth_grants, with the scopes approved and when), and any other app holding a live refresh token for them (the operator''s issue-token), with its tokens'' scopes. Each with its last use: when the app last got a token for them (a sign-in or a refresh; access tokens live 15 minutes, so an app in use refreshes at least that often). Why not a column written on every API request: that would be a write, and a hot row, per request. The unapproved apps are found among the member''s tokens of the last 90 days (the refresh tokens'' lifetime) by the (user_id, client_id, created_at) index. At most 500 apps (clients are registered by the operator, so a member cannot grow the list). PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

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

create function app.oauth_end_session(session_hash text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
begin
  delete from app.oauth_sessions s where s.id_hash = decode(session_hash, 'hex');
  return jsonb_build_object('ended', found);
end;
$$;
comment on function app.oauth_end_session(text) is
  'POST /oauth/logout: signs the member out of the authorization pages by deleting the session, so the cookie (cleared too, but a copy may survive) opens nothing any more. Tokens already issued to apps are not touched: revoking an app is its own action. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- ============================================================================
-- Execute only where granted above
-- ============================================================================
revoke execute on all functions in schema app, api from public;
