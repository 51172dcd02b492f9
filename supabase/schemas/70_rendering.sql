-- Rendering: the /v1 JSON of every resource, as the viewer may see it.
--
-- What every endpoint answers with. What depends on one row alone is rendered when the row is
-- written (the cards: generated columns, section "Renderings kept on write"); the *_text
-- functions join them as JSON text with what depends on the viewer, a whole page in a few
-- set-based statements; the *_json functions are the same as jsonb for callers that build
-- jsonb; *_page adds the pagination envelope.

-- Function bodies are not checked here: they call functions of later files (the renderers
-- of 70_rendering.sql) and sections. They are the bodies the migrations created and checked,
-- as test/schema.test.ts proves.
set check_function_bodies = off;

-- ============================================================================
-- JSON text (issue 27)
-- ============================================================================
-- Renderings are JSON text, not jsonb: a page is concatenated from pieces rendered once (below)
-- and sent as it is, where jsonb would be built key by key, sorted and printed again on every
-- read. URLs depend on the deployment (PUBLIC_URL and WEB_URL, set per request as app.public_url
-- and app.web_url), so a rendering holds a marker where one begins: chr(1) for the public URL,
-- chr(2) for the web URL, replaced once per answer. to_json escapes every control character
-- (chr(1) becomes the six characters \u0001), so no member's text can contain a raw marker, and
-- nothing but a URL is ever replaced. Where: the todos (a page and GET /v1/todos/{id}) leave the
-- database as text with their markers, and the HTTP layer replaces them (functions/lib/db.ts,
-- resolveUrlMarkers: on a 30-70 KB page, the two passes and a cast to json cost the database
-- 0.17 ms of a 1.1 ms page, the one part that cannot be multiplied); renderings that stay in the
-- database or leave another way (webhooks, realtime, jsonb renderers) call app.resolve_urls.

create function app.json_text(value text)
returns text
language sql
stable
parallel safe
as $$
  select coalesce(to_json(value)::text, 'null')
$$;
comment on function app.json_text(text) is
  'Inlined (no SET clause, no table access). A text value as a JSON string, escaped; JSON null for null. Stable as to_json is (so it is inlined), though escaping a string depends on nothing but the string: the immutable card functions that call it are what generated columns check.';
grant execute on function app.json_text(text) to authenticated, service_role;

create function app.json_time(moment timestamptz)
returns text
language sql
stable
parallel safe
as $$
  select case when moment is null then 'null'
              else rtrim(to_json(moment at time zone 'UTC')::text, '"') || '+00:00"' end
$$;
comment on function app.json_time(timestamp with time zone) is
  'Inlined (no SET clause, no table access). A moment as a JSON string in UTC with the offset written +00:00, the form jsonb prints under the server''s time zone (UTC on Supabase and here), trailing zeros of the microseconds dropped as there; JSON null for null. Written in UTC whatever the session''s TimeZone, so a rendering kept on write does not depend on who wrote it.';
grant execute on function app.json_time(timestamp with time zone) to authenticated, service_role;

create function app.json_url(marker text, path text)
returns text
language sql
stable
parallel safe
as $$
  select '"' || marker || substr(to_json(path)::text, 2)
$$;
comment on function app.json_url(text, text) is
  'Inlined (no SET clause, no table access). A URL as a JSON string: the marker of its base (chr(1) the public URL, chr(2) the web URL: app.resolve_urls) followed by the escaped path.';
grant execute on function app.json_url(text, text) to authenticated, service_role;

create function app.json_inner(value text)
returns text
language sql
stable
parallel safe
as $$
  select substr(to_json(value)::text, 2, length(to_json(value)::text) - 2)
$$;
comment on function app.json_inner(text) is
  'Inlined (no SET clause, no table access). A text escaped as inside a JSON string, without the quotes: what replaces a URL marker (app.resolve_urls_at), so a base URL holding a quote or a backslash cannot break the JSON.';
grant execute on function app.json_inner(text) to authenticated, service_role;

create function app.resolve_urls_at(rendered text, base_url text)
returns text
language sql
stable
parallel safe
as $$
  select replace(replace(rendered, chr(1), app.json_inner(base_url)), chr(2), app.json_inner(app.web_url()))
$$;
comment on function app.resolve_urls_at(text, text) is
  'Inlined (no SET clause, no table access). JSON text rendered with URL markers, with base_url in place of chr(1) and this request''s web URL (app.web_url) in place of chr(2): two passes of replace over the text, once per answer.';
grant execute on function app.resolve_urls_at(text, text) to authenticated, service_role;

create function app.resolve_urls(rendered text)
returns text
language sql
stable
parallel safe
as $$
  select app.resolve_urls_at(rendered, app.public_url())
$$;
comment on function app.resolve_urls(text) is
  'Inlined (no SET clause, no table access). JSON text rendered with URL markers, with this request''s public and web URLs in their place (app.resolve_urls_at).';
grant execute on function app.resolve_urls(text) to authenticated, service_role;

-- ============================================================================
-- Helpers
-- ============================================================================
create function app.image_urls_text(folder text, key text)
returns text
language sql
stable
parallel safe
as $$
  select case
    when key is null then
      '{"small":' || app.json_url(chr(1), '/assets/default-' || folder || '-small.png')
      || ',"medium":' || app.json_url(chr(1), '/assets/default-' || folder || '-medium.png')
      || ',"large":' || app.json_url(chr(1), '/assets/default-' || folder || '-large.png') || '}'
    else
      '{"small":' || app.json_url(chr(1), '/storage/' || key || '?size=small')
      || ',"medium":' || app.json_url(chr(1), '/storage/' || key || '?size=medium')
      || ',"large":' || app.json_url(chr(1), '/storage/' || key || '?size=large') || '}'
  end
$$;
comment on function app.image_urls_text(text, text) is
  'Inlined (no SET clause, no table access). The small/medium/large URLs of an avatar, logo or header as JSON text with the public URL''s marker (app.resolve_urls). Why defaults instead of null: SPEC requires avatar strings, so a member without one gets the generic image.';
grant execute on function app.image_urls_text(text, text) to authenticated, service_role;

create function app.image_urls(base_url text, folder text, key text)
returns jsonb
language sql
stable
parallel safe
as $$
  select app.resolve_urls_at(app.image_urls_text(folder, key), base_url)::jsonb
$$;
comment on function app.image_urls(text, text, text) is
  'Inlined (no SET clause, no table access). app.image_urls_text under base_url, as jsonb: one definition of the image URLs for the renderings kept on write and the rest.';
grant execute on function app.image_urls(text, text, text) to authenticated, service_role;

create function app.initials(phrase text)
returns text
language sql
immutable
parallel safe
as $$
  select coalesce(nullif(regexp_replace(upper(coalesce(
      substring(btrim(phrase), '^(\S)\S*\s+\S') || substring(btrim(phrase), '^\S+\s+(\S)'),
      left(btrim(phrase), 2))), '[^A-Z0-9]', '', 'g'), ''), '_')
$$;
comment on function app.initials(text) is
  'Inlined (no SET clause, no table access). What a default image shows: the first letters of the first two words, or the first two letters of one word, A-Z and 0-9 only (the bitmap font of functions/web/images.ts); `_` when none is left.';
grant execute on function app.initials(text) to authenticated, service_role;

create function app.generated_image_path(label text, color text)
returns text
language sql
stable
parallel safe
as $$
  select coalesce(upper(substring(color, '^#?([0-9A-Fa-f]{6})$')), '94A3B8') || '/' || app.initials(label) || '.png'
$$;
comment on function app.generated_image_path(text, text) is
  'Inlined (no SET clause, no table access). {RRGGBB}/{initials}.png of a generated avatar or logo: the label''s initials on the colour (#RRGGBB; grey when it is not one). Computed once per card and passed to app.picture_urls_text for its three sizes: its regular expressions are most of what a card costs a write.';
grant execute on function app.generated_image_path(text, text) to authenticated, service_role;

create function app.picture_urls_text(folder text, key text, generated_path text)
returns text
language sql
stable
parallel safe
as $$
  select case
    when key is not null then app.image_urls_text(folder, key)
    else '{"small":' || app.json_url(chr(1), '/assets/' || folder || '/small/' || generated_path)
      || ',"medium":' || app.json_url(chr(1), '/assets/' || folder || '/medium/' || generated_path)
      || ',"large":' || app.json_url(chr(1), '/assets/' || folder || '/large/' || generated_path) || '}'
  end
$$;
comment on function app.picture_urls_text(text, text, text) is
  'Inlined (no SET clause, no table access). The small/medium/large URLs of an avatar or logo as JSON text with the public URL''s marker: the uploaded image (app.image_urls_text) or, without one, the generated PNG at generated_path (app.generated_image_path), which the API serves at /assets/{folder}/{size}/{RRGGBB}/{initials}.png. The URL names everything the image shows, so it is cached for good and changes with the name or colour.';
grant execute on function app.picture_urls_text(text, text, text) to authenticated, service_role;

create function app.picture_urls(base_url text, folder text, key text, label text, color text)
returns jsonb
language sql
stable
parallel safe
as $$
  select app.resolve_urls_at(app.picture_urls_text(folder, key, case when key is null then app.generated_image_path(label, color) end), base_url)::jsonb
$$;
comment on function app.picture_urls(text, text, text, text, text) is
  'Inlined (no SET clause, no table access). app.picture_urls_text under base_url, as jsonb (the web pages'' images).';
grant execute on function app.picture_urls(text, text, text, text, text) to authenticated, service_role;

-- ============================================================================
-- Renderings kept on write (issue 27)
-- ============================================================================
-- What does not depend on the viewer or the clock is rendered when its row is written, as
-- stored generated columns: PostgreSQL computes them in the statement that inserts or updates
-- the row, from that row alone, so no read can ever see a rendering older than the row it
-- reads, and nothing else has to remember to refresh them. A page joins them as text
-- (app.todos_text), adding only what depends on the viewer and the clock.
--
-- What keeps each fresh, and why each lives where it does:
--   app.users.card     any update of the member's row: profile fields, avatar, header, privacy,
--                      subscription, and the counters todos_count, followers_count, best_streak,
--                      which posts and follows already update on that row (so a post re-renders
--                      its author's card once, in the update it makes anyway). Not in it: streak
--                      and streaking (the clock), following, follows_you, follow_requested,
--                      dismissed_time_zone (the viewer): app.user_text adds them.
--   app.projects.card  any update of the project's row: fields, logo, header, privacy,
--                      archived, followers_count. Not in it: owner and makers (users rendered
--                      for the viewer), todos_count (what the viewer may see), following,
--                      follow_requested: app.project_text adds them.
--   app.uploads.card   the attachment: attaching (attached_at), measuring (width, height), the
--                      detected type.
-- The slim shapes of mentions (MentionedUser, MentionedProject) are the cards' first members,
-- cut at the first member they do not have (app.user_mention_text, app.project_mention_text),
-- so a write renders one card, not two.
-- The card functions are PL/pgSQL: a generated column's SQL function is parsed and planned again
-- by every statement that writes the row (2-3 ms for these bodies, measured), while PL/pgSQL
-- keeps the planned expression for the session (tens of microseconds a row).
-- A profile edit therefore rewrites one row, whatever the member has written: every todo, mention
-- and reaction joins the member's card by id when it is read (issue 27: a member with 100k todos
-- must not rewrite 100k rows).
-- What a todo's rendering is made of, and what keeps each part fresh:
--   its id and times: app.todos.card (below), rendered by a trigger on the todo's row whenever
--     they change (an edit, a reaction or a comment moves updated_at); its body and url are
--     written out from the row, which the page reads anyway;
--   its counters (reactions_count, comments_count, kept by the reaction and comment triggers of
--     40_social.sql): written out from the todo's row, which the page reads anyway;
--   creator, reactors: app.users.card (above), with the viewer's flags and the streak added;
--   projects: app.projects.card, with owner, makers and visible todos added for the viewer;
--   mentioned users and projects: the mention rows (kept by the todos' _200_store_mentions
--     trigger when the body changes) joined to the cards, projects filtered for the viewer;
--   attachments: app.uploads.card;
--   the viewer's reactions and comments, and (expand=reactions) the newest 5 reactions the
--     viewer may see: read for the viewer, they are never the same for two viewers.
-- A comment's rendering (app.comments_text) is made of the same parts: its creator and its
-- mentioned users and projects from their cards, its attachments' cards, the viewer's reactions
-- read for the viewer; its own members (body, times, counters, parent) written out from its row,
-- which the page reads anyway. Nothing of it is stored with the comment. A direct message's
-- (app.message_texts) and a conversation's (app.conversation_texts) likewise: the creator, the
-- reactors and the other participant from their cards, the rest written out from the rows.

