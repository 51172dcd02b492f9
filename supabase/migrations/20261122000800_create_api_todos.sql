-- Endpoints: todos (CRUD, deletion preview, lists with filters, search) and user search.
-- Also renders users with their streaks now that todos exist.

-- ============================================================================
-- Rendering
-- ============================================================================
create or replace function app.user_json(u app.users)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'id', app.to_public_id('user', u.id),
    'username', u.username,
    'streak', case when u.streak_last_day >= (now() at time zone u.time_zone)::date - 1 then u.streak_length else 0 end,
    'best_streak', u.best_streak,
    'streaking', coalesce(u.streak_last_day >= (now() at time zone u.time_zone)::date, false),
    'created_at', u.created_at,
    'updated_at', u.updated_at,
    'privacy', u.privacy,
    'protected', u.privacy <> 'public',
    'first_name', u.first_name,
    'last_name', u.last_name,
    'bio', u.bio,
    'location', u.location,
    'website_url', u.website_url,
    'todos_count', u.todos_count,
    'time_zone', u.time_zone,
    'url', app.public_url() || '/@' || u.username,
    'avatar', app.image_set('avatar', u.avatar_key),
    'header', case when u.header_key is not null then app.image_set('header', u.header_key) end,
    'header_color', coalesce(u.header_color, app.default_header_color(u.id)),
    'followers_count', u.followers_count,
    'following', exists (
      select 1 from app.user_follows f where f.follower_id = (select auth.uid()) and f.followee_id = u.id),
    'follows_you', exists (
      select 1 from app.user_follows f where f.follower_id = u.id and f.followee_id = (select auth.uid())),
    'pro', u.subscription_active
  ) || case
    when u.id = (select auth.uid()) then jsonb_build_object('dismissed_time_zone', u.dismissed_time_zone)
    else '{}'::jsonb
  end
$$;
comment on function app.user_json(app.users) is
  'A user as the API renders it for the current viewer. streak: the run ending today or yesterday in the member''s current zone (0 otherwise); streaking: today is covered. Both read stored columns only.';

create function app.reaction_json(r app.reactions)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'id', app.to_public_id('reac', r.id),
    'created_at', r.created_at,
    'reactable_type', case when r.todo_id is not null then 'Todo' else 'Comment' end,
    'reactable_id', case when r.todo_id is not null then app.to_public_id('todo', r.todo_id) else app.to_public_id('comm', r.comment_id) end,
    'reactor', (select app.user_json(u) from app.users u where u.id = r.user_id))
$$;
comment on function app.reaction_json(app.reactions) is 'A reaction as the API renders it, with its reactor.';
grant execute on function app.reaction_json(app.reactions) to authenticated;

create function app.todo_json(t app.todos, expand_reactions boolean default false)
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
    'attachments', '[]'::jsonb,
    'creator', (select app.user_json(u) from app.users u where u.id = t.user_id),
    'creator_id', app.to_public_id('user', t.user_id),
    'user_id', app.to_public_id('user', t.user_id),
    'projects', coalesce((select jsonb_agg(app.project_json(p)) from app.projects p where p.id = t.project_id), '[]'::jsonb),
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
      'comments', '[]'::jsonb)
  ) || case when expand_reactions then jsonb_build_object('reactions', coalesce((
    select jsonb_agg(app.reaction_json(r) order by r.created_at desc, r.id desc)
    from (select * from app.reactions r where r.todo_id = t.id order by r.created_at desc, r.id desc limit 5) r), '[]'::jsonb))
  else '{}'::jsonb end
$$;
comment on function app.todo_json(app.todos, boolean) is
  'A todo as the API renders it for the current viewer. Projects and mentions are joined under RLS, so what the viewer may not see is omitted. expand_reactions adds the five newest reactions.';
grant execute on function app.todo_json(app.todos, boolean) to authenticated;

-- ============================================================================
-- Lookups and filters
-- ============================================================================
create function app.resolve_todo(ref text)
returns app.todos
language sql
stable
set search_path = ''
as $$
  select t.* from app.todos t where t.id = app.from_public_id('todo', ref)
  union all
  select t.* from app.todos t where ref ~ '^[0-9]{1,18}$' and t.number = ref::bigint
  limit 1
