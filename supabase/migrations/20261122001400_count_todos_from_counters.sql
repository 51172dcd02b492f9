-- Speed: total_count of unfiltered todo lists from the counters kept on write.
--
-- An exact count(*) under row-level security evaluates the visibility policy once per row: at
-- a million todos that is seconds for GET /v1/todos. users.todos_count is exact (triggers), and
-- visibility is decided per author, so summing the counters of the authors a viewer may see
-- (minus muted ones) is the same number for the price of one pass over members.

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
          (select coalesce(sum(u.todos_count), 0) from app.users u
            where (u.id = viewer_id or u.id in (select f.followee_id from app.user_follows f where f.follower_id = viewer_id))
              and app.can_see_member_content(u.id, viewer_id)
              and not exists (select 1 from app.mutes m where m.user_id = viewer_id and m.muted_user_id = u.id))
          + (select count(*) from app.project_follows pf join app.todos t on t.project_id = pf.project_id
              where pf.user_id = viewer_id and t.user_id <> viewer_id
                and t.user_id not in (select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
                and not exists (select 1 from app.mutes m where m.user_id = viewer_id and m.muted_user_id = t.user_id))
        else (select coalesce(sum(u.todos_count), 0) from app.users u
              where (u.privacy = 'public' or u.id = viewer_id
                     or (u.privacy = 'protected' and exists (
                           select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = u.id)))
                and not exists (select 1 from app.mutes m where m.user_id = viewer_id and m.muted_user_id = u.id))
      end;
    else
      execute format('select count(*) from app.todos t where %s', array_to_string(conditions, ' and '))
        into total using scope_id, since_at, until_at, matching, anchor.created_at, anchor.id, viewer_id;
    end if;
  end if;

  has_more := cardinality(page) > page_limit;
  page := page[1:page_limit];
  return app.page_envelope(
    (select jsonb_agg(app.todo_json(t, expand_reactions) order by t.created_at desc, t.id desc)
     from app.todos t where t.id = any (page)),
    has_more,
    total,
    app.to_public_id('todo', page[cardinality(page)]));
end;
$$;
comment on function app.todo_page(text, uuid, jsonb, integer, text, boolean, integer) is
  'One page of todos visible to the viewer, newest first: scope all, user (scope_id = creator), project (scope_id = project) or timeline (own, followed members'', followed projects''); muted members are left out of all and timeline; filters {since, until, query}; keyset on (created_at, id) with the last todo''s id as cursor. total_count: from users.todos_count when unfiltered (user, all, timeline; for the timeline plus the followed projects'' other todos, which RLS filters), else an exact count. match_cap (search) limits the whole result to the newest matches.';

revoke execute on all functions in schema app, api from public;
