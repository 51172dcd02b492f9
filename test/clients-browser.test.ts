// Issue 18 in a real browser (Debian's Chromium through playwright-core), with every request to
// another host blocked: /docs lists the endpoints from the script this server serves (it was a
// blank page without internet: the script came from a CDN), and a page on another origin calls
// the API with a bearer token (CORS).
import { createServer, type Server } from 'node:http'
import { join } from 'node:path'
import type { Locator } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { BROWSER_MISSING_MESSAGE, chromiumPath, launchBrowser, offlinePage, screenshotDir } from './support/browser.ts'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'

if (!chromiumPath) console.warn(BROWSER_MISSING_MESSAGE)

describe.skipIf(!chromiumPath)('in a real browser, offline', () => {
  let world: TestWorld
  let alice: CreatedUser
  beforeAll(async () => {
    world = await startWorld()
    alice = await world.createUser('alice')
  })
  afterAll(async () => {
    await world?.close()
  })

  it('/docs lists the endpoints with the network off, loading nothing from another host', { timeout: 90_000 }, async () => {
    const browser = await launchBrowser()
    try {
      // The network is off: only this server answers.
      const { page, requested, blocked, report } = await offlinePage(browser, world.baseUrl)
      const response = await page.goto(`${world.baseUrl}/docs`)
      expect(response?.status()).toBe(200)
      const html = await response!.text()
      expect(html).not.toMatch(/cdn\.jsdelivr|unpkg|fonts\.scalar|https?:\/\/(?!api\.test)[a-z]/i)
      // Operation summaries and tags from the OpenAPI document, rendered by the reference: the
      // sidebar first, the introduction with the title a moment later (Scalar 1.46), so both.
      const rendered = (locator: Locator) => locator.first().waitFor({ timeout: 30_000 }).catch(async (err) => {
        await page.screenshot({ path: join(await screenshotDir(), 'docs-offline-failed.png') })
        throw new Error(`${err}\n${report()}\n${await page.content()}`.slice(0, 6000))
      })
      await rendered(page.getByText('The authenticated user'))
      await rendered(page.getByRole('heading', { name: 'Todo-Sharing Service API' }))
      const text = await page.textContent('body')
      expect(text).toContain('Todo-Sharing Service API')
      for (const listed of ['Update your time zone settings', 'Projects', 'Todos', 'Uploads', 'Direct messages', 'Webhooks']) expect(text).toContain(listed)
      expect(requested.some((u) => u.includes('/docs/scalar.js'))).toBe(true)
      expect(requested.some((u) => u.endsWith('/v1/openapi.json'))).toBe(true)
      expect(blocked).toEqual([])
      await page.screenshot({ path: join(await screenshotDir(), 'docs-offline.png'), fullPage: false })
    } finally {
      await browser.close()
    }
  })

  it('a page on another origin calls the API with a bearer token (preflight and all)', { timeout: 60_000 }, async () => {
    // The other origin: a plain page on another port.
    const other: Server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' })
      res.end('<!doctype html><title>other app</title>')
    })
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', () => resolve()))
    const { port } = other.address() as { port: number }
    const browser = await launchBrowser()
    try {
      const page = await browser.newPage()
      await page.goto(`http://127.0.0.1:${port}/`)
      const result = await page.evaluate(async ({ api, key }) => {
        const created = await fetch(`${api}/v1/todos`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ body: 'posted from another origin' }),
        })
        const listed = await fetch(`${api}/v1/todos`, { headers: { authorization: `Bearer ${key}` } })
        return { created: created.status, listed: listed.status, etag: listed.headers.get('etag'), body: await listed.json() }
      }, { api: world.baseUrl, key: alice.api_key })
      expect(result.created).toBe(201)
      expect(result.listed).toBe(200)
      expect(result.etag).toMatch(/^W\//)
      expect(result.body.data[0].body).toBe('posted from another origin')
    } finally {
      await browser.close()
      await new Promise<void>((resolve) => other.close(() => resolve()))
    }
  })
})
