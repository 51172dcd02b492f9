// Ctrl-C reaches the long-running commands' own shutdown, however busy the machine is.
//
// The tsx command runs a script in a child process and relays a signal to it; when the child
// does not answer the relay within 30 ms, tsx kills it with SIGKILL (tsx 4, relaySignals). On a
// loaded machine (the third of three `npm test` runs beside two spinning cores) `npm run
// start:edge` was killed that way: no "SIGINT: stopping", no clean stop of its database and
// Storage. `node --import tsx` loads TypeScript in the one process, which takes the signal itself.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { interrupt, spawnUntil } from './support/process.ts'

const ROOT = new URL('..', import.meta.url).pathname

describe('signals', () => {
  it('the commands that run until stopped (npm start, start:edge, the workers) take Ctrl-C in their own process: node --import tsx, not the tsx command', async () => {
    const { scripts } = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }
    for (const name of ['start', 'start:edge', 'webhook-worker', 'push-worker']) {
      expect(scripts[name], name).toMatch(/^node --import tsx local\/[a-z-]+\.ts$/)
    }
  })

  it('a SIGINT handler runs under node --import tsx while the event loop is busy (where the tsx command would kill the script after 30 ms)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'signals-'))
    try {
      const script = join(dir, 'busy.ts')
      // Busy 400 ms of every 410: a signal waits up to 400 ms for its handler.
      await writeFile(script, [
        "const label: string = 'handled'",
        "process.on('SIGINT', () => { console.log(`${label} SIGINT`); process.exit(0) })",
        "setInterval(() => { const end = Date.now() + 400; while (Date.now() < end); }, 10)",
        "console.log('ready')",
      ].join('\n'))
      const { child, output } = await spawnUntil(process.execPath, ['--import', 'tsx', script], 'ready', { timeoutMs: 30_000 })
      // In the middle of a busy stretch, as a terminal's Ctrl-C would (to the process group).
      await new Promise((r) => setTimeout(r, 100))
      expect(await interrupt(child)).toBe(0)
      expect(output()).toContain('handled SIGINT')
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })
})
