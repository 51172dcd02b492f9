// The browser the page tests use starts here and renders a page of the app: proves the
// Chromium + playwright-core setup (flags for the closed network included) before any page test.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { join } from 'node:path'
import { BROWSER_MISSING_MESSAGE, chromiumPath, launchBrowser, screenshotDir } from './support/browser.ts'
import { startWorld, type TestWorld } from './support/app.ts'

if (!chromiumPath) console.warn(BROWSER_MISSING_MESSAGE)

describe.skipIf(!chromiumPath)('real browser', () => {
  let world: TestWorld
  beforeAll(async () => { world = await startWorld() })
  afterAll(async () => { await world?.close() })

  it('loads a page of the app over HTTP and takes a screenshot', async () => {
    const browser = await launchBrowser()
    try {
      const page = await browser.newPage()
      const response = await page.goto(`${world.baseUrl}/v1/openapi.json`)
      expect(response?.status()).toBe(200)
      expect(await page.textContent('body')).toContain('"openapi"')
      const file = join(await screenshotDir(), 'browser-smoke.png')
      await page.screenshot({ path: file })
    } finally {
      await browser.close()
    }
  })
})