create function app.user_card(id uuid, username text, first_name text, last_name text, bio text, location text, website_url text, time_zone text, privacy app.privacy, subscription_active boolean, avatar_key text, header_key text, header_color text, todos_count integer, followers_count integer, best_streak integer, created_at timestamptz, updated_at timestamptz)
returns text
language plpgsql
immutable
parallel safe
set search_path = ''
as $$
declare
  avatar_path text := case when avatar_key is null then app.generated_image_path(
    coalesce(nullif(btrim(concat_ws(' ', first_name, last_name)), ''), username), coalesce(header_color, app.default_header_color(id))) end;
begin
  -- The MentionedUser members first, then "bio" (app.user_mention_text cuts there).
  return '"id":"' || app.to_public_id('user', id) || '"'
    || ',"username":' || app.json_text(username)
    || ',"first_name":' || app.json_text(first_name)
    || ',"last_name":' || app.json_text(last_name)
    || ',"url":' || app.json_url(chr(2), '/@' || username)
    || ',"avatar":' || app.picture_urls_text('avatar', avatar_key, avatar_path)
    || ',"bio":' || app.json_text(bio)
    || ',"best_streak":' || best_streak
    || ',"created_at":' || app.json_time(created_at)
    || ',"updated_at":' || app.json_time(updated_at)
    || ',"privacy":' || app.json_text(privacy::text)
    || ',"protected":' || (privacy <> 'public')
    || ',"location":' || app.json_text(location)
    || ',"website_url":' || app.json_text(website_url)
    || ',"todos_count":' || todos_count
    || ',"time_zone":' || app.json_text(time_zone)
    || ',"header":' || case when header_key is not null then app.image_urls_text('header', header_key) else 'null' end
    || ',"header_color":' || app.json_text(coalesce(header_color, app.default_header_color(id)))
    || ',"followers_count":' || followers_count
    || ',"pro":' || subscription_active;
end;
$$;
comment on function app.user_card(uuid, text, text, text, text, text, text, text, app.privacy, boolean, text, text, text, integer, integer, integer, timestamp with time zone, timestamp with time zone) is
  'The members of a User''s JSON object that depend on the member''s row alone, as JSON text without braces, URLs with markers: the generation expression of app.users.card. The MentionedUser members come first and "bio" right after them (app.user_mention_text). protected: privacy is not public. Without an uploaded avatar, the avatar is the member''s initials on their header colour. Immutable (given the row, always the same text), as a generated column requires.';
grant execute on function app.user_card(uuid, text, text, text, text, text, text, text, app.privacy, boolean, text, text, text, integer, integer, integer, timestamp with time zone, timestamp with time zone) to authenticated, service_role;

alter table app.users add column card text generated always as (app.user_card(id, username, first_name, last_name, bio, location, website_url, time_zone, privacy, subscription_active, avatar_key, header_key, header_color, todos_count, followers_count, best_streak, created_at, updated_at)) stored;
comment on column app.users.card is
  'Rendered on write (issue 27): the User fields that depend on this row alone (app.user_card), recomputed by every update of the row. Read with app.user_text, which adds the viewer''s and the clock''s, and app.user_mention_text (mentions, notification actors).';

create function app.user_mention_text(card text)
returns text
language sql
immutable
parallel safe
as $$
  select '{' || left(card, strpos(card, ',"bio":') - 1) || '}'
$$;
comment on function app.user_mention_text(text) is
  'Inlined (no SET clause, no table access). The slim MentionedUser shape (id, username, first_name, last_name, url, avatar) as JSON text with URL markers: the card (app.users.card) up to its "bio" member. The first ,"bio": in the card is that member: inside a JSON string a quote is always escaped, so no value can hold the sequence.';
grant execute on function app.user_mention_text(text) to authenticated, service_role;

create function app.project_card(id uuid, slug text, name text, pitch text, description text, hashtag text, website_url text, github_url text, privacy app.privacy, archived boolean, logo_key text, header_key text, header_color text, followers_count integer, created_at timestamptz, updated_at timestamptz)
returns text
language plpgsql
immutable
parallel safe
set search_path = ''
as $$
declare
  logo_path text := case when logo_key is null then app.generated_image_path(name, coalesce(header_color, app.default_header_color(id))) end;
begin
  -- The MentionedProject members first, then "pitch" (app.project_mention_text cuts there).
  return '"id":"' || app.to_public_id('proj', id) || '"'
    || ',"slug":' || app.json_text(slug)
    || ',"name":' || app.json_text(name)
    || ',"hashtag":' || app.json_text(hashtag)
    || ',"url":' || app.json_url(chr(2), '/projects/' || coalesce(slug, app.to_public_id('proj', id)))
    || ',"logo":' || app.picture_urls_text('logo', logo_key, logo_path)
    || ',"pitch":' || app.json_text(pitch)
    || ',"description":' || app.json_text(description)
    || ',"created_at":' || app.json_time(created_at)
    || ',"updated_at":' || app.json_time(updated_at)
    || ',"website_url":' || app.json_text(website_url)
    || ',"github_url":' || app.json_text(github_url)
    || ',"privacy":' || app.json_text(privacy::text)
    || ',"protected":' || (privacy = 'protected')
    || ',"archived":' || archived
    || ',"header":' || case when header_key is not null then app.image_urls_text('header', header_key) else 'null' end
    || ',"header_color":' || app.json_text(coalesce(header_color, app.default_header_color(id)))
    || ',"followers_count":' || followers_count;
end;
$$;
comment on function app.project_card(uuid, text, text, text, text, text, text, text, app.privacy, boolean, text, text, text, integer, timestamp with time zone, timestamp with time zone) is
  'The members of a Project''s JSON object that depend on the project''s row alone, as JSON text without braces, URLs with markers: the generation expression of app.projects.card. The MentionedProject members come first and "pitch" right after them (app.project_mention_text). protected: privacy is protected (issue 28: clients read it as a boolean). Without an uploaded logo, the logo is the project''s initials on its header colour.';
grant execute on function app.project_card(uuid, text, text, text, text, text, text, text, app.privacy, boolean, text, text, text, integer, timestamp with time zone, timestamp with time zone) to authenticated, service_role;

alter table app.projects add column card text generated always as (app.project_card(id, slug, name, pitch, description, hashtag, website_url, github_url, privacy, archived, logo_key, header_key, header_color, followers_count, created_at, updated_at)) stored;
comment on column app.projects.card is
  'Rendered on write (issue 27): the Project fields that depend on this row alone (app.project_card), recomputed by every update of the row. Read with app.project_text, which adds owner, makers, todos_count and the viewer''s follow, and app.project_mention_text (#hashtags in todos).';

create function app.project_mention_text(card text)
returns text
language sql
immutable
parallel safe
as $$
  select '{' || left(card, strpos(card, ',"pitch":') - 1) || '}'
$$;
comment on function app.project_mention_text(text) is
  'Inlined (no SET clause, no table access). The slim MentionedProject shape (id, slug, name, hashtag, url, logo) as JSON text with URL markers: the card (app.projects.card) up to its "pitch" member, the first ,"pitch": in it (no JSON string value can hold an unescaped quote). No makers or counters, so a todo with many #tags stays cheap.';
grant execute on function app.project_mention_text(text) to authenticated, service_role;

create function app.attachment_card(id uuid, attached_at timestamptz, updated_at timestamptz, key text, detected_type text, content_type text, filename text, width integer, height integer)
returns text
language plpgsql
immutable
parallel safe
set search_path = ''
as $$
begin
  return '{"id":"' || app.to_public_id('att', id) || '"'
    || ',"created_at":' || app.json_time(attached_at)
    || ',"updated_at":' || app.json_time(updated_at)
    || ',"url":' || app.json_url(chr(1), '/files/' || key)
    || ',"mime_type":' || app.json_text(coalesce(detected_type, content_type))
    || ',"filename":' || app.json_text(filename)
    || ',"width":' || coalesce(width::text, 'null')
    || ',"height":' || coalesce(height::text, 'null')
    || ',"aspect_ratio":' || coalesce(round(width::numeric / height, 4)::text, 'null')
    || '}';
end;
$$;
comment on function app.attachment_card(uuid, timestamp with time zone, timestamp with time zone, text, text, text, text, integer, integer) is
  'An Attachment as JSON text with the public URL''s marker: the generation expression of app.uploads.card. width, height and aspect_ratio (width / height) are read from the stored image; null when it is not an image storage could measure.';
grant execute on function app.attachment_card(uuid, timestamp with time zone, timestamp with time zone, text, text, text, text, integer, integer) to authenticated, service_role;

alter table app.uploads add column card text generated always as (app.attachment_card(id, attached_at, updated_at, key, detected_type, content_type, filename, width, height)) stored;
-- Uploads' columns added after the card (issue 30; 60_uploads.sql describes the table), here so
-- the columns keep the order the migrations give them.
alter table app.uploads add column stored_at timestamptz;
alter table app.uploads add column sniffed_type text;
comment on column app.uploads.stored_at is 'When Storage recorded the file in storage.objects, with the declared size, type and MD5 (app.tg_storage_objects__bind_upload, in Storage''s own transaction); null: not stored. Set once: a signed URL stores one file.';
comment on column app.uploads.sniffed_type is 'What the stored file''s first bytes are (functions/lib/media.ts storedType): the declared type when the file starts as one, else application/octet-stream; for a file declared application/octet-stream, the type found in its bytes or name, else application/octet-stream. Written once by the first request that attaches it or by the storage worker (app.record_upload_inspection); null: not read yet. A named type is attached only when this is it.';
create index uploads_uninspected_idx on app.uploads (stored_at) where ((sniffed_type is null) and (stored_at is not null));
comment on column app.uploads.card is
  'Rendered on write (issue 27): the Attachment object (app.attachment_card), recomputed by every update of the row (attaching, measuring, the detected type).';

-- A todo's own members, kept on write in app.todos.card. Not a generated column as the cards above:
-- adding a stored generated column rewrites the whole table under an exclusive lock (10M rows
-- at scale), while a plain column is added at once and filled by the trigger below on every
-- insert and every update that changes what it shows. Rows written before it render from their
-- columns (app.todos_text: coalesce) until they are next written or an operator runs the backfill
-- (app.render_todo_cards), so no read waits for a backfill or sees a stale card.
-- The body is not in it: it would be stored twice, and a long body (10,000 characters) written
-- again, out of line, by every reaction and comment (they move updated_at); escaping it as a read
-- costs about a microsecond.
create function app.todo_card(id uuid, created_at timestamptz, updated_at timestamptz)
returns text
language sql
stable
parallel safe
as $$
  select '"id":"' || app.to_public_id('todo', id) || '"'
    || ',"created_at":' || app.json_time(created_at)
    || ',"updated_at":' || app.json_time(updated_at)
