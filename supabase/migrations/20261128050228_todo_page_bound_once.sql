-- app.todo_page's keyset bound computed once, and the EXECUTE conditions built only for EXECUTE
-- (issue 27, ninth round, reading the change again)
--
-- The cursor's bound, with until folded into it, was computed in three branches alike; it is
-- computed once before them. The conditions of the statements still built with EXECUTE (a
-- full-text query outside the timeline, search) were assembled on every call, the static
-- statements' too, which use none of them. Same pages, same totals.
-- CREATE OR REPLACE: nothing is locked but the function's catalog row.

create or replace function app.todo_page(scope text, scope_id uuid, filters jsonb, page_limit integer, starting_after text, expand_reactions boolean, match_cap integer default null::integer)
returns text
language plpgsql
stable
set search_path = ''
-- Its static statements are planned once per session: with custom plans (the default, which the
-- array and limit parameters keep choosing) each was planned on every call (issue 27). The
-- statements built with EXECUTE are planned on every call whatever this says.
set plan_cache_mode = force_generic_plan
as $$
declare
  -- With a full-text query, total_count counts matches up to this many (issue 26): an exact
  -- count of a common word grows with every todo that holds it, and even a capped one reads a
  -- todo's words from its row, one row per match or more (a timeline's sources' rows lie far
  -- apart: 500 matches of a common prefix read 1,500 rows, 2-4 ms, as much as the page). 100,
  -- as many as /v1/search/todos returns. Documented in the OpenAPI description of total_count
  -- and in the README.
  query_count_cap constant integer := 100;
  viewer_id uuid := (select auth.uid());
  zone text := coalesce((select u.time_zone from app.users u where u.id = (select auth.uid())), 'UTC');
  since_at timestamptz := app.filter_moment(filters -> 'since', zone);
  until_at timestamptz := app.filter_moment(filters -> 'until', zone);
  until_exclusive boolean := coalesce((filters -> 'until' ->> 'exclusive')::boolean, false);
  -- The range [lo, hi), open ends at infinity (created_at has microseconds: until inclusive is
  -- before until + 1 microsecond).
  lo timestamptz := coalesce(since_at, '-infinity');
  hi timestamptz := case when until_at is null then 'infinity'
                         when until_exclusive then until_at
                         else until_at + interval '1 microsecond' end;
  matching tsquery := app.todo_search_query(filters ->> 'query');
  anchor app.todos;
  conditions text[] := array['true'];
  page_conditions text;
  list_conditions text;
  candidates uuid[];
  page uuid[];
  -- The timeline (see below), and the static lists: the cursor of the reads, the window of time
  -- of the next one, candidates read so far.
  after_at timestamptz;
  after_id uuid;
  first_at timestamptz;
  window_start timestamptz;
  span interval;
  read_count integer := 0;
  read_now integer;
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

  -- The statements still built with EXECUTE (a full-text query over everyone's, a member's or a
  -- project's todos; search): only the conditions in use are in them, so each combination gets
  -- its own plan, made with the words in hand. Built only for them: the static statements need
  -- none of it.
  if match_cap is not null or (matching is not null and scope <> 'timeline') then
    if scope = 'user' then conditions := conditions || 't.user_id = $1'::text; end if;
    if scope = 'project' then conditions := conditions || 't.project_id = $1'::text; end if;
    -- Muted members leave the feeds (a member's own page and search still show them).
    if scope in ('all', 'timeline') then
      conditions := conditions || 'not exists (select 1 from app.mutes m where m.user_id = $7 and m.muted_user_id = t.user_id)'::text;
    end if;
    if since_at is not null then conditions := conditions || 't.created_at >= $2'::text; end if;
    if until_at is not null then
      conditions := conditions || (case when until_exclusive then 't.created_at < $3' else 't.created_at <= $3' end);
    end if;
    if matching is not null then conditions := conditions || 't.search @@ $4'::text; end if;
    page_conditions := array_to_string(conditions || case when anchor.id is not null then '(t.created_at, t.id) < ($5, $6)' end, ' and ');
    list_conditions := array_to_string(conditions, ' and ');
  end if;

  if match_cap is not null then
    -- Search: the newest `match_cap` matches are the whole result; pages are cut from them.
    execute format('select array(select t.id from app.todos t where %s order by t.created_at desc, t.id desc limit %s)',
                   list_conditions, match_cap)
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
    -- The static statements' keyset bound: the cursor, or past every todo (so one statement
    -- serves every page), with until folded into it: one upper bound is where a backward index
    -- scan starts (with two, a row and a scalar, it started at the newest and filtered).
    after_at := coalesce(anchor.created_at, 'infinity');
    after_id := coalesce(anchor.id, 'ffffffff-ffff-ffff-ffff-ffffffffffff');
    if until_at is not null and (hi, '00000000-0000-0000-0000-000000000000'::uuid) < (after_at, after_id) then
      after_at := hi;
      after_id := '00000000-0000-0000-0000-000000000000';
    end if;
    if scope = 'timeline' and since_at is null and until_at is null and matching is null then
      -- The timeline without filters, the most asked: the first read below without its bounds,
      -- in a statement of its own (through the general one, ten alternated API runs gave 0-12%
      -- fewer pages a second, median 5%, with the same backend CPU per call: kept apart until
      -- that is understood, issue 27). The same sources, conditions and limits.
      page := array(
        select s.id from (
          select t.id, t.created_at
          from (select viewer_id as member_id union select f.followee_id from app.user_follows f where f.follower_id = viewer_id) m
          cross join lateral (
            select t.id, t.created_at from app.todos t
            where t.user_id = m.member_id
              and not exists (select 1 from app.mutes mu where mu.user_id = viewer_id and mu.muted_user_id = t.user_id)
              and (t.created_at, t.id) < (after_at, after_id)
            order by t.created_at desc, t.id desc limit page_limit + 1) t
          union all
          select t.id, t.created_at
          from app.project_follows pf
          cross join lateral (
            select t.id, t.created_at from app.todos t
            where t.project_id = pf.project_id
              and not exists (select 1 from app.mutes mu where mu.user_id = viewer_id and mu.muted_user_id = t.user_id)
              and (t.created_at, t.id) < (after_at, after_id)
              and t.user_id <> viewer_id
              and t.user_id not in (select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
            order by t.created_at desc, t.id desc limit page_limit + 1) t
          where pf.user_id = viewer_id) s
        order by s.created_at desc, s.id desc limit page_limit + 1);
    elsif scope = 'timeline' then
      -- The timeline: a merge of the sources' own newest todos (the viewer's, each followed
      -- member's, each followed project's), never a walk over everyone's todos until enough are
      -- the followed ones' (issue 26). Static statements, planned once per session (each
      -- EXECUTE of the merge was planned again: 0.4 ms a plan, issue 27). since is a lower bound
      -- of the sources' index scans, until is in the keyset bound.
      --
      -- With a full-text query: a todo's words are not in the sources' indexes, so a merge of
      -- sources that each read their own todos until a page matches reads every followed todo
      -- when the words are common or negated (the planner cannot know how many match: 18,000
      -- rows for one page at 1M, issue 26). Instead, the todos read are bounded by time, newest
      -- first, until a page and one match:
      --   - first the sources' newest page and one, found by index alone (the merge without a
      --     query is this read alone), then their words read by id;
      --   - then windows of time read whole from every source (index range scans that read each
      --     todo's words from its row, no limit per source: they read only the todos in the
      --     window), each as long as the todos read so far say holds twice the matches still
      --     wanted, and at least four times the last;
      --   - once a window would reach before 1970, the rest of the sources in one last read.
      -- So a page reads about twice a page / the share of todos that match, whatever the
      -- sources hold, in a few statements; a rare word reads what the followed sources hold.
      page := '{}';
      loop
        if span is null then
          candidates := array(
            select s.id from (
              select t.id, t.created_at
              from (select viewer_id as member_id union select f.followee_id from app.user_follows f where f.follower_id = viewer_id) m
              cross join lateral (
                select t.id, t.created_at from app.todos t
                where t.user_id = m.member_id
                  and not exists (select 1 from app.mutes mu where mu.user_id = viewer_id and mu.muted_user_id = t.user_id)
                  and (t.created_at, t.id) < (after_at, after_id)
                  and t.created_at >= lo
                order by t.created_at desc, t.id desc limit page_limit + 1) t
              union all
              select t.id, t.created_at
              from app.project_follows pf
              cross join lateral (
                select t.id, t.created_at from app.todos t
                where t.project_id = pf.project_id
                  and not exists (select 1 from app.mutes mu where mu.user_id = viewer_id and mu.muted_user_id = t.user_id)
                  and (t.created_at, t.id) < (after_at, after_id)
                  and t.created_at >= lo
                  -- The viewer's and followed members' todos are in their own sources: the
                  -- sources are disjoint (union all; a count up to a cap can stop early).
                  and t.user_id <> viewer_id
                  and t.user_id not in (select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
                order by t.created_at desc, t.id desc limit page_limit + 1) t
              where pf.user_id = viewer_id) s
            order by s.created_at desc, s.id desc limit page_limit + 1);
          if matching is null then
            page := candidates;
            exit;
          end if;
          page := page || array(
            select t.id from app.todos t
            where t.id = any (candidates) and t.search @@ matching
            order by t.created_at desc, t.id desc
            limit page_limit + 1 - cardinality(page));
          read_now := cardinality(candidates);
        else
          -- A window is read whole, so its todos' words are read by the sources' own index
          -- scans (one heap row each), not looked up again by id (a primary-key descent each:
          -- three times the pages at 10M, issue 26); how many it read sizes the next window.
          -- The words are matched outside the sources: inside, a source's scan could be
          -- answered with the words' GIN index, once per source.
          select coalesce(array_agg(s.id order by s.created_at desc, s.id desc) filter (where s.search @@ matching), '{}'), count(*)::integer
            into candidates, read_now
            from (
              select t.id, t.created_at, t.search
              from (select viewer_id as member_id union select f.followee_id from app.user_follows f where f.follower_id = viewer_id) m
              cross join lateral (
                select t.id, t.created_at, t.search from app.todos t
                where t.user_id = m.member_id
                  and not exists (select 1 from app.mutes mu where mu.user_id = viewer_id and mu.muted_user_id = t.user_id)
                  and (t.created_at, t.id) < (after_at, after_id)
                  and t.created_at >= greatest(lo, window_start)
                -- No limit in effect: it keeps each source a scan of its own, which the planner
                -- could otherwise flatten into a join over a range of everyone's todos.
                order by t.created_at desc, t.id desc limit 2147483647) t
              union all
              select t.id, t.created_at, t.search
              from app.project_follows pf
              cross join lateral (
                select t.id, t.created_at, t.search from app.todos t
                where t.project_id = pf.project_id
                  and not exists (select 1 from app.mutes mu where mu.user_id = viewer_id and mu.muted_user_id = t.user_id)
                  and (t.created_at, t.id) < (after_at, after_id)
                  and t.created_at >= greatest(lo, window_start)
                  and t.user_id <> viewer_id
                  and t.user_id not in (select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
                order by t.created_at desc, t.id desc limit 2147483647) t
              where pf.user_id = viewer_id) s;
          page := page || candidates[1:page_limit + 1 - cardinality(page)];
        end if;
        -- Done: a page and one, the first read found fewer than it asked, or the last read.
        exit when cardinality(page) > page_limit
          or (span is null and read_now <= page_limit)
          or (span is not null and window_start is null);
        read_count := read_count + read_now;
        if span is null then
          -- After the first read the cursor is its last candidate; later ones start where their window did.
          select t.created_at, t.id into after_at, after_id from app.todos t where t.id = candidates[cardinality(candidates)];
          first_at := coalesce(anchor.created_at, (select t.created_at from app.todos t where t.id = candidates[1]));
          span := interval '0';
        else
          after_at := window_start;
          after_id := '00000000-0000-0000-0000-000000000000';
        end if;
        span := greatest(
          interval '1 minute',
          span * 4,
          (first_at - after_at) / read_count * 2 * (page_limit + 1 - cardinality(page)) * (read_count + 1) / (cardinality(page) + 1));
        window_start := case when span < after_at - timestamptz '1970-01-01 00:00:00+00' then after_at - span end;
        -- A window that reaches since is the last read (the rest of the range, from since): later
        -- windows would read nothing, each a statement over every source.
        if window_start <= lo then
          window_start := null;
        end if;
      end loop;
    elsif matching is null then
      -- The lists without a full-text query, the most asked: static statements, planned once
      -- per session (a dynamic one is planned on every call: 0.16 ms of a 1.6 ms page of all
      -- todos, issue 27). since is a lower bound of the index scan, until is in the keyset bound;
      -- a generic plan never asks the index for its newest entry either (issue 26's 3.5 ms of
      -- planning after a burst of deletions).
      if scope = 'all' then
        page := array(
          select t.id from app.todos t
          where not exists (select 1 from app.mutes m where m.user_id = viewer_id and m.muted_user_id = t.user_id)
            and (t.created_at, t.id) < (after_at, after_id)
            and t.created_at >= lo
          order by t.created_at desc, t.id desc limit page_limit + 1);
      elsif scope = 'user' then
        page := array(
          select t.id from app.todos t
          where t.user_id = scope_id and (t.created_at, t.id) < (after_at, after_id)
            and t.created_at >= lo
          order by t.created_at desc, t.id desc limit page_limit + 1);
      elsif scope = 'project' then
        page := array(
          select t.id from app.todos t
          where t.project_id = scope_id and (t.created_at, t.id) < (after_at, after_id)
            and t.created_at >= lo
          order by t.created_at desc, t.id desc limit page_limit + 1);
      else
        raise exception 'app.todo_page: unknown scope %', scope;
      end if;
    else
      execute format('select array(select t.id from app.todos t where %s order by t.created_at desc, t.id desc limit %s)',
                     page_conditions, page_limit + 1)
        into page using scope_id, since_at, until_at, matching, anchor.created_at, anchor.id, viewer_id;
    end if;

    if matching is not null then
      -- Full text: matches counted up to the cap (see query_count_cap), the whole list's (no cursor).
      if scope = 'timeline' then
        -- The sources' newest matches, up to the cap each, counted up to the cap: a static
        -- statement, the merge's sources with the words matched inside each (at most the cap read
        -- from each source that has that many).
        total := (select count(*) from (select 1 from (
            select t.id
            from (select viewer_id as member_id union select f.followee_id from app.user_follows f where f.follower_id = viewer_id) m
            cross join lateral (
              select t.id from app.todos t
              where t.user_id = m.member_id
                and not exists (select 1 from app.mutes mu where mu.user_id = viewer_id and mu.muted_user_id = t.user_id)
                and t.created_at >= lo and t.created_at < hi
                and t.search @@ matching
              order by t.created_at desc, t.id desc limit query_count_cap) t
            union all
            select t.id
            from app.project_follows pf
            cross join lateral (
              select t.id from app.todos t
              where t.project_id = pf.project_id
                and not exists (select 1 from app.mutes mu where mu.user_id = viewer_id and mu.muted_user_id = t.user_id)
                and t.created_at >= lo and t.created_at < hi
                and t.search @@ matching
                and t.user_id <> viewer_id
                and t.user_id not in (select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
              order by t.created_at desc, t.id desc limit query_count_cap) t
            where pf.user_id = viewer_id) s limit query_count_cap) c);
      else
        -- The newest matches, in the page's order: without it the planner may count them with a
        -- scan of the table that stops at the cap, which reads every older todo first when the
        -- table lies in the order todos were written (production's: the bench's data set is
        -- shuffled, where it read 8,000 rows for `since=30 days&query=t`, 2.3 ms).
        execute format('select count(*) from (select 1 from app.todos t where %s order by t.created_at desc, t.id desc limit %s) c',
                       list_conditions, query_count_cap)
          into total using scope_id, since_at, until_at, matching, anchor.created_at, anchor.id, viewer_id;
      end if;
    elsif since_at is null and until_at is null and scope in ('user', 'project', 'all', 'timeline') then
      -- Unfiltered: the counters kept on write give the exact total without touching todos.
      -- Visibility is per author, so a member's list is all of their todos or none, and a
      -- project's is the sum over its authors the viewer may see (the Project's todos_count).
      total := case scope
        when 'user' then (select case when app.can_see_member_content(u.id, viewer_id) then u.todos_count else 0 end
                          from app.users u where u.id = scope_id)
        when 'project' then coalesce((select vt.todos from app.visible_project_todos(array[scope_id]) vt), 0)
        when 'timeline' then app.timeline_todos_between(null, null)
        else app.visible_todos_total()
      end;
    elsif scope = 'all' then
      -- A date range over everyone's todos: sealed hours summed, the rest per member
      -- (app.visible_todos_between): exact, without counting every todo in the range.
      total := app.visible_todos_between(lo, hi);
    elsif scope = 'timeline' then
      total := app.timeline_todos_between(lo, hi);
    elsif scope = 'user' then
      -- A member's or a project's todos: counted (under the todos policy, as the viewer),
      -- bounded by that member's or project's own.
      total := (select count(*) from app.todos t where t.user_id = scope_id and t.created_at >= lo and t.created_at < hi);
    else
      total := (select count(*) from app.todos t where t.project_id = scope_id and t.created_at >= lo and t.created_at < hi);
    end if;
  end if;

  has_more := cardinality(page) > page_limit;
  page := page[1:page_limit];
  return app.page_envelope_text(
    app.todos_text(page, expand_reactions),
    has_more,
    total,
    app.to_public_id('todo', page[cardinality(page)]));
end;
$$;
comment on function app.todo_page(text, uuid, jsonb, integer, text, boolean, integer) is
  'One page of todos visible to the viewer, newest first, as JSON text with URL markers concatenated from app.todos_text (issue 27: never parsed into jsonb and printed again, nor checked by a cast to json; the HTTP layer puts the request''s URLs in place of the markers, functions/lib/db.ts, so the database spends nothing on the 30-70 KB of a page once it is concatenated): scope all, user (scope_id = creator), project (scope_id = project) or timeline (own, followed members'', followed projects'': a merge of each source''s own newest todos; with a full-text query, candidates merged by index, first a page and then windows of time sized by the share that matched, whose words are read newest first); muted members are left out of all and timeline; filters {since, until, query}; keyset on (created_at, id) with the last todo''s id as cursor. total_count (issue 26): unfiltered, from counters (users.todos_count, app.visible_project_todos, app.visible_todos_total, app.timeline_todos_between); with since/until, all from sealed hours (app.visible_todos_between), timeline per source, a member''s or project''s list counted; with a full-text query, matches counted up to 100. match_cap (search) limits the whole result to the newest matches. Static statements, planned once per session, but for a full-text query over everyone''s, a member''s or a project''s todos (the page and its count: EXECUTE, planned with the words in hand). Every part costs the same whatever the number of todos and members: index walks of a page, sums over hours, counts bounded by one member''s, one project''s or the followed sources'' todos, or by the cap.';
grant execute on function app.todo_page(text, uuid, jsonb, integer, text, boolean, integer) to authenticated;
