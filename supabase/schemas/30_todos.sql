-- Todos: mentions, streaks, counters, search and the todo endpoints.
--
-- A todo counts toward its creator's local day (streaks), names projects by #hashtag and
-- members by @username, and carries its author's privacy so its select policy needs no
-- lookup. Counters and streaks are kept by triggers; rendering is in 70_rendering.sql.

-- Function bodies are not checked here: they call functions of later files (the renderers
-- of 70_rendering.sql) and sections. They are the bodies the migrations created and checked,
-- as test/schema.test.ts proves.
set check_function_bodies = off;

-- ============================================================================
-- Tables
-- ============================================================================
create table app.todos (
  id              uuid primary key default gen_random_uuid(),
  number          bigint generated always as identity unique,
  user_id         uuid not null references app.users(id) on delete cascade,
  body            text not null check ((length(body) >= 1) and (length(body) <= 10000)),
  local_date      date not null,
  project_id      uuid references app.projects(id) on delete set null,
  search          tsvector not null generated always as (to_tsvector('simple'::regconfig, body)) stored,
  reactions_count integer not null default 0 check (reactions_count >= 0),
  comments_count  integer not null default 0 check (comments_count >= 0),
  created_at      timestamptz not null default now(),
  updated_at      timestamptz not null default now(),
  author_privacy  app.privacy not null
);
comment on table app.todos is
  'A finished todo. Visible to whoever may see its creator''s content (app.can_see_member_content).';
comment on column app.todos.number is
  'The numeric ID clients may use instead of todo_…; also the todo''s web address.';
comment on column app.todos.local_date is
  'The day the todo counts toward: its creation moment in the creator''s time zone at that moment. Stored, so a later zone change does not move history.';
comment on column app.todos.project_id is
  'The `projects` field: the first #hashtag project in the body of which the creator was an accepted maker when the body was written.';
comment on column app.todos.search is
  'Full-text vector (config simple: no stemming, so every word is matched by prefix as typed).';
comment on column app.todos.author_privacy is
  'The author''s users.privacy, copied so the select policy needs no lookup per row. Set on insert (app.tg_todos__prepare), updated when the author changes privacy (app.tg_users__propagate_privacy). Never changes updated_at.';
-- Keyset pagination: newest first, globally, per creator and per project. Each carries what
-- the select policy and the mutes read (author_privacy, user_id), so a page, a timeline source
-- and the exact count of an hour are index-only walks: without it the planner fetched every
-- todo of each followed member to sort them (a timeline 4 ms → 34 ms warm, 172 ms cold at 1M).
create index todos_created_at_id_idx on app.todos (created_at desc, id desc) include (user_id, author_privacy);
create index todos_user_id_created_at_idx on app.todos (user_id, created_at desc, id desc) include (author_privacy);
create index todos_project_id_created_at_idx on app.todos (project_id, created_at desc, id desc) include (user_id, author_privacy) where (project_id is not null);
-- Streaks and deletion previews: which local days a creator covered.
create index todos_user_id_local_date_idx on app.todos (user_id, local_date);
create index todos_search_idx on app.todos using gin (search);

create table app.todo_project_mentions (
  todo_id    uuid references app.todos(id) on delete cascade,
  project_id uuid references app.projects(id) on delete cascade,
  position   integer not null,
  constraint todo_project_mentions_pkey primary key (todo_id, project_id)
);
comment on table app.todo_project_mentions is
  'Projects a todo names by #hashtag, in body order. Rendering joins projects under RLS, so mentions of projects the viewer cannot see drop out by themselves.';
create index todo_project_mentions_project_id_idx on app.todo_project_mentions (project_id, todo_id);

create table app.todo_user_mentions (
  todo_id  uuid references app.todos(id) on delete cascade,
  user_id  uuid references app.users(id) on delete cascade,
  position integer not null,
  constraint todo_user_mentions_pkey primary key (todo_id, user_id)
);
comment on table app.todo_user_mentions is
  'Members a todo names by @username, in body order. Also ranks people in mention autocomplete.';
create index todo_user_mentions_user_id_idx on app.todo_user_mentions (user_id, todo_id);

create table app.streak_freezes (
  user_id uuid references app.users(id) on delete cascade,
  day     date,
  used_at timestamptz not null default now(),
  constraint streak_freezes_pkey primary key (user_id, day)
);
comment on table app.streak_freezes is
  'A used streak freeze: the day counts as covered. Freezes are used when they happen (operator CLI freeze-streak), never retroactively by a deletion.';

create table app.todo_totals (
  privacy app.privacy,
  shard   smallint check ((shard >= 0) and (shard <= 15)),
  todos   bigint not null default 0,
  constraint todo_totals_pkey primary key (privacy, shard)
);
comment on table app.todo_totals is
  'How many todos members of each privacy have, in 16 shards by author (app.todo_total_shard). Kept by the todos count trigger and the privacy propagation trigger; read by app.visible_todos_total and app.public_todos_between (a range that holds every public todo). Members have no access. No check that todos >= 0: when one statement both changes a member''s privacy and posts for them, the two triggers may pass through -1 before agreeing. No policy and no grant: members never touch this table; security definer functions do.';

-- A Project's todos_count (issue 28): the project's todos the viewer may see, from counters.
-- Kept per author, not per privacy: who may see a todo depends on its author (public, the
-- viewer, a protected author the viewer follows), and a project's authors are its makers, a
-- handful, so a read sums a few rows and applies each author's privacy as it is now; a member's
-- privacy change moves nothing here.
create table app.project_todo_counts (
  project_id uuid references app.projects(id) on delete cascade,
  user_id    uuid references app.users(id) on delete cascade,
  todos      bigint not null default 0 check (todos >= 0),
  constraint project_todo_counts_pkey primary key (project_id, user_id)
);
comment on table app.project_todo_counts is
  'How many todos of each author belong to each project (todos.project_id, the `projects` field): kept by the todos triggers _320_* on insert, delete and a change of project, read by app.visible_project_todos (a Project''s todos_count, the total_count of its unfiltered todo list). A sum over a project''s authors, never a count of its todos. No policy and no grant: members never touch this table; security definer functions do.';
