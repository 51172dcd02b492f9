-- Catalog comments with their measured figures (issue 27, sixth round's note)
--
-- Three comments quoted figures read from a harness that timed two calls per iteration: a page of
-- 10,000 messages counted through the messages policy cost 13.7 ms, not 27 ms, and a page of
-- 10,000 comments through the comments policy 40 ms, not 81 (docs/performance.md, "Sixth
-- round", has the measurements). Comments only.

-- column app.conversations.messages_count: supabase/schemas/50_chat.sql
COMMENT ON COLUMN "app"."conversations"."messages_count" IS 'How many messages the conversation holds: the total_count of GET /v1/conversations/{id}/messages. Counted up by app.tg_messages__count and down by app.tg_messages__uncount, per statement, in the statement that writes the messages; a count of the messages at every page grew with them (13.7 ms a page at 10,000 messages: every row passed the messages policy; 1.0 ms with the counter).';

-- api.messages_list: supabase/schemas/50_chat.sql
COMMENT ON FUNCTION "api"."messages_list"(text, integer, text) IS 'GET /v1/conversations/{conversation_id}/messages: newest first, as JSON text with URL markers (app.messages_text; the HTTP layer puts the URLs in place). total_count is the conversation''s messages_count, kept on write: counting the messages passed each through the messages policy (13.7 ms a page at 10,000 messages).';

-- app.visible_comments_count: supabase/schemas/40_social.sql
COMMENT ON FUNCTION "app"."visible_comments_count"(uuid) IS 'How many comments of a todo the current viewer sees, muted members'' left out: the total_count of GET /v1/todos/{id}/comments. From the todo''s comments_count less the comments the viewer may not see, found among those of members who are not public (comments_todo_id_not_public_idx), and less the muted members'' they may see: the cost follows the todo''s comments by members who are not public and the viewer''s mutes, not every comment (each passed the comments policy before: 40 ms a page at 10,000 comments). Security definer so the comments are not filtered by the policy row by row: it applies the same rule (app.can_see_comment''s, on author_privacy) and answers only for auth.uid() and a todo they may see (null otherwise, and without a viewer). PL/pgSQL: its statement is planned once per session.';
