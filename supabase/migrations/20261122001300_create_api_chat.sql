-- Endpoints: direct messages. Every function here is reached only with access 'chat' (an
-- OAuth token with scope chat from an approved app); the chat tables check it again.
-- Functions whose status varies (200 existing / 201 new) return {"status": n, "body": …}.

-- ============================================================================
-- Lookups
-- ============================================================================
create function app.my_conversation(ref text)
returns app.conversations
language plpgsql
stable
set search_path = ''
as $$
declare
  found_conversation app.conversations;
begin
  select c.* into found_conversation from app.conversations c where c.id = app.from_public_id('conversation', ref);
  if found_conversation.id is null then
    -- Not found and not a participant look the same, so existence does not leak.
    perform app.http_error(404, format('No conversation matches %L.', ref));
  end if;
  return found_conversation;
end;
$$;
comment on function app.my_conversation(text) is 'The viewer''s conversation named by ref; 404 when it does not exist or the viewer is not a participant (RLS hides it).';
grant execute on function app.my_conversation(text) to authenticated;

create function app.my_message(ref text)
returns app.messages
language plpgsql
stable
set search_path = ''
as $$
declare
  found_message app.messages;
begin
  select m.* into found_message from app.messages m where m.id = app.from_public_id('message', ref);
  if found_message.id is null then
    perform app.http_error(404, format('No message matches %L.', ref));
  end if;
  return found_message;
end;
$$;
comment on function app.my_message(text) is 'A message of one of the viewer''s conversations; 404 otherwise.';
grant execute on function app.my_message(text) to authenticated;

-- ============================================================================
-- Conversations
-- ============================================================================
create function app.open_conversation(me uuid, other uuid)
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
comment on function app.open_conversation(uuid, uuid) is
  'The conversation of two members, created with both sides when missing (the unique pair makes concurrent opens agree on one). Announces a new one to the other member''s inbox topic. Security definer: members cannot write the other side.';
grant execute on function app.open_conversation(uuid, uuid) to authenticated;

