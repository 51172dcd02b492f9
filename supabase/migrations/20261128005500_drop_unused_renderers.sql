-- Four one-row renderers that nothing calls any more (issue 27, eighth round)
--
-- app.image_set, app.mentioned_user_json, app.mentioned_project_json and app.attachment_json
-- rendered one row as jsonb for callers that now read the cards kept on write as text
-- (supabase/schemas/70_rendering.sql). No function, policy, view or code calls them; each still
-- had a SET clause, so any future caller would have re-planned it in every transaction (test/sql.test.ts
-- listed them as the exceptions). The shapes live on in the cards and in the *_json_body
-- functions that the notifications use.

DROP FUNCTION "app"."image_set"(text, text);
DROP FUNCTION "app"."mentioned_user_json"("app"."users");
DROP FUNCTION "app"."mentioned_project_json"("app"."projects");
DROP FUNCTION "app"."attachment_json"("app"."uploads");
