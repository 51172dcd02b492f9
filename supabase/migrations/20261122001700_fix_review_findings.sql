-- Fixes from a review of the first session's work:
--   * the recipient of a message saw no attachment (the uploads policy had no message case);
--   * message.created was broadcast before the message's attachment was attached;
--   * security-definer helpers trusted a member id passed in: they now act only for auth.uid()
--     (not reachable through the API, but true by construction now);
--   * user search treated % and _ typed by a user as LIKE wildcards;
--   * a token with scope chat alone could not upload the image it wants to send.

-- ============================================================================
-- Credentials: access 'upload' (write, or chat from an approved app)
-- ============================================================================
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

  if access = 'write' and not may_write then
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
  'Resolves a credential ({kind: api_key, key_hash} or a verified OAuth JWT payload) into request claims, or raises 403/401. Why in SQL: the key lookup, the revocation check and the subscription check ride in the same statement as the endpoint itself, so a request stays one round trip. Order: unknown credential 403, lapsed subscription 401, then what the credential may do (access: read, write, upload, search, notifications, devices, chat) 403. Security definer: credentials have no policies for members.';

drop policy "Members upload in their own name" on app.uploads;
create policy "Members upload in their own name with a writing or chat credential" on app.uploads
  for insert to authenticated
  with check (user_id = (select auth.uid()) and ((select app.can_write()) or (select app.can_chat())));

-- ============================================================================
-- Message attachments are visible with their message
-- ============================================================================
drop policy "Attachments are visible with what they are attached to; uploads to their owner" on app.uploads;
create policy "Attachments are visible with what they are attached to; uploads to their owner" on app.uploads
  for select to authenticated
  using (user_id = (select auth.uid())
         or (todo_id is not null and exists (select 1 from app.todos t where t.id = todo_id))
         or (comment_id is not null and exists (select 1 from app.comments c where c.id = comment_id))
         or (message_id is not null and exists (select 1 from app.messages m where m.id = message_id)));

-- ============================================================================
-- message.created at commit, when the message is complete (attachment included)
-- ============================================================================
drop trigger _100_deliver on app.messages;
create constraint trigger _100_deliver after insert on app.messages
  deferrable initially deferred
  for each row execute function app.tg_messages__deliver();

-- ============================================================================
-- Security-definer helpers act for the requesting member only
-- ============================================================================
create or replace function app.open_conversation(me uuid, other uuid)
returns table (conversation_id uuid, created boolean)
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  low uuid := least(me, other);
  high uuid := greatest(me, other);
  found_id uuid;
begin
  if me is distinct from (select auth.uid()) then
    raise exception 'app.open_conversation: only for the requesting member' using errcode = '42501';
  end if;
  insert into app.conversations (user_low, user_high, started_by) values (low, high, me)
  on conflict (user_low, user_high) do nothing
  returning id into found_id;
  if found_id is not null then
    insert into app.conversation_members (conversation_id, user_id, other_user_id)
    values (found_id, me, other), (found_id, other, me);
    perform realtime.send(
      jsonb_build_object('conversation_id', app.to_public_id('conversation', found_id), 'user_id', app.to_public_id('user', me)),
      'conversation.created', app.user_topic(other), true);
    return query select found_id, true;
  else
    return query select c.id, false from app.conversations c where c.user_low = low and c.user_high = high;
  end if;
end;
$$;

create or replace function app.check_message_caps(me uuid, target app.conversations)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  other uuid := case when target.user_low = me then target.user_high else target.user_low end;
  other_name text := (select u.username from app.users u where u.id = other);
  sent integer;
