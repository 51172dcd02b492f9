// Running the project's own commands as a user would, for the tests that must prove the
// command itself (npm start, the operator CLI), not just the code behind it.
import { type ChildProcess, spawn } from 'node:child_process'
import { ROOT } from '../../local/paths.ts'

export interface Finished {
  code: number | null
  stdout: string
  stderr: string
}

const TSX = `${ROOT}/node_modules/.bin/tsx`

/** Runs `tsx local/admin.ts …`, the same program `npm run --silent admin --` runs. */
export function runCli(args: string[], env: Record<string, string>): Promise<Finished> {
  return new Promise((resolve, reject) => {
    const child = spawn(TSX, ['local/admin.ts', ...args], { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => (stdout += d))
    child.stderr.on('data', (d) => (stderr += d))
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

/** Starts `npm start` and resolves once it prints that it listens. */
export function startServer(env: Record<string, string>, timeoutMs = 60_000): Promise<{ child: ChildProcess; output: () => string }> {
  return spawnUntil('npm', ['start'], 'listening on', { env, timeoutMs, name: 'npm start' })
}

/**
 * Starts a command in a process group of its own (so interrupt() reaches all of it, as Ctrl-C
 * in a terminal does) and resolves once its output holds `line`; rejects if it exits first.
 */
export function spawnUntil(command: string, args: string[], line: string, options: { env?: Record<string, string>; timeoutMs?: number; name?: string } = {}): Promise<{ child: ChildProcess; output: () => string }> {
  const { env = {}, timeoutMs = 60_000, name = command } = options
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true })
    let output = ''
    const timer = setTimeout(() => reject(new Error(`${name} did not print ${JSON.stringify(line)} within ${timeoutMs} ms:\n${output}`)), timeoutMs)
    const onData = (d: Buffer) => {
      output += d
      if (output.includes(line)) {
        clearTimeout(timer)
        resolve({ child, output: () => output })
      }
    }
    child.stdout.on('data', onData)
    child.stderr.on('data', onData)
    child.on('close', (code) => {
      clearTimeout(timer)
      reject(new Error(`${name} exited with ${code}:\n${output}`))
    })
  })
}

/**
 * Sends Ctrl-C (SIGINT to the process group, as a terminal does) and waits until the whole
 * group is gone. Resolves to the exit code, or the signal's name when npm itself was ended
 * by the signal (as it is in a terminal too).
 */
export function interrupt(child: ChildProcess, timeoutMs = 20_000): Promise<number | string | null> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('did not stop after SIGINT')), timeoutMs)
    child.removeAllListeners('close')
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      resolve(code ?? signal)
    })
    process.kill(-child.pid!, 'SIGINT')
  })
}
