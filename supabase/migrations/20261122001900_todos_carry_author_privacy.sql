-- Speed: the todos policy reads the author's privacy from the todo itself.
--
-- The select policy of todos called app.can_see_member_content(user_id, viewer) for every row a
-- statement looked at: a security-definer function call and a lookup of the author, about 9 µs a
-- row. Lists that walk many rows to fill a page paid it on each one: the timeline of the bench's
-- reader walks about 1,600 of the newest todos to find 26 of its own (18 ms at 1M todos), a
-- project page with a query filters every matching todo.
--
-- Each todo now carries its author's privacy (author_privacy, kept equal to users.privacy by
-- triggers), and the policy is a plain expression: public authors' todos pass on a column
-- compare, a protected author's pass when the viewer follows them (a set of the viewer's
-- followees built once per statement, as Supabase's RLS guidance recommends), a private
-- author's only for the author. It is app.can_see_member_content's rule, read from the row;
-- test/sql.test.ts checks that both agree for every privacy and follow state.

alter table app.todos add column author_privacy app.privacy;
comment on column app.todos.author_privacy is
  'The author''s users.privacy, copied so the select policy needs no lookup per row. Set on insert (app.tg_todos__prepare), updated when the author changes privacy (app.tg_users__propagate_privacy). Never changes updated_at.';

-- A copy changing is not an edit: updated_at keeps its value when only the copy moves.
drop trigger _110_set_updated_at on app.todos;
create trigger _110_set_updated_at before update on app.todos
  for each row when (old.author_privacy is not distinct from new.author_privacy)
  execute function app.tg__set_updated_at();

update app.todos t set author_privacy = u.privacy from app.users u where u.id = t.user_id;
alter table app.todos alter column author_privacy set not null;

create or replace function app.tg_todos__prepare()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  author_zone text;
begin
  if tg_op = 'INSERT' then
    -- The author's row is locked (as the counter update after the insert would lock it anyway),
    -- so a privacy change cannot slip between reading the privacy here and this todo's commit:
    -- either it committed first and is read here, or it waits and then updates this todo too.
    select u.time_zone, u.privacy into author_zone, new.author_privacy
    from app.users u where u.id = new.user_id
    for no key update;
    new.local_date := (new.created_at at time zone author_zone)::date;
  end if;
  select p.id into new.project_id
  from app.extract_mentions(new.body, '#') tag
  join app.projects p on lower(p.hashtag) = tag.name
  join app.project_makers m on m.project_id = p.id and m.user_id = new.user_id and m.accepted
  order by tag.position
  limit 1;
  return new;
end;
$$;
comment on function app.tg_todos__prepare() is
  'Before a todo is stored: on insert its local_date (the day in the author''s zone, for streaks) and author_privacy (for the select policy), read with the author''s row locked; on insert and body edits its owning project (the first #hashtag of a project the author makes).';

create function app.tg_users__propagate_privacy()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  update app.todos t set author_privacy = new.privacy where t.user_id = new.id;
  return null;
end;
$$;
comment on function app.tg_users__propagate_privacy() is
  'After a member changes privacy: their todos carry the new value, in the same transaction, so the todos policy never sees a stale copy. Security definer: members may not write author_privacy themselves.';

create trigger _200_propagate_privacy after update of privacy on app.users
  for each row when (old.privacy is distinct from new.privacy)
  execute function app.tg_users__propagate_privacy();

drop policy "Todos are visible to whoever may see their creator's content" on app.todos;
create policy "Todos are visible to whoever may see their creator's content" on app.todos
  for select to authenticated
  using (
    author_privacy = 'public'
    or user_id = (select auth.uid())
    or (author_privacy = 'protected'
        and user_id in (select f.followee_id from app.user_follows f where f.follower_id = (select auth.uid()))));

revoke execute on all functions in schema app, api from public;
