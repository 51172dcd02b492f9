-- Endpoints: comments, reactions, reports, following, mutes and the timeline. Todos now show
-- the viewer's comments, and the feeds (GET /v1/todos, /v1/timeline) leave muted members out.

-- ============================================================================
-- Rendering
-- ============================================================================
create function app.comment_json(c app.comments)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'id', app.to_public_id('comm', c.id),
    'body', c.body,
    'attachments', '[]'::jsonb,
    'created_at', c.created_at,
    'updated_at', c.updated_at,
    'url', app.public_url() || '/todos/' || (select t.number from app.todos t where t.id = c.todo_id) || '#' || app.to_public_id('comm', c.id),
    'reactions_count', c.reactions_count,
    'viewer', jsonb_build_object('reactions', coalesce((
      select jsonb_agg(jsonb_build_object('id', app.to_public_id('reac', r.id)) order by r.created_at)
      from app.reactions r where r.comment_id = c.id and r.user_id = (select auth.uid())), '[]'::jsonb)),
    'creator', (select app.user_json(u) from app.users u where u.id = c.user_id),
    'mentioned_projects', coalesce((
      select jsonb_agg(app.mentioned_project_json(p) order by m.position)
      from app.comment_project_mentions m join app.projects p on p.id = m.project_id
      where m.comment_id = c.id), '[]'::jsonb),
    'mentioned_users', coalesce((
      select jsonb_agg(app.mentioned_user_json(u) order by m.position)
      from app.comment_user_mentions m join app.users u on u.id = m.user_id
      where m.comment_id = c.id), '[]'::jsonb),
    'parent_id', case when c.parent_id is not null then app.to_public_id('comm', c.parent_id) end)
$$;
comment on function app.comment_json(app.comments) is
  'A comment as the API renders it for the current viewer. parent_id (null for a top-level comment) is our addition to SPEC''s fields: replies need it.';
grant execute on function app.comment_json(app.comments) to authenticated;

create or replace function app.todo_json(t app.todos, expand_reactions boolean default false)
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
      'comments', coalesce((
        select jsonb_agg(jsonb_build_object('id', app.to_public_id('comm', c.id)) order by c.created_at, c.id)
        from app.comments c where c.todo_id = t.id and c.user_id = (select auth.uid())), '[]'::jsonb))
  ) || case when expand_reactions then jsonb_build_object('reactions', coalesce((
    select jsonb_agg(app.reaction_json(r) order by r.created_at desc, r.id desc)
    from (select * from app.reactions r where r.todo_id = t.id order by r.created_at desc, r.id desc limit 5) r), '[]'::jsonb))
  else '{}'::jsonb end
$$;
comment on function app.todo_json(app.todos, boolean) is
  'A todo as the API renders it for the current viewer. Projects and mentions are joined under RLS, so what the viewer may not see is omitted. viewer.comments lists the viewer''s own comments on it. expand_reactions adds the five newest reactions.';

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
    execute format('select count(*) from app.todos t where %s', array_to_string(conditions, ' and '))
      into total using scope_id, since_at, until_at, matching, anchor.created_at, anchor.id, viewer_id;
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
  'One page of todos visible to the viewer, newest first: scope all, user (scope_id = creator), project (scope_id = project) or timeline (own, followed members'', followed projects''); muted members are left out of all and timeline; filters {since, until, query}; keyset on (created_at, id) with the last todo''s id as cursor. match_cap (search) limits the whole result to the newest matches.';

-- ============================================================================
-- Comments
-- ============================================================================
create function app.resolve_comment(ref text)
returns app.comments
language sql
stable
set search_path = ''
as $$
  select c.* from app.comments c where c.id = app.from_public_id('comm', ref)
