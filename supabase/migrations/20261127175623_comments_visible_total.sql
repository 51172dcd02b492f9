-- A todo's visible comments counted from its counter (app.visible_comments_count)
--
-- GET /v1/todos/{id}/comments counted the todo's comments for its total_count on every page,
-- each one through the comments policy (app.can_see_comment and app.can_see_member_content per
-- row): 81 ms a page at 10,000 comments, growing with the todo's comments. A comment now carries
-- its commenter's privacy (author_privacy, as a todo does), set on insert and kept by a trigger
-- on the commenter's privacy changes, so the visible total is the todo's comments_count less the
-- comments the viewer may not see, found among those of members who are not public (a partial
-- index), and less the muted members' ones.
--
-- The backfill writes the comments of members who are not public (the column's default is
-- public). app.users is share-locked first, until commit: no privacy change can commit between the
-- backfill and the trigger that keeps the copy (they wait for the migration; so do sign-ups and
-- profile edits, for as long as the backfill takes). It is taken before app.comments' exclusive
-- lock, in the order a member's transaction takes them, so the two never deadlock.

-- The diff lists functions by name, so a SQL function may come before one it calls: its body
-- is checked once everything is in place (by test/schema.test.ts), not statement by statement.
set local check_function_bodies = off;

-- In a DO block: the Supabase CLI sends a migration as one implicit transaction, where a
-- top-level LOCK TABLE is refused (25P01); the lock holds until that transaction commits alike.
do $$ begin lock table app.users in share mode; end $$;

-- trigger _110_set_updated_at on app.comments: supabase/schemas/40_social.sql
DROP TRIGGER "_110_set_updated_at" ON "app"."comments";

-- app.comments: supabase/schemas/40_social.sql
ALTER TABLE "app"."comments"
  ADD COLUMN "author_privacy" app.privacy NOT NULL DEFAULT 'public'::app.privacy;

-- The comments of members who are not public carry their privacy (updated_at untouched: its
-- trigger was dropped above and is created again below, without this column).
update app.comments c set author_privacy = u.privacy
from app.users u
where u.id = c.user_id and u.privacy <> 'public';

-- api.todo_comments: supabase/schemas/40_social.sql
CREATE OR REPLACE FUNCTION api.todo_comments (
  todo_ref       text,
  page_limit     integer,
  starting_after text
)
  RETURNS text
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
declare
  target app.todos := app.resolve_todo(todo_ref);
  anchor app.comments;
  page uuid[];
  has_more boolean;
begin
  if target.id is null then
    perform app.http_error(404, format('No todo matches %L.', todo_ref));
  end if;
  if starting_after is not null then
    anchor := app.resolve_comment(starting_after);
    if anchor.id is null or anchor.todo_id <> target.id then
      perform app.http_error(404, format('starting_after: no comment matches %L on this todo.', starting_after));
    end if;
  end if;
  page := array(
    select c.id from app.comments c
    where c.todo_id = target.id
      and not exists (select 1 from app.mutes m where m.user_id = (select auth.uid()) and m.muted_user_id = c.user_id)
      and (anchor.id is null or (c.created_at, c.id) > (anchor.created_at, anchor.id))
    order by c.created_at, c.id
    limit page_limit + 1);
  has_more := cardinality(page) > page_limit;
  page := page[1:page_limit];
  return app.page_envelope_text(
    app.comments_text(page),
    has_more,
    app.visible_comments_count(target.id),
    app.to_public_id('comm', page[cardinality(page)]));
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
  -- The commenter's row is share-locked, so a privacy change cannot slip between reading the
  -- privacy here and this comment's commit: either it committed first and is read here, or it
  -- waits for this commit and then updates this comment too (app.tg_users__propagate_privacy_to_comments).
  select u.privacy into new.author_privacy from app.users u where u.id = new.user_id for share;
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

-- index comments_todo_id_not_public_idx on app.comments: supabase/schemas/40_social.sql
CREATE INDEX comments_todo_id_not_public_idx ON app.comments USING btree (todo_id, user_id) INCLUDE (author_privacy)
  WHERE (author_privacy <> 'public'::app.privacy);

-- trigger _050_author_privacy on app.comments: supabase/schemas/40_social.sql
CREATE TRIGGER _050_author_privacy
  BEFORE INSERT ON app.comments
  FOR EACH ROW
  EXECUTE FUNCTION app.tg_comments__author_privacy();

