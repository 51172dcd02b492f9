-- The comments policy reads the commenter's privacy from the comment (author_privacy)
--
-- The policy asked app.can_see_comment for every row, which asked app.can_see_member_content: two
-- PL/pgSQL calls and the commenter's row, 4 us a comment. A page of a todo's comments walks the
-- ones the viewer may not see too (40 ms past 10,000 hidden comments), as does every read of
-- comments. The same rule, written out on the copy kept by 20261127175623 (as the todos policy
-- reads the todo's author_privacy): the todo's owner, the commenter, a public commenter's, a
-- protected commenter's for their followers (a probe of the follow, for those only). Dropped and
-- created again in this transaction: no read sees the table without its policy.

-- The diff lists functions by name, so a SQL function may come before one it calls: its body
-- is checked once everything is in place (by test/schema.test.ts), not statement by statement.
set local check_function_bodies = off;

-- policy "Comments are visible" on app.comments: supabase/schemas/40_social.sql
DROP POLICY "Comments are visible on visible todos to the todo's owner and t" ON "app"."comments";

-- policy "Comments are visible" on app.comments: supabase/schemas/40_social.sql
CREATE POLICY "Comments are visible on visible todos to the todo's owner and t" ON "app"."comments"
  FOR SELECT
  TO "authenticated"
  USING ((EXISTS ( SELECT 1
   FROM app.todos t
  WHERE
    ((t.id = comments.todo_id) AND ((comments.author_privacy = 'public'::app.privacy) OR (comments.user_id = ( SELECT auth.uid() AS uid)) OR (t.user_id = ( SELECT auth.uid() AS
    uid)) OR ((comments.author_privacy = 'protected'::app.privacy) AND (EXISTS ( SELECT 1
           FROM app.user_follows f
          WHERE ((f.follower_id = ( SELECT auth.uid() AS uid)) AND (f.followee_id = comments.user_id))))))))));

-- app.can_see_comment: supabase/schemas/40_social.sql
COMMENT ON FUNCTION "app"."can_see_comment"(uuid, uuid, uuid) IS 'A comment on a todo the viewer can see is visible when the viewer owns that todo (comments are addressed to them) or may see the commenter''s content (so a private member''s comments stay private elsewhere). The reactions policy and the notifications ask it; the comments policy writes the same rule out on the comment''s author_privacy (no call per row). PL/pgSQL: it needs the viewer twice, so it could not be inlined, and a PL/pgSQL function is planned once per session.';
