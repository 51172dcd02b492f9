// The Supabase Edge Function (supabase/functions/api) on Deno: the same app as on Node,
// served under /api. Each answer must equal the Node world's for the path without /api.
// The first run downloads the npm packages into Deno's cache (DENO_DIR), hence the timeouts.
import { type ChildProcess, execFile, spawn } from 'node:child_process'
import { mkdtemp, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { promisify } from 'node:util'
import { request as httpRequest } from 'node:http'
import { gunzipSync } from 'node:zlib'
import { PNG } from 'pngjs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { JWT_SECRET, type CreatedUser, type TestWorld, startWorld } from './support/app.ts'
import { freePort } from './support/net.ts'
import * as oauth from 'oauth4webapi'
import { authorizeQuery, browserless, consent, discover, insecure, signIn } from './support/oauth.ts'

const ROOT = resolve(import.meta.dirname, '..')
const DENO = join(ROOT, 'node_modules', '.bin', 'deno')
const FUNCTION_DIR = join(ROOT, 'supabase', 'functions', 'api')
const ENTRY = join(FUNCTION_DIR, 'index.ts')
const CONFIG = join(FUNCTION_DIR, 'deno.json')
const STARTUP_MS = 120_000
const DOCS_SCRIPT = join(ROOT, 'node_modules', '@scalar', 'api-reference', 'dist', 'browser', 'standalone.js')

/** A GET as raw bytes, so a Content-Encoding is seen as sent. */
function raw(url: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { headers }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }))
    })
    req.on('error', reject)
    req.end()
  })
}

interface Answer {
  status: number
  body: unknown
}

interface DenoServer {
  url: string
  output: () => string
  stop: () => Promise<void>
}

let world: TestWorld
let alice: CreatedUser
let bob: CreatedUser
const servers: DenoServer[] = []
const tempDirs: string[] = []

/** What the function reads on Supabase, pointed at this world's database. */
function functionEnv(port: number): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env }
  for (const name of ['SUPABASE_DB_URL', 'SUPABASE_URL', 'PUBLIC_URL', 'UPGRADE_URL']) delete env[name]
  return {
    ...env,
    NO_COLOR: '1',
    DATABASE_URL: world.databaseUrl,
    JWT_SECRET,
    // The Node world's deps, so that url fields and upgrade_url compare equal.
    PUBLIC_URL: 'http://api.test',
    UPGRADE_URL: 'https://todo.test/upgrade',
    PORT: String(port),
  }
}

/** Runs `deno run ...args` and resolves once it answers HTTP on its port. */
async function startDeno(args: string[], cwd: string): Promise<DenoServer> {
  const port = await freePort()
  const url = `http://127.0.0.1:${port}`
  let log = ''
  const child: ChildProcess = spawn(DENO, ['run', ...args], { cwd, env: functionEnv(port), stdio: ['ignore', 'pipe', 'pipe'] })
  const collect = (chunk: Buffer) => {
    log = (log + chunk.toString()).slice(-20_000)
  }
  child.stdout?.on('data', collect)
  child.stderr?.on('data', collect)
  const exited = new Promise<void>((done) => child.once('exit', () => done()))
  let gone = false
  void exited.then(() => (gone = true))

  const server: DenoServer = {
    url,
    output: () => log,
    async stop() {
      if (gone) return
      child.kill('SIGTERM')
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000)
      await exited
      clearTimeout(timer)
    },
  }
  servers.push(server)

  const deadline = Date.now() + STARTUP_MS
  while (Date.now() < deadline) {
    if (gone) throw new Error(`deno exited before answering (code ${child.exitCode}):\n${log}`)
    try {
      await fetch(`${url}/api/v1/openapi.json`, { signal: AbortSignal.timeout(2_000) })
      return server
    } catch {
      await new Promise((r) => setTimeout(r, 200))
    }
  }
  await server.stop()
  throw new Error(`deno did not answer on ${url} within ${STARTUP_MS} ms:\n${log}`)
}

async function ask(url: string, auth?: string): Promise<Answer> {
  const response = await fetch(url, { headers: auth ? { authorization: `Bearer ${auth}` } : {} })
  const text = await response.text()
  let body: unknown = text
  try {
    body = JSON.parse(text)
  } catch {}
  return { status: response.status, body }
}

/** The Deno answer for /api + path, and the Node world's for path. */
async function both(server: DenoServer, path: string, auth?: string): Promise<{ deno: Answer; node: Answer }> {
  const node = await world.get(path, { auth })
  return { deno: await ask(`${server.url}/api${path}`, auth), node: { status: node.status, body: node.body } }
}

beforeAll(async () => {
  world = await startWorld()
  alice = await world.createUser('alice')
  bob = await world.createUser('bob')
  await world.admin('create-project', '--owner', 'alice', '--name', 'Edge launch', '--makers', 'bob')
}, STARTUP_MS + 60_000)

