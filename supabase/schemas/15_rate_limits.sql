-- Rate limits: thresholds in one table, counted per user and action.
--
-- Every write that grows a table calls app.hit_rate_limit with its action; the thresholds
-- live in app.rate_limits (docs/rate-limits.md).

-- Function bodies are not checked here: they call functions of later files (the renderers
-- of 70_rendering.sql) and sections. They are the bodies the migrations created and checked,
-- as test/schema.test.ts proves.
set check_function_bodies = off;

-- ============================================================================
-- Tables
-- ============================================================================
create table app.rate_limits (
  action      text primary key,
  max_events  integer not null check (max_events > 0),
  per         interval not null check (per > '00:00:00'::interval),
  description text not null
);
comment on table app.rate_limits is
  'How many times a member may do an action per window. Read by app.hit_rate_limit.';

create table app.rate_limit_counters (
  user_id      uuid references app.users(id) on delete cascade,
  action       text references app.rate_limits(action) on delete cascade,
  window_start timestamptz,
  events       integer not null,
  constraint rate_limit_counters_pkey primary key (user_id, action, window_start)
);
comment on table app.rate_limit_counters is
  'Events per member, action and window. One row per window, incremented with an upsert, so concurrent requests cannot both slip under the limit.';
create index rate_limit_counters_action_idx on app.rate_limit_counters (action);

-- ============================================================================
-- Helpers
-- ============================================================================
create function app.hit_rate_limit(limited_action text)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  rule app.rate_limits;
  current_window timestamptz;
  seen integer;
  wait_seconds integer;
begin
  select * into rule from app.rate_limits r where r.action = limited_action;
  if rule.action is null then
    raise exception 'unknown rate-limited action %', limited_action;
  end if;
  current_window := date_bin(rule.per, now(), timestamptz '2000-01-01 00:00:00+00');
  insert into app.rate_limit_counters as c (user_id, action, window_start, events)
  values ((select auth.uid()), rule.action, current_window, 1)
  on conflict (user_id, action, window_start) do update set events = c.events + 1
  returning c.events into seen;
  if seen > rule.max_events then
    wait_seconds := greatest(1, ceil(extract(epoch from current_window + rule.per - now())))::integer;
    perform app.http_error(429,
      format('Too many requests: at most %s per %s. Try again in %s seconds.', rule.max_events,
             case when rule.per >= interval '1 hour' then (extract(epoch from rule.per) / 3600)::integer || ' hour(s)'
                  when rule.per >= interval '1 minute' then (extract(epoch from rule.per) / 60)::integer || ' minute(s)'
                  else extract(epoch from rule.per)::integer || ' second(s)' end,
             wait_seconds),
      jsonb_build_object('retry_after', wait_seconds));
  end if;
  -- Old windows are of no use: drop this member's, cheaply, on the same primary key.
  if seen = 1 then
    delete from app.rate_limit_counters c
    where c.user_id = (select auth.uid()) and c.action = rule.action and c.window_start < current_window;
  end if;
end;
$$;
comment on function app.hit_rate_limit(text) is
  'Counts one event of `limited_action` for the current member and raises 429 (with retry_after = seconds until the window ends) past the threshold. The rejected event rolls back with the request, so it does not count.';
grant execute on function app.hit_rate_limit(text) to authenticated;

-- ============================================================================
-- Row-level security and grants
-- ============================================================================
-- app.rate_limits
alter table app.rate_limits enable row level security;
create policy "Rate limits are public knowledge for members" on app.rate_limits
  for select to authenticated using (true);
grant select on app.rate_limits to authenticated;

-- app.rate_limit_counters
alter table app.rate_limit_counters enable row level security;
-- No policy and no grant: members never touch this table; security definer functions do.

-- ============================================================================
-- Execute only where granted above
-- ============================================================================
revoke execute on all functions in schema app, api from public;