$$;
comment on function app.todo_card(uuid, timestamp with time zone, timestamp with time zone) is
  'Inlined (no SET clause, no table access; stable as app.json_time is). The first members of a Todo''s JSON object, those that depend on the todo''s row alone and cost most to write out (id, created_at, updated_at), as JSON text without braces: what app.todos.card keeps, and what app.todos_text renders for a todo not carded yet. A change to it needs the cards rendered again: a migration that resets app.todo_card_backfill (the walk renders every card that differs), and until the walk has passed, reads would show the old form. The trigger''s PL/pgSQL keeps it planned for the session, and a page substitutes it into its own statement for the rows not carded yet.';
grant execute on function app.todo_card(uuid, timestamp with time zone, timestamp with time zone) to authenticated, service_role;

alter table app.todos add column card text;
comment on column app.todos.card is
  'Rendered on write (issue 27): app.todo_card of this row, set by the _120_render_card triggers on insert and on every update of id, created_at or updated_at (updated_at moves with every edit, reaction and comment count: app.tg__set_updated_at). Null for a row written before the column existed until the row is next written (a reaction, a comment or an edit cards it) or an operator runs the backfill (app.render_todo_cards); app.todos_text renders such a row from its columns. Members cannot write it (no column grant), and a write of it is rendered again.';

create function app.tg_todos__render_card()
returns trigger
language plpgsql
volatile
set search_path = ''
as $$
begin
  new.card := app.todo_card(new.id, new.created_at, new.updated_at);
  return new;
end;
$$;
comment on function app.tg_todos__render_card() is
  'Before a todo is stored: its card (app.todos.card) from the row as it will be stored. After _110_set_updated_at (triggers fire in name order), so the card shows the updated_at the row gets.';
-- What invalidates a todo's card, and what keeps it fresh: its own columns only. An edit, a
-- reaction or a comment (their counters update the row, which moves updated_at) re-render it in
-- the same statement; a copy of the author's privacy (app.tg_users__propagate_privacy) changes
-- none of them and renders nothing (but a missing card). A statement writing the card itself
-- (the backfill) is rendered again, so nothing but app.todo_card ever reaches the column.
-- _110_set_updated_at moved here from 30_todos.sql: its condition reads the card.
-- A copy changing is not an edit: updated_at keeps its value when only the copy moves, or only
-- the card (the backfill); a statement that writes the card and the body is an edit.
create trigger _110_set_updated_at before update on app.todos
  for each row when (old.author_privacy is not distinct from new.author_privacy
                     and (old.card is not distinct from new.card or old.body is distinct from new.body))
  execute function app.tg__set_updated_at();
create trigger _120_render_card before insert on app.todos
  for each row execute function app.tg_todos__render_card();
create trigger _120_render_card_on_update before update on app.todos
  for each row
  when (new.card is null or new.card is distinct from old.card
        or new.id is distinct from old.id or new.created_at is distinct from old.created_at
        or new.updated_at is distinct from old.updated_at)
  execute function app.tg_todos__render_card();

create table app.todo_card_backfill (
  singleton   boolean primary key default true check (singleton),
  next_block  bigint not null default 0,
  skipped     boolean not null default false,
  done        boolean not null default false
);
comment on table app.todo_card_backfill is
  'Where app.render_todo_cards is in app.todos: the next heap block of its walk, in physical order; skipped: this pass left a row a concurrent transaction held (the walk then starts again from the first block when it reaches the end); done once a pass reached the table''s last block without skipping any (every row written or moved since is carded on write). An update setting next_block = 0, skipped = false, done = false walks the table again (after a change of app.todo_card). No policy and no grant: members never touch it; the backfill (security definer) does.';
alter table app.todo_card_backfill enable row level security;
insert into app.todo_card_backfill (singleton) values (true);

create function app.render_todo_cards(blocks integer, out carded integer, out done boolean)
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  state app.todo_card_backfill;
  table_blocks bigint;
  range_start tid;
  range_end tid;
  stale tid[];
  differing integer;
  any_skipped boolean;
begin
  if blocks is null or blocks < 1 then
    raise exception 'app.render_todo_cards: blocks must be a positive number of heap blocks, not %', blocks;
  end if;
  select * into state from app.todo_card_backfill for update;
  if not found or state.done then
    carded := 0;
    done := true;
    return;
  end if;
  table_blocks := pg_relation_size('app.todos') / current_setting('block_size')::bigint;
  range_start := format('(%s,0)', state.next_block)::tid;
  range_end := format('(%s,0)', state.next_block + blocks)::tid;
  -- The rows of the next blocks whose card is missing or not app.todo_card's, each locked unless
  -- a transaction holds it (skip locked: the backfill never waits for a member's write nor takes
  -- part in a deadlock with one). No key update, as the update takes: a reaction or an upload
  -- naming the todo (a key-share lock) does not wait for the walk either.
  stale := array(
    select t.ctid from app.todos t
    where t.ctid >= range_start and t.ctid < range_end
      and t.card is distinct from app.todo_card(t.id, t.created_at, t.updated_at)
    for no key update skip locked);
  -- The card is rendered again by the trigger, and updated_at stays (_110_set_updated_at skips an
  -- update of the card alone).
  update app.todos t set card = app.todo_card(t.id, t.created_at, t.updated_at) where t.ctid = any (stale);
  get diagnostics carded = row_count;
  -- A held row may stay as it is (a privacy copy, an upload's key share, a rolled-back edit do not
  -- render it): when this range had more rows to card than were locked, the pass goes round again.
  select count(*) into differing from app.todos t
  where t.ctid >= range_start and t.ctid < range_end
    and t.card is distinct from app.todo_card(t.id, t.created_at, t.updated_at);
  any_skipped := state.skipped or differing > 0;
  if state.next_block + blocks < table_blocks then
    done := false;
    update app.todo_card_backfill set next_block = state.next_block + blocks, skipped = any_skipped;
  elsif any_skipped then
    done := false;
    update app.todo_card_backfill set next_block = 0, skipped = false;
  else
    done := true;
    update app.todo_card_backfill set next_block = state.next_block + blocks, done = true;
  end if;
end;
$$;
comment on function app.render_todo_cards(integer) is
  'The background half of app.todos.card: renders the cards missing (todos written before the column) or not app.todo_card''s in the next `blocks` heap blocks of app.todos, walking the table in physical order from where the last call stopped (a TID range per call, so a call costs the same at 10M rows and dirties each heap page it rewrites once, not once per row as an id order would); returns how many it carded and whether the walk is over (then a call costs one row read). Rows a concurrent transaction holds are skipped, not waited for, and the walk goes round again until a pass leaves none. An operator calls it in short statements until done (docs/deploy.md), not the storage worker: rewriting every old todo costs about 3.3 KB of WAL a todo (mostly its new entries in the seven indexes of app.todos) and grows the table until vacuum, which the rare reads of old todos do not pay back; they render from their columns meanwhile. The walk''s position is locked for the call, so two sessions never walk the same blocks. Security definer, executable by nobody but the owner.';

-- ============================================================================
-- Users
-- ============================================================================
create function app.user_text(u app.users, local_today date, viewer_id uuid, following boolean, follows_you boolean, follow_requested boolean)
returns text
language sql
stable
parallel safe
as $$
  select '{' || u.card
    || ',"streak":' || case when u.streak_last_day >= local_today - 1 then u.streak_length else 0 end
    || ',"streaking":' || coalesce(u.streak_last_day >= local_today, false)
    || ',"following":' || coalesce(following, false)
    || ',"follows_you":' || coalesce(follows_you, false)
    || ',"follow_requested":' || coalesce(follow_requested, false)
    || case when u.id = viewer_id then ',"dismissed_time_zone":' || app.json_text(u.dismissed_time_zone) else '' end
    || '}'
$$;
comment on function app.user_text(app.users, date, uuid, boolean, boolean, boolean) is
  'Inlined (no SET clause, no table access). The User shape as JSON text with URL markers: the card kept on write (app.users.card) and what depends on the viewer and the clock: local_today (today in the member''s zone), the viewer and the three follow flags (following and follows_you: approved follows; follow_requested: the viewer''s request to follow them is pending). streak: the run ending today or yesterday in the member''s zone (0 otherwise); streaking: today is covered. dismissed_time_zone only for the viewer themself.';
grant execute on function app.user_text(app.users, date, uuid, boolean, boolean, boolean) to authenticated, service_role;

create function app.user_json_body(u app.users, local_today date, viewer_id uuid, base_url text, following boolean, follows_you boolean, follow_requested boolean)
returns jsonb
language sql
stable
parallel safe
as $$
  select app.resolve_urls_at(app.user_text(u, local_today, viewer_id, following, follows_you, follow_requested), base_url)::jsonb
$$;
comment on function app.user_json_body(app.users, date, uuid, text, boolean, boolean, boolean) is
  'Inlined (no SET clause, no table access). app.user_text under base_url, as jsonb, for the renderers that still build jsonb (one user at a time).';
grant execute on function app.user_json_body(app.users, date, uuid, text, boolean, boolean, boolean) to authenticated, service_role;

create function app.user_json(u app.users)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select app.user_json_body(u, (now() at time zone u.time_zone)::date, v.viewer_id, app.public_url(),
    exists (select 1 from app.user_follows f where f.follower_id = v.viewer_id and f.followee_id = u.id),
    exists (select 1 from app.user_follows f where f.follower_id = u.id and f.followee_id = v.viewer_id),
    exists (select 1 from app.user_follow_requests r where r.requester_id = v.viewer_id and r.followee_id = u.id))
  from (select auth.uid() as viewer_id) v);
end;
$$;
comment on function app.user_json(app.users) is
  'A user as the API renders it for the current viewer (app.user_json_body), for callers holding one row, e.g. the row an update just returned. Sets of users: app.users_json. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.user_json(app.users) to authenticated, service_role;

create function app.user_json_as(u app.users, viewer_id uuid)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select app.user_json_body(u, (now() at time zone u.time_zone)::date, viewer_id, app.public_url(),
    exists (select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = u.id),
    exists (select 1 from app.user_follows f where f.follower_id = u.id and f.followee_id = viewer_id),
    exists (select 1 from app.user_follow_requests r where r.requester_id = viewer_id and r.followee_id = u.id)));
end;
$$;
comment on function app.user_json_as(app.users, uuid) is
  'A user as viewer_id sees them (app.user_json_body), whoever runs the statement: for payloads rendered in one member''s transaction and delivered to another (realtime broadcasts), which must not be rendered for the writer. dismissed_time_zone only when viewer_id is the user. follow_requested reads app.user_follow_requests under the runner''s policy (requests are visible to the requester and the member asked): right for the two participants of a conversation, the only users these payloads name. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.user_json_as(app.users, uuid) to authenticated, service_role;

create function app.mentioned_user_json_body(u app.users, base_url text)
returns jsonb
language sql
stable
parallel safe
as $$
  select app.resolve_urls_at(app.user_mention_text(u.card), base_url)::jsonb
$$;
comment on function app.mentioned_user_json_body(app.users, text) is
  'Inlined (no SET clause, no table access). The slim MentionedUser shape (mentions, notification actors): the card kept on write cut to its first members (app.user_mention_text) under base_url.';
grant execute on function app.mentioned_user_json_body(app.users, text) to authenticated, service_role;

