-- Follow requests, fixes from an attacker's review of issue 13:
--   * approving took the request's row, then (through the followers_count trigger) the member's;
--     a follow takes the member's row first: an approval and a repeated follow deadlocked (503).
--     Approvals now lock the member's (or project's) row first, the order every path takes.
--   * asking again (already following, or already asked) is a no-op that takes no lock, so
--     nobody can hold a member's row by repeating POST follow.
--   * follows made before approvals existed were never approved: every stranger who followed a
--     protected member or project kept seeing what it hides, and a follow of a private member
--     (allowed before) would show everything the day they turned protected. Those rows become
--     what they would be today: a pending request to a protected member or project (its owner
--     or makers approve whom they know, from GET /v1/follow_requests), and nothing for a
--     private one. Makers keep following their own projects. Follows of public members and
--     projects stay.

-- api.follow_request_answer: supabase/schemas/40_social.sql
CREATE OR REPLACE FUNCTION api.follow_request_answer (
  user_ref text,
  approve  boolean
)
  RETURNS jsonb
  LANGUAGE plpgsql
  SET search_path TO ''
  AS $function$
declare
  me uuid := (select auth.uid());
  requester uuid := app.resolve_user(user_ref);
  answered boolean;
begin
  if requester is null then
    perform app.http_error(404, format('No user matches %L.', user_ref));
  end if;
  if approve then
    -- The member's row first, the order every follow and privacy change takes it in (the
    -- followers_count trigger locks it too): the other order deadlocked with a repeated follow.
    perform app.lock_member_privacy(me);
    -- One statement: the follow is made from the request it deletes, so an approval racing a
    -- withdrawal either makes the follow or finds no request (404), never a follow nobody asked
    -- for. RLS on user_follows admits the row: the statement's snapshot still holds the request.
    with answered_request as (
      delete from app.user_follow_requests r
      where r.requester_id = requester and r.followee_id = me
      returning r.requester_id, r.followee_id
    ), approved as (
      insert into app.user_follows (follower_id, followee_id)
      select a.requester_id, a.followee_id from answered_request a
      on conflict do nothing
    )
    select exists (select 1 from answered_request) into answered;
    if not answered then
      perform app.http_error(404, format('%s has not asked to follow you.', user_ref));
    end if;
  else
    delete from app.user_follow_requests r where r.requester_id = requester and r.followee_id = me;
  end if;
  return null;
end;
$function$;

-- api.project_follow: supabase/schemas/40_social.sql
CREATE OR REPLACE FUNCTION api.project_follow (
  project_ref text,
  follow      boolean
)
  RETURNS jsonb
  LANGUAGE plpgsql
  SET search_path TO ''
  AS $function$
declare
  me uuid := (select auth.uid());
  target uuid := app.resolve_project(project_ref);
  target_privacy app.privacy;
  started boolean;
begin
  if target is null then
    perform app.http_error(404, format('No project matches %L.', project_ref));
  end if;
  if follow then
    -- Asking again changes nothing and takes no lock, as in api.user_follow.
    if exists (select 1 from app.project_follows f where f.user_id = me and f.project_id = target)
       or exists (select 1 from app.project_follow_requests r where r.user_id = me and r.project_id = target) then
      return null;
    end if;
    target_privacy := app.lock_project_privacy(target);
    if exists (select 1 from app.project_follows f where f.user_id = me and f.project_id = target) then
      return null;
    elsif target_privacy = 'public' or app.is_project_maker(target, me) then
      insert into app.project_follows (user_id, project_id) values (me, target) on conflict do nothing
      returning true into started;
    elsif target_privacy = 'protected' then
      insert into app.project_follow_requests (user_id, project_id) values (me, target) on conflict do nothing
      returning true into started;
    else
      perform app.http_error(404, format('No project matches %L.', project_ref));
    end if;
    if started then
      perform app.hit_rate_limit('project_follow');
    end if;
  else
    -- The request first, as in api.user_follow: an approval in flight cannot slip past.
    delete from app.project_follow_requests r where r.user_id = me and r.project_id = target;
    delete from app.project_follows f where f.user_id = me and f.project_id = target;
  end if;
  return null;
end;
$function$;

