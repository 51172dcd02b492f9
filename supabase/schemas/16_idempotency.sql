-- Idempotency keys (issue 29): a POST, PATCH or DELETE sent with an `Idempotency-Key` header runs
-- once; the same request again with the same key within 24 hours is answered from here.
--
-- The key is claimed and recorded inside the request's one statement (functions/lib/db.ts), so
-- it commits in the same transaction as the request's write: a crash keeps both or neither. A
-- request that fails rolls back its key with its write, so its retry runs again; only what
-- committed is ever replayed (docs/security.md, "Idempotency keys").

-- Function bodies are not checked here: they call functions of later files (the renderers
-- of 70_rendering.sql) and sections. They are the bodies the migrations created and checked,
-- as test/schema.test.ts proves.
set check_function_bodies = off;

-- ============================================================================
-- Tables
-- ============================================================================
create table app.idempotency_keys (
  user_id      uuid not null references app.users(id) on delete cascade,
  key_hash     bytea not null,
  request_hash bytea not null,
  response     text,
  created_at   timestamptz not null default now(),
  constraint idempotency_keys_pkey primary key (user_id, key_hash)
);
comment on table app.idempotency_keys is
  'The answers of requests sent with an Idempotency-Key, per member and credential, for 24 hours: a repeat of the same request with the same key is answered from here instead of running again (app.idempotency_claim). Written in the transaction of the request''s own write, so a crash cannot keep one without the other. Rows older than 24 hours count for nothing and the storage worker deletes them (app.forget_idempotency_keys). No policy and no grant: members never touch this table; security definer functions do.';
comment on column app.idempotency_keys.key_hash is
  'SHA-256 of the credential (the API key''s id, or the OAuth app''s client_id) and the key the client sent: keys are per member and per credential, so another member''s key or another app of the same member never meets this one; 32 bytes whatever the key''s length (up to 255).';
comment on column app.idempotency_keys.request_hash is
  'SHA-256 of the request as the API read it (method, path, endpoint function and its validated arguments; functions/lib/idempotency.ts). The same key with another request is 422.';
comment on column app.idempotency_keys.response is
  'What the endpoint''s api function returned (its JSON text; null for an answer without a body, such as a 204). The HTTP layer shapes it again exactly as the first time, so the replay has the same status and body.';
-- The storage worker deletes what is older than 24 hours, oldest first.
create index idempotency_keys_created_at_idx on app.idempotency_keys (created_at);

-- ============================================================================
-- Helpers
-- ============================================================================
create function app.idempotency_key_hash(idempotency_key text)
returns bytea
language plpgsql
stable
set search_path = ''
as $$
declare
  claims jsonb := app.claims();
  credential text := case claims ->> 'kind'
    when 'api_key' then 'api_key ' || (claims ->> 'api_key_id')
    when 'oauth' then 'oauth ' || (claims ->> 'client_id')
  end;
begin
  -- The HTTP layer checks keys first (400); this is the database's own bound.
  if idempotency_key is null or idempotency_key !~ '^[!-~]{1,255}$'
     or strpos(idempotency_key, '"') > 0 or strpos(idempotency_key, chr(92)) > 0 then
    perform app.http_error(400, 'The Idempotency-Key header must be 1 to 255 visible ASCII characters, without spaces, quotes or backslashes.');
  end if;
  if credential is null then
    raise exception 'app.idempotency_key_hash called outside a request';
  end if;
  return sha256(convert_to(credential || ' ' || idempotency_key, 'UTF8'));
end;
$$;
comment on function app.idempotency_key_hash(text) is
  'The stored form of an Idempotency-Key: SHA-256 of the request''s credential (API key id, or OAuth client_id, from the claims app.authenticate set) and the key. Why per credential: a stored answer is replayed to whoever presents its key, and what one credential was answered (a webhook secret, a signed upload URL) is not another''s to read, not even another app of the same member. Raises 400 for a key out of bounds.';
grant execute on function app.idempotency_key_hash(text) to authenticated;

create function app.idempotency_claim(idempotency_key text, request_hash text)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  member_id uuid := (select auth.uid());
  scoped bytea := app.idempotency_key_hash(idempotency_key);
  stored app.idempotency_keys;
