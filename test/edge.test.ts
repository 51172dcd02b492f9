// Issue 30: the edge entry (supabase/functions/api/index.ts on Deno) as Supabase serves it, behind
// the gateway's /functions/v1/api prefix (local/gateway.ts maps /functions/v1/api/x to the
// function's /api/x), with PUBLIC_URL the prefixed address. Every link a page or document carries
// must lead back through the prefix: built from the /api the function sees, /docs rendered nothing.
import { request } from 'node:http'
import { type Socket, connect } from 'node:net'
import { join } from 'node:path'
import type { Locator } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { JWT_SECRET, WORKER_SECRET, type CreatedUser, type TestWorld, startWorld } from './support/app.ts'
import { freePort } from './support/net.ts'
import { BROWSER_MISSING_MESSAGE, chromiumPath, launchBrowser, offlinePage, screenshotDir } from './support/browser.ts'
import { authorizeQuery, browserless, consent, signIn } from './support/oauth.ts'
import { type EdgeFunction, startEdgeFunction } from '../local/edge-function.ts'
import { type Gateway, startGateway } from '../local/gateway.ts'

const STARTUP_MS = 120_000

let world: TestWorld
let alice: CreatedUser
let fn: EdgeFunction
let gateway: Gateway
/** PUBLIC_URL of the function: the gateway's address and prefix. */
let publicUrl: string

beforeAll(async () => {
  world = await startWorld()
  alice = await world.createUser('alice')
  const port = await freePort()
  gateway = await startGateway({ port: 0, functions: { api: `http://127.0.0.1:${port}` } })
  publicUrl = `${gateway.url}/functions/v1/api`
  fn = await startEdgeFunction({
    port,
    env: { DATABASE_URL: world.databaseUrl, JWT_SECRET, PUBLIC_URL: publicUrl, UPGRADE_URL: 'https://todo.test/upgrade', WORKER_SECRET },
    startupMs: STARTUP_MS,
  })
}, STARTUP_MS + 60_000)

afterAll(async () => {
  await fn?.stop()
  await gateway?.close()
  await world?.close()
})

if (!chromiumPath) console.warn(BROWSER_MISSING_MESSAGE)

describe('links from PUBLIC_URL behind the gateway prefix', () => {
  it('the OpenAPI document names PUBLIC_URL (with its prefix) as its server', async () => {
    const res = await fetch(`${publicUrl}/v1/openapi.json`)
    expect(res.status).toBe(200)
    expect(((await res.json()) as { servers: unknown }).servers).toEqual([{ url: publicUrl }])
  })

  it.skipIf(!chromiumPath)('/docs renders the endpoints in Chromium, its script and document loaded through /functions/v1/api', { timeout: 90_000 }, async () => {
    const browser = await launchBrowser()
    try {
      // Only the gateway answers (the network is off otherwise).
      const { page, requested, blocked, report } = await offlinePage(browser, gateway.url)
      const response = await page.goto(`${publicUrl}/docs`)
      expect(response?.status()).toBe(200)
      const rendered = (locator: Locator) => locator.first().waitFor({ timeout: 30_000 }).catch(async (err) => {
        await page.screenshot({ path: join(await screenshotDir(), 'docs-edge-failed.png') })
        throw new Error(`${err}\n${report()}`.slice(0, 6000))
      })
      // The sidebar first, the introduction with the title a moment later (Scalar 1.46): both,
      // as test/clients-browser.test.ts waits for them on Node.
      await rendered(page.getByText('The authenticated user'))
      await rendered(page.getByRole('heading', { name: 'Todo-Sharing Service API' }))
      const text = await page.textContent('body')
      for (const listed of ['Todo-Sharing Service API', 'Projects', 'Todos', 'Uploads', 'Webhooks']) expect(text).toContain(listed)
      expect(requested.some((u) => u.startsWith(`${publicUrl}/docs/scalar.js`))).toBe(true)
      expect(requested).toContain(`${publicUrl}/v1/openapi.json`)
      // Nothing asked outside the prefix (the /api/… the function sees is not the gateway's), but
      // the browser's own favicon.ico.
      expect(requested.filter((u) => u.startsWith(gateway.url) && !u.startsWith(publicUrl) && !u.endsWith('/favicon.ico'))).toEqual([])
      expect(blocked).toEqual([])
    } finally {
      await browser.close()
    }
  })

  it('the OAuth sign-in and consent forms post under the prefix, and the flow completes through it', async () => {
    const redirectUri = 'https://app.example/callback'
    const client = await world.admin('create-oauth-client', '--name', 'Edge app', '--redirect-uri', redirectUri)
    const params = { client_id: client.client_id, redirect_uri: redirectUri, scope: 'public', state: 'edge' }
    const agent = browserless(publicUrl)
    const signInPage = await agent.get(`/oauth/authorize?${authorizeQuery(params)}`)
    expect(signInPage.status).toBe(200)
    expect(await signInPage.text()).toContain('<form method="post" action="/functions/v1/api/oauth/login">')
    const { code } = await world.admin('login-code', '--user', 'alice')
    const signedIn = await signIn(agent, code, params)
    expect(signedIn.status).toBe(303)
    // The session cookie is scoped to the prefixed path, where the browser sends the forms.
    expect(signedIn.headers.get('set-cookie')).toContain('Path=/functions/v1/api/oauth')
    const consentPage = await agent.get(`/oauth/authorize?${authorizeQuery(params)}`)
    expect(await consentPage.text()).toContain('<form method="post" action="/functions/v1/api/oauth/authorize">')
    const landed = await consent(agent, params)
    expect(landed.origin + landed.pathname).toBe(redirectUri)
    expect(landed.searchParams.get('code')).toBeTruthy()
  })

  it('a member\'s web page links to PUBLIC_URL\'s pages, which the gateway serves', async () => {
    const todo = await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'Shipped the edge function' } })
    expect(todo.status).toBe(201)
    const res = await fetch(`${publicUrl}/@alice`)
    expect(res.status).toBe(200)
    const links = [...(await res.text()).matchAll(/href="([^"]+)"/g)].map((m) => m[1]!)
    expect(links.length).toBeGreaterThan(0)
    for (const link of links) expect(link.startsWith(`${publicUrl}/`), link).toBe(true)
    expect((await fetch(links[0]!.replaceAll('&amp;', '&'))).status).toBe(200)
  })
})

