-- count each project's todos per author (issue 28, item 2): a Project's todos_count, the todos
-- of the project the viewer may see, from counters kept on write (app.project_todo_counts), and
-- its protected flag, in every rendering of a Project; the unfiltered total_count of a project's
-- todo list comes from the same counters. README, "Projects"; docs/security.md, "Project
-- todos_count".
--
-- Written from supabase/schemas/30_todos.sql and 70_rendering.sql (the desired state): every
-- object as it is there, verbatim; test/schema.test.ts proves the two agree. The counters are
-- filled at the end (app.recount_project_todos), after the triggers exist: creating a trigger
-- locks app.todos against writes until this transaction commits, so no todo is missed or
-- counted twice. Cost: one index-only walk of the todos that belong to a project.

set local check_function_bodies = off;

create table app.project_todo_counts (
  project_id uuid references app.projects(id) on delete cascade,
  user_id    uuid references app.users(id) on delete cascade,
  todos      bigint not null default 0 check (todos >= 0),
  constraint project_todo_counts_pkey primary key (project_id, user_id)
);
comment on table app.project_todo_counts is
  'How many todos of each author belong to each project (todos.project_id, the `projects` field): kept by the todos triggers _320_* on insert, delete and a change of project, read by app.visible_project_todos (a Project''s todos_count, the total_count of its unfiltered todo list). A sum over a project''s authors, never a count of its todos. No policy and no grant: members never touch this table; security definer functions do.';
-- The primary key serves a project's authors; this one the cascade of a deleted member.
create index project_todo_counts_user_id_idx on app.project_todo_counts (user_id);

alter table app.project_todo_counts enable row level security;
-- No policy and no grant: members never touch this table; security definer functions do.

create function app.visible_project_todos(ids uuid[])
returns table(project_id uuid, todos bigint)
language plpgsql
stable
security definer
set search_path = ''
as $$
declare
  viewer_id uuid := auth.uid();
begin
  -- The rule of GET /v1/projects/{id}/todos: a project that is not public shows its todos to
  -- insiders only (api.project_todos), and each todo is visible by its author's privacy (the
  -- todos policy: public, the viewer's own, a protected author the viewer follows).
  return query
    select p.id,
           case when p.privacy = 'public' or app.is_project_insider(p.id, p.privacy, viewer_id) then
             coalesce((select sum(c.todos) from app.project_todo_counts c join app.users u on u.id = c.user_id
                        where c.project_id = p.id
                          and (u.privacy = 'public' or u.id = viewer_id
                               or (u.privacy = 'protected' and exists (
                                     select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = u.id)))), 0)::bigint
           else 0::bigint end
    from app.projects p
    where p.id = any (ids) and app.can_see_project(p.id, p.privacy, viewer_id);
end;
$$;
comment on function app.visible_project_todos(uuid[]) is
  'How many todos of each of these projects the current viewer may see (issue 28: the Project''s todos_count; the total_count of GET /v1/projects/{id}/todos unfiltered): 0 for a project that is not public unless the viewer is an insider (app.is_project_insider), else the sum of app.project_todo_counts over the project''s authors the viewer may see (the todos policy''s rule, with the author''s privacy as it is now). Costs one row per author of the project (its makers), whatever the number of its todos. One row per project the viewer may see (app.can_see_project): a private project''s existence is not told to others. Security definer to read the counters; acts only for auth.uid(), so no member learns what another may see.';
grant execute on function app.visible_project_todos(uuid[]) to authenticated;
revoke execute on function app.visible_project_todos(uuid[]) from public;

create function app.recount_project_todos()
returns bigint
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  -- No todo is written meanwhile (share mode lets others read): the counts are those of the
  -- todos as they are when it returns, and the triggers keep them from there.
  lock table app.todos in share mode;
  delete from app.project_todo_counts;
  insert into app.project_todo_counts (project_id, user_id, todos)
  select t.project_id, t.user_id, count(*)
    from app.todos t
   where t.project_id is not null
   group by t.project_id, t.user_id
   order by t.project_id, t.user_id;
  return (select coalesce(sum(c.todos), 0) from app.project_todo_counts c);
end;
$$;
comment on function app.recount_project_todos() is
  'Counts app.project_todo_counts again from the todos (an index-only walk of the todos that belong to a project), with todo writes held off meanwhile; returns how many todos belong to a project. For the migration that introduced the counters and for the benchmark''s seed and cut, which write todos with the triggers off. Not granted: run by the database owner.';
