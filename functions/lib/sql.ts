// The postgres.js client both runtimes use, configured the same way.
import postgres from 'postgres'

export interface SqlOptions {
  /** Connections in the pool. */
  max?: number
  /** false behind Supabase's transaction pooler (port 6543), which cannot keep prepared statements. */
  prepare?: boolean
  /** Called with the text of every statement sent (tests count round trips with it). */
  onQuery?: (statement: string) => void
}

export function createSql(url: string, options: SqlOptions = {}) {
  return postgres(url, {
    max: options.max ?? 10,
    prepare: options.prepare ?? true,
    // Timestamps leave the database as UTC ISO 8601 whatever the server's zone is.
    connection: { TimeZone: 'UTC', application_name: 'todo-sharing-api' },
    onnotice: () => {},
    ...(options.onQuery ? { debug: (_connection: number, statement: string) => options.onQuery!(statement) } : {}),
  })
}
