-- Uploads of types we do not name (issue 18): a published desktop client declares
-- application/octet-stream for every file. POST /v1/uploads now accepts any media type and
-- signs the PUT of any type outside ALLOWED_CONTENT_TYPES as application/octet-stream, so the
-- bucket takes that type too; the real type is found from the bytes (app.uploads.detected_type,
-- migration 20261124185447). Kept equal to BUCKET_CONTENT_TYPES of
-- functions/uploads/uploads.routes.ts and supabase/config.toml (test/upload-limits.test.ts).
-- Still no SVG, HTML or other scriptable type: such a file can only arrive as octet-stream, and
-- octet-stream is only ever served as a download.
update storage.buckets
   set allowed_mime_types = array_append(array_remove(allowed_mime_types, 'application/octet-stream'), 'application/octet-stream')
 where id = 'uploads';