revoke execute on function app.recount_project_todos() from public;

create function app.tg_todos__count_project_todos()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  -- A move touches two rows of the author's: the new project's first when its id is the lower,
  -- so every writer takes them in project order and two edits moving todos opposite ways queue
  -- instead of deadlocking.
  new_first boolean := tg_op = 'UPDATE' and new.project_id < old.project_id;
begin
  if new_first or (tg_op = 'INSERT' and new.project_id is not null) then
    insert into app.project_todo_counts as c (project_id, user_id, todos)
    values (new.project_id, new.user_id, 1)
    on conflict (project_id, user_id) do update set todos = c.todos + 1;
  end if;
  if tg_op in ('UPDATE', 'DELETE') and old.project_id is not null then
    update app.project_todo_counts c set todos = c.todos - 1
     where c.project_id = old.project_id and c.user_id = old.user_id;
  end if;
  if tg_op = 'UPDATE' and not coalesce(new_first, false) and new.project_id is not null then
    insert into app.project_todo_counts as c (project_id, user_id, todos)
    values (new.project_id, new.user_id, 1)
    on conflict (project_id, user_id) do update set todos = c.todos + 1;
  end if;
  return null;
end;
$$;
comment on function app.tg_todos__count_project_todos() is
  'Keeps app.project_todo_counts exact: a todo that belongs to a project counts for its author there from its insert to its delete, and moves when an edit (or the deletion of its project: the key sets project_id null) changes its project. A post, a deletion or a move touches the author''s rows only (one, or two in project order), so it competes only with the same author''s writes. Security definer: members cannot write counters.';
revoke execute on function app.tg_todos__count_project_todos() from public;

create trigger _320_count_project_todos after insert on app.todos
  for each row when (new.project_id is not null)
  execute function app.tg_todos__count_project_todos();
create trigger _320_uncount_project_todos after delete on app.todos
  for each row when (old.project_id is not null)
  execute function app.tg_todos__count_project_todos();
-- `of body` too: the project is set by the before trigger from the body, and an UPDATE OF list
-- sees only the columns the statement names.
create trigger _320_move_project_todos after update of body, project_id on app.todos
  for each row when (old.project_id is distinct from new.project_id)
  execute function app.tg_todos__count_project_todos();

-- A Project renders its todos_count and protected: the body takes the count as an argument.
drop function app.project_json_body(app.projects, text, jsonb, jsonb, boolean, boolean);

create function app.project_json_body(p app.projects, base_url text, owner jsonb, makers jsonb, following boolean, follow_requested boolean, todos_count bigint)
returns jsonb
language sql
stable
parallel safe
as $$
  select jsonb_build_object(
    'id', app.to_public_id('proj', p.id),
    'slug', p.slug,
    'name', p.name,
    'pitch', p.pitch,
    'description', p.description,
    'created_at', p.created_at,
    'updated_at', p.updated_at,
    'hashtag', p.hashtag,
    'website_url', p.website_url,
    'github_url', p.github_url,
    'privacy', p.privacy,
    'protected', p.privacy = 'protected',
    'archived', p.archived,
    'url', app.web_url() || '/projects/' || coalesce(p.slug, app.to_public_id('proj', p.id)),
    'logo', app.picture_urls(base_url, 'logo', p.logo_key, p.name, coalesce(p.header_color, app.default_header_color(p.id))),
    'header', case when p.header_key is not null then app.image_urls(base_url, 'header', p.header_key) end,
    'header_color', coalesce(p.header_color, app.default_header_color(p.id)),
    'owner', owner,
    'makers', makers,
    'followers_count', p.followers_count,
    'todos_count', todos_count,
    'following', following,
    'follow_requested', follow_requested)
$$;
comment on function app.project_json_body(app.projects, text, jsonb, jsonb, boolean, boolean, bigint) is
  'Inlined (no SET clause, no table access). The Project shape, given its rendered owner and makers, whether the viewer follows it (approved), whether their request to follow it is pending, and how many of its todos the viewer may see (app.visible_project_todos). protected: privacy is protected (issue 28: clients read it as a boolean). Without an uploaded logo, the logo is the project''s initials on its header colour (app.picture_urls).';