describe('PUBLIC_URL, never the request\'s Host or forwarding headers', () => {
  it('a client that names another host (Host, X-Forwarded-Host/Proto, Forwarded) gets links to PUBLIC_URL only', async () => {
    const todo = await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'Links stay home' } })
    expect(todo.status).toBe(201)
    const client = await world.admin('create-oauth-client', '--name', 'Host app', '--redirect-uri', 'https://app.example/callback')
    const lying = {
      host: 'evil.example', 'x-forwarded-host': 'evil.example', 'x-forwarded-proto': 'https', 'x-forwarded-prefix': '/phish',
      forwarded: 'host=evil.example;proto=https', authorization: `Bearer ${alice.api_key}`,
    }
    const { hostname, port } = new URL(gateway.url)
    const get = (path: string) => new Promise<string>((resolve, reject) => {
      const req = request({ hostname, port, path: `/functions/v1/api${path}`, headers: lying, agent: false }, (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (chunk: string) => (text += chunk))
        res.on('end', () => resolve(`${res.statusCode} ${JSON.stringify(res.headers)}\n${text}`))
      })
      req.on('error', reject)
      req.end()
    })
    const answers = [
      await get('/docs'), await get('/v1/openapi.json'), await get(`/v1/todos/${todo.body.id}`), await get('/@alice'),
      await get(`/oauth/authorize?${authorizeQuery({ client_id: client.client_id, redirect_uri: 'https://app.example/callback', scope: 'public', state: 's' })}`),
    ]
    for (const answer of answers) {
      expect(answer).toMatch(/^200 /)
      expect(answer).not.toMatch(/evil\.example|phish/)
    }
    expect(answers[1]).toContain(`"servers":[{"url":"${publicUrl}"}]`)
    expect(answers[2]).toContain(`"${publicUrl}/todos/`)
    expect(answers[4]).toContain('action="/functions/v1/api/oauth/login"')
  })
})

/** Sends `head` (and `body`, if any) on a raw socket; resolves to the answer's status line and header lines. */
function rawHead(url: string, head: string, body?: Buffer): Promise<{ statusLine: string; headers: string[]; closed: Promise<void>; socket: Socket }> {
  const { hostname, port } = new URL(url)
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname)
    let received = Buffer.alloc(0)
    const closed = new Promise<void>((done) => socket.once('close', () => done()))
    socket.on('error', () => {})
    socket.once('connect', () => {
      socket.write(head)
      if (body) socket.write(body)
    })
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk])
      const end = received.indexOf('\r\n\r\n')
      if (end < 0) return
      const [statusLine, ...headers] = received.subarray(0, end).toString('latin1').split('\r\n')
      resolve({ statusLine: statusLine!, headers, closed, socket })
    })
    setTimeout(() => reject(new Error(`no answer's head within 30 s: ${received.toString('latin1').slice(0, 500)}`)), 30_000).unref()
  })
}

describe('Connection: close on the edge', () => {
  it('a 413 refused before its body is read carries one Connection: close (Deno\'s), and the socket closes', async () => {
    // 2 MiB declared, none of it sent yet: the app answers 413 at once, from the declared length.
    const head = `POST /api/v1/todos HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${alice.api_key}\r\n`
      + 'Content-Type: application/json\r\nContent-Length: 2097152\r\n\r\n'
    const answer = await rawHead(fn.url, head)
    expect(answer.statusLine).toMatch(/^HTTP\/1\.1 413 /)
    const connection = answer.headers.filter((line) => /^connection:/i.test(line))
    expect(connection.map((line) => line.toLowerCase().replace(/\s+/g, ''))).toEqual(['connection:close'])
    // Deno (2.9) keeps the socket until the declared body has arrived, then closes it: the client
    // that sends what it declared (as most do, answer or not) sees the end, and no second answer.
    answer.socket.write(Buffer.alloc(2 * 1024 * 1024, 0x20))
    await answer.closed
  })
})
