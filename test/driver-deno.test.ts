// The Edge Function (Deno) runs the same patched postgres.js as Node (patches/postgres+3.4.9.patch:
// porsager/postgres#1181, #1208). Deno has no install step, so `npm:postgres@3.4.9` in its
// import map was the release without the patch; the map names a vendored copy instead
// (supabase/functions/_vendor/postgres, written by `npm run vendor:postgres`). Proven here:
// the map names it, it is node_modules/postgres as patched (file for file), and #1181 does not
// happen under Deno through createSql, as the function's statements go.
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { describe, expect, inject, it } from 'vitest'
import { ROOT } from '../local/paths.ts'
import { VENDORED_POSTGRES, vendoredPostgres, vendoredPostgresOnDisk } from '../local/vendor-postgres.ts'

const DENO = join(ROOT, 'node_modules', '.bin', 'deno')
const CONFIG = join(ROOT, 'supabase', 'functions', 'api', 'deno.json')

describe('postgres.js in the Edge Function (Deno)', () => {
  it('the function\'s import map takes postgres from the vendored copy, not from npm', () => {
    const { imports } = JSON.parse(readFileSync(CONFIG, 'utf8')) as { imports: Record<string, string> }
    expect(imports.postgres).toBe('../_vendor/postgres/src/index.js')
    expect(join(ROOT, 'supabase', 'functions', 'api', imports.postgres!)).toBe(join(VENDORED_POSTGRES, 'src', 'index.js'))
  })

  it('the vendored copy is node_modules/postgres as patch-package left it, file for file (`npm run vendor:postgres` writes it)', () => {
    const expected = vendoredPostgres()
    expect(readFileSync(join(ROOT, 'node_modules', 'postgres', 'src', 'connection.js'), 'utf8')).toContain('porsager/postgres#1181')
    expect(vendoredPostgresOnDisk().sort()).toEqual([...expected.keys()].sort())
    for (const [path, text] of expected) expect(readFileSync(join(VENDORED_POSTGRES, path), 'utf8') === text, `${path} differs: run npm run vendor:postgres`).toBe(true)
  })

  it('#1181 under Deno through createSql: a statement pipelined behind one that failed mid-stream (an error in a row; a statement timeout) gets exactly its own rows', async () => {
    const { stdout } = await promisify(execFile)(
      DENO,
      ['run', '--check', '--allow-net', '--allow-env', '--allow-read', '--node-modules-dir=none', '--config', CONFIG, join(ROOT, 'test', 'support', 'driver-1181.ts')],
      { cwd: ROOT, env: { ...process.env, NO_COLOR: '1', DATABASE_URL: inject('serverUrl') }, timeout: 150_000 },
    )
    const result = JSON.parse(stdout.trim().split('\n').pop()!)
    expect(result).toEqual({
      error: expect.stringMatching(/division by zero/),
      rows: [1, 2, 3, 4, 5],
      timedError: expect.stringMatching(/statement timeout/),
      timedRows: [42],
    })
  }, 180_000)
})