grant execute on function app.project_json_body(app.projects, text, jsonb, jsonb, boolean, boolean, bigint) to authenticated, service_role;
revoke execute on function app.project_json_body(app.projects, text, jsonb, jsonb, boolean, boolean, bigint) from public;

create or replace function app.projects_json(ids uuid[])
returns table(id uuid, body jsonb)
language plpgsql
stable
security definer
set search_path = ''
set plan_cache_mode = 'force_generic_plan'
as $$
declare
  viewer_id uuid := auth.uid();
  base_url text := app.public_url();
begin
  return query
    with listed as materialized (
      -- Visible: exactly the projects policy (app.can_see_project), checked once per project.
      select p.id, p.owner_id from app.projects p
      where p.id = any (ids) and app.can_see_project(p.id, p.privacy, viewer_id)
    ), makers as materialized (
      -- Makers and follows are visible with their (visible) project.
      select m.project_id, m.user_id, m.created_at from app.project_makers m
      where m.project_id in (select l.id from listed l) and m.accepted
    ), people as materialized (
      select pe.id, pe.body from app.users_json(array(
        select l.owner_id from listed l union select m.user_id from makers m)) pe
    ), counted as materialized (
      select vt.project_id, vt.todos from app.visible_project_todos(array(select l.id from listed l)) vt
    )
    select p.id, app.project_json_body(p, base_url,
      (select o.body from people o where o.id = p.owner_id),
      coalesce((select jsonb_agg(mu.body order by m.user_id = p.owner_id desc, m.created_at, lower(mu.body ->> 'username'))
                from makers m join people mu on mu.id = m.user_id where m.project_id = p.id), '[]'::jsonb),
      exists (select 1 from app.project_follows f where f.project_id = p.id and f.user_id = viewer_id),
      exists (select 1 from app.project_follow_requests r where r.user_id = viewer_id and r.project_id = p.id),
      coalesce((select c.todos from counted c where c.project_id = p.id), 0))
    from app.projects p
    where p.id in (select l.id from listed l);
end;
$$;
comment on function app.projects_json(uuid[]) is
  'The projects with these ids that the current viewer may see, as the API renders them, one row each (unordered; others are skipped). Makers list the owner first, then in the order they joined; following and follow_requested are the viewer''s approved follow and pending request; todos_count the project''s todos the viewer may see, from counters (app.visible_project_todos). Security definer so makers, follows and requests are read once for the set instead of through a policy per row; visibility is app.can_see_project, the function the projects policy calls, and it acts only for auth.uid().';

