-- Access tokens of their own (issue 11, item 9). OAuth access tokens were HS256 JWTs signed
-- with the project's JWT secret, with role and audience `authenticated` and the member's
-- auth.users id as `sub`: on Supabase an app's token was also a full session for PostgREST,
-- Storage and Auth, past its scopes and its revocation. Tokens now carry audience
-- `todo-sharing-api`, the member's public id (`user_…`) as `sub`, and role `api_client`:
--   * only Realtime may become api_client: PostgREST (login role authenticator) and Storage
--     (supabase_storage_admin) are not granted it, so they cannot switch to it, and Supabase
--     Auth refuses a non-uuid sub;
--   * Supabase Realtime (which checks only signature, exp and role) switches to it to run the
--     policies below, the only thing it may do: read our topics and write the typing topics.
--     It connects as supabase_admin (a superuser) today; its least-privilege runtime role
--     supabase_realtime_admin, where it exists, is granted api_client so that it can too;
--   * the API never uses the role: it checks the token (functions/lib/tokens.ts) and asks
--     app.authenticate, which now matches `sub` as a public id.

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

-- What the realtime.messages policies need, and nothing else: Realtime reads (probe rows,
-- broadcasts) and writes (typing) as this role, and the policies call two app functions.
grant usage on schema realtime to api_client;
grant select, insert on realtime.messages to api_client;
grant execute on function realtime.topic() to api_client;
grant usage on schema app to api_client;

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
begin
  if kind = 'api_key' then
    select k.user_id, k.read_only, u.subscription_active
      into member_id, read_only, subscribed
      from app.api_keys k
      join app.users u on u.id = k.user_id
     where k.key_hash = decode(credential ->> 'key_hash', 'hex');
    if member_id is null then
      perform app.http_error(403, 'The API key is not valid.');
    end if;
    granted := case when read_only then array['public'] else array['public', 'write'] end;
  elsif kind = 'oauth' and coalesce(credential ->> 'jti', '') ~ '^[0-9a-f-]{36}$' then
    select t.user_id, t.scopes, c.first_party, c.chat_enabled, u.subscription_active
      into member_id, granted, first_party, chat_approved, subscribed
      from app.oauth_tokens t
      join app.oauth_clients c on c.id = t.client_id
      join app.users u on u.id = t.user_id
     where t.jti = (credential ->> 'jti')::uuid
       and t.user_id = app.from_public_id('user', credential ->> 'sub')
       and t.revoked_at is null
       and t.expires_at > now();
    if member_id is null then
      perform app.http_error(403, 'The access token is not valid: it was revoked, has expired or was never issued.');
    end if;
  else
    perform app.http_error(403, 'Authentication required: send an API key or an OAuth access token.');
  end if;

  if not subscribed then
    perform app.http_error(401, 'This account has no active subscription.');
  end if;

  may_write := 'write' = any (granted);

  if access = 'read' and not ('public' = any (granted)) then
    -- Reads show profiles and activity, which is what `public` grants; a token granted only
    -- billing or notifications reads nothing else (API keys always carry public).
    perform app.http_error(403, 'This access token lacks the public scope.');
  elsif access = 'write' and not may_write then
    perform app.http_error(403, case kind
      when 'api_key' then 'This API key is read-only.'
      else 'This access token lacks the write scope.' end);
  elsif access = 'upload' and not (may_write or ('chat' = any (granted) and chat_approved)) then
    -- Uploads serve todos and comments (write) and direct messages (chat: "send direct messages").
    perform app.http_error(403, case kind
      when 'api_key' then 'This API key is read-only.'
      else 'This access token needs the write or the chat scope to upload.' end);
  elsif access in ('search', 'notifications', 'devices', 'chat') and kind <> 'oauth' then
    perform app.http_error(403, 'This endpoint requires an OAuth access token; API keys are not accepted.');
  elsif access = 'search' and not ('public' = any (granted) and first_party) then
    perform app.http_error(403, 'Search is available to first-party apps with the public scope only.');
  elsif access = 'notifications' and not ('notifications' = any (granted)) then
    perform app.http_error(403, 'This access token lacks the notifications scope.');
  elsif access = 'devices' and not ('notifications' = any (granted) and first_party) then
    perform app.http_error(403, 'Devices are available to first-party apps with the notifications scope only.');
  elsif access = 'chat' and not ('chat' = any (granted) and chat_approved) then
    perform app.http_error(403, 'Direct messages need the chat scope from an approved application.');
  elsif access not in ('read', 'write', 'upload', 'search', 'notifications', 'devices', 'chat') then
    raise exception 'unknown access kind %', access;
  end if;

  return jsonb_build_object(
    'sub', member_id,
    'role', 'authenticated',
    'kind', kind,
    'can_write', may_write,
    'scopes', to_jsonb(granted),
    'first_party', first_party,
    'chat', chat_approved);
end;
$$;


