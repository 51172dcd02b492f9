-- Social: comments, reactions, mutes, reports, follows and the timeline.
--
-- Comments, reactions, follows, mutes and reports: who may see and do what, the counters
-- triggers keep, and the social endpoints including the timeline.

-- Function bodies are not checked here: they call functions of later files (the renderers
-- of 70_rendering.sql) and sections. They are the bodies the migrations created and checked,
-- as test/schema.test.ts proves.
set check_function_bodies = off;

-- ============================================================================
-- Tables
-- ============================================================================
create table app.comments (
  id              uuid primary key default gen_random_uuid(),
  todo_id         uuid not null references app.todos(id) on delete cascade,
  user_id         uuid not null references app.users(id) on delete cascade,
  parent_id       uuid references app.comments(id) on delete cascade,
  body            text not null default '' check (length(body) <= 10000),
  reactions_count integer not null default 0 check (reactions_count >= 0),
  created_at      timestamptz not null default now(),
  updated_at      timestamptz not null default now(),
  author_privacy  app.privacy not null
);
comment on table app.comments is
  'A comment on a todo, or a reply to another comment on the same todo (parent_id). Deleting a comment deletes its replies (cascade). Body may be empty when the comment carries attachments.';
-- Keyset pagination of a todo's comments, oldest first.
create index comments_todo_id_created_at_idx on app.comments (todo_id, created_at, id);
create index comments_user_id_idx on app.comments (user_id, todo_id);
create index comments_parent_id_idx on app.comments (parent_id) where (parent_id is not null);
-- A todo's comments by members who are not public: the only ones a viewer may not see, so the
-- visible total is the todo's comments_count less those the viewer may not see among these
-- (app.visible_comments_count). Small: most commenters are public.
create index comments_todo_id_not_public_idx on app.comments (todo_id, user_id) include (author_privacy) where (author_privacy <> 'public');
comment on column app.comments.author_privacy is
  'The commenter''s users.privacy, copied as app.todos.author_privacy is, so a todo''s visible comments are counted from its comments_count and its comments by members who are not public (comments_todo_id_not_public_idx) instead of each comment passing the comments policy. Set on insert (app.tg_comments__author_privacy; no default: a write without triggers must name it), updated when the commenter changes privacy (app.tg_users__propagate_privacy_to_comments). Never changes updated_at.';

create table app.reactions (
  id         uuid primary key default gen_random_uuid(),
  user_id    uuid not null references app.users(id) on delete cascade,
  todo_id    uuid references app.todos(id) on delete cascade,
  comment_id uuid references app.comments(id) on delete cascade,
  created_at timestamptz not null default now(),
  constraint reactions_one_target check (num_nonnulls(todo_id, comment_id) = 1)
);
comment on table app.reactions is
  'A like on a todo or a comment. At most one per member and target (unique indexes), so reacting twice cannot make two.';
comment on column app.reactions.comment_id is
  'Set for reactions on comments; its foreign key arrives with the comments table.';
create unique index reactions_todo_id_user_id_key on app.reactions (todo_id, user_id) where (todo_id is not null);
create unique index reactions_comment_id_user_id_key on app.reactions (comment_id, user_id) where (comment_id is not null);
-- The five newest reactions of a todo (expand=reactions).
create index reactions_todo_id_created_at_idx on app.reactions (todo_id, created_at desc, id desc) where (todo_id is not null);
create index reactions_user_id_idx on app.reactions (user_id);

create table app.comment_project_mentions (
  comment_id uuid references app.comments(id) on delete cascade,
  project_id uuid references app.projects(id) on delete cascade,
  position   integer not null,
  constraint comment_project_mentions_pkey primary key (comment_id, project_id)
);
comment on table app.comment_project_mentions is
  'Projects a comment names by #hashtag, in body order (as todo_project_mentions).';
create index comment_project_mentions_project_id_idx on app.comment_project_mentions (project_id, comment_id);

create table app.comment_user_mentions (
  comment_id uuid references app.comments(id) on delete cascade,
  user_id    uuid references app.users(id) on delete cascade,
  position   integer not null,
  constraint comment_user_mentions_pkey primary key (comment_id, user_id)
);
comment on table app.comment_user_mentions is
  'Members a comment names by @username, in body order.';
create index comment_user_mentions_user_id_idx on app.comment_user_mentions (user_id, comment_id);

create table app.mutes (
  user_id       uuid references app.users(id) on delete cascade,
  muted_user_id uuid references app.users(id) on delete cascade,
  created_at    timestamptz not null default now(),
  constraint mutes_pkey primary key (user_id, muted_user_id),
  constraint mutes_not_self check (user_id <> muted_user_id)
);
comment on table app.mutes is
  'Whom a member muted: their todos and comments leave the member''s timeline, GET /v1/todos and comment lists (a direct link still works).';
create index mutes_muted_user_id_idx on app.mutes (muted_user_id);

create table app.reports (
  id               uuid primary key default gen_random_uuid(),
  reporter_id      uuid not null references app.users(id) on delete cascade,
  reportable_type  text not null check (reportable_type = any (array['Todo', 'Comment', 'User'])),
  reportable_id    text not null,
  todo_id          uuid references app.todos(id) on delete set null,
  comment_id       uuid references app.comments(id) on delete set null,
  reported_user_id uuid references app.users(id) on delete set null,
  created_at       timestamptz not null default now(),
  constraint reports_one_target check (num_nonnulls(todo_id, comment_id, reported_user_id) <= 1)
);
comment on table app.reports is
  'A member''s report of a todo, comment or user, for the operator''s team (CLI `reports`). The target''s public id is kept as text, so a report outlives the content it is about.';
create index reports_reporter_id_idx on app.reports (reporter_id);
create index reports_todo_id_idx on app.reports (todo_id) where (todo_id is not null);
create index reports_comment_id_idx on app.reports (comment_id) where (comment_id is not null);
create index reports_reported_user_id_idx on app.reports (reported_user_id) where (reported_user_id is not null);
create index reports_created_at_idx on app.reports (created_at desc);