-- The primary key serves a project's authors; this one the cascade of a deleted member.
create index project_todo_counts_user_id_idx on app.project_todo_counts (user_id);

-- What a date filter of GET /v1/todos counts (issue 26): public todos per hour, kept for hours
-- that are over ("sealed") so the total_count of a range is a sum over hours plus the exact
-- count of the partial hours at its ends, whatever the number of todos. Posting a todo touches
-- none of it (its hour is not sealed yet): the storage worker seals hours that ended more than
-- ten minutes ago (app.seal_todo_hours), and only deleting an older todo, posting a backdated
-- one (the operator CLI) or a member's privacy change updates a sealed hour.
create table app.todo_hours (
  privacy app.privacy,
  hour    timestamptz,
  todos   bigint not null,
  constraint todo_hours_pkey primary key (privacy, hour)
);
comment on table app.todo_hours is
  'Todos per author privacy and UTC hour of created_at, for every hour before app.todo_hours_sealed.until (a missing row is zero). Written by app.seal_todo_hours when an hour is sealed, then kept exact by the delete and backdated-insert triggers of app.todos and the privacy propagation; read by app.public_todos_between. No policy and no grant: members never touch this table; security definer functions do.';

create table app.todo_hours_sealed (
  id    boolean primary key default true check (id),
  until timestamptz not null
);
comment on table app.todo_hours_sealed is
  'One row: every hour before `until` has its counts in app.todo_hours; todos from `until` on are counted from app.todos itself. No policy and no grant: members never touch this table; security definer functions do.';

-- ============================================================================
-- Helpers
-- ============================================================================
create function app.extract_mentions(body text, sigil text)
returns table(name text, "position" integer)
language sql
immutable
parallel safe
rows 4
as $$
  select lower(m.match[1]), min(m.ord)::integer
  from regexp_matches(body, '(?:^|[^A-Za-z0-9_])' || sigil || '([A-Za-z0-9_]+)', 'g') with ordinality as m(match, ord)
  group by lower(m.match[1])
$$;
comment on function app.extract_mentions(text, text) is
  'Inlined (no SET clause, no table access). The distinct lower-cased names after a sigil (# or @) in body order. A sigil glued to a word (mail@example.com, a#b) is not a mention.';
grant execute on function app.extract_mentions(text, text) to authenticated, service_role;

create function app.check_mention_limits(body text)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  max_mentions constant integer := 20;
  members integer;
  projects integer;
begin
  -- Counted as they will be stored: names of members and projects that exist (others stay text).
  select count(*) into members from app.extract_mentions(body, '@') name join app.users u on lower(u.username) = name.name;
  if members > max_mentions then
    perform app.http_error(422, format('body may mention at most %s members; it mentions %s.', max_mentions, members));
  end if;
  select count(*) into projects from app.extract_mentions(body, '#') tag join app.projects p on lower(p.hashtag) = tag.name;
  if projects > max_mentions then
    perform app.http_error(422, format('body may mention at most %s projects; it mentions %s.', max_mentions, projects));
  end if;
end;
$$;
comment on function app.check_mention_limits(text) is
  'Raises 422 when a todo or comment body names more than 20 existing members or 20 projects. Why: every list renders every mention of every todo (SPEC: all of them), so a body naming 700 members made each page that shows it megabytes and a second (issue 25); twenty covers any real thanks-list. Called by the triggers that store mentions, before they write a row; runs as their owner, so it counts every member and project.';

create function app.can_see_member_content(author_id uuid, viewer_id uuid)
returns boolean
language plpgsql
stable
security definer
set search_path = ''
as $$
begin
  return author_id = viewer_id or exists (
    select 1 from app.users u
    where u.id = author_id
      and (u.privacy = 'public'
           or (u.privacy = 'protected' and exists (
                 select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = author_id))));
end;
$$;
comment on function app.can_see_member_content(uuid, uuid) is
  'The member privacy rule in one place: public everyone; protected the author and followers; private the author only (the todos policy reads the same rule from todos.author_privacy). Security definer so policies can ask without recursing; PL/pgSQL so its plan is kept for the session.';
grant execute on function app.can_see_member_content(uuid, uuid) to authenticated, service_role;

create function app.refresh_streak(member_id uuid)
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  with days as (
    select distinct t.local_date as day from app.todos t where t.user_id = member_id
    union
    select f.day from app.streak_freezes f where f.user_id = member_id
  ), islands as (
    select day, day - (row_number() over (order by day))::integer as island from days
  ), runs as (
    select max(day) as last_day, count(*)::integer as length from islands group by island
  )
  update app.users u set
    streak_last_day = (select r.last_day from runs r order by r.last_day desc limit 1),
    streak_length = coalesce((select r.length from runs r order by r.last_day desc limit 1), 0),
    best_streak = coalesce((select max(r.length) from runs r), 0)
  where u.id = member_id;
end;
$$;
comment on function app.refresh_streak(uuid) is
  'Recomputes a member''s runs of consecutive covered days (a todo or a used freeze) from their history: an index-only walk over one member''s days. Called only when a day becomes covered or uncovered, so reading a streak never touches history. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';

create function app.todo_total_shard(user_id uuid)
returns smallint
language sql
immutable
parallel safe
as $$
  select (abs(hashtext(user_id::text)) % 16)::smallint
$$;
comment on function app.todo_total_shard(uuid) is
  'Inlined (no SET clause, no table access). The app.todo_totals shard of an author''s todos: a member''s posts always update the same row, different members mostly different ones.';

create function app.resolve_todo(ref text)
returns app.todos
language plpgsql
stable
set search_path = ''
as $$
declare
  found app.todos;
begin
  if ref ~ '^todo_[0-9a-f]{32}$' then
    select t.* into found from app.todos t where t.id = app.from_public_id('todo', ref);
  elsif ref ~ '^[0-9]{1,18}$' then
    select t.* into found from app.todos t where t.number = ref::bigint;
  end if;
  return found;
end;
$$;
comment on function app.resolve_todo(text) is
  'The todo named by a {todo_id} path parameter (todo_ id or number), as far as the viewer may see it; null otherwise.';
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
comment on function app.own_todo(text) is
  'The viewer''s own todo named by ref: 404 when it does not exist for them, 403 when it is someone else''s.';
