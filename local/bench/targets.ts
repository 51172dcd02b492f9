// The systems under test besides the database limit: our API and PostGraphile (each in a
// worker thread), PostgREST (a child process, only when a `postgrest` binary is on PATH), and
// how one api.* call is phrased as a request to each.
import { spawn } from 'node:child_process'
import { accessSync, constants } from 'node:fs'
import { createServer } from 'node:net'
import { delimiter, join } from 'node:path'
import { Worker } from 'node:worker_threads'
import { SignJWT } from 'jose'
import type { Sql } from 'postgres'
import type { ServerWorkerData } from './server-worker.ts'

export interface RunningTarget {
  baseUrl: string
  stop(): Promise<void>
}

/** Starts local/bench/server-worker.ts in a worker thread (TypeScript through tsx's loader). */
export async function startServerWorker(data: ServerWorkerData): Promise<RunningTarget> {
  const entry = new URL('./server-worker.ts', import.meta.url).href
  const tsx = import.meta.resolve('tsx/esm/api')
  const boot = `import(${JSON.stringify(tsx)}).then((tsx) => { tsx.register(); return import(${JSON.stringify(entry)}) })`
  const worker = new Worker(boot, { eval: true, workerData: data })
  const port = await new Promise<number>((resolve, reject) => {
    worker.once('message', (m: { port: number }) => resolve(m.port))
    worker.once('error', reject)
    worker.once('exit', (code) => reject(new Error(`${data.kind} server worker exited with code ${code}`)))
  })
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    stop: async () => {
      const stopped = new Promise((resolve) => worker.once('message', resolve))
      worker.postMessage('stop')
      await Promise.race([stopped, new Promise((resolve) => setTimeout(resolve, 5000))])
      await worker.terminate()
    },
  }
}

// ---------------------------------------------------------------------------------------------
// GraphQL (PostGraphile) and RPC (PostgREST) phrasing of an api.* call
// ---------------------------------------------------------------------------------------------

export interface Signature {
  fn: string
  argNames: string[]
  argTypes: string[]
  volatile: boolean
}

export async function functionSignature(sql: Sql, fn: string): Promise<Signature> {
  const [schema, name] = fn.split('.') as [string, string]
  const rows = await sql<{ names: string[]; types: string[]; volatile: boolean }[]>`
    select p.proargnames as names, array(select format_type(t, null) from unnest(p.proargtypes) t) as types,
           p.provolatile = 'v' as volatile
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
    where n.nspname = ${schema} and p.proname = ${name}`
  if (rows.length !== 1) throw new Error(`${fn}: expected one function, found ${rows.length}`)
  const row = rows[0]!
  return { fn, argNames: row.names, argTypes: row.types, volatile: row.volatile }
}

const camel = (s: string) => s.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase())

const GRAPHQL_TYPES: Record<string, string> = {
  text: 'String', jsonb: 'JSON', json: 'JSON', integer: 'Int', boolean: 'Boolean', uuid: 'UUID',
  'text[]': '[String]', 'uuid[]': '[UUID]', bigint: 'BigInt',
}

export interface GraphqlCall {
  field: string
  mutation: boolean
  query: string
}

/** PostGraphile's field for an api function: stable ones are Query fields, volatile ones mutations. */
export function graphqlCall(signature: Signature): GraphqlCall {
  const field = camel(signature.fn.split('.')[1]!)
  const vars = signature.argNames.map((name, i) => {
    const type = GRAPHQL_TYPES[signature.argTypes[i]!]
    if (!type) throw new Error(`${signature.fn}: no GraphQL type for ${signature.argTypes[i]}`)
    return { name: camel(name), type }
  })
  const declared = vars.map((v) => `$${v.name}: ${v.type}`).join(', ')
  const passed = vars.map((v) => `${v.name}: $${v.name}`).join(', ')
  const query = signature.volatile
    ? `mutation(${declared}) { ${field}(input: { ${passed} }) { result } }`
    : `query(${declared}) { ${field}(${passed}) }`
  return { field, mutation: signature.volatile, query }
}

export function graphqlBody(signature: Signature, call: GraphqlCall, args: unknown[]): string {
  const variables = Object.fromEntries(signature.argNames.map((name, i) => [camel(name), args[i] ?? null]))
  return JSON.stringify({ query: call.query, variables })
}

/** The JSON value the api function returned, from a PostGraphile response body. */
export function graphqlResult(call: GraphqlCall, text: string): unknown {
  const body = JSON.parse(text) as { data?: Record<string, unknown>; errors?: { message: string }[] }
  if (body.errors?.length) throw new Error(`GraphQL error: ${body.errors.map((e) => e.message).join('; ')}`)
  const value = body.data?.[call.field]
  return call.mutation ? (value as { result: unknown } | null)?.result : value
}

export function rpcBody(signature: Signature, args: unknown[]): string {
  return JSON.stringify(Object.fromEntries(signature.argNames.map((name, i) => [name, args[i] ?? null])))
}

// ---------------------------------------------------------------------------------------------
// PostgREST (optional)
// ---------------------------------------------------------------------------------------------

export function findOnPath(binary: string): string | null {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue
    try {
      accessSync(join(dir, binary), constants.X_OK)
      return join(dir, binary)
    } catch {}
  }
  return null
}

async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port
      s.close(() => resolve(port))
    })
  })
}

/**
 * Starts PostgREST on the database with the api schema exposed, the JWT secret `secret` and a
 * pool of `pool`. It connects as the database URL's user and switches to the role of the JWT,
 * as on Supabase. app.public_url is not set there (PostgREST sets only request.* settings),
 * so its URLs use the SQL default: same work, other host in url fields.
 */
export async function startPostgrest(binary: string, databaseUrl: string, pool: number, secret: string): Promise<RunningTarget> {
  const port = await freePort()
  const child = spawn(binary, [], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: {
      ...process.env,
      PGRST_DB_URI: databaseUrl,
      PGRST_DB_SCHEMAS: 'api',
      PGRST_DB_ANON_ROLE: 'anon',
      PGRST_DB_POOL: String(pool),
      PGRST_JWT_SECRET: secret,
      PGRST_SERVER_HOST: '127.0.0.1',
      PGRST_SERVER_PORT: String(port),
      PGRST_LOG_LEVEL: 'crit',
    },
  })
  let stderr = ''
  child.stderr!.on('data', (d: Buffer) => { stderr += d.toString() })
  const baseUrl = `http://127.0.0.1:${port}`
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error(`postgrest exited: ${stderr.slice(-500)}`)
    try {
      const res = await fetch(`${baseUrl}/`)
      if (res.status < 500) break
    } catch {}
    if (i > 100) {
      child.kill()
      throw new Error(`postgrest did not answer on ${baseUrl}: ${stderr.slice(-500)}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  return {
    baseUrl,
    stop: async () => {
      child.kill('SIGTERM')
      await new Promise((resolve) => (child.exitCode !== null ? resolve(null) : child.once('exit', resolve)))
    },
  }
}

/** A PostgREST bearer token carrying `claims` (role authenticated, sub, kind, scopes …). */
export async function postgrestToken(secret: string, claims: Record<string, unknown>): Promise<string> {
  return await new SignJWT(claims)
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setExpirationTime('2h')
    .sign(new TextEncoder().encode(secret))
}
