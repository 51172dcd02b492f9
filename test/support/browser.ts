// A real browser for the tests of pages (OAuth consent, /docs): Debian's Chromium driven by
// playwright-core. Without Chromium the browser tests are skipped, and the run says so loudly
// (here and in the global setup's summary) with the command that installs it.
import { existsSync } from 'node:fs'
import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { chromium, type Browser, type Page } from 'playwright-core'

// CHROMIUM_PATH, when set, is the only place looked at (CHROMIUM_PATH=none shows what a machine without it does).
const CANDIDATES = process.env.CHROMIUM_PATH ? [process.env.CHROMIUM_PATH] : ['/usr/bin/chromium', '/usr/bin/chromium-browser']

/** The Chromium executable, or null when none is installed. */
export const chromiumPath: string | null = CANDIDATES.find((path) => existsSync(path)) ?? null

export const BROWSER_MISSING_MESSAGE =
  '\n*** BROWSER TESTS SKIPPED: no Chromium found (looked at ' + CANDIDATES.join(', ') + ').\n' +
  '*** Install it with `apt-get install -y chromium` (what .ci/run does), or set CHROMIUM_PATH.\n'

/** Where tests keep screenshots: test-output/ at the project's root (git-ignored). */
export async function screenshotDir(): Promise<string> {
  const dir = join(process.cwd(), 'test-output')
  await mkdir(dir, { recursive: true })
  return dir
}

/**
 * Launches headless Chromium with the flags this closed network needs (no background
 * networking, no component updates: their connections are refused and slow the start).
 */
export async function launchBrowser(): Promise<Browser> {
  if (!chromiumPath) throw new Error(BROWSER_MISSING_MESSAGE)
  // playwright gives every launch a fresh temporary profile of its own.
  return chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: [
      '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
  })
}

/** A page whose network reaches one server only, and what it asked for, was refused and logged. */
export interface OfflinePage {
  page: Page
  /** Every URL the page requested, in order. */
  requested: string[]
  /** The requested URLs that were not the server's (refused as if the network were off). */
  blocked: string[]
  /** Console messages and uncaught page errors, for the failure message. */
  consoleLines: string[]
  /** The three lists, for a failure message. */
  report(): string
}

/**
 * A new page in `browser` on which only `origin` (and data:/blob: URLs) answers: any other
 * request is aborted as offline and recorded, so a test sees a page that would reach outside
 * (a CDN script, a link built from the wrong base) instead of depending on the network.
 */
export async function offlinePage(browser: Browser, origin: string): Promise<OfflinePage> {
  const context = await browser.newContext()
  const requested: string[] = []
  const blocked: string[] = []
  await context.route('**/*', (route) => {
    const url = route.request().url()
    requested.push(url)
    if (url.startsWith(origin) || url.startsWith('data:') || url.startsWith('blob:')) return route.continue()
    blocked.push(url)
    return route.abort('internetdisconnected')
  })
  const page = await context.newPage()
  const consoleLines: string[] = []
  page.on('console', (m) => consoleLines.push(`${m.type()}: ${m.text()}`))
  page.on('pageerror', (e) => consoleLines.push(`pageerror: ${e.message}`))
  const report = () => `console:\n${consoleLines.join('\n')}\nrequested:\n${requested.join('\n')}\nblocked:\n${blocked.join('\n')}`
  return { page, requested, blocked, consoleLines, report }
}