grant execute on function app.own_todo(text) to authenticated;

create function app.todo_search_query(input text)
returns tsquery
language plpgsql
immutable
set search_path = ''
as $$
declare
  -- The limits: what real searches never reach (a UUID is a phrase of 7, state-of-the-art 5,
  -- e-mail 3, a URL 3, a date 3; a host name or a path is one term).
  max_characters constant integer := 256;
  max_terms constant integer := 16;
  max_phrase constant integer := 8;
  word text;
  term text;
  negated boolean;
  part tsquery;
  phrase integer;
  terms integer := 0;
  seen text[] := '{}';
  result tsquery;
begin
  if length(input) > max_characters then
    perform app.http_error(400, format('query may have at most %s characters; got %s.', max_characters, length(input)));
  end if;
  foreach word in array regexp_split_to_array(btrim(coalesce(input, '')), '\s+') loop
    negated := word like '-_%';
    -- Whatever tsquery syntax a user types is text: strip the operators, keep the words.
    term := btrim(translate(case when negated then substr(word, 2) else word end, '&|!():*<>''\', '            '));
    continue when term = '';
    part := to_tsquery('simple', quote_literal(term) || ':*');
    continue when numnode(part) = 0;
    -- The parser makes one or more lexemes of a word (e-mail: e-mail, e, mail), each a prefix
    -- match, joined into a phrase by binary operators: n lexemes are 2n - 1 nodes. Each term
    -- costs an index scan and a check of every candidate row, so the limits count them.
    phrase := (numnode(part) + 1) / 2;
    if phrase > max_phrase then
      perform app.http_error(400, format(
        'query: the word %s makes a phrase of %s search terms; a word may make at most %s (hyphens, underscores, commas and most other punctuation split a word into terms).',
        to_json(case when length(word) > 40 then left(word, 40) || '…' else word end), phrase, max_phrase));
    end if;
    terms := terms + phrase;
    if negated then part := !! part; end if;
    -- A word repeated adds nothing to what matches, only to the work (t t t … is t).
    continue when part::text = any (seen);
    seen := seen || part::text;
    result := case when result is null then part else result && part end;
  end loop;
  if terms > max_terms then
    perform app.http_error(400, format(
      'query may have at most %s search terms; %s makes %s (every word is one, and the parts of a word split by hyphens, underscores, commas or most other punctuation count too).',
      max_terms, to_json(case when length(input) > 60 then left(input, 60) || '…' else input end), terms));
  end if;
  return result;
end;
$$;
comment on function app.todo_search_query(text) is
  'Turns what a user types into a tsquery: every word a prefix match (feat finds feature), -word negates (feature -bug), everything ANDed. Null when nothing searchable is left. 400 past its limits, counted on what the parser made (issue 25: one word of 256 characters, e_e_e…, was a phrase of 128 terms and 1 to 4 s per request): at most 16 terms in all, at most 8 in the phrase of one word, at most 256 characters. A repeated word is searched once (it counts toward the 16 as sent).';
grant execute on function app.todo_search_query(text) to authenticated;

create function app.filter_moment(moment jsonb, zone text)
returns timestamp with time zone
language sql
stable
as $$
  select case
    when moment is null or jsonb_typeof(moment) <> 'object' then null
    when (moment ->> 'local')::boolean then (moment ->> 'at')::timestamp at time zone zone
    else (moment ->> 'at')::timestamptz
  end
$$;
comment on function app.filter_moment(jsonb, text) is
  'Inlined (no SET clause, no table access). A since/until bound as the HTTP layer parsed it: {at, local}. Local moments (dates and date-times without a zone) are read in the viewer''s time zone.';
grant execute on function app.filter_moment(jsonb, text) to authenticated;

create function app.visible_todos_total()
returns bigint
language plpgsql
stable
security definer
set search_path = ''
as $$
declare
  viewer_id uuid := auth.uid();
begin
  -- Visible (the todos policy): public authors, the viewer, protected authors they follow.
  return (select coalesce(sum(tt.todos), 0) from app.todo_totals tt where tt.privacy = 'public')
    + (select coalesce(sum(u.todos_count), 0) from app.users u
       where u.id in (select viewer_id union select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
         and u.privacy <> 'public'
         and (u.id = viewer_id or u.privacy = 'protected'))
    - (select coalesce(sum(u.todos_count), 0) from app.mutes m join app.users u on u.id = m.muted_user_id
       where m.user_id = viewer_id
         and (u.privacy = 'public' or u.id = viewer_id
              or (u.privacy = 'protected' and exists (
                    select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = u.id))));
end;
$$;
comment on function app.visible_todos_total() is
  'How many todos the current viewer may see, muted members left out: the total_count of GET /v1/todos without filters. Public totals from app.todo_totals, plus the viewer''s own when not public and protected followees'', minus the visible members they muted. Security definer to read app.todo_totals; acts only for auth.uid().';
grant execute on function app.visible_todos_total() to authenticated;

create function app.seal_todo_hours()
returns integer
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  -- Hours that ended at least ten minutes ago: a todo is posted with created_at = now() by a
  -- statement of at most a few seconds (the statement timeout), so none can still arrive in them.
  target timestamptz := date_trunc('hour', now() - interval '10 minutes', 'UTC');
  sealed timestamptz;
  hours integer;
begin
  -- Exclusive against the triggers that adjust sealed hours (they take it shared), so a count
  -- made here and an adjustment made there never miss each other.
  perform pg_advisory_xact_lock(hashtextextended('app.todo_hours', 0));
  select s.until into sealed from app.todo_hours_sealed s;
  if sealed is null then
    sealed := coalesce(date_trunc('hour', (select min(t.created_at) from app.todos t), 'UTC'), target);
  end if;
  if sealed >= target then
    return 0;
  end if;
  insert into app.todo_hours (privacy, hour, todos)
  select t.author_privacy, date_trunc('hour', t.created_at, 'UTC'), count(*)
    from app.todos t
   where t.created_at >= sealed and t.created_at < target
   group by 1, 2
   order by 1, 2
  on conflict (privacy, hour) do update set todos = app.todo_hours.todos + excluded.todos;
  insert into app.todo_hours_sealed as s (id, until) values (true, target)
  on conflict (id) do update set until = excluded.until;
  hours := (extract(epoch from target - sealed) / 3600)::integer;
  return hours;
end;
$$;
comment on function app.seal_todo_hours() is
  'Counts the todos of every hour that ended more than ten minutes ago and is not counted yet into app.todo_hours, and moves app.todo_hours_sealed.until to the end of the last one; returns how many hours it sealed. Run by the storage worker every minute (functions/lib/maintenance.ts) and by the seed; the first run on an existing database counts every todo once. Why: the date filters of GET /v1/todos then sum hours instead of counting todos (issue 26). Security definer: nobody else writes the hours.';
grant execute on function app.seal_todo_hours() to service_role;

create function app.public_todos_between(lo timestamptz, hi timestamptz)
returns bigint
language plpgsql
stable
security definer
set search_path = ''
as $$
declare
  sealed timestamptz := coalesce((select s.until from app.todo_hours_sealed s), '-infinity'::timestamptz);
  sealed_hi timestamptz;
  first_hour timestamptz;
  last_hour timestamptz;
  total bigint := 0;
begin
  lo := coalesce(lo, '-infinity'::timestamptz);
  hi := coalesce(hi, 'infinity'::timestamptz);
  if lo >= hi then
    return 0;
  end if;
  -- No upper end, and a lower one at or before the oldest sealed public hour (or, with none, the
  -- sealed boundary, before which there is then no public todo): every public todo, from the
  -- totals kept on write (app.todo_totals), not every hour summed (`since=1970` summed two years
  -- of hours, 1.5 ms, issue 27).
  if hi = 'infinity'::timestamptz
     and lo <= coalesce((select h.hour from app.todo_hours h where h.privacy = 'public' order by h.hour limit 1), sealed) then
    return (select coalesce(sum(tt.todos), 0) from app.todo_totals tt where tt.privacy = 'public');
  end if;
  -- The sealed part of [lo, hi): whole hours from app.todo_hours, the partial hours at its ends
  -- counted from the todos (at most an hour of todos each, by the created_at index).
  sealed_hi := least(hi, sealed);
  if lo < sealed_hi then
    first_hour := case when lo = '-infinity'::timestamptz or lo = date_trunc('hour', lo, 'UTC') then lo
                       else date_trunc('hour', lo, 'UTC') + interval '1 hour' end;
    last_hour := date_trunc('hour', sealed_hi, 'UTC');
    if first_hour < last_hour then
      total := total + coalesce((select sum(h.todos) from app.todo_hours h
                                  where h.privacy = 'public' and h.hour >= first_hour and h.hour < last_hour), 0)
             + (select count(*) from app.todos t
                 where t.author_privacy = 'public' and t.created_at >= lo and t.created_at < first_hour)
             + (select count(*) from app.todos t
                 where t.author_privacy = 'public' and t.created_at >= last_hour and t.created_at < sealed_hi);
    else
      total := total + (select count(*) from app.todos t
                         where t.author_privacy = 'public' and t.created_at >= lo and t.created_at < sealed_hi);
    end if;
  end if;
  -- What is not sealed yet (the last hour or so, unless the storage worker has not run).
  if greatest(lo, sealed) < hi then
    total := total + (select count(*) from app.todos t
                       where t.author_privacy = 'public' and t.created_at >= greatest(lo, sealed) and t.created_at < hi);
  end if;
  return total;
end;
$$;
comment on function app.public_todos_between(timestamp with time zone, timestamp with time zone) is
  'How many public todos have lo <= created_at < hi (null: open): sealed whole hours from app.todo_hours, and the todos themselves for the partial hours at the ends and for what is not sealed yet; a range that holds every public todo (no upper end, a lower one before the oldest) from app.todo_totals. Its cost is the number of hours in the range plus about two hours of todos, not the number of todos. Security definer to read app.todo_hours and app.todo_totals.';
grant execute on function app.public_todos_between(timestamp with time zone, timestamp with time zone) to authenticated;

create function app.visible_todos_between(lo timestamptz, hi timestamptz)
returns bigint
language plpgsql
stable
security definer
set search_path = ''
-- Planned once per session, as under its caller app.todo_page, whose setting it inherits: called
-- alone, each custom plan cost 1.3-1.6 ms of planning (issue 27).
set plan_cache_mode = force_generic_plan
as $$
declare
  viewer_id uuid := auth.uid();
begin
  lo := coalesce(lo, '-infinity'::timestamptz);
  hi := coalesce(hi, 'infinity'::timestamptz);
  -- Visible (the todos policy): public todos, the viewer's own, protected followees'; muted
  -- members left out. visible_todos_total's rule within a range: everything but the public part
  -- member by member, each from the member's row first (their privacy; an author's todos carry
  -- it, app.tg_users__propagate_privacy, in the same transaction), then their todos_count when
  -- the range holds their whole history (their oldest and newest todo: two index probes) or else
  -- their todos in the range by (user_id, created_at): bounded by those members' own todos. (A
  -- join of follows to todos read every followee's todos before the followees' privacy left
  -- most of them out: 4.4 ms of GET /v1/todos?since=1970 for the bench reader, issue 27.)
  return app.public_todos_between(lo, hi)
    + (select coalesce(sum(case
                 when lo <= e.first_at and hi > e.last_at then u.todos_count
                 else (select count(*) from app.todos t
                        where t.user_id = u.id and t.author_privacy = u.privacy and t.created_at >= lo and t.created_at < hi)
               end), 0)
         from app.users u
         cross join lateral (
           select (select t.created_at from app.todos t where t.user_id = u.id order by t.created_at, t.id limit 1) as first_at,
                  (select t.created_at from app.todos t where t.user_id = u.id order by t.created_at desc, t.id desc limit 1) as last_at) e
        where u.id in (select viewer_id union select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
          and u.privacy <> 'public'
          and (u.id = viewer_id or u.privacy = 'protected'))
    - (select coalesce(sum(case
                 when lo <= e.first_at and hi > e.last_at then u.todos_count
                 else (select count(*) from app.todos t
                        where t.user_id = u.id and t.author_privacy = u.privacy and t.created_at >= lo and t.created_at < hi)
               end), 0)
         from app.mutes m
         join app.users u on u.id = m.muted_user_id
         cross join lateral (
           select (select t.created_at from app.todos t where t.user_id = u.id order by t.created_at, t.id limit 1) as first_at,
                  (select t.created_at from app.todos t where t.user_id = u.id order by t.created_at desc, t.id desc limit 1) as last_at) e
        where m.user_id = viewer_id
          and (u.privacy = 'public' or u.id = viewer_id
               or (u.privacy = 'protected' and exists (
                     select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = u.id))));
end;
$$;
comment on function app.visible_todos_between(timestamp with time zone, timestamp with time zone) is
  'How many todos with lo <= created_at < hi the current viewer may see, muted members left out: the total_count of GET /v1/todos with since/until (visible_todos_total''s rule, within a range). Public ones from app.public_todos_between; the viewer''s own when not public, protected followees'' and visible muted members'' member by member: todos_count when the range holds the member''s whole history, else their todos in the range. Security definer like visible_todos_total; acts only for auth.uid(). force_generic_plan: planned once per session.';
grant execute on function app.visible_todos_between(timestamp with time zone, timestamp with time zone) to authenticated;

create function app.project_todos_seen_by(viewer_id uuid)
returns table(project_id uuid, todos bigint)
language sql
stable
as $$
  -- The rule of GET /v1/projects/{id}/todos: a project that is not public shows its todos to
  -- insiders only (api.project_todos), and each todo is visible by its author's privacy (the
  -- todos policy: public, the viewer's own, a protected author the viewer follows).
  select p.id,
         case when p.privacy = 'public' or app.is_project_insider(p.id, p.privacy, viewer_id) then
           coalesce((select sum(c.todos) from app.project_todo_counts c join app.users u on u.id = c.user_id
                      where c.project_id = p.id
                        and (u.privacy = 'public' or u.id = viewer_id
                             or (u.privacy = 'protected' and exists (
                                   select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = u.id)))), 0)::bigint
         else 0::bigint end
  from app.projects p
  where app.can_see_project(p.id, p.privacy, viewer_id)
$$;
comment on function app.project_todos_seen_by(uuid) is
  'Inlined view (no SET clause, not security definer, a single SELECT): how many todos of each project viewer_id may see (issue 28: the Project''s todos_count), for every project they may see (app.can_see_project): 0 for a project that is not public unless the viewer is an insider (app.is_project_insider), else the sum of app.project_todo_counts over the project''s authors the viewer may see, with the author''s privacy as it is now. Costs one row per author of a project (its makers), whatever the number of its todos. Meant to be filtered by project in the calling statement, into which the planner substitutes it; reads the counters only inside a security definer function (app.visible_project_todos, app.projects_seen_by''s callers), so no grant.';

create function app.visible_project_todos(ids uuid[])
returns table(project_id uuid, todos bigint)
language plpgsql
stable
security definer
set search_path = ''
-- An array parameter: the generic plan looks costlier than a custom one, so plpgsql would plan
-- the statement again on every call (0.25 ms of each project list and project page, issue 27).
set plan_cache_mode = force_generic_plan
as $$
declare
  -- Read once: auth.uid() in the call would be substituted into every row's expressions.
  viewer_id uuid := auth.uid();
begin
  return query select c.project_id, c.todos from app.project_todos_seen_by(viewer_id) c where c.project_id = any (ids);
end;
$$;
comment on function app.visible_project_todos(uuid[]) is
  'How many todos of each of these projects the current viewer may see (issue 28: the Project''s todos_count; the total_count of GET /v1/projects/{id}/todos unfiltered), by app.project_todos_seen_by. One row per project the viewer may see (app.can_see_project): a private project''s existence is not told to others. Security definer to read the counters; acts only for auth.uid(), so no member learns what another may see. force_generic_plan: planned once per session, not on every call (0.39 -> 0.21 ms for one project, issue 27).';
grant execute on function app.visible_project_todos(uuid[]) to authenticated;

create function app.recount_project_todos()
returns bigint
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  -- No todo is written meanwhile (share mode lets others read): the counts are those of the
  -- todos as they are when it returns, and the triggers keep them from there.
  lock table app.todos in share mode;
  delete from app.project_todo_counts;
  insert into app.project_todo_counts (project_id, user_id, todos)
  select t.project_id, t.user_id, count(*)
    from app.todos t
   where t.project_id is not null
   group by t.project_id, t.user_id
   order by t.project_id, t.user_id;
  return (select coalesce(sum(c.todos), 0) from app.project_todo_counts c);
end;
$$;
comment on function app.recount_project_todos() is
  'Counts app.project_todo_counts again from the todos (an index-only walk of the todos that belong to a project), with todo writes held off meanwhile; returns how many todos belong to a project. For the migration that introduced the counters and for the benchmark''s seed and cut, which write todos with the triggers off. Not granted: run by the database owner.';

-- ============================================================================
-- Row-level security and grants
-- ============================================================================
-- app.todo_hours, app.todo_hours_sealed
alter table app.todo_hours enable row level security;
alter table app.todo_hours_sealed enable row level security;
-- No policy and no grant: members never touch these tables; security definer functions do.

-- app.todos
alter table app.todos enable row level security;
create policy "Members delete their own todos with a writing credential" on app.todos
  for delete to authenticated
  using (user_id = (select auth.uid()) and (select app.can_write()));
create policy "Members edit their own todos with a writing credential" on app.todos
  for update to authenticated
  using (user_id = (select auth.uid()))
  with check (user_id = (select auth.uid()) and (select app.can_write()));
create policy "Members post todos in their own name with a writing credential" on app.todos
  for insert to authenticated
  with check (user_id = (select auth.uid()) and (select app.can_write()));
create policy "Todos are visible to whoever may see their creator's content" on app.todos
  for select to authenticated
  using (
    author_privacy = 'public'
    or user_id = (select auth.uid())
    or (author_privacy = 'protected'
        and user_id in (select f.followee_id from app.user_follows f where f.follower_id = (select auth.uid()))));
grant select, delete on app.todos to authenticated;
grant insert (user_id, body) on app.todos to authenticated;
grant update (body) on app.todos to authenticated;

-- app.todo_project_mentions
alter table app.todo_project_mentions enable row level security;
create policy "Project mentions are visible with their todo" on app.todo_project_mentions
  for select to authenticated using (exists (select 1 from app.todos t where t.id = todo_id));
grant select on app.todo_project_mentions to authenticated;

-- app.todo_user_mentions
alter table app.todo_user_mentions enable row level security;
create policy "User mentions are visible with their todo" on app.todo_user_mentions
  for select to authenticated using (exists (select 1 from app.todos t where t.id = todo_id));
grant select on app.todo_user_mentions to authenticated;

-- app.streak_freezes
alter table app.streak_freezes enable row level security;
create policy "Members see their own streak freezes" on app.streak_freezes
  for select to authenticated using (user_id = (select auth.uid()));
grant select on app.streak_freezes to authenticated;

-- app.todo_totals
alter table app.todo_totals enable row level security;
-- No policy and no grant: members never touch this table; security definer functions do.

-- app.project_todo_counts
alter table app.project_todo_counts enable row level security;
-- No policy and no grant: members never touch this table; security definer functions do.

-- ============================================================================
-- Triggers
-- ============================================================================
create function app.tg_todos__prepare()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  author_zone text;
begin
  if tg_op = 'INSERT' then
    -- The author's row is locked (as the counter update after the insert would lock it anyway),
    -- so a privacy change cannot slip between reading the privacy here and this todo's commit:
    -- either it committed first and is read here, or it waits and then updates this todo too.
    select u.time_zone, u.privacy into author_zone, new.author_privacy
    from app.users u where u.id = new.user_id
    for no key update;
    new.local_date := (new.created_at at time zone author_zone)::date;
  end if;
  select p.id into new.project_id
  from app.extract_mentions(new.body, '#') tag
  join app.projects p on lower(p.hashtag) = tag.name
  join app.project_makers m on m.project_id = p.id and m.user_id = new.user_id and m.accepted
  order by tag.position
  limit 1;
  return new;
end;
$$;
comment on function app.tg_todos__prepare() is
  'Before a todo is stored: on insert its local_date (the day in the author''s zone, for streaks) and author_privacy (for the select policy), read with the author''s row locked; on insert and body edits its owning project (the first #hashtag of a project the author makes).';
create trigger _100_prepare before insert or update of body on app.todos
  for each row execute function app.tg_todos__prepare();

create function app.tg_todos__store_mentions()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  perform app.check_mention_limits(new.body);
  if tg_op = 'UPDATE' then
    delete from app.todo_project_mentions where todo_id = new.id;
    delete from app.todo_user_mentions where todo_id = new.id;
  end if;
  insert into app.todo_project_mentions (todo_id, project_id, position)
  select new.id, p.id, tag.position
  from app.extract_mentions(new.body, '#') tag join app.projects p on lower(p.hashtag) = tag.name;
  insert into app.todo_user_mentions (todo_id, user_id, position)
  select new.id, u.id, name.position
  from app.extract_mentions(new.body, '@') name join app.users u on lower(u.username) = name.name;
  return null;
end;
$$;
comment on function app.tg_todos__store_mentions() is
  'Parses #hashtags and @usernames of a new or edited body into mention rows, in SQL so every writer (API, CLI, seed) gets the same mentions. Unknown names stay plain text. At most 20 of each (app.check_mention_limits, 422).';
create trigger _200_store_mentions after insert or update of body on app.todos
  for each row execute function app.tg_todos__store_mentions();

create function app.tg_todos__count_and_streak()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  changed app.todos := case when tg_op = 'INSERT' then new else old end;
  step integer := case when tg_op = 'INSERT' then 1 else -1 end;
  day_was_or_is_covered_otherwise boolean;
begin
  update app.users u
     set todos_count = u.todos_count + step
   where u.id = changed.user_id;
  update app.todo_totals tt
     set todos = tt.todos + step
   where tt.privacy = changed.author_privacy and tt.shard = app.todo_total_shard(changed.user_id);
  select exists (
    select 1 from app.todos t where t.user_id = changed.user_id and t.local_date = changed.local_date and t.id <> changed.id
  ) into day_was_or_is_covered_otherwise;
  if not day_was_or_is_covered_otherwise then
    perform app.refresh_streak(changed.user_id);
  end if;
  return null;
end;
$$;
comment on function app.tg_todos__count_and_streak() is
  'After a todo is inserted or deleted: the author''s todos_count and the totals of their privacy (app.todo_totals) stay exact, and the streak is refreshed when the todo is the first (insert) or last (delete) of its day. Security definer: members cannot write counters.';
create trigger _300_count_and_streak after insert or delete on app.todos
  for each row execute function app.tg_todos__count_and_streak();

create function app.tg_todos__count_sealed_hours()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  sealed timestamptz;
begin
  -- Todos of the current hour are in no sealed hour: deleting only those (the usual case) costs nothing more.
  if not exists (select 1 from removed r where r.created_at < date_trunc('hour', now(), 'UTC')) then
    return null;
  end if;
  perform pg_advisory_xact_lock_shared(hashtextextended('app.todo_hours', 0));
  select s.until into sealed from app.todo_hours_sealed s;
  -- In (privacy, hour) order, as every writer of the hours: concurrent adjustments queue
  -- instead of deadlocking.
  insert into app.todo_hours as h (privacy, hour, todos)
  select r.author_privacy, date_trunc('hour', r.created_at, 'UTC'), -count(*)
    from removed r where r.created_at < sealed group by 1, 2 order by 1, 2
  on conflict (privacy, hour) do update set todos = h.todos + excluded.todos;
  return null;
end;
$$;
comment on function app.tg_todos__count_sealed_hours() is
  'Keeps app.todo_hours exact when todos of hours already sealed are deleted: one statement, a todo or every todo of a deleted account, grouped by privacy and hour. Takes the sealing lock shared (app.seal_todo_hours takes it exclusively), so a delete committing while its hour is sealed is counted either by the sealing or here. Security definer: members cannot write the hours.';
create trigger _310_count_sealed_hours after delete on app.todos
  referencing old table as removed
  for each statement execute function app.tg_todos__count_sealed_hours();

create function app.tg_todos__count_backdated()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  perform pg_advisory_xact_lock_shared(hashtextextended('app.todo_hours', 0));
  if new.created_at < (select s.until from app.todo_hours_sealed s) then
    insert into app.todo_hours as h (privacy, hour, todos)
    values (new.author_privacy, date_trunc('hour', new.created_at, 'UTC'), 1)
    on conflict (privacy, hour) do update set todos = h.todos + 1;
  end if;
  return null;
end;
$$;
comment on function app.tg_todos__count_backdated() is
  'Counts a todo posted with a created_at before the current hour (the operator CLI''s create-todo backdates) into its sealed hour. A todo posted now never runs it (the trigger''s WHEN), so POST /v1/todos pays nothing for the hours. Security definer: members cannot write the hours.';
create trigger _310_count_backdated after insert on app.todos
  for each row when (new.created_at < date_trunc('hour', now(), 'UTC'))
  execute function app.tg_todos__count_backdated();

create function app.tg_todos__count_project_todos()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  -- A move touches two rows of the author's: the new project's first when its id is the lower,
  -- so every writer takes them in project order and two edits moving todos opposite ways queue
  -- instead of deadlocking.
  new_first boolean := tg_op = 'UPDATE' and new.project_id < old.project_id;
begin
  if new_first or (tg_op = 'INSERT' and new.project_id is not null) then
    insert into app.project_todo_counts as c (project_id, user_id, todos)
    values (new.project_id, new.user_id, 1)
    on conflict (project_id, user_id) do update set todos = c.todos + 1;
  end if;
  if tg_op in ('UPDATE', 'DELETE') and old.project_id is not null then
    update app.project_todo_counts c set todos = c.todos - 1
     where c.project_id = old.project_id and c.user_id = old.user_id;
  end if;
  if tg_op = 'UPDATE' and not coalesce(new_first, false) and new.project_id is not null then
    insert into app.project_todo_counts as c (project_id, user_id, todos)
    values (new.project_id, new.user_id, 1)
    on conflict (project_id, user_id) do update set todos = c.todos + 1;
  end if;
  return null;
end;
$$;
comment on function app.tg_todos__count_project_todos() is
  'Keeps app.project_todo_counts exact: a todo that belongs to a project counts for its author there from its insert to its delete, and moves when an edit (or the deletion of its project: the key sets project_id null) changes its project. A post, a deletion or a move touches the author''s rows only (one, or two in project order), so it competes only with the same author''s writes. Security definer: members cannot write counters.';
create trigger _320_count_project_todos after insert on app.todos
  for each row when (new.project_id is not null)
  execute function app.tg_todos__count_project_todos();
create trigger _320_uncount_project_todos after delete on app.todos
  for each row when (old.project_id is not null)
  execute function app.tg_todos__count_project_todos();
-- `of body` too: the project is set by the before trigger from the body, and an UPDATE OF list
-- sees only the columns the statement names.
create trigger _320_move_project_todos after update of body, project_id on app.todos
  for each row when (old.project_id is distinct from new.project_id)
  execute function app.tg_todos__count_project_todos();

create function app.tg_streak_freezes__refresh()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  perform app.refresh_streak(case when tg_op = 'DELETE' then old.user_id else new.user_id end);
  return null;
end;
$$;
comment on function app.tg_streak_freezes__refresh() is
  'A freeze covers a day, so the streak is recomputed when one is used or withdrawn.';
create trigger _100_refresh_streak after insert or delete on app.streak_freezes
  for each row execute function app.tg_streak_freezes__refresh();

create function app.tg_users__propagate_privacy()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  member_shard smallint := app.todo_total_shard(new.id);
begin
  -- Both totals rows are locked in one order (the enum's) before either changes, so two members
  -- switching opposite ways in the same shard queue instead of deadlocking.
  perform 1 from app.todo_totals tt
  where tt.shard = member_shard and tt.privacy in (old.privacy, new.privacy)
  order by tt.privacy
  for update;
  -- The totals move exactly the todos that change privacy, counted row by row (not from
  -- todos_count, which may already include a todo this statement posted and will count itself).
  -- No todo of this member can be posted meanwhile: posting locks this row first.
  update app.todo_totals tt set todos = tt.todos - c.n
  from (select t.author_privacy, count(*) as n from app.todos t
        where t.user_id = new.id and t.author_privacy <> new.privacy group by t.author_privacy) c
  where tt.privacy = c.author_privacy and tt.shard = member_shard;
  -- The sealed hours move the same todos (app.todo_hours, in (privacy, hour) order as every
  -- writer of the hours), under the sealing lock shared as the todos triggers take it.
  perform pg_advisory_xact_lock_shared(hashtextextended('app.todo_hours', 0));
  insert into app.todo_hours as h (privacy, hour, todos)
  select moved.privacy, moved.hour, sum(moved.n)
    from (select t.author_privacy as privacy, date_trunc('hour', t.created_at, 'UTC') as hour, -count(*) as n
            from app.todos t
           where t.user_id = new.id and t.author_privacy <> new.privacy
             and t.created_at < (select s.until from app.todo_hours_sealed s)
           group by 1, 2
          union all
          select new.privacy, date_trunc('hour', t.created_at, 'UTC'), count(*)
            from app.todos t
           where t.user_id = new.id and t.author_privacy <> new.privacy
             and t.created_at < (select s.until from app.todo_hours_sealed s)
           group by 2) moved
   group by 1, 2
   order by 1, 2
  on conflict (privacy, hour) do update set todos = h.todos + excluded.todos;
  with changed as (
    update app.todos t set author_privacy = new.privacy
    where t.user_id = new.id and t.author_privacy <> new.privacy
    returning 1
  )
  update app.todo_totals tt set todos = tt.todos + (select count(*) from changed)
  where tt.privacy = new.privacy and tt.shard = member_shard;
  return null;
end;
$$;
comment on function app.tg_users__propagate_privacy() is
  'After a member changes privacy: their todos carry the new value, in the same transaction, so the todos policy never sees a stale copy, and exactly those todos move to the totals of the new privacy (both totals rows locked first, in one order) and, hour by hour, to the sealed hours of the new privacy (app.todo_hours). Security definer: members may not write author_privacy or the totals themselves.';
create trigger _200_propagate_privacy after update of privacy on app.users
  for each row when (old.privacy is distinct from new.privacy)
  execute function app.tg_users__propagate_privacy();

create function app.tg_todos__author_is_fixed()
returns trigger
language plpgsql
volatile
set search_path = ''
as $$
begin
  raise exception 'A todo keeps its author: user_id cannot change (todo %).', old.id
    using errcode = 'check_violation';
end;
$$;
comment on function app.tg_todos__author_is_fixed() is
  'Refuses an update of todos.user_id: counters, streaks, author_privacy and the totals are kept per author, and no feature moves a todo between members.';
create trigger _090_author_is_fixed before update of user_id on app.todos
  for each row when (old.user_id is distinct from new.user_id)
  execute function app.tg_todos__author_is_fixed();

-- _110_set_updated_at (updated_at on every edit, not on a copy of the author's privacy nor on the
-- rendered card) is in 70_rendering.sql, after the card it reads.

-- ============================================================================
-- API functions
-- ============================================================================
create function api.todo_create(body text, attachments jsonb)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  created app.todos;
  rendered jsonb;
begin
  perform app.hit_rate_limit('todo_create');
  insert into app.todos (user_id, body) values ((select auth.uid()), body) returning * into created;
  perform app.attach_uploads(attachments, created.id, null, 'attachments');
  rendered := app.todo_json(created);
  -- The webhook outbox (80_webhooks, deferred to commit) sends this same rendering.
  perform set_config('app.created_todo', rendered::text, true);
  return rendered;
end;
$$;
comment on function api.todo_create(text, jsonb) is
  'POST /v1/todos (JSON or form): rate-limited (todo_create, 429); attachments are upload ids from verified signed_ids, attached in order (422 when foreign, not stored, or already attached). Leaves its rendering in app.created_todo for the webhook outbox trigger, which runs at commit and would otherwise render the todo a second time.';
grant execute on function api.todo_create(text, jsonb) to authenticated;

create function api.todo_get(todo_ref text, expand_reactions boolean)
returns text
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
  return app.todo_text(found_todo.id, expand_reactions);
end;
$$;
comment on function api.todo_get(text, boolean) is
  'GET /v1/todos/{todo_id}: 404 also when the viewer may not see it.';
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
  perform app.detach_uploads(patch -> 'remove_attachment_ids', target.id, null, 'remove_attachment_ids');
  perform app.attach_uploads(patch -> 'attachments', target.id, null, 'attachments');
  if patch ? 'body' then
    update app.todos t set body = patch ->> 'body' where t.id = target.id returning * into target;
  end if;
  return app.todo_json(target);
end;
$$;
comment on function api.todo_update(text, jsonb) is
  'PATCH /v1/todos/{todo_id}: own todos only (403), rate-limited (429). remove_attachment_ids first, then attachments are added (additive); mentions and the owning project follow the new body.';
grant execute on function api.todo_update(text, jsonb) to authenticated;

create function api.todo_delete(todo_ref text)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  target app.todos;
begin
  -- The author's row first, then the todo: the order every todo write and privacy change uses.
  perform 1 from app.users u where u.id = (select auth.uid()) for no key update;
  target := app.own_todo(todo_ref);
  perform app.hit_rate_limit('todo_delete');
  delete from app.todos t where t.id = target.id;
  return null;
end;
$$;
comment on function api.todo_delete(text) is
  'DELETE /v1/todos/{todo_id}: own todos only (403), rate-limited (429); comments, reactions, mentions and attachments go with it (foreign keys cascade). Locks the author''s row before the todo, like posting and privacy changes, so none of them can deadlock another.';
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
returns text
language plpgsql
stable
set search_path = ''
as $$
begin
  return app.todo_page('all', null, filters, page_limit, starting_after, expand_reactions);
end;
$$;
comment on function api.todos_list(jsonb, integer, text, boolean) is
  'GET /v1/todos: every todo the viewer may see, newest first, with the filters of every todo list. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined and was parsed and planned again on every call (20-40 us of a 1 ms page).';
grant execute on function api.todos_list(jsonb, integer, text, boolean) to authenticated;

create function api.user_todos(user_ref text, filters jsonb, page_limit integer, starting_after text, expand_reactions boolean)
returns text
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
comment on function api.user_todos(text, jsonb, integer, text, boolean) is
  'GET /v1/users/{username}/todos and /v1/users/me/todos: a member''s todos as far as the viewer may see them (empty for a protected member one does not follow).';
grant execute on function api.user_todos(text, jsonb, integer, text, boolean) to authenticated;

create function api.project_todos(project_ref text, filters jsonb, page_limit integer, starting_after text, expand_reactions boolean)
returns text
language plpgsql
stable
set search_path = ''
as $$
declare
  found app.projects;
begin
  select p.* into found from app.projects p where p.id = app.resolve_project(project_ref);
  if found.id is null then
    perform app.http_error(404, format('No project matches %L.', project_ref));
  end if;
  if found.privacy <> 'public' and not app.is_project_insider(found.id, found.privacy, (select auth.uid())) then
    -- Everyone sees a protected project, not its todos: an empty list, as a protected member's.
    return app.page_envelope_text(null, false, 0, null);
  end if;
  return app.todo_page('project', found.id, filters, page_limit, starting_after, expand_reactions);
end;
$$;
comment on function api.project_todos(text, jsonb, integer, text, boolean) is
  'GET /v1/projects/{project_id}/todos: todos that belong to the project (its makers'' todos naming it, the `projects` field). 404 for a project the viewer may not see (private, not a maker); empty for a protected project to all but its makers and approved followers (app.is_project_insider).';
grant execute on function api.project_todos(text, jsonb, integer, text, boolean) to authenticated;

create function api.search_todos(query text, page_limit integer, starting_after text, expand_reactions boolean)
returns text
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
comment on function api.search_todos(text, integer, text, boolean) is
  'GET /v1/search/todos: full text over every todo the viewer may see, newest first, capped at the 100 newest matches (total_count <= 100; pages end there).';
grant execute on function api.search_todos(text, integer, text, boolean) to authenticated;

-- ============================================================================
-- Execute only where granted above
-- ============================================================================
revoke execute on all functions in schema app, api from public;
