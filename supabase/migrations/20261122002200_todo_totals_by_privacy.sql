-- Speed and scale: total_count of GET /v1/todos without a pass over the members.
--
-- Unfiltered, that total was the sum of todos_count over every member the viewer may see and has
-- not muted: a scan of all members per request (2.2 ms at 10,000 members, the largest part of the
-- request, and growing with the members). Now the todos of public members are kept as totals per
-- author privacy, split in 16 shards by author so that concurrent posts by different members
-- rarely update the same row; the viewer's total is the public total, plus what only they may
-- see (their own todos when not public, protected members they follow), minus the visible members
-- they muted. Exact, like the sum it replaces (tested against count(*) as each viewer).

create table app.todo_totals (
  privacy app.privacy not null,
  shard smallint not null check (shard between 0 and 15),
  todos bigint not null default 0,
  primary key (privacy, shard)
);
comment on table app.todo_totals is
  'How many todos members of each privacy have, in 16 shards by author (app.todo_total_shard). Kept by the todos count trigger and the privacy propagation trigger; read by app.visible_todos_total. Members have no access. No check that todos >= 0: when one statement both changes a member''s privacy and posts for them, the two triggers may pass through -1 before agreeing.';
alter table app.todo_totals enable row level security;

create function app.todo_total_shard(user_id uuid)
returns smallint
language sql
immutable
parallel safe
as $$
  select (abs(hashtext(user_id::text)) % 16)::smallint
$$;
comment on function app.todo_total_shard(uuid) is
  'Inlined (no SET clause, no table access). The app.todo_totals shard of an author''s todos: a member''s posts always update the same row, different members mostly different ones.';

insert into app.todo_totals (privacy, shard)
select p, s from unnest(enum_range(null::app.privacy)) p, generate_series(0, 15) s;
update app.todo_totals tt set todos = c.n
from (select t.author_privacy, app.todo_total_shard(t.user_id) as shard, count(*) as n
      from app.todos t group by 1, 2) c
where tt.privacy = c.author_privacy and tt.shard = c.shard;

create or replace function app.tg_todos__count_and_streak()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  changed app.todos := case when tg_op = 'INSERT' then new else old end;
  step integer := case when tg_op = 'INSERT' then 1 else -1 end;
  day_was_or_is_covered_otherwise boolean;
begin
  update app.users u
     set todos_count = u.todos_count + step
   where u.id = changed.user_id;
  update app.todo_totals tt
     set todos = tt.todos + step
   where tt.privacy = changed.author_privacy and tt.shard = app.todo_total_shard(changed.user_id);
  select exists (
    select 1 from app.todos t where t.user_id = changed.user_id and t.local_date = changed.local_date and t.id <> changed.id
  ) into day_was_or_is_covered_otherwise;
  if not day_was_or_is_covered_otherwise then
    perform app.refresh_streak(changed.user_id);
  end if;
  return null;
end;
$$;
comment on function app.tg_todos__count_and_streak() is
  'After a todo is inserted or deleted: the author''s todos_count and the totals of their privacy (app.todo_totals) stay exact, and the streak is refreshed when the todo is the first (insert) or last (delete) of its day. Security definer: members cannot write counters.';

create or replace function app.tg_users__propagate_privacy()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  member_shard smallint := app.todo_total_shard(new.id);
begin
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
  'After a member changes privacy: their todos carry the new value, in the same transaction, so the todos policy never sees a stale copy, and their todos move to the totals of the new privacy. Security definer: members may not write author_privacy or the totals themselves.';

create function app.visible_todos_total()
returns bigint
language plpgsql
stable
security definer
set search_path = ''
as $$
declare
  viewer_id uuid := auth.uid();
