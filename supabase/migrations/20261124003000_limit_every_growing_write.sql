-- Security (issue 11, item 8): a rate limit on every write that grows a table.
--
-- Creating todos, comments, reactions, reports, follows (of members and of projects) and mutes
-- had no limit, so one account could grow any of those tables without bound. Each now counts in
-- app.hit_rate_limit against a row of app.rate_limits (docs/rate-limits.md lists them all):
--
--   todo_create      200 per hour        (150 in ten minutes stay possible: one rule gives both)
--   comment_create    60 per 10 minutes
--   reaction_create  120 per 10 minutes  (likes of todos and of comments)
--   report_create     30 per hour
--   user_follow      200 per hour
--   project_follow   200 per hour
--   mute_create      100 per hour
--
-- What counts: a request that creates a row. Idempotent no-ops (following someone you follow,
-- liking again, muting again) create nothing and are not counted, so a client that retries is not
-- punished; unfollowing and following again creates a row again, and counts. Validation errors
-- (422, 404) are answered before the limit is looked at and do not count either.
--
-- Windows slide. The counters were fixed windows (date_bin of the whole period), so a member could
-- post 200 todos at 12:59 and 200 more at 13:00: 400 in two minutes under "200 per hour". Events
-- are now counted in buckets of a tenth of the period, each remembering its newest event
-- (last_at), and a bucket counts while that newest event is younger than the period: at most
-- max_events in any period-long stretch of time, never more (a bucket's older events may count a
-- tenth of the period longer than their own age, never shorter). Retry-After is exact for that
-- rule: the seconds until enough of the oldest buckets have aged out for one more event, so never
-- more than the period. One member's counting for one action is serialized by a transaction-level
-- advisory lock, so concurrent requests cannot all slip under the limit at a bucket boundary
-- either (before, the one counter row of the window did that).

alter table app.rate_limit_counters add column last_at timestamptz not null default now();
comment on column app.rate_limit_counters.last_at is
  'When the newest event of this bucket happened. The bucket counts toward the limit while last_at is younger than the rule''s period, and is deleted after.';
comment on column app.rate_limit_counters.window_start is
  'Start of the bucket: date_bin of a tenth of the rule''s period.';
comment on table app.rate_limit_counters is
  'Events per member, action and bucket (a tenth of the rule''s period), with the newest event''s time. app.hit_rate_limit sums the buckets younger than the period: a sliding window.';

insert into app.rate_limits (action, max_events, per, description) values
  ('todo_create', 200, interval '1 hour', 'POST /v1/todos'),
  ('comment_create', 60, interval '10 minutes', 'POST /v1/comments'),
  ('reaction_create', 120, interval '10 minutes', 'POST /v1/reactions that adds a reaction'),
  ('report_create', 30, interval '1 hour', 'POST /v1/reports'),
  ('user_follow', 200, interval '1 hour', 'POST /v1/users/{id}/follow that starts following'),
  ('project_follow', 200, interval '1 hour', 'POST /v1/projects/{id}/follow that starts following'),
  ('mute_create', 100, interval '1 hour', 'POST /v1/users/{id}/mute that mutes');

create or replace function app.hit_rate_limit(limited_action text)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  member_id uuid := (select auth.uid());
  rule app.rate_limits;
  bucket timestamptz;
  seen integer;
  wait_seconds integer;
  new_bucket boolean;
begin
  select * into rule from app.rate_limits r where r.action = limited_action;
  if rule.action is null then
    raise exception 'unknown rate-limited action %', limited_action;
  end if;
  -- One request of this member and action at a time until it commits: the sum below then sees
  -- every event that counts, whichever bucket it went to.
  perform pg_advisory_xact_lock(hashtextextended('app.hit_rate_limit ' || rule.action || ' ' || member_id::text, 0));
  select coalesce(sum(c.events), 0)::integer into seen
  from app.rate_limit_counters c
  where c.user_id = member_id and c.action = rule.action and c.last_at > now() - rule.per;

  if seen >= rule.max_events then
    -- Buckets age out oldest first; one more event fits once `seen - max_events + 1` have.
    select ceil(extract(epoch from aging.last_at + rule.per - now()))::integer into wait_seconds
    from (select c.last_at, sum(c.events) over (order by c.last_at, c.window_start) as aged
          from app.rate_limit_counters c
          where c.user_id = member_id and c.action = rule.action and c.last_at > now() - rule.per) aging
    where aging.aged >= seen - rule.max_events + 1
    order by aging.last_at
    limit 1;
    wait_seconds := least(greatest(1, coalesce(wait_seconds, 1)), ceil(extract(epoch from rule.per))::integer);
    perform app.http_error(429,
      format('Too many requests: at most %s per %s (%s). Try again in %s seconds.', rule.max_events,
             case when rule.per >= interval '1 hour' then (extract(epoch from rule.per) / 3600)::integer || ' hour(s)'
                  when rule.per >= interval '1 minute' then (extract(epoch from rule.per) / 60)::integer || ' minute(s)'
                  else extract(epoch from rule.per)::integer || ' second(s)' end,
             rule.description, wait_seconds),
      jsonb_build_object('retry_after', wait_seconds));
  end if;

  bucket := date_bin(rule.per / 10, now(), timestamptz '2000-01-01 00:00:00+00');
  insert into app.rate_limit_counters as c (user_id, action, window_start, events, last_at)
  values (member_id, rule.action, bucket, 1, now())
  on conflict (user_id, action, window_start) do update
    set events = c.events + 1, last_at = greatest(c.last_at, excluded.last_at)
  returning c.events = 1 into new_bucket;
  -- Buckets that no longer count are of no use: drop this member's, once per new bucket.
  if new_bucket then
    delete from app.rate_limit_counters c
    where c.user_id = member_id and c.action = rule.action and c.last_at <= now() - rule.per;
  end if;
