// The database a local process uses: DATABASE_URL when set, otherwise the embedded
// PostgreSQL of DATA_DIR (started if it is not already running).
import type { Config } from './config.ts'
import { startEmbeddedPostgres, type RunningPostgres } from './postgres.ts'

export async function openDatabase(config: Config, options: { verbose?: boolean; settings?: Record<string, string> } = {}): Promise<RunningPostgres & { embedded: boolean }> {
  if (config.databaseUrl) return { url: config.databaseUrl, stop: async () => {}, embedded: false }
  const running = await startEmbeddedPostgres({
    dataDir: config.dataDir,
    port: config.embeddedPort,
    password: config.postgresPassword,
    verbose: options.verbose,
    settings: options.settings,
  })
  return { ...running, embedded: true }
}