create function app.users_seen_by(viewer_id uuid)
returns table(id uuid, username text, body text)
language sql
stable
as $$
  select u.id, u.username, app.user_text(u, (now() at time zone u.time_zone)::date, viewer_id,
                                         fo.follower_id is not null, fy.follower_id is not null, fr.requester_id is not null)
  from app.users u
  left join app.user_follows fo on fo.follower_id = viewer_id and fo.followee_id = u.id
  left join app.user_follows fy on fy.follower_id = u.id and fy.followee_id = viewer_id
  left join app.user_follow_requests fr on fr.requester_id = viewer_id and fr.followee_id = u.id
$$;
comment on function app.users_seen_by(uuid) is
  'Inlined view (no SET clause, not security definer, a single SELECT): every user as viewer_id sees them (app.user_text: the card kept on write, streaks in the member''s zone today, the three follow flags from three joins), with the username to order by. Meant to be filtered by id in the calling statement, into which the planner substitutes it: a renderer joins the users it shows in its own statement instead of calling a function that returns a set (an executor start and a tuplestore per call: a third of a page of todos, issue 27). Reads under the runner''s policies (profiles and follows are visible to every member; follow requests to the requester), or as the security definer function that uses it.';
grant execute on function app.users_seen_by(uuid) to authenticated, service_role;

create function app.users_text(ids uuid[])
returns table(id uuid, username text, body text)
language plpgsql
stable
set search_path = ''
set plan_cache_mode = 'force_generic_plan'
as $$
declare
  -- Read once: auth.uid() in the call would be substituted into every row's expressions.
  viewer_id uuid := auth.uid();
begin
  return query select pe.id, pe.username, pe.body from app.users_seen_by(viewer_id) pe where pe.id = any (ids);
end;
$$;
comment on function app.users_text(uuid[]) is
  'The users with these ids as the API renders them for the current viewer, as JSON text with URL markers (app.users_seen_by), one row each with the username to order by (unordered; unknown ids are skipped): one statement for the whole set. For callers that have the ids in hand; a renderer with its own statement joins app.users_seen_by there.';
grant execute on function app.users_text(uuid[]) to authenticated, service_role;

create function app.users_json(ids uuid[])
returns table(id uuid, body jsonb)
language plpgsql
stable
set search_path = ''
as $$
begin
  return query select u.id, app.resolve_urls(u.body)::jsonb from app.users_text(ids) u;
end;
$$;
comment on function app.users_json(uuid[]) is
  'app.users_text as jsonb, URLs in place, for the renderers that still build jsonb (the user search and follower lists). PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.users_json(uuid[]) to authenticated, service_role;

-- ============================================================================
-- Projects
-- ============================================================================
create function app.project_text(p app.projects, owner text, makers text, following boolean, follow_requested boolean, todos_count bigint)
returns text
language sql
stable
parallel safe
as $$
  select '{' || p.card
    || ',"owner":' || coalesce(owner, 'null')
    || ',"makers":[' || coalesce(makers, '') || ']'
    || ',"todos_count":' || coalesce(todos_count, 0)
    || ',"following":' || coalesce(following, false)
    || ',"follow_requested":' || coalesce(follow_requested, false)
    || '}'
$$;
comment on function app.project_text(app.projects, text, text, boolean, boolean, bigint) is
  'Inlined (no SET clause, no table access). The Project shape as JSON text with URL markers: the card kept on write (app.projects.card), its rendered owner and makers (users as the viewer sees them; makers comma-separated), how many of its todos the viewer may see (app.visible_project_todos), whether the viewer follows it (approved) and whether their request to follow it is pending.';
grant execute on function app.project_text(app.projects, text, text, boolean, boolean, bigint) to authenticated, service_role;

create function app.projects_seen_by(viewer_id uuid)
returns table(id uuid, body text)
language sql
stable
as $$
  -- Visible: exactly the projects policy (app.can_see_project). Makers list the owner first,
  -- then in the order they joined.
  select p.id, app.project_text(p,
    (select o.body from app.users_seen_by(viewer_id) o where o.id = p.owner_id),
    (select string_agg(mu.body, ',' order by m.user_id = p.owner_id desc, m.created_at, lower(mu.username))
       from app.project_makers m join app.users_seen_by(viewer_id) mu on mu.id = m.user_id
       where m.project_id = p.id and m.accepted),
    exists (select 1 from app.project_follows f where f.project_id = p.id and f.user_id = viewer_id),
    exists (select 1 from app.project_follow_requests r where r.user_id = viewer_id and r.project_id = p.id),
    (select c.todos from app.project_todos_seen_by(viewer_id) c where c.project_id = p.id))
  from app.projects p
  where app.can_see_project(p.id, p.privacy, viewer_id)
$$;
comment on function app.projects_seen_by(uuid) is
  'Inlined view (no SET clause, not security definer, a single SELECT): every project viewer_id may see, as the API renders it (app.project_text: its card, owner and makers as the viewer sees them, the viewer''s follow and pending request, the todos the viewer may see from counters, app.project_todos_seen_by). Meant to be filtered by id in the calling statement, into which the planner substitutes it (issue 27: no executor start and tuplestore per call). Reads makers, follows and requests without their policies only inside a security definer function (app.projects_text, app.todos_text), so no grant: members reach it through those, which pass auth.uid().';

create function app.projects_text(ids uuid[])
returns table(id uuid, body text)
language plpgsql
stable
security definer
set search_path = ''
set plan_cache_mode = 'force_generic_plan'
as $$
declare
  -- Read once: auth.uid() in the call would be substituted into every row's expressions.
  viewer_id uuid := auth.uid();
begin
  return query select op.id, op.body from app.projects_seen_by(viewer_id) op where op.id = any (ids);
end;
$$;
comment on function app.projects_text(uuid[]) is
  'The projects with these ids that the current viewer may see, as the API renders them (app.projects_seen_by: JSON text with URL markers), one row each (unordered; others are skipped). Security definer so makers, follows and requests are read once for the set instead of through a policy per row; visibility is app.can_see_project, the function the projects policy calls, and it acts only for auth.uid().';
grant execute on function app.projects_text(uuid[]) to authenticated, service_role;

create function app.projects_json(ids uuid[])
returns table(id uuid, body jsonb)
language plpgsql
stable
set search_path = ''
as $$
begin
  return query select p.id, app.resolve_urls(p.body)::jsonb from app.projects_text(ids) p;
end;
$$;
comment on function app.projects_json(uuid[]) is
  'app.projects_text as jsonb, URLs in place, for the renderers that still build jsonb. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.projects_json(uuid[]) to authenticated, service_role;

create function app.mentioned_project_json_body(p app.projects, base_url text)
returns jsonb
language sql
stable
parallel safe
as $$
  select app.resolve_urls_at(app.project_mention_text(p.card), base_url)::jsonb
$$;
comment on function app.mentioned_project_json_body(app.projects, text) is
  'Inlined (no SET clause, no table access). The slim MentionedProject shape: the card kept on write cut to its first members (app.project_mention_text) under base_url.';
grant execute on function app.mentioned_project_json_body(app.projects, text) to authenticated, service_role;

create function app.page_envelope(data jsonb, has_more boolean, total_count bigint, last_id text)
returns jsonb
language sql
stable
as $$
  select jsonb_build_object(
    'data', coalesce(data, '[]'::jsonb),
    'has_more', has_more,
    'total_count', total_count,
    'after', case when has_more then last_id end)
$$;
comment on function app.page_envelope(jsonb, boolean, bigint, text) is
  'Inlined (no SET clause, no table access; stable, as jsonb_build_object is, or it would not be inlined). The envelope every paginated list returns: data, has_more, total_count, after (the id of the last item, to pass as starting_after; null on the last page). Why the last id as cursor: clients already hold it, and SPEC''s conversations list treats the cursor as an item that must exist.';
grant execute on function app.page_envelope(jsonb, boolean, bigint, text) to authenticated, service_role;

create function app.page_envelope_text(data text, has_more boolean, total_count bigint, last_id text, more_members text default '')
returns text
language sql
stable
as $$
  select '{"data":' || coalesce(data, '[]')
    || ',"has_more":' || has_more
    || ',"total_count":' || coalesce(total_count::text, 'null')
    || ',"after":' || case when has_more then app.json_text(last_id) else 'null' end
    || coalesce(more_members, '')
    || '}'
$$;
comment on function app.page_envelope_text(text, boolean, bigint, text, text) is
  'Inlined (no SET clause, no table access). app.page_envelope around data given as JSON text (an array, URLs in place or as markers), as JSON text: the todo lists send their page as the text it was concatenated into (issue 27), never parsed into jsonb and printed again, nor checked by a cast to json (a parse of the whole page: 0.08 ms of a 30 KB page). more_members: members a list adds after the envelope''s own, as JSON text that starts with a comma (GET /v1/conversations'' unread_count).';
grant execute on function app.page_envelope_text(text, boolean, bigint, text, text) to authenticated, service_role;

create function app.project_page(maker_id uuid, page_limit integer, starting_after text)
returns text
language plpgsql
stable
set search_path = ''
as $$
declare
  anchor app.projects;
  page uuid[];
  has_more boolean;
  total bigint;
begin
  if starting_after is not null then
    select p.* into anchor from app.projects p where p.id = app.from_public_id('proj', starting_after);
    if anchor.id is null then
      perform app.http_error(404, format('starting_after: no project matches %L.', starting_after));
    end if;
  end if;
  -- Under the projects policy: the projects the viewer may see. A maker's projects are found
  -- from their accepted makers' rows (project_makers_user_id_idx), never by walking every
  -- project to ask each whether they make it (0.9 ms for none at 1,000 projects).
  if maker_id is null then
    page := array(
      select p.id from app.projects p
      where anchor.id is null or (p.created_at, p.id) < (anchor.created_at, anchor.id)
      order by p.created_at desc, p.id desc
      limit page_limit + 1);
    total := (select count(*) from app.projects p);
  else
    page := array(
      select p.id from app.project_makers m join app.projects p on p.id = m.project_id
      where m.user_id = maker_id and m.accepted
        and (anchor.id is null or (p.created_at, p.id) < (anchor.created_at, anchor.id))
      order by p.created_at desc, p.id desc
      limit page_limit + 1);
    total := (select count(*) from app.project_makers m join app.projects p on p.id = m.project_id
              where m.user_id = maker_id and m.accepted);
  end if;
  has_more := cardinality(page) > page_limit;
  page := page[1:page_limit];
  return app.page_envelope_text(
    (select '[' || string_agg(pt.body, ',' order by o.n) || ']'
     from unnest(page) with ordinality o(id, n) join app.projects_text(page) pt on pt.id = o.id),
    has_more,
    total,
    app.to_public_id('proj', page[cardinality(page)]));
end;
$$;
comment on function app.project_page(uuid, integer, text) is
  'One page of projects visible to the viewer, newest first, optionally only those maker_id makes, as JSON text with URL markers (app.projects_text renders the page in one statement; the HTTP layer puts the URLs in place). Keyset on (created_at, id); the cursor is the last project''s id. Why text: as jsonb, each project went through app.project_json, a SQL function with a SET clause planned again on every call, with an executor of its own: 8.6 ms of database time for a page of 25 on the bench''s data set.';
grant execute on function app.project_page(uuid, integer, text) to authenticated;

create function app.reaction_text(r app.reactions, reactor text)
returns text
language sql
stable
parallel safe
as $$
  select '{"id":"' || app.to_public_id('reac', r.id) || '"'
    || ',"created_at":' || app.json_time(r.created_at)
    || ',"reactable_type":' || case when r.todo_id is not null then '"Todo"' else '"Comment"' end
    || ',"reactable_id":"' || case when r.todo_id is not null then app.to_public_id('todo', r.todo_id) else app.to_public_id('comm', r.comment_id) end || '"'
    || ',"reactor":' || coalesce(reactor, 'null')
    || '}'