-- ============================================================================
-- Helpers
-- ============================================================================
create function app.can_see_comment(todo_owner_id uuid, author_id uuid, viewer_id uuid)
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
  'A comment on a todo the viewer can see is visible when the viewer owns that todo (comments are addressed to them) or may see the commenter''s content (so a private member''s comments stay private elsewhere). The reactions policy and the notifications ask it; the comments policy writes the same rule out on the comment''s author_privacy (no call per row). PL/pgSQL: it needs the viewer twice, so it could not be inlined, and a PL/pgSQL function is planned once per session.';
grant execute on function app.can_see_comment(uuid, uuid, uuid) to authenticated, service_role;

create function app.resolve_comment(ref text)
returns app.comments
language plpgsql
stable
set search_path = ''
as $$
declare
  result app.comments;
begin
  select c.* into result from app.comments c where c.id = app.from_public_id('comm', ref);
  return result;
end;
$$;
comment on function app.resolve_comment(text) is
  'The comment named by a comm_ id, as far as the viewer may see it; a row of nulls otherwise (callers test its id, as for app.resolve_todo). PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.resolve_comment(text) to authenticated;

create function app.own_comment(ref text)
returns app.comments
language plpgsql
stable
set search_path = ''
as $$
declare
  found_comment app.comments := app.resolve_comment(ref);
begin
  if found_comment.id is null then
    perform app.http_error(404, format('No comment matches %L.', ref));
  elsif found_comment.user_id <> (select auth.uid()) then
    perform app.http_error(403, 'You can only change your own comments.');
  end if;
  return found_comment;
end;
$$;
comment on function app.own_comment(text) is
  'The viewer''s own comment named by ref: 404 when it does not exist for them, 403 when it is someone else''s.';
grant execute on function app.own_comment(text) to authenticated;

