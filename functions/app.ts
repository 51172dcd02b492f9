// The Hono app, runtime-neutral: Node (local/start.ts) and Deno (supabase/functions/api)
// both serve `createApp(deps).fetch`. No Node-only or Deno-only import below this folder.
import { OpenAPIHono } from '@hono/zod-openapi'
import type { AppDeps, AppEnv } from './lib/context.ts'
import { bodyLimit } from 'hono/body-limit'
import { credentials, refuseUnknownCredential } from './lib/auth.ts'
import { errorResponse } from './lib/errors.ts'
import { runStorageMaintenance } from './lib/maintenance.ts'
import { users } from './users/users.ts'
import { projects } from './projects/projects.ts'
import { comments } from './comments/comments.ts'
import { conversations } from './conversations/conversations.ts'
import { following } from './following/following.ts'
import { moderation } from './moderation/moderation.ts'
import { reactions } from './reactions/reactions.ts'
import { search } from './search/search.ts'
import { todos } from './todos/todos.ts'
import { uploads } from './uploads/uploads.ts'
import { webhooks } from './webhooks/webhooks.ts'
import { oauth } from './oauth/oauth.ts'
import { documentOAuth } from './oauth/oauth.routes.ts'
import { drainWebhooks } from './lib/webhooks.ts'
import { account } from './account/account.ts'
import { dataExports } from './exports/exports.ts'
import { ExportArchiveSchema } from './exports/exports.routes.ts'
import { runExports } from './lib/exports.ts'
import { cors } from './lib/cors.ts'
import { compression, conditionalGet } from './lib/encoding.ts'
import { observe } from './lib/observe.ts'
import { Admission, admissionLimitsFor } from './lib/admission.ts'
import { poolSizeOf } from './lib/sql.ts'
import { documentIdempotencyKeys } from './lib/idempotency.ts'
import { images } from './web/images.ts'
import { docs, web } from './web/pages.ts'
import { notifications } from './notifications/notifications.ts'
import { ProviderTokens, drainPush } from './lib/push.ts'

export type { AppDeps } from './lib/context.ts'

export const API_VERSION = '1.4.0'

/** The largest JSON or form body the API reads (413 above it); files go to storage, not here. */
export const MAX_BODY_BYTES = 1024 * 1024

export interface AppOptions {
  /**
   * Prefix the platform puts before /v1: `/api` for the Supabase Edge Function. For routing only:
   * links and the OpenAPI `servers` come from PUBLIC_URL (functions/lib/links.ts).
   */
  basePath?: string
}

/**
 * The path Hono routes on: without the platform prefix, and without a trailing `.json` on /v1
 * paths (clients that ask for /v1/users/me.json get /v1/users/me), except the OpenAPI document.
 */
export function routingPath(pathname: string, basePath = ''): string {
  let path = pathname
  if (basePath && (path === basePath || path.startsWith(basePath + '/'))) path = path.slice(basePath.length) || '/'
  // Only API paths: a stored file's key may end in .json (/files/…, the storage PUT).
  if (path.startsWith('/v1/') && path.endsWith('.json') && path !== '/v1/openapi.json') path = path.slice(0, -'.json'.length)
  return path
}

/** Constant-time equality of two secrets. */
function sameSecret(a: string, b: string): boolean {
  if (a.length !== b.length) return false
  let diff = 0
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i)
  return diff === 0
}

function patternOf(honoPath: string): RegExp {
  const source = honoPath.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/:[A-Za-z_]+/g, '[^/]+').replace(/\*/g, '.*')
  return new RegExp(`^${source}$`)
}