$$;
comment on function app.reaction_text(app.reactions, text) is
  'Inlined (no SET clause, no table access). The Reaction shape as JSON text, given its rendered reactor (JSON text).';
grant execute on function app.reaction_text(app.reactions, text) to authenticated, service_role;

create function app.reaction_json(r app.reactions)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select app.resolve_urls(app.reaction_text(r, (select u.body from app.users_text(array[r.user_id]) u)))::jsonb);
end;
$$;
comment on function app.reaction_json(app.reactions) is
  'A reaction as the API renders it, with its reactor as the current viewer sees them (app.reaction_text). PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.reaction_json(app.reactions) to authenticated;

create function app.todos_text(ids uuid[], expand_reactions boolean)
returns text
language plpgsql
stable
security definer
set search_path = ''
set plan_cache_mode = force_generic_plan
as $$
declare
  viewer_id uuid := auth.uid();
begin
  return (
    with page as materialized (
      -- The columns the page shows, not the row: a todo's words (search) would be copied too.
      -- Visible: the todos policy's rule, on the author's privacy kept on the todo.
      -- The card kept on write, or for a todo written before cards and not reached by the
      -- backfill yet, the same members rendered from its columns.
      select t.id, t.user_id, t.project_id, t.body, t.number, t.reactions_count, t.comments_count, o.n,
             coalesce(t.card, app.todo_card(t.id, t.created_at, t.updated_at)) as card
      from unnest(ids) with ordinality o(id, n)
      join app.todos t on t.id = o.id
      where t.author_privacy = 'public' or t.user_id = viewer_id
         or (t.author_privacy = 'protected' and exists (
               select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = t.user_id))
    ), shown_reactions as materialized (
      select (l.r).todo_id, (l.r).user_id, (l.r).created_at, (l.r).id, l.r as reaction
      from page pt cross join lateral (
        -- The newest 5 reactions the viewer may see: a reactor's like is their activity, shown
        -- where their comment would be (app.can_see_comment's rule, written out on the row).
        -- The owner's and the reactor's own cases need no lookup (the bench's own-todos page).
        select r from app.reactions r
        where r.todo_id = pt.id
          and (pt.user_id = viewer_id or r.user_id = viewer_id or exists (
                 select 1 from app.users ru
                 where ru.id = r.user_id
                   and (ru.privacy = 'public'
                        or (ru.privacy = 'protected' and exists (
                              select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = ru.id)))))
        order by r.created_at desc, r.id desc limit 5) l(r)
      -- reactions_count counts every reaction of the todo: none, nothing to look up.
      where expand_reactions and pt.reactions_count > 0
    ), people as materialized (
      select pe.id, pe.body from app.users_seen_by(viewer_id) pe
      where pe.id in (select pt.user_id from page pt union all select r.user_id from shown_reactions r)
    ), owning as materialized (
      select op.id, op.body from app.projects_seen_by(viewer_id) op
      where op.id in (select pt.project_id from page pt)
    ), attachments as materialized (
      select a.todo_id, string_agg(a.card, ',' order by a.attached_at, a.id) as body
      from app.uploads a where a.todo_id in (select pt.id from page pt) group by a.todo_id
    ), project_mentions as materialized (
      select m.todo_id, string_agg(app.project_mention_text(p.card), ',' order by m.position) as body
      from app.todo_project_mentions m join app.projects p on p.id = m.project_id
      where m.todo_id in (select pt.id from page pt) and app.can_see_project(p.id, p.privacy, viewer_id)
      group by m.todo_id
    ), user_mentions as materialized (
      select m.todo_id, string_agg(app.user_mention_text(u.card), ',' order by m.position) as body
      from app.todo_user_mentions m join app.users u on u.id = m.user_id
      where m.todo_id in (select pt.id from page pt) group by m.todo_id
    ), my_reactions as materialized (
      select r.todo_id, string_agg('{"id":"' || app.to_public_id('reac', r.id) || '"}', ',' order by r.created_at) as body
      from app.reactions r where r.todo_id in (select pt.id from page pt where pt.reactions_count > 0) and r.user_id = viewer_id group by r.todo_id
    ), my_comments as materialized (
      select c.todo_id, string_agg('{"id":"' || app.to_public_id('comm', c.id) || '"}', ',' order by c.created_at, c.id) as body
      from app.comments c where c.todo_id in (select pt.id from page pt where pt.comments_count > 0) and c.user_id = viewer_id group by c.todo_id
    ), expanded as materialized (
      select r.todo_id, string_agg(app.reaction_text(r.reaction, ru.body), ',' order by r.created_at desc, r.id desc) as body
      from shown_reactions r join people ru on ru.id = r.user_id group by r.todo_id
    )
    select '[' || string_agg(
        '{' || t.card
        || ',"body":' || app.json_text(t.body)
        || ',"url":"' || chr(2) || '/todos/' || t.number || '"'
        || ',"attachments":[' || coalesce(a.body, '') || ']'
        || ',"creator":' || c.body
        || ',"creator_id":"' || app.to_public_id('user', t.user_id) || '"'
        || ',"user_id":"' || app.to_public_id('user', t.user_id) || '"'
        || ',"projects":[' || coalesce(op.body, '') || ']'
        || ',"mentioned_projects":[' || coalesce(pm.body, '') || ']'
        || ',"mentioned_users":[' || coalesce(um.body, '') || ']'
        || ',"reactions_count":' || t.reactions_count
        || ',"comments_count":' || t.comments_count
        || ',"viewer":{"reactions":[' || coalesce(mr.body, '') || '],"comments":[' || coalesce(mc.body, '') || ']}'
        || case when expand_reactions then ',"reactions":[' || coalesce(ex.body, '') || ']' else '' end
        || '}',
        ',' order by t.n) || ']'
    from page t
    join people c on c.id = t.user_id
    left join owning op on op.id = t.project_id
    left join attachments a on a.todo_id = t.id
    left join project_mentions pm on pm.todo_id = t.id
    left join user_mentions um on um.todo_id = t.id
    left join my_reactions mr on mr.todo_id = t.id
    left join my_comments mc on mc.todo_id = t.id
    left join expanded ex on ex.todo_id = t.id);
end;
$$;
comment on function app.todos_text(uuid[], boolean) is
  'The todos with these ids that the current viewer may see, as the API renders them, in the order of ids: a JSON array as text with URL markers (app.resolve_urls), null when none. Concatenated from the renderings kept on write (the todo''s own card, app.todos.card, or for a todo the backfill has not reached the same text from its columns; the creators'', reactors'', projects'' and mentions'' cards, the attachments'') and the todo''s body, url and counters, with what depends on the viewer added here, in this one statement (creators, reactors and projects joined from app.users_seen_by and app.projects_seen_by, substituted into it: issue 27): the creator''s and reactors'' follow flags and streaks, the owning project''s makers and visible todos, which mentioned projects the viewer may see, the viewer''s reactions and comments and (expand_reactions) the newest 5 reactions the viewer may see; each read once for the whole set. A reaction is its reactor''s activity: shown to the todo''s owner, the reactor, and whoever may see the reactor''s content (app.can_see_comment''s rule: public everyone, protected followers, private nobody else); reactions_count still counts every reaction. Security definer so related rows are not filtered by a policy per row: visibility is the todos policy''s rule on each todo''s author_privacy (written out, not app.can_see_member_content per author: a function call each), the reactor rule on each candidate reaction (a primary-key lookup of its reactor unless the viewer owns the todo or the reaction, no function call) and app.can_see_project for projects; mentions and attachments are visible with their todo, and the viewer''s own comments on a visible todo are visible to them (app.can_see_comment). Acts only for auth.uid().';
grant execute on function app.todos_text(uuid[], boolean) to authenticated, service_role;

create function app.todos_json(ids uuid[], expand_reactions boolean)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select app.resolve_urls(app.todos_text(ids, expand_reactions))::jsonb);
end;
$$;
comment on function app.todos_json(uuid[], boolean) is
  'app.todos_text as jsonb, URLs in place: for writes that keep the rendering (the webhook outbox, the created todo) rather than send it. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.todos_json(uuid[], boolean) to authenticated, service_role;

create function app.todo_text(todo_id uuid, expand_reactions boolean default false)
returns text
language plpgsql
stable
set search_path = ''
as $$
declare
  page text := app.todos_text(array[todo_id], expand_reactions);
begin
  return substr(page, 2, length(page) - 2);
end;
$$;
comment on function app.todo_text(uuid, boolean) is
  'A todo as the API renders it for the current viewer, as JSON text with URL markers (GET /v1/todos/{id}: sent as it is, the markers replaced by the HTTP layer, functions/lib/db.ts); null when the viewer may not see it. The one element of app.todos_text''s array. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its body was planned again on every call (0.3-0.5 ms of a 1.2 ms GET /v1/todos/{id}, issue 27); PL/pgSQL keeps its plans for the session.';
grant execute on function app.todo_text(uuid, boolean) to authenticated;

create function app.todo_json(t app.todos, expand_reactions boolean default false)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select app.todos_json(array[t.id], expand_reactions) -> 0);
end;
$$;
comment on function app.todo_json(app.todos, boolean) is
  'A todo as the API renders it for the current viewer: app.todos_json of its id (null when the viewer may not see it). Called after the statement that wrote it, so it renders the stored row. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.todo_json(app.todos, boolean) to authenticated;

