// Issue 29: the Node versions we support, and an install on any of them without an EBADENGINE
// warning. npm prints one for every installed package whose `engines.node` does not accept the
// running Node (about 300 on Node 20 before: Scalar 1.72, PostGraphile 5 and their trees declared
// Node >= 22, rollup 4.67.4 brought @napi-rs/lzma for ^22.20). package-lock.json records every
// package `npm ci` installs with its `engines`, so this reads it: an upgrade that brings such a
// package back fails here, naming it, before anyone sees the warnings.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import semver from 'semver'
import { describe, expect, it } from 'vitest'
import { ROOT } from '../local/paths.ts'

/** The first release of each supported line (README "Runtimes"; .ci/run tests the machine's 20 and 26). */
const SUPPORTED_FLOORS = ['20.19.0', '22.13.0', '24.0.0', '26.0.0']
/** Each line's floor and a late release of it: a package's range may close a line early (`<20.20`, `~22.13`). */
const SUPPORTED = SUPPORTED_FLOORS.flatMap((floor) => [floor, `${semver.major(floor)}.99.0`])

interface LockEntry { version?: string; engines?: Record<string, string> | string[]; dev?: boolean; optional?: boolean; link?: boolean }
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { engines: { node: string } }
const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as { lockfileVersion: number; packages: Record<string, LockEntry> }

/** `engines.node` of a lock entry, when it states one (the old array form says nothing npm checks). */
function nodeRange(entry: LockEntry): string | null {
  const engines = entry.engines
  return engines && !Array.isArray(engines) && typeof engines.node === 'string' ? engines.node : null
}

/** The installed packages (lock path, version, range) whose engines.node rejects one of the Node versions given. */
function rejecting(packages: Record<string, LockEntry>, versions: string[]): string[] {
  const found: string[] = []
  for (const [path, entry] of Object.entries(packages)) {
    if (path === '' || entry.link) continue
    const range = nodeRange(entry)
    if (range === null) continue
    const rejected = versions.filter((v) => !semver.satisfies(v, range, { includePrerelease: true }))
    if (rejected.length) found.push(`${path}@${entry.version} engines.node "${range}" rejects Node ${rejected.join(', ')}`)
  }
  return found
}

describe('the Node versions we support (issue 29)', () => {
  it('package.json engines admits 20.19+, 22.13+, 24 and 26, and nothing older', () => {
    const range = pkg.engines.node
    for (const v of SUPPORTED) expect(semver.satisfies(v, range), `${v} in "${range}"`).toBe(true)
    for (const v of ['18.20.0', '20.18.3', '21.7.3', '22.12.0']) expect(semver.satisfies(v, range), `${v} in "${range}"`).toBe(false)
  })

  it('every package npm ci installs accepts every supported Node (no EBADENGINE warning on any)', () => {
    expect(lock.lockfileVersion).toBeGreaterThanOrEqual(2)
    expect(Object.keys(lock.packages).length).toBeGreaterThan(100)
    expect(rejecting(lock.packages, SUPPORTED)).toEqual([])
  })

  it('the check finds a package that would warn (it is not vacuous)', () => {
    // What the lock held before: PostGraphile 5.1.5 and Scalar 1.72.1 (Node >= 22), @napi-rs/lzma 1.5.1.
    const before: Record<string, LockEntry> = {
      'node_modules/postgraphile': { version: '5.1.5', dev: true, engines: { node: '>=22' } },
      'node_modules/@scalar/api-reference': { version: '1.72.1', engines: { node: '>=22' } },
      'node_modules/@napi-rs/lzma-linux-x64-gnu': { version: '1.5.1', dev: true, optional: true, engines: { node: '^22.20 || ^24.12 || >=25' } },
      'node_modules/semver': { version: '7.8.6', engines: { node: '>=10' } },
    }
    expect(rejecting(before, SUPPORTED)).toEqual([
      'node_modules/postgraphile@5.1.5 engines.node ">=22" rejects Node 20.19.0, 20.99.0',
      'node_modules/@scalar/api-reference@1.72.1 engines.node ">=22" rejects Node 20.19.0, 20.99.0',
      'node_modules/@napi-rs/lzma-linux-x64-gnu@1.5.1 engines.node "^22.20 || ^24.12 || >=25" rejects Node 20.19.0, 20.99.0, 22.13.0, 24.0.0',
    ])
  })

  it('the browser bundle /docs serves comes from the @scalar/api-reference the lock pins', () => {
    const pages = readFileSync(join(ROOT, 'functions/web/pages.ts'), 'utf8')
    const pinned = lock.packages['node_modules/@scalar/api-reference']?.version
    expect(pages).toContain(`export const SCALAR_VERSION = '${pinned}'`)
  })
})