create function api.conversation_open(user_ref text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  me uuid := (select auth.uid());
  other uuid := app.resolve_user(user_ref);
  opened record;
begin
  if coalesce(btrim(user_ref), '') = '' then
    perform app.http_error(400, 'user is required: the username or user_ ID to talk to.');
  elsif other is null then
    perform app.http_error(404, format('No user matches %L.', user_ref));
  elsif other = me then
    perform app.http_error(422, 'user: you cannot start a conversation with yourself.');
  end if;
  if not exists (select 1 from app.conversations c where c.user_low = least(me, other) and c.user_high = greatest(me, other)) then
    perform app.hit_rate_limit('conversation_create');
  end if;
  select * into opened from app.open_conversation(me, other);
  return jsonb_build_object(
    'status', case when opened.created then 201 else 200 end,
    'body', (select app.conversation_json(c) from app.conversations c where c.id = opened.conversation_id));
end;
$$;
comment on function api.conversation_open(text) is 'POST /v1/conversations: 200 with the existing conversation, or 201 with a new empty one (rate-limited: conversation_create). 404 unknown user, 422 yourself.';
grant execute on function api.conversation_open(text) to authenticated;

create function api.conversation_get(conversation_ref text)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select app.conversation_json(app.my_conversation(conversation_ref))
$$;
comment on function api.conversation_get(text) is 'GET /v1/conversations/{conversation_id}: 404 for non-participants, never 403.';
grant execute on function api.conversation_get(text) to authenticated;

create function api.conversations_list(unread_only boolean, page_limit integer, starting_after text)
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
    || jsonb_build_object('unread_count', app.unread_conversations(me));
end;
$$;
comment on function api.conversations_list(boolean, integer, text) is
  'GET /v1/conversations: the viewer''s conversations with messages, latest activity first (index on the inbox), optionally only unread ones; unread_count counts across all pages. A cursor that is not in the list is 404.';
grant execute on function api.conversations_list(boolean, integer, text) to authenticated;

create function api.conversation_read(conversation_ref text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.conversations := app.my_conversation(conversation_ref);
begin
  perform app.hit_rate_limit('conversations_read');
  update app.conversation_members m set unread = false, last_read_at = now()
  where m.conversation_id = target.id and m.user_id = (select auth.uid());
  return null;
end;
$$;
comment on function api.conversation_read(text) is 'POST /v1/conversations/{conversation_id}/reading: marks it read (a read receipt goes to the conversation topic); rate-limited.';
grant execute on function api.conversation_read(text) to authenticated;

create function api.conversations_read_all()
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform app.hit_rate_limit('conversations_read');
  update app.conversation_members m set unread = false, last_read_at = now()
  where m.user_id = (select auth.uid()) and m.unread;
  return null;
end;
$$;
comment on function api.conversations_read_all() is 'POST /v1/conversations/reading: marks every conversation read, so the unread count is 0; rate-limited.';
grant execute on function api.conversations_read_all() to authenticated;

-- ============================================================================
-- Messages
-- ============================================================================
create function api.messages_list(conversation_ref text, page_limit integer, starting_after text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  target app.conversations := app.my_conversation(conversation_ref);
  anchor app.messages;
  page uuid[];
  has_more boolean;
begin
  if starting_after is not null then
    select m.* into anchor from app.messages m
    where m.id = app.from_public_id('message', starting_after) and m.conversation_id = target.id;
    if anchor.id is null then
      perform app.http_error(404, format('starting_after: no message matches %L in this conversation.', starting_after));
    end if;
  end if;
  page := array(
    select m.id from app.messages m
    where m.conversation_id = target.id
      and (anchor.id is null or (m.created_at, m.id) < (anchor.created_at, anchor.id))
    order by m.created_at desc, m.id desc
    limit page_limit + 1);
  has_more := cardinality(page) > page_limit;
  page := page[1:page_limit];
  return app.page_envelope(
    (select jsonb_agg(app.message_json(m) order by m.created_at desc, m.id desc) from app.messages m where m.id = any (page)),
    has_more,
    (select count(*) from app.messages m where m.conversation_id = target.id),
    app.to_public_id('message', page[cardinality(page)]));
end;
$$;
comment on function api.messages_list(text, integer, text) is 'GET /v1/conversations/{conversation_id}/messages: newest first.';
grant execute on function api.messages_list(text, integer, text) to authenticated;

create function app.check_message_caps(me uuid, target app.conversations)
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
comment on function app.check_message_caps(uuid, app.conversations) is
  'The caps of SPEC section 8 for a conversation the other participant has not answered: at most 3 messages in it, and at most 5 such conversations messaged per 24 hours. Race-free: a transaction-scoped advisory lock per sender serializes their concurrent sends, and each count runs after the lock with a fresh snapshot.';
grant execute on function app.check_message_caps(uuid, app.conversations) to authenticated;

create function app.attach_uploads(upload_ids jsonb, target_todo uuid, target_comment uuid, target_message uuid, field text)
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
comment on function app.attach_uploads(jsonb, uuid, uuid, uuid, text) is
  'Attaches the caller''s uploads (ids from verified signed_ids) to a todo, comment or message, in order. 422 naming the field when an upload is someone else''s, already attached, not (completely) stored yet, unknown, or (messages) not an image or video. Security definer: storage.objects is not readable by members. Rows are locked so two requests cannot attach one upload twice.';
grant execute on function app.attach_uploads(jsonb, uuid, uuid, uuid, text) to authenticated;

create or replace function app.attach_uploads(upload_ids jsonb, target_todo uuid, target_comment uuid, field text)
returns void
language sql
volatile
security definer
set search_path = ''
as $$
  select app.attach_uploads(upload_ids, target_todo, target_comment, null, field)
$$;
comment on function app.attach_uploads(jsonb, uuid, uuid, text) is 'Attaches uploads to a todo or comment: the five-argument app.attach_uploads without a message.';

create function api.message_send(conversation_ref text, body text, attachment_upload_id uuid, client_ref text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  me uuid := (select auth.uid());
  target app.conversations := app.my_conversation(conversation_ref);
  client_id uuid;
  sent app.messages;
begin
  if client_ref is not null then
    if client_ref !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' then
      perform app.http_error(422, 'client_message_id must be a UUID.');
    end if;
    client_id := client_ref::uuid;
    -- A resend returns the original (200), before any cap or limit counts it.
    select m.* into sent from app.messages m where m.conversation_id = target.id and m.user_id = me and m.client_message_id = client_id;
    if sent.id is not null then
      return jsonb_build_object('status', 200, 'body', app.message_json(sent));
    end if;
  end if;
  if coalesce(message_send.body, '') = '' and attachment_upload_id is null then
    perform app.http_error(422, 'A message needs a body or an attachment.');
  end if;

  perform app.hit_rate_limit('message_send');
  perform app.check_message_caps(me, target);

  insert into app.messages (conversation_id, user_id, body, client_message_id)
  values (target.id, me, coalesce(message_send.body, ''), client_id)
  on conflict (conversation_id, user_id, client_message_id) do nothing
  returning * into sent;
  if sent.id is null then
    -- A concurrent resend won the race: answer with its message.
    select m.* into sent from app.messages m where m.conversation_id = target.id and m.user_id = me and m.client_message_id = client_id;
    return jsonb_build_object('status', 200, 'body', app.message_json(sent));
  end if;
  if attachment_upload_id is not null then
    perform app.attach_uploads(jsonb_build_array(attachment_upload_id), null, null, sent.id, 'attachment');
  end if;
  return jsonb_build_object('status', 201, 'body', app.message_json(sent));
end;
$$;
comment on function api.message_send(text, text, uuid, text) is
  'POST /v1/conversations/{conversation_id}/messages: 201 with the new message, or 200 with the original when client_message_id was already used (also under concurrent resends: unique constraint). Rate limit, then the unanswered-conversation caps (429).';
grant execute on function api.message_send(text, text, uuid, text) to authenticated;

create function api.message_react(message_ref text, content text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.messages := app.my_message(message_ref);
  reaction app.message_reactions;
begin
  if content is null then
    perform app.http_error(400, 'content is required: one of the quick-set emoji.');
  elsif content not in ('👍', '❤️', '😂', '🔥', '🙏') then
    perform app.http_error(422, 'content must be one of the quick-set emoji: 👍 ❤️ 😂 🔥 🙏');
  end if;
  perform app.hit_rate_limit('message_reaction');
  insert into app.message_reactions (message_id, user_id, content) values (target.id, (select auth.uid()), content)
  on conflict do nothing
  returning * into reaction;
  if reaction.message_id is null then
    select r.* into reaction from app.message_reactions r
    where r.message_id = target.id and r.user_id = (select auth.uid()) and r.content = message_react.content;
  end if;
  return jsonb_build_object(
    'content', reaction.content,
    'created_at', reaction.created_at,
    'user', (select app.user_json(u) from app.users u where u.id = reaction.user_id));
end;
$$;
comment on function api.message_react(text, text) is 'POST /v1/messages/{message_id}/reactions: one of the five quick-set emoji (422 otherwise); re-reacting returns the existing reaction.';
grant execute on function api.message_react(text, text) to authenticated;

create function api.message_unreact(message_ref text, content text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.messages := app.my_message(message_ref);
begin
  perform app.hit_rate_limit('message_reaction');
  delete from app.message_reactions r
  where r.message_id = target.id and r.user_id = (select auth.uid()) and r.content = message_unreact.content;
  return null;
end;
$$;
comment on function api.message_unreact(text, text) is 'DELETE /v1/messages/{message_id}/reactions/{content}: 204 also when there was no such reaction.';
grant execute on function api.message_unreact(text, text) to authenticated;

revoke execute on all functions in schema app, api from public;
