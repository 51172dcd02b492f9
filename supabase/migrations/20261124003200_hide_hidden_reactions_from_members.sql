-- Security (issue 11, item 7), the last line of defence: the reactions policy follows the rule
-- the renderers follow (migration 3100). A reaction was visible to every member who could see
-- what it reacts to, so any statement reading app.reactions as a member (a future list, a buggy
-- function) could show a private member's like. It is now visible where its reactor's comment
-- would be: to the owner of the todo or comment it reacts to, to the reactor, and to whoever may
-- see the reactor's content (app.can_see_comment, the comments policy's rule). The renderer
-- (app.todos_json, security definer) checks the same rule itself; every function that reads
-- reactions under this policy reads only the member's own, which stay visible to them.

drop policy "Reactions are visible with what they react to" on app.reactions;
create policy "Reactions are visible where their reactor's comment would be" on app.reactions
  for select to authenticated
  using (case
    when todo_id is not null then exists (
      select 1 from app.todos t
      where t.id = reactions.todo_id and app.can_see_comment(t.user_id, reactions.user_id, (select auth.uid())))
    else exists (
      select 1 from app.comments c
      where c.id = reactions.comment_id and app.can_see_comment(c.user_id, reactions.user_id, (select auth.uid())))
  end);