begin
  if me is distinct from (select auth.uid()) then
    raise exception 'app.check_message_caps: only for the requesting member' using errcode = '42501';
  end if;
  -- One sender at a time: concurrent sends of the same member are serialized here, so no
  -- two of them can both see room under a cap. (Transaction-scoped; released at commit.)
  perform pg_advisory_xact_lock(hashtext('app.messages caps'), hashtext(me::text));

  if exists (select 1 from app.messages m where m.conversation_id = target.id and m.user_id = other) then
    return;  -- answered: no caps
  end if;
  select count(*) into sent from app.messages m where m.conversation_id = target.id and m.user_id = me;
  if sent >= 3 then
    perform app.http_error(429, format('You can send at most 3 messages until %s answers.', other_name),
      jsonb_build_object('retry_after', 3600));
  end if;
  if not exists (select 1 from app.messages m
                 where m.conversation_id = target.id and m.user_id = me and m.created_at > now() - interval '24 hours')
     and (select count(distinct m.conversation_id)
          from app.messages m
          join app.conversation_members cm on cm.conversation_id = m.conversation_id and cm.user_id = me
          where m.user_id = me and m.created_at > now() - interval '24 hours'
            and not exists (select 1 from app.messages answer
                            where answer.conversation_id = m.conversation_id and answer.user_id = cm.other_user_id)) >= 5 then
    perform app.http_error(429, 'You can message at most 5 people who have not answered you within 24 hours.',
      jsonb_build_object('retry_after', 3600));
  end if;
end;
$$;

create or replace function app.detach_uploads(attachment_ids jsonb, target_todo uuid, target_comment uuid, field text)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  ref text;
  removed integer;
begin
  for ref in select value #>> '{}' from jsonb_array_elements(coalesce(attachment_ids, '[]'::jsonb)) loop
    delete from app.uploads u
    where u.id = app.from_public_id('att', ref)
      and u.todo_id is not distinct from target_todo and u.comment_id is not distinct from target_comment
      and u.attached_at is not null
      and u.user_id = (select auth.uid());
    get diagnostics removed = row_count;
    if removed = 0 then
      perform app.http_error(422, format('%s: there is no attachment %L here.', field, ref));
    end if;
  end loop;
end;
$$;

