// Data exports: asking for an archive of your own data, and following its progress. The archive
// is written by the export worker (functions/lib/exports.ts).
import { callFor, inTurn, respond } from '../lib/respond.ts'
import { createRouter } from '../lib/router.ts'
import { pageArgs } from '../lib/schemas.ts'
import { EXPORT_KEY_PATTERN } from '../lib/storage.ts'
import * as routes from './exports.routes.ts'

export const dataExports = createRouter()
  .openapi(routes.createExport, async (c) => {
    const body = await callFor(c, 'api.export_create', [])
    // npm start's worker starts at once (on Supabase, Cron wakes it).
    c.var.deps.onExportCreated?.()
    return c.body(body ?? 'null', 202, { 'content-type': 'application/json; charset=UTF-8' }) as never
  })
  .openapi(routes.listExports, (c) => respond(c, 'api.exports_list', pageArgs(c.req.valid('query'))))
  .openapi(routes.getExport, (c) => respond(c, 'api.export_get', [c.req.valid('param').export_id]))

/**
 * GET /exports/{key}: an export's archive, the `url` of a ready Export. The key (128 random bits)
 * is the capability, as a file's is at /files/{key}; it is served only while its export is live
 * (ready, within its 24 hours, its account not deleted), checked here on every download, so a
 * link dies with its export at once, not when the storage worker gets to the file.
 */
dataExports.get('/exports/:folder/export.json', async (c) => {
  const key = `exports/${c.req.param('folder')}/export.json`
  const gone = () => c.json({ error: 'No such export: it expired or was deleted.' }, 404, { 'cache-control': 'no-store' })
  if (!EXPORT_KEY_PATTERN.test(key) || !c.var.deps.storage.exportResponse) return gone()
  const [live] = await inTurn(c, () => c.var.deps.sql`
    select 1 as live from app.exports where file_key = ${key} and status = 'ready' and expires_at > now()`)
  if (!live) return gone()
  return await c.var.deps.storage.exportResponse(key)
})
