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

-- Reads are counted in each server's memory (functions/lib/admission.ts, ReadLimiter) and sent
-- here about once a second, one statement for all members a server saw, so that every server
-- and edge isolate knows every other's counts: a read itself writes nothing and takes no
-- transaction id. Unlogged: counts are worth nothing after a crash (they start again at zero)
-- and must not cost WAL.
create unlogged table app.read_counts (
  user_id      uuid references app.users(id) on delete cascade,
  bucket_start timestamptz,
  reads        integer not null,
  constraint read_counts_pkey primary key (user_id, bucket_start)
);
comment on table app.read_counts is
  'Reads per member in buckets of the `read` rule''s period, summed over every server (app.record_reads): the current bucket and the one before give each server a sliding-window estimate. Unlogged (a crash forgets them, which only forgives some reads). No policy and no grant: only app.record_reads touches it.';
create index read_counts_bucket_start_idx on app.read_counts (bucket_start);

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

create function app.admit_request(member_id uuid)
returns smallint
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  -- How many requests of one member may run at once, on every server and edge isolate together.
  max_running constant smallint := 8;
begin
  -- A slot is a transaction-scoped advisory lock: held until this request's statement ends, and
  -- let go even when it fails or its connection dies. Taking one writes nothing.
  for candidate in 1..max_running loop
    if pg_try_advisory_xact_lock(hashtextextended('app.admit_request ' || member_id::text || ' ' || candidate, 0)) then
      return candidate;
    end if;
  end loop;
  perform app.http_error(429,
    format('Too many requests at once: at most %s of one member''s requests run at the same time. Try again in a second.', max_running),
    jsonb_build_object('retry_after', 1));
  return null;
end;
$$;
comment on function app.admit_request(uuid) is
  'Admits one API request of a member to the database, or raises 429 (issue 25, fair share): every request takes one of the member''s 8 slots, transaction-scoped advisory locks (no write, no transaction id, nothing to clean up), so a member''s 9th request at once is refused whichever server or edge isolate it reached. This is what bounds one member''s share of the database where isolates share no memory; each server''s fair queue (functions/lib/admission.ts) keeps a member to half its pool. Runs in the request''s statement after app.authenticate, before the role switch (functions/lib/db.ts), as the API''s own role.';
grant execute on function app.admit_request(uuid) to service_role;

create function app.record_reads(reads jsonb, bucket timestamptz)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  rule app.rate_limits;
  period interval;
begin
  select * into rule from app.rate_limits r where r.action = 'read';
  period := coalesce(rule.per, interval '1 minute');
  -- In member order, so two servers reporting the same members never deadlock; members deleted
  -- since their reads are left out by the join.
  insert into app.read_counts as c (user_id, bucket_start, reads)
  select u.id, bucket, sum(r.value::integer)::integer
    from jsonb_each_text(reads) r
    join app.users u on u.id = r.key::uuid
   group by u.id
   order by u.id
  on conflict (user_id, bucket_start) do update set reads = c.reads + excluded.reads;
  -- Buckets that no longer count: the window is this bucket and the one before.
  delete from app.read_counts c where c.bucket_start < bucket - period;
  return jsonb_build_object(
    'rule', case when rule.action is not null
      then jsonb_build_object('max', rule.max_events, 'per_ms', (extract(epoch from rule.per) * 1000)::bigint) end,
    'totals', coalesce((
      select jsonb_object_agg(r.key, jsonb_build_object(
        'current', coalesce((select c.reads from app.read_counts c where c.user_id = r.key::uuid and c.bucket_start = bucket), 0),
        'previous', coalesce((select c.reads from app.read_counts c where c.user_id = r.key::uuid and c.bucket_start = bucket - period), 0)))
      from jsonb_each_text(reads) r), '{}'::jsonb));
end;
$$;
comment on function app.record_reads(jsonb, timestamp with time zone) is
  'Adds one server''s reads ({member uuid: reads since its last report}) to the bucket starting at `bucket`, and answers every server''s reads of those members in that bucket and the one before, with the `read` rule (null when there is none: reads are not limited). Why: the read rate limit is counted in each server''s memory, so a read writes nothing; this one statement a second per server is how edge isolates, which share no memory, learn each other''s counts (functions/lib/admission.ts, ReadLimiter). Security definer: nobody else may touch app.read_counts.';
grant execute on function app.record_reads(jsonb, timestamp with time zone) to service_role;

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

-- app.read_counts
alter table app.read_counts enable row level security;
-- No policy and no grant: only app.record_reads (security definer) touches it.

-- ============================================================================
-- Execute only where granted above
-- ============================================================================
revoke execute on all functions in schema app, api from public;