create or replace function app.attach_uploads(upload_ids jsonb, target_todo uuid, target_comment uuid, target_message uuid, field text)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  wanted uuid[] := array(select (value #>> '{}')::uuid from jsonb_array_elements(coalesce(upload_ids, '[]'::jsonb)));
  upload app.uploads;
  object_size bigint;
  object_etag text;
begin
  -- Only onto what the requesting member wrote (the callers check too; this keeps it true).
  if (target_todo is not null and not exists (select 1 from app.todos t where t.id = target_todo and t.user_id = (select auth.uid())))
     or (target_comment is not null and not exists (select 1 from app.comments c where c.id = target_comment and c.user_id = (select auth.uid())))
     or (target_message is not null and not exists (select 1 from app.messages m where m.id = target_message and m.user_id = (select auth.uid()))) then
    raise exception 'app.attach_uploads: only onto the requesting member''s own content' using errcode = '42501';
  end if;
  for upload in select * from app.uploads u where u.id = any (wanted) order by array_position(wanted, u.id) for update loop
    if upload.user_id <> (select auth.uid()) then
      perform app.http_error(422, format('%s: that upload belongs to someone else.', field));
    elsif upload.attached_at is not null then
      perform app.http_error(422, format('%s: that upload is already attached.', field));
    end if;
    select (o.metadata ->> 'size')::bigint, o.metadata ->> 'eTag' into object_size, object_etag
    from storage.objects o where o.bucket_id = 'uploads' and o.name = upload.key;
    if object_size is null then
      perform app.http_error(422, format('%s: the file %L has not been uploaded yet.', field, upload.filename));
    elsif object_size <> upload.byte_size
       or (object_etag is not null and lower(trim(both '"' from object_etag)) <> encode(upload.checksum, 'hex')) then
      perform app.http_error(422, format('%s: the stored file %L does not match its size or checksum.', field, upload.filename));
    end if;
    if target_message is not null and upload.content_type !~ '^(image|video)/' then
      perform app.http_error(422, format('%s must be an image or a video.', field));
    end if;
    update app.uploads u
       set todo_id = target_todo, comment_id = target_comment, message_id = target_message, attached_at = clock_timestamp()
    where u.id = upload.id;
  end loop;
  if (select count(*) from app.uploads u where u.id = any (wanted)) < cardinality(wanted) then
    perform app.http_error(422, format('%s: no upload matches one of the signed ids.', field));
  end if;
end;
$$;

create function app.my_unread_conversations()
returns bigint
language sql
stable
security definer
set search_path = ''
as $$
  select app.unread_conversations((select auth.uid()))
$$;
comment on function app.my_unread_conversations() is 'The requesting member''s unread conversation count. Members call this; app.unread_conversations (any member) is for the triggers, which run as their owner.';
grant execute on function app.my_unread_conversations() to authenticated;
revoke execute on function app.unread_conversations(uuid) from authenticated;

create or replace function api.conversations_list(unread_only boolean, page_limit integer, starting_after text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  me uuid := (select auth.uid());
  anchor app.conversation_members;
  page uuid[];
  has_more boolean;
begin
  if starting_after is not null then
    select m.* into anchor from app.conversation_members m
    where m.conversation_id = app.from_public_id('conversation', starting_after) and m.user_id = me;
    if anchor.conversation_id is null or anchor.last_message_at is null or (unread_only and not anchor.unread) then
      perform app.http_error(404, format('starting_after: %L is not a conversation of this list.', starting_after));
    end if;
  end if;
  page := array(
    select m.conversation_id from app.conversation_members m
    where m.user_id = me and m.last_message_at is not null
      and (not unread_only or m.unread)
      and (anchor.conversation_id is null or (m.last_message_at, m.conversation_id) < (anchor.last_message_at, anchor.conversation_id))
    order by m.last_message_at desc, m.conversation_id desc
    limit page_limit + 1);
  has_more := cardinality(page) > page_limit;
  page := page[1:page_limit];
  return app.page_envelope(
    (select jsonb_agg(app.conversation_json(c) order by array_position(page, c.id)) from app.conversations c where c.id = any (page)),
    has_more,
    (select count(*) from app.conversation_members m where m.user_id = me and m.last_message_at is not null and (not unread_only or m.unread)),
    app.to_public_id('conversation', page[cardinality(page)]))
    || jsonb_build_object('unread_count', app.my_unread_conversations());
end;
$$;
comment on function api.conversations_list(boolean, integer, text) is
  'GET /v1/conversations: the viewer''s conversations with messages, latest activity first (index on the inbox), optionally only unread ones; unread_count counts across all pages. A cursor that is not in the list is 404.';

-- ============================================================================
-- User search: typed characters are literal
-- ============================================================================
create or replace function api.search_users(query text)
returns jsonb
language sql
stable
set search_path = ''
as $$
  with typed as (
    -- LIKE wildcards a user types are literal characters: `%` must not match everyone.
    select lower(btrim(coalesce(query, ''))) as prefix,
           replace(replace(replace(lower(btrim(coalesce(query, ''))), '\', '\\'), '%', '\%'), '_', '\_') as pattern
  ), frequent as (
    select m.user_id, count(*) as mentions
    from app.todo_user_mentions m
    join app.todos t on t.id = m.todo_id
    where t.user_id = (select auth.uid())
    group by m.user_id
  ), found as (
    select u, coalesce(f.mentions, 0) as mentions
    from app.users u
    left join frequent f on f.user_id = u.id
    cross join typed
    where u.id <> (select auth.uid())
      and case
        when typed.prefix = '' then f.mentions is not null
        else lower(u.username) like typed.pattern || '%'
          or lower(u.first_name) like typed.pattern || '%'
          or lower(u.last_name) like typed.pattern || '%'
          or lower(u.first_name || ' ' || u.last_name) like typed.pattern || '%'
      end
    order by coalesce(f.mentions, 0) desc, (lower(u.username) = (select prefix from typed)) desc, length(u.username), lower(u.username)
    limit 10
  )
  select jsonb_build_object(
    'data', coalesce(jsonb_agg(app.user_json(found.u) order by found.mentions desc, (lower((found.u).username) = (select prefix from typed)) desc, length((found.u).username), lower((found.u).username)), '[]'::jsonb),
    'has_more', false,
    'total_count', count(*),
    'after', null)
  from found
$$;
comment on function api.search_users(text) is
  'GET /v1/search/users: mention autocomplete. Prefix match (LIKE wildcards escaped) on username, first, last and full name; people the viewer mentions most come first; an empty query returns only those. At most 10, not paginated.';

revoke execute on all functions in schema app, api from public;
