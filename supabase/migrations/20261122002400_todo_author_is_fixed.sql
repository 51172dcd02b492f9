-- A todo keeps its author.
--
-- Members cannot change todos.user_id (no column grant), but an operator's UPDATE could, and then
-- the author's todos_count, streak, the todo's author_privacy and app.todo_totals would all
-- describe the old author. Nothing in the product moves a todo to another member, so the database
-- refuses it outright instead of keeping all of those in step.

create function app.tg_todos__author_is_fixed()
returns trigger
language plpgsql
set search_path = ''
as $$
begin
  raise exception 'A todo keeps its author: user_id cannot change (todo %).', old.id
    using errcode = 'check_violation';
end;
$$;
comment on function app.tg_todos__author_is_fixed() is
  'Refuses an update of todos.user_id: counters, streaks, author_privacy and the totals are kept per author, and no feature moves a todo between members.';

create trigger _090_author_is_fixed before update of user_id on app.todos
  for each row when (old.user_id is distinct from new.user_id)
  execute function app.tg_todos__author_is_fixed();

revoke execute on all functions in schema app, api from public;
