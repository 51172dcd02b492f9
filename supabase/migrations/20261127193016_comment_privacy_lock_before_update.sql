-- The comment privacy lock taken before the row is written; the copy without a default
--
-- From a second review of 20261127182941:
-- - A privacy change took the member's comment privacy lock in an AFTER trigger. A statement
--   changing several members fires each row's AFTER triggers in turn, so it locked the first
--   member's todos (app.tg_users__propagate_privacy) before asking for the second member's lock,
--   while a comment by the second member on the first one's todo held that lock and wanted the
--   todo's row: a deadlock. A BEFORE trigger (_010) takes every lock of the statement first.
-- - The key is 64 bits (app.comment_privacy_lock), one definition for both sides.
-- - app.comments.author_privacy has no default: a write without triggers must name it, where a
--   default of public showed a private member's comment.
-- - GET /v1/notifications treats a null unread_only as false in its total too.
-- In-flight comments and privacy changes finish before this commits (its triggers lock both
-- tables), so no write mixes the old lock with the new.

-- The diff lists functions by name, so a SQL function may come before one it calls: its body
-- is checked once everything is in place (by test/schema.test.ts), not statement by statement.
set local check_function_bodies = off;

-- app.comments: supabase/schemas/40_social.sql
ALTER TABLE "app"."comments"
  ALTER COLUMN "author_privacy" DROP DEFAULT;

