-- Social: comments (with replies), reactions on comments, reports, mutes, and the follower
-- counters of users and projects.

-- ============================================================================
-- Tables
-- ============================================================================
create table app.comments (
  id uuid primary key default gen_random_uuid(),
  todo_id uuid not null references app.todos (id) on delete cascade,
  user_id uuid not null references app.users (id) on delete cascade,
  parent_id uuid references app.comments (id) on delete cascade,
  body text not null default '' check (length(body) <= 10000),
  reactions_count integer not null default 0 check (reactions_count >= 0),
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);
comment on table app.comments is 'A comment on a todo, or a reply to another comment on the same todo (parent_id). Deleting a comment deletes its replies (cascade). Body may be empty when the comment carries attachments.';
-- Keyset pagination of a todo's comments, oldest first.
create index comments_todo_id_created_at_idx on app.comments (todo_id, created_at, id);
create index comments_user_id_idx on app.comments (user_id, todo_id);
create index comments_parent_id_idx on app.comments (parent_id) where parent_id is not null;

create trigger _110_set_updated_at before update on app.comments
  for each row execute function app.tg__set_updated_at();

create table app.comment_project_mentions (
  comment_id uuid not null references app.comments (id) on delete cascade,
  project_id uuid not null references app.projects (id) on delete cascade,
  position integer not null,
  primary key (comment_id, project_id)
);
comment on table app.comment_project_mentions is 'Projects a comment names by #hashtag, in body order (as todo_project_mentions).';
create index comment_project_mentions_project_id_idx on app.comment_project_mentions (project_id, comment_id);

create table app.comment_user_mentions (
  comment_id uuid not null references app.comments (id) on delete cascade,
  user_id uuid not null references app.users (id) on delete cascade,
  position integer not null,
  primary key (comment_id, user_id)
);
comment on table app.comment_user_mentions is 'Members a comment names by @username, in body order.';
create index comment_user_mentions_user_id_idx on app.comment_user_mentions (user_id, comment_id);

alter table app.reactions
  add constraint reactions_comment_id_fkey foreign key (comment_id) references app.comments (id) on delete cascade;

create table app.mutes (
  user_id uuid not null references app.users (id) on delete cascade,
  muted_user_id uuid not null references app.users (id) on delete cascade,
  created_at timestamptz not null default now(),
  primary key (user_id, muted_user_id),
  constraint mutes_not_self check (user_id <> muted_user_id)
);
comment on table app.mutes is 'Whom a member muted: their todos and comments leave the member''s timeline, GET /v1/todos and comment lists (a direct link still works).';
create index mutes_muted_user_id_idx on app.mutes (muted_user_id);

create table app.reports (
  id uuid primary key default gen_random_uuid(),
  reporter_id uuid not null references app.users (id) on delete cascade,
  reportable_type text not null check (reportable_type in ('Todo', 'Comment', 'User')),
  reportable_id text not null,
  todo_id uuid references app.todos (id) on delete set null,
  comment_id uuid references app.comments (id) on delete set null,
  reported_user_id uuid references app.users (id) on delete set null,
  created_at timestamptz not null default now(),
  constraint reports_one_target check (num_nonnulls(todo_id, comment_id, reported_user_id) <= 1)
);
comment on table app.reports is 'A member''s report of a todo, comment or user, for the operator''s team (CLI `reports`). The target''s public id is kept as text, so a report outlives the content it is about.';
create index reports_reporter_id_idx on app.reports (reporter_id);
create index reports_todo_id_idx on app.reports (todo_id) where todo_id is not null;
create index reports_comment_id_idx on app.reports (comment_id) where comment_id is not null;
create index reports_reported_user_id_idx on app.reports (reported_user_id) where reported_user_id is not null;
create index reports_created_at_idx on app.reports (created_at desc);

-- ============================================================================
-- Visibility
-- ============================================================================
create function app.can_see_comment(todo_owner_id uuid, author_id uuid, viewer_id uuid)
returns boolean
language sql
stable
security definer
set search_path = ''
as $$
  select viewer_id = todo_owner_id or app.can_see_member_content(author_id, viewer_id)
$$;
comment on function app.can_see_comment(uuid, uuid, uuid) is
  'A comment on a todo the viewer can see is visible when the viewer owns that todo (comments are addressed to them) or may see the commenter''s content (so a private member''s comments stay private elsewhere).';