-- api.project_follow_request_answer: supabase/schemas/40_social.sql
CREATE OR REPLACE FUNCTION api.project_follow_request_answer (
  project_ref text,
  user_ref    text,
  approve     boolean
)
  RETURNS jsonb
  LANGUAGE plpgsql
  SET search_path TO ''
  AS $function$
declare
  target uuid := app.made_project(project_ref);
  requester uuid := app.resolve_user(user_ref);
  answered boolean;
begin
  if requester is null then
    perform app.http_error(404, format('No user matches %L.', user_ref));
  end if;
  if approve then
    -- As api.follow_request_answer: the project's row first, then the follow made from the
    -- request it deletes.
    perform app.lock_project_privacy(target);
    with answered_request as (
      delete from app.project_follow_requests r
      where r.user_id = requester and r.project_id = target
      returning r.user_id, r.project_id
    ), approved as (
      insert into app.project_follows (user_id, project_id)
      select a.user_id, a.project_id from answered_request a
      on conflict do nothing
    )
    select exists (select 1 from answered_request) into answered;
    if not answered then
      perform app.http_error(404, format('%s has not asked to follow this project.', user_ref));
    end if;
  else
    delete from app.project_follow_requests r where r.user_id = requester and r.project_id = target;
  end if;
  return null;
end;
$function$;

-- api.user_follow: supabase/schemas/40_social.sql
CREATE OR REPLACE FUNCTION api.user_follow (
  user_ref text,
  follow   boolean
)
  RETURNS jsonb
  LANGUAGE plpgsql
  SET search_path TO ''
  AS $function$
declare
  target uuid := app.resolve_user(user_ref);
  me uuid := (select auth.uid());
  target_privacy app.privacy;
  started boolean;
begin
  if target is null then
    perform app.http_error(404, format('No user matches %L.', user_ref));
  elsif target = me then
    perform app.http_error(422, 'You cannot follow yourself.');
  end if;
  if follow then
    -- Asking again changes nothing and takes no lock (a lock on someone else's row for nothing).
    if exists (select 1 from app.user_follows f where f.follower_id = me and f.followee_id = target)
       or exists (select 1 from app.user_follow_requests r where r.requester_id = me and r.followee_id = target) then
      return null;
    end if;
    target_privacy := app.lock_member_privacy(target);
    if exists (select 1 from app.user_follows f where f.follower_id = me and f.followee_id = target) then
      return null;
    elsif target_privacy = 'public' then
      insert into app.user_follows (follower_id, followee_id) values (me, target) on conflict do nothing
      returning true into started;
    elsif target_privacy = 'protected' then
      insert into app.user_follow_requests (requester_id, followee_id) values (me, target) on conflict do nothing
      returning true into started;
    else
      perform app.http_error(403, format('%s is private: nobody can follow them.', user_ref));
    end if;
    if started then
      perform app.hit_rate_limit('user_follow');
    end if;
  else
    -- The request first: an approval in flight holds it until it commits, and the next
    -- statement then sees (and removes) the follow it made. The other order could miss it.
    delete from app.user_follow_requests r where r.requester_id = me and r.followee_id = target;
    delete from app.user_follows f where f.follower_id = me and f.followee_id = target;
  end if;
  return null;
end;
$function$;

-- Rows, not schema: follows of members and projects that are not public, made without approval.
with moved as (
  delete from app.user_follows f
  using app.users u
  where u.id = f.followee_id and u.privacy <> 'public'
  returning f.follower_id, f.followee_id, f.created_at, u.privacy
)
insert into app.user_follow_requests (requester_id, followee_id, created_at)
select m.follower_id, m.followee_id, m.created_at from moved m where m.privacy = 'protected'
on conflict do nothing;

with moved as (
  delete from app.project_follows f
  using app.projects p
  where p.id = f.project_id and p.privacy <> 'public'
    and not exists (select 1 from app.project_makers pm
                    where pm.project_id = f.project_id and pm.user_id = f.user_id and pm.accepted)
  returning f.user_id, f.project_id, f.created_at, p.privacy
)
insert into app.project_follow_requests (user_id, project_id, created_at)
select m.user_id, m.project_id, m.created_at from moved m where m.privacy = 'protected'
on conflict do nothing;
