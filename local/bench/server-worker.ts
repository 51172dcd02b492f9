// A server under test, run in a worker thread of the bench process: the API (createApp from
// functions/app.ts on @hono/node-server, as `npm start` serves it) or PostGraphile v5 over the
// same api.* functions (from the bench's own install, local/bench/postgraphile.ts). Its own
// thread, so autocannon in the main thread does not share its event loop. Protocol: posts
// {port} when listening; on 'stop' closes and posts 'stopped'.
import type { FileStorage } from '../../functions/lib/storage.ts'
import { createServer, type Server as HttpServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { parentPort, workerData } from 'node:worker_threads'
import { serve } from '@hono/node-server'
import { closeAfterUnreadBody } from '../node-http.ts'
import { createApp, type AppDeps } from '../../functions/app.ts'
import { createSql } from '../../functions/lib/sql.ts'
import type { AdmissionLimits } from '../../functions/lib/admission.ts'
import { postGraphileRequire } from './postgraphile.ts'

export interface ServerWorkerData {
  kind: 'api' | 'postgraphile'
  databaseUrl: string
  publicUrl: string
  jwtSecret: string
  upgradeUrl: string
  pool: number
  /** PostGraphile: request.jwt.claims (as app.authenticate returns them) by Authorization header. */
  claims: Record<string, string>
  /** API: the fair queue's limits; unset: as npm start derives them from the pool. */
  admission?: AdmissionLimits
  /** PostGraphile: the folder ensurePostGraphile installed it into. */
  postgraphileDir?: string
}

const data = workerData as ServerWorkerData
const port = parentPort!

// Between runs the bench cancels statements of requests autocannon abandoned at the end of a
// run (57014 query_canceled); the servers log those as 500s. Everything else is still logged.
for (const method of ['error', 'log'] as const) {
  const original = console[method].bind(console)
  console[method] = (...args: unknown[]) => {
    if (args.some((a) => (a as { code?: string } | null)?.code === '57014' || /canceling statement due to user request/.test(String(a)))) return
    original(...args)
  }
}

/** The benchmark never uploads: a storage that refuses, for apps whose deps include one. */
const noStorage: FileStorage = {
  signUpload: async () => { throw new Error('the benchmark does not upload files') },
  fileResponse: async () => new Response('not found', { status: 404 }),
  deleteFiles: async () => {},
  readStart: async () => null,
}

async function startApi(): Promise<{ server: HttpServer; close: () => Promise<void> }> {
  const sql = createSql(data.databaseUrl, { max: data.pool })
  const deps = { sql, publicUrl: data.publicUrl, jwtSecret: data.jwtSecret, upgradeUrl: data.upgradeUrl, storage: noStorage, admission: data.admission } as AppDeps
  const app = createApp(deps)
  const server = await new Promise<HttpServer>((resolve) => {
    const s = serve({ fetch: closeAfterUnreadBody(app.fetch), hostname: '127.0.0.1', port: 0 }, () => resolve(s as HttpServer)) as HttpServer
  })
  return { server, close: () => sql.end({ timeout: 2 }) }
}

interface PostGraphileInstance {
  getSchemaResult(): Promise<unknown>
  createServ(grafserv: unknown): { addTo(server: HttpServer, addExtra: boolean): Promise<void> }
  release(): Promise<void>
}

async function startPostGraphile(): Promise<{ server: HttpServer; close: () => Promise<void> }> {
  process.env.GRAPHILE_ENV ??= 'production'
  // PostGraphile 5.1 declares Node ≥ 22; the one newer API it uses is Promise.withResolvers
  // (Node 22). The same few lines as the native one, so Node 20 runs it unchanged.
  const P = Promise as unknown as { withResolvers?: () => unknown }
  P.withResolvers ??= () => {
    let resolve!: (value: unknown) => void
    let reject!: (reason?: unknown) => void
    const promise = new Promise((res, rej) => { resolve = res; reject = rej })
    return { promise, resolve, reject }
  }
  if (!data.postgraphileDir) throw new Error('postgraphile: no postgraphileDir (ensurePostGraphile installs it)')
  // Not in the project's node_modules (issue 29), so no types either: the few shapes used here.
  const load = postGraphileRequire(data.postgraphileDir)
  const { postgraphile } = load('postgraphile') as { postgraphile: (preset: object) => PostGraphileInstance }
  const { PostGraphileAmberPreset } = load('postgraphile/presets/amber') as { PostGraphileAmberPreset: object }
  const { makePgService } = load('postgraphile/adaptors/pg') as { makePgService: (options: object) => object }
  const { grafserv } = load('postgraphile/grafserv/node') as { grafserv: unknown }
  const preset = {
    extends: [PostGraphileAmberPreset],
    pgServices: [
      makePgService({
        connectionString: data.databaseUrl,
        schemas: ['api'],
        pubsub: false,
        poolConfig: { max: data.pool, application_name: 'todo-bench-postgraphile' },
        // What PostgREST and our API do per request: role `authenticated` with the claims of
        // the credential, and app.public_url; PostGraphile sets them with set_config in a
        // transaction around the query.
        pgSettings: (ctx: unknown) => {
          const auth = (ctx as { node?: { req?: { headers?: Record<string, string | undefined> } } }).node?.req?.headers?.authorization
          const claims = auth ? data.claims[auth] : undefined
          if (!claims) return { role: 'anon' }
          return { role: 'authenticated', 'request.jwt.claims': claims, 'app.public_url': data.publicUrl }
        },
      }),
    ],
    grafserv: { graphqlPath: '/graphql', graphiql: false, watch: false },
    grafast: { explain: false },
  }
  const pgl = postgraphile(preset)
  await pgl.getSchemaResult()
  const serv = pgl.createServ(grafserv)
  const server = createServer()
  await serv.addTo(server, false)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { server, close: async () => { await pgl.release() } }
}

const started = data.kind === 'api' ? await startApi() : await startPostGraphile()
port.postMessage({ port: (started.server.address() as AddressInfo).port })
port.on('message', async (message) => {
  if (message !== 'stop') return
  started.server.closeAllConnections?.()
  await new Promise((resolve) => started.server.close(resolve))
  await started.close().catch(() => {})
  port.postMessage('stopped')
})