grant execute on function app.can_see_comment(uuid, uuid, uuid) to authenticated, service_role;

create function app.can_follow_project(project_id uuid, viewer_id uuid)
returns boolean
language sql
stable
security definer
set search_path = ''
as $$
  select exists (
    select 1 from app.projects p
    where p.id = can_follow_project.project_id
      and (p.privacy in ('public', 'protected') or app.is_project_maker(p.id, viewer_id)))
$$;
comment on function app.can_follow_project(uuid, uuid) is
  'Whether a member may follow a project: public and protected ones (following is how one comes to see a protected project, as with protected members), private ones only their makers. Security definer: a protected project is not visible before it is followed.';
grant execute on function app.can_follow_project(uuid, uuid) to authenticated, service_role;

create function app.followable_project(ref text, viewer_id uuid)
returns uuid
language sql
stable
security definer
set search_path = ''
as $$
  select p.id from app.projects p
  where (p.id = app.from_public_id('proj', ref) or (ref !~ '^proj_' and lower(p.slug) = lower(ref)))
    and app.can_follow_project(p.id, viewer_id)
  limit 1
$$;
comment on function app.followable_project(text, uuid) is
  'The project named by a proj_ id or slug, if the member may follow it (app.can_follow_project); null otherwise.';
grant execute on function app.followable_project(text, uuid) to authenticated, service_role;

-- ============================================================================
-- Triggers
-- ============================================================================
create function app.tg_comments__store_mentions()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  if tg_op = 'UPDATE' then
    delete from app.comment_project_mentions where comment_id = new.id;
    delete from app.comment_user_mentions where comment_id = new.id;
  end if;
  insert into app.comment_project_mentions (comment_id, project_id, position)
  select new.id, p.id, tag.position
  from app.extract_mentions(new.body, '#') tag join app.projects p on lower(p.hashtag) = tag.name;
  insert into app.comment_user_mentions (comment_id, user_id, position)
  select new.id, u.id, name.position
  from app.extract_mentions(new.body, '@') name join app.users u on lower(u.username) = name.name;
  return null;
end;
$$;
comment on function app.tg_comments__store_mentions() is 'Parses #hashtags and @usernames of a comment into mention rows, exactly as for todos.';
create trigger _200_store_mentions after insert or update of body on app.comments
  for each row execute function app.tg_comments__store_mentions();

create function app.tg_comments__count()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  if tg_op = 'INSERT' then
    update app.todos t set comments_count = t.comments_count + 1 where t.id = new.todo_id;
  else
    update app.todos t set comments_count = t.comments_count - 1 where t.id = old.todo_id;
  end if;
  return null;
end;
$$;
comment on function app.tg_comments__count() is 'Keeps todos.comments_count exact, replies and cascaded deletions included (the trigger fires per deleted row).';
create trigger _300_count after insert or delete on app.comments
  for each row execute function app.tg_comments__count();

create or replace function app.tg_reactions__count()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  changed app.reactions := case when tg_op = 'INSERT' then new else old end;
  step integer := case when tg_op = 'INSERT' then 1 else -1 end;
begin
  if changed.todo_id is not null then
    update app.todos t set reactions_count = t.reactions_count + step where t.id = changed.todo_id;
  else
    update app.comments c set reactions_count = c.reactions_count + step where c.id = changed.comment_id;
  end if;
  return null;
end;
$$;
comment on function app.tg_reactions__count() is 'Keeps reactions_count of todos and comments exact, so rendering never counts reactions.';

create function app.tg_user_follows__count()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  if tg_op = 'INSERT' then
    update app.users u set followers_count = u.followers_count + 1 where u.id = new.followee_id;
  else
    update app.users u set followers_count = u.followers_count - 1 where u.id = old.followee_id;
  end if;
  return null;
end;
$$;
comment on function app.tg_user_follows__count() is 'Keeps users.followers_count exact. Security definer: members cannot write counters.';
create trigger _100_count after insert or delete on app.user_follows
  for each row execute function app.tg_user_follows__count();

create function app.tg_project_follows__count()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  if tg_op = 'INSERT' then
    update app.projects p set followers_count = p.followers_count + 1 where p.id = new.project_id;
  else
    update app.projects p set followers_count = p.followers_count - 1 where p.id = old.project_id;
  end if;
  return null;
