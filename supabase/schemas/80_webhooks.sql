-- Webhooks: subscriptions, the outbox of deliveries, and what the worker calls.
--
-- A member's integration subscribes to `new_todo`; a subscription receives its owner's new
-- todos (all of them, or those mentioning one of `project_ids`). The todo's creating
-- transaction writes one outbox row per matching subscription (a deferred trigger, so nothing
-- is lost and nothing is sent for a rolled-back todo); the worker (functions/lib/webhooks.ts)
-- claims rows with `for update skip locked`, signs and sends them, and records each attempt.

-- Function bodies are not checked here: they call functions of later files (the renderers
-- of 70_rendering.sql) and sections. They are the bodies the migrations created and checked,
-- as test/schema.test.ts proves.
set check_function_bodies = off;

-- ============================================================================
-- Tables
-- ============================================================================
create table app.webhook_subscriptions (
  id              uuid primary key default gen_random_uuid(),
  user_id         uuid not null references app.users(id) on delete cascade,
  url             text not null constraint webhook_subscriptions_url_check check (url ~ '^https?://' and length(url) <= 2048),
  event_type      text not null default 'new_todo' constraint webhook_subscriptions_event_type_check check (event_type = 'new_todo'),
  project_ids     uuid[] not null default '{}' constraint webhook_subscriptions_project_ids_check check (cardinality(project_ids) <= 20),
  active          boolean not null default true,
  disabled_reason text,
  created_at      timestamptz not null default now(),
  updated_at      timestamptz not null default now(),
  host            text generated always as (lower(substring(url from '^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)'))) stored
);
comment on table app.webhook_subscriptions is
  'A member''s webhook subscription (SPEC "Webhook subscriptions"): new todos of user_id go to url, all of them when project_ids is empty, else those mentioning one of project_ids. The signing secret lives apart, in app.webhook_secrets, so no member''s grant ever reaches it.';
comment on column app.webhook_subscriptions.project_ids is
  'Projects the subscription narrows to (empty: all). Checked visible to the owner when written; an array, not a join table, because a scoped subscription must never widen to "all projects" if its projects disappear.';
comment on column app.webhook_subscriptions.active is
  'False once deliveries failed for about three days or the receiver answered 410 Gone (disabled_reason says which); the owner turns it back on with PATCH active=true. Inactive subscriptions get no new deliveries.';
comment on column app.webhook_subscriptions.host is
  'The URL''s host as the URL standard means it: the host name and the port when it is not the scheme''s default (hooks.example.com, hooks.example.com:8443, [::1]:8080), lower-cased (the URL is stored parsed, so it already is). With the member, what the worker''s circuit breaker and per-host cap count by (app.webhook_breakers, app.webhook_leases): a member''s receivers on one host are one thing that answers or not, and another member''s on the same host (hooks.slack.com, script.google.com) another. With the port, because a closed or silent port of your receiver''s machine is not your receiver.';
create index webhook_subscriptions_user_id_idx on app.webhook_subscriptions (user_id, created_at, id);
-- One subscription per URL and member (issue 25): a second one to the same URL only sent every
-- todo twice, and twenty of them multiplied what one dead receiver cost the worker (409).
create unique index webhook_subscriptions_user_id_url_key on app.webhook_subscriptions (user_id, url);
-- (No index on host: what the worker looks up by host is one member's, at most 20 rows of
-- webhook_subscriptions_user_id_idx; an index of a popular host held 100,000 members' rows.)

create table app.webhook_secrets (
  subscription_id     uuid primary key references app.webhook_subscriptions(id) on delete cascade,
  secret              text not null,
  previous_secret     text,
  previous_expires_at timestamptz
);
comment on table app.webhook_secrets is
  'The Standard Webhooks signing secret (whsec_ + base64 of 32 random bytes) of each subscription. Retrievable, unlike API keys, because the worker signs with it; shown to the member once, in the create response. RLS on and no grant: only the database owner (the worker) and security definer functions read it. No policy and no grant: members never read a secret; app.new_webhook_secret writes it.';
comment on column app.webhook_secrets.previous_secret is
  'The secret a rotation replaced (POST /v1/webhooks/subscriptions/{id}/secret, app.rotate_webhook_secret): deliveries carry its signature beside the new one until previous_expires_at (24 hours), as Standard Webhooks allows several space-separated signatures, so a receiver can move to the new secret without a delivery it cannot verify. A second rotation replaces it: two secrets at most.';

create table app.webhook_events (
  todo_id    uuid primary key references app.todos(id) on delete cascade,
  payload    jsonb not null,
  created_at timestamptz not null default now()
);
comment on table app.webhook_events is
  'The body every delivery of a new todo sends ({type, timestamp, data: the Todo as its owner saw it at creation}), stored once per todo however many subscriptions match: three copies of a 2–3 KB document cost a subscribed member''s POST more than everything else the outbox does (docs/performance.md). Gone with its todo. No policy and no grant: the trigger writes, the worker reads.';

-- Pruning the delivery log by age, oldest first (app.prune_webhook_deliveries).
create index webhook_events_created_at_idx on app.webhook_events (created_at);

create table app.webhook_deliveries (
  subscription_id  uuid references app.webhook_subscriptions(id) on delete cascade,
  todo_id          uuid references app.webhook_events(todo_id) on delete cascade,
  status           text not null default 'pending' constraint webhook_deliveries_status_check check (status in ('pending', 'delivered', 'failed')),
  attempts         integer not null default 0,
  next_attempt_at  timestamptz default now(),
  first_attempt_at timestamptz,
  last_attempt_at  timestamptz,
  last_status      integer,
  last_error       text,
  created_at       timestamptz not null default now(),
  delivered_at     timestamptz,
  constraint webhook_deliveries_pkey primary key (subscription_id, todo_id)
);
comment on table app.webhook_deliveries is
  'The outbox and the delivery log: one row per (subscription, new todo), written in the todo''s transaction; the body is the todo''s app.webhook_events row, so every retry sends the same bytes. Keyed by (subscription, todo), no surrogate id: one index less on the write path; webhook-id is app.webhook_id of the pair. status pending → delivered (2xx) or failed (410, or about three days of failures). No policy and no grant: the trigger writes, the worker and the operator CLI read.';
comment on column app.webhook_deliveries.next_attempt_at is
  'When the worker may try next (null once delivered or failed): the Standard Webhooks schedule with jitter, or later when the receiver asked with Retry-After.';
create index webhook_deliveries_todo_id_idx on app.webhook_deliveries (todo_id);
-- A subscription's next delivery, one index probe however many are pending (the claim takes the
-- subscriptions in turn, app.webhook_queue; never the outbox oldest-first as a whole).
create index webhook_deliveries_subscription_due_idx on app.webhook_deliveries (subscription_id, next_attempt_at) where (status = 'pending');