begin
  -- Visible (the todos policy): public authors, the viewer, protected authors they follow.
  return (select coalesce(sum(tt.todos), 0) from app.todo_totals tt where tt.privacy = 'public')
    + (select coalesce(sum(u.todos_count), 0) from app.users u
       where u.id in (select viewer_id union select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
         and u.privacy <> 'public'
         and (u.id = viewer_id or u.privacy = 'protected'))
    - (select coalesce(sum(u.todos_count), 0) from app.mutes m join app.users u on u.id = m.muted_user_id
       where m.user_id = viewer_id
         and (u.privacy = 'public' or u.id = viewer_id
              or (u.privacy = 'protected' and exists (
                    select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = u.id))));
end;
$$;
comment on function app.visible_todos_total() is
  'How many todos the current viewer may see, muted members left out: the total_count of GET /v1/todos without filters. Public totals from app.todo_totals, plus the viewer''s own when not public and protected followees'', minus the visible members they muted. Security definer to read app.todo_totals; acts only for auth.uid().';
grant execute on function app.visible_todos_total() to authenticated;

create or replace function app.todo_page(
  scope text,
  scope_id uuid,
  filters jsonb,
  page_limit integer,
  starting_after text,
  expand_reactions boolean,
  match_cap integer default null
)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  viewer_id uuid := (select auth.uid());
  zone text := coalesce((select u.time_zone from app.users u where u.id = (select auth.uid())), 'UTC');
  since_at timestamptz := app.filter_moment(filters -> 'since', zone);
  until_at timestamptz := app.filter_moment(filters -> 'until', zone);
  until_exclusive boolean := coalesce((filters -> 'until' ->> 'exclusive')::boolean, false);
  matching tsquery := app.todo_search_query(filters ->> 'query');
  anchor app.todos;
  conditions text[] := array['true'];
  candidates uuid[];
  page uuid[];
  anchor_at integer;
  total bigint;
  has_more boolean;
begin
  if starting_after is not null then
    anchor := app.resolve_todo(starting_after);
    if anchor.id is null then
      perform app.http_error(404, format('starting_after: no todo matches %L.', starting_after));
    end if;
  end if;

  -- Only the conditions in use are in the statement, so each combination gets its own plan.
  if scope = 'user' then conditions := conditions || 't.user_id = $1'::text; end if;
  if scope = 'project' then conditions := conditions || 't.project_id = $1'::text; end if;
  if scope = 'timeline' then
    conditions := conditions || '(t.user_id = $7
      or t.user_id in (select f.followee_id from app.user_follows f where f.follower_id = $7)
      or t.project_id in (select pf.project_id from app.project_follows pf where pf.user_id = $7))'::text;
  end if;
  -- Muted members leave the feeds (a member''s own page and search still show them).
  if scope in ('all', 'timeline') then
    conditions := conditions || 'not exists (select 1 from app.mutes m where m.user_id = $7 and m.muted_user_id = t.user_id)'::text;
  end if;
  if since_at is not null then conditions := conditions || 't.created_at >= $2'::text; end if;
  if until_at is not null then
    conditions := conditions || (case when until_exclusive then 't.created_at < $3' else 't.created_at <= $3' end);
  end if;
  if matching is not null then conditions := conditions || 't.search @@ $4'::text; end if;

  if match_cap is not null then
    -- Search: the newest `match_cap` matches are the whole result; pages are cut from them.
    execute format('select array(select t.id from app.todos t where %s order by t.created_at desc, t.id desc limit %s)',
                   array_to_string(conditions, ' and '), match_cap)
      into candidates using scope_id, since_at, until_at, matching, anchor.created_at, anchor.id, viewer_id;
    total := cardinality(candidates);
    if anchor.id is not null then
      anchor_at := array_position(candidates, anchor.id);
      if anchor_at is null then
        perform app.http_error(404, format('starting_after: %L is not among these results.', starting_after));
      end if;
      candidates := candidates[anchor_at + 1:];
    end if;
    page := candidates[1:page_limit + 1];
  else
    execute format('select array(select t.id from app.todos t where %s order by t.created_at desc, t.id desc limit %s)',
                   array_to_string(conditions || case when anchor.id is not null then '(t.created_at, t.id) < ($5, $6)' end, ' and '),
                   page_limit + 1)
      into page using scope_id, since_at, until_at, matching, anchor.created_at, anchor.id, viewer_id;
    if since_at is null and until_at is null and matching is null and scope in ('user', 'all', 'timeline') then
      -- Unfiltered: the counters kept on write give the exact total without touching todos.
      -- Visibility is per author, so a member's list is all of their todos or none.
      total := case scope
        when 'user' then (select case when app.can_see_member_content(u.id, viewer_id) then u.todos_count else 0 end
                          from app.users u where u.id = scope_id)
        when 'timeline' then
          -- Own and followed members' todos (visible, not muted), plus the todos of followed
          -- projects by anyone else: |A ∪ B| = |A| + |B \ A|.
          -- A: the viewer and their followees, found by key; a followee is visible unless private
          -- (protected members are visible to followers), the viewer always.
          (select coalesce(sum(u.todos_count), 0) from app.users u
            where u.id in (select viewer_id union select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
              and (u.id = viewer_id or u.privacy <> 'private')
              and not exists (select 1 from app.mutes m where m.user_id = viewer_id and m.muted_user_id = u.id))
          + (select count(*) from app.project_follows pf join app.todos t on t.project_id = pf.project_id
              where pf.user_id = viewer_id and t.user_id <> viewer_id
                and t.user_id not in (select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
                and not exists (select 1 from app.mutes m where m.user_id = viewer_id and m.muted_user_id = t.user_id))
        else app.visible_todos_total()
      end;
    else
      execute format('select count(*) from app.todos t where %s', array_to_string(conditions, ' and '))
        into total using scope_id, since_at, until_at, matching, anchor.created_at, anchor.id, viewer_id;
    end if;
  end if;

  has_more := cardinality(page) > page_limit;
  page := page[1:page_limit];
  return app.page_envelope(
    app.todos_json(page, expand_reactions),
    has_more,
    total,
    app.to_public_id('todo', page[cardinality(page)]));
end;
$$;
comment on function app.todo_page(text, uuid, jsonb, integer, text, boolean, integer) is
  'One page of todos visible to the viewer, newest first, rendered by app.todos_json: scope all, user (scope_id = creator), project (scope_id = project) or timeline (own, followed members'', followed projects''); muted members are left out of all and timeline; filters {since, until, query}; keyset on (created_at, id) with the last todo''s id as cursor. total_count when unfiltered: user from users.todos_count, all from app.visible_todos_total, timeline from the counters of the viewer and their followees plus the followed projects'' other todos; else an exact count. match_cap (search) limits the whole result to the newest matches.';

revoke execute on all functions in schema app, api from public;