$$;
comment on function app.resolve_comment(text) is 'The comment named by a comm_ id, as far as the viewer may see it; null otherwise.';
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
comment on function app.own_comment(text) is 'The viewer''s own comment named by ref: 404 when it does not exist for them, 403 when it is someone else''s.';
grant execute on function app.own_comment(text) to authenticated;

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
begin
  if commentable_type is distinct from 'Todo' then
    perform app.http_error(422, 'commentable_type must be Todo.');
  end if;
  target := app.resolve_todo(commentable_id);
  if target.id is null or commentable_id !~ '^todo_' then
    perform app.http_error(422, format('commentable_id: no todo matches %L.', commentable_id));
  end if;
  if jsonb_array_length(coalesce(attachments, '[]'::jsonb)) > 0 then
    perform app.http_error(422, format('attachments: no upload matches %s.', attachments -> 0));
  end if;
  if coalesce(btrim(body), '') = '' then
    perform app.http_error(422, 'body is required unless attachments are given.');
  end if;
  if parent_ref is not null then
    parent := app.resolve_comment(parent_ref);
    if parent.id is null or parent.todo_id <> target.id then
      perform app.http_error(422, format('parent_id: no comment matches %L on this todo.', parent_ref));
    end if;
  end if;
  insert into app.comments (todo_id, user_id, parent_id, body)
  values (target.id, (select auth.uid()), parent.id, coalesce(body, ''))
  returning * into created;
  return app.comment_json(created);
end;
$$;
comment on function api.comment_create(text, text, text, jsonb, text) is
  'POST /v1/comments: on a todo the viewer can see (422 otherwise), optionally as a reply (parent_id, a comment on the same todo). Uploads arrive with the uploads issue.';
grant execute on function api.comment_create(text, text, text, jsonb, text) to authenticated;

create function api.comment_update(comment_ref text, patch jsonb)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.comments := app.own_comment(comment_ref);
begin
  perform app.hit_rate_limit('comment_update');
  if jsonb_array_length(coalesce(patch -> 'attachments', '[]'::jsonb)) > 0 then
    perform app.http_error(422, format('attachments: no upload matches %s.', patch -> 'attachments' -> 0));
  end if;
  if jsonb_array_length(coalesce(patch -> 'remove_attachment_ids', '[]'::jsonb)) > 0 then
    perform app.http_error(422, format('remove_attachment_ids: this comment has no attachment %s.', patch -> 'remove_attachment_ids' -> 0));
  end if;
  if patch ? 'body' then
    update app.comments c set body = patch ->> 'body' where c.id = target.id returning * into target;
  end if;
  return app.comment_json(target);
end;
$$;
comment on function api.comment_update(text, jsonb) is 'PATCH /v1/comments/{comment_id}: own comments only (403), rate-limited (429).';
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
comment on function api.comment_delete(text) is 'DELETE /v1/comments/{comment_id}: own comments only (403), rate-limited (429); replies, reactions, mentions and attachments go with it.';
grant execute on function api.comment_delete(text) to authenticated;

create function api.todo_comments(todo_ref text, page_limit integer, starting_after text)
returns jsonb
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
  return app.page_envelope(
    (select jsonb_agg(app.comment_json(c) order by c.created_at, c.id) from app.comments c where c.id = any (page)),
    has_more,
    (select count(*) from app.comments c
      where c.todo_id = target.id
        and not exists (select 1 from app.mutes m where m.user_id = (select auth.uid()) and m.muted_user_id = c.user_id)),
    app.to_public_id('comm', page[cardinality(page)]));
end;
$$;
comment on function api.todo_comments(text, integer, text) is
  'GET /v1/todos/{todo_id}/comments: oldest first (a conversation reads top-down), replies included with their parent_id, comments of muted members left out.';
grant execute on function api.todo_comments(text, integer, text) to authenticated;

-- ============================================================================
-- Reactions
-- ============================================================================
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
    -- A unique index, not a check-then-insert: concurrent likes leave one row.
    insert into app.reactions (user_id, todo_id) values (me, target_todo)
    on conflict (todo_id, user_id) where todo_id is not null do nothing
    returning * into reaction;
    if reaction.id is null then
      select * into reaction from app.reactions r where r.todo_id = target_todo and r.user_id = me;
    end if;
  elsif reactable_type = 'Comment' then
    target_comment := (app.resolve_comment(reactable_id)).id;
    if target_comment is null then
      perform app.http_error(422, format('reactable_id: no comment matches %L.', reactable_id));
    end if;
    insert into app.reactions (user_id, comment_id) values (me, target_comment)
    on conflict (comment_id, user_id) where comment_id is not null do nothing
    returning * into reaction;
    if reaction.id is null then
      select * into reaction from app.reactions r where r.comment_id = target_comment and r.user_id = me;
    end if;
  else
    perform app.http_error(422, 'reactable_type must be Todo or Comment.');
  end if;
  return app.reaction_json(reaction);