afterAll(async () => {
  await Promise.all(servers.map((s) => s.stop()))
  await Promise.all(tempDirs.map((d) => rm(d, { recursive: true, force: true })))
  await world?.close()
})

describe('supabase/functions/api on Deno', () => {
  let server: DenoServer

  beforeAll(async () => {
    server = await startDeno(
      // Read access to the one static file the function ships (static_files in supabase/config.toml).
      ['--check', '--allow-net', '--allow-env', `--allow-read=${DOCS_SCRIPT}`, '--node-modules-dir=none', '--config', CONFIG, ENTRY],
      ROOT,
    )
  }, STARTUP_MS + 60_000)

  it.each([
    ['GET /v1/users/me', '/v1/users/me', 'alice', 200],
    ['GET /v1/users/{username}', '/v1/users/bob', 'alice', 200],
    ['GET /v1/users/{username}/projects', '/v1/users/alice/projects', 'bob', 200],
    ['GET /v1/projects', '/v1/projects', 'alice', 200],
    ['a .json suffix', '/v1/users/me.json', 'bob', 200],
    ['an unknown route', '/v1/nothing-here', 'alice', 404],
    ['no credential', '/v1/users/me', null, 403],
    ['an unknown key', '/v1/users/me', 'svc_sk_not-a-real-key', 403],
  ] as const)('%s answers as on Node', async (_name, path, who, status) => {
    const auth = who === 'alice' ? alice.api_key : who === 'bob' ? bob.api_key : (who ?? undefined)
    const { deno, node } = await both(server, path, auth)
    expect(node.status).toBe(status)
    expect(deno).toEqual(node)
  })

  it('a project read by id answers as on Node', async () => {
    const list = await world.get('/v1/projects', { auth: alice.api_key })
    const id = JSON.stringify(list.body).match(/proj_[0-9a-f]{32}/)?.[0]
    expect(id).toBeDefined()
    const { deno, node } = await both(server, `/v1/projects/${id}`, alice.api_key)
    expect(node.status).toBe(200)
    expect(deno).toEqual(node)
  })

  it('the 404 names the path without the /api prefix', async () => {
    const res = await ask(`${server.url}/api/v1/nothing-here`, alice.api_key)
    expect(res).toEqual({ status: 404, body: { error: 'No route matches GET /v1/nothing-here.' } })
  })

  it('OAuth on Deno: sign-in, consent, code + PKCE, refresh and revoke with oauth4webapi; errors as on Node', async () => {
    const base = `${server.url}/api`
    const redirectUri = 'https://app.example/callback'
    const registered = await world.admin('create-oauth-client', '--name', 'Deno app', '--redirect-uri', redirectUri)
    const as = await discover('http://api.test', base)
    const client: oauth.Client = { client_id: registered.client_id }
    const auth = oauth.ClientSecretBasic(registered.client_secret)
    const verifier = oauth.generateRandomCodeVerifier()
    const params = { client_id: registered.client_id, redirect_uri: redirectUri, scope: 'public', state: 'deno',
      code_challenge: await oauth.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256' }
    const agent = browserless(base)
    const { code } = await world.admin('login-code', '--user', 'alice')
    expect((await signIn(agent, code, params)).status).toBe(303)
    // The consent page (CSRF token beside reflected input) is never compressed, by us or by Deno.serve (BREACH).
    const page = await raw(`${base}/oauth/authorize?${authorizeQuery(params)}`, { cookie: agent.cookie!, 'accept-encoding': 'gzip, br' })
    expect(page.status).toBe(200)
    expect(page.body.toString()).toContain('name="csrf_token"')
    expect(page.headers['content-encoding']).toBeUndefined()
    const landed = await consent(agent, params)
    const tokens = await oauth.processAuthorizationCodeResponse(as, client,
      await oauth.authorizationCodeGrantRequest(as, client, auth, oauth.validateAuthResponse(as, client, landed, 'deno'), redirectUri, verifier, insecure))
    expect((await ask(`${base}/v1/users/me`, tokens.access_token)).status).toBe(200)
    const refreshed = await oauth.processRefreshTokenResponse(as, client, await oauth.refreshTokenGrantRequest(as, client, auth, tokens.refresh_token!, insecure))
    await oauth.processRevocationResponse(await oauth.revocationRequest(as, client, auth, refreshed.access_token, insecure))
    expect((await ask(`${base}/v1/users/me`, refreshed.access_token)).status).toBe(403)

    const form = { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'grant_type=refresh_token&refresh_token=x&client_id=nobody' }
    const [onDeno, onNode] = await Promise.all([fetch(`${base}/oauth/token`, form), fetch(`${world.baseUrl}/oauth/token`, form)])
    expect(onDeno.status).toBe(401)
    expect(await onDeno.json()).toEqual(await onNode.json())
  })

  it('the OpenAPI document names PUBLIC_URL as its server (not the /api the function sees), and /api/docs is served', async () => {
    const doc = await ask(`${server.url}/api/v1/openapi.json`)
    expect(doc.status).toBe(200)
    expect((doc.body as { servers: unknown }).servers).toEqual([{ url: 'http://api.test' }])
    const docs = await fetch(`${server.url}/api/docs`)
    expect(docs.status).toBe(200)
    // Links from PUBLIC_URL (http://api.test: no path), as test/edge.test.ts checks behind the gateway's prefix.
    const html = await docs.text()
    expect(html).toContain('/v1/openapi.json')
    expect(html).not.toContain('/api/v1/openapi.json')
  })
})

describe('issue 18 on Deno: what clients expect works on the edge function too', () => {
  let server: DenoServer
  beforeAll(async () => {
    server = servers[0]!
    for (let i = 0; i < 12; i++) await world.post('/v1/todos', { auth: alice.api_key, json: { body: `Edge todo ${i}: a body long enough that a page of them passes one kilobyte` } })
  })

  it('a CORS preflight of /api/oauth/token and of /api/v1 is answered; answers carry the origin header', async () => {
    for (const path of ['/api/oauth/token', '/api/v1/todos']) {
      const res = await fetch(`${server.url}${path}`, { method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' } })
      expect(res.status, path).toBe(204)
      expect(res.headers.get('access-control-allow-origin')).toBe('*')
    }
    const res = await fetch(`${server.url}/api/v1/users/me`, { headers: { authorization: `Bearer ${alice.api_key}` } })
    expect(res.headers.get('access-control-allow-origin')).toBe('*')
  })

  it('gzip once (never again by Deno.serve), the same ETag as on Node, 304, and the request id', async () => {
    const url = `${server.url}/api/v1/todos?limit=25`
    const packed = await raw(url, { authorization: `Bearer ${alice.api_key}`, 'accept-encoding': 'gzip', 'x-request-id': 'edge-1' })
    expect(packed.status).toBe(200)
    expect(packed.headers['content-encoding']).toBe('gzip')
    expect(packed.headers['x-request-id']).toBe('edge-1')
    const node = await world.get('/v1/todos?limit=25', { auth: alice.api_key })
    expect(JSON.parse(gunzipSync(packed.body).toString())).toEqual(node.body)
    expect(packed.headers.etag).toBe(node.headers.get('etag'))
    const again = await raw(url, { authorization: `Bearer ${alice.api_key}`, 'if-none-match': String(packed.headers.etag) })
    expect(again.status).toBe(304)
  })

  it('/api/health, a generated avatar and the reference\'s script are served', async () => {
    expect((await ask(`${server.url}/api/health`)).body).toEqual({ status: 'ok' })
    const me = await world.get('/v1/users/me', { auth: alice.api_key })
    const avatar = await fetch(me.body.avatar.small.replace('http://api.test', `${server.url}/api`))
    expect(avatar.status).toBe(200)
    expect(avatar.headers.get('content-type')).toBe('image/png')
    const nodeAvatar = await fetch(me.body.avatar.small.replace('http://api.test', world.baseUrl))
    // The same pixels (the deflate streams of the two runtimes may differ byte for byte).
    const pixels = async (res: Response) => PNG.sync.read(Buffer.from(await res.arrayBuffer())).data
    expect((await pixels(avatar)).equals(await pixels(nodeAvatar))).toBe(true)
    const docs = await (await fetch(`${server.url}/api/docs`)).text()
    expect(docs).toContain('/docs/scalar.js')
    const script = await raw(`${server.url}/api/docs/scalar.js`, { 'accept-encoding': 'gzip' })
    expect(script.status).toBe(200)
    expect(script.headers['content-type']).toMatch(/javascript/)
    expect(gunzipSync(script.body).length).toBe((await stat(DOCS_SCRIPT)).size)
  })
})

describe('the deploy bundle (deno bundle)', () => {
  it(
    'bundles into one file that serves the same answers',
    async () => {
      const dir = await mkdtemp(join(tmpdir(), 'todo-deno-bundle-'))
      tempDirs.push(dir)
      const out = join(dir, 'api.js')
      await promisify(execFile)(DENO, ['bundle', '--quiet', '--node-modules-dir=none', '--config', CONFIG, '-o', out, ENTRY], {
        cwd: ROOT,
        env: { ...process.env, NO_COLOR: '1' },
        timeout: STARTUP_MS,
      })
      expect((await stat(out)).size).toBeGreaterThan(10_000)

      // Run from the temp dir with no config: the bundle needs nothing but itself.
      const bundled = await startDeno(['--no-config', '--allow-net', '--allow-env', out], dir)
      const { deno, node } = await both(bundled, '/v1/users/me', alice.api_key)
      expect(node.status).toBe(200)
      expect(deno).toEqual(node)
      const anonymous = await both(bundled, '/v1/users/me')
      expect(anonymous.deno).toEqual(anonymous.node)
      expect(anonymous.deno.status).toBe(403)
    },
    STARTUP_MS * 2,
  )
})
