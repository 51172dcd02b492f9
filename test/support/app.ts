// A test file's world: its own database cloned from the migrated template, the real app
// served over real HTTP on an ephemeral port, and the operator CLI's commands in-process.
// TEST_ENTRY=edge serves the app as `npm run start:edge` does instead (local/edge-stack.ts: the
// Deno entry under /functions/v1/api, Storage's REST API and Realtime at the gateway), with the
// same PUBLIC_URL (http://api.test), so the same assertions hold on both entries (.ci/run runs
// the route families' files that way too).
import { serve, type ServerType } from '@hono/node-server'
import { inject } from 'vitest'
import { createApp } from '../../functions/app.ts'
import { DEFAULT_STATEMENT_TIMEOUT_MS, createSql } from '../../functions/lib/sql.ts'
import { signAccessToken } from '../../functions/lib/tokens.ts'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { runAdmin } from '../../local/admin-commands.ts'
import { startRealtimeGateway } from '../../local/realtime.ts'
import { localSupabaseStorage } from '../../local/storage-api.ts'
import { runStorageMaintenance } from '../../functions/lib/maintenance.ts'
import { databaseUrl } from './net.ts'
import { type EdgeStack, startEdgeStack } from '../../local/edge-stack.ts'
import { nodeWebhookSender } from '../../local/webhook-sender.ts'
import { type DrainOptions, drainWebhooks } from '../../functions/lib/webhooks.ts'
import { type ExportOptions, runExports } from '../../functions/lib/exports.ts'
import { closeAfterUnreadBody, nodeBrotli, nodeDocsScript } from '../../local/node-http.ts'
import type { ApnsConfig, PushTransport } from '../../functions/lib/push.ts'
import { Admission, type AdmissionLimits, admissionLimitsFor } from '../../functions/lib/admission.ts'

export const JWT_SECRET = 'test-jwt-secret-that-is-long-enough-for-hs256'
/** Which entry serves the world's HTTP: the Node app (`npm start`), or the edge function (`npm run start:edge`). */
export const TEST_ENTRY: 'node' | 'edge' = process.env.TEST_ENTRY === 'edge' ? 'edge' : 'node'
export const WORKER_SECRET = 'test-worker-secret'

export interface CreatedUser {
  id: string
  username: string
  api_key: string
  read_only_api_key: string
}

export interface HttpResult<T = any> {
  status: number
  body: T
  text: string
  headers: Headers
}

export interface RequestOptions {
  /** API key or access token sent as Authorization: Bearer. */
  auth?: string
  json?: unknown
  body?: string
  headers?: Record<string, string>
}

export type TestWorld = Awaited<ReturnType<typeof startWorld>>

export interface WorldOptions {
  /** statement_timeout of the app's connections; production's default unless a test needs less. */
  statementTimeoutMs?: number
  /** Refuse public Realtime channels, as `npm start` (and production's setting) does. Default true. */
  realtimePrivateOnly?: boolean
  /** How often the Realtime gateway checks its channels' tokens against revocation (its default: 5 s). */
  revocationCheckIntervalMs?: number
  /** The local Storage API's limits: how long an upload may send nothing, the project-wide file size limit. */
  storage?: { idleTimeoutMs?: number; fileSizeLimit?: number }
  /** WEBHOOK_ALLOW_PRIVATE of the app and of the world's webhook sender. Default false, as in production. */
  webhookAllowPrivate?: boolean
  /** WEB_URL of the app (base of web url fields); default the public URL, http://api.test. */
  webUrl?: string
  /** The push transport and APNs configuration of POST /internal/push; unset: the route is off. */
  push?: { transport: PushTransport; apns: ApnsConfig | null }
  /** The fair queue's limits (functions/lib/admission.ts); default: as production derives them from the pool (8 here). */
  admission?: AdmissionLimits
  /** How often the server sends its read counts to the database; default production's second. */
  reconcileEveryMs?: number
}