end;
$$;
comment on function api.reaction_create(text, text) is
  'POST /v1/reactions: like a todo or comment the viewer can see (422 otherwise). Reacting again returns the existing reaction; the unique index makes that hold under concurrent requests too.';
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
  delete from app.reactions r where r.id = target.id;
  return null;
end;
$$;
comment on function api.reaction_delete(text) is 'DELETE /v1/reactions/{reaction_id}: own reactions only (403); 404 when unknown or on something the viewer cannot see.';
grant execute on function api.reaction_delete(text) to authenticated;

-- ============================================================================
-- Reports
-- ============================================================================
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
comment on function api.report_create(text, text) is 'POST /v1/reports: a todo, comment (that the reporter can see) or user; 422 for an unknown type or target.';
grant execute on function api.report_create(text, text) to authenticated;

-- ============================================================================
-- Following and mutes
-- ============================================================================
create function api.user_follow(user_ref text, follow boolean)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target uuid := app.resolve_user(user_ref);
  me uuid := (select auth.uid());
begin
  if target is null then
    perform app.http_error(404, format('No user matches %L.', user_ref));
  elsif target = me then
    perform app.http_error(422, 'You cannot follow yourself.');
  end if;
  if follow then
    insert into app.user_follows (follower_id, followee_id) values (me, target) on conflict do nothing;
  else
    delete from app.user_follows f where f.follower_id = me and f.followee_id = target;
  end if;
  return null;
end;
$$;
comment on function api.user_follow(text, boolean) is 'POST and DELETE /v1/users/{user_id}/follow: idempotent; a follower sees a protected member''s todos.';
grant execute on function api.user_follow(text, boolean) to authenticated;

create function api.project_follow(project_ref text, follow boolean)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  me uuid := (select auth.uid());
  target uuid := app.followable_project(project_ref, me);
begin
  if target is null then
    perform app.http_error(404, format('No project matches %L.', project_ref));
  end if;
  if follow then
    insert into app.project_follows (user_id, project_id) values (me, target) on conflict do nothing;
  else
    delete from app.project_follows f where f.user_id = me and f.project_id = target;
  end if;
  return null;
end;
$$;
comment on function api.project_follow(text, boolean) is 'POST and DELETE /v1/projects/{project_id}/follow: idempotent. Public and protected projects can be followed (that is how one comes to see a protected one); private ones only by makers, 404 otherwise.';
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
begin
  if target is null then
    perform app.http_error(404, format('No user matches %L.', user_ref));
  elsif target = me then
    perform app.http_error(422, 'You cannot mute yourself.');
  end if;
  if mute then
    insert into app.mutes (user_id, muted_user_id) values (me, target) on conflict do nothing;
  else
    delete from app.mutes m where m.user_id = me and m.muted_user_id = target;
  end if;
  return null;
end;
$$;
comment on function api.user_mute(text, boolean) is 'POST and DELETE /v1/users/{user_id}/mute: idempotent; muted members leave the viewer''s feeds and comment lists.';
grant execute on function api.user_mute(text, boolean) to authenticated;

-- ============================================================================
-- Timeline
-- ============================================================================
create function api.timeline(filters jsonb, page_limit integer, starting_after text, expand_reactions boolean)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select app.todo_page('timeline', null, filters, page_limit, starting_after, expand_reactions)
$$;
comment on function api.timeline(jsonb, integer, text, boolean) is
  'GET /v1/timeline: the viewer''s own todos and those of followed members and followed projects, minus muted members, newest first, with the filters of every todo list.';
grant execute on function api.timeline(jsonb, integer, text, boolean) to authenticated;

revoke execute on all functions in schema app, api from public;