-- trigger _110_set_updated_at on app.comments: supabase/schemas/40_social.sql
CREATE TRIGGER _110_set_updated_at
  BEFORE UPDATE ON app.comments
  FOR EACH ROW
  WHEN ((NOT (old.author_privacy IS DISTINCT FROM new.author_privacy)))
  EXECUTE FUNCTION app.tg__set_updated_at();

-- trigger _210_propagate_privacy_to_comments on app.users: supabase/schemas/40_social.sql
CREATE TRIGGER _210_propagate_privacy_to_comments
  AFTER UPDATE OF privacy ON app.users
  FOR EACH ROW
  WHEN ((old.privacy IS DISTINCT FROM new.privacy))
  EXECUTE FUNCTION app.tg_users__propagate_privacy_to_comments();

-- app.comments: supabase/schemas/40_social.sql
COMMENT ON COLUMN "app"."comments"."author_privacy" IS 'The commenter''s users.privacy, copied as app.todos.author_privacy is, so a todo''s visible comments are counted from its comments_count and its comments by members who are not public (comments_todo_id_not_public_idx) instead of each comment passing the comments policy. Set on insert (app.tg_comments__author_privacy: the default is never what a comment keeps), updated when the commenter changes privacy (app.tg_users__propagate_privacy_to_comments). Never changes updated_at.';

-- api.todo_comments: supabase/schemas/40_social.sql
COMMENT ON FUNCTION "api"."todo_comments"(text, integer, text) IS 'GET /v1/todos/{todo_id}/comments: oldest first (a conversation reads top-down), replies included with their parent_id, comments of muted members left out. JSON text with URL markers (app.comments_text; the HTTP layer puts the URLs in place), as the todo lists answer. total_count from the todo''s counter (app.visible_comments_count), not a count of every comment.';

-- app.tg_comments__author_privacy: supabase/schemas/40_social.sql
COMMENT ON FUNCTION "app"."tg_comments__author_privacy"() IS 'Before a comment is stored: its author_privacy, read with the commenter''s row share-locked (a privacy change waits for the comment, or the comment for it), whatever the insert said. Security definer: members may not write author_privacy.';

-- app.tg_users__propagate_privacy_to_comments: supabase/schemas/40_social.sql
COMMENT ON FUNCTION "app"."tg_users__propagate_privacy_to_comments"() IS 'After a member changes privacy: their comments carry the new value in the same transaction (by comments_user_id_idx), so a todo''s visible comments_count (app.visible_comments_count) is never counted from a stale copy. Costs as many rows as the member wrote comments, as app.tg_users__propagate_privacy does for their todos. Security definer: members may not write author_privacy.';

-- app.visible_comments_count: supabase/schemas/40_social.sql
COMMENT ON FUNCTION "app"."visible_comments_count"(uuid) IS 'How many comments of a todo the current viewer sees, muted members'' left out: the total_count of GET /v1/todos/{id}/comments. From the todo''s comments_count less the comments the viewer may not see, found among those of members who are not public (comments_todo_id_not_public_idx), and less the muted members'' they may see: the cost follows the todo''s comments by members who are not public and the viewer''s mutes, not every comment (each passed the comments policy before: 81 ms a page at 10,000 comments). Security definer so the comments are not filtered by the policy row by row: it applies the same rule (app.can_see_comment''s, on author_privacy) and answers only for auth.uid() and a todo they may see (null otherwise). PL/pgSQL: its statement is planned once per session.';

-- app.tg_comments__author_privacy: supabase/schemas/40_social.sql
REVOKE ALL ON FUNCTION "app"."tg_comments__author_privacy"() FROM PUBLIC;

-- app.tg_comments__author_privacy: supabase/schemas/40_social.sql
GRANT EXECUTE ON FUNCTION "app"."tg_comments__author_privacy"() TO "postgres";

-- app.tg_users__propagate_privacy_to_comments: supabase/schemas/40_social.sql
REVOKE ALL ON FUNCTION "app"."tg_users__propagate_privacy_to_comments"() FROM PUBLIC;

-- app.tg_users__propagate_privacy_to_comments: supabase/schemas/40_social.sql
GRANT EXECUTE ON FUNCTION "app"."tg_users__propagate_privacy_to_comments"() TO "postgres";

-- app.visible_comments_count: supabase/schemas/40_social.sql
REVOKE ALL ON FUNCTION "app"."visible_comments_count"(uuid) FROM PUBLIC;

-- app.visible_comments_count: supabase/schemas/40_social.sql
GRANT EXECUTE ON FUNCTION "app"."visible_comments_count"(uuid) TO "authenticated", "postgres";
