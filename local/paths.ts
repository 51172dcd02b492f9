// Where the project's files are, wherever the process was started from.
import { dirname, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..')
export const MIGRATIONS_DIR = resolve(ROOT, 'supabase/migrations')
export const PLATFORM_SHIM = resolve(ROOT, 'sql/platform.sql')
export const SCHEMAS_DIR = resolve(ROOT, 'supabase/schemas')