end;
$$;
comment on function app.hit_rate_limit(text) is
  'Counts one event of `limited_action` for the current member, or raises 429 when max_events events already happened within the rule''s period (a sliding window, in buckets of a tenth of the period; retry_after = seconds until enough of the oldest have aged out). A rejected event is not counted, and one that a later error rolls back is not either. Serialized per member and action with an advisory lock, so concurrent requests cannot exceed the limit.';

-- ============================================================================
-- The endpoints that create rows
-- ============================================================================

create or replace function api.todo_create(body text, attachments jsonb)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  created app.todos;
begin
  perform app.hit_rate_limit('todo_create');
  insert into app.todos (user_id, body) values ((select auth.uid()), body) returning * into created;
  perform app.attach_uploads(attachments, created.id, null, 'attachments');
  return app.todo_json(created);
end;
$$;
comment on function api.todo_create(text, jsonb) is
  'POST /v1/todos (JSON or form): rate-limited (todo_create, 429); attachments are upload ids from verified signed_ids, attached in order (422 when foreign, not stored, or already attached).';

create or replace function api.comment_create(commentable_type text, commentable_id text, body text, attachments jsonb, parent_ref text)
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
  return app.comment_json(created);
end;
$$;
comment on function api.comment_create(text, text, text, jsonb, text) is
  'POST /v1/comments: on a todo the viewer can see (422 otherwise), optionally as a reply (parent_id, a comment on the same todo). body may be empty when attachments are given. Rate-limited (comment_create, 429) once the input is valid.';

create or replace function api.reaction_create(reactable_type text, reactable_id text)
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
    else
      perform app.hit_rate_limit('reaction_create');
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

create or replace function api.report_create(reportable_type text, reportable_id text)
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

create or replace function api.user_follow(user_ref text, follow boolean)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target uuid := app.resolve_user(user_ref);
  me uuid := (select auth.uid());
  started boolean;
begin
  if target is null then
    perform app.http_error(404, format('No user matches %L.', user_ref));
  elsif target = me then
    perform app.http_error(422, 'You cannot follow yourself.');
  end if;
  if follow then
    insert into app.user_follows (follower_id, followee_id) values (me, target) on conflict do nothing
    returning true into started;
    if started then
      perform app.hit_rate_limit('user_follow');
    end if;
  else
    delete from app.user_follows f where f.follower_id = me and f.followee_id = target;
  end if;
  return null;
end;
$$;
comment on function api.user_follow(text, boolean) is
  'POST and DELETE /v1/users/{user_id}/follow: idempotent; a follower sees a protected member''s todos. Starting to follow counts toward user_follow (429); following again (a no-op) and unfollowing do not.';

create or replace function api.project_follow(project_ref text, follow boolean)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  me uuid := (select auth.uid());
  target uuid := app.followable_project(project_ref, me);
  started boolean;
begin
  if target is null then
    perform app.http_error(404, format('No project matches %L.', project_ref));
  end if;
  if follow then
    insert into app.project_follows (user_id, project_id) values (me, target) on conflict do nothing
    returning true into started;
    if started then
      perform app.hit_rate_limit('project_follow');
    end if;
  else
    delete from app.project_follows f where f.user_id = me and f.project_id = target;
  end if;
  return null;
end;
$$;
comment on function api.project_follow(text, boolean) is
  'POST and DELETE /v1/projects/{project_id}/follow: idempotent. Public and protected projects can be followed (that is how one comes to see a protected one); private ones only by makers, 404 otherwise. Starting to follow counts toward project_follow (429); a no-op and unfollowing do not.';

create or replace function api.user_mute(user_ref text, mute boolean)
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
  else
    delete from app.mutes m where m.user_id = me and m.muted_user_id = target;
  end if;
  return null;
end;
$$;
comment on function api.user_mute(text, boolean) is
  'POST and DELETE /v1/users/{user_id}/mute: idempotent; muted members leave the viewer''s feeds and comment lists. Muting counts toward mute_create (429); muting again (a no-op) and unmuting do not.';

revoke execute on all functions in schema app, api from public;
