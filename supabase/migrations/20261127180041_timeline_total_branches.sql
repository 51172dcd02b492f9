-- The timeline's total in two statements (issue 27)
--
-- app.timeline_todos_between held both of its forms (unbounded, from the counters; bounded,
-- counted by index) in one statement chosen by CASE, so every call started the executor of both.
-- An IF with a statement each starts only the one it runs: 0.169 -> 0.145 ms of backend CPU per
-- unfiltered call (the bench reader, 2,000 calls, perf stat), of a 1.5 ms GET /v1/timeline.
-- Same answers: test/list-totals.test.ts recounts both forms.

-- The diff lists functions by name, so a SQL function may come before one it calls: its body
-- is checked once everything is in place (by test/schema.test.ts), not statement by statement.
set local check_function_bodies = off;

-- app.timeline_todos_between: supabase/schemas/40_social.sql
CREATE OR REPLACE FUNCTION app.timeline_todos_between (
  lo timestamp with time zone,
  hi timestamp with time zone
)
  RETURNS bigint
  LANGUAGE plpgsql
  STABLE
  SECURITY DEFINER
  SET search_path TO ''
  SET plan_cache_mode TO 'force_generic_plan'
  AS $function$
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
$function$;
