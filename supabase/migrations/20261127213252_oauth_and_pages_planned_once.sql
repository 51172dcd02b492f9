-- The OAuth endpoints' and the web pages' functions planned once per session (issue 27)
--
-- As 20261127212559 did for the API's: a SQL function with a SET clause is parsed and planned
-- again in every transaction that calls it, so every request paid it. These serve the
-- authorization server (client authentication, PKCE, the token and its answer, token info, the
-- consent context, the apps page, sign-out, the rate limit's subject, a refresh family's lock)
-- and the public web pages (/@username, /todos/{n}, /projects/{slug}: anonymous visitors, link
-- previews: 1.468 -> 1.363 ms a /@username, local/bench/per-transaction.ts --kind page). All become
-- PL/pgSQL with the same SET clause, security and volatility.
-- app.oauth_authenticate_client answers a row of nulls for a client it does not authenticate (a
-- SQL function answered null): every caller tests its id. app.oauth_end_session deletes and
-- reads FOUND instead of a data-modifying WITH.
--
-- CREATE OR REPLACE only (the diff wrote DROP FUNCTION first): grants stay, nothing is locked.

set local check_function_bodies = off;

-- app.oauth_authenticate_client: supabase/schemas/85_oauth.sql
CREATE OR REPLACE FUNCTION app.oauth_authenticate_client (
  presented_client_id   text,
  presented_secret_hash text
)
  RETURNS app.oauth_clients
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
declare
  found app.oauth_clients;
begin
  select c.* into found
  from app.oauth_clients c
  where c.client_id = presented_client_id
    and case when c.secret_hash is null then presented_secret_hash is null
             else presented_secret_hash is not null and c.secret_hash = decode(presented_secret_hash, 'hex') end;
  return found;
end;
$function$;

