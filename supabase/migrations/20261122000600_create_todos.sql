-- Todos: the finished things people post, with the mentions parsed from their body, the
-- reactions on them, streak freezes, and the counters and streaks kept on write.

-- ============================================================================
-- Tables
-- ============================================================================
create table app.todos (
  id uuid primary key default gen_random_uuid(),
  number bigint generated always as identity,
  user_id uuid not null references app.users (id) on delete cascade,
  body text not null check (length(body) between 1 and 10000),
  local_date date not null,
  project_id uuid references app.projects (id) on delete set null,
  search tsvector not null generated always as (to_tsvector('simple', body)) stored,
  reactions_count integer not null default 0 check (reactions_count >= 0),
  comments_count integer not null default 0 check (comments_count >= 0),
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint todos_number_key unique (number)
);
comment on table app.todos is 'A finished todo. Visible to whoever may see its creator''s content (app.can_see_member_content).';
comment on column app.todos.number is 'The numeric ID clients may use instead of todo_…; also the todo''s web address.';
comment on column app.todos.local_date is 'The day the todo counts toward: its creation moment in the creator''s time zone at that moment. Stored, so a later zone change does not move history.';
comment on column app.todos.project_id is 'The `projects` field: the first #hashtag project in the body of which the creator was an accepted maker when the body was written.';
comment on column app.todos.search is 'Full-text vector (config simple: no stemming, so every word is matched by prefix as typed).';

-- Keyset pagination: newest first, globally, per creator and per project.
create index todos_created_at_id_idx on app.todos (created_at desc, id desc);
create index todos_user_id_created_at_idx on app.todos (user_id, created_at desc, id desc);
create index todos_project_id_created_at_idx on app.todos (project_id, created_at desc, id desc) where project_id is not null;
-- Streaks and deletion previews: which local days a creator covered.
create index todos_user_id_local_date_idx on app.todos (user_id, local_date);
create index todos_search_idx on app.todos using gin (search);

create table app.todo_project_mentions (
  todo_id uuid not null references app.todos (id) on delete cascade,
  project_id uuid not null references app.projects (id) on delete cascade,
  position integer not null,
  primary key (todo_id, project_id)
);
comment on table app.todo_project_mentions is 'Projects a todo names by #hashtag, in body order. Rendering joins projects under RLS, so mentions of projects the viewer cannot see drop out by themselves.';
create index todo_project_mentions_project_id_idx on app.todo_project_mentions (project_id, todo_id);

create table app.todo_user_mentions (
  todo_id uuid not null references app.todos (id) on delete cascade,
  user_id uuid not null references app.users (id) on delete cascade,
  position integer not null,
  primary key (todo_id, user_id)
);
comment on table app.todo_user_mentions is 'Members a todo names by @username, in body order. Also ranks people in mention autocomplete.';
create index todo_user_mentions_user_id_idx on app.todo_user_mentions (user_id, todo_id);

create table app.reactions (
  id uuid primary key default gen_random_uuid(),
  user_id uuid not null references app.users (id) on delete cascade,
  todo_id uuid references app.todos (id) on delete cascade,
  comment_id uuid,
  created_at timestamptz not null default now(),
  constraint reactions_one_target check (num_nonnulls(todo_id, comment_id) = 1)
);
comment on table app.reactions is 'A like on a todo or a comment. At most one per member and target (unique indexes), so reacting twice cannot make two.';
comment on column app.reactions.comment_id is 'Set for reactions on comments; its foreign key arrives with the comments table.';
create unique index reactions_todo_id_user_id_key on app.reactions (todo_id, user_id) where todo_id is not null;
create unique index reactions_comment_id_user_id_key on app.reactions (comment_id, user_id) where comment_id is not null;
-- The five newest reactions of a todo (expand=reactions).
create index reactions_todo_id_created_at_idx on app.reactions (todo_id, created_at desc, id desc) where todo_id is not null;
create index reactions_user_id_idx on app.reactions (user_id);

create table app.streak_freezes (
  user_id uuid not null references app.users (id) on delete cascade,
  day date not null,
  used_at timestamptz not null default now(),
  primary key (user_id, day)
);
comment on table app.streak_freezes is 'A used streak freeze: the day counts as covered. Freezes are used when they happen (operator CLI freeze-streak), never retroactively by a deletion.';

-- Streaks, kept on write (see app.refresh_streak).
alter table app.users
  add column streak_last_day date,
  add column streak_length integer not null default 0 check (streak_length >= 0),
  add column best_streak integer not null default 0 check (best_streak >= 0);
comment on column app.users.streak_last_day is 'Last covered local day of the most recent run of consecutive covered days.';
comment on column app.users.streak_length is 'Length of the run ending at streak_last_day. The current streak is this while streak_last_day is today or yesterday in the member''s zone, else 0.';

-- ============================================================================
-- Mentions
-- ============================================================================
create function app.extract_mentions(body text, sigil text)
returns table (name text, "position" integer)
language sql
immutable
parallel safe
set search_path = ''
as $$
  select lower(m.match[1]), min(m.ord)::integer
  from regexp_matches(body, '(?:^|[^A-Za-z0-9_])' || sigil || '([A-Za-z0-9_]+)', 'g') with ordinality as m(match, ord)
  group by lower(m.match[1])
$$;
comment on function app.extract_mentions(text, text) is
  'The distinct lower-cased names after a sigil (# or @) in body order. A sigil glued to a word (mail@example.com, a#b) is not a mention.';
grant execute on function app.extract_mentions(text, text) to authenticated, service_role;

