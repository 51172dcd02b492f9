// The member's OAuth pages in a real browser (issue 28, item 5): Debian's Chromium through
// playwright-core. A web app asks with an empty scope and the consent page shows its default
// scopes; asked again, the approval is remembered (no page, straight back to the app); the page
// of authorized apps lists it (screenshot in test-output/oauth-apps.png), Revoke ends its token,
// Sign out ends the session, and the apps page's own sign-in form brings the member back to it.
// Skipped loudly without Chromium.
import { join } from 'node:path'
import * as oauth from 'oauth4webapi'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startWorld, type TestWorld } from './support/app.ts'
import { BROWSER_MISSING_MESSAGE, chromiumPath, launchBrowser, screenshotDir } from './support/browser.ts'
import { consentInBrowser, discover, insecure } from './support/oauth.ts'
import { startReceiver } from './support/receiver.ts'

if (!chromiumPath) console.warn(BROWSER_MISSING_MESSAGE)

describe.skipIf(!chromiumPath)('the page of authorized apps in Chromium', () => {
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

  it('default scopes on the consent page, remembered consent, the apps page with Revoke, sign-out, and signing in from the apps page', { timeout: 90_000 }, async () => {
    const alice = await world.createUser('alice')
    const redirectUri = `${receiver.url}/callback`
    // A confidential app (its server holds the secret): a remembered approval may answer without
    // the page. (A public app on a loopback redirect is asked every time: test/oauth-apps.test.ts.)
    const registered = await world.admin('create-oauth-client', '--name', 'Todo Web', '--redirect-uri', redirectUri, '--default-scopes', 'public write')
    const client: oauth.Client = { client_id: registered.client_id }
    const clientAuth = oauth.ClientSecretBasic(registered.client_secret)
    const as = await discover('http://api.test', world.baseUrl)
    const authorization = async () => {
      const verifier = oauth.generateRandomCodeVerifier()
      const state = oauth.generateRandomState()
      const url = new URL(as.authorization_endpoint!)
      // The app's request: an empty scope, as the desktop client of issue 28 sends it.
      url.search = new URLSearchParams({
        response_type: 'code', client_id: client.client_id, redirect_uri: redirectUri, scope: '', state,
        code_challenge: await oauth.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256',
      }).toString()
      return { url: url.toString(), verifier, state }
    }
    const dir = await screenshotDir()

    const browser = await launchBrowser()
    try {
      const context = await browser.newContext()
      const page = await context.newPage()
      const first = await authorization()
      const landed = await consentInBrowser(page, {
        authorizeUrl: first.url, loginCode: (await world.admin('login-code', '--user', 'alice')).code, redirectUri, screenshot: join(dir, 'oauth-consent-defaults.png'),
      })
      const tokens = await oauth.processAuthorizationCodeResponse(as, client, await oauth.authorizationCodeGrantRequest(as, client, clientAuth,
        oauth.validateAuthResponse(as, client, landed, first.state), redirectUri, first.verifier, insecure))
      expect(tokens.scope).toBe('public write')
      expect((await world.post('/v1/todos', { auth: tokens.access_token, json: { body: 'Posted from the web app' } })).status).toBe(201)

      // Asked again: straight back to the app with a code, no consent page.
      const second = await authorization()
      await page.goto(second.url)
      await page.waitForURL((url) => url.toString().startsWith(redirectUri))
      const silent = oauth.validateAuthResponse(as, client, new URL(page.url()), second.state)
      const again = await oauth.processAuthorizationCodeResponse(as, client,
        await oauth.authorizationCodeGrantRequest(as, client, clientAuth, silent, redirectUri, second.verifier, insecure))
      expect(again.scope).toBe('public write')

      // The apps page: the app, its scopes, its last use; Revoke.
      await page.goto(`${world.baseUrl}/oauth/apps`)
      expect(await page.textContent('#username')).toBe('alice')
      expect(await page.textContent('.app h2')).toBe('Todo Web')
      expect(await page.textContent('.app')).toContain('Post, change and delete')
      expect(await page.textContent('.app')).toMatch(/last used \d{4}-\d\d-\d\d \d\d:\d\d UTC/)
      await page.screenshot({ path: join(dir, 'oauth-apps.png'), fullPage: true })
      await Promise.all([page.waitForURL((url) => url.searchParams.get('notice') === 'revoked'), page.click('button[name=revoke]')])
      expect(await page.textContent('.notice')).toContain('Access revoked')
      expect(await page.isVisible('#no-apps')).toBe(true)
      for (const token of [tokens.access_token, again.access_token]) {
        const refused = await world.get('/v1/users/me', { auth: token })
        expect(refused.status).toBe(403)
        expect(refused.headers.get('www-authenticate')).toBe('Bearer error="invalid_token"')
      }

      // Sign out: the sign-in form in its place; the cookie is gone.
      await Promise.all([page.waitForSelector('#code'), page.click('button[name=signout]')])
      expect(await page.textContent('h1')).toBe('Sign in to see the apps you authorized')
      expect(await context.cookies(`${world.baseUrl}/oauth/apps`)).toEqual([])

      // Signing in from the apps page comes back to it.
      await page.fill('#code', (await world.admin('login-code', '--user', 'alice')).code)
      await Promise.all([page.waitForSelector('#username'), page.click('button[type=submit]')])
      expect(await page.textContent('#username')).toBe(alice.username)
      expect(await page.isVisible('#no-apps')).toBe(true)
    } finally {
      await browser.close()
    }
  })
})
