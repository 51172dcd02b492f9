// Turning the signed_ids a client sends in `attachments` into upload ids for SQL. The
// signature and expiry are checked here (the secret never reaches the database); whose upload
// it is and whether its file arrived are checked in SQL (app.attach_uploads). A stored file no
// one read yet is read here first (functions/lib/inspect.ts), so SQL can check that its bytes are
// what was declared: Storage records only what the PUT said.
import type { AppContext } from '../lib/context.ts'
import { ApiError } from '../lib/errors.ts'
import { type UploadToInspect, inspectStored } from '../lib/inspect.ts'
import { accessOf } from '../lib/access.ts'
import { callApiAs } from '../lib/db.ts'
import { inTurn } from '../lib/respond.ts'
import { uploadSigningKey, verifyUploadId } from '../lib/storage.ts'

const keys = new Map<string, Promise<Uint8Array>>()

/** The upload signing key of this app's JWT secret, derived once. */
export function signingKey(c: AppContext): Promise<Uint8Array> {
  const secret = c.var.deps.jwtSecret
  let key = keys.get(secret)
  if (!key) keys.set(secret, (key = uploadSigningKey(secret)))
  return key
}

export async function uploadIds(c: AppContext, signedIds: string[] | undefined, field = 'attachments'): Promise<string[]> {
  if (!signedIds || signedIds.length === 0) return []
  const key = await signingKey(c)
  const ids: string[] = []
  for (const signedId of signedIds) {
    const check = await verifyUploadId(key, signedId)
    if (!check.ok) {
      throw new ApiError(422, check.reason === 'expired'
        ? `${field}: a signed id has expired; upload the file again.`
        : `${field}: ${JSON.stringify(signedId.slice(0, 40))} is not a signed id from POST /v1/uploads.`)
    }
    ids.push(check.uploadId)
  }
  if (new Set(ids).size !== ids.length) throw new ApiError(422, `${field}: the same upload is named twice.`)
  await inspectUploads(c, ids)
  return ids
}

/**
 * Reads the stored files of these uploads that nobody read yet (once each), before SQL attaches
 * them. Which ones comes from api.uploads_to_inspect, run as the requesting member: only the
 * member's own uploads are read and recorded, never another member's whose signed id was named.
 */
async function inspectUploads(c: AppContext, ids: string[]): Promise<void> {
  const credential = c.var.credential
  if (!credential) return // the request's own call refuses it
  const { sql, storage, publicUrl, webUrl } = c.var.deps
  // The list in the member's turn (the credential is decided there: nothing is read for a refused
  // one); the reads from Storage outside any turn (each bounded by the adapter's timeout), so a
  // slow Storage holds no database slot; each record in a short turn of its own.
  const { body } = await inTurn(c, () =>
    // No Idempotency-Key here: the request's stored answer is its own call's.
    callApiAs(sql, { credential, access: accessOf(c), publicUrl, webUrl }, 'api.uploads_to_inspect', [ids]))
  const pending = JSON.parse(body ?? '[]') as UploadToInspect[]
  if (pending.length === 0) return
  try {
    await Promise.all(pending.map((upload) => inspectStored(sql, storage, upload, (record) => inTurn(c, record))))
  } catch (err) {
    if (err instanceof ApiError) throw err
    // Storage did not answer in time (or refused the service role): nothing was attached; safe to repeat.
    console.error('reading stored files failed:', (err as Error).message)
    throw new ApiError(503, 'The stored files could not be read just now; try again shortly.', {}, { 'Retry-After': '5' })
  }
}