create function app.follow_request_page(project_id uuid, page_limit integer, starting_after text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  viewer_id uuid := (select auth.uid());
  anchor_id uuid := app.from_public_id('user', starting_after);
  anchor_at timestamptz;
  page uuid[];
  total bigint;
  has_more boolean;
begin
  -- Requests to follow the viewer (project_id null) or a project they make, oldest first;
  -- requesters the viewer muted are left out, as muted members are out of every list of theirs.
  if follow_request_page.project_id is null then
    if starting_after is not null then
      select r.created_at into anchor_at from app.user_follow_requests r
      where r.followee_id = viewer_id and r.requester_id = anchor_id;
    end if;
    page := array(
      select r.requester_id from app.user_follow_requests r
      where r.followee_id = viewer_id
        and not exists (select 1 from app.mutes m where m.user_id = viewer_id and m.muted_user_id = r.requester_id)
        and (anchor_at is null or (r.created_at, r.requester_id) > (anchor_at, anchor_id))
      order by r.created_at, r.requester_id
      limit page_limit + 1);
    total := (select count(*) from app.user_follow_requests r
              where r.followee_id = viewer_id
                and not exists (select 1 from app.mutes m where m.user_id = viewer_id and m.muted_user_id = r.requester_id));
  else
    if starting_after is not null then
      select r.created_at into anchor_at from app.project_follow_requests r
      where r.project_id = follow_request_page.project_id and r.user_id = anchor_id;
    end if;
    page := array(
      select r.user_id from app.project_follow_requests r
      where r.project_id = follow_request_page.project_id
        and not exists (select 1 from app.mutes m where m.user_id = viewer_id and m.muted_user_id = r.user_id)
        and (anchor_at is null or (r.created_at, r.user_id) > (anchor_at, anchor_id))
      order by r.created_at, r.user_id
      limit page_limit + 1);
    total := (select count(*) from app.project_follow_requests r
              where r.project_id = follow_request_page.project_id
                and not exists (select 1 from app.mutes m where m.user_id = viewer_id and m.muted_user_id = r.user_id));
  end if;
  if starting_after is not null and anchor_at is null then
    perform app.http_error(404, format('starting_after: no follow request matches %L.', starting_after));
  end if;
  has_more := cardinality(page) > page_limit;
  page := page[1:page_limit];
  return app.page_envelope(
    (select jsonb_agg(u.body order by o.n) from unnest(page) with ordinality o(id, n) join app.users_json(page) u on u.id = o.id),
    has_more,
    total,
    app.to_public_id('user', page[cardinality(page)]));
end;
$$;
comment on function app.follow_request_page(uuid, integer, text) is
  'One page of pending follow requests as PaginatedUsers, oldest first (whoever asked first is answered first): to follow the viewer when project_id is null, else to follow that project (the caller checks the viewer makes it). Requesters the viewer muted are left out. Keyset on (created_at, requester); the cursor is the last requester''s user_ id, 404 when it names no pending request.';
grant execute on function app.follow_request_page(uuid, integer, text) to authenticated;

-- ============================================================================
-- Row-level security and grants
-- ============================================================================
-- app.comments
alter table app.comments enable row level security;
-- app.can_see_comment's rule written out on the commenter's privacy kept on the comment
-- (author_privacy), as the todos policy reads the todo's: no function call per row. A page of a
-- todo's comments walks the comments the viewer may not see too, and each of them went through
-- two PL/pgSQL calls (4 us a row: 40 ms to pass 10,000 hidden comments). The follow is a probe
-- for a protected commenter only: as `in (select ...)` every statement hashed all the viewer's
-- follows first (10 us more on a page of one comment).
create policy "Comments are visible on visible todos to the todo's owner and to whoever may see the commenter" on app.comments
  for select to authenticated
  using (exists (
    select 1 from app.todos t
    where t.id = comments.todo_id
      and (comments.author_privacy = 'public'
           or comments.user_id = (select auth.uid())
           or t.user_id = (select auth.uid())
           or (comments.author_privacy = 'protected'
               and exists (select 1 from app.user_follows f
                           where f.follower_id = (select auth.uid()) and f.followee_id = comments.user_id)))));
create policy "Members comment in their own name on todos they can see" on app.comments
  for insert to authenticated
  with check (user_id = (select auth.uid()) and (select app.can_write())
              and exists (select 1 from app.todos t where t.id = todo_id));
create policy "Members delete their own comments" on app.comments
  for delete to authenticated
  using (user_id = (select auth.uid()) and (select app.can_write()));
create policy "Members edit their own comments" on app.comments
  for update to authenticated
  using (user_id = (select auth.uid()))
  with check (user_id = (select auth.uid()) and (select app.can_write()));
grant select, delete on app.comments to authenticated;
grant insert (todo_id, user_id, parent_id, body) on app.comments to authenticated;
grant update (body) on app.comments to authenticated;

-- app.reactions
alter table app.reactions enable row level security;
create policy "Members react in their own name to what they can see" on app.reactions
  for insert to authenticated
  with check (user_id = (select auth.uid()) and (select app.can_write())
              and case when todo_id is not null then exists (select 1 from app.todos t where t.id = todo_id)
                       else exists (select 1 from app.comments c where c.id = comment_id) end);
create policy "Members withdraw their own reactions" on app.reactions
  for delete to authenticated
  using (user_id = (select auth.uid()) and (select app.can_write()));
-- A like is shown where its reactor's comment would be (app.can_see_comment), as the renderers show it.
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
grant select, delete on app.reactions to authenticated;
grant insert (user_id, todo_id, comment_id) on app.reactions to authenticated;

-- app.comment_project_mentions
alter table app.comment_project_mentions enable row level security;
create policy "Comment project mentions are visible with their comment" on app.comment_project_mentions
  for select to authenticated using (exists (select 1 from app.comments c where c.id = comment_id));
grant select on app.comment_project_mentions to authenticated;

-- app.comment_user_mentions
alter table app.comment_user_mentions enable row level security;
create policy "Comment user mentions are visible with their comment" on app.comment_user_mentions
  for select to authenticated using (exists (select 1 from app.comments c where c.id = comment_id));
grant select on app.comment_user_mentions to authenticated;

-- app.mutes
alter table app.mutes enable row level security;
create policy "Members mute in their own name" on app.mutes
  for insert to authenticated with check (user_id = (select auth.uid()) and (select app.can_write()));
create policy "Members see whom they muted" on app.mutes
  for select to authenticated using (user_id = (select auth.uid()));
create policy "Members unmute in their own name" on app.mutes
  for delete to authenticated using (user_id = (select auth.uid()) and (select app.can_write()));
grant insert, select, delete on app.mutes to authenticated;

-- app.reports
alter table app.reports enable row level security;
create policy "Members report in their own name" on app.reports
  for insert to authenticated with check (reporter_id = (select auth.uid()) and (select app.can_write()));
create policy "Members see their own reports" on app.reports
  for select to authenticated using (reporter_id = (select auth.uid()));
grant select on app.reports to authenticated;
grant insert (reporter_id, reportable_type, reportable_id, todo_id, comment_id, reported_user_id) on app.reports to authenticated;

-- ============================================================================
-- Triggers
-- ============================================================================
create function app.tg_reactions__count()
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
comment on function app.tg_reactions__count() is
  'Keeps reactions_count of todos and comments exact, so rendering never counts reactions.';
create trigger _100_count after insert or delete on app.reactions
  for each row execute function app.tg_reactions__count();

create function app.tg_comments__store_mentions()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  perform app.check_mention_limits(new.body);
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
comment on function app.tg_comments__store_mentions() is
  'Parses #hashtags and @usernames of a comment into mention rows, exactly as for todos (at most 20 of each, app.check_mention_limits).';
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
comment on function app.tg_comments__count() is
  'Keeps todos.comments_count exact, replies and cascaded deletions included (the trigger fires per deleted row).';
create trigger _300_count after insert or delete on app.comments
  for each row execute function app.tg_comments__count();

create function app.comment_privacy_lock(member_id uuid)
returns bigint
language sql
immutable
parallel safe
as $$
  select hashtextextended('app.comments author_privacy ' || member_id::text, 0)
$$;
comment on function app.comment_privacy_lock(uuid) is
  'Inlined (no SET clause, no table access). The advisory lock key of a member''s privacy as their comments copy it (author_privacy): taken shared by each comment written (app.tg_comments__author_privacy), exclusively by a change of the member''s privacy (app.tg_users__lock_comment_privacy). 64 bits, so two members share a key about never (with 32 bits, about a hundred pairs at a million members, each only an extra wait).';
grant execute on function app.comment_privacy_lock(uuid) to authenticated, service_role;

create function app.tg_comments__author_privacy()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  -- The commenter's privacy lock, shared: a privacy change takes it exclusively before it copies
  -- the new value onto the member's comments, so it cannot slip between reading the privacy here
  -- and this comment's commit. Either it holds the lock first, and this waits for its commit and
  -- then reads the new value (under READ COMMITTED, which every path of the API and its workers
  -- runs: each statement here takes a new snapshot), or this holds it first, and the change waits
  -- for this commit and then updates this comment too. An advisory lock, not a lock of the
  -- member's row: FOR SHARE there queued the comment behind every update of the row
  -- (followers_count, todos_count, streaks) and could deadlock with an account deletion.
  perform pg_advisory_xact_lock_shared(app.comment_privacy_lock(new.user_id));
  -- Whatever the insert said. A commenter deleted meanwhile reads no row: private then (never
  -- shown by mistake), and the insert fails on its foreign key (23503).
  new.author_privacy := coalesce((select u.privacy from app.users u where u.id = new.user_id), 'private');
  return new;
end;
$$;
comment on function app.tg_comments__author_privacy() is
  'Before a comment is stored: its author_privacy, read under the commenter''s privacy lock taken shared (a privacy change takes it exclusively: it waits for the comment, or the comment for it), whatever the insert said. The column has no default: a write that skips the triggers (session_replication_role = replica) must name it, or fails. Security definer: members may not write author_privacy.';
create trigger _050_author_privacy before insert on app.comments
  for each row execute function app.tg_comments__author_privacy();

create function app.tg_users__lock_comment_privacy()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  -- Comments being written by this member finish first (they hold the lock shared); later ones
  -- wait for this transaction and read the new value. Before the row is written, so that a
  -- statement changing several members takes every lock before any AFTER trigger locks their
  -- todos (app.tg_users__propagate_privacy): a comment holding one member's lock shared updates
  -- its todo's counter next, and the todo may be another changed member's.
  perform pg_advisory_xact_lock(app.comment_privacy_lock(new.id));
  return new;
end;
$$;
comment on function app.tg_users__lock_comment_privacy() is
  'Before a member''s privacy changes: takes their comment privacy lock exclusively (app.comment_privacy_lock), held to commit, so no comment of theirs is written with the old value after app.tg_users__propagate_privacy_to_comments has copied the new one. In a BEFORE trigger: all of a statement''s members are locked before any AFTER trigger locks their todos (a multi-member update deadlocked with a comment otherwise).';
create trigger _010_lock_comment_privacy before update of privacy on app.users
  for each row when (old.privacy is distinct from new.privacy)
  execute function app.tg_users__lock_comment_privacy();

create function app.tg_users__propagate_privacy_to_comments()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  -- The member's comment privacy lock is held since the row was written
  -- (app.tg_users__lock_comment_privacy): comments being written meanwhile have committed.
  update app.comments c set author_privacy = new.privacy
  where c.user_id = new.id and c.author_privacy <> new.privacy;
  return null;
end;
$$;
comment on function app.tg_users__propagate_privacy_to_comments() is
  'After a member changes privacy: their comments carry the new value in the same transaction (by comments_user_id_idx), so a todo''s visible comments_count (app.visible_comments_count) is never counted from a stale copy. Costs as many rows as the member wrote comments, as app.tg_users__propagate_privacy does for their todos. Security definer: members may not write author_privacy.';
create trigger _190_propagate_privacy_to_comments after update of privacy on app.users
  for each row when (old.privacy is distinct from new.privacy)
  execute function app.tg_users__propagate_privacy_to_comments();

create function app.visible_comments_count(todo_id uuid)
returns bigint
language plpgsql
stable
security definer
set search_path = ''
as $$
declare
  viewer_id uuid := auth.uid();
begin
  -- Nobody: nothing to answer (the rule below needs a viewer; with none it would hide nothing).
  if viewer_id is null then
    return null;
  end if;
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
$$;
comment on function app.visible_comments_count(uuid) is
  'How many comments of a todo the current viewer sees, muted members'' left out: the total_count of GET /v1/todos/{id}/comments. From the todo''s comments_count less the comments the viewer may not see, found among those of members who are not public (comments_todo_id_not_public_idx), and less the muted members'' they may see: the cost follows the todo''s comments by members who are not public and the viewer''s mutes, not every comment (each passed the comments policy before: 40 ms a page at 10,000 comments). Security definer so the comments are not filtered by the policy row by row: it applies the same rule (app.can_see_comment''s, on author_privacy) and answers only for auth.uid() and a todo they may see (null otherwise, and without a viewer). PL/pgSQL: its statement is planned once per session.';
grant execute on function app.visible_comments_count(uuid) to authenticated;

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
comment on function app.tg_user_follows__count() is
  'Keeps users.followers_count exact. Security definer: members cannot write counters.';
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
comment on function app.tg_project_follows__count() is
  'Keeps projects.followers_count exact.';
create trigger _100_count after insert or delete on app.project_follows
  for each row execute function app.tg_project_follows__count();

create function app.tg_users__answer_follow_requests()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  if new.privacy = 'public' then
    -- A public member is followed without approval: whoever asked follows now.
    with approved as (
      delete from app.user_follow_requests r where r.followee_id = new.id returning r.requester_id)
    insert into app.user_follows (follower_id, followee_id)
    select a.requester_id, new.id from approved a
    on conflict do nothing;
  elsif new.privacy = 'private' then
    -- Nobody follows a private member anew: what was asked is declined.
    delete from app.user_follow_requests r where r.followee_id = new.id;
  end if;
  return null;
end;
$$;
comment on function app.tg_users__answer_follow_requests() is
  'After a member changes privacy: turning public approves every pending request (followers_count follows through the follows trigger), turning private declines them; turning protected keeps the followers they have. Security definer: the requests are not the member''s to move as someone else''s follows.';
create trigger _300_answer_follow_requests after update of privacy on app.users
  for each row when (old.privacy is distinct from new.privacy)
  execute function app.tg_users__answer_follow_requests();

create function app.tg_projects__answer_follow_requests()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  if new.privacy = 'public' then
    with approved as (
      delete from app.project_follow_requests r where r.project_id = new.id returning r.user_id)
    insert into app.project_follows (user_id, project_id)
    select a.user_id, new.id from approved a
    on conflict do nothing;
  elsif new.privacy = 'private' then
    delete from app.project_follow_requests r where r.project_id = new.id;
  end if;
  return null;
end;
$$;
comment on function app.tg_projects__answer_follow_requests() is
  'After a project changes privacy: turning public approves every pending request, turning private declines them, as for members (app.tg_users__answer_follow_requests).';
create trigger _300_answer_follow_requests after update of privacy on app.projects
  for each row when (old.privacy is distinct from new.privacy)
  execute function app.tg_projects__answer_follow_requests();

-- A commenter's privacy copied onto their comments (author_privacy) is not an edit of them.
create trigger _110_set_updated_at before update on app.comments
  for each row when (old.author_privacy is not distinct from new.author_privacy)
  execute function app.tg__set_updated_at();

-- ============================================================================
-- API functions
-- ============================================================================
create function api.comment_create(commentable_type text, commentable_id text, body text, attachments jsonb, parent_ref text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.todos;
  parent app.comments;
  created app.comments;
  answer jsonb;
begin
  if commentable_type is distinct from 'Todo' then
    perform app.http_error(422, 'commentable_type must be Todo.');
  end if;
  target := app.resolve_todo(commentable_id);
  if target.id is null or commentable_id !~ '^todo_' then
    perform app.http_error(422, format('commentable_id: no todo matches %L.', commentable_id));
  end if;
  if coalesce(btrim(body), '') = '' and jsonb_array_length(coalesce(attachments, '[]'::jsonb)) = 0 then
    perform app.http_error(422, 'body is required unless attachments are given.');
  end if;
  if parent_ref is not null then
    parent := app.resolve_comment(parent_ref);
    if parent.id is null or parent.todo_id <> target.id then
      perform app.http_error(422, format('parent_id: no comment matches %L on this todo.', parent_ref));
    end if;
  end if;
  perform app.hit_rate_limit('comment_create');
  insert into app.comments (todo_id, user_id, parent_id, body)
  values (target.id, (select auth.uid()), parent.id, coalesce(body, ''))
  returning * into created;
  perform app.attach_uploads(attachments, null, created.id, 'attachments');
  -- Rendered as the viewer sees it now: a change committed since the checks above (the todo's
  -- author went private, an unfollow) can hide it. Then the todo is no longer theirs to comment
  -- on: refused as above, the comment rolled back, never a 201 without its body.
  answer := app.comment_json(created);
  if answer is null then
    perform app.http_error(422, format('commentable_id: no todo matches %L.', commentable_id));
  end if;
  return answer;
end;
$$;
comment on function api.comment_create(text, text, text, jsonb, text) is
  'POST /v1/comments: on a todo the viewer can see (422 otherwise), optionally as a reply (parent_id, a comment on the same todo). body may be empty when attachments are given. Rate-limited (comment_create, 429) once the input is valid.';
grant execute on function api.comment_create(text, text, text, jsonb, text) to authenticated;

create function api.comment_update(comment_ref text, patch jsonb)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.comments := app.own_comment(comment_ref);
  answer jsonb;
begin
  perform app.hit_rate_limit('comment_update');
  perform app.detach_uploads(patch -> 'remove_attachment_ids', null, target.id, 'remove_attachment_ids');
  perform app.attach_uploads(patch -> 'attachments', null, target.id, 'attachments');
  if patch ? 'body' then
    update app.comments c set body = patch ->> 'body' where c.id = target.id returning * into target;
  end if;
  -- As comment_create: hidden since the check (its todo's author went private), the edit is refused and rolled back.
  answer := app.comment_json(target);
  if answer is null then
    perform app.http_error(404, format('No comment matches %L.', comment_ref));
  end if;
  return answer;
end;
$$;
comment on function api.comment_update(text, jsonb) is
  'PATCH /v1/comments/{comment_id}: own comments only (403), rate-limited (429); attachments additive, remove_attachment_ids removes.';
grant execute on function api.comment_update(text, jsonb) to authenticated;

create function api.comment_delete(comment_ref text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.comments := app.own_comment(comment_ref);
begin
  perform app.hit_rate_limit('comment_delete');
  delete from app.comments c where c.id = target.id;
  return null;
end;
$$;
comment on function api.comment_delete(text) is
  'DELETE /v1/comments/{comment_id}: own comments only (403), rate-limited (429); replies, reactions, mentions and attachments go with it.';
grant execute on function api.comment_delete(text) to authenticated;

create function api.todo_comments(todo_ref text, page_limit integer, starting_after text)
returns text
language plpgsql
stable
set search_path = ''
as $$
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
$$;
comment on function api.todo_comments(text, integer, text) is
  'GET /v1/todos/{todo_id}/comments: oldest first (a conversation reads top-down), replies included with their parent_id, comments of muted members left out. JSON text with URL markers (app.comments_text; the HTTP layer puts the URLs in place), as the todo lists answer. total_count from the todo''s counter (app.visible_comments_count), not a count of every comment.';
grant execute on function api.todo_comments(text, integer, text) to authenticated;

create function app.lock_reactable(target_todo uuid, target_comment uuid)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  -- Parent first, as a delete cascades: the todo, then the comment.
  perform 1 from app.todos t
   where t.id = coalesce(target_todo, (select c.todo_id from app.comments c where c.id = target_comment))
     for key share;
  if target_comment is not null then
    perform 1 from app.comments c where c.id = target_comment for key share;
  end if;
end;
$$;
comment on function app.lock_reactable(uuid, uuid) is
  'Locks what a reaction is on (the todo, and the comment) before the reaction is added or removed, in the order a delete of the todo or comment takes them. Why: a reaction''s row and its counter update (and notification) came before the todo''s row, while deleting the todo locks the todo first and then cascades to its comments and reactions, so the two deadlocked (found by test/races.test.ts: 503 for a like racing the todo''s deletion). Key share: concurrent likes of one todo do not wait for each other here; a delete waits for them, or they for it. Security definer: a member may like what they cannot update, and row locks need the row to pass the update policies.';
grant execute on function app.lock_reactable(uuid, uuid) to authenticated;

create function api.reaction_create(reactable_type text, reactable_id text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  me uuid := (select auth.uid());
  target_todo uuid;
  target_comment uuid;
  reaction app.reactions;
begin
  if reactable_type = 'Todo' then
    target_todo := (app.resolve_todo(reactable_id)).id;
    if target_todo is null or reactable_id !~ '^todo_' then
      perform app.http_error(422, format('reactable_id: no todo matches %L.', reactable_id));
    end if;
    perform app.lock_reactable(target_todo, null);
    -- A unique index, not a check-then-insert: concurrent likes leave one row.
    insert into app.reactions (user_id, todo_id) values (me, target_todo)
    on conflict (todo_id, user_id) where todo_id is not null do nothing
    returning * into reaction;
    if reaction.id is null then
      select * into reaction from app.reactions r where r.todo_id = target_todo and r.user_id = me;
    else
      perform app.hit_rate_limit('reaction_create');
    end if;
  elsif reactable_type = 'Comment' then
    target_comment := (app.resolve_comment(reactable_id)).id;
    if target_comment is null then
      perform app.http_error(422, format('reactable_id: no comment matches %L.', reactable_id));
    end if;
    perform app.lock_reactable(null, target_comment);
    insert into app.reactions (user_id, comment_id) values (me, target_comment)
    on conflict (comment_id, user_id) where comment_id is not null do nothing
    returning * into reaction;
    if reaction.id is null then
      select * into reaction from app.reactions r where r.comment_id = target_comment and r.user_id = me;
    else
      perform app.hit_rate_limit('reaction_create');
    end if;
  else
    perform app.http_error(422, 'reactable_type must be Todo or Comment.');
  end if;
  return app.reaction_json(reaction);
end;
$$;
comment on function api.reaction_create(text, text) is
  'POST /v1/reactions: like a todo or comment the viewer can see (422 otherwise). Reacting again returns the existing reaction; the unique index makes that hold under concurrent requests too. Only a like that adds a row counts toward reaction_create (429); past the limit the new row rolls back with the error.';
grant execute on function api.reaction_create(text, text) to authenticated;

create function api.reaction_delete(reaction_ref text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.reactions;
begin
  select * into target from app.reactions r where r.id = app.from_public_id('reac', reaction_ref);
  if target.id is null then
    perform app.http_error(404, format('No reaction matches %L.', reaction_ref));
  elsif target.user_id <> (select auth.uid()) then
    perform app.http_error(403, 'You can only remove your own reactions.');
  end if;
  perform app.lock_reactable(target.todo_id, target.comment_id);
  delete from app.reactions r where r.id = target.id;
  return null;
end;
$$;
comment on function api.reaction_delete(text) is
  'DELETE /v1/reactions/{reaction_id}: own reactions only (403); 404 when unknown or on something the viewer cannot see.';
grant execute on function api.reaction_delete(text) to authenticated;

create function api.report_create(reportable_type text, reportable_id text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target_todo uuid;
  target_comment uuid;
  target_user uuid;
  report app.reports;
begin
  case reportable_type
    when 'Todo' then
      target_todo := (app.resolve_todo(reportable_id)).id;
      if target_todo is null or reportable_id !~ '^todo_' then
        perform app.http_error(422, format('reportable_id: no todo matches %L.', reportable_id));
      end if;
    when 'Comment' then
      target_comment := (app.resolve_comment(reportable_id)).id;
      if target_comment is null then
        perform app.http_error(422, format('reportable_id: no comment matches %L.', reportable_id));
      end if;
    when 'User' then
      target_user := (select u.id from app.users u where u.id = app.from_public_id('user', reportable_id));
      if target_user is null then
        perform app.http_error(422, format('reportable_id: no user matches %L.', reportable_id));
      end if;
    else
      perform app.http_error(422, 'reportable_type must be Todo, Comment or User.');
  end case;
  perform app.hit_rate_limit('report_create');
  insert into app.reports (reporter_id, reportable_type, reportable_id, todo_id, comment_id, reported_user_id)
  values ((select auth.uid()), reportable_type, reportable_id, target_todo, target_comment, target_user)
  returning * into report;
  return jsonb_build_object(
    'id', app.to_public_id('rep', report.id),
    'created_at', report.created_at,
    'reportable_type', report.reportable_type,
    'reportable_id', report.reportable_id);
end;
$$;
comment on function api.report_create(text, text) is
  'POST /v1/reports: a todo, comment (that the reporter can see) or user; 422 for an unknown type or target. Every report is a new row, so every valid one counts toward report_create (429).';
grant execute on function api.report_create(text, text) to authenticated;

create function api.user_follow(user_ref text, follow boolean)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target uuid := app.resolve_user(user_ref);
  me uuid := (select auth.uid());
  target_privacy app.privacy;
  started boolean;
begin
  if target is null then
    perform app.http_error(404, format('No user matches %L.', user_ref));
  elsif target = me then
    perform app.http_error(422, 'You cannot follow yourself.');
  end if;
  if follow then
    -- Asking again changes nothing and takes no lock (a lock on someone else's row for nothing).
    if exists (select 1 from app.user_follows f where f.follower_id = me and f.followee_id = target)
       or exists (select 1 from app.user_follow_requests r where r.requester_id = me and r.followee_id = target) then
      return null;
    end if;
    target_privacy := app.lock_member_privacy(target);
    if exists (select 1 from app.user_follows f where f.follower_id = me and f.followee_id = target) then
      return null;
    elsif target_privacy = 'public' then
      insert into app.user_follows (follower_id, followee_id) values (me, target) on conflict do nothing
      returning true into started;
    elsif target_privacy = 'protected' then
      insert into app.user_follow_requests (requester_id, followee_id) values (me, target) on conflict do nothing
      returning true into started;
    else
      perform app.http_error(403, format('%s is private: nobody can follow them.', user_ref));
    end if;
    if started then
      perform app.hit_rate_limit('user_follow');
    end if;
  else
    -- The request first: an approval in flight holds it until it commits, and the next
    -- statement then sees (and removes) the follow it made. The other order could miss it.
    delete from app.user_follow_requests r where r.requester_id = me and r.followee_id = target;
    delete from app.user_follows f where f.follower_id = me and f.followee_id = target;
  end if;
  return null;
end;
$$;
comment on function api.user_follow(text, boolean) is
  'POST and DELETE /v1/users/{user_id}/follow, idempotent. POST follows a public member at once; of a protected member it makes a pending request (follow_requested) that the member approves or declines, and shows nothing until approved; a private member cannot be followed (403). Following someone already followed is a no-op whatever their privacy now. DELETE unfollows and withdraws a pending request. The member''s row is locked first (app.lock_member_privacy), so a privacy change cannot slip between the decision and the row. A new follow or request counts toward user_follow (429); no-ops and DELETE do not.';
grant execute on function api.user_follow(text, boolean) to authenticated;

create function api.project_follow(project_ref text, follow boolean)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  me uuid := (select auth.uid());
  target uuid := app.resolve_project(project_ref);
  target_privacy app.privacy;
  started boolean;
begin
  if target is null then
    perform app.http_error(404, format('No project matches %L.', project_ref));
  end if;
  if follow then
    -- Asking again changes nothing and takes no lock, as in api.user_follow.
    if exists (select 1 from app.project_follows f where f.user_id = me and f.project_id = target)
       or exists (select 1 from app.project_follow_requests r where r.user_id = me and r.project_id = target) then
      return null;
    end if;
    target_privacy := app.lock_project_privacy(target);
    if exists (select 1 from app.project_follows f where f.user_id = me and f.project_id = target) then
      return null;
    elsif target_privacy = 'public' or app.is_project_maker(target, me) then
      insert into app.project_follows (user_id, project_id) values (me, target) on conflict do nothing
      returning true into started;
    elsif target_privacy = 'protected' then
      insert into app.project_follow_requests (user_id, project_id) values (me, target) on conflict do nothing
      returning true into started;
    else
      perform app.http_error(404, format('No project matches %L.', project_ref));
    end if;
    if started then
      perform app.hit_rate_limit('project_follow');
    end if;
  else
    -- The request first, as in api.user_follow: an approval in flight cannot slip past.
    delete from app.project_follow_requests r where r.user_id = me and r.project_id = target;
    delete from app.project_follows f where f.user_id = me and f.project_id = target;
  end if;
  return null;
end;
$$;
comment on function api.project_follow(text, boolean) is
  'POST and DELETE /v1/projects/{project_id}/follow, idempotent. POST follows a public project (or one the member makes) at once; a protected one gets a pending request (follow_requested) that any maker approves or declines, and its todos stay hidden until then; a private one is 404 to all but its makers. DELETE unfollows and withdraws a pending request. The project''s row is locked first (app.lock_project_privacy) against a concurrent privacy change. A new follow or request counts toward project_follow (429); no-ops and DELETE do not.';
grant execute on function api.project_follow(text, boolean) to authenticated;

create function api.user_mute(user_ref text, mute boolean)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target uuid := app.resolve_user(user_ref);
  me uuid := (select auth.uid());
  muted boolean;
begin
  if target is null then
    perform app.http_error(404, format('No user matches %L.', user_ref));
  elsif target = me then
    perform app.http_error(422, 'You cannot mute yourself.');
  end if;
  if mute then
    insert into app.mutes (user_id, muted_user_id) values (me, target) on conflict do nothing
    returning true into muted;
    if muted then
      perform app.hit_rate_limit('mute_create');
    end if;
    -- Muting a requester declines their request (they are not told, as with any decline).
    delete from app.user_follow_requests r where r.requester_id = target and r.followee_id = me;
  else
    delete from app.mutes m where m.user_id = me and m.muted_user_id = target;
  end if;
  return null;
end;
$$;
comment on function api.user_mute(text, boolean) is
  'POST and DELETE /v1/users/{user_id}/mute: idempotent; muted members leave the viewer''s feeds, comment lists and follow requests, and muting declines their pending request to follow the viewer. Muting counts toward mute_create (429); muting again (a no-op) and unmuting do not.';
grant execute on function api.user_mute(text, boolean) to authenticated;

create function api.follow_requests(page_limit integer, starting_after text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return app.follow_request_page(null::uuid, page_limit, starting_after);
end;
$$;
comment on function api.follow_requests(integer, text) is
  'GET /v1/follow_requests: the members who asked to follow the viewer, oldest first (PaginatedUsers), muted ones left out.';
grant execute on function api.follow_requests(integer, text) to authenticated;

create function api.follow_request_answer(user_ref text, approve boolean)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  me uuid := (select auth.uid());
  requester uuid := app.resolve_user(user_ref);
  answered boolean;
begin
  if requester is null then
    perform app.http_error(404, format('No user matches %L.', user_ref));
  end if;
  if approve then
    -- The member's row first, the order every follow and privacy change takes it in (the
    -- followers_count trigger locks it too): the other order deadlocked with a repeated follow.
    perform app.lock_member_privacy(me);
    -- One statement: the follow is made from the request it deletes, so an approval racing a
    -- withdrawal either makes the follow or finds no request (404), never a follow nobody asked
    -- for. RLS on user_follows admits the row: the statement's snapshot still holds the request.
    with answered_request as (
      delete from app.user_follow_requests r
      where r.requester_id = requester and r.followee_id = me
      returning r.requester_id, r.followee_id
    ), approved as (
      insert into app.user_follows (follower_id, followee_id)
      select a.requester_id, a.followee_id from answered_request a
      on conflict do nothing
    )
    select exists (select 1 from answered_request) into answered;
    if not answered then
      perform app.http_error(404, format('%s has not asked to follow you.', user_ref));
    end if;
  else
    delete from app.user_follow_requests r where r.requester_id = requester and r.followee_id = me;
  end if;
  return null;
end;
$$;
comment on function api.follow_request_answer(text, boolean) is
  'POST /v1/follow_requests/{user_id}/approve (approve: the requester follows the viewer from now on, 404 when they have not asked) and DELETE /v1/follow_requests/{user_id} (decline: idempotent, the requester is not told). Only requests to the viewer can be answered, so a requester cannot approve their own. Neither counts toward a rate limit: they move or remove the row the request made, and the request was counted.';
grant execute on function api.follow_request_answer(text, boolean) to authenticated;

create function app.made_project(project_ref text)
returns uuid
language plpgsql
stable
set search_path = ''
as $$
declare
  target uuid := app.resolve_project(project_ref);
begin
  if target is null then
    perform app.http_error(404, format('No project matches %L.', project_ref));
  elsif not app.is_project_maker(target, (select auth.uid())) then
    perform app.http_error(403, 'Only the project''s makers can answer its follow requests.');
  end if;
  return target;
end;
$$;
comment on function app.made_project(text) is
  'The project named by ref, if the viewer makes it: 404 when they may not see it, 403 when they see it but do not make it (the follow requests of a project are its makers'' to answer).';
grant execute on function app.made_project(text) to authenticated;

create function api.project_follow_requests(project_ref text, page_limit integer, starting_after text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return app.follow_request_page(app.made_project(project_ref), page_limit, starting_after);
end;
$$;
comment on function api.project_follow_requests(text, integer, text) is
  'GET /v1/projects/{project_id}/follow_requests: the members who asked to follow the project, oldest first (PaginatedUsers); makers only (403), 404 when the project is not visible.';
grant execute on function api.project_follow_requests(text, integer, text) to authenticated;

create function api.project_follow_request_answer(project_ref text, user_ref text, approve boolean)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target uuid := app.made_project(project_ref);
  requester uuid := app.resolve_user(user_ref);
  answered boolean;
begin
  if requester is null then
    perform app.http_error(404, format('No user matches %L.', user_ref));
  end if;
  if approve then
    -- As api.follow_request_answer: the project's row first, then the follow made from the
    -- request it deletes.
    perform app.lock_project_privacy(target);
    with answered_request as (
      delete from app.project_follow_requests r
      where r.user_id = requester and r.project_id = target
      returning r.user_id, r.project_id
    ), approved as (
      insert into app.project_follows (user_id, project_id)
      select a.user_id, a.project_id from answered_request a
      on conflict do nothing
    )
    select exists (select 1 from answered_request) into answered;
    if not answered then
      perform app.http_error(404, format('%s has not asked to follow this project.', user_ref));
    end if;
  else
    delete from app.project_follow_requests r where r.user_id = requester and r.project_id = target;
  end if;
  return null;
end;
$$;
comment on function api.project_follow_request_answer(text, text, boolean) is
  'POST /v1/projects/{project_id}/follow_requests/{user_id}/approve and DELETE /v1/projects/{project_id}/follow_requests/{user_id}: any maker approves (404 when there is no such request) or declines (idempotent); 403 for others. No rate limit, as for members'' requests.';
grant execute on function api.project_follow_request_answer(text, text, boolean) to authenticated;

create function app.timeline_todos_between(lo timestamptz, hi timestamptz)
returns bigint
language plpgsql
stable
security definer
set search_path = ''
-- Its statements are planned once per session: a custom plan per call cost 0.5 ms of an
-- unfiltered GET /v1/timeline (issue 27). The generic plans are the same index probes.
set plan_cache_mode = force_generic_plan
as $$
declare
  viewer_id uuid := auth.uid();
  unbounded boolean := lo is null and hi is null;
begin
  lo := coalesce(lo, '-infinity'::timestamptz);
  hi := coalesce(hi, 'infinity'::timestamptz);
  -- |A ∪ B| = |A| + |B \ A|. A: the viewer's and their followees' todos (a followee is visible
  -- unless private; protected ones are visible to their approved followers; a member's todos
  -- carry the member's privacy), muted ones left out: from todos_count when unbounded or when
  -- the range holds the member's whole history (two index probes: their oldest and newest
  -- todo; `since=1970` is every member's whole history), else counted per member by
  -- (user_id, created_at). B: the followed projects' todos by anyone else the viewer may see
  -- (public authors: a protected one the viewer follows is in A).
  -- Two statements, not one with both branches: each call starts the executor of its own
  -- branch only (0.17 -> 0.145 ms a call unbounded, issue 27).
  if unbounded then
    return (select coalesce(sum(u.todos_count), 0) from app.users u
              where u.id in (select viewer_id union select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
                and (u.id = viewer_id or u.privacy <> 'private')
                and not exists (select 1 from app.mutes m where m.user_id = viewer_id and m.muted_user_id = u.id))
      -- Unbounded: summed per author from the counters (app.project_todo_counts), a row per
      -- (project, author) rather than an index entry per todo; an author's todos carry their
      -- privacy (app.tg_users__propagate_privacy, in the same transaction), so `public` is
      -- read from the author's row.
      + (select coalesce(sum(c.todos), 0) from app.project_follows pf
            join app.project_todo_counts c on c.project_id = pf.project_id
            join app.users a on a.id = c.user_id
           where pf.user_id = viewer_id and c.user_id <> viewer_id
             and a.privacy = 'public'
             and c.user_id not in (select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
             and not exists (select 1 from app.mutes m where m.user_id = viewer_id and m.muted_user_id = c.user_id));
  end if;
  return (select coalesce(sum(case
                      when lo <= e.first_at and hi > e.last_at then u.todos_count
                      else (select count(*) from app.todos t where t.user_id = u.id and t.created_at >= lo and t.created_at < hi)
                    end), 0)
               from app.users u
               cross join lateral (
                 select (select t.created_at from app.todos t where t.user_id = u.id order by t.created_at, t.id limit 1) as first_at,
                        (select t.created_at from app.todos t where t.user_id = u.id order by t.created_at desc, t.id desc limit 1) as last_at) e
              where u.id in (select viewer_id union select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
                and (u.id = viewer_id or u.privacy <> 'private')
                and not exists (select 1 from app.mutes m where m.user_id = viewer_id and m.muted_user_id = u.id))
    + (select count(*) from app.project_follows pf
            join app.todos t on t.project_id = pf.project_id
           where pf.user_id = viewer_id and t.user_id <> viewer_id
             and t.created_at >= lo and t.created_at < hi
             and t.author_privacy = 'public'
             and t.user_id not in (select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
             and not exists (select 1 from app.mutes m where m.user_id = viewer_id and m.muted_user_id = t.user_id));
end;
$$;
comment on function app.timeline_todos_between(timestamp with time zone, timestamp with time zone) is
  'How many todos of the current viewer''s timeline have lo <= created_at < hi (both null: all of them): the total_count of GET /v1/timeline. The viewer''s and followees'' from their todos_count when unbounded or when the range holds a member''s whole history (their oldest and newest todo, two index probes), else counted per member by the (user_id, created_at) index; the followed projects'' todos by other public members summed per author from app.project_todo_counts when unbounded (the unfiltered timeline: a cost only the list pays, issue 27), else counted by the (project_id, created_at) index. Bounded by what the followed sources hold, never by how many todos everyone has (issue 26). Security definer: counts through the follows and mutes of auth.uid() only, and reads no todo it returns. force_generic_plan: planned once per session, not on every call (0.67 -> 0.18 ms, issue 27).';
grant execute on function app.timeline_todos_between(timestamp with time zone, timestamp with time zone) to authenticated;

create function api.timeline(filters jsonb, page_limit integer, starting_after text, expand_reactions boolean)
returns text
language plpgsql
stable
set search_path = ''
as $$
begin
  return app.todo_page('timeline', null, filters, page_limit, starting_after, expand_reactions);
end;
$$;
comment on function api.timeline(jsonb, integer, text, boolean) is
  'GET /v1/timeline: the viewer''s own todos and those of followed members and followed projects, minus muted members, newest first, with the filters of every todo list. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined and was parsed and planned again on every call (20-40 us of a 1 ms page).';
grant execute on function api.timeline(jsonb, integer, text, boolean) to authenticated;

-- ============================================================================
-- Execute only where granted above
-- ============================================================================
revoke execute on all functions in schema app, api from public;