create or replace function app.todo_page(scope text, scope_id uuid, filters jsonb, page_limit integer, starting_after text, expand_reactions boolean, match_cap integer default null::integer)
returns jsonb
language plpgsql
stable
set search_path = ''
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
  matching tsquery := app.todo_search_query(filters ->> 'query');
  anchor app.todos;
  conditions text[] := array['true'];
  page_conditions text;
  list_conditions text;
  candidates uuid[];
  page uuid[];
  -- The timeline with a full-text query (see below): conditions without the words, the
  -- cursor of the reads, the window of time of the next one, candidates read so far.
  index_conditions text;
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

  -- Only the conditions in use are in the statement, so each combination gets its own plan.
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
  index_conditions := array_to_string(conditions, ' and ');
  if matching is not null then conditions := conditions || 't.search @@ $4'::text; end if;

  page_conditions := array_to_string(conditions || case when anchor.id is not null then '(t.created_at, t.id) < ($5, $6)' end, ' and ');
  list_conditions := array_to_string(conditions, ' and ');

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
    if scope = 'timeline' and matching is not null then
      -- Full text on the timeline: a todo's words are not in the sources' indexes, so a merge
      -- of sources that each read their own todos until a page matches reads every followed
      -- todo when the words are common or negated (the planner cannot know how many match:
      -- 18,000 rows for one page at 1M, issue 26). Instead, the todos read are bounded by time,
      -- newest first, until a page and one match:
      --   - first the sources' newest page and one, found by index alone (merged as the
      --     unfiltered timeline is), then their words read by id;
      --   - then windows of time read whole from every source (index range scans that read each
      --     todo's words from its row, no limit per source: they read only the todos in the
      --     window), each as long as the todos read so far say holds twice the matches still
      --     wanted, and at least four times the last;
      --   - once a window would reach before 1970, the rest of the sources in one last read.
      -- So a page reads about twice a page / the share of todos that match, whatever the
      -- sources hold, in a few statements; a rare word reads what the followed sources hold.
      page := '{}';
      after_at := anchor.created_at;
      after_id := anchor.id;
      loop
        if span is null then
          -- The cursor and the window's start are in (select $n): the planner does not see their
          -- values. A value in the newest histogram bin (every window's is) makes it look up the
          -- actual newest created_at in the index (get_actual_variable_range), and after a burst
          -- of deletions of new todos that walks every dead entry at the index's end: 10,700
          -- pages, 3.5 ms of planning per statement at 10M (issue 26). Hidden, the per-source
          -- index range scans are the same plan, planned in 0.4 ms.
          execute format('select array(select s.id from (%s) s order by s.created_at desc, s.id desc limit %s)',
                         app.timeline_sources(
                           index_conditions || case when after_id is not null then ' and (t.created_at, t.id) < ((select $5), (select $6))' else '' end,
                           page_limit + 1),
                         page_limit + 1)
            into candidates using scope_id, since_at, until_at, matching, after_at, after_id, viewer_id, window_start;
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
          execute format('select coalesce(array_agg(s.id order by s.created_at desc, s.id desc) filter (where s.search @@ $4), ''{}''), count(*)::integer from (%s) s',
                         app.timeline_sources(
                           index_conditions || ' and (t.created_at, t.id) < ((select $5), (select $6))'
                             || case when window_start is not null then ' and t.created_at >= (select $8)' else '' end,
                           2147483647, true))
            into candidates, read_now using scope_id, since_at, until_at, matching, after_at, after_id, viewer_id, window_start;
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
      end loop;
    elsif scope = 'timeline' then
      -- A merge of the sources' own newest todos (app.timeline_sources), never a walk over
      -- everyone's todos until enough are the followed ones'.
      execute format('select array(select s.id from (%s) s order by s.created_at desc, s.id desc limit %s)',
                     app.timeline_sources(page_conditions, page_limit + 1), page_limit + 1)
        into page using scope_id, since_at, until_at, matching, anchor.created_at, anchor.id, viewer_id;
    else
      execute format('select array(select t.id from app.todos t where %s order by t.created_at desc, t.id desc limit %s)',
                     page_conditions, page_limit + 1)
        into page using scope_id, since_at, until_at, matching, anchor.created_at, anchor.id, viewer_id;
    end if;

    if matching is not null then
      -- Full text: matches counted up to the cap (see query_count_cap), the whole list's (no cursor).
      if scope = 'timeline' then
        execute format('select count(*) from (select 1 from (%s) s limit %s) c',
                       app.timeline_sources(list_conditions, query_count_cap), query_count_cap)
          into total using scope_id, since_at, until_at, matching, anchor.created_at, anchor.id, viewer_id;
      else
        execute format('select count(*) from (select 1 from app.todos t where %s limit %s) c',
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
      total := app.visible_todos_between(
        since_at,
        case when until_at is null then null
             when until_exclusive then until_at
             else until_at + interval '1 microsecond' end);
    elsif scope = 'timeline' then
      total := app.timeline_todos_between(
        since_at,
        case when until_at is null then null
             when until_exclusive then until_at
             else until_at + interval '1 microsecond' end);
    else
      -- A member's or a project's todos: counted, bounded by that member's or project's own.
      execute format('select count(*) from app.todos t where %s', list_conditions)
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
  'One page of todos visible to the viewer, newest first, rendered by app.todos_json: scope all, user (scope_id = creator), project (scope_id = project) or timeline (own, followed members'', followed projects'': a merge of each source''s own newest todos; with a full-text query, candidates merged by index, first a page and then windows of time sized by the share that matched, whose words are read newest first); muted members are left out of all and timeline; filters {since, until, query}; keyset on (created_at, id) with the last todo''s id as cursor. total_count (issue 26): unfiltered, from counters (users.todos_count, app.visible_project_todos, app.visible_todos_total, app.timeline_todos_between); with since/until, all from sealed hours (app.visible_todos_between), timeline per source, a member''s or project''s list counted; with a full-text query, matches counted up to 100. match_cap (search) limits the whole result to the newest matches. Every part costs the same whatever the number of todos and members: index walks of a page, sums over hours, counts bounded by one member''s, one project''s or the followed sources'' todos, or by the cap.';

-- Every todo that belongs to a project, counted once (the triggers above count from here on).
select app.recount_project_todos();
