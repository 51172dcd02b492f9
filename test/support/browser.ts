// A real browser for the tests of pages (OAuth consent, /docs): Debian's Chromium driven by
// playwright-core. Without Chromium the browser tests are skipped, and the run says so loudly
// (here and in the global setup's summary) with the command that installs it.
import { existsSync } from 'node:fs'
import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { chromium, type Browser } from 'playwright-core'

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
