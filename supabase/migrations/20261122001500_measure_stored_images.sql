-- Image dimensions for files the API did not receive itself. Locally the storage server
-- measures an image on PUT; on Supabase, Storage receives the PUT, so the storage worker
-- (functions/lib/maintenance.ts) reads the start of each new image and records its size.

alter table app.uploads add column measured_at timestamptz;
comment on column app.uploads.measured_at is 'When the worker or the storage server read the image''s dimensions (null: not yet). Set also when the file could not be read as an image, so it is not read again.';
update app.uploads set measured_at = now() where width is not null or content_type !~ '^image/';
create index uploads_unmeasured_idx on app.uploads (created_at) where measured_at is null;

create function app.unmeasured_images(batch integer)
returns table (key text)
language sql
stable
security definer
set search_path = ''
as $$
  select u.key from app.uploads u
  where u.measured_at is null and u.content_type ~ '^image/'
    and exists (select 1 from storage.objects o where o.bucket_id = 'uploads' and o.name = u.key)
  order by u.created_at
  limit batch
$$;
comment on function app.unmeasured_images(integer) is 'Stored images whose dimensions are not known yet, oldest first, for the storage worker.';
grant execute on function app.unmeasured_images(integer) to service_role;

create function app.record_image_size(object_key text, image_width integer, image_height integer)
returns void
language sql
volatile
security definer
set search_path = ''
as $$
  update app.uploads u set width = image_width, height = image_height, measured_at = now() where u.key = object_key
$$;
comment on function app.record_image_size(text, integer, integer) is 'Records what the worker read of an image (null dimensions when unreadable), so it is measured once.';
grant execute on function app.record_image_size(text, integer, integer) to service_role;

-- The local storage server measures on PUT: record that too.
create or replace function app.record_stored_file(object_key text, size bigint, md5_hex text, mime text, image_width integer, image_height integer)
returns boolean
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  upload app.uploads;
begin
  select * into upload from app.uploads u where u.key = object_key;
  if upload.id is null then
    return false;
  end if;
  insert into storage.objects (bucket_id, name, owner, metadata)
  values ('uploads', object_key, upload.user_id,
          jsonb_build_object('size', size, 'mimetype', mime, 'eTag', '"' || md5_hex || '"', 'contentLength', size))
  on conflict (bucket_id, name) do update set metadata = excluded.metadata, updated_at = now();
  update app.uploads u set width = image_width, height = image_height, measured_at = now() where u.id = upload.id;
  return true;
end;
$$;
comment on function app.record_stored_file(text, bigint, text, text, integer, integer) is
  'Records a file that the local storage server accepted, as Supabase Storage records objects, plus the image dimensions read from it (measured). False when the key names no upload (the caller then discards the file).';

revoke execute on all functions in schema app, api from public;