-- api.notifications_list: supabase/schemas/90_notifications.sql
CREATE OR REPLACE FUNCTION api.notifications_list (
  unread_only    boolean,
  page_limit     integer,
  starting_after text
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
declare
  me uuid := (select auth.uid());
  anchor app.notifications;
  page uuid[];
  has_more boolean;
  base_url text := app.public_url();
  unread bigint := app.my_unread_notifications();
  total bigint;
begin
  if starting_after is not null then
    select n.* into anchor from app.notifications n
    where n.id = app.from_public_id('notif', starting_after) and n.user_id = me and not n.hidden;
    if anchor.id is null or (unread_only and anchor.read) then
      perform app.http_error(404, format('starting_after: %L is not a notification of this list.', starting_after));
    end if;
  end if;
  page := array(
    select n.id from app.notifications n
    where n.user_id = me and not n.hidden and (not coalesce(unread_only, false) or not n.read)
      and (anchor.id is null or (n.created_at, n.id) < (anchor.created_at, anchor.id))
    order by n.created_at desc, n.id desc
    limit page_limit + 1);
  has_more := cardinality(page) > page_limit;
  page := page[1:page_limit];
  -- Counted from the indexes alone: the unread ones are the badge's count; all of them a
  -- statement of its own that names no `read` (one statement for both read each row's `read`
  -- from the table: 30.8 ms a page at 100,000 notifications, docs/performance.md).
  if coalesce(unread_only, false) then
    total := unread;
  else
    total := (select count(*) from app.notifications n where n.user_id = me and not n.hidden);
  end if;
  return app.page_envelope(
    -- The text is what the notification is about as it is now, read as the member (the todos
    -- and comments policies): an edit shows the edited text, and a todo or comment the member
    -- may no longer see (its author turned private, a follower removed) shows none. The stored
    -- excerpt is what the push carried when the notification was written.
    (select jsonb_agg(app.notification_json(n, u, base_url)
                      || jsonb_build_object('text', case when n.comment_id is not null then app.notification_excerpt(c.body)
                                                         when n.todo_id is not null then app.notification_excerpt(t.body)
                                                         else n.text end)
                      order by array_position(page, n.id))
     from app.notifications n
     left join app.users u on u.id = n.actor_id
     left join app.todos t on t.id = n.todo_id
     left join app.comments c on c.id = n.comment_id
     where n.id = any (page)),
    has_more,
    total,
    app.to_public_id('notif', page[cardinality(page)]))
    || jsonb_build_object('unread_count', unread);
end;
$function$;

-- app.comment_privacy_lock: supabase/schemas/40_social.sql
CREATE OR REPLACE FUNCTION app.comment_privacy_lock (
  member_id uuid
)
  RETURNS bigint
  LANGUAGE sql
  IMMUTABLE
  PARALLEL SAFE
  AS $function$
  select hashtextextended('app.comments author_privacy ' || member_id::text, 0)
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
  -- then reads the new value (under READ COMMITTED, which every path of the API and its workers
  -- runs: each statement here takes a new snapshot), or this holds it first, and the change waits
  -- for this commit and then updates this comment too. An advisory lock, not a lock of the
  -- member's row: FOR SHARE there queued the comment behind every update of the row
  -- (followers_count, todos_count, streaks) and could deadlock with an account deletion.
  perform pg_advisory_xact_lock_shared(app.comment_privacy_lock(new.user_id));
  -- Whatever the insert said. A commenter deleted meanwhile reads no row: private then (never
  -- shown by mistake), and the insert fails on its foreign key (23503).
  new.author_privacy := coalesce((select u.privacy from app.users u where u.id = new.user_id), 'private');
  return new;
end;
$function$;

-- app.tg_users__lock_comment_privacy: supabase/schemas/40_social.sql
CREATE OR REPLACE FUNCTION app.tg_users__lock_comment_privacy()
  RETURNS TRIGGER
  LANGUAGE plpgsql
  SECURITY DEFINER
  SET search_path TO ''
  AS $function$
begin
  -- Comments being written by this member finish first (they hold the lock shared); later ones
  -- wait for this transaction and read the new value. Before the row is written, so that a
  -- statement changing several members takes every lock before any AFTER trigger locks their
  -- todos (app.tg_users__propagate_privacy): a comment holding one member's lock shared updates
  -- its todo's counter next, and the todo may be another changed member's.
  perform pg_advisory_xact_lock(app.comment_privacy_lock(new.id));
  return new;
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
  -- The member's comment privacy lock is held since the row was written
  -- (app.tg_users__lock_comment_privacy): comments being written meanwhile have committed.
  update app.comments c set author_privacy = new.privacy
  where c.user_id = new.id and c.author_privacy <> new.privacy;
  return null;
end;
$function$;

-- trigger _010_lock_comment_privacy on app.users: supabase/schemas/40_social.sql
CREATE TRIGGER _010_lock_comment_privacy
  BEFORE UPDATE OF privacy ON app.users
  FOR EACH ROW
  WHEN ((old.privacy IS DISTINCT FROM new.privacy))
  EXECUTE FUNCTION app.tg_users__lock_comment_privacy();

-- app.comments: supabase/schemas/40_social.sql
COMMENT ON COLUMN "app"."comments"."author_privacy" IS 'The commenter''s users.privacy, copied as app.todos.author_privacy is, so a todo''s visible comments are counted from its comments_count and its comments by members who are not public (comments_todo_id_not_public_idx) instead of each comment passing the comments policy. Set on insert (app.tg_comments__author_privacy; no default: a write without triggers must name it), updated when the commenter changes privacy (app.tg_users__propagate_privacy_to_comments). Never changes updated_at.';

-- app.comment_privacy_lock: supabase/schemas/40_social.sql
COMMENT ON FUNCTION "app"."comment_privacy_lock"(uuid) IS 'Inlined (no SET clause, no table access). The advisory lock key of a member''s privacy as their comments copy it (author_privacy): taken shared by each comment written (app.tg_comments__author_privacy), exclusively by a change of the member''s privacy (app.tg_users__lock_comment_privacy). 64 bits, so two members share a key about never (with 32 bits, about a hundred pairs at a million members, each only an extra wait).';

-- app.tg_comments__author_privacy: supabase/schemas/40_social.sql
COMMENT ON FUNCTION "app"."tg_comments__author_privacy"() IS 'Before a comment is stored: its author_privacy, read under the commenter''s privacy lock taken shared (a privacy change takes it exclusively: it waits for the comment, or the comment for it), whatever the insert said. The column has no default: a write that skips the triggers (session_replication_role = replica) must name it, or fails. Security definer: members may not write author_privacy.';

-- app.tg_users__lock_comment_privacy: supabase/schemas/40_social.sql
COMMENT ON FUNCTION "app"."tg_users__lock_comment_privacy"() IS 'Before a member''s privacy changes: takes their comment privacy lock exclusively (app.comment_privacy_lock), held to commit, so no comment of theirs is written with the old value after app.tg_users__propagate_privacy_to_comments has copied the new one. In a BEFORE trigger: all of a statement''s members are locked before any AFTER trigger locks their todos (a multi-member update deadlocked with a comment otherwise).';

-- app.comment_privacy_lock: supabase/schemas/40_social.sql
REVOKE ALL ON FUNCTION "app"."comment_privacy_lock"(uuid) FROM PUBLIC;

-- app.comment_privacy_lock: supabase/schemas/40_social.sql
GRANT EXECUTE ON FUNCTION "app"."comment_privacy_lock"(uuid) TO "authenticated", "postgres", "service_role";

-- app.tg_users__lock_comment_privacy: supabase/schemas/40_social.sql
REVOKE ALL ON FUNCTION "app"."tg_users__lock_comment_privacy"() FROM PUBLIC;

-- app.tg_users__lock_comment_privacy: supabase/schemas/40_social.sql
GRANT EXECUTE ON FUNCTION "app"."tg_users__lock_comment_privacy"() TO "postgres";
