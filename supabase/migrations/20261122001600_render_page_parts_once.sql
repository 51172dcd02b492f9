-- Speed: render each distinct creator and project of a todo page once.
--
-- The profile at 1M todos (docs/performance.md) showed pages cost their rendering: a project's
-- page rendered the same project (with its owner and makers) once per todo, about half of its
-- time, and a member's page the same creator 25 times. app.todo_json_parts is now the one todo
-- renderer; app.todo_json (single todos, realtime payloads) feeds it its creator and project,
-- app.todo_page feeds it each distinct one rendered once for the whole page.

create function app.todo_json_parts(t app.todos, expand_reactions boolean, creator jsonb, owning_project jsonb)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'id', app.to_public_id('todo', t.id),
    'created_at', t.created_at,
    'updated_at', t.updated_at,
    'body', t.body,
    'url', app.public_url() || '/todos/' || t.number,
    'attachments', coalesce((
      select jsonb_agg(app.attachment_json(a) order by a.attached_at, a.id)
      from app.uploads a where a.todo_id = t.id), '[]'::jsonb),
    'creator', creator,
    'creator_id', app.to_public_id('user', t.user_id),
    'user_id', app.to_public_id('user', t.user_id),
    'projects', case when owning_project is null then '[]'::jsonb else jsonb_build_array(owning_project) end,
    'mentioned_projects', coalesce((
      select jsonb_agg(app.mentioned_project_json(p) order by m.position)
      from app.todo_project_mentions m join app.projects p on p.id = m.project_id
      where m.todo_id = t.id), '[]'::jsonb),
    'mentioned_users', coalesce((
      select jsonb_agg(app.mentioned_user_json(u) order by m.position)
      from app.todo_user_mentions m join app.users u on u.id = m.user_id
      where m.todo_id = t.id), '[]'::jsonb),
    'reactions_count', t.reactions_count,
    'comments_count', t.comments_count,
    'viewer', jsonb_build_object(
      'reactions', coalesce((
        select jsonb_agg(jsonb_build_object('id', app.to_public_id('reac', r.id)) order by r.created_at)
        from app.reactions r where r.todo_id = t.id and r.user_id = (select auth.uid())), '[]'::jsonb),
      'comments', coalesce((
        select jsonb_agg(jsonb_build_object('id', app.to_public_id('comm', c.id)) order by c.created_at, c.id)
        from app.comments c where c.todo_id = t.id and c.user_id = (select auth.uid())), '[]'::jsonb))
  ) || case when expand_reactions then jsonb_build_object('reactions', coalesce((
    select jsonb_agg(app.reaction_json(r) order by r.created_at desc, r.id desc)
    from (select * from app.reactions r where r.todo_id = t.id order by r.created_at desc, r.id desc limit 5) r), '[]'::jsonb))
  else '{}'::jsonb end
$$;
comment on function app.todo_json_parts(app.todos, boolean, jsonb, jsonb) is
  'The todo renderer, given its creator (rendered User) and owning project (rendered Project, null when none or not visible). Projects'' mentions and reactions are joined under RLS as before.';
grant execute on function app.todo_json_parts(app.todos, boolean, jsonb, jsonb) to authenticated;

create or replace function app.todo_json(t app.todos, expand_reactions boolean default false)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select app.todo_json_parts(
    t, expand_reactions,
    (select app.user_json(u) from app.users u where u.id = t.user_id),
    (select app.project_json(p) from app.projects p where p.id = t.project_id))
$$;
comment on function app.todo_json(app.todos, boolean) is
  'A todo as the API renders it for the current viewer: app.todo_json_parts with its creator and (visible) owning project rendered here. Lists render those once per page instead.';

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
  -- Each distinct creator and project of the page is rendered once, not once per todo.
  return app.page_envelope(
    (with page_todos as (
       select t.* from app.todos t where t.id = any (page)
     ), creators as (
       select u.id, app.user_json(u) as body from app.users u where u.id in (select pt.user_id from page_todos pt)
     ), owning_projects as (
       select p.id, app.project_json(p) as body from app.projects p where p.id in (select pt.project_id from page_todos pt)
     )
     select jsonb_agg(app.todo_json_parts(t::app.todos, expand_reactions, c.body, op.body) order by t.created_at desc, t.id desc)
     from page_todos t
     join creators c on c.id = t.user_id
     left join owning_projects op on op.id = t.project_id),
    has_more,
    total,
    app.to_public_id('todo', page[cardinality(page)]));
end;
$$;
comment on function app.todo_page(text, uuid, jsonb, integer, text, boolean, integer) is
  'One page of todos visible to the viewer, newest first: scope all, user (scope_id = creator), project (scope_id = project) or timeline (own, followed members'', followed projects''); muted members are left out of all and timeline; filters {since, until, query}; keyset on (created_at, id) with the last todo''s id as cursor. total_count: from users.todos_count when unfiltered (user, all, timeline; for the timeline plus the followed projects'' other todos, which RLS filters), else an exact count. match_cap (search) limits the whole result to the newest matches.';

revoke execute on all functions in schema app, api from public;
