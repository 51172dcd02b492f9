-- Totals of GET /v1/todos with since/until counted member by member (issue 27, ninth round)
--
-- app.visible_todos_between joined the viewer's follows to the followees' todos before the
-- followees' privacy left most of them out: its generic plan read every followed member's todos
-- (18,000 index entries for the bench reader, 4.4 ms of GET /v1/todos?since=1970's 5.9 ms), and
-- its custom plans cost 1.3-1.6 ms of planning each. It now takes each member's row first, as
-- app.visible_todos_total and app.timeline_todos_between do, and their todos_count when the range
-- holds their whole history; force_generic_plan plans it once per session.
-- app.public_todos_between answers a range with no upper end that starts before the oldest public
-- todo (since=1970) from app.todo_totals instead of summing every hour (1.5 ms at two years).
-- Only CREATE OR REPLACE: nothing is locked but the two functions' catalog rows.

create or replace function app.public_todos_between(lo timestamptz, hi timestamptz)
returns bigint
language plpgsql
stable
security definer
set search_path = ''
as $$
declare
  sealed timestamptz := coalesce((select s.until from app.todo_hours_sealed s), '-infinity'::timestamptz);
  sealed_hi timestamptz;
  first_hour timestamptz;
  last_hour timestamptz;
  total bigint := 0;
begin
  lo := coalesce(lo, '-infinity'::timestamptz);
  hi := coalesce(hi, 'infinity'::timestamptz);
  if lo >= hi then
    return 0;
  end if;
  -- No upper end, and a lower one at or before the oldest sealed public hour (or, with none, the
  -- sealed boundary, before which there is then no public todo): every public todo, from the
  -- totals kept on write (app.todo_totals), not every hour summed (`since=1970` summed two years
  -- of hours, 1.5 ms, issue 27).
  if hi = 'infinity'::timestamptz
     and lo <= coalesce((select h.hour from app.todo_hours h where h.privacy = 'public' order by h.hour limit 1), sealed) then
    return (select coalesce(sum(tt.todos), 0) from app.todo_totals tt where tt.privacy = 'public');
  end if;
  -- The sealed part of [lo, hi): whole hours from app.todo_hours, the partial hours at its ends
  -- counted from the todos (at most an hour of todos each, by the created_at index).
  sealed_hi := least(hi, sealed);
  if lo < sealed_hi then
    first_hour := case when lo = '-infinity'::timestamptz or lo = date_trunc('hour', lo, 'UTC') then lo
                       else date_trunc('hour', lo, 'UTC') + interval '1 hour' end;
    last_hour := date_trunc('hour', sealed_hi, 'UTC');
    if first_hour < last_hour then
      total := total + coalesce((select sum(h.todos) from app.todo_hours h
                                  where h.privacy = 'public' and h.hour >= first_hour and h.hour < last_hour), 0)
             + (select count(*) from app.todos t
                 where t.author_privacy = 'public' and t.created_at >= lo and t.created_at < first_hour)
             + (select count(*) from app.todos t
                 where t.author_privacy = 'public' and t.created_at >= last_hour and t.created_at < sealed_hi);
    else
      total := total + (select count(*) from app.todos t
                         where t.author_privacy = 'public' and t.created_at >= lo and t.created_at < sealed_hi);
    end if;
  end if;
  -- What is not sealed yet (the last hour or so, unless the storage worker has not run).
  if greatest(lo, sealed) < hi then
    total := total + (select count(*) from app.todos t
                       where t.author_privacy = 'public' and t.created_at >= greatest(lo, sealed) and t.created_at < hi);
  end if;
  return total;
end;
$$;
comment on function app.public_todos_between(timestamp with time zone, timestamp with time zone) is
  'How many public todos have lo <= created_at < hi (null: open): sealed whole hours from app.todo_hours, and the todos themselves for the partial hours at the ends and for what is not sealed yet; a range that holds every public todo (no upper end, a lower one before the oldest) from app.todo_totals. Its cost is the number of hours in the range plus about two hours of todos, not the number of todos. Security definer to read app.todo_hours and app.todo_totals.';
grant execute on function app.public_todos_between(timestamp with time zone, timestamp with time zone) to authenticated;

create or replace function app.visible_todos_between(lo timestamptz, hi timestamptz)
returns bigint
language plpgsql
stable
security definer
set search_path = ''
-- Planned once per session: a custom plan cost 1.3-1.6 ms of planning on every call (issue 27).
set plan_cache_mode = force_generic_plan
as $$
declare
  viewer_id uuid := auth.uid();
begin
  lo := coalesce(lo, '-infinity'::timestamptz);
  hi := coalesce(hi, 'infinity'::timestamptz);
  -- Visible (the todos policy): public todos, the viewer's own, protected followees'; muted
  -- members left out. visible_todos_total's rule within a range: everything but the public part
  -- member by member, each from the member's row first (their privacy; an author's todos carry
  -- it, app.tg_users__propagate_privacy, in the same transaction), then their todos_count when
  -- the range holds their whole history (their oldest and newest todo: two index probes) or else
  -- their todos in the range by (user_id, created_at): bounded by those members' own todos. (A
  -- join of follows to todos read every followee's todos before the followees' privacy left
  -- most of them out: 4.4 ms of GET /v1/todos?since=1970 for the bench reader, issue 27.)
  return app.public_todos_between(lo, hi)
    + (select coalesce(sum(case
                 when lo <= e.first_at and hi > e.last_at then u.todos_count
                 else (select count(*) from app.todos t
                        where t.user_id = u.id and t.author_privacy = u.privacy and t.created_at >= lo and t.created_at < hi)
               end), 0)
         from app.users u
         cross join lateral (
           select (select t.created_at from app.todos t where t.user_id = u.id order by t.created_at, t.id limit 1) as first_at,
                  (select t.created_at from app.todos t where t.user_id = u.id order by t.created_at desc, t.id desc limit 1) as last_at) e
        where u.id in (select viewer_id union select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
          and u.privacy <> 'public'
          and (u.id = viewer_id or u.privacy = 'protected'))
    - (select coalesce(sum(case
                 when lo <= e.first_at and hi > e.last_at then u.todos_count
                 else (select count(*) from app.todos t
                        where t.user_id = u.id and t.author_privacy = u.privacy and t.created_at >= lo and t.created_at < hi)
               end), 0)
         from app.mutes m
         join app.users u on u.id = m.muted_user_id
         cross join lateral (
           select (select t.created_at from app.todos t where t.user_id = u.id order by t.created_at, t.id limit 1) as first_at,
                  (select t.created_at from app.todos t where t.user_id = u.id order by t.created_at desc, t.id desc limit 1) as last_at) e
        where m.user_id = viewer_id
          and (u.privacy = 'public' or u.id = viewer_id
               or (u.privacy = 'protected' and exists (
                     select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = u.id))));
end;
$$;
comment on function app.visible_todos_between(timestamp with time zone, timestamp with time zone) is
  'How many todos with lo <= created_at < hi the current viewer may see, muted members left out: the total_count of GET /v1/todos with since/until (visible_todos_total''s rule, within a range). Public ones from app.public_todos_between; the viewer''s own when not public, protected followees'' and visible muted members'' member by member: todos_count when the range holds the member''s whole history, else their todos in the range. Security definer like visible_todos_total; acts only for auth.uid(). force_generic_plan: planned once per session.';
grant execute on function app.visible_todos_between(timestamp with time zone, timestamp with time zone) to authenticated;
