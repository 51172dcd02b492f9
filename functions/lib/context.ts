// What every handler has: the dependencies of the app and the request's credential.
import type { Context } from 'hono'
import type { Sql } from 'postgres'
import type { Credential } from './db.ts'
import type { FileStorage } from './storage.ts'
import type { DrainOptions, WebhookSender } from './webhooks.ts'
import type { ApnsConfig, PushDrainOptions, PushTransport } from './push.ts'
import type { Admission, AdmissionLimits } from './admission.ts'

export interface AppDeps {
  /** postgres.js client; on Supabase, created once at module scope with prepare: false. */
  sql: Sql
  /** {base_url} of url fields and signed upload URLs. */
  publicUrl: string
  /** Signs and verifies OAuth access tokens (HS256). */
  jwtSecret: string
  /**
   * Origins of the website (WEBSITE_ORIGINS) whose "Continue to the app" form may post the
   * member's Supabase Auth session to POST /oauth/login (docs/oauth.md); unset: only our own.
   */
  websiteOrigins?: string[]
  /** Where a lapsed subscription is sent (401 upgrade_url). */
  upgradeUrl: string
  /** Where uploads go: Supabase Storage (the hosted service, or local/storage-api.ts locally). */
  storage: FileStorage
  /** Bearer secret of POST /internal/maintenance (pg_cron calls it on Supabase); unset: the route is off. */
  workerSecret?: string
  /** WEBHOOK_ALLOW_PRIVATE=1: plain http and private addresses allowed as webhook targets (tests, local use). */
  webhookAllowPrivate?: boolean
  /** How POST /internal/webhooks sends (the platform's sender); unset: the route is off. */
  webhookSender?: WebhookSender
  /** Batch, lanes and budget of one POST /internal/webhooks. */
  webhookDrain?: DrainOptions
  /** How POST /internal/push sends (the platform's transport); unset: the route is off. */
  pushTransport?: PushTransport
  /** APNs configuration (APNS_*); null or unset: device pushes are marked failed, web pushes still go. */
  apns?: ApnsConfig | null
  /** Batch, lanes and budget of one POST /internal/push. */
  pushDrain?: PushDrainOptions
  /** Called after POST /v1/todos created a todo: npm start wakes its in-process webhook worker. */
  onTodoCreated?: () => void
  /** Called after POST /v1/exports asked for an export: npm start wakes its in-process export worker. */
  onExportCreated?: () => void
  /** Budget of one POST /internal/exports (the export worker, which Supabase Cron calls). */
  exportBudgetMs?: number
  /** WEB_URL: base of the web url fields (/@username, /todos/{n}, /projects/{slug}); default publicUrl. */
  webUrl?: string
  /** Where the access log goes, one line per request; unset: no log (tests). */
  accessLog?: (line: string) => void
  /** A brotli encoder where the runtime has one (Node's zlib); unset: gzip only. */
  brotli?: (data: Uint8Array) => Uint8Array | Promise<Uint8Array>
  /** The bytes of @scalar/api-reference's browser bundle, served at /docs/scalar.js; null when not installed. */
  docsScript?: () => Promise<Uint8Array | null>
  /** The fair queue (functions/lib/admission.ts), or its limits; default: admissionLimitsFor the pool's size. */
  admission?: AdmissionLimits | Admission
}

export interface AppEnv {
  Variables: {
    deps: AppDeps
    credential: Credential | null
    /** The app's fair queue: every request's SQL call waits for its member's turn in it. */
    admission: Admission
    /**
     * Set by callFor when the request's SQL call carries its Idempotency-Key: sending it again is
     * then safe, so an "outcome unknown" 503 says Retry-After (functions/lib/errors.ts).
     */
    idempotencyKeyUsed?: boolean
  }
}

export type AppContext = Context<AppEnv>
