// The Supabase Edge Function (supabase/functions/api/index.ts) run by the Deno from npm, as the
// edge runtime runs it: for `npm run start:edge` and the tests of the edge entry. Of what the
// function reads, only what is given here reaches it (what the platform would set).
import { type ChildProcess, spawn } from 'node:child_process'
import { join } from 'node:path'
import { ROOT } from './paths.ts'
import { DOCS_SCRIPT_PATH } from './node-http.ts'

export const DENO = join(ROOT, 'node_modules', '.bin', 'deno')
export const FUNCTION_DIR = join(ROOT, 'supabase', 'functions', 'api')
export const FUNCTION_ENTRY = join(FUNCTION_DIR, 'index.ts')

/** The variables supabase/functions/api reads (docs/deploy.md): never inherited, only given. */
export const FUNCTION_ENV = /^(SUPABASE_[A-Z_]+|DATABASE_URL|JWT_SECRET|PUBLIC_URL|UPGRADE_URL|WEB_URL|WEBSITE_ORIGINS|STATEMENT_TIMEOUT_MS|WORKER_SECRET|WEBHOOK_ALLOW_PRIVATE|APNS_[A-Z_]+|VAPID_[A-Z_]+|PORT)$/

export interface EdgeFunctionOptions {
  /** Where its Deno.serve listens (127.0.0.1): the entry reads PORT. */
  port: number
  /** What the platform sets: DATABASE_URL (or SUPABASE_DB_URL), JWT_SECRET, PUBLIC_URL, SUPABASE_URL, … */
  env: Record<string, string | undefined>
  /** Each chunk of its output; default: kept for `output()` only. */
  onOutput?: (chunk: string) => void
  /** How long the first start may take (Deno fetches the npm packages into its cache once). Default 120 s. */
  startupMs?: number
}

export interface EdgeFunction {
  /** http://127.0.0.1:PORT: the function answers under /api there. */
  url: string
  /** The last 20,000 characters it printed. */
  output(): string
  stop(): Promise<void>
}

/** Starts the function and resolves once it answers HTTP. */
export async function startEdgeFunction(options: EdgeFunctionOptions): Promise<EdgeFunction> {
  const url = `http://127.0.0.1:${options.port}`
  let log = ''
  // Read access to the one static file the function ships (static_files in supabase/config.toml).
  const args = ['run', '--allow-net', '--allow-env', `--allow-read=${join(ROOT, DOCS_SCRIPT_PATH)}`, '--node-modules-dir=none',
    '--config', join(FUNCTION_DIR, 'deno.json'), FUNCTION_ENTRY]
  // This process's environment (PATH, HOME, DENO_DIR, proxies for Deno's first download) without
  // anything the function reads: that comes from `options.env` only.
  const env: Record<string, string> = {}
  for (const [name, value] of Object.entries(process.env)) if (value !== undefined && !FUNCTION_ENV.test(name)) env[name] = value
  Object.assign(env, { NO_COLOR: '1', PORT: String(options.port) })
  for (const [name, value] of Object.entries(options.env)) if (value !== undefined && value !== '') env[name] = value
  const child: ChildProcess = spawn(DENO, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] })
  const collect = (chunk: Buffer) => {
    const text = chunk.toString()
    log = (log + text).slice(-20_000)
    options.onOutput?.(text)
  }
  child.stdout?.on('data', collect)
  child.stderr?.on('data', collect)
  let gone = false
  const exited = new Promise<void>((done) => child.once('exit', () => {
    gone = true
    done()
  }))

  const fn: EdgeFunction = {
    url,
    output: () => log,
    async stop() {
      if (gone) return
      child.kill('SIGTERM')
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000)
      await exited
      clearTimeout(timer)
    },
  }
  const deadline = Date.now() + (options.startupMs ?? 120_000)
  while (Date.now() < deadline) {
    if (gone) throw new Error(`the edge function exited before answering (code ${child.exitCode}):\n${log}`)
    try {
      await fetch(`${url}/api/v1/openapi.json`, { signal: AbortSignal.timeout(2_000) })
      return fn
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
  }
  await fn.stop()
  throw new Error(`the edge function did not answer on ${url} within ${options.startupMs ?? 120_000} ms:\n${log}`)
}