end;
$$;
comment on function app.tg_project_follows__count() is 'Keeps projects.followers_count exact.';
create trigger _100_count after insert or delete on app.project_follows
  for each row execute function app.tg_project_follows__count();

-- Counters written before this migration (by hand or fixtures) are made exact once.
update app.users u set followers_count = (select count(*) from app.user_follows f where f.followee_id = u.id);
update app.projects p set followers_count = (select count(*) from app.project_follows f where f.project_id = p.id);

-- ============================================================================
-- Row-level security
-- ============================================================================
alter table app.comments enable row level security;
alter table app.comment_project_mentions enable row level security;
alter table app.comment_user_mentions enable row level security;
alter table app.mutes enable row level security;
alter table app.reports enable row level security;

create policy "Comments are visible on visible todos to the todo's owner and to whoever may see the commenter" on app.comments
  for select to authenticated
  using (exists (
    select 1 from app.todos t
    where t.id = todo_id and app.can_see_comment(t.user_id, comments.user_id, (select auth.uid()))));
create policy "Members comment in their own name on todos they can see" on app.comments
  for insert to authenticated
  with check (user_id = (select auth.uid()) and (select app.can_write())
              and exists (select 1 from app.todos t where t.id = todo_id));
create policy "Members edit their own comments" on app.comments
  for update to authenticated
  using (user_id = (select auth.uid()))
  with check (user_id = (select auth.uid()) and (select app.can_write()));
create policy "Members delete their own comments" on app.comments
  for delete to authenticated
  using (user_id = (select auth.uid()) and (select app.can_write()));
grant select, delete on app.comments to authenticated;
grant insert (todo_id, user_id, parent_id, body) on app.comments to authenticated;
grant update (body) on app.comments to authenticated;

create policy "Comment project mentions are visible with their comment" on app.comment_project_mentions
  for select to authenticated using (exists (select 1 from app.comments c where c.id = comment_id));
create policy "Comment user mentions are visible with their comment" on app.comment_user_mentions
  for select to authenticated using (exists (select 1 from app.comments c where c.id = comment_id));
grant select on app.comment_project_mentions, app.comment_user_mentions to authenticated;

-- Following a protected project must be possible before one can see it.
drop policy "Members follow projects they can see in their own name" on app.project_follows;
create policy "Members follow public and protected projects in their own name" on app.project_follows
  for insert to authenticated
  with check (user_id = (select auth.uid()) and (select app.can_write())
              and app.can_follow_project(project_id, (select auth.uid())));

-- Reactions: replace the todos-only read policy, and let members react in their own name.
drop policy "Reactions on todos are visible with their todo" on app.reactions;
create policy "Reactions are visible with what they react to" on app.reactions
  for select to authenticated
  using (case when todo_id is not null then exists (select 1 from app.todos t where t.id = todo_id)
              else exists (select 1 from app.comments c where c.id = comment_id) end);
create policy "Members react in their own name to what they can see" on app.reactions
  for insert to authenticated
  with check (user_id = (select auth.uid()) and (select app.can_write())
              and case when todo_id is not null then exists (select 1 from app.todos t where t.id = todo_id)
                       else exists (select 1 from app.comments c where c.id = comment_id) end);
create policy "Members withdraw their own reactions" on app.reactions
  for delete to authenticated
  using (user_id = (select auth.uid()) and (select app.can_write()));
grant insert (user_id, todo_id, comment_id), delete on app.reactions to authenticated;

create policy "Members see whom they muted" on app.mutes
  for select to authenticated using (user_id = (select auth.uid()));
create policy "Members mute in their own name" on app.mutes
  for insert to authenticated with check (user_id = (select auth.uid()) and (select app.can_write()));
create policy "Members unmute in their own name" on app.mutes
  for delete to authenticated using (user_id = (select auth.uid()) and (select app.can_write()));
grant select, insert, delete on app.mutes to authenticated;

create policy "Members see their own reports" on app.reports
  for select to authenticated using (reporter_id = (select auth.uid()));
create policy "Members report in their own name" on app.reports
  for insert to authenticated with check (reporter_id = (select auth.uid()) and (select app.can_write()));
grant select on app.reports to authenticated;
grant insert (reporter_id, reportable_type, reportable_id, todo_id, comment_id, reported_user_id) on app.reports to authenticated;

revoke execute on all functions in schema app, api from public;
