-- fix webhook claim clock (issue 29): a claim reads the clock once it holds the claims' lock,
-- instead of now() (its transaction's start, which for a claim that waited for another's lock was
-- before the other claimed: it found nothing due and its worker stopped). docs/reliability.md,
-- "A database that goes silent", "Found by the clean-clone CI".
--
-- Written by hand from supabase/schemas/80_webhooks.sql (the function as it is there; the
-- quiet period of the session left no time for `npm run db:diff`): test/schema.test.ts proves the
-- two agree. Only the function's body changes; its signature, comment and grants stay.

-- app.take_webhook_deliveries: supabase/schemas/80_webhooks.sql
create or replace function app.take_webhook_deliveries(batch integer, lease interval, slots integer default 20, slow_after interval default '2 seconds', host_cap integer default 8,
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
    select c.subscription_id, c.todo_id, app.webhook_id(c.subscription_id, c.todo_id), s.url, k.secret, e.payload::text, d.attempts, d.first_attempt_at
      from unnest(subscriptions, todos) with ordinality c(subscription_id, todo_id, n)
      join app.webhook_deliveries d on d.subscription_id = c.subscription_id and d.todo_id = c.todo_id
      join app.webhook_events e on e.todo_id = c.todo_id
      join app.webhook_subscriptions s on s.id = c.subscription_id
      join app.webhook_secrets k on k.subscription_id = c.subscription_id
     order by c.n;
end;
$$;