-- ============================================================================
-- Visibility
-- ============================================================================
create function app.can_see_member_content(author_id uuid, viewer_id uuid)
returns boolean
language sql
stable
security definer
set search_path = ''
as $$
  select author_id = viewer_id or exists (
    select 1 from app.users u
    where u.id = author_id
      and (u.privacy = 'public'
           or (u.privacy = 'protected' and exists (
                 select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = author_id))))
$$;
comment on function app.can_see_member_content(uuid, uuid) is
  'The member privacy rule in one place: public everyone; protected the author and followers; private the author only. Security definer so policies can ask without recursing.';
grant execute on function app.can_see_member_content(uuid, uuid) to authenticated, service_role;

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
begin
  if tg_op = 'INSERT' then
    new.local_date := (new.created_at at time zone (select u.time_zone from app.users u where u.id = new.user_id))::date;
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
  'Fills local_date (creation moment in the creator''s zone) on insert and the owning project from the body. Security definer: the creator''s maker rows must count even for projects the writer cannot list.';
create trigger _100_prepare before insert or update of body on app.todos
  for each row execute function app.tg_todos__prepare();
create trigger _110_set_updated_at before update on app.todos
  for each row execute function app.tg__set_updated_at();

create function app.tg_todos__store_mentions()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
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
  'Parses #hashtags and @usernames of a new or edited body into mention rows, in SQL so every writer (API, CLI, seed) gets the same mentions. Unknown names stay plain text.';
create trigger _200_store_mentions after insert or update of body on app.todos
  for each row execute function app.tg_todos__store_mentions();

create function app.refresh_streak(member_id uuid)
returns void
language sql
volatile
security definer
set search_path = ''
as $$
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
  where u.id = member_id
$$;
comment on function app.refresh_streak(uuid) is
  'Recomputes a member''s runs of consecutive covered days (a todo or a used freeze) from their history: an index-only walk over one member''s days. Called only when a day becomes covered or uncovered, so reading a streak never touches history.';

create function app.tg_todos__count_and_streak()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  changed app.todos := case when tg_op = 'INSERT' then new else old end;
  day_was_or_is_covered_otherwise boolean;
begin
  update app.users u
     set todos_count = u.todos_count + case when tg_op = 'INSERT' then 1 else -1 end
   where u.id = changed.user_id;
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
  'Keeps users.todos_count exact and refreshes the streak when a todo is the first (insert) or last (delete) of its day. Security definer: members cannot write counters.';
create trigger _300_count_and_streak after insert or delete on app.todos
  for each row execute function app.tg_todos__count_and_streak();

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
comment on function app.tg_streak_freezes__refresh() is 'A freeze covers a day, so the streak is recomputed when one is used or withdrawn.';
create trigger _100_refresh_streak after insert or delete on app.streak_freezes
  for each row execute function app.tg_streak_freezes__refresh();

create function app.tg_reactions__count()
returns trigger
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  if tg_op = 'INSERT' and new.todo_id is not null then
    update app.todos t set reactions_count = t.reactions_count + 1 where t.id = new.todo_id;
  elsif tg_op = 'DELETE' and old.todo_id is not null then
    update app.todos t set reactions_count = t.reactions_count - 1 where t.id = old.todo_id;
  end if;
  return null;
end;
$$;
comment on function app.tg_reactions__count() is 'Keeps todos.reactions_count exact, so rendering a todo never counts reactions.';
create trigger _100_count after insert or delete on app.reactions
  for each row execute function app.tg_reactions__count();

-- ============================================================================
-- Row-level security
-- ============================================================================
alter table app.todos enable row level security;
alter table app.todo_project_mentions enable row level security;
alter table app.todo_user_mentions enable row level security;
alter table app.reactions enable row level security;
alter table app.streak_freezes enable row level security;

create policy "Todos are visible to whoever may see their creator's content" on app.todos
  for select to authenticated
  using (app.can_see_member_content(user_id, (select auth.uid())));
create policy "Members post todos in their own name with a writing credential" on app.todos
  for insert to authenticated
  with check (user_id = (select auth.uid()) and (select app.can_write()));
create policy "Members edit their own todos with a writing credential" on app.todos
  for update to authenticated
  using (user_id = (select auth.uid()))
  with check (user_id = (select auth.uid()) and (select app.can_write()));
create policy "Members delete their own todos with a writing credential" on app.todos
  for delete to authenticated
  using (user_id = (select auth.uid()) and (select app.can_write()));
grant select, delete on app.todos to authenticated;
grant insert (user_id, body) on app.todos to authenticated;
grant update (body) on app.todos to authenticated;

create policy "Project mentions are visible with their todo" on app.todo_project_mentions
  for select to authenticated using (exists (select 1 from app.todos t where t.id = todo_id));
create policy "User mentions are visible with their todo" on app.todo_user_mentions
  for select to authenticated using (exists (select 1 from app.todos t where t.id = todo_id));
grant select on app.todo_project_mentions, app.todo_user_mentions to authenticated;

create policy "Reactions on todos are visible with their todo" on app.reactions
  for select to authenticated using (todo_id is null or exists (select 1 from app.todos t where t.id = todo_id));
grant select on app.reactions to authenticated;

create policy "Members see their own streak freezes" on app.streak_freezes
  for select to authenticated using (user_id = (select auth.uid()));
grant select on app.streak_freezes to authenticated;

-- ============================================================================
-- Execute only where granted above (see the first migration)
-- ============================================================================
revoke execute on all functions in schema app, api from public;
