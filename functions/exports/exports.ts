// Data exports: asking for an archive of your own data, and following its progress. The archive
// is written by the export worker (functions/lib/exports.ts).
import { callFor, respond } from '../lib/respond.ts'
import { createRouter } from '../lib/router.ts'
import { pageArgs } from '../lib/schemas.ts'
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
