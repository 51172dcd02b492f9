-- Speed: look mentioned members and projects up by index when a todo or comment is stored.
--
-- app.extract_mentions is a set-returning function, which the planner assumes returns 1,000
-- rows unless told otherwise. Joined to app.users on lower(username), that estimate made it
-- hash all 10,000 members for every todo posted (3.5 ms of POST /v1/todos at the bench's size,
-- growing with the members); a body holds a handful of mentions, and with that estimate each is
-- one index lookup (users_username_pattern_idx, projects_hashtag_key).

alter function app.extract_mentions(text, text) rows 4;