create table app.webhook_queue (
  subscription_id uuid primary key references app.webhook_subscriptions(id) on delete cascade,
  turn_at         timestamptz not null
);
comment on table app.webhook_queue is
  'Whose turn it is (issue 25, webhook fairness): one row per subscription that may have pending deliveries, turn_at no later than its next due delivery. The claim (app.take_webhook_deliveries) walks it by turn_at and takes one delivery per subscription per round, then sends the subscription to the back (turn_at = now()), so a backlog of one subscription (a million rows for a dead receiver) costs each claim one row, never a scan, and cannot fill a batch. Kept by triggers on app.webhook_deliveries (a new or brought-forward delivery moves its subscription''s turn earlier, never later); the claim moves turns later (served, postponed by a breaker or a cap) and deletes the rows of subscriptions with nothing pending or switched off. No policy and no grant: only the worker''s functions and triggers touch it.';
create index webhook_queue_turn_at_idx on app.webhook_queue (turn_at, subscription_id);

create table app.webhook_breakers (
  user_id       uuid not null references app.users(id) on delete cascade,
  host          text not null,
  failures      integer not null default 0,
  failing_since timestamptz,
  open_until    timestamptz,
  cooldown      interval,
  constraint webhook_breakers_pkey primary key (user_id, host)
);
comment on table app.webhook_breakers is
  'What the worker knows of each member''s receivers on a host (user_id, host: the URL''s host, name and port), once one was attempted: failures = 0, it answered its last attempt (any HTTP status); failures > 0, that many attempts in a row got no HTTP answer (timeout, refused or reset connection, DNS) since failing_since. A pair with no row was never attempted, or gave up. Keyed by member as well as host (issue 25 review): on a host many members share (hooks.slack.com, script.google.com, webhook.site), one member''s paths that hang must not open the breaker, or turn off the subscriptions, of another member''s paths. At breaker_after failures (5) the pair opens: until open_until nothing of the member goes to the host, none of its deliveries is attempted or counted as an attempt, and its subscriptions wait for open_until (app.webhook_queue); then it is half-open and one delivery goes as the probe: an answer closes it, no answer opens it again for twice the cool-down (30 s doubling up to 10 min, cooldown holds the last one). A pair that answered nothing for the give-up window (about three days, from failing_since) gets the member''s subscriptions to the host turned off, as a delivery that failed that long does, and its row goes. A pair that is not known to answer (no row, or failures > 0) is unproven: together such deliveries may hold at most half of a drain''s slots (app.take_webhook_deliveries), so that new hosts (a fresh subdomain or port each time) cannot be used to meet closed breakers again. No policy and no grant: the worker''s functions write it.';

create table app.webhook_leases (
  subscription_id uuid not null,
  todo_id         uuid not null,
  host            text not null,
  user_id         uuid not null references app.users(id) on delete cascade,
  probe           boolean not null default false,
  until           timestamptz not null,
  unproven        boolean not null default false,
  claimed_at      timestamptz not null default now(),
  constraint webhook_leases_pkey primary key (subscription_id, todo_id)
);
comment on table app.webhook_leases is
  'Deliveries in flight (claimed, not yet recorded), with the member and host they count against: the per-member share, the per-(member, host) cap and the unproven share of app.take_webhook_deliveries count these rows, in the database, so that every worker (npm start, npm run webhook-worker, each edge invocation) shares them. unproven: its (member, host) was not known to answer when it was claimed (app.webhook_breakers); claimed_at tells a request under way for longer than the slow-after time (2 s), which the worker no longer keeps in a slot (functions/lib/webhooks.ts). until is the claim''s lease: a worker that dies stops counting when it ends. No foreign key to the delivery or the subscription, on purpose: a request stays in flight when its todo or subscription is deleted, and must keep counting until it ends (recorded, or the lease over), or deleting one would free a slot for the next. The member''s is one: a deleted account takes its leases along (no row of it is left). No policy and no grant: the worker''s functions write it.';
create index webhook_leases_user_id_host_idx on app.webhook_leases (user_id, host);
create index webhook_leases_unproven_idx on app.webhook_leases (claimed_at) where (unproven);
create index webhook_leases_until_idx on app.webhook_leases (until);

-- ============================================================================
-- Helpers
-- ============================================================================
create function app.webhook_id(subscription_id uuid, todo_id uuid)
returns text
language sql
immutable
parallel safe
as $$
  select 'msg_' || md5(subscription_id::text || todo_id::text)
$$;
comment on function app.webhook_id(uuid, uuid) is
  'Inlined (no SET clause, no table access). The webhook-id header of a delivery (Standard Webhooks: the same on every retry, so receivers deduplicate on it), derived from its key; the operator CLI shows it as the delivery''s id.';

create function app.webhook_subscription_json(s app.webhook_subscriptions)
returns jsonb
language plpgsql
immutable
set search_path = ''
as $$
begin
  return (select jsonb_build_object(
    'id', app.to_public_id('hook', s.id),
    'url', s.url,
    'event_type', s.event_type,
    'project_ids', to_jsonb(array(select app.to_public_id('proj', p) from unnest(s.project_ids) with ordinality u(p, n) order by u.n)),
    'active', s.active,
    'created_at', s.created_at,
    'updated_at', s.updated_at));
end;
$$;
comment on function app.webhook_subscription_json(app.webhook_subscriptions) is
  'A WebhookSubscription as the API renders it (SPEC fields plus `active`). Never the secret: that is added to the create response only. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.webhook_subscription_json(app.webhook_subscriptions) to authenticated;

create function app.webhook_project_ids(refs jsonb)
returns uuid[]
language plpgsql
stable
set search_path = ''
as $$
declare
  viewer_id uuid := (select auth.uid());
  refused text;
begin
  if refs is null then
    return '{}';
  end if;
  select r.ref into refused
  from jsonb_array_elements_text(refs) with ordinality r(ref, n)
  where not exists (
    select 1 from app.projects p
    where p.id = app.from_public_id('proj', r.ref) and app.can_see_project(p.id, p.privacy, viewer_id))
  order by r.n
  limit 1;
  if found then
    perform app.http_error(422, format('project_ids: %s is not a project you can see (proj_ IDs only).', refused));
  end if;
  return array(
    select d.id from (
      select app.from_public_id('proj', r.ref) as id, min(r.n) as first
      from jsonb_array_elements_text(refs) with ordinality r(ref, n) group by 1) d
    order by d.first);
end;
$$;
comment on function app.webhook_project_ids(jsonb) is
  'The project_ids of a subscription request as uuids, in the given order without repeats, or 422 naming the first that is unknown or that the member cannot see (one answer for both, so a subscription cannot probe for private projects). Runs as the member: app.can_see_project is the same rule that decides mentioned_projects, so a subscription can only narrow to projects its deliveries could show.';
