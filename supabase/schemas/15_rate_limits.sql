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
-- Its rows (one per action, listed in docs/rate-limits.md) are data, not schema: migrations
-- 20261122000700, 20261124003000 and 20261124004000 insert them; an operator changes them
-- with an update.

create table app.rate_limit_counters (
  user_id      uuid references app.users(id) on delete cascade,
  action       text references app.rate_limits(action) on delete cascade,
  window_start timestamptz,
  events       integer not null,
  last_at      timestamptz not null default now(),
  constraint rate_limit_counters_pkey primary key (user_id, action, window_start)
);
comment on table app.rate_limit_counters is
  'Events per member, action and bucket (a tenth of the rule''s period), with the newest event''s time. app.hit_rate_limit sums the buckets younger than the period: a sliding window. No policy and no grant: members never touch this table; security definer functions do.';
comment on column app.rate_limit_counters.last_at is
  'When the newest event of this bucket happened. The bucket counts toward the limit while last_at is younger than the rule''s period, and is deleted after.';
comment on column app.rate_limit_counters.window_start is
  'Start of the bucket: date_bin of a tenth of the rule''s period.';
create index rate_limit_counters_action_idx on app.rate_limit_counters (action);

-- Reads are counted per member and slot (a slot: one of the member's requests that may run at
-- once, app.admit_request), so that two reads of one member never update the same row: a
-- read's row lock lasts until its statement ends, and one row per member would serialize all of
-- that member's reads. Unlogged: counters are worth nothing after a crash (they start again at
-- zero), and a read must not write WAL. fillfactor 50 keeps every update HOT on its page.
create unlogged table app.read_counters (
  user_id         uuid references app.users(id) on delete cascade,
  slot            smallint check (slot between 1 and 16),
  bucket_start    timestamptz not null,
  events          integer not null,
  previous_events integer not null,
  constraint read_counters_pkey primary key (user_id, slot)
) with (fillfactor = 50);
comment on table app.read_counters is
  'Reads per member and slot in the current bucket of the `read` rule''s period (events) and in the one before it (previous_events): app.admit_request sums them over the member''s slots into a sliding-window estimate. Unlogged (a crash forgets them, which only forgives some reads) and one row per slot, so that a member''s concurrent reads never wait on each other''s row lock. No policy and no grant: only app.admit_request touches it.';

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
grant execute on function app.hit_rate_limit(text) to authenticated;

create function app.admit_request(member_id uuid, is_read boolean)
returns smallint
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  -- How many requests of one member may run at once, on every server and edge isolate together.
  max_running constant smallint := 8;
  taken_slot smallint;
  rule app.rate_limits;
  this_bucket timestamptz;
  elapsed double precision;
  reads_now bigint;
  reads_before bigint;
  wait_seconds integer;
begin
  -- A slot is a transaction-scoped advisory lock: held until this request's statement ends, and
  -- let go even when it fails or its connection dies. Taking one is no write.
  for candidate in 1..max_running loop
    if pg_try_advisory_xact_lock(hashtextextended('app.admit_request ' || member_id::text || ' ' || candidate, 0)) then
      taken_slot := candidate;
      exit;
    end if;
  end loop;
  if taken_slot is null then
    perform app.http_error(429,
      format('Too many requests at once: at most %s of one member''s requests run at the same time. Try again in a second.', max_running),
      jsonb_build_object('retry_after', 1));
  end if;
  if not is_read then
    -- Writes that grow a table have limits of their own (app.hit_rate_limit).
    return taken_slot;
  end if;

  select * into rule from app.rate_limits r where r.action = 'read';
  if rule.action is null then
    return taken_slot;
  end if;
  -- A sliding window estimated from two fixed buckets (the current one, and the one before it
  -- weighted by how much of it the window still covers): exact enough, and constant in space.
  this_bucket := date_bin(rule.per, now(), timestamptz '2000-01-01 00:00:00+00');
  elapsed := extract(epoch from now() - this_bucket) / extract(epoch from rule.per);
  select coalesce(sum(case when c.bucket_start = this_bucket then c.events else 0 end), 0),
         coalesce(sum(case when c.bucket_start = this_bucket then c.previous_events
                           when c.bucket_start = this_bucket - rule.per then c.events else 0 end), 0)
    into reads_now, reads_before
    from app.read_counters c
   where c.user_id = member_id;
  if reads_before * (1 - elapsed) + reads_now >= rule.max_events then
    -- When the estimate falls below the limit with no more reads: within this bucket as the
    -- previous one's weight shrinks, else in the next bucket as this one's does.
    wait_seconds := ceil(extract(epoch from rule.per) * case
      when reads_now < rule.max_events and reads_before > 0
        then (1 - (rule.max_events - reads_now)::double precision / reads_before) - elapsed
      else (1 - elapsed) + greatest(0, 1 - rule.max_events::double precision / greatest(reads_now, 1)) end);
    wait_seconds := least(greatest(1, wait_seconds), ceil(extract(epoch from rule.per) * 2)::integer);
    perform app.http_error(429,
      format('Too many requests: at most %s reads per %s. Try again in %s seconds.', rule.max_events,
             case when rule.per >= interval '1 hour' then (extract(epoch from rule.per) / 3600)::integer || ' hour(s)'
                  when rule.per >= interval '1 minute' then (extract(epoch from rule.per) / 60)::integer || ' minute(s)'
                  else extract(epoch from rule.per)::integer || ' second(s)' end,
             wait_seconds),
      jsonb_build_object('retry_after', wait_seconds));
  end if;

  insert into app.read_counters as c (user_id, slot, bucket_start, events, previous_events)
  values (member_id, taken_slot, this_bucket, 1, 0)
  on conflict (user_id, slot) do update set
    events = case when c.bucket_start = excluded.bucket_start then c.events + 1 else 1 end,
    previous_events = case when c.bucket_start = excluded.bucket_start then c.previous_events
                           when c.bucket_start = excluded.bucket_start - rule.per then c.events
                           else 0 end,
    bucket_start = excluded.bucket_start;
  return taken_slot;
end;
$$;
comment on function app.admit_request(uuid, boolean) is
  'Admits one API request of a member to the database, or raises 429 (issue 25, fair share). Every request takes one of the member''s 8 slots (transaction-scoped advisory locks, so no write and nothing to clean up): a member''s 9th request at once is refused, whichever server or edge isolate it reached, which is what bounds one member''s share of the database where isolates share no memory. Reads (is_read) are also counted against the `read` rule of app.rate_limits, a sliding window estimated from two buckets, counted on the slot''s own row of app.read_counters so concurrent reads of one member never wait on each other; a refused read is not counted, and neither is one whose request fails later (it rolls back). Runs in the request''s statement before the role switch (functions/lib/db.ts), as the API''s own role: security definer for the counters, which nobody else may touch.';
grant execute on function app.admit_request(uuid, boolean) to service_role;

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

-- app.read_counters
alter table app.read_counters enable row level security;
-- No policy and no grant: only app.admit_request (security definer) touches it.

-- ============================================================================
-- Execute only where granted above
-- ============================================================================
revoke execute on all functions in schema app, api from public;
