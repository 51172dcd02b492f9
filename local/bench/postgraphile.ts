// PostGraphile, the bench's GraphQL reference, is not part of the project's install: 5.1.5 and
// its graphile/grafast packages declare Node >= 22, and `npm install` on Node 20 printed an
// EBADENGINE warning for each (issue 29). A run that measures the postgraphile target installs
// it here first: `npm ci` of local/bench/postgraphile/ (package.json and package-lock.json, the
// exact tree the earlier runs measured) into DATA_DIR/bench/postgraphile, once, and again only
// when that lock file changes. The server worker loads it from there (postGraphileRequire).
import { execFile } from 'node:child_process'
import { createHash } from 'node:crypto'
import { copyFile, mkdir, readFile, rm, writeFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'

const SOURCE_DIR = fileURLToPath(new URL('./postgraphile/', import.meta.url))
/** Written after a successful install: the hash of the lock file it installed. */
const STAMP = 'installed-lock.sha256'

/** Where the bench keeps its PostGraphile, under the data folder. */
export function postGraphileDir(dataDir: string): string {
  return join(dataDir, 'bench', 'postgraphile')
}

/** Installs PostGraphile into DATA_DIR/bench/postgraphile unless that lock file's tree is there already; returns the folder. */
export async function ensurePostGraphile(dataDir: string): Promise<string> {
  const dir = postGraphileDir(dataDir)
  const lock = await readFile(join(SOURCE_DIR, 'package-lock.json'))
  const hash = createHash('sha256').update(lock).digest('hex')
  const stamp = await readFile(join(dir, STAMP), 'utf8').catch(() => null)
  if (stamp?.trim() === hash) return dir
  const manifest = JSON.parse(await readFile(join(SOURCE_DIR, 'package.json'), 'utf8')) as { dependencies: { postgraphile: string } }
  console.log(`Installing PostGraphile ${manifest.dependencies.postgraphile} for the bench into ${dir} (npm ci of local/bench/postgraphile; once)…`)
  await rm(join(dir, STAMP), { force: true })
  await mkdir(dir, { recursive: true })
  await copyFile(join(SOURCE_DIR, 'package.json'), join(dir, 'package.json'))
  await copyFile(join(SOURCE_DIR, 'package-lock.json'), join(dir, 'package-lock.json'))
  // Warnings (EBADENGINE on Node 20, the reason it lives here) would bury the bench's output;
  // errors still stop the run. docs/performance.md says why Node 20 runs it anyway.
  await promisify(execFile)('npm', ['ci', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: dir, maxBuffer: 16 << 20 })
  await writeFile(join(dir, STAMP), hash + '\n')
  return dir
}

/** A require() that resolves from the bench's PostGraphile install (PostGraphile 5 is CommonJS). */
export function postGraphileRequire(dir: string): NodeJS.Require {
  return createRequire(join(dir, 'package.json'))
}
