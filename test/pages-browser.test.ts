// The web pages the API serves while WEB_URL is itself (/@user, /todos/N, /projects/slug) in a
// real browser (issue 31: they were only fetched as text, so their Content-Security-Policy was
// never exercised). Chromium enforces the header: the pages as served violate none of it (their
// inline style applies, their images load), and what the policy exists to stop does not run: a
// script put into the page, a form posting out of it, the page framed by another site.
import { createServer, type Server } from 'node:http'
import { join } from 'node:path'
import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { BROWSER_MISSING_MESSAGE, chromiumPath, launchBrowser, screenshotDir } from './support/browser.ts'
import { type TestWorld, startWorld } from './support/app.ts'

if (!chromiumPath) console.warn(BROWSER_MISSING_MESSAGE)

describe.skipIf(!chromiumPath)('the web pages in Chromium, under their Content-Security-Policy', () => {
  let world: TestWorld
  let browser: Browser
  let framer: Server
  let framerUrl: string
  const paths: Record<string, string> = {}

  beforeAll(async () => {
    world = await startWorld()
    const ada = await world.createUser('ada')
    // A body that would be a script if it were not escaped: the escaping is one line of defence,
    // the policy the other (checked below on its own).
    const todo = await world.post('/v1/todos', { auth: ada.api_key, json: { body: 'shipped <script>window.fromBody = 1</script> #inkwell' } })
    expect(todo.status, todo.text).toBe(201)
    await world.admin('create-project', '--owner', 'ada', '--name', 'Inkwell', '--slug', 'inkwell', '--hashtag', 'inkwell')
    paths.user = '/@ada'
    paths.todo = new URL(todo.body.url).pathname
    paths.project = '/projects/inkwell'
    browser = await launchBrowser()
    // Another site that frames the page.
    framer = createServer((req, res) => {
      res.setHeader('content-type', 'text/html')
      res.end(`<!doctype html><iframe id="f" src="${world.baseUrl}${decodeURIComponent(req.url!.slice(1))}"></iframe>`)
    })
    framerUrl = await new Promise<string>((resolve) => framer.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(framer.address() as { port: number }).port}`)))
  }, 120_000)
  afterAll(async () => {
    await browser?.close()
    await new Promise<void>((resolve) => (framer ? framer.close(() => resolve()) : resolve()))
    await world?.close()
  })

  /**
   * A page whose requests to the API's PUBLIC_URL (http://api.test, where its images point) are
   * answered by this world's server, and every other host is refused; with the policy violations
   * the page reports, in order.
   */
  async function openPage(path: string): Promise<{ page: Page; violations: () => Promise<string[]>; blocked: string[] }> {
    const context = await browser.newContext()
    const blocked: string[] = []
    await context.route('**/*', async (route) => {
      const url = route.request().url()
      if (url.startsWith(world.baseUrl) || url.startsWith('data:')) return route.continue()
      if (url.startsWith('http://api.test/')) {
        const answer = await fetch(url.replace('http://api.test', world.baseUrl))
        return route.fulfill({ status: answer.status, headers: Object.fromEntries([...(answer.headers as unknown as Iterable<[string, string]>)]), body: Buffer.from(await answer.arrayBuffer()) })
      }
      blocked.push(url)
      return route.abort('internetdisconnected')
    })
    const page = await context.newPage()
    // Every violation the document reports (the event the policy fires), gathered in the page.
    await page.addInitScript(() => {
      const seen: string[] = []
      ;(window as unknown as { __violations: string[] }).__violations = seen
      document.addEventListener('securitypolicyviolation', (e) => seen.push(`${e.effectiveDirective} ${e.blockedURI}`))
    })
    const response = await page.goto(world.baseUrl + path)
    expect(response?.status(), path).toBe(200)
    expect(response?.headers()['content-security-policy']).toContain("default-src 'none'")
    return { page, blocked, violations: () => page.evaluate(() => (window as unknown as { __violations: string[] }).__violations.slice()) }
  }

  for (const kind of ['user', 'todo', 'project'] as const) {
    it(`the ${kind} page renders as served: no violation, its inline style applied, its images loaded`, async () => {
      const { page, violations, blocked } = await openPage(paths[kind]!)
      await page.waitForLoadState('load')
      expect(await violations()).toEqual([])
      expect(blocked).toEqual([])
      // The inline <style> applies (style-src 'unsafe-inline'): body max-width 40rem.
      expect(await page.evaluate(() => getComputedStyle(document.body).maxWidth)).toBe('640px')
      // Every image decoded (img-src *): the avatar or logo, when the page has one.
      const images = await page.evaluate(() => Array.from(document.images).map((img) => ({ src: img.src, width: img.naturalWidth })))
      if (kind !== 'todo') expect(images.length).toBeGreaterThan(0)
      for (const image of images) expect(image.width, image.src).toBeGreaterThan(0)
      expect(await page.evaluate(() => (window as unknown as { fromBody?: number }).fromBody)).toBeUndefined()
      await page.screenshot({ path: join(await screenshotDir(), `page-${kind}.png`) })
      await page.context().close()
    })
  }

  it('a script put into a page does not run, inline or from this server; a form cannot post out; another site cannot frame it', async () => {
    const { page, violations } = await openPage(paths.todo!)
    // Inline, and from a URL of this very origin (default-src 'none' covers script-src).
    await page.evaluate(() => {
      const inline = document.createElement('script')
      inline.textContent = 'window.injected = 1'
      document.body.append(inline)
      const sourced = document.createElement('script')
      sourced.src = '/docs/scalar.js'
      document.body.append(sourced)
    })
    await expect.poll(async () => (await violations()).filter((v) => v.startsWith('script-src')).length).toBe(2)
    expect(await page.evaluate(() => (window as unknown as { injected?: number }).injected)).toBeUndefined()
    // form-action 'none': a form submitted from the page goes nowhere.
    await page.evaluate(() => {
      const form = document.createElement('form')
      form.action = '/v1/todos'
      form.method = 'post'
      document.body.append(form)
      form.submit()
    })
    await expect.poll(async () => (await violations()).some((v) => v.startsWith('form-action'))).toBe(true)
    expect(new URL(page.url()).pathname).toBe(paths.todo)
    await page.context().close()

    // frame-ancestors 'none': framed by another origin, the frame stays empty.
    const context = await browser.newContext()
    const framing = await context.newPage()
    await framing.goto(`${framerUrl}/${encodeURIComponent(paths.user!)}`)
    // Chromium replaces a frame the policy refuses with its error page.
    await expect.poll(() => framing.frames().find((f) => f !== framing.mainFrame())?.url(), { timeout: 30_000 }).toBe('chrome-error://chromewebdata/')
    await context.close()
  })
})