export function createApp(deps: AppDeps, options: AppOptions = {}) {
  const basePath = options.basePath ?? ''
  const app = new OpenAPIHono<AppEnv>({
    getPath: (req) => routingPath(new URL(req.url).pathname, basePath),
  })

  // What clients in the wild expect (issue 18): a request id and an access-log line for every
  // request, CORS for bearer-token clients (preflights answered before routing), compression
  // and conditional GETs of what the app renders.
  app.use('*', observe(deps.accessLog))
  app.use('*', cors((req) => routingPath(new URL(req.url).pathname, basePath)))
  app.use('*', compression({ brotli: deps.brotli }))
  app.use('*', conditionalGet())
  // One queue per app (a server, or an edge isolate), over the pool the app's SQL runs on.
  const admission = deps.admission instanceof Admission ? deps.admission : new Admission(deps.admission ?? admissionLimitsFor(poolSizeOf(deps.sql)))
  app.use('*', async (c, next) => {
    c.set('deps', deps)
    c.set('admission', admission)
    await next()
  })
  // Before anything reads the body: a declared Content-Length over the limit is refused
  // unread, a chunked body is counted as it arrives and dropped once it passes the limit.
  app.use('/v1/*', bodyLimit({
    maxSize: MAX_BODY_BYTES,
    // The rest of the body is never read: the connection closes after the answer.
    onError: (c) => c.json({ error: `The request body is larger than the limit of ${MAX_BODY_BYTES} bytes (1 MiB).` }, 413, { connection: 'close' }),
  }))
  app.use('/v1/*', credentials)

  app.route('/', users)
  app.route('/', projects)
  app.route('/', todos)
  app.route('/', search)
  app.route('/', comments)
  app.route('/', reactions)
  app.route('/', moderation)
  app.route('/', following)
  app.route('/', uploads)
  app.route('/', conversations)
  app.route('/', webhooks)
  app.route('/', account)
  app.route('/', dataExports)
  // The OAuth authorization server: RFC forms and errors, not the /v1 contract (no credentials middleware).
  app.route('/', oauth)
  documentOAuth(app)
  app.route('/', notifications)

  // The document of the routes above, with the Idempotency-Key every POST, PATCH and DELETE takes.
  const documentConfig = {
    openapi: '3.1.0',
    info: {
      title: 'Todo-Sharing Service API',
      version: API_VERSION,
      description: 'Completed todos, projects, comments, reactions, following, webhooks, notifications and direct messages.\n\n'
        + 'Polling: every successful GET carries a weak `ETag`; send it back as `If-None-Match` and an unchanged answer is `304` with no body. '
        + 'Answers of 1 KiB or more are compressed (gzip, or br where the server has it) when `Accept-Encoding` asks. '
        + 'CORS is open to every origin for bearer tokens (no cookies). Every answer has an `X-Request-Id` (yours, when you send a sane one).\n\n'
        + 'Safe retries: send an `Idempotency-Key` with a POST, PATCH or DELETE, and a retry with the same key within 24 hours gets the first answer '
        + '(`Idempotent-Replayed: true`) instead of running again.',
    },
    // PUBLIC_URL as it is: the address clients call (on Supabase …/functions/v1/api), whatever
    // prefix the runtime hands the app (basePath, /api there).
    servers: [{ url: deps.publicUrl }],
  }
  app.get('/v1/openapi.json', (c) => c.json(documentIdempotencyKeys(app.getOpenAPI31Document(documentConfig))))
  app.openAPIRegistry.registerComponent('securitySchemes', 'bearer', {
    type: 'http',
    scheme: 'bearer',
    description: 'An API key (svc_sk_…) or an OAuth 2.0 access token.',
  })
  // What an export's download url serves: documented, though no route answers with it.
  app.openAPIRegistry.register('ExportArchive', ExportArchiveSchema)
  // Worker routes answer to the worker secret only: without it, every method gets the 404 of a
  // path that does not exist (a 405 for GET told a stranger the route is there). Runs before
  // each /internal route below, the push worker's too.
  app.use('/internal/*', async (c, next) => {
    const presented = c.req.header('authorization')?.replace(/^Bearer\s+/i, '') ?? ''
    if (!deps.workerSecret || !sameSecret(presented, deps.workerSecret)) {
      return c.json({ error: `No route matches ${c.req.method} ${routingPath(new URL(c.req.url).pathname, basePath)}.` }, 404)
    }
    await next()
  })
  // The storage worker, for pg_cron on Supabase (npm start runs it on a timer instead).
  app.post('/internal/maintenance', async (c) => {
    const presented = c.req.header('authorization')?.replace(/^Bearer\s+/i, '') ?? ''
    if (!deps.workerSecret || !sameSecret(presented, deps.workerSecret)) return c.json({ error: 'No route matches POST /internal/maintenance.' }, 404)
    return c.json(await runStorageMaintenance(deps.sql, deps.storage), 200)
  })
  // The webhook worker, for pg_cron + pg_net on Supabase every few seconds (npm start runs it on
  // a timer). One call drains what is due within its budget (an edge function's wall clock).
  app.post('/internal/webhooks', async (c) => {
    const presented = c.req.header('authorization')?.replace(/^Bearer\s+/i, '') ?? ''
    if (!deps.workerSecret || !deps.webhookSender || !sameSecret(presented, deps.workerSecret)) return c.json({ error: 'No route matches POST /internal/webhooks.' }, 404)
    return c.json(await drainWebhooks(deps.sql, deps.webhookSender, { budgetMs: 60_000, ...deps.webhookDrain }), 200)
  })

  // The export worker, for Supabase Cron (npm start runs it on a timer and after each request).
  app.post('/internal/exports', async (c) => {
    const presented = c.req.header('authorization')?.replace(/^Bearer\s+/i, '') ?? ''
    if (!deps.workerSecret || !sameSecret(presented, deps.workerSecret)) return c.json({ error: 'No route matches POST /internal/exports.' }, 404)
    return c.json(await runExports(deps.sql, deps.storage, { publicUrl: deps.publicUrl, budgetMs: deps.exportBudgetMs ?? 60_000 }), 200)
  })

  app.route('/', docs(deps.publicUrl))
  app.route('/', images)
  app.route('/', web)
  // The push worker, for pg_cron + pg_net on Supabase every few seconds (npm start runs it on a
  // timer). The provider token is shared through the database, so every invocation reuses it.
  const providerTokens = deps.apns ? new ProviderTokens(deps.sql, deps.apns) : null
  app.post('/internal/push', async (c) => {
    const presented = c.req.header('authorization')?.replace(/^Bearer\s+/i, '') ?? ''
    if (!deps.workerSecret || !deps.pushTransport || !sameSecret(presented, deps.workerSecret)) return c.json({ error: 'No route matches POST /internal/push.' }, 404)
    const apns = deps.apns && providerTokens ? { config: deps.apns, tokens: providerTokens } : null
    return c.json(await drainPush(deps.sql, deps.pushTransport, apns, { budgetMs: 60_000, ...deps.pushDrain }), 200)
  })


  // Unknown routes are 404 and known paths with another method 405, both as JSON.
  const patterns = () => app.routes.filter((r) => r.method !== 'ALL').map((r) => ({ method: r.method, pattern: patternOf(r.path) }))
  let known: ReturnType<typeof patterns> | null = null
  app.notFound((c) => {
    known ??= patterns()
    const path = routingPath(new URL(c.req.url).pathname, basePath)
    const allowed = [...new Set(known.filter((r) => r.pattern.test(path)).map((r) => r.method))]
    if (allowed.length > 0) {
      return c.json({ error: `Method ${c.req.method} is not allowed here; use ${allowed.join(', ')}.` }, 405, { Allow: allowed.join(', ') })
    }
    return c.json({ error: `No route matches ${c.req.method} ${path}.` }, 404)
  })
  app.onError((err, c) => errorResponse(err, c, deps.upgradeUrl, () => refuseUnknownCredential(c)))

  return app
}