create function app.todo_page(scope text, scope_id uuid, filters jsonb, page_limit integer, starting_after text, expand_reactions boolean, match_cap integer default null::integer)
returns text
language plpgsql
stable
set search_path = ''
-- Its static statements are planned once per session: with custom plans (the default, which the
-- array and limit parameters keep choosing) each was planned on every call (issue 27). The
-- statements built with EXECUTE are planned on every call whatever this says.
set plan_cache_mode = force_generic_plan
as $$
declare
  -- With a full-text query, total_count counts matches up to this many (issue 26): an exact
  -- count of a common word grows with every todo that holds it, and even a capped one reads a
  -- todo's words from its row, one row per match or more (a timeline's sources' rows lie far
  -- apart: 500 matches of a common prefix read 1,500 rows, 2-4 ms, as much as the page). 100,
  -- as many as /v1/search/todos returns. Documented in the OpenAPI description of total_count
  -- and in the README.
  query_count_cap constant integer := 100;
  viewer_id uuid := (select auth.uid());
  zone text := coalesce((select u.time_zone from app.users u where u.id = (select auth.uid())), 'UTC');
  since_at timestamptz := app.filter_moment(filters -> 'since', zone);
  until_at timestamptz := app.filter_moment(filters -> 'until', zone);
  until_exclusive boolean := coalesce((filters -> 'until' ->> 'exclusive')::boolean, false);
  -- The range [lo, hi), open ends at infinity (created_at has microseconds: until inclusive is
  -- before until + 1 microsecond).
  lo timestamptz := coalesce(since_at, '-infinity');
  hi timestamptz := case when until_at is null then 'infinity'
                         when until_exclusive then until_at
                         else until_at + interval '1 microsecond' end;
  matching tsquery := app.todo_search_query(filters ->> 'query');
  anchor app.todos;
  conditions text[] := array['true'];
  page_conditions text;
  list_conditions text;
  candidates uuid[];
  page uuid[];
  -- The timeline (see below), and the static lists: the cursor of the reads, the window of time
  -- of the next one, candidates read so far.
  after_at timestamptz;
  after_id uuid;
  first_at timestamptz;
  window_start timestamptz;
  span interval;
  read_count integer := 0;
  read_now integer;
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

  -- The statements still built with EXECUTE (a full-text query over everyone's, a member's or a
  -- project's todos; search): only the conditions in use are in them, so each combination gets
  -- its own plan, made with the words in hand. Built only for them: the static statements need
  -- none of it.
  if match_cap is not null or (matching is not null and scope <> 'timeline') then
    if scope = 'user' then conditions := conditions || 't.user_id = $1'::text; end if;
    if scope = 'project' then conditions := conditions || 't.project_id = $1'::text; end if;
    -- Muted members leave the feeds (a member's own page and search still show them).
    if scope in ('all', 'timeline') then
      conditions := conditions || 'not exists (select 1 from app.mutes m where m.user_id = $7 and m.muted_user_id = t.user_id)'::text;
    end if;
    if since_at is not null then conditions := conditions || 't.created_at >= $2'::text; end if;
    if until_at is not null then
      conditions := conditions || (case when until_exclusive then 't.created_at < $3' else 't.created_at <= $3' end);
    end if;
    if matching is not null then conditions := conditions || 't.search @@ $4'::text; end if;
    page_conditions := array_to_string(conditions || case when anchor.id is not null then '(t.created_at, t.id) < ($5, $6)' end, ' and ');
    list_conditions := array_to_string(conditions, ' and ');
  end if;

  if match_cap is not null then
    -- Search: the newest `match_cap` matches are the whole result; pages are cut from them.
    execute format('select array(select t.id from app.todos t where %s order by t.created_at desc, t.id desc limit %s)',
                   list_conditions, match_cap)
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
    -- The static statements' keyset bound: the cursor, or past every todo (so one statement
    -- serves every page), with until folded into it: one upper bound is where a backward index
    -- scan starts (with two, a row and a scalar, it started at the newest and filtered).
    after_at := coalesce(anchor.created_at, 'infinity');
    after_id := coalesce(anchor.id, 'ffffffff-ffff-ffff-ffff-ffffffffffff');
    if until_at is not null and (hi, '00000000-0000-0000-0000-000000000000'::uuid) < (after_at, after_id) then
      after_at := hi;
      after_id := '00000000-0000-0000-0000-000000000000';
    end if;
    if scope = 'timeline' and since_at is null and until_at is null and matching is null then
      -- The timeline without filters, the most asked: the first read below without its bounds,
      -- in a statement of its own (through the general one, ten alternated API runs gave 0-12%
      -- fewer pages a second, median 5%, with the same backend CPU per call: kept apart until
      -- that is understood, issue 27). The same sources, conditions and limits.
      page := array(
        select s.id from (
          select t.id, t.created_at
          from (select viewer_id as member_id union select f.followee_id from app.user_follows f where f.follower_id = viewer_id) m
          cross join lateral (
            select t.id, t.created_at from app.todos t
            where t.user_id = m.member_id
              and not exists (select 1 from app.mutes mu where mu.user_id = viewer_id and mu.muted_user_id = t.user_id)
              and (t.created_at, t.id) < (after_at, after_id)
            order by t.created_at desc, t.id desc limit page_limit + 1) t
          union all
          select t.id, t.created_at
          from app.project_follows pf
          cross join lateral (
            select t.id, t.created_at from app.todos t
            where t.project_id = pf.project_id
              and not exists (select 1 from app.mutes mu where mu.user_id = viewer_id and mu.muted_user_id = t.user_id)
              and (t.created_at, t.id) < (after_at, after_id)
              and t.user_id <> viewer_id
              and t.user_id not in (select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
            order by t.created_at desc, t.id desc limit page_limit + 1) t
          where pf.user_id = viewer_id) s
        order by s.created_at desc, s.id desc limit page_limit + 1);
    elsif scope = 'timeline' then
      -- The timeline: a merge of the sources' own newest todos (the viewer's, each followed
      -- member's, each followed project's), never a walk over everyone's todos until enough are
      -- the followed ones' (issue 26). Static statements, planned once per session (each
      -- EXECUTE of the merge was planned again: 0.4 ms a plan, issue 27). since is a lower bound
      -- of the sources' index scans, until is in the keyset bound.
      --
      -- With a full-text query: a todo's words are not in the sources' indexes, so a merge of
      -- sources that each read their own todos until a page matches reads every followed todo
      -- when the words are common or negated (the planner cannot know how many match: 18,000
      -- rows for one page at 1M, issue 26). Instead, the todos read are bounded by time, newest
      -- first, until a page and one match:
      --   - first the sources' newest page and one, found by index alone (the merge without a
      --     query is this read alone), then their words read by id;
      --   - then windows of time read whole from every source (index range scans that read each
      --     todo's words from its row, no limit per source: they read only the todos in the
      --     window), each as long as the todos read so far say holds twice the matches still
      --     wanted, and at least four times the last;
      --   - once a window would reach before 1970, the rest of the sources in one last read.
      -- So a page reads about twice a page / the share of todos that match, whatever the
      -- sources hold, in a few statements; a rare word reads what the followed sources hold.
      page := '{}';
      loop
        if span is null then
          candidates := array(
            select s.id from (
              select t.id, t.created_at
              from (select viewer_id as member_id union select f.followee_id from app.user_follows f where f.follower_id = viewer_id) m
              cross join lateral (
                select t.id, t.created_at from app.todos t
                where t.user_id = m.member_id
                  and not exists (select 1 from app.mutes mu where mu.user_id = viewer_id and mu.muted_user_id = t.user_id)
                  and (t.created_at, t.id) < (after_at, after_id)
                  and t.created_at >= lo
                order by t.created_at desc, t.id desc limit page_limit + 1) t
              union all
              select t.id, t.created_at
              from app.project_follows pf
              cross join lateral (
                select t.id, t.created_at from app.todos t
                where t.project_id = pf.project_id
                  and not exists (select 1 from app.mutes mu where mu.user_id = viewer_id and mu.muted_user_id = t.user_id)
                  and (t.created_at, t.id) < (after_at, after_id)
                  and t.created_at >= lo
                  -- The viewer's and followed members' todos are in their own sources: the
                  -- sources are disjoint (union all; a count up to a cap can stop early).
                  and t.user_id <> viewer_id
                  and t.user_id not in (select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
                order by t.created_at desc, t.id desc limit page_limit + 1) t
              where pf.user_id = viewer_id) s
            order by s.created_at desc, s.id desc limit page_limit + 1);
          if matching is null then
            page := candidates;
            exit;
          end if;
          page := page || array(
            select t.id from app.todos t
            where t.id = any (candidates) and t.search @@ matching
            order by t.created_at desc, t.id desc
            limit page_limit + 1 - cardinality(page));
          read_now := cardinality(candidates);
        else
          -- A window is read whole, so its todos' words are read by the sources' own index
          -- scans (one heap row each), not looked up again by id (a primary-key descent each:
          -- three times the pages at 10M, issue 26); how many it read sizes the next window.
          -- The words are matched outside the sources: inside, a source's scan could be
          -- answered with the words' GIN index, once per source.
          select coalesce(array_agg(s.id order by s.created_at desc, s.id desc) filter (where s.search @@ matching), '{}'), count(*)::integer
            into candidates, read_now
            from (
              select t.id, t.created_at, t.search
              from (select viewer_id as member_id union select f.followee_id from app.user_follows f where f.follower_id = viewer_id) m
              cross join lateral (
                select t.id, t.created_at, t.search from app.todos t
                where t.user_id = m.member_id
                  and not exists (select 1 from app.mutes mu where mu.user_id = viewer_id and mu.muted_user_id = t.user_id)
                  and (t.created_at, t.id) < (after_at, after_id)
                  and t.created_at >= greatest(lo, window_start)
                -- No limit in effect: it keeps each source a scan of its own, which the planner
                -- could otherwise flatten into a join over a range of everyone's todos.
                order by t.created_at desc, t.id desc limit 2147483647) t
              union all
              select t.id, t.created_at, t.search
              from app.project_follows pf
              cross join lateral (
                select t.id, t.created_at, t.search from app.todos t
                where t.project_id = pf.project_id
                  and not exists (select 1 from app.mutes mu where mu.user_id = viewer_id and mu.muted_user_id = t.user_id)
                  and (t.created_at, t.id) < (after_at, after_id)
                  and t.created_at >= greatest(lo, window_start)
                  and t.user_id <> viewer_id
                  and t.user_id not in (select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
                order by t.created_at desc, t.id desc limit 2147483647) t
              where pf.user_id = viewer_id) s;
          page := page || candidates[1:page_limit + 1 - cardinality(page)];
        end if;
        -- Done: a page and one, the first read found fewer than it asked, or the last read.
        exit when cardinality(page) > page_limit
          or (span is null and read_now <= page_limit)
          or (span is not null and window_start is null);
        read_count := read_count + read_now;
        if span is null then
          -- After the first read the cursor is its last candidate; later ones start where their window did.
          select t.created_at, t.id into after_at, after_id from app.todos t where t.id = candidates[cardinality(candidates)];
          first_at := coalesce(anchor.created_at, (select t.created_at from app.todos t where t.id = candidates[1]));
          span := interval '0';
        else
          after_at := window_start;
          after_id := '00000000-0000-0000-0000-000000000000';
        end if;
        span := greatest(
          interval '1 minute',
          span * 4,
          (first_at - after_at) / read_count * 2 * (page_limit + 1 - cardinality(page)) * (read_count + 1) / (cardinality(page) + 1));
        window_start := case when span < after_at - timestamptz '1970-01-01 00:00:00+00' then after_at - span end;
        -- A window that reaches since is the last read (the rest of the range, from since): later
        -- windows would read nothing, each a statement over every source.
        if window_start <= lo then
          window_start := null;
        end if;
      end loop;
    elsif matching is null then
      -- The lists without a full-text query, the most asked: static statements, planned once
      -- per session (a dynamic one is planned on every call: 0.16 ms of a 1.6 ms page of all
      -- todos, issue 27). since is a lower bound of the index scan, until is in the keyset bound;
      -- a generic plan never asks the index for its newest entry either (issue 26's 3.5 ms of
      -- planning after a burst of deletions).
      if scope = 'all' then
        page := array(
          select t.id from app.todos t
          where not exists (select 1 from app.mutes m where m.user_id = viewer_id and m.muted_user_id = t.user_id)
            and (t.created_at, t.id) < (after_at, after_id)
            and t.created_at >= lo
          order by t.created_at desc, t.id desc limit page_limit + 1);
      elsif scope = 'user' then
        page := array(
          select t.id from app.todos t
          where t.user_id = scope_id and (t.created_at, t.id) < (after_at, after_id)
            and t.created_at >= lo
          order by t.created_at desc, t.id desc limit page_limit + 1);
      elsif scope = 'project' then
        page := array(
          select t.id from app.todos t
          where t.project_id = scope_id and (t.created_at, t.id) < (after_at, after_id)
            and t.created_at >= lo
          order by t.created_at desc, t.id desc limit page_limit + 1);
      else
        raise exception 'app.todo_page: unknown scope %', scope;
      end if;
    else
      execute format('select array(select t.id from app.todos t where %s order by t.created_at desc, t.id desc limit %s)',
                     page_conditions, page_limit + 1)
        into page using scope_id, since_at, until_at, matching, anchor.created_at, anchor.id, viewer_id;
    end if;

    if matching is not null then
      -- Full text: matches counted up to the cap (see query_count_cap), the whole list's (no cursor).
      if scope = 'timeline' then
        -- The sources' newest matches, up to the cap each, counted up to the cap: a static
        -- statement, the merge's sources with the words matched inside each (at most the cap read
        -- from each source that has that many).
        total := (select count(*) from (select 1 from (
            select t.id
            from (select viewer_id as member_id union select f.followee_id from app.user_follows f where f.follower_id = viewer_id) m
            cross join lateral (
              select t.id from app.todos t
              where t.user_id = m.member_id
                and not exists (select 1 from app.mutes mu where mu.user_id = viewer_id and mu.muted_user_id = t.user_id)
                and t.created_at >= lo and t.created_at < hi
                and t.search @@ matching
              order by t.created_at desc, t.id desc limit query_count_cap) t
            union all
            select t.id
            from app.project_follows pf
            cross join lateral (
              select t.id from app.todos t
              where t.project_id = pf.project_id
                and not exists (select 1 from app.mutes mu where mu.user_id = viewer_id and mu.muted_user_id = t.user_id)
                and t.created_at >= lo and t.created_at < hi
                and t.search @@ matching
                and t.user_id <> viewer_id
                and t.user_id not in (select f.followee_id from app.user_follows f where f.follower_id = viewer_id)
              order by t.created_at desc, t.id desc limit query_count_cap) t
            where pf.user_id = viewer_id) s limit query_count_cap) c);
      else
        -- The newest matches, in the page's order: without it the planner may count them with a
        -- scan of the table that stops at the cap, which reads every older todo first when the
        -- table lies in the order todos were written (production's: the bench's data set is
        -- shuffled, where it read 8,000 rows for `since=30 days&query=t`, 2.3 ms).
        execute format('select count(*) from (select 1 from app.todos t where %s order by t.created_at desc, t.id desc limit %s) c',
                       list_conditions, query_count_cap)
          into total using scope_id, since_at, until_at, matching, anchor.created_at, anchor.id, viewer_id;
      end if;
    elsif since_at is null and until_at is null and scope in ('user', 'project', 'all', 'timeline') then
      -- Unfiltered: the counters kept on write give the exact total without touching todos.
      -- Visibility is per author, so a member's list is all of their todos or none, and a
      -- project's is the sum over its authors the viewer may see (the Project's todos_count).
      total := case scope
        when 'user' then (select case when app.can_see_member_content(u.id, viewer_id) then u.todos_count else 0 end
                          from app.users u where u.id = scope_id)
        when 'project' then coalesce((select vt.todos from app.visible_project_todos(array[scope_id]) vt), 0)
        when 'timeline' then app.timeline_todos_between(null, null)
        else app.visible_todos_total()
      end;
    elsif scope = 'all' then
      -- A date range over everyone's todos: sealed hours summed, the rest per member
      -- (app.visible_todos_between): exact, without counting every todo in the range.
      total := app.visible_todos_between(lo, hi);
    elsif scope = 'timeline' then
      total := app.timeline_todos_between(lo, hi);
    elsif scope = 'user' then
      -- A member's or a project's todos: counted (under the todos policy, as the viewer),
      -- bounded by that member's or project's own.
      total := (select count(*) from app.todos t where t.user_id = scope_id and t.created_at >= lo and t.created_at < hi);
    else
      total := (select count(*) from app.todos t where t.project_id = scope_id and t.created_at >= lo and t.created_at < hi);
    end if;
  end if;

  has_more := cardinality(page) > page_limit;
  page := page[1:page_limit];
  return app.page_envelope_text(
    app.todos_text(page, expand_reactions),
    has_more,
    total,
    app.to_public_id('todo', page[cardinality(page)]));
