import { createRoute, z } from '@hono/zod-openapi'
import { errors, jsonContent } from '../lib/schemas.ts'

/**
 * The types stored as declared (checked against the file's first bytes): images, video and common
 * documents. SVG is left out (it can carry script). Any other declared type is accepted and stored
 * as application/octet-stream, its real type found from the bytes (docs/uploads.md).
 */
export const ALLOWED_CONTENT_TYPES = [
  'image/png', 'image/jpeg', 'image/gif', 'image/webp', 'image/heic', 'image/heif', 'image/avif',
  'video/mp4', 'video/quicktime', 'video/webm',
  'application/pdf', 'text/plain', 'text/markdown', 'text/csv', 'application/zip',
  'application/msword',
  'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
  'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
  'application/vnd.openxmlformats-officedocument.presentationml.presentation',
] as const

/** What the `uploads` bucket takes (config.toml, migrations): the named types, and octet-stream for any other. */
export const BUCKET_CONTENT_TYPES = [...ALLOWED_CONTENT_TYPES, 'application/octet-stream'] as const

/** Largest file accepted: 100 MiB (videos). */
export const MAX_UPLOAD_BYTES = 100 * 1024 * 1024

export const CreateUploadBody = z.object({
  filename: z.string({ error: 'filename is required' }).trim().min(1, { error: 'filename is required' })
    .max(255, { error: 'filename must be at most 255 characters' }).openapi({ example: 'screenshot.png' }),
  byte_size: z.number({ error: 'byte_size must be a whole number of bytes' }).int({ error: 'byte_size must be a whole number of bytes' })
    .min(1, { error: 'byte_size must be greater than 0' }).max(MAX_UPLOAD_BYTES, { error: `byte_size must be at most ${MAX_UPLOAD_BYTES} (100 MiB)` }),
  checksum: z.string({ error: 'checksum is required' }).openapi({ description: 'MD5 of the file, base64 (as Rails-style clients send it) or hex.', example: 'XrY7u+Ae7tCTyyK7j1rNww==' }),
  content_type: z.string({ error: 'content_type is required' }).openapi({ description: `Any media type. ${ALLOWED_CONTENT_TYPES.join(', ')} are stored as declared when the file is one; any other (application/octet-stream included) is stored as application/octet-stream (the PUT carries that type) and the attachment's mime_type is the type found in the file's bytes.`, example: 'image/png' }),
}).openapi('CreateUpload')

export const UploadSchema = z.object({
  filename: z.string(),
  byte_size: z.number().int(),
  checksum: z.string().openapi({ description: 'MD5, base64.' }),
  content_type: z.string(),
  url: z.string().openapi({ description: 'Pre-signed URL to PUT the file to.' }),
  key: z.string(),
  signed_id: z.string().openapi({ description: 'Attach the file with this (valid 24 hours).' }),
  method: z.literal('PUT'),
  headers: z.record(z.string(), z.string()),
}).openapi('Upload')

export const createUpload = createRoute({
  method: 'post',
  path: '/v1/uploads',
  tags: ['Uploads'],
  summary: 'Start a direct upload',
  description: '1) call this; 2) PUT the file to `url` with `headers` (once: a URL stores one file); 3) attach it with `signed_id` (attachments of a todo, comment or message). 422 past the member\'s storage quota, 429 past the upload rate (with Retry-After).',
  request: { body: { required: true, content: { 'application/json': { schema: CreateUploadBody } } } },
  responses: { 200: jsonContent(UploadSchema, 'Where and how to upload'), ...errors(400, 401, 403, 422, 429) },
})