-- app.oauth_authorize_context: supabase/schemas/85_oauth.sql
CREATE OR REPLACE FUNCTION app.oauth_authorize_context (
  presented_client_id text,
  session_hash        text
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
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
$function$;

-- app.oauth_end_session: supabase/schemas/85_oauth.sql
CREATE OR REPLACE FUNCTION app.oauth_end_session (
  session_hash text
)
  RETURNS jsonb
  LANGUAGE plpgsql
  SET search_path TO ''
  AS $function$
begin
  delete from app.oauth_sessions s where s.id_hash = decode(session_hash, 'hex');
  return jsonb_build_object('ended', found);
end;
$function$;

-- app.oauth_error: supabase/schemas/85_oauth.sql
CREATE OR REPLACE FUNCTION app.oauth_error (
  code        text,
  description text,
  status      integer DEFAULT 400,
  retry_after integer DEFAULT NULL::integer
)
  RETURNS jsonb
  LANGUAGE plpgsql
  IMMUTABLE
  SET search_path TO ''
  AS $function$
begin
  return jsonb_strip_nulls(jsonb_build_object('error', code, 'error_description', description, 'status', status, 'retry_after', retry_after));
end;
$function$;

-- app.oauth_failure_subject: supabase/schemas/85_oauth.sql
CREATE OR REPLACE FUNCTION app.oauth_failure_subject (
  client    app.oauth_clients,
  requester text
)
  RETURNS text
  LANGUAGE plpgsql
  IMMUTABLE
  SET search_path TO ''
  AS $function$
begin
  return case when client.id is not null and client.secret_hash is not null then 'client ' || client.client_id else requester end;
end;
$function$;

-- app.oauth_lock_family: supabase/schemas/85_oauth.sql
CREATE OR REPLACE FUNCTION app.oauth_lock_family (
  family uuid
)
  RETURNS void
  LANGUAGE plpgsql
  SET search_path TO ''
  AS $function$
begin
  perform pg_advisory_xact_lock(hashtextextended('app.oauth_family ' || family::text, 0));
end;
$function$;

-- app.oauth_member_apps: supabase/schemas/85_oauth.sql
CREATE OR REPLACE FUNCTION app.oauth_member_apps (
  session_hash text
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
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
$function$;

-- app.oauth_pkce_matches: supabase/schemas/85_oauth.sql
CREATE OR REPLACE FUNCTION app.oauth_pkce_matches (
  code_challenge text,
  code_verifier  text
)
  RETURNS boolean
  LANGUAGE plpgsql
  IMMUTABLE
  SET search_path TO ''
  AS $function$
begin
  return code_challenge is null and code_verifier is null
      or (code_challenge is not null and code_verifier is not null
          and translate(encode(sha256(convert_to(code_verifier, 'UTF8')), 'base64'), '+/=', '-_') = code_challenge);
end;
$function$;

-- app.oauth_token_info: supabase/schemas/85_oauth.sql
CREATE OR REPLACE FUNCTION app.oauth_token_info (
  token_jti uuid,
  token_sub text
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
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
$function$;

-- app.oauth_token_json: supabase/schemas/85_oauth.sql
CREATE OR REPLACE FUNCTION app.oauth_token_json (
  client app.oauth_clients,
  token  app.oauth_tokens
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
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
$function$;

-- app.web_page: supabase/schemas/70_rendering.sql
CREATE OR REPLACE FUNCTION app.web_page (
  kind text,
  ref  text
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SECURITY DEFINER
  SET search_path TO ''
  AS $function$
begin
  return (with web as (select app.web_url() as base, app.public_url() as api),
  member as (
    select u.* from app.users u
    where kind = 'user' and lower(u.username) = lower(ref) and u.privacy <> 'private'),
  todo as (
    select t.* from app.todos t
    where kind = 'todo' and ref ~ '^[0-9]{1,18}$' and t.number = ref::bigint and t.author_privacy = 'public'),
  project as (
    select p.* from app.projects p
    where kind = 'project' and (p.id = app.from_public_id('proj', ref) or lower(p.slug) = lower(ref)) and p.privacy <> 'private')
  select coalesce(
    (select jsonb_build_object(
       'kind', 'user', 'title', coalesce(nullif(btrim(concat_ws(' ', m.first_name, m.last_name)), ''), m.username),
       'username', m.username, 'bio', m.bio, 'url', web.base || '/@' || m.username,
       'image', app.picture_urls(web.api, 'avatar', m.avatar_key, coalesce(nullif(btrim(concat_ws(' ', m.first_name, m.last_name)), ''), m.username), coalesce(m.header_color, app.default_header_color(m.id))) ->> 'large',
       'todos_hidden', m.privacy <> 'public',
       'todos', case when m.privacy = 'public' then coalesce((
         select jsonb_agg(jsonb_build_object('body', t.body, 'created_at', t.created_at, 'url', web.base || '/todos/' || t.number) order by t.created_at desc)
         from (select * from app.todos t where t.user_id = m.id and t.author_privacy = 'public' order by t.created_at desc limit 20) t), '[]') else '[]' end)
     from member m, web),
    (select jsonb_build_object(
       'kind', 'todo', 'title', left(t.body, 80), 'body', t.body, 'created_at', t.created_at, 'url', web.base || '/todos/' || t.number,
       'author', jsonb_build_object('username', u.username, 'url', web.base || '/@' || u.username),
       'reactions_count', t.reactions_count, 'comments_count', t.comments_count,
       'attachments', coalesce((
         select jsonb_agg(jsonb_build_object('filename', a.filename, 'url', web.api || '/files/' || a.key) order by a.attached_at, a.id)
         from app.uploads a where a.todo_id = t.id), '[]'))
     from todo t join app.users u on u.id = t.user_id, web),
    (select jsonb_build_object(
       'kind', 'project', 'title', p.name, 'pitch', p.pitch, 'description', p.description,
       'url', web.base || '/projects/' || coalesce(p.slug, app.to_public_id('proj', p.id)),
       'image', app.picture_urls(web.api, 'logo', p.logo_key, p.name, coalesce(p.header_color, app.default_header_color(p.id))) ->> 'large',
       'todos_hidden', p.privacy <> 'public',
       'todos', case when p.privacy = 'public' then coalesce((
         select jsonb_agg(jsonb_build_object('body', t.body, 'created_at', t.created_at, 'url', web.base || '/todos/' || t.number) order by t.created_at desc)
         from (select t.* from app.todos t
               where t.project_id = p.id and t.author_privacy = 'public' order by t.created_at desc limit 20) t), '[]') else '[]' end)
     from project p, web)));
end;
$function$;

-- app.oauth_authenticate_client: supabase/schemas/85_oauth.sql
COMMENT ON FUNCTION "app"."oauth_authenticate_client"(text, text) IS 'The client, when the credentials authenticate it: a confidential client by its secret (compared as SHA-256 hashes, so the comparison''s timing tells nothing about the secret), a public client by presenting none (it has none; PKCE protects its codes). A public client sending a secret is refused too: it is not who it claims. Null row otherwise (invalid_client). Unknown or not authenticated: a row of nulls (callers test its id). PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.oauth_authorize_context: supabase/schemas/85_oauth.sql
COMMENT ON FUNCTION "app"."oauth_authorize_context"(text, text) IS 'GET /oauth/authorize in one call: the client the request names (its name for the consent page, the registered redirect URIs the HTTP side must match exactly before it may redirect anywhere, and its default scopes for a request without `scope`), the member the session cookie signs in, if any, and the scopes that member already approved for this app (app.oauth_grants; null when none), which decide whether the consent page is shown again. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.oauth_end_session: supabase/schemas/85_oauth.sql
COMMENT ON FUNCTION "app"."oauth_end_session"(text) IS 'POST /oauth/logout: signs the member out of the authorization pages by deleting the session, so the cookie (cleared too, but a copy may survive) opens nothing any more. Tokens already issued to apps are not touched: revoking an app is its own action. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.oauth_error: supabase/schemas/85_oauth.sql
COMMENT ON FUNCTION "app"."oauth_error"(text, text, integer, integer) IS 'The RFC 6749 section 5.2 error the HTTP side answers, with its status (400, 401 for client authentication, 429), as the JSON the OAuth functions return. One constructor, so every endpoint answers the same shape. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.oauth_failure_subject: supabase/schemas/85_oauth.sql
COMMENT ON FUNCTION "app"."oauth_failure_subject"(app.oauth_clients, text) IS 'Whom the failed-request limit (oauth_token_failure) counts against: a confidential client that authenticated with its secret, by its client_id; anyone else (a failed client authentication, a public client, whose client_id anyone may send) by client address. So strangers failing at an address a confidential client shares (a cloud egress, or a spoofed X-Forwarded-For on the edge) cannot lock that client out, and its own failures limit only itself. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.oauth_lock_family: supabase/schemas/85_oauth.sql
COMMENT ON FUNCTION "app"."oauth_lock_family"(uuid) IS 'Serializes what adds to a grant''s family (a refresh) and what revokes it, until commit. Without it a revocation''s UPDATE, whose snapshot predates a concurrent refresh''s insert, would miss the token that refresh issues, and that token (a thief''s, refreshing from another address while the app revokes or replays) would outlive the revocation. Taken before any row lock of the family, so the two never wait for each other in a cycle. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.oauth_member_apps: supabase/schemas/85_oauth.sql
COMMENT ON FUNCTION "app"."oauth_member_apps"(text) IS 'GET /oauth/apps: the member the session cookie signs in (null: the sign-in form) and the apps that act for them: those they approved (app.oauth_grants, with the scopes approved and when), and any other app holding a live refresh token for them (the operator''s issue-token), with its tokens'' scopes. Each with its last use: when the app last got a token for them (a sign-in or a refresh; access tokens live 15 minutes, so an app in use refreshes at least that often). Why not a column written on every API request: that would be a write, and a hot row, per request. The unapproved apps are found among the member''s tokens of the last 90 days (the refresh tokens'' lifetime) by the (user_id, client_id, created_at) index. At most 500 apps (clients are registered by the operator, so a member cannot grow the list). PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.oauth_pkce_matches: supabase/schemas/85_oauth.sql
COMMENT ON FUNCTION "app"."oauth_pkce_matches"(text, text) IS 'RFC 7636 S256: BASE64URL(SHA256(verifier)) = challenge. A code made without a challenge (a confidential client that sent none) takes no verifier, so a verifier cannot be added after the fact, nor one left out when a challenge was made. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.oauth_token_info: supabase/schemas/85_oauth.sql
COMMENT ON FUNCTION "app"."oauth_token_info"(uuid, text) IS 'GET /oauth/token/info: what an access token (already verified: signature, expiry, audience) still is, in the shape of Doorkeeper''s token info, which clients of the API we mirror read; null once revoked or expired (401). PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.oauth_token_json: supabase/schemas/85_oauth.sql
COMMENT ON FUNCTION "app"."oauth_token_json"(app.oauth_clients, app.oauth_tokens) IS 'What the HTTP side needs to sign a newly issued access token with exactly the claims app.authenticate and Realtime expect (sub, jti, scope, client_id, first_party, chat) and to answer RFC 6749 section 5.1. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

-- app.web_page: supabase/schemas/70_rendering.sql
COMMENT ON FUNCTION "app"."web_page"(text, text) IS 'What the web pages /@username, /todos/{n} and /projects/{slug} show to an anonymous visitor (they carry no credential): a public or protected member''s profile, with their 20 newest todos only when public; a todo of a public member; a public or protected project, with its 20 newest todos of public members only when public (todos.project_id: the API''s rule for a project''s todos, written by accepted makers; read down the (project_id, created_at) index, as the project is found by its lower(slug) index, so an anonymous page view never scans). Null (a 404 page) for private members and projects, other members'' todos and anything unknown. Security definer: the page has no member to run as, so the rules are the anonymous viewer''s, written out here. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