end;
$$;
comment on function app.todo_page(text, uuid, jsonb, integer, text, boolean, integer) is
  'One page of todos visible to the viewer, newest first, as JSON text with URL markers concatenated from app.todos_text (issue 27: never parsed into jsonb and printed again, nor checked by a cast to json; the HTTP layer puts the request''s URLs in place of the markers, functions/lib/db.ts, so the database spends nothing on the 30-70 KB of a page once it is concatenated): scope all, user (scope_id = creator), project (scope_id = project) or timeline (own, followed members'', followed projects'': a merge of each source''s own newest todos; with a full-text query, candidates merged by index, first a page and then windows of time sized by the share that matched, whose words are read newest first); muted members are left out of all and timeline; filters {since, until, query}; keyset on (created_at, id) with the last todo''s id as cursor. total_count (issue 26): unfiltered, from counters (users.todos_count, app.visible_project_todos, app.visible_todos_total, app.timeline_todos_between); with since/until, all from sealed hours (app.visible_todos_between), timeline per source, a member''s or project''s list counted; with a full-text query, matches counted up to 100. match_cap (search) limits the whole result to the newest matches. Static statements, planned once per session, but for a full-text query over everyone''s, a member''s or a project''s todos (the page and its count: EXECUTE, planned with the words in hand). Every part costs the same whatever the number of todos and members: index walks of a page, sums over hours, counts bounded by one member''s, one project''s or the followed sources'' todos, or by the cap.';
grant execute on function app.todo_page(text, uuid, jsonb, integer, text, boolean, integer) to authenticated;

create function app.comments_text(ids uuid[])
returns text
language plpgsql
stable
set search_path = ''
set plan_cache_mode = force_generic_plan
as $$
declare
  -- Read once: auth.uid() in the statement would be evaluated for every row.
  viewer_id uuid := auth.uid();
begin
  -- Not security definer: every table is read under its policies, as the viewer, so a comment,
  -- an attachment or a mentioned project the viewer may not see is left out exactly as the
  -- policies say (the comments list passes the ids of its page; any other caller gets only what
  -- its viewer may see of the ids it names).
  return (
    with page as materialized (
      select c.id, c.todo_id, c.user_id, c.parent_id, c.body, c.created_at, c.updated_at, c.reactions_count, o.n
      from unnest(ids) with ordinality o(id, n)
      join app.comments c on c.id = o.id
    ), people as materialized (
      select pe.id, pe.body from app.users_seen_by(viewer_id) pe
      where pe.id in (select pc.user_id from page pc)
    ), numbers as materialized (
      select t.id, t.number from app.todos t where t.id in (select pc.todo_id from page pc)
    ), attachments as materialized (
      select a.comment_id, string_agg(a.card, ',' order by a.attached_at, a.id) as body
      from app.uploads a where a.comment_id in (select pc.id from page pc) group by a.comment_id
    ), project_mentions as materialized (
      select m.comment_id, string_agg(app.project_mention_text(p.card), ',' order by m.position) as body
      from app.comment_project_mentions m join app.projects p on p.id = m.project_id
      where m.comment_id in (select pc.id from page pc) group by m.comment_id
    ), user_mentions as materialized (
      select m.comment_id, string_agg(app.user_mention_text(u.card), ',' order by m.position) as body
      from app.comment_user_mentions m join app.users u on u.id = m.user_id
      where m.comment_id in (select pc.id from page pc) group by m.comment_id
    ), my_reactions as materialized (
      select r.comment_id, string_agg('{"id":"' || app.to_public_id('reac', r.id) || '"}', ',' order by r.created_at) as body
      from app.reactions r
      where r.comment_id in (select pc.id from page pc where pc.reactions_count > 0) and r.user_id = viewer_id
      group by r.comment_id
    )
    select '[' || string_agg(
        '{"id":"' || app.to_public_id('comm', c.id) || '"'
        || ',"body":' || app.json_text(c.body)
        || ',"attachments":[' || coalesce(a.body, '') || ']'
        || ',"created_at":' || app.json_time(c.created_at)
        || ',"updated_at":' || app.json_time(c.updated_at)
        || ',"url":' || case when nb.number is null then 'null'
                             else '"' || chr(2) || '/todos/' || nb.number || '#' || app.to_public_id('comm', c.id) || '"' end
        || ',"reactions_count":' || c.reactions_count
        || ',"viewer":{"reactions":[' || coalesce(mr.body, '') || ']}'
        || ',"creator":' || coalesce(pe.body, 'null')
        || ',"mentioned_projects":[' || coalesce(pm.body, '') || ']'
        || ',"mentioned_users":[' || coalesce(um.body, '') || ']'
        || ',"parent_id":' || case when c.parent_id is null then 'null' else '"' || app.to_public_id('comm', c.parent_id) || '"' end
        || '}',
        ',' order by c.n) || ']'
    from page c
    left join people pe on pe.id = c.user_id
    left join numbers nb on nb.id = c.todo_id
    left join attachments a on a.comment_id = c.id
    left join project_mentions pm on pm.comment_id = c.id
    left join user_mentions um on um.comment_id = c.id
    left join my_reactions mr on mr.comment_id = c.id);
end;
$$;
comment on function app.comments_text(uuid[]) is
  'The comments with these ids that the current viewer may see, as the API renders them, in the order of ids: a JSON array as text with URL markers (app.resolve_urls), null when none. Concatenated from the renderings kept on write (the creator''s and the mentions'' cards, the attachments'') with the viewer''s flags and reactions added, in one statement planned once per session. Why: the jsonb renderer it replaces (app.comment_json per comment, a SQL function with a SET clause, calling more of them) was parsed and planned again on every call, and started an executor per comment and per nested function: 4.4 ms of database time for a todo''s three comments, ten times the todo. Invoker''s rights: read under every table''s policies, as the viewer, so it leaves out exactly what they may not see.';
grant execute on function app.comments_text(uuid[]) to authenticated;

create function app.comment_json(c app.comments)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select app.resolve_urls(app.comments_text(array[c.id]))::jsonb -> 0);
end;
$$;
comment on function app.comment_json(app.comments) is
  'A comment as the API renders it for the current viewer, with its attachments (app.comments_text of its id, URLs in place; null when the viewer may not see it), for the writes that answer with the comment they stored. parent_id (null for a top-level comment) is our addition to SPEC''s fields: replies need it. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.comment_json(app.comments) to authenticated;

create function app.message_texts(ids uuid[])
returns table(id uuid, n bigint, body text)
language plpgsql
stable
set search_path = ''
set plan_cache_mode = force_generic_plan
as $$
declare
  -- Read once: auth.uid() in the statement would be evaluated for every row.
  viewer_id uuid := auth.uid();
begin
  -- Not security definer: every table is read under its policies, as the viewer (a participant
  -- sees their conversations' messages; any other caller gets only what its viewer may see of
  -- the ids it names).
  return query
    with page as materialized (
      select m.id, m.conversation_id, m.user_id, m.body, m.client_message_id, m.created_at, m.updated_at, o.n
      from unnest(ids) with ordinality o(id, n)
      join app.messages m on m.id = o.id
    ), reacted as materialized (
      select r.message_id, r.user_id, r.content, r.created_at
      from app.message_reactions r where r.message_id in (select pm.id from page pm)
    ), people as materialized (
      select pe.id, pe.body from app.users_seen_by(viewer_id) pe
      where pe.id in (select pm.user_id from page pm union all select r.user_id from reacted r)
    ), attachments as materialized (
      -- One file a message (the send attaches at most one).
      select distinct on (a.message_id) a.message_id,
             '{"url":' || app.json_url(chr(1), '/files/' || a.key)
             || ',"mime_type":' || app.json_text(coalesce(a.detected_type, a.content_type))
             || ',"filename":' || app.json_text(a.filename)
             || ',"byte_size":' || a.byte_size
             || ',"width":' || coalesce(a.width::text, 'null')
             || ',"height":' || coalesce(a.height::text, 'null')
             || '}' as body
      from app.uploads a where a.message_id in (select pm.id from page pm)
      order by a.message_id, a.attached_at, a.id
    ), reactions as materialized (
      select r.message_id,
             string_agg('{"content":' || app.json_text(r.content) || ',"created_at":' || app.json_time(r.created_at)
                        || ',"user":' || coalesce(ru.body, 'null') || '}', ',' order by r.created_at, r.content) as body
      from reacted r left join people ru on ru.id = r.user_id group by r.message_id
    )
    select m.id, m.n,
        '{"id":"' || app.to_public_id('message', m.id) || '"'
        || ',"conversation_id":"' || app.to_public_id('conversation', m.conversation_id) || '"'
        || ',"body":' || app.json_text(m.body)
        || ',"client_message_id":' || case when m.client_message_id is null then 'null' else '"' || m.client_message_id || '"' end
        || ',"created_at":' || app.json_time(m.created_at)
        || ',"updated_at":' || app.json_time(m.updated_at)
        || ',"creator":' || coalesce(pe.body, 'null')
        || ',"attachment":' || coalesce(a.body, 'null')
        || ',"reactions":[' || coalesce(rx.body, '') || ']'
        || '}'
    from page m
    left join people pe on pe.id = m.user_id
    left join attachments a on a.message_id = m.id
    left join reactions rx on rx.message_id = m.id;
