-- Fixes from a review of migrations 1800-2200.
--
-- 1. The projects policy did not inline app.can_see_project after all: its viewer argument is a
--    sub-select, ((select auth.uid())), and PostgreSQL does not substitute a function whose body
--    uses such an argument twice. The rule now names the viewer once (the membership questions
--    move into one security-definer call, made only for projects that are not public), and the
--    catalog test EXPLAINs the real policy. app.can_see_comment, which needs the viewer twice,
--    is PL/pgSQL instead: planned once per session rather than once per statement.
-- 2. Lock order. A privacy change locks the member's row, then (propagating) their todos; a todo
--    deletion locked the todo, then (counting) the member's row: the two could deadlock while a
--    large propagation ran. Every todo write now takes the author's row first, as inserts
--    already did (app.tg_todos__prepare). Two privacy changes in one totals shard lock both
--    totals rows in a fixed order.

create function app.is_project_insider(project_id uuid, privacy app.privacy, viewer_id uuid)
returns boolean
language plpgsql
stable
security definer
set search_path = ''
as $$
begin
  return exists (
           select 1 from app.project_makers m
           where m.project_id = is_project_insider.project_id and m.user_id = viewer_id and m.accepted)
      or (privacy = 'protected' and exists (
           select 1 from app.project_follows f
           where f.project_id = is_project_insider.project_id and f.user_id = viewer_id));
end;
$$;
comment on function app.is_project_insider(uuid, app.privacy, uuid) is
  'Whether viewer_id may see a project that is not public: an accepted maker, or a follower of a protected one. Security definer so the projects policy can ask without recursing into the makers'' and followers'' policies.';
grant execute on function app.is_project_insider(uuid, app.privacy, uuid) to authenticated, service_role;

create or replace function app.can_see_project(project_id uuid, privacy app.privacy, viewer_id uuid)
returns boolean
language sql
stable
as $$
  select privacy = 'public' or app.is_project_insider(project_id, privacy, viewer_id)
$$;
comment on function app.can_see_project(uuid, app.privacy, uuid) is
  'Inlined (no SET clause, no table access). The project privacy rule in one place: public everyone; protected makers and followers; private makers only. Names viewer_id once, so the policy''s (select auth.uid()) can be substituted; membership is asked only for projects that are not public.';

create or replace function app.can_see_comment(todo_owner_id uuid, author_id uuid, viewer_id uuid)
returns boolean
language plpgsql
stable
set search_path = ''
as $$
begin
  return viewer_id = todo_owner_id or app.can_see_member_content(author_id, viewer_id);
end;
$$;
comment on function app.can_see_comment(uuid, uuid, uuid) is
  'A comment on a todo the viewer can see is visible when the viewer owns that todo (comments are addressed to them) or may see the commenter''s content (so a private member''s comments stay private elsewhere). PL/pgSQL: it needs the viewer twice, so it could not be inlined into the comments policy, and a PL/pgSQL function is planned once per session.';

create or replace function api.todo_delete(todo_ref text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.todos;
begin
  -- The author's row first, then the todo: the order every todo write and privacy change uses.
  perform 1 from app.users u where u.id = (select auth.uid()) for no key update;
  target := app.own_todo(todo_ref);
  perform app.hit_rate_limit('todo_delete');
  delete from app.todos t where t.id = target.id;
  return null;
end;
$$;
comment on function api.todo_delete(text) is
  'DELETE /v1/todos/{todo_id}: own todos only (403), rate-limited (429); comments, reactions, mentions and attachments go with it (foreign keys cascade). Locks the author''s row before the todo, like posting and privacy changes, so none of them can deadlock another.';

create or replace function app.tg_users__propagate_privacy()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  member_shard smallint := app.todo_total_shard(new.id);
begin
  -- Both totals rows are locked in one order (the enum's) before either changes, so two members
  -- switching opposite ways in the same shard queue instead of deadlocking.
  perform 1 from app.todo_totals tt
  where tt.shard = member_shard and tt.privacy in (old.privacy, new.privacy)
  order by tt.privacy
  for update;
  -- The totals move exactly the todos that change privacy, counted row by row (not from
  -- todos_count, which may already include a todo this statement posted and will count itself).
  -- No todo of this member can be posted meanwhile: posting locks this row first.
  update app.todo_totals tt set todos = tt.todos - c.n
  from (select t.author_privacy, count(*) as n from app.todos t
        where t.user_id = new.id and t.author_privacy <> new.privacy group by t.author_privacy) c
  where tt.privacy = c.author_privacy and tt.shard = member_shard;
  with changed as (
    update app.todos t set author_privacy = new.privacy
    where t.user_id = new.id and t.author_privacy <> new.privacy
    returning 1
  )
  update app.todo_totals tt set todos = tt.todos + (select count(*) from changed)
  where tt.privacy = new.privacy and tt.shard = member_shard;
  return null;
end;
$$;
comment on function app.tg_users__propagate_privacy() is
  'After a member changes privacy: their todos carry the new value, in the same transaction, so the todos policy never sees a stale copy, and exactly those todos move to the totals of the new privacy (both totals rows locked first, in one order). Security definer: members may not write author_privacy or the totals themselves.';

revoke execute on all functions in schema app, api from public;
