// The consent page in a real browser (issue 16, item 5): Debian's Chromium through playwright-core
// signs in with a one-time code from `login-code`, shows the consent page (screenshot in
// test-output/oauth-consent.png), approves, and lands on the app's redirect_uri with a code that
// oauth4webapi exchanges for a token the API takes. Skipped loudly without Chromium.
import { join } from 'node:path'
import * as oauth from 'oauth4webapi'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startWorld, type TestWorld } from './support/app.ts'
import { BROWSER_MISSING_MESSAGE, chromiumPath, launchBrowser, screenshotDir } from './support/browser.ts'
import { consentInBrowser, discover, insecure } from './support/oauth.ts'
import { startReceiver } from './support/receiver.ts'

if (!chromiumPath) console.warn(BROWSER_MISSING_MESSAGE)

describe.skipIf(!chromiumPath)('the consent page in Chromium', () => {
  let world: TestWorld
  let receiver: Awaited<ReturnType<typeof startReceiver>>
  beforeAll(async () => {
    world = await startWorld()
    receiver = await startReceiver((_req, res) => { res.setHeader('content-type', 'text/html'); res.end('<p>Signed in: you can close this window.</p>') })
  })
  afterAll(async () => {
    await receiver?.close()
    await world?.close()
  })

  it('signs in with a login code, shows the app and its scopes, approves, and lands on the redirect with a code', { timeout: 60_000 }, async () => {
    const alice = await world.createUser('alice')
    const redirectUri = `${receiver.url}/callback`
    const registered = await world.admin('create-oauth-client', '--name', 'Desktop Todo', '--public', '--redirect-uri', redirectUri)
    const client: oauth.Client = { client_id: registered.client_id, token_endpoint_auth_method: 'none' }
    const as = await discover('http://api.test', world.baseUrl)
    const verifier = oauth.generateRandomCodeVerifier()
    const state = oauth.generateRandomState()
    const url = new URL(as.authorization_endpoint!)
    url.search = new URLSearchParams({
      response_type: 'code', client_id: client.client_id, redirect_uri: redirectUri, scope: 'public write', state,
      code_challenge: await oauth.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256',
    }).toString()
    const { code } = await world.admin('login-code', '--user', 'alice')

    const browser = await launchBrowser()
    try {
      const context = await browser.newContext()
      const page = await context.newPage()
      const screenshot = join(await screenshotDir(), 'oauth-consent.png')
      await page.goto(url.toString())
      expect(await page.textContent('h1')).toContain('Desktop Todo')
      const landed = await consentInBrowser(page, { authorizeUrl: url.toString(), loginCode: code, redirectUri, screenshot })
      // The session cookie the browser keeps is HttpOnly and SameSite=Lax.
      const [cookie] = await context.cookies(`${world.baseUrl}/oauth/authorize`)
      expect(cookie).toMatchObject({ name: 'oauth_session', httpOnly: true, sameSite: 'Lax', secure: false })
      expect(await page.textContent('body')).toContain('Signed in')

      const callback = oauth.validateAuthResponse(as, client, landed, state)
      const tokens = await oauth.processAuthorizationCodeResponse(as, client,
        await oauth.authorizationCodeGrantRequest(as, client, oauth.None(), callback, redirectUri, verifier, insecure))
      const me = await world.get('/v1/users/me', { auth: tokens.access_token })
      expect(me.status).toBe(200)
      expect(me.body.id).toBe(alice.id)
    } finally {
      await browser.close()
    }
  })
})