end;
$$;
comment on function app.message_texts(uuid[]) is
  'The messages with these ids that the current viewer may see, as the API renders them, one row each with its place n in ids: JSON text with URL markers (app.resolve_urls). Users (creator, reactors) from their cards with the viewer''s flags (app.users_seen_by), the attachment and reactions read for the set, in one statement planned once per session. Why: the jsonb renderer it replaces (app.message_json per message, a SQL function with a SET clause calling app.user_json for the creator and every reactor) was parsed and planned again on every call, with an executor per message and per user: 10 ms of database time for a page of 25 messages. Invoker''s rights: read under every table''s policies, as the viewer.';
grant execute on function app.message_texts(uuid[]) to authenticated, service_role;

create function app.messages_text(ids uuid[])
returns text
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select '[' || string_agg(t.body, ',' order by t.n) || ']' from app.message_texts(ids) t);
end;
$$;
comment on function app.messages_text(uuid[]) is
  'The messages with these ids that the current viewer may see (app.message_texts), as one JSON array in the order of ids, as text with URL markers; null when none. A page of GET /v1/conversations/{id}/messages.';
grant execute on function app.messages_text(uuid[]) to authenticated, service_role;

create function app.message_json(m app.messages)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select app.resolve_urls(app.messages_text(array[m.id]))::jsonb -> 0);
end;
$$;
comment on function app.message_json(app.messages) is
  'A message as the API renders it for the current viewer (app.messages_text of its id, URLs in place; null when the viewer may not see it), for the answers that hold one message: a sent one, a conversation''s last. The realtime message.created event renders it for the recipient with app.message_json_as (same shape). PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.message_json(app.messages) to authenticated, service_role;

create function app.message_json_as(m app.messages, viewer_id uuid)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select jsonb_build_object(
    'id', app.to_public_id('message', m.id),
    'conversation_id', app.to_public_id('conversation', m.conversation_id),
    'body', m.body,
    'client_message_id', m.client_message_id,
    'created_at', m.created_at,
    'updated_at', m.updated_at,
    'creator', (select app.user_json_as(u, viewer_id) from app.users u where u.id = m.user_id),
    'attachment', (
      select jsonb_build_object(
        'url', app.public_url() || '/files/' || a.key,
        'mime_type', coalesce(a.detected_type, a.content_type),
        'filename', a.filename,
        'byte_size', a.byte_size,
        'width', a.width,
        'height', a.height)
      from app.uploads a where a.message_id = m.id limit 1),
    'reactions', coalesce((
      select jsonb_agg(jsonb_build_object(
        'content', r.content,
        'created_at', r.created_at,
        'user', (select app.user_json_as(u, viewer_id) from app.users u where u.id = r.user_id)) order by r.created_at, r.content)
      from app.message_reactions r where r.message_id = m.id), '[]'::jsonb)));
end;
$$;
comment on function app.message_json_as(app.messages, uuid) is
  'A message as viewer_id sees it: the shape of app.message_json (keep the two equal; test/render-privacy.test.ts compares a broadcast with the recipient''s GET), with every user rendered for viewer_id rather than for whoever runs the statement. Used by the message.created broadcast, rendered for the recipient. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.message_json_as(app.messages, uuid) to authenticated, service_role;

create function app.conversation_texts(ids uuid[])
returns table(id uuid, n bigint, body text)
language plpgsql
stable
set search_path = ''
set plan_cache_mode = force_generic_plan
as $$
declare
  -- Read once: auth.uid() in the statement would be evaluated for every row.
  viewer_id uuid := auth.uid();
begin
  -- Not security definer: read under the chat tables' policies, as the viewer. A conversation
  -- the viewer takes no part in has no side of theirs, and no row here.
  return query
    with page as materialized (
      select c.id, c.created_at, c.updated_at, o.n, m.unread, m.other_user_id
      from unnest(ids) with ordinality o(id, n)
      join app.conversations c on c.id = o.id
      join app.conversation_members m on m.conversation_id = c.id and m.user_id = viewer_id
    ), people as materialized (
      select pe.id, pe.body from app.users_seen_by(viewer_id) pe
      where pe.id in (select pc.other_user_id from page pc)
    ), lasts as materialized (
      select pc.id as conversation_id, l.id as message_id
      from page pc cross join lateral (
        select lm.id from app.messages lm where lm.conversation_id = pc.id
        order by lm.created_at desc, lm.id desc limit 1) l
    ), last_texts as materialized (
      select t.id, t.body from app.message_texts(array(select l.message_id from lasts l)) t
    )
    select c.id, c.n,
        '{"id":"' || app.to_public_id('conversation', c.id) || '"'
        || ',"created_at":' || app.json_time(c.created_at)
        || ',"updated_at":' || app.json_time(c.updated_at)
        || ',"unread":' || coalesce(c.unread, false)
        || ',"user":' || coalesce(pe.body, 'null')
        || ',"last_message":' || coalesce(lt.body, 'null')
        || '}'
    from page c
    left join people pe on pe.id = c.other_user_id
    left join lasts l on l.conversation_id = c.id
    left join last_texts lt on lt.id = l.message_id;
end;
$$;
comment on function app.conversation_texts(uuid[]) is
  'The conversations with these ids as the current participant sees them, one row each with its place n in ids: JSON text with URL markers (the other participant as `user`, unread from their side, the latest message by app.message_texts), in one statement planned once per session. Why: the jsonb renderer it replaces (app.conversation_json per conversation, a SQL function with a SET clause calling app.user_json and app.message_json) was planned again for every conversation, with executors per user and message: 20 ms of database time for an inbox of 18. Invoker''s rights: read under the chat tables'' policies.';
grant execute on function app.conversation_texts(uuid[]) to authenticated;

create function app.conversation_json(c app.conversations)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
begin
  return (select app.resolve_urls(t.body)::jsonb from app.conversation_texts(array[c.id]) t);
end;
$$;
comment on function app.conversation_json(app.conversations) is
  'A conversation as the current participant sees it (app.conversation_texts of its id, URLs in place; null when they take no part in it), for the answer of POST /v1/conversations. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.conversation_json(app.conversations) to authenticated;

-- ============================================================================
-- Web pages
-- ============================================================================
create function app.web_page(kind text, ref text)
returns jsonb
language plpgsql
stable
security definer
set search_path = ''
as $$
begin
  return (with web as (select app.web_url() as base, app.public_url() as api),
  member as (
    select u.* from app.users u
    where kind = 'user' and lower(u.username) = lower(ref) and u.privacy <> 'private'),
  todo as (
    -- ref::bigint stays after the tests of kind and form: the planner folds a cast of a constant
    -- (PL/pgSQL plans its first calls with the arguments' values) unless a condition before it
    -- is already false, and /@alice must not fail on 'alice'::bigint.
    select t.* from app.todos t
    where kind = 'todo' and ref ~ '^[0-9]{1,18}$' and t.number = ref::bigint and t.author_privacy = 'public'),
  project as (
    select p.* from app.projects p
    where kind = 'project' and (p.id = app.from_public_id('proj', ref) or lower(p.slug) = lower(ref)) and p.privacy <> 'private')
  select coalesce(
    (select jsonb_build_object(
       'kind', 'user', 'title', coalesce(nullif(btrim(concat_ws(' ', m.first_name, m.last_name)), ''), m.username),
       'username', m.username, 'bio', m.bio, 'url', web.base || '/@' || m.username,
       'image', app.picture_urls(web.api, 'avatar', m.avatar_key, coalesce(nullif(btrim(concat_ws(' ', m.first_name, m.last_name)), ''), m.username), coalesce(m.header_color, app.default_header_color(m.id))) ->> 'large',
       'todos_hidden', m.privacy <> 'public',
       'todos', case when m.privacy = 'public' then coalesce((
         select jsonb_agg(jsonb_build_object('body', t.body, 'created_at', t.created_at, 'url', web.base || '/todos/' || t.number) order by t.created_at desc)
         from (select * from app.todos t where t.user_id = m.id and t.author_privacy = 'public' order by t.created_at desc limit 20) t), '[]') else '[]' end)
     from member m, web),
    (select jsonb_build_object(
       'kind', 'todo', 'title', left(t.body, 80), 'body', t.body, 'created_at', t.created_at, 'url', web.base || '/todos/' || t.number,
       'author', jsonb_build_object('username', u.username, 'url', web.base || '/@' || u.username),
       'reactions_count', t.reactions_count, 'comments_count', t.comments_count,
       'attachments', coalesce((
         select jsonb_agg(jsonb_build_object('filename', a.filename, 'url', web.api || '/files/' || a.key) order by a.attached_at, a.id)
         from app.uploads a where a.todo_id = t.id), '[]'))
     from todo t join app.users u on u.id = t.user_id, web),
    (select jsonb_build_object(
       'kind', 'project', 'title', p.name, 'pitch', p.pitch, 'description', p.description,
       'url', web.base || '/projects/' || coalesce(p.slug, app.to_public_id('proj', p.id)),
       'image', app.picture_urls(web.api, 'logo', p.logo_key, p.name, coalesce(p.header_color, app.default_header_color(p.id))) ->> 'large',
       'todos_hidden', p.privacy <> 'public',
       'todos', case when p.privacy = 'public' then coalesce((
         select jsonb_agg(jsonb_build_object('body', t.body, 'created_at', t.created_at, 'url', web.base || '/todos/' || t.number) order by t.created_at desc)
         from (select t.* from app.todos t
               where t.project_id = p.id and t.author_privacy = 'public' order by t.created_at desc limit 20) t), '[]') else '[]' end)
     from project p, web)));
end;
$$;
comment on function app.web_page(text, text) is
  'What the web pages /@username, /todos/{n} and /projects/{slug} show to an anonymous visitor (they carry no credential): a public or protected member''s profile, with their 20 newest todos only when public; a todo of a public member; a public or protected project, with its 20 newest todos of public members only when public (todos.project_id: the API''s rule for a project''s todos, written by accepted makers; read down the (project_id, created_at) index, as the project is found by its lower(slug) index, so an anonymous page view never scans). Null (a 404 page) for private members and projects, other members'' todos and anything unknown. Security definer: the page has no member to run as, so the rules are the anonymous viewer''s, written out here. PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and its statement was parsed and planned again in every transaction that called it (issue 27); PL/pgSQL keeps the plan for the session.';
grant execute on function app.web_page(text, text) to service_role;

-- ============================================================================
-- Execute only where granted above
-- ============================================================================
revoke execute on all functions in schema app, api from public;
