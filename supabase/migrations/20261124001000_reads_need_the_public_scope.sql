-- Reads need the `public` scope (issue 11, item 3). A token granted only `billing` read its
-- member's private todos: every GET ran with access `read` and no scope was required. Reads
-- now need `public` (API keys always have it), writes `write`, and the scoped endpoints what
-- SPEC section 5 names. The HTTP layer also asks this function, with the route's access,
-- before it answers an input error, so that an unknown key gets 403 and never our input rules.

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
       and t.user_id::text = credential ->> 'sub'
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
