// Runs the Supabase CLI that `npm ci` installs (node_modules/.bin/supabase), without a
// terminal, telemetry or colours, from the repository root (where it finds supabase/).
import { spawn } from 'node:child_process'
import { resolve } from 'node:path'
import { ROOT } from './paths.ts'

const SUPABASE = resolve(ROOT, 'node_modules/.bin/supabase')

export interface CliResult {
  code: number | null
  signal: NodeJS.Signals | null
  stdout: string
  stderr: string
  ms: number
}

export function supabase(args: string[], options: { timeoutMs?: number } = {}): Promise<CliResult> {
  const started = Date.now()
  return new Promise((resolvePromise, reject) => {
    const child = spawn(SUPABASE, args, {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, DO_NOT_TRACK: '1', SUPABASE_TELEMETRY_DISABLED: '1', NO_COLOR: '1', CI: '1' },
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk) => (stdout += chunk))
    child.stderr.on('data', (chunk) => (stderr += chunk))
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 180_000)
    child.on('error', (err) => {
      clearTimeout(timer)
      reject(err)
    })
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      resolvePromise({ code, signal, stdout, stderr, ms: Date.now() - started })
    })
  })
}

export function describeRun(command: string, result: CliResult): string {
  return [
    `$ supabase ${command} -> exit ${result.code}${result.signal ? ` (${result.signal})` : ''} after ${result.ms} ms`,
    '--- stdout ---',
    result.stdout,
    '--- stderr ---',
    result.stderr,
  ].join('\n')
}

/** The URL the CLI needs for a server without TLS (the embedded one). */
export function cliUrl(url: string): string {
  const u = new URL(url)
  if (!u.searchParams.has('sslmode')) u.searchParams.set('sslmode', 'disable')
  return u.toString()
}