$$;
comment on function app.resolve_todo(text) is 'The todo named by a {todo_id} path parameter (todo_ id or number), as far as the viewer may see it; null otherwise.';
grant execute on function app.resolve_todo(text) to authenticated;

create function app.own_todo(ref text)
returns app.todos
language plpgsql
stable
set search_path = ''
as $$
declare
  found_todo app.todos := app.resolve_todo(ref);
begin
  if found_todo.id is null then
    perform app.http_error(404, format('No todo matches %L.', ref));
  elsif found_todo.user_id <> (select auth.uid()) then
    perform app.http_error(403, 'You can only change your own todos.');
  end if;
  return found_todo;
end;
$$;
comment on function app.own_todo(text) is 'The viewer''s own todo named by ref: 404 when it does not exist for them, 403 when it is someone else''s.';
grant execute on function app.own_todo(text) to authenticated;

create function app.todo_search_query(input text)
returns tsquery
language plpgsql
immutable
set search_path = ''
as $$
declare
  term text;
  negated boolean;
  part tsquery;
  result tsquery;
begin
  foreach term in array regexp_split_to_array(btrim(coalesce(input, '')), '\s+') loop
    negated := term like '-_%';
    -- Whatever tsquery syntax a user types is text: strip the operators, keep the words.
    term := btrim(translate(case when negated then substr(term, 2) else term end, '&|!():*<>''\', '            '));
    continue when term = '';
    part := to_tsquery('simple', quote_literal(term) || ':*');
    continue when numnode(part) = 0;
    if negated then part := !! part; end if;
    result := case when result is null then part else result && part end;
  end loop;
  return result;
end;
$$;
comment on function app.todo_search_query(text) is
  'Turns what a user types into a tsquery: every word a prefix match (feat finds feature), -word negates (feature -bug), everything ANDed. Null when nothing searchable is left.';
grant execute on function app.todo_search_query(text) to authenticated;

create function app.filter_moment(moment jsonb, zone text)
returns timestamptz
language sql
stable
set search_path = ''
as $$
  select case
    when moment is null or jsonb_typeof(moment) <> 'object' then null
    when (moment ->> 'local')::boolean then (moment ->> 'at')::timestamp at time zone zone
    else (moment ->> 'at')::timestamptz
  end
$$;
comment on function app.filter_moment(jsonb, text) is
  'A since/until bound as the HTTP layer parsed it: {at, local}. Local moments (dates and date-times without a zone) are read in the viewer''s time zone.';
grant execute on function app.filter_moment(jsonb, text) to authenticated;

-- ============================================================================
-- Lists
-- ============================================================================
create function app.todo_page(
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
  if since_at is not null then conditions := conditions || 't.created_at >= $2'::text; end if;
  if until_at is not null then
    conditions := conditions || (case when until_exclusive then 't.created_at < $3' else 't.created_at <= $3' end);
  end if;
  if matching is not null then conditions := conditions || 't.search @@ $4'::text; end if;

  if match_cap is not null then
    -- Search: the newest `match_cap` matches are the whole result; pages are cut from them.
    execute format('select array(select t.id from app.todos t where %s order by t.created_at desc, t.id desc limit %s)',
                   array_to_string(conditions, ' and '), match_cap)
      into candidates using scope_id, since_at, until_at, matching;
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
      into page using scope_id, since_at, until_at, matching, anchor.created_at, anchor.id;
    execute format('select count(*) from app.todos t where %s', array_to_string(conditions, ' and '))
      into total using scope_id, since_at, until_at, matching;
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
  'One page of todos visible to the viewer, newest first: scope all, user (scope_id = creator) or project (scope_id = project); filters {since, until, query}; keyset on (created_at, id) with the last todo''s id as cursor. match_cap (search) limits the whole result to the newest matches.';
grant execute on function app.todo_page(text, uuid, jsonb, integer, text, boolean, integer) to authenticated;

-- ============================================================================
-- Endpoints
-- ============================================================================
create function api.todo_create(body text, attachments jsonb)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  created app.todos;
begin
  if jsonb_array_length(coalesce(attachments, '[]'::jsonb)) > 0 then
    perform app.http_error(422, format('attachments: no upload matches %s.', attachments -> 0));
  end if;
  insert into app.todos (user_id, body) values ((select auth.uid()), body) returning * into created;
  return app.todo_json(created);
end;
$$;
comment on function api.todo_create(text, jsonb) is 'POST /v1/todos. Uploads arrive with the uploads issue: until then any signed id is unknown (422).';
grant execute on function api.todo_create(text, jsonb) to authenticated;

create function api.todo_get(todo_ref text, expand_reactions boolean)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  found_todo app.todos := app.resolve_todo(todo_ref);
begin
  if found_todo.id is null then
    perform app.http_error(404, format('No todo matches %L.', todo_ref));
  end if;
  return app.todo_json(found_todo, expand_reactions);
end;
$$;
comment on function api.todo_get(text, boolean) is 'GET /v1/todos/{todo_id}: 404 also when the viewer may not see it.';
grant execute on function api.todo_get(text, boolean) to authenticated;

create function api.todo_update(todo_ref text, patch jsonb)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.todos := app.own_todo(todo_ref);
begin
  perform app.hit_rate_limit('todo_update');
  if jsonb_array_length(coalesce(patch -> 'attachments', '[]'::jsonb)) > 0 then
    perform app.http_error(422, format('attachments: no upload matches %s.', patch -> 'attachments' -> 0));
  end if;
  if jsonb_array_length(coalesce(patch -> 'remove_attachment_ids', '[]'::jsonb)) > 0 then
    perform app.http_error(422, format('remove_attachment_ids: this todo has no attachment %s.', patch -> 'remove_attachment_ids' -> 0));
  end if;
  if patch ? 'body' then
    update app.todos t set body = patch ->> 'body' where t.id = target.id returning * into target;
  end if;
  return app.todo_json(target);
end;
$$;
comment on function api.todo_update(text, jsonb) is 'PATCH /v1/todos/{todo_id}: own todos only (403), rate-limited (429). Mentions and the owning project follow the new body (triggers).';
grant execute on function api.todo_update(text, jsonb) to authenticated;

create function api.todo_delete(todo_ref text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.todos := app.own_todo(todo_ref);
begin
  perform app.hit_rate_limit('todo_delete');
  delete from app.todos t where t.id = target.id;
  return null;
end;
$$;
comment on function api.todo_delete(text) is 'DELETE /v1/todos/{todo_id}: own todos only (403), rate-limited (429); comments, reactions, mentions and attachments go with it (foreign keys cascade).';
grant execute on function api.todo_delete(text) to authenticated;

create function api.todo_deletion_preview(todo_ref text)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  target app.todos := app.own_todo(todo_ref);
  me app.users;
  today date;
  current_streak integer;
  run_start date;
  impact text;
begin
  select * into me from app.users u where u.id = target.user_id;
  today := (now() at time zone me.time_zone)::date;
  current_streak := case when me.streak_last_day >= today - 1 then me.streak_length else 0 end;
  run_start := me.streak_last_day - me.streak_length + 1;

  if exists (select 1 from app.todos t where t.user_id = me.id and t.local_date = target.local_date and t.id <> target.id)
     or exists (select 1 from app.streak_freezes f where f.user_id = me.id and f.day = target.local_date) then
    impact := 'none';
  elsif target.local_date >= today then
    impact := 'empties_today';
  elsif current_streak > 0 and target.local_date between run_start and me.streak_last_day then
    impact := 'breaks_current_streak';
  else
    impact := 'empties_past_day';
  end if;

  return jsonb_build_object(
    'impact', impact,
    'safe_to_delete', impact in ('none', 'empties_past_day'),
    'date', to_char(target.local_date, 'YYYY-MM-DD'),
    'current_streak', current_streak);
end;
$$;
comment on function api.todo_deletion_preview(text) is
  'GET /v1/todos/{todo_id}/deletion_preview. none: the day stays covered by another todo or an already used freeze (a deletion never uses a new freeze); empties_today: the only todo of today; breaks_current_streak: the only todo of a closed day inside the current streak; empties_past_day: the only todo of a day outside it. Safe when the current streak keeps its length.';
grant execute on function api.todo_deletion_preview(text) to authenticated;

create function api.todos_list(filters jsonb, page_limit integer, starting_after text, expand_reactions boolean)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select app.todo_page('all', null, filters, page_limit, starting_after, expand_reactions)
$$;
comment on function api.todos_list(jsonb, integer, text, boolean) is 'GET /v1/todos: every todo the viewer may see, newest first, with the filters of every todo list.';
grant execute on function api.todos_list(jsonb, integer, text, boolean) to authenticated;

create function api.user_todos(user_ref text, filters jsonb, page_limit integer, starting_after text, expand_reactions boolean)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  creator_id uuid := app.resolve_user(user_ref);
begin
  if creator_id is null then
    perform app.http_error(404, format('No user matches %L.', user_ref));
  end if;
  return app.todo_page('user', creator_id, filters, page_limit, starting_after, expand_reactions);
end;
$$;
comment on function api.user_todos(text, jsonb, integer, text, boolean) is 'GET /v1/users/{username}/todos and /v1/users/me/todos: a member''s todos as far as the viewer may see them (empty for a protected member one does not follow).';
grant execute on function api.user_todos(text, jsonb, integer, text, boolean) to authenticated;

create function api.project_todos(project_ref text, filters jsonb, page_limit integer, starting_after text, expand_reactions boolean)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  found_project_id uuid := app.resolve_project(project_ref);
begin
  if found_project_id is null then
    perform app.http_error(404, format('No project matches %L.', project_ref));
  end if;
  return app.todo_page('project', found_project_id, filters, page_limit, starting_after, expand_reactions);
end;
$$;
comment on function api.project_todos(text, jsonb, integer, text, boolean) is 'GET /v1/projects/{project_id}/todos: todos that belong to the project (its makers'' todos naming it, the `projects` field).';
grant execute on function api.project_todos(text, jsonb, integer, text, boolean) to authenticated;

create function api.search_todos(query text, page_limit integer, starting_after text, expand_reactions boolean)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  if app.todo_search_query(query) is null then
    perform app.http_error(400, 'query is required: the words to search for.');
  end if;
  return app.todo_page('all', null, jsonb_build_object('query', query), page_limit, starting_after, expand_reactions, 100);
end;
$$;
comment on function api.search_todos(text, integer, text, boolean) is 'GET /v1/search/todos: full text over every todo the viewer may see, newest first, capped at the 100 newest matches (total_count <= 100; pages end there).';
grant execute on function api.search_todos(text, integer, text, boolean) to authenticated;

create function api.search_users(query text)
returns jsonb
language sql
stable
set search_path = ''
as $$
  with typed as (
    select lower(btrim(coalesce(query, ''))) as prefix
  ), frequent as (
    select m.user_id, count(*) as mentions
    from app.todo_user_mentions m
    join app.todos t on t.id = m.todo_id
    where t.user_id = (select auth.uid())
    group by m.user_id
  ), found as (
    select u, coalesce(f.mentions, 0) as mentions
    from app.users u
    left join frequent f on f.user_id = u.id
    cross join typed
    where u.id <> (select auth.uid())
      and case
        when typed.prefix = '' then f.mentions is not null
        else lower(u.username) like typed.prefix || '%'
          or lower(u.first_name) like typed.prefix || '%'
          or lower(u.last_name) like typed.prefix || '%'
          or lower(u.first_name || ' ' || u.last_name) like typed.prefix || '%'
      end
    order by coalesce(f.mentions, 0) desc, (lower(u.username) = (select prefix from typed)) desc, length(u.username), lower(u.username)
    limit 10
  )
  select jsonb_build_object(
    'data', coalesce(jsonb_agg(app.user_json(found.u) order by found.mentions desc, (lower((found.u).username) = (select prefix from typed)) desc, length((found.u).username), lower((found.u).username)), '[]'::jsonb),
    'has_more', false,
    'total_count', count(*),
    'after', null)
  from found
$$;
comment on function api.search_users(text) is
  'GET /v1/search/users: mention autocomplete. Prefix match on username, first, last and full name; people the viewer mentions most come first; an empty query returns only those. At most 10, not paginated.';
grant execute on function api.search_users(text) to authenticated;

-- Prefix search on names: text_pattern_ops lets LIKE 'x%' use the index under any collation
-- (Supabase's databases are not C-collated).
create index users_username_pattern_idx on app.users (lower(username) text_pattern_ops);
create index users_first_name_pattern_idx on app.users (lower(first_name) text_pattern_ops);
create index users_last_name_pattern_idx on app.users (lower(last_name) text_pattern_ops);

revoke execute on all functions in schema app, api from public;
