// The Supabase Edge Function: the same Hono app as local/start.ts, served by Deno under
// /functions/v1/api (the platform hands the function paths that start with /api).
import { createApp } from '../../../functions/app.ts'
import { createSql, deadlineMarginFrom, statementTimeoutFrom } from '../../../functions/lib/sql.ts'
import { supabaseStorage } from '../../../functions/lib/supabase-storage.ts'
import { denoWebhookSender } from './webhook-sender.ts'
import { apnsConfigFrom } from '../../../functions/lib/push.ts'
import { denoPushTransport } from './push-sender.ts'

function env(name: string): string | undefined {
  const value = Deno.env.get(name)
  return value === undefined || value === '' ? undefined : value
}

function required(value: string | undefined, message: string): string {
  if (value === undefined) throw new Error(message)
  return value
}

const databaseUrl = required(
  env('SUPABASE_DB_URL') ?? env('DATABASE_URL'),
  'api: set SUPABASE_DB_URL (provided on Supabase) or DATABASE_URL to the PostgreSQL connection string.',
)
const jwtSecret = required(env('JWT_SECRET'), 'api: set JWT_SECRET (supabase secrets set JWT_SECRET=...) to sign OAuth access tokens.')
const supabaseUrl = env('SUPABASE_URL')
const publicUrl = required(
  env('PUBLIC_URL') ?? (supabaseUrl ? `${supabaseUrl.replace(/\/+$/, '')}/functions/v1/api` : undefined),
  'api: set PUBLIC_URL (or SUPABASE_URL) to the public base URL of the API.',
).replace(/\/+$/, '')
const upgradeUrl = env('UPGRADE_URL') ?? `${publicUrl}/upgrade`
// The website's base for web url fields; unset: this function's own pages (PUBLIC_URL).
const webUrl = (env('WEB_URL') ?? publicUrl).replace(/\/+$/, '')

// /docs/scalar.js: the pinned @scalar/api-reference bundle from the repository's node_modules,
// shipped with the function by `static_files` in supabase/config.toml; read once per isolate.
// Missing (a bundle run without the file): /docs/scalar.js is 404 and the page says nothing.
let docsScript: Promise<Uint8Array | null> | null = null
const readDocsScript = () =>
  (docsScript ??= Deno.readFile(new URL('../../../node_modules/@scalar/api-reference/dist/browser/standalone.js', import.meta.url)).catch(() => null))

// The website's origins (comma-separated), whose form posts a member's session to /oauth/login.
const websiteOrigins = (env('WEBSITE_ORIGINS') ?? '').split(',').map((origin) => origin.trim().replace(/\/+$/, '')).filter(Boolean)

// Once per isolate. Supabase's transaction pooler (port 6543) cannot keep prepared statements.
const prepare = new URL(databaseUrl).port !== '6543'
// Every request's statement runs under STATEMENT_TIMEOUT_MS (default 5 s), sent as a startup
// parameter: use the direct connection or the session pooler (docs/security.md, "Timeouts").
// A statement left unanswered STATEMENT_DEADLINE_MARGIN_MS (default 2 s) past it destroys its
// connection: a database that went silent is answered 503, not waited on (docs/reliability.md).
const sql = createSql(databaseUrl, {
  max: 5, prepare, statementTimeoutMs: statementTimeoutFrom(env('STATEMENT_TIMEOUT_MS')), deadlineMarginMs: deadlineMarginFrom(env('STATEMENT_DEADLINE_MARGIN_MS')),
})

// Uploads go to Supabase Storage (the private bucket `uploads`), signed with the service role.
const storage = supabaseStorage({
  supabaseUrl: supabaseUrl ?? publicUrl,
  serviceRoleKey: env('SUPABASE_SERVICE_ROLE_KEY') ?? '',
})

// pg_cron calls POST /api/internal/maintenance with this secret (docs/deploy.md).
const workerSecret = env('WORKER_SECRET')

// Supabase Cron calls POST /api/internal/webhooks every 5 seconds with the same secret; the
// Deno sender resolves and checks addresses but cannot pin them (webhook-sender.ts).
const webhookAllowPrivate = env('WEBHOOK_ALLOW_PRIVATE') === '1'
const webhookSender = denoWebhookSender({ allowPrivate: webhookAllowPrivate })

// Supabase Cron calls POST /api/internal/push every 5 seconds with the same secret (docs/deploy.md).
// APNs from APNS_KEY_ID, APNS_TEAM_ID, APNS_PRIVATE_KEY, APNS_TOPIC (APNS_URL for tests); Web Push
// from VAPID_PUBLIC_KEY, VAPID_PRIVATE_KEY, VAPID_SUBJECT (an edge function has no disk to keep
// generated keys on: set the pair npm start generated, or `npx web-push generate-vapid-keys`).
const apns = apnsConfigFrom(env)
const vapidPublicKey = env('VAPID_PUBLIC_KEY')
const vapidPrivateKey = env('VAPID_PRIVATE_KEY')
const vapid = vapidPublicKey && vapidPrivateKey
  ? { publicKey: vapidPublicKey, privateKey: vapidPrivateKey, subject: env('VAPID_SUBJECT') ?? 'mailto:push@todo-sharing.invalid' }
  : null
const pushTransport = denoPushTransport({ vapid, allowPrivate: webhookAllowPrivate })

const app = createApp(
  // An invocation claims new batches for at most 50 s (pg_net waits 55 s for its answer), well
  // within the edge runtime's 150 s wall clock even with a 15 s delivery under way.
  {
    sql, publicUrl, jwtSecret, upgradeUrl, websiteOrigins, storage, workerSecret, webhookAllowPrivate, webhookSender, webhookDrain: { budgetMs: 50_000 },
    pushTransport, apns, pushDrain: { budgetMs: 50_000 },
    // gzip only (CompressionStream): the edge runtime has no brotli encoder we can count on.
    webUrl, docsScript: readDocsScript, accessLog: (line) => console.log(line),
  },
  { basePath: '/api' },
)

/**
 * Deno.serve decides whether a connection is kept: it closes one whose request body was left
 * unread (the app's 413s answer before reading it) and says so with a `Connection: close` of its
 * own. The app's header (which Node's server needs: local/node-http.ts) would be a second one, and
 * a proxy that reads the header as one value ("close, close") keeps a socket Deno is closing
 * (issue 30). On Deno the app's is dropped; Deno's stays (test/edge.test.ts).
 */
function connectionLeftToDeno(response: Response): Response {
  if (!response.headers.has('connection')) return response
  try {
    response.headers.delete('connection')
    return response
  } catch {
    // Immutable headers (a fetch()'s response passed through): the same answer with a copy.
    const headers = new Headers(response.headers)
    headers.delete('connection')
    return new Response(response.body, { status: response.status, statusText: response.statusText, headers })
  }
}
const serve = async (req: Request, info: Deno.ServeHandlerInfo) => connectionLeftToDeno(await app.fetch(req, info))

// PORT only for running it by hand, in the tests and in `npm run start:edge`; the platform picks its own.
const port = env('PORT')
if (port) Deno.serve({ port: Number(port), hostname: '127.0.0.1' }, serve)
else Deno.serve(serve)
