-- let lapsed members export their data and leave (issue 28, item 6): docs/security.md, "Data
-- rights of lapsed members". app.authenticate answers a lapsed account's exports (access
-- `export`) and its account deletion (access `account`, a write) instead of 401.
--
-- Written from supabase/schemas/10_users_and_credentials.sql (the desired state): the function
-- as it is there, verbatim; test/schema.test.ts proves the two agree.

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
    perform app.http_error(403, 'This access token lacks the public scope.');
  elsif access in ('write', 'account') and not may_write then
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
  elsif access = 'export' and not (may_write and (kind = 'api_key' or first_party)) then
    -- A data export holds what no scope grants (the account's e-mail address, the mutes): the
    -- member's own read-write key, or our own apps with write; never a third-party app.
    perform app.http_error(403, case
      when kind = 'api_key' then 'This API key is read-only.'
      when not may_write then 'This access token lacks the write scope.'
      else 'Data exports are available to API keys and first-party apps only.' end);
  elsif access = 'billing' and kind <> 'api_key' and not ('billing' = any (granted)) then
    -- API keys are the account's own (read-only ones too); tokens need the billing scope.
    perform app.http_error(403, 'This access token lacks the billing scope.');
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
  'Resolves a credential ({kind: api_key, key_hash} or a verified OAuth JWT payload) into request claims, or raises 403/401. Why in SQL: the key lookup, the revocation check and the subscription check ride in the same statement as the endpoint itself, so a request stays one round trip. Order: unknown credential 403, lapsed subscription 401 (except for billing, which a lapsed account may read, and its data rights, export and account: a lapsed member may still take their data and leave), then what the credential may do 403: read (scope public), write (scope write), account (DELETE /v1/account: as write; api.account_delete refuses third-party apps), upload (write, or chat from an approved app), search (public, first-party), notifications, devices (first-party), chat (approved app), export (read-write API key, or write from a first-party app: an archive holds the e-mail address and mutes, which no scope grants), billing (any API key, or scope billing). The claims also name the credential (api_key_id, or the app''s client_id), so a request can record what made it (DELETE /v1/account). The HTTP layer also asks it before answering an input error (unknown credentials never see validation details). Security definer: credentials have no policies for members.';

