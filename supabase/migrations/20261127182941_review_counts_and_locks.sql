-- The sixth round's counters and copies, after an attacker's review
--
-- - A conversation's messages are counted in the statement that inserts them (a statement-level
--   trigger, app.tg_messages__count), not at commit with the delivery: a message inserted and
--   deleted in one transaction was counted out at once but in only at commit, which broke the
--   count's check (messages_count >= 0), and a read in the sending transaction missed it.
-- - A comment reads its commenter's privacy under an advisory lock of the member (shared; a
--   privacy change takes it exclusively before copying), not FOR SHARE on the member's row: that
--   queued comments behind every update of the row (followers_count, todos_count, streaks) and
--   could deadlock with an account deletion that updates a follower's count while the follower's
--   comment notifies the deleted member. The privacy change takes it first of all (trigger _190,
--   before the todos' copy locks the member's todos): a comment holding it shared updates its
--   todo's counter next, so taking it after the todos deadlocked (test/races.test.ts found it).
-- - app.visible_comments_count answers null without a viewer (its rule hid nothing then).
-- - POST /v1/comments and PATCH /v1/comments/{id} answered 201/200 with a null body when a change
--   committed while they ran hid the comment from its writer (the todo's author went private, an
--   unfollow): now refused as a todo they may not see (422) or a comment they may not (404), and
--   rolled back. The random workload of test/races.test.ts met it.

-- The diff lists functions by name, so a SQL function may come before one it calls: its body
-- is checked once everything is in place (by test/schema.test.ts), not statement by statement.
set local check_function_bodies = off;

-- trigger _210_propagate_privacy_to_comments on app.users: supabase/schemas/10_users_and_credentials.sql
DROP TRIGGER "_210_propagate_privacy_to_comments" ON "app"."users";

-- api.comment_create: supabase/schemas/40_social.sql
CREATE OR REPLACE FUNCTION api.comment_create (
  commentable_type text,
  commentable_id   text,
  body             text,
  attachments      jsonb,
  parent_ref       text
)
  RETURNS jsonb
  LANGUAGE plpgsql
  SET search_path TO ''
  AS $function$
declare
  target app.todos;
  parent app.comments;
  created app.comments;
  answer jsonb;
begin
  if commentable_type is distinct from 'Todo' then
    perform app.http_error(422, 'commentable_type must be Todo.');
  end if;
  target := app.resolve_todo(commentable_id);
  if target.id is null or commentable_id !~ '^todo_' then
    perform app.http_error(422, format('commentable_id: no todo matches %L.', commentable_id));
  end if;
  if coalesce(btrim(body), '') = '' and jsonb_array_length(coalesce(attachments, '[]'::jsonb)) = 0 then
    perform app.http_error(422, 'body is required unless attachments are given.');
  end if;
  if parent_ref is not null then
    parent := app.resolve_comment(parent_ref);
    if parent.id is null or parent.todo_id <> target.id then
      perform app.http_error(422, format('parent_id: no comment matches %L on this todo.', parent_ref));
    end if;
  end if;
  perform app.hit_rate_limit('comment_create');
  insert into app.comments (todo_id, user_id, parent_id, body)
  values (target.id, (select auth.uid()), parent.id, coalesce(body, ''))
  returning * into created;
  perform app.attach_uploads(attachments, null, created.id, 'attachments');
  -- Rendered as the viewer sees it now: a change committed since the checks above (the todo's
  -- author went private, an unfollow) can hide it. Then the todo is no longer theirs to comment
  -- on: refused as above, the comment rolled back, never a 201 without its body.
  answer := app.comment_json(created);
  if answer is null then
    perform app.http_error(422, format('commentable_id: no todo matches %L.', commentable_id));
  end if;
  return answer;
end;
$function$;

-- api.comment_update: supabase/schemas/40_social.sql
CREATE OR REPLACE FUNCTION api.comment_update (
  comment_ref text,
  patch       jsonb
)
  RETURNS jsonb
  LANGUAGE plpgsql
  SET search_path TO ''
  AS $function$
declare
  target app.comments := app.own_comment(comment_ref);
  answer jsonb;
