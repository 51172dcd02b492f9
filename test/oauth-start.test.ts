// Issue 16, "done when": a real OAuth client (oauth4webapi) and a real browser (Chromium) complete
// the whole flow against `npm start`, with clients and sign-in codes from the real operator CLI:
// discovery → authorize → sign in → consent → token → API call → refresh → revoke → introspect.
// Without Chromium the consent page is driven by plain HTTP forms instead, and the run says so.
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import * as oauth from 'oauth4webapi'
import { afterAll, expect, it } from 'vitest'
import { BROWSER_MISSING_MESSAGE, chromiumPath, launchBrowser, screenshotDir } from './support/browser.ts'
import { freePort } from './support/net.ts'
import { browserless, consent, consentInBrowser, insecure, signIn } from './support/oauth.ts'
import { interrupt, runCli, startServer } from './support/process.ts'
import { startReceiver } from './support/receiver.ts'

if (!chromiumPath) console.warn(`${BROWSER_MISSING_MESSAGE}*** test/oauth-start.test.ts drives the consent page with plain HTTP forms instead.\n`)

const dirs: string[] = []
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true })
})

// The name says which consent the run exercised (issue 31): with Chromium the page is driven in
// the browser; without it, by plain HTTP forms, and the test is named for that, not for Chromium.
const CONSENT = chromiumPath ? 'Chromium' : 'plain HTTP forms (no Chromium on this machine)'

it(`npm start: oauth4webapi and ${CONSENT} complete authorize → consent → token → API → refresh → revoke → introspect`, { timeout: 180_000 }, async () => {
  const receiver = await startReceiver((_req, res) => { res.end('signed in') })
  const dataDir = await mkdtemp(join(tmpdir(), 'todo-start-oauth-'))
  dirs.push(dataDir)
  const env = { DATA_DIR: dataDir, PORT: String(await freePort()), EMBEDDED_POSTGRES_PORT: String(await freePort()), DATABASE_URL: '', JWT_SECRET: '' }
  const issuer = `http://127.0.0.1:${env.PORT}`
  const server = await startServer(env)
  try {
    const cli = async (...args: string[]) => {
      const run = await runCli(args, env)
      expect(run.code, run.stderr).toBe(0)
      return JSON.parse(run.stdout)
    }
    const alice = await cli('create-user', '--username', 'alice')
    const redirectUri = `${receiver.url}/callback`
    const registered = await cli('create-oauth-client', '--name', 'Todo Desktop', '--public', '--redirect-uri', redirectUri, '--redirect-uri', 'http://127.0.0.1:9/other')
    expect(registered.client_secret).toBeNull()
    const { code: loginCode } = await cli('login-code', '--user', 'alice')

    // Discovery exactly as a client does it: the issuer is PUBLIC_URL (here http://HOST:PORT).
    const as = await oauth.processDiscoveryResponse(new URL(issuer), await oauth.discoveryRequest(new URL(issuer), { ...insecure, algorithm: 'oauth2' }))
    const client: oauth.Client = { client_id: registered.client_id, token_endpoint_auth_method: 'none' }
    const verifier = oauth.generateRandomCodeVerifier()
    const state = oauth.generateRandomState()
    const params = {
      client_id: client.client_id, redirect_uri: redirectUri, scope: 'public write', state,
      code_challenge: await oauth.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256',
    }
    const authorizeUrl = new URL(as.authorization_endpoint!)
    authorizeUrl.search = new URLSearchParams({ response_type: 'code', ...params }).toString()

    let landed: URL
    if (chromiumPath) {
      const browser = await launchBrowser()
      try {
        const page = await browser.newPage()
        landed = await consentInBrowser(page, { authorizeUrl: authorizeUrl.toString(), loginCode, redirectUri, screenshot: join(await screenshotDir(), 'oauth-consent-npm-start.png') })
      } finally {
        await browser.close()
      }
    } else {
      const agent = browserless(issuer)
      expect((await signIn(agent, loginCode, params)).status).toBe(303)
      landed = await consent(agent, params)
    }

    const callback = oauth.validateAuthResponse(as, client, landed, state)
    const tokens = await oauth.processAuthorizationCodeResponse(as, client,
      await oauth.authorizationCodeGrantRequest(as, client, oauth.None(), callback, redirectUri, verifier, insecure))
    const me = await fetch(`${issuer}/v1/users/me`, { headers: { authorization: `Bearer ${tokens.access_token}` } })
    expect(me.status).toBe(200)
    expect((await me.json()).id).toBe(alice.id)
    const posted = await fetch(`${issuer}/v1/todos`, { method: 'POST', headers: { authorization: `Bearer ${tokens.access_token}`, 'content-type': 'application/json' }, body: JSON.stringify({ body: 'signed in with OAuth' }) })
    expect(posted.status).toBe(201)

    const refreshed = await oauth.processRefreshTokenResponse(as, client, await oauth.refreshTokenGrantRequest(as, client, oauth.None(), tokens.refresh_token!, insecure))
    const info = await fetch(`${issuer}/oauth/token/info`, { headers: { authorization: `Bearer ${refreshed.access_token}` } })
    expect(await info.json()).toMatchObject({ resource_owner_id: alice.id, scope: ['public', 'write'], application: { uid: client.client_id } })

    await oauth.processRevocationResponse(await oauth.revocationRequest(as, client, oauth.None(), refreshed.refresh_token!, insecure))
    const introspection = await oauth.processIntrospectionResponse(as, client, await oauth.introspectionRequest(as, client, oauth.None(), refreshed.access_token, insecure))
    expect(introspection).toEqual({ active: false })
    expect((await fetch(`${issuer}/v1/users/me`, { headers: { authorization: `Bearer ${refreshed.access_token}` } })).status).toBe(403)
  } finally {
    expect([0, 'SIGINT']).toContain(await interrupt(server.child))
    await receiver.close()
  }
})
