// What a stored upload really is, read once from its first bytes: by the first request that
// attaches it (functions/uploads/signed-ids.ts) or by the storage worker, whichever comes first,
// the same code on both entries. Storage records only what the PUT said (its Content-Type); this
// records what the bytes are (app.uploads.sniffed_type), and an image's dimensions.
import { imageSize } from 'image-size'
import type { Sql } from 'postgres'
import { storedType } from './media.ts'
import type { FileStorage } from './storage.ts'

/** Enough of the file for the header of any image type image-size reads, EXIF included. */
export const INSPECT_HEAD_BYTES = 512 * 1024

export interface UploadToInspect {
  key: string
  filename: string | null
  content_type: string
}

/**
 * Reads a stored file's start and records what it is (app.record_upload_inspection, once: a
 * second reader records nothing). False when storage has no such file (deleted meanwhile).
 */
export async function inspectStored(
  sql: Sql, storage: FileStorage, upload: UploadToInspect,
  /** How the record's statement runs (a request runs it in its member's turn); default at once. */
  inTurn: <T>(record: () => Promise<T>) => Promise<T> = (record) => record(),
): Promise<boolean> {
  const head = await storage.readStart(upload.key, INSPECT_HEAD_BYTES)
  if (!head) return false
  const sniffed = await storedType(upload.content_type, head, upload.filename)
  let width: number | null = null
  let height: number | null = null
  if (sniffed.startsWith('image/')) {
    try {
      const size = imageSize(head)
      const turned = (size.orientation ?? 1) >= 5
      width = (turned ? size.height : size.width) ?? null
      height = (turned ? size.width : size.height) ?? null
    } catch {
      // Not readable as an image: recorded as read, dimensions unknown.
    }
  }
  await inTurn(() => sql`select app.record_upload_inspection(${upload.key}, ${sniffed}, ${width}, ${height})`)
  return true
}