grant execute on function app.webhook_project_ids(jsonb) to authenticated;

create function app.new_webhook_secret(subscription_id uuid)
returns text
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  secret text := 'whsec_' || encode(decode(
    replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', ''), 'hex'), 'base64');
begin
  if not exists (select 1 from app.webhook_subscriptions s
                 where s.id = new_webhook_secret.subscription_id and s.user_id = (select auth.uid())) then
    perform app.http_error(404, 'No webhook subscription matches.');
  end if;
  insert into app.webhook_secrets (subscription_id, secret) values (new_webhook_secret.subscription_id, secret);
  return secret;
end;
$$;
comment on function app.new_webhook_secret(uuid) is
  'Creates and returns the signing secret of the member''s own new subscription (once: a second call hits the primary key). 32 bytes from two gen_random_uuid() (pg_strong_random; 244 random bits), base64, whsec_ prefix as Standard Webhooks expects. Security definer because members have no grant on app.webhook_secrets.';
grant execute on function app.new_webhook_secret(uuid) to authenticated;

create function app.rotate_webhook_secret(subscription_id uuid)
returns text
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  fresh text := 'whsec_' || encode(decode(
    replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', ''), 'hex'), 'base64');
begin
  if not (select app.can_write()) then
    perform app.http_error(403, 'Rotating a signing secret needs a read-write API key or the write scope.');
  end if;
  update app.webhook_secrets k
     set previous_secret = k.secret, previous_expires_at = now() + interval '24 hours', secret = fresh
   where k.subscription_id = rotate_webhook_secret.subscription_id
     and exists (select 1 from app.webhook_subscriptions s
                 where s.id = rotate_webhook_secret.subscription_id and s.user_id = (select auth.uid()));
  if not found then
    perform app.http_error(404, 'No webhook subscription matches.');
  end if;
  return fresh;
end;
$$;
comment on function app.rotate_webhook_secret(uuid) is
  'Gives the member''s own subscription a new signing secret (made as app.new_webhook_secret makes one) and keeps the one it replaces for 24 hours (previous_secret), during which every delivery is signed with both; returns the new one. A second rotation within the 24 hours drops the oldest: at most two signatures per delivery. 404 for a subscription that is not the member''s (as the other subscription routes), 403 for a credential that cannot write. Security definer because members have no grant on app.webhook_secrets.';
grant execute on function app.rotate_webhook_secret(uuid) to authenticated;

create function app.take_webhook_deliveries(batch integer, lease interval, slots integer default 20, slow_after interval default '2 seconds', host_cap integer default 8,
  member_cap integer default null, unproven_cap integer default null)
returns table (subscription_id uuid, todo_id uuid, webhook_id text, url text, secret text, body text, attempts integer, first_attempt_at timestamptz)
language plpgsql
volatile
security definer
set search_path = ''
as $$
#variable_conflict use_column
declare
  turn record;
  breaker record;
  unproven boolean;
  pair text;
  to_pair integer;
  for_member integer;
  head uuid;
  next_at timestamptz;
  -- Rows of the queue looked at in one claim, at most: bounds the claim however many
  -- subscriptions wait behind a cap (they go to the back of the queue and the next claim goes on).
  most_visits constant integer := batch * 4 + 16;
  visits integer := 0;
  taken_in_round integer;
  -- One member's share: a quarter of the drain's slots (5 of npm start's 20), in flight across
  -- every worker, slow or not. A share, not a number, so that no drain is one member's (a fixed
  -- 5 was all of a drain of 5 slots); a quarter, because several accounts act together: it takes
  -- four to fill the slots even for the seconds before their requests turn slow and leave them
  -- (the worker keeps a request in a slot for slow_after at most). A member's own todos need
  -- about one delivery a second (200 todos an hour, 20 subscriptions).
  -- (member_cap and unproven_cap given: tests that need the caps out of their way.)
  member_share constant integer := coalesce(member_cap, greatest(1, slots / 4));
  -- Deliveries to (member, host) pairs not known to answer (never answered, or failing since
  -- their last attempt: app.webhook_breakers) hold at most half the slots together, whoever's
  -- they are, so the other half is always left to receivers that answer, however many accounts
  -- bring fresh hosts. Counted while they are in a slot (claimed less than slow_after ago).
  unproven_share constant integer := coalesce(unproven_cap, greatest(1, slots / 2));
  unproven_now integer;
  -- What this claim takes, one element per delivery; written at the end, in three statements.
  subscriptions uuid[] := '{}';
  todos uuid[] := '{}';
  hosts text[] := '{}';
  members uuid[] := '{}';
  pairs text[] := '{}';
  probes boolean[] := '{}';
  unprovens boolean[] := '{}';
  full_pairs text[] := '{}';
  full_members uuid[] := '{}';
  -- The claim's time, read once it holds the lock below. Not now(): that is when the claim's
  -- transaction began, which for a claim that waited for another one's lock is before the other
  -- claimed; the turns the other set (to its own time) then lay in this claim's future, so it
  -- found nothing due and its worker stopped with deliveries waiting (two workers starting
  -- together: one sent everything, test/webhook-delivery.test.ts).
  claim_at timestamptz;
begin
  -- One claim at a time: the caps below count the leases of every claim before this one. A
  -- claim is a few index probes per delivery; the lock is held for as long.
  perform pg_advisory_xact_lock(hashtextextended('app.take_webhook_deliveries', 0));
  claim_at := clock_timestamp();
  -- Leases of workers that died mid-send (a table of the deliveries in flight: a few rows).
  delete from app.webhook_leases l where l.until <= claim_at;
  select count(*) into unproven_now from app.webhook_leases l where l.unproven and l.claimed_at > claim_at - slow_after;
  <<rounds>>
  loop
    taken_in_round := 0;
    for turn in
      select q.subscription_id, q.turn_at, s.host, s.user_id, s.active
        from app.webhook_queue q
        join app.webhook_subscriptions s on s.id = q.subscription_id
       where q.turn_at <= claim_at
       order by q.turn_at, q.subscription_id
       limit most_visits - visits
         for update of q skip locked
    loop
      visits := visits + 1;
      if not turn.active then
        -- Switched off: its pending deliveries were failed, and no new ones are written.
        delete from app.webhook_queue q where q.subscription_id = turn.subscription_id;
        continue;
      end if;
      pair := turn.user_id::text || ' ' || turn.host;
      if pair = any (full_pairs) or turn.user_id = any (full_members) then
        if turn.turn_at < claim_at then -- to the back (once: a second round finds it there)
          update app.webhook_queue q set turn_at = claim_at where q.subscription_id = turn.subscription_id;
        end if;
        continue;
      end if;
      -- The breaker of the member's receivers on this host (no row: never attempted).
      select b.failures, b.open_until into breaker
        from app.webhook_breakers b where b.user_id = turn.user_id and b.host = turn.host;
      unproven := coalesce(breaker.failures, 1) > 0;
      if breaker.open_until > claim_at then
        -- Open: nothing of this member goes to the host, and these subscriptions are not looked
        -- at again, until the cool-down ends. Not attempted, so no attempt is counted.
        update app.webhook_queue q set turn_at = breaker.open_until where q.subscription_id = turn.subscription_id;
        continue;
      end if;
      if unproven and unproven_now >= unproven_share then
        -- The unproven half is in use: to the back, behind receivers that answer.
        if turn.turn_at < claim_at then
          update app.webhook_queue q set turn_at = claim_at where q.subscription_id = turn.subscription_id;
        end if;
        continue;
      end if;
      -- What is in flight to the pair and for the member (leases, and what this claim took).
      to_pair := (select count(*) from app.webhook_leases l where l.user_id = turn.user_id and l.host = turn.host)
                 + coalesce(cardinality(array_positions(pairs, pair)), 0);
      -- Half-open (the cool-down is over, the breaker not closed yet): one probe at a time.
      if to_pair >= (case when breaker.open_until is null then host_cap else 1 end) then
        full_pairs := full_pairs || pair;
        update app.webhook_queue q
           set turn_at = case when breaker.open_until is null then claim_at
                              -- behind the probe: its answer wakes them (app.record_webhook_attempt)
                              else coalesce((select max(l.until) from app.webhook_leases l
                                              where l.user_id = turn.user_id and l.host = turn.host), claim_at + lease) end
         where q.subscription_id = turn.subscription_id;
        continue;
      end if;
      for_member := (select count(*) from app.webhook_leases l where l.user_id = turn.user_id)
                    + coalesce(cardinality(array_positions(members, turn.user_id)), 0);
      if for_member >= member_share then
        full_members := full_members || turn.user_id;
        update app.webhook_queue q set turn_at = claim_at where q.subscription_id = turn.subscription_id;
        continue;
      end if;
      -- The subscription's next due delivery that this claim has not taken (skip locked: one a
      -- deletion holds is left to it).
      select d.todo_id into head
        from app.webhook_deliveries d
       where d.subscription_id = turn.subscription_id and d.status = 'pending' and d.next_attempt_at <= claim_at
         and d.todo_id <> all (array(select c.t from unnest(subscriptions, todos) c(s, t) where c.s = turn.subscription_id))
       order by d.next_attempt_at
       limit 1
         for update of d skip locked;
      if head is null then
        -- Taken from already in this claim (its turn is set below), or nothing due: the queue
        -- was early (its turn becomes its next delivery's), a deletion holds the due one (to the
        -- back), or nothing is pending (its row goes; the row is locked by this claim, so a todo
        -- committing now waits, and writes it again after).
        if turn.subscription_id <> all (subscriptions) then
          next_at := (select d.next_attempt_at from app.webhook_deliveries d
                       where d.subscription_id = turn.subscription_id and d.status = 'pending'
                       order by d.next_attempt_at limit 1);
          if next_at is null then
            delete from app.webhook_queue q where q.subscription_id = turn.subscription_id;
          else
            update app.webhook_queue q set turn_at = greatest(claim_at, next_at) where q.subscription_id = turn.subscription_id;
          end if;
        end if;
        continue;
      end if;
      subscriptions := subscriptions || turn.subscription_id;
      todos := todos || head;
      hosts := hosts || turn.host;
      members := members || turn.user_id;
      pairs := pairs || pair;
      probes := probes || (breaker.open_until is not null);
      unprovens := unprovens || unproven;
      if unproven then
        unproven_now := unproven_now + 1;
      end if;
      if breaker.open_until is not null then
        full_pairs := full_pairs || pair; -- the probe is the only one
      end if;
      taken_in_round := taken_in_round + 1;
      exit rounds when cardinality(todos) >= batch;
    end loop;
    -- Another round while this one took something (a subscription with more due gets a second
    -- delivery only after every other due subscription got its first) and visits are left.
    exit rounds when taken_in_round = 0 or visits >= most_visits;
  end loop;

  if cardinality(todos) > 0 then
    update app.webhook_deliveries d set next_attempt_at = claim_at + lease
      from unnest(subscriptions, todos) c(s, t)
     where d.subscription_id = c.s and d.todo_id = c.t;
    insert into app.webhook_leases as l (subscription_id, todo_id, host, user_id, probe, unproven, claimed_at, until)
    select c.s, c.t, c.h, c.m, c.p, c.u, claim_at, claim_at + lease
      from unnest(subscriptions, todos, hosts, members, probes, unprovens) c(s, t, h, m, p, u)
    on conflict on constraint webhook_leases_pkey do update
      set host = excluded.host, user_id = excluded.user_id, probe = excluded.probe, unproven = excluded.unproven,
          claimed_at = excluded.claimed_at, until = excluded.until;
    -- The subscriptions served go to the back of the queue, or to when their next delivery is due.
    update app.webhook_queue q
       set turn_at = greatest(claim_at, (select d.next_attempt_at from app.webhook_deliveries d
                                       where d.subscription_id = q.subscription_id and d.status = 'pending'
                                       order by d.next_attempt_at limit 1))
     where q.subscription_id = any (subscriptions);
  end if;
  return query
    -- secret: the signing secret, and while a rotation's 24 hours last the previous one after a
    -- space (a whsec_ secret has none): the worker signs with each (functions/lib/webhooks.ts).
    select c.subscription_id, c.todo_id, app.webhook_id(c.subscription_id, c.todo_id), s.url,
           case when k.previous_expires_at > now() then k.secret || ' ' || k.previous_secret else k.secret end,
           e.payload::text, d.attempts, d.first_attempt_at
      from unnest(subscriptions, todos) with ordinality c(subscription_id, todo_id, n)
      join app.webhook_deliveries d on d.subscription_id = c.subscription_id and d.todo_id = c.todo_id
      join app.webhook_events e on e.todo_id = c.todo_id
      join app.webhook_subscriptions s on s.id = c.subscription_id
      join app.webhook_secrets k on k.subscription_id = c.subscription_id
     order by c.n;
end;
$$;
comment on function app.take_webhook_deliveries(integer, interval, integer, interval, integer, integer, integer) is
  'The worker''s claim: up to `batch` due deliveries, leased for `lease` (their next_attempt_at moved past the send) in one short statement that commits at once. Fair (issue 25): subscriptions are taken in turn (app.webhook_queue: one delivery each per round, then to the back); across all workers (app.webhook_leases) one member has at most a quarter of the calling drain''s `slots` in flight, and at most host_cap to one host; deliveries to (member, host) pairs not known to answer (app.webhook_breakers: never answered, or failing) hold at most half of the slots together; nothing goes to a pair whose breaker is open (one probe when half-open). Breakers and caps are per member and host, so that members sharing a receiving host (hooks.slack.com) share no fate there. The worker keeps a request in a slot for slow_after at most (functions/lib/webhooks.ts): the unproven half counts leases claimed more recently than that. A million pending deliveries of one subscription cost a claim one index probe. Why a lease and not a lock held while sending: a transaction open for a slow receiver kept every row of its batch locked, so other members'' todo deletions and switch-offs waited on it and failed (503). Claims are serialized (an advisory lock) so the caps count exactly; rows on lease are not due, so no delivery is sent twice at once as long as the lease outlasts a send (the worker makes it so); a worker that dies leaves its rows due again when the lease ends, with the same webhook-id (at least once). The defaults are the worker''s numbers (functions/lib/webhooks.ts), which passes its own; member_cap and unproven_cap replace the shares where a test needs them out of its way. secret is the signing secret, followed by the previous one (space-separated) while a rotation''s 24 hours last (app.rotate_webhook_secret).';

create function app.record_webhook_attempt(subscription uuid, todo uuid, response_status integer, error text, retry_at timestamptz, disable_reason text,
  breaker_after integer default 5, cooldown interval default '30 seconds', max_cooldown interval default '10 minutes', give_up interval default '3 days')
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  delivered boolean := response_status between 200 and 299;
  held app.webhook_leases;
  target_host text;
  target_member uuid;
  breaker app.webhook_breakers;
  dead uuid;
begin
  update app.webhook_deliveries d
     set attempts = d.attempts + 1,
         first_attempt_at = coalesce(d.first_attempt_at, now()),
         last_attempt_at = now(),
         last_status = response_status,
         last_error = case when delivered then null else left(error, 500) end,
         status = case when delivered then 'delivered' when retry_at is null then 'failed' else 'pending' end,
         next_attempt_at = case when delivered then null else retry_at end,
         delivered_at = case when delivered then now() end
   where d.subscription_id = subscription and d.todo_id = todo;
  if not delivered and disable_reason is not null then
    perform app.disable_webhook_subscription(subscription, disable_reason);
  end if;
  -- In flight no more (after the delivery's row, in the order a claim locks them).
  delete from app.webhook_leases l where l.subscription_id = subscription and l.todo_id = todo
  returning * into held;

  -- The breaker of the member and host the attempt went to (the lease's: the URL may have
  -- changed since).
  if held.subscription_id is not null then
    target_host := held.host;
    target_member := held.user_id;
  else
    select s.host, s.user_id into target_host, target_member from app.webhook_subscriptions s where s.id = subscription;
  end if;
  if target_host is null then
    return;
  end if;
  select * into breaker from app.webhook_breakers b where b.user_id = target_member and b.host = target_host;
  if breaker.user_id is null and not exists (select 1 from app.webhook_subscriptions s
                                             where s.user_id = target_member and s.host = target_host) then
    -- The member has no subscription there any more (a url changed while this was in flight):
    -- nothing to keep (app.tg_webhook_subscriptions__forget_breakers).
    return;
  end if;
  if response_status is not null then
    -- An answer, whatever it says: the member's receivers there are there. Known to answer from
    -- now on (a row with no failures: written once, not at every delivery); closed, and what
    -- waited for it goes now.
    if breaker.user_id is null then
      insert into app.webhook_breakers (user_id, host) values (target_member, target_host) on conflict do nothing;
    elsif breaker.failures > 0 then
      update app.webhook_breakers b
         set failures = 0, failing_since = null, open_until = null, cooldown = null
       where b.user_id = target_member and b.host = target_host;
      if breaker.open_until is not null then
        update app.webhook_queue q set turn_at = now()
          from app.webhook_subscriptions s
         where s.user_id = target_member and s.host = target_host and q.subscription_id = s.id and q.turn_at > now();
      end if;
    end if;
    return;
  end if;
  insert into app.webhook_breakers as b (user_id, host, failures, failing_since) values (target_member, target_host, 1, now())
  on conflict (user_id, host) do update set failures = b.failures + 1, failing_since = coalesce(b.failing_since, now())
  returning * into breaker;
  if breaker.failing_since <= now() - give_up then
    -- Nothing but failures from the member's receivers on this host for the whole give-up
    -- window: those subscriptions are turned off (and their pending deliveries failed), as one
    -- delivery failing that long turns its own off. The breaker kept most of them from ever
    -- being attempted. Only this member's: another member's on the same host answer for
    -- themselves.
    for dead in select s.id from app.webhook_subscriptions s where s.user_id = target_member and s.host = target_host and s.active loop
      perform app.disable_webhook_subscription(dead, 'its host gave no answer for about three days');
    end loop;
    delete from app.webhook_breakers b where b.user_id = target_member and b.host = target_host;
    return;
  end if;
  if held.probe then
    -- The probe got no answer: open again, for twice as long (at most max_cooldown).
    update app.webhook_breakers b
       set cooldown = least(coalesce(b.cooldown, record_webhook_attempt.cooldown) * 2, max_cooldown),
           open_until = now() + least(coalesce(b.cooldown, record_webhook_attempt.cooldown) * 2, max_cooldown)
     where b.user_id = target_member and b.host = target_host;
  elsif breaker.open_until is null and breaker.failures >= breaker_after then
    update app.webhook_breakers b
       set cooldown = record_webhook_attempt.cooldown, open_until = now() + record_webhook_attempt.cooldown
     where b.user_id = target_member and b.host = target_host;
  end if;
end;
$$;
comment on function app.record_webhook_attempt(uuid, uuid, integer, text, timestamptz, text, integer, interval, interval, interval) is
  'Records one attempt of a delivery the worker holds: 2xx delivered; otherwise pending again at retry_at, or failed when retry_at is null. disable_reason (410 Gone, or about three days of failures) turns the subscription off. Ends the lease (app.webhook_leases) and keeps the circuit breaker of the subscription''s member and host (app.webhook_breakers): any HTTP answer closes it and marks the pair as one that answers; no answer (timeout, connection failure, a request the worker cut short) counts, and the breaker_after-th in a row opens the pair for `cooldown`; a failed probe opens it again for twice the last cool-down, at most max_cooldown; a pair with nothing but failures for give_up has the member''s subscriptions to the host turned off. The worker computes the schedule and passes the breaker''s numbers (functions/lib/webhooks.ts) so tests can shorten them; the defaults are the same numbers.';

create function app.disable_webhook_subscription(subscription uuid, reason text)
returns void
language sql
volatile
security definer
set search_path = ''
as $$
  update app.webhook_subscriptions s
     set active = false, disabled_reason = reason, updated_at = now()
   where s.id = subscription and ((select auth.uid()) is null or s.user_id = (select auth.uid()));
  update app.webhook_deliveries d
     set status = 'failed', next_attempt_at = null, last_error = coalesce(d.last_error || '; ', '') || 'subscription disabled'
   where d.subscription_id = subscription and d.status = 'pending'
     and exists (select 1 from app.webhook_subscriptions s
                 where s.id = subscription and ((select auth.uid()) is null or s.user_id = (select auth.uid())));
$$;
comment on function app.disable_webhook_subscription(uuid, text) is
  'Turns a subscription off and fails its pending deliveries (a receiver that is gone gets nothing more). Called by the worker (no member: any subscription) on 410 and after about three days of failures, and by PATCH active=false (a member: only their own).';
grant execute on function app.disable_webhook_subscription(uuid, text) to authenticated;

create function app.prune_webhook_deliveries(older_than interval, batch integer)
returns integer
language sql
volatile
security definer
set search_path = ''
as $$
  with gone as (
    -- The ids first (an array), then each by its primary key: written `e.todo_id in (select …)`,
    -- the plan hashed the batch and scanned every event for it.
    delete from app.webhook_events e
    where e.todo_id = any (array(
      select o.todo_id from app.webhook_events o
      where o.created_at < now() - older_than
        and not exists (select 1 from app.webhook_deliveries d where d.todo_id = o.todo_id and d.status = 'pending')
      order by o.created_at
      limit batch))
    returning 1
  )
  select count(*)::integer from gone
$$;
comment on function app.prune_webhook_deliveries(interval, integer) is
  'The delivery log''s retention (issue 28): deletes up to `batch` new-todo events older than `older_than` whose deliveries are all over (delivered or failed; none pending), and with them (on delete cascade) their delivery log rows, one per subscription. The storage worker calls it every minute (functions/lib/maintenance.ts: 30 days, 1,000 events a statement, 10 statements a run at most). Without it every todo of a subscribed member left its 2–3 KB body and a log row per subscription forever. One range of the index on created_at, a probe of webhook_deliveries_todo_id_idx per event, then a primary-key probe per event deleted: never a scan of the log, whatever its size (as `todo_id in (subquery)` the generic plan was a hash join over a sequential scan of every event, issue 28 review). Security definer: only the worker''s functions touch the outbox.';
grant execute on function app.prune_webhook_deliveries(interval, integer) to service_role;

-- ============================================================================
-- Row-level security and grants
-- ============================================================================
-- app.webhook_subscriptions
alter table app.webhook_subscriptions enable row level security;
create policy "Members see their own webhook subscriptions" on app.webhook_subscriptions
  for select to authenticated
  using (user_id = (select auth.uid()));
create policy "Members subscribe in their own name with a writing credential" on app.webhook_subscriptions
  for insert to authenticated
  with check (user_id = (select auth.uid()) and (select app.can_write()));
create policy "Members edit their own webhook subscriptions with a writing credential" on app.webhook_subscriptions
  for update to authenticated
  using (user_id = (select auth.uid()))
  with check (user_id = (select auth.uid()) and (select app.can_write()));
create policy "Members delete their own webhook subscriptions with a writing credential" on app.webhook_subscriptions
  for delete to authenticated
  using (user_id = (select auth.uid()) and (select app.can_write()));
grant select, delete on app.webhook_subscriptions to authenticated;
grant insert (user_id, url, event_type, project_ids) on app.webhook_subscriptions to authenticated;
grant update (url, event_type, project_ids, active, disabled_reason, updated_at) on app.webhook_subscriptions to authenticated;

-- app.webhook_secrets
alter table app.webhook_secrets enable row level security;
-- No policy and no grant: members never read a secret; app.new_webhook_secret writes it.

-- app.webhook_events
alter table app.webhook_events enable row level security;
-- No policy and no grant: the trigger writes, the worker reads.

-- app.webhook_deliveries
alter table app.webhook_deliveries enable row level security;
-- No policy and no grant: the trigger writes, the worker and the operator CLI read.

-- app.webhook_queue, app.webhook_breakers, app.webhook_leases
alter table app.webhook_queue enable row level security;
alter table app.webhook_breakers enable row level security;
alter table app.webhook_leases enable row level security;
-- No policy and no grant: the worker's functions and the outbox's triggers write them.

-- ============================================================================
-- Triggers
-- ============================================================================
create function app.tg_todos__enqueue_webhooks()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  claims text;
  rendered jsonb;
  matching uuid[];
begin
  -- The whole cost for a member without subscriptions: one index probe.
  if not exists (select 1 from app.webhook_subscriptions s where s.user_id = new.user_id and s.active) then
    return null;
  end if;
  -- Rendered as its owner sees it: api.todo_create already rendered it so for its response,
  -- after the last write of the transaction, and left it in app.created_todo (rendering it twice
  -- doubled the cost of a subscribed member's POST). Any other writer (the operator's
  -- create-todo) does not act for the owner, so the owner's claims are set for the rendering.
  rendered := nullif(current_setting('app.created_todo', true), '')::jsonb;
  if rendered is null or rendered ->> 'id' is distinct from app.to_public_id('todo', new.id) then
    claims := current_setting('request.jwt.claims', true);
    if (select auth.uid()) is distinct from new.user_id then
      perform set_config('request.jwt.claims', jsonb_build_object('sub', new.user_id, 'role', 'authenticated')::text, true);
    end if;
    rendered := app.todos_json(array[new.id], false) -> 0;
    perform set_config('request.jwt.claims', coalesce(claims, ''), true);
  end if;
  if rendered is null then
    return null; -- deleted again before its transaction ended
  end if;
  select array_agg(s.id) into matching
  from app.webhook_subscriptions s
  where s.user_id = new.user_id and s.active
    and (cardinality(s.project_ids) = 0 or exists (
      select 1 from jsonb_array_elements(rendered -> 'mentioned_projects') mp
      where app.from_public_id('proj', mp ->> 'id') = any (s.project_ids)));
  if matching is null then
    return null;
  end if;
  insert into app.webhook_events (todo_id, payload)
  values (new.id, jsonb_build_object('type', 'new_todo', 'timestamp', new.created_at, 'data', rendered))
  on conflict do nothing;
  insert into app.webhook_deliveries (subscription_id, todo_id)
  select m.id, new.id from unnest(matching) m(id)
  on conflict do nothing;
  return null;
end;
$$;
comment on function app.tg_todos__enqueue_webhooks() is
  'The webhook outbox: when a todo''s transaction commits, one delivery per active subscription of its owner whose project_ids are empty or meet the todo''s mentioned_projects (as the owner sees them). Deferred to commit, so the Todo is rendered once, complete (attachments are attached after the insert), and a rolled-back todo writes nothing. Security definer: members cannot write the outbox.';
create constraint trigger _900_enqueue_webhooks after insert on app.todos
  deferrable initially deferred
  for each row execute function app.tg_todos__enqueue_webhooks();

create function app.tg_webhook_deliveries__queue_turns()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  if tg_op = 'UPDATE' then
    -- A delivery on lease made due now by hand (an operator bringing it forward) is in flight no
    -- more: its lease stops counting against the caps.
    delete from app.webhook_leases l
     using old_rows o join new_rows n on n.subscription_id = o.subscription_id and n.todo_id = o.todo_id
     where l.subscription_id = n.subscription_id and l.todo_id = n.todo_id
       and n.next_attempt_at <= now() and o.next_attempt_at > now();
  end if;
  -- A subscription's turn comes no later than its earliest pending delivery.
  insert into app.webhook_queue as q (subscription_id, turn_at)
  select n.subscription_id, min(n.next_attempt_at)
    from new_rows n
   where n.status = 'pending' and n.next_attempt_at is not null
   group by n.subscription_id
  on conflict (subscription_id) do update set turn_at = excluded.turn_at
   where q.turn_at > excluded.turn_at;
  return null;
end;
$$;
comment on function app.tg_webhook_deliveries__queue_turns() is
  'Keeps app.webhook_queue from being late: a new pending delivery (the outbox trigger), a retry recorded for sooner than the lease, or a delivery brought forward by hand puts its subscription''s turn no later than its next_attempt_at (the claim moves turns later, never this). A statement trigger with transition tables: one upsert per todo, however many subscriptions it went to. Security definer: members cannot write the queue.';
create trigger _100_queue_turns_on_insert after insert on app.webhook_deliveries
  referencing new table as new_rows
  for each statement execute function app.tg_webhook_deliveries__queue_turns();
create trigger _100_queue_turns_on_update after update on app.webhook_deliveries
  referencing old table as old_rows new table as new_rows
  for each statement execute function app.tg_webhook_deliveries__queue_turns();

create function app.tg_webhook_subscriptions__forget_breakers()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  if tg_op = 'UPDATE' and new.host is not distinct from old.host then
    return null;
  end if;
  delete from app.webhook_breakers b
   where b.user_id = old.user_id and b.host = old.host
     and not exists (select 1 from app.webhook_subscriptions s
                      where s.user_id = old.user_id and s.host = old.host and s.id <> old.id);
  return null;
end;
$$;
comment on function app.tg_webhook_subscriptions__forget_breakers() is
  'When a member''s last subscription to a host goes (deleted, or its url moved to another host), what the worker knew of the member''s receivers there goes too (app.webhook_breakers): otherwise every host a member ever tried would keep a row (30 new urls per 10 minutes). Forgetting an open breaker gains nothing: the pair is unproven again, held to the unproven half of the slots, and a new url counts against webhook_subscription_create. Security definer: members have no grant on app.webhook_breakers.';
create trigger _200_forget_breakers after update of url or delete on app.webhook_subscriptions
  for each row execute function app.tg_webhook_subscriptions__forget_breakers();

-- ============================================================================
-- API functions
-- ============================================================================
create function api.webhook_subscription_list()
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select coalesce(jsonb_agg(app.webhook_subscription_json(s) order by s.created_at, s.id), '[]'::jsonb)
  from app.webhook_subscriptions s
  where s.user_id = (select auth.uid()));
end;
$$;
comment on function api.webhook_subscription_list() is
  'GET /v1/webhooks/subscriptions: the member''s subscriptions, oldest first, a plain array (SPEC: not paginated; at most 20 exist). Needs a writing credential (functions/lib/access.ts): subscription URLs often carry the receiver''s own credential. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function api.webhook_subscription_list() to authenticated;

create function app.refuse_duplicate_webhook_url(member_id uuid, url text, except_id uuid)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  existing uuid;
begin
  select s.id into existing from app.webhook_subscriptions s
   where s.user_id = member_id and s.url = refuse_duplicate_webhook_url.url and s.id is distinct from except_id;
  if found then
    perform app.http_error(409, format('You already have a webhook subscription to this url (%s); change or delete that one.', app.to_public_id('hook', existing)));
  end if;
end;
$$;
comment on function app.refuse_duplicate_webhook_url(uuid, text, uuid) is
  '409 naming the member''s subscription that already has this url (other than except_id, the one being changed). The unique index webhook_subscriptions_user_id_url_key is what guarantees it (its violation is a 409 too); this says which subscription, under the per-member lock the callers hold. Runs as the member (RLS: only their own subscriptions).';
grant execute on function app.refuse_duplicate_webhook_url(uuid, text, uuid) to authenticated;

create function api.webhook_subscription_create(url text, event_type text, project_ids jsonb)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  member_id uuid := (select auth.uid());
  projects uuid[];
  created app.webhook_subscriptions;
begin
  if event_type is distinct from 'new_todo' then
    perform app.http_error(422, 'event_type must be new_todo.');
  end if;
  projects := app.webhook_project_ids(project_ids);
  -- One create of this member at a time, so concurrent requests cannot pass the cap together.
  perform pg_advisory_xact_lock(hashtextextended('app.webhook_subscriptions ' || member_id::text, 0));
  perform app.refuse_duplicate_webhook_url(member_id, webhook_subscription_create.url, null);
  if (select count(*) from app.webhook_subscriptions s where s.user_id = member_id) >= 20 then
    perform app.http_error(422, 'You have 20 webhook subscriptions, the most a member may have; delete one first.');
  end if;
  perform app.hit_rate_limit('webhook_subscription_create');
  insert into app.webhook_subscriptions (user_id, url, event_type, project_ids)
  values (member_id, url, event_type, projects)
  returning * into created;
  return app.webhook_subscription_json(created) || jsonb_build_object('secret', app.new_webhook_secret(created.id));
end;
$$;
comment on function api.webhook_subscription_create(text, text, jsonb) is
  'POST /v1/webhooks/subscriptions: 201 with the signing secret, shown only here. The URL is checked by the HTTP layer (absolute https; http only with WEBHOOK_ALLOW_PRIVATE=1); here event_type (422), project_ids (422 unknown or not visible), a URL the member already subscribes to (409, issue 25), the cap of 20 per member (422), both under a per-member lock, then the rate limit (webhook_subscription_create, 429).';
grant execute on function api.webhook_subscription_create(text, text, jsonb) to authenticated;

create function api.webhook_subscription_update(subscription_ref text, url text, event_type text, project_ids jsonb, active boolean)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.webhook_subscriptions;
  projects uuid[];
begin
  select * into target from app.webhook_subscriptions s
  where s.id = app.from_public_id('hook', subscription_ref) and s.user_id = (select auth.uid());
  if target.id is null then
    perform app.http_error(404, 'No webhook subscription matches.');
  end if;
  if event_type is not null and event_type <> 'new_todo' then
    perform app.http_error(422, 'event_type must be new_todo.');
  end if;
  if project_ids is not null then
    projects := app.webhook_project_ids(project_ids);
  end if;
  if webhook_subscription_update.url is not null and webhook_subscription_update.url is distinct from target.url then
    perform pg_advisory_xact_lock(hashtextextended('app.webhook_subscriptions ' || target.user_id::text, 0));
    perform app.refuse_duplicate_webhook_url(target.user_id, webhook_subscription_update.url, target.id);
    -- A new url is a new receiver, as a new subscription is: it counts against the same limit
    -- (issue 25 review). Unlimited, it gave a member a fresh host (subdomain, port) at will, and
    -- with it a fresh breaker, as often as the old one opened.
    perform app.hit_rate_limit('webhook_subscription_create');
  end if;
  update app.webhook_subscriptions s
     set url = coalesce(webhook_subscription_update.url, s.url),
         event_type = coalesce(webhook_subscription_update.event_type, s.event_type),
         project_ids = coalesce(projects, s.project_ids),
         active = coalesce(webhook_subscription_update.active, s.active),
         disabled_reason = case when coalesce(webhook_subscription_update.active, s.active) then null else s.disabled_reason end,
         updated_at = now()
   where s.id = target.id
  returning * into target;
  if target.active is false and active is false then
    perform app.disable_webhook_subscription(target.id, 'turned off by its owner');
    select * into target from app.webhook_subscriptions s where s.id = target.id;
  end if;
  return app.webhook_subscription_json(target);
end;
$$;
comment on function api.webhook_subscription_update(text, text, text, jsonb, boolean) is
  'PATCH /v1/webhooks/subscriptions/{id}: every field optional (null: unchanged); project_ids [] means all projects; active=true turns a disabled subscription back on, active=false off (its pending deliveries fail). 404 for another member''s or an unknown id; 409 for a url another of the member''s subscriptions has (under the lock creation takes); a url that changes counts against webhook_subscription_create (429), like a creation: a new url is a new receiver, with a breaker of its own.';
grant execute on function api.webhook_subscription_update(text, text, text, jsonb, boolean) to authenticated;

create function api.webhook_subscription_delete(subscription_ref text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  delete from app.webhook_subscriptions s
  where s.id = app.from_public_id('hook', subscription_ref) and s.user_id = (select auth.uid());
  if not found then
    perform app.http_error(404, 'No webhook subscription matches.');
  end if;
end;
$$;
comment on function api.webhook_subscription_delete(text) is
  'DELETE /v1/webhooks/subscriptions/{id}: 204; its secret and delivery log go with it (on delete cascade), so nothing more is sent. 404 for another member''s or an unknown id.';
grant execute on function api.webhook_subscription_delete(text) to authenticated;

create function api.webhook_subscription_rotate_secret(subscription_ref text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.webhook_subscriptions;
  fresh text;
begin
  select * into target from app.webhook_subscriptions s
  where s.id = app.from_public_id('hook', subscription_ref) and s.user_id = (select auth.uid());
  if target.id is null then
    perform app.http_error(404, 'No webhook subscription matches.');
  end if;
  fresh := app.rotate_webhook_secret(target.id);
  return app.webhook_subscription_json(target)
    || jsonb_build_object('secret', fresh, 'previous_secret_expires_at', now() + interval '24 hours');
end;
$$;
comment on function api.webhook_subscription_rotate_secret(text) is
  'POST /v1/webhooks/subscriptions/{id}/secret: a new signing secret, shown only in this response; for 24 hours (previous_secret_expires_at) deliveries carry signatures with both the new and the previous secret (app.rotate_webhook_secret). 404 for another member''s or an unknown id. No rate limit: it grows no table (the row is rewritten), and only the member''s own deliveries are signed with what it writes.';
grant execute on function api.webhook_subscription_rotate_secret(text) to authenticated;

-- ============================================================================
-- Production: Supabase Cron drains the outbox
-- ============================================================================
create function app.schedule_webhook_worker()
returns text
language plpgsql
volatile
set search_path = ''
as $$
begin
  if not exists (select 1 from pg_extension where extname = 'pg_cron')
     or not exists (select 1 from pg_extension where extname = 'pg_net') then
    raise exception 'pg_cron and pg_net are needed: enable both (Supabase Dashboard, Integrations: Cron), then call app.schedule_webhook_worker() again';
  end if;
  perform cron.schedule('todo-webhook-deliveries', '5 seconds', $job$
    select net.http_post(
      url := (select decrypted_secret from vault.decrypted_secrets where name = 'todo_api_url') || '/internal/webhooks',
      headers := jsonb_build_object('Authorization', 'Bearer ' || (select decrypted_secret from vault.decrypted_secrets where name = 'todo_worker_secret')),
      timeout_milliseconds := 55000)
    where exists (select 1 from vault.decrypted_secrets where name = 'todo_api_url')
      and exists (select 1 from vault.decrypted_secrets where name = 'todo_worker_secret')
  $job$);
  return 'todo-webhook-deliveries';
end;
$$;
comment on function app.schedule_webhook_worker() is
  'Schedules (or reschedules: cron.schedule replaces a job of the same name) the Supabase Cron job that wakes the edge function''s webhook worker every 5 seconds with pg_net (waiting up to 55 s for it, longer than one call drains: 50 s): POST <todo_api_url>/internal/webhooks with Bearer <todo_worker_secret>, both read from Supabase Vault at each run, so no secret is written into a migration; it posts nothing until both are stored (docs/deploy.md). pg_net only wakes the worker: retries, signatures and the delivery log are the worker''s. Not granted to members: the database owner runs it.';

-- Where pg_cron and pg_net are already enabled (a Supabase project that uses Cron), the job is
-- scheduled at once; elsewhere (and locally, where `npm start` runs the worker on a timer) this
-- does nothing, and the operator calls app.schedule_webhook_worker() after enabling them. A
-- cron job is a row of cron.job, not schema: test/schema.test.ts compares the function, not the
-- job, and both sides (migrations, schema files) run this same block.
do $do$
begin
  if exists (select 1 from pg_extension where extname = 'pg_cron')
     and exists (select 1 from pg_extension where extname = 'pg_net') then
    perform app.schedule_webhook_worker();
  end if;
end
$do$;

-- ============================================================================
-- Execute only where granted above
-- ============================================================================
revoke execute on all functions in schema app, api from public;