begin
  perform app.hit_rate_limit('comment_update');
  perform app.detach_uploads(patch -> 'remove_attachment_ids', null, target.id, 'remove_attachment_ids');
  perform app.attach_uploads(patch -> 'attachments', null, target.id, 'attachments');
  if patch ? 'body' then
    update app.comments c set body = patch ->> 'body' where c.id = target.id returning * into target;
  end if;
  -- As comment_create: hidden since the check (its todo's author went private), the edit is refused and rolled back.
  answer := app.comment_json(target);
  if answer is null then
    perform app.http_error(404, format('No comment matches %L.', comment_ref));
  end if;
  return answer;
end;
$function$;

-- app.tg_comments__author_privacy: supabase/schemas/40_social.sql
CREATE OR REPLACE FUNCTION app.tg_comments__author_privacy()
  RETURNS TRIGGER
  LANGUAGE plpgsql
  SECURITY DEFINER
  SET search_path TO ''
  AS $function$
begin
  -- The commenter's privacy lock, shared: a privacy change takes it exclusively before it copies
  -- the new value onto the member's comments, so it cannot slip between reading the privacy here
  -- and this comment's commit. Either it holds the lock first, and this waits for its commit and
  -- then reads the new value (each statement here takes a new snapshot), or this holds it first,
  -- and the change waits for this commit and then updates this comment too. An advisory lock, not
  -- a lock of the member's row: FOR SHARE there queued the comment behind every update of the
  -- row (followers_count, todos_count, streaks) and could deadlock with an account deletion.
  perform pg_advisory_xact_lock_shared(hashtext('app.comments author_privacy'), hashtext(new.user_id::text));
  -- A commenter deleted meanwhile reads no row: the insert then fails on its foreign key (23503).
  new.author_privacy := coalesce((select u.privacy from app.users u where u.id = new.user_id), new.author_privacy);
  return new;
end;
$function$;

-- app.tg_messages__count: supabase/schemas/50_chat.sql
CREATE OR REPLACE FUNCTION app.tg_messages__count()
  RETURNS TRIGGER
  LANGUAGE plpgsql
  SECURITY DEFINER
  SET search_path TO ''
  AS $function$
begin
  update app.conversations c set messages_count = c.messages_count + added.n
  from (select n.conversation_id, count(*)::integer as n from new_messages n group by n.conversation_id) added
  where c.id = added.conversation_id;
  return null;
end;
$function$;

-- app.tg_messages__deliver: supabase/schemas/50_chat.sql
CREATE OR REPLACE FUNCTION app.tg_messages__deliver()
  RETURNS TRIGGER
  LANGUAGE plpgsql
  SECURITY DEFINER
  SET search_path TO ''
  AS $function$
declare
  other uuid;
begin
  update app.conversations c set last_message_at = new.created_at where c.id = new.conversation_id;
  update app.conversation_members m
     set last_message_at = new.created_at,
         unread = (m.user_id <> new.user_id),
         last_read_at = case when m.user_id = new.user_id then new.created_at else m.last_read_at end
   where m.conversation_id = new.conversation_id;
  select m.user_id into other from app.conversation_members m
  where m.conversation_id = new.conversation_id and m.user_id <> new.user_id;

  -- Both participants receive this payload: it is the message as the recipient sees it, never
  -- as the sender sees their own record (dismissed_time_zone).
  perform realtime.send(app.message_json_as(new, other), 'message.created', app.conversation_topic(new.conversation_id), true);
  perform realtime.send(
    jsonb_build_object('conversation_id', app.to_public_id('conversation', new.conversation_id),
                       'message_id', app.to_public_id('message', new.id),
                       'unread_count', app.unread_conversations(other)),
    'inbox.updated', app.user_topic(other), true);
  return null;
end;
$function$;

-- app.tg_users__propagate_privacy_to_comments: supabase/schemas/40_social.sql
CREATE OR REPLACE FUNCTION app.tg_users__propagate_privacy_to_comments()
  RETURNS TRIGGER
  LANGUAGE plpgsql
  SECURITY DEFINER
  SET search_path TO ''
  AS $function$
begin
  -- Comments being written by this member finish first (they hold the lock shared: see
  -- app.tg_comments__author_privacy); the update below then sees them, and later ones read the
  -- new value once this commits.
  perform pg_advisory_xact_lock(hashtext('app.comments author_privacy'), hashtext(new.id::text));
  update app.comments c set author_privacy = new.privacy
  where c.user_id = new.id and c.author_privacy <> new.privacy;
  return null;
end;
$function$;

-- app.visible_comments_count: supabase/schemas/40_social.sql
CREATE OR REPLACE FUNCTION app.visible_comments_count (
  todo_id uuid
)
  RETURNS bigint
  LANGUAGE plpgsql
  STABLE
  SECURITY DEFINER
  SET search_path TO ''
  AS $function$
declare
  viewer_id uuid := auth.uid();
begin
  -- Nobody: nothing to answer (the rule below needs a viewer; with none it would hide nothing).
  if viewer_id is null then
    return null;
  end if;
  -- comments_count counts every comment of the todo (app.tg_comments__count). Less:
  --   - those the viewer may not see (the comments policy: the todo's owner sees every comment;
  --     others a public member's, their own, and a protected member's they follow), found
  --     among the comments of members who are not public alone (a partial index);
  --   - those the viewer may see by members they muted (a probe per muted member: a member
  --     never mutes themselves).
  -- The two sets do not overlap. Null when the viewer may not see the todo (the todos policy's
  -- rule on author_privacy, written out).
  return (
    select t.comments_count
      - case when t.user_id = viewer_id then 0 else (
          select count(*) from app.comments c
          where c.todo_id = t.id and c.author_privacy <> 'public' and c.user_id <> viewer_id
            and not (c.author_privacy = 'protected' and exists (
                       select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = c.user_id)))
        end
      - (select count(*) from app.mutes m
           join app.comments c on c.user_id = m.muted_user_id and c.todo_id = t.id
          where m.user_id = viewer_id
            and (t.user_id = viewer_id or c.author_privacy = 'public'
                 or (c.author_privacy = 'protected' and exists (
                       select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = c.user_id))))
    from app.todos t
    where t.id = visible_comments_count.todo_id
      and (t.author_privacy = 'public' or t.user_id = viewer_id
           or (t.author_privacy = 'protected' and exists (
                 select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = t.user_id))));
end;
$function$;

-- trigger _060_count on app.messages: supabase/schemas/50_chat.sql
CREATE TRIGGER _060_count
  AFTER INSERT ON app.messages REFERENCING NEW TABLE AS new_messages
  FOR EACH STATEMENT
  EXECUTE FUNCTION app.tg_messages__count();

-- trigger _190_propagate_privacy_to_comments on app.users: supabase/schemas/40_social.sql
CREATE TRIGGER _190_propagate_privacy_to_comments
  AFTER UPDATE OF privacy ON app.users
  FOR EACH ROW
  WHEN ((old.privacy IS DISTINCT FROM new.privacy))
  EXECUTE FUNCTION app.tg_users__propagate_privacy_to_comments();

-- app.conversations: supabase/schemas/50_chat.sql
COMMENT ON COLUMN "app"."conversations"."messages_count" IS 'How many messages the conversation holds: the total_count of GET /v1/conversations/{id}/messages. Counted up by app.tg_messages__count and down by app.tg_messages__uncount, per statement, in the statement that writes the messages; a count of the messages at every page cost 2.7 ms per 1,000 messages (27 ms a page at 10,000: every row passed the messages policy).';

-- app.tg_comments__author_privacy: supabase/schemas/40_social.sql
COMMENT ON FUNCTION "app"."tg_comments__author_privacy"() IS 'Before a comment is stored: its author_privacy, read under the commenter''s privacy lock taken shared (a privacy change takes it exclusively: it waits for the comment, or the comment for it), whatever the insert said. Security definer: members may not write author_privacy.';

-- app.tg_messages__count: supabase/schemas/50_chat.sql
COMMENT ON FUNCTION "app"."tg_messages__count"() IS 'After messages are inserted: counts them into conversations.messages_count, one update per conversation for the statement, at once (not at commit, with the delivery): a read in the same transaction counts them, and a delete there counts out only what was counted in. Resends that ON CONFLICT DO NOTHING skipped are not in the statement''s new rows. The conversation''s row is already locked by app.tg_messages__order for the send.';

-- app.tg_messages__deliver: supabase/schemas/50_chat.sql
COMMENT ON FUNCTION "app"."tg_messages__deliver"() IS 'After a message: moves the conversation to the top of both inboxes, marks it unread for the recipient (read for the sender), and broadcasts message.created (the Message as the recipient sees it: app.message_json_as, so the sender''s own-record fields never reach the recipient) to the conversation topic and inbox.updated (unread count) to the recipient''s topic. realtime.send never fails the write.';

-- app.visible_comments_count: supabase/schemas/40_social.sql
COMMENT ON FUNCTION "app"."visible_comments_count"(uuid) IS 'How many comments of a todo the current viewer sees, muted members'' left out: the total_count of GET /v1/todos/{id}/comments. From the todo''s comments_count less the comments the viewer may not see, found among those of members who are not public (comments_todo_id_not_public_idx), and less the muted members'' they may see: the cost follows the todo''s comments by members who are not public and the viewer''s mutes, not every comment (each passed the comments policy before: 81 ms a page at 10,000 comments). Security definer so the comments are not filtered by the policy row by row: it applies the same rule (app.can_see_comment''s, on author_privacy) and answers only for auth.uid() and a todo they may see (null otherwise, and without a viewer). PL/pgSQL: its statement is planned once per session.';

-- app.tg_messages__count: supabase/schemas/50_chat.sql
REVOKE ALL ON FUNCTION "app"."tg_messages__count"() FROM PUBLIC;

-- app.tg_messages__count: supabase/schemas/50_chat.sql
GRANT EXECUTE ON FUNCTION "app"."tg_messages__count"() TO "postgres";