export async function startWorld(options: WorldOptions = {}) {
  const name = `todo_test_${process.pid}_${Math.random().toString(36).slice(2, 8)}`
  const serverUrl = inject('serverUrl')
  const admin = createSql(serverUrl, { max: 1 })
  await admin.unsafe(`create database ${name} template ${inject('templateDatabase')}`)
  const url = databaseUrl(serverUrl, name)
  const statements: string[] = []
  const sql = createSql(url, {
    max: 8,
    onQuery: (statement) => statements.push(statement),
    statementTimeoutMs: options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS,
  })

  // Files go to a folder of this world; upload URLs point at this world's own server.
  const storageDir = await mkdtemp(join(tmpdir(), 'todo-test-storage-'))
  let publicUrl = 'http://api.test'
  let server: ServerType | null = null
  // Supabase Storage's REST API over this folder (local/storage-api.ts) and the production adapter
  // over it, as `npm start` has them: upload URLs point at this world's own server.
  const { api: storageApi, storage } = await localSupabaseStorage({ dir: storageDir, publicUrl: () => publicUrl, jwtSecret: JWT_SECRET, sql, ...options.storage })
  const webhookAllowPrivate = options.webhookAllowPrivate ?? false
  const accessLog: string[] = []
  const webhookSender = nodeWebhookSender({ allowPrivate: webhookAllowPrivate })
  const deps = {
    sql, publicUrl: 'http://api.test', jwtSecret: JWT_SECRET, upgradeUrl: 'https://todo.test/upgrade', storage, workerSecret: WORKER_SECRET,
    webhookAllowPrivate, webhookSender, webhookDrain: { scheduleMs: [200, 400, 800], giveUpAfterMs: 60_000 },
    webUrl: options.webUrl, brotli: nodeBrotli, docsScript: nodeDocsScript, accessLog: (line: string) => accessLog.push(line),
    pushTransport: options.push?.transport, apns: options.push?.apns, pushDrain: { scheduleMs: [200], giveUpAfterMs: 60_000, jitter: 0 },
    admission: new Admission(options.admission ?? admissionLimitsFor(8), { reconcileEveryMs: options.reconcileEveryMs }),
  }
  let baseUrl: string
  /** Where Storage and Realtime answer (supabase-js's SUPABASE_URL): the server itself, or the edge gateway. */
  let supabaseUrl: string
  let realtime: Awaited<ReturnType<typeof startRealtimeGateway>>
  let stack: EdgeStack | null = null
  /** The routes of the app's router (the edge entry builds the same router with createApp). */
  let routes: { method: string; path: string }[]
  if (TEST_ENTRY === 'edge') {
    routes = createApp(deps).routes.map((r) => ({ method: r.method, path: r.path }))
    // The edge function on this world's database and files; its access log lines collected as the Node app's are.
    let pending = ''
    stack = await startEdgeStack({
      databaseUrl: url, jwtSecret: JWT_SECRET, storageDir, port: 0, cron: false, workerSecret: WORKER_SECRET, publicUrl: 'http://api.test',
      env: {
        UPGRADE_URL: 'https://todo.test/upgrade', WEB_URL: options.webUrl, WEBHOOK_ALLOW_PRIVATE: webhookAllowPrivate ? '1' : undefined,
        STATEMENT_TIMEOUT_MS: String(options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS),
      },
      onOutput: (chunk) => {
        const lines = (pending + chunk).split('\n')
        pending = lines.pop() ?? ''
        for (const line of lines) if (/^[A-Z]+ \/\S* \d{3} /.test(line)) accessLog.push(line.replace(/^(\S+) \/api\//, '$1 /'))
      },
    })
    supabaseUrl = stack.url
    baseUrl = `${stack.url}/functions/v1/api`
    publicUrl = supabaseUrl
    realtime = stack.realtime
  } else {
    const app = createApp(deps)
    app.route('/', storageApi.routes)
    routes = app.routes.map((r) => ({ method: r.method, path: r.path }))
    baseUrl = await new Promise<string>((resolve) => {
      server = serve({ fetch: closeAfterUnreadBody(app.fetch), hostname: '127.0.0.1', port: 0 }, (info) => resolve(`http://127.0.0.1:${info.port}`))
    })
    supabaseUrl = baseUrl
    publicUrl = baseUrl
    // The Realtime gateway on the same server, as `npm start` serves it (ws://…/realtime/v1/websocket).
    realtime = await startRealtimeGateway({
      databaseUrl: url, jwtSecret: JWT_SECRET, privateOnly: options.realtimePrivateOnly ?? true, revocationCheckIntervalMs: options.revocationCheckIntervalMs,
    })
    realtime.attach(server!)
  }

  const adminContext = { sql, jwtSecret: JWT_SECRET, publicUrl: 'http://api.test', webUrl: options.webUrl }

  async function request<T = any>(method: string, path: string, options: RequestOptions = {}): Promise<HttpResult<T>> {
    const headers: Record<string, string> = { ...options.headers }
    if (options.auth) headers.authorization = `Bearer ${options.auth}`
    let body = options.body
    if (options.json !== undefined) {
      body = JSON.stringify(options.json)
      headers['content-type'] ??= 'application/json'
    }
    const response = await fetch(baseUrl + path, { method, headers, body })
    const text = await response.text()
    let parsed: unknown = null
    try {
      parsed = text ? JSON.parse(text) : null
    } catch {
      parsed = text
    }
    return { status: response.status, body: parsed as T, text, headers: response.headers }
  }

  const others: ServerType[] = []
  /**
   * Another server of the same API on the same database, with a pool and a fair queue of its own
   * (a second `npm start`, or another edge isolate): what one server's memory knows, it does not.
   */
  async function anotherServer(admission?: AdmissionLimits): Promise<{ baseUrl: string; sql: typeof sql; admission: Admission }> {
    if (stack) throw new Error('anotherServer: a second Node app beside the edge function is not this entry (TEST_ENTRY=edge)')
    const otherSql = createSql(url, { max: 8, statementTimeoutMs: options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS })
    const otherAdmission = new Admission(admission ?? options.admission ?? admissionLimitsFor(8), { reconcileEveryMs: options.reconcileEveryMs })
    const other = createApp({ ...deps, sql: otherSql, admission: otherAdmission })
    const otherUrl = await new Promise<string>((resolve) => {
      others.push(serve({ fetch: closeAfterUnreadBody(other.fetch), hostname: '127.0.0.1', port: 0 }, (info) => resolve(`http://127.0.0.1:${info.port}`)))
    })
    closers.push(() => otherSql.end({ timeout: 5 }))
    return { baseUrl: otherUrl, sql: otherSql, admission: otherAdmission }
  }
  const closers: (() => Promise<void>)[] = []

  return {
    baseUrl,
    /** Where Storage and Realtime answer (the origin of signed URLs; supabase-js's SUPABASE_URL). */
    supabaseUrl,
    /** The entry serving this world. */
    entry: TEST_ENTRY,
    /** The edge stack (TEST_ENTRY=edge), else null. */
    stack,
    databaseUrl: url,
    anotherServer,
    /** The app's fair queue (its stats: calls running and waiting). */
    admission: deps.admission,
    /** Every route the app's router holds (method and Hono path, `:param` style), the storage server's included. */
    routes,
    /** The app's access log, one line per request. */
    accessLog,
    /** Every statement the app's pool sent, in order (for round-trip counts). */
    statements,
    sql,
    request,
    get: <T = any>(path: string, options?: RequestOptions) => request<T>('GET', path, options),
    post: <T = any>(path: string, options?: RequestOptions) => request<T>('POST', path, options),
    patch: <T = any>(path: string, options?: RequestOptions) => request<T>('PATCH', path, options),
    delete: <T = any>(path: string, options?: RequestOptions) => request<T>('DELETE', path, options),
    /** The operator CLI's command, run in-process against this world's database. */
    admin: async <T = any>(...argv: string[]): Promise<T> => (await runAdmin(adminContext, argv)) as T,
    createUser: async (username: string, ...options: string[]): Promise<CreatedUser> =>
      (await runAdmin(adminContext, ['create-user', '--username', username, ...options])) as CreatedUser,
    /** An OAuth client and a token for `user` with `scopes`. */
    token: async (user: string, scopes: string, client: { firstParty?: boolean; chat?: boolean } = {}): Promise<string> => {
      const flags = [...(client.firstParty ? ['--first-party'] : []), ...(client.chat ? ['--chat'] : [])]
      const created = (await runAdmin(adminContext, ['create-oauth-client', '--name', 'Test app', ...flags])) as { client_id: string }
      const issued = (await runAdmin(adminContext, ['issue-token', '--user', user, '--client', created.client_id, '--scopes', scopes])) as { access_token: string }
      return issued.access_token
    },
    sign: signAccessToken,
    /** The Realtime gateway serving this world (stats, partition upkeep). */
    realtime,
    storageDir,
    /** The app's FileStorage (the Supabase Storage adapter over the local Storage API). */
    storage,
    /** A service role key of this world's Storage API. */
    serviceRoleKey: () => storageApi.serviceRoleKey(),
    /** One pass of the storage worker (stale uploads, queued file deletions). */
    maintain: (staleAfter?: string) => runStorageMaintenance(sql, storage, staleAfter),
    /** One pass of the webhook worker with this world's sender (WEBHOOK_ALLOW_PRIVATE as the world's). */
    drainWebhooks: (drain?: DrainOptions) => drainWebhooks(sql, webhookSender, drain),
    /** One pass of the export worker (url fields with the app's {base_url}, archives in this world's storage). */
    runExports: (options: Partial<ExportOptions> = {}) => runExports(sql, storage, { publicUrl: 'http://api.test', ...options }),
    async close() {
      if (stack) await stack.stop()
      else await realtime.close()
      await webhookSender.close()
      await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()))
      for (const other of others) await new Promise<void>((resolve) => other.close(() => resolve()))
      for (const close of closers) await close()
      await sql.end({ timeout: 5 })
      await admin.unsafe(`drop database if exists ${name} with (force)`)
      await admin.end({ timeout: 5 })
      await rm(storageDir, { recursive: true, force: true })
    },
  }
}