comment on function app.authenticate(jsonb, text) is
  'Resolves a credential ({kind: api_key, key_hash} or a verified OAuth JWT payload) into request claims, or raises 403/401. Why in SQL: the key lookup, the revocation check and the subscription check ride in the same statement as the endpoint itself, so a request stays one round trip. Order: unknown credential 403, lapsed subscription 401, then what the credential may do 403: read (scope public), write (scope write), upload (write, or chat from an approved app), search (public, first-party), notifications, devices (first-party), chat (approved app). The HTTP layer also asks it before answering an input error (unknown credentials never see validation details). Security definer: credentials have no policies for members.';

create or replace function app.realtime_may_join(topic text)
returns boolean
language plpgsql
stable
security definer
set search_path = ''
as $$
declare
  claims jsonb := coalesce(auth.jwt(), '{}'::jsonb);
  member_id uuid;
  conversation_ref text;
begin
  -- The connection's token must be one of our OAuth access tokens, still valid, with scope
  -- chat, from an app approved for chat: checked against the database, not just the JWT.
  select t.user_id into member_id
  from app.oauth_tokens t join app.oauth_clients c on c.id = t.client_id
  where coalesce(claims ->> 'jti', '') ~ '^[0-9a-f-]{36}$'
    and t.jti = (claims ->> 'jti')::uuid
    and t.user_id = app.from_public_id('user', claims ->> 'sub')
    and t.revoked_at is null and t.expires_at > now()
    and 'chat' = any (t.scopes) and c.chat_enabled;
  if member_id is null or topic is null then
    return false;
  end if;
  if topic like 'conversation:conversation\_%' then
    -- conversation:<id> (the server's events) or conversation:<id>:typing (the participants').
    conversation_ref := substr(topic, length('conversation:') + 1);
    if conversation_ref like '%:typing' then
      conversation_ref := left(conversation_ref, -length(':typing'));
    end if;
    return app.is_conversation_member(app.from_public_id('conversation', conversation_ref), member_id);
  end if;
  return topic = app.user_topic(member_id);
end;
$$;
comment on function app.realtime_may_join(text) is
  'Whether the Realtime connection (its JWT claims) may read a topic: a valid, unrevoked OAuth token with scope chat from a chat-approved app, and then a participant for conversation:<id> and conversation:<id>:typing, or the member themself for user:<id>. Security definer: tokens and memberships are not readable by members.';

grant execute on function app.realtime_may_join(text), app.realtime_may_send(text) to api_client;
revoke execute on function app.realtime_may_join(text), app.realtime_may_send(text) from authenticated;

drop policy "Participants with a chat token receive their conversations' and inbox broadcasts" on realtime.messages;
create policy "Participants with a chat token receive their conversations' and inbox broadcasts" on realtime.messages
  for select to api_client
  using (realtime.messages.extension = 'broadcast'
         and realtime.messages.topic = (select realtime.topic())
         and (select app.realtime_may_join(realtime.topic())));

drop policy "Participants with a chat token may broadcast on their conversations' typing topics only" on realtime.messages;
create policy "Participants with a chat token may broadcast on their conversations' typing topics only" on realtime.messages
  for insert to api_client
  with check (realtime.messages.extension = 'broadcast'
              and realtime.messages.topic = (select realtime.topic())
              and (select app.realtime_may_send(realtime.topic())));

create function app.api_client_missing_privileges()
returns text[]
language plpgsql
stable
set search_path = ''
as $$
declare
  missing text[] := array[]::text[];
begin
  -- Each privilege on its own: has_table_privilege with a list is true when any one is held.
  if not has_schema_privilege('api_client', 'realtime', 'usage') then missing := missing || 'usage on schema realtime'::text; end if;
  if not has_table_privilege('api_client', 'realtime.messages', 'select') then missing := missing || 'select on realtime.messages'::text; end if;
  if not has_table_privilege('api_client', 'realtime.messages', 'insert') then missing := missing || 'insert on realtime.messages'::text; end if;
  if not has_function_privilege('api_client', 'realtime.topic()', 'execute') then missing := missing || 'execute on realtime.topic()'::text; end if;
  if not has_function_privilege('api_client', 'app.realtime_may_join(text)', 'execute')
     or not has_function_privilege('api_client', 'app.realtime_may_send(text)', 'execute') then
    missing := missing || 'execute on app.realtime_may_join(text) and app.realtime_may_send(text)'::text;
  end if;
  return missing;
end;
$$;
comment on function app.api_client_missing_privileges() is
  'What the token role api_client lacks of what the realtime.messages policies need (empty when nothing). Why: on Supabase the realtime schema belongs to the platform, and where postgres has no grant option there a grant only warns; chat joins then fail closed. The migration that grants them checks with it, and an operator can ask it after a deploy.';
revoke execute on function app.api_client_missing_privileges() from public;

do $$
declare
  missing text[] := app.api_client_missing_privileges();
begin
  if cardinality(missing) > 0 then
    raise warning 'api_client lacks %: chat over Realtime is refused until it has them (docs/deploy.md, "Realtime")', array_to_string(missing, ', ');
  end if;
end
$$;