begin
  -- The key's lock, held until this request commits or rolls back: a repeat while the first is
  -- still running is refused at once (409), never left waiting on the first one's row.
  if not pg_try_advisory_xact_lock(hashtextextended('app.idempotency_claim ' || member_id::text || ' ' || encode(scoped, 'hex'), 0)) then
    perform app.http_error(409,
      'A request with this Idempotency-Key is still running. Wait for its answer, or send it again in a second to get it.',
      jsonb_build_object('retry_after', 1));
  end if;
  -- A statement of its own (this function is volatile), so it sees a first request that committed
  -- before the lock above was granted, even one that committed after this request's statement began.
  select * into stored
    from app.idempotency_keys k
   where k.user_id = member_id and k.key_hash = scoped and k.created_at > now() - interval '24 hours';
  if stored.user_id is null then
    return null;
  end if;
  if stored.request_hash <> decode(request_hash, 'hex') then
    perform app.http_error(422,
      'This Idempotency-Key was used for a different request (another method, path or body) within the last 24 hours; use a new key for a new request.');
  end if;
  return jsonb_build_object('response', stored.response);
end;
$$;
comment on function app.idempotency_claim(text, text) is
  'First step of a request sent with an Idempotency-Key (functions/lib/db.ts): takes the key''s transaction lock (409 with retry_after 1 when a request with the key is still running), then answers null when no answer is stored for the key within 24 hours (the request runs, and app.idempotency_record stores its answer in the same transaction), {"response": …} to replay when one is, and 422 when the key was used for a different request. Security definer: members have no rights on app.idempotency_keys; it acts only for auth.uid().';
grant execute on function app.idempotency_claim(text, text) to authenticated;

create function app.idempotency_record(idempotency_key text, request_hash text, response text)
returns text
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  -- Under the key's lock (app.idempotency_claim, this transaction) and with no answer younger
  -- than 24 hours: a row already there is an expired one, replaced.
  insert into app.idempotency_keys as k (user_id, key_hash, request_hash, response, created_at)
  values ((select auth.uid()), app.idempotency_key_hash(idempotency_key), decode(request_hash, 'hex'), response, now())
  on conflict (user_id, key_hash) do update
    set request_hash = excluded.request_hash, response = excluded.response, created_at = excluded.created_at;
  -- What bounds one member's stored answers: a key stored is an event of its own (docs/rate-limits.md).
  perform app.hit_rate_limit('idempotency_key');
  return response;
end;
$$;
comment on function app.idempotency_record(text, text, text) is
  'Last step of a request sent with an Idempotency-Key that ran (functions/lib/db.ts): stores the api function''s answer under the key, in the transaction of the request''s own write, and passes the answer through. Counts against the idempotency_key rate limit (429 rolls the request back, so nothing is stored or done), which bounds one member''s stored answers to 24 hours of that rate. Security definer: members have no rights on app.idempotency_keys; it acts only for auth.uid().';
grant execute on function app.idempotency_record(text, text, text) to authenticated;

create function app.forget_idempotency_keys(max_rows integer)
returns integer
language sql
volatile
security definer
set search_path = ''
as $$
  with expired as (
    select k.user_id, k.key_hash
      from app.idempotency_keys k
     where k.created_at <= now() - interval '24 hours'
     order by k.created_at
     limit max_rows
       for update skip locked
  ), forgotten as (
    delete from app.idempotency_keys k
     using expired e
     where k.user_id = e.user_id and k.key_hash = e.key_hash
    returning 1
  )
  select count(*)::integer from forgotten
$$;
comment on function app.forget_idempotency_keys(integer) is
  'Deletes up to max_rows stored answers older than 24 hours, oldest first (by idempotency_keys_created_at_idx), and answers how many. The storage worker calls it until fewer come back (functions/lib/maintenance.ts), so the table holds about one day of keyed requests. Rows the requests themselves are replacing are skipped, not waited for.';
grant execute on function app.forget_idempotency_keys(integer) to service_role;

-- ============================================================================
-- Row-level security and grants
-- ============================================================================
-- app.idempotency_keys
alter table app.idempotency_keys enable row level security;
-- No policy and no grant: members never touch this table; security definer functions do.

-- ============================================================================
-- Execute only where granted above
-- ============================================================================
revoke execute on all functions in schema app, api from public;
