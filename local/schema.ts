// The declarative schema (supabase/schemas/*.sql, one file per domain) and the proof that the
// migrations build exactly it: two databases, one from sql/platform.sql + supabase/migrations,
// one from sql/platform.sql + supabase/schemas, compared by `supabase db diff --from --to`
// (the CLI's pg-delta engine: tables, columns, constraints, indexes, policies, including those
// on realtime.messages, triggers, functions with their bodies, comments and grants; no Docker).
// Used by test/schema.test.ts and `npm run db:diff -- <name>`.
import { readFile, readdir } from 'node:fs/promises'
import { basename, relative, resolve } from 'node:path'
import type { Sql } from 'postgres'
import { applyPlatformShim } from './migrate.ts'
import { ROOT, SCHEMAS_DIR } from './paths.ts'
import { cliUrl, describeRun, supabase } from './supabase-cli.ts'

/** The schema files in the order the CLI applies them (`schema_paths = ["./schemas/*.sql"]`). */
export async function listSchemaFiles(dir = SCHEMAS_DIR): Promise<string[]> {
  return (await readdir(dir)).filter((f) => f.endsWith('.sql')).sort().map((f) => resolve(dir, f))
}

/** Applies the platform shim, then every schema file in order, each in its own transaction. */
export async function applySchemaFiles(sql: Sql, dir = SCHEMAS_DIR): Promise<void> {
  await sql.unsafe(`set client_min_messages = warning`)
  await applyPlatformShim(sql)
  for (const file of await listSchemaFiles(dir)) {
    const text = await readFile(file, 'utf8')
    try {
      await sql.begin((tx) => tx.unsafe(text))
    } catch (err) {
      const e = err as Error & { position?: string }
      const at = e.position ? ` at line ${text.slice(0, Number(e.position)).split('\n').length}` : ''
      throw new Error(`${relative(ROOT, file)}${at}: ${e.message}`)
    }
  }
}

/**
 * The SQL that turns database `from` into database `to`, as `supabase db diff` prints it;
 * '' when they are the same. The CLI opens with `SET local check_function_bodies = off;`
 * whenever it prints anything, which alone is no difference.
 */
export async function diffDatabases(fromUrl: string, toUrl: string): Promise<string> {
  // --strict-coverage: an object kind pg-delta cannot manage fails the diff instead of being
  // left out of it silently.
  const args = ['db', 'diff', '--strict-coverage', '--from', cliUrl(fromUrl), '--to', cliUrl(toUrl)]
  const result = await supabase(args)
  if (result.code !== 0) throw new Error(describeRun('db diff --strict-coverage --from <url> --to <url>', result))
  const statements = result.stdout.trim()
  const meaningful = statements.split('\n').filter((l) => l.trim() && !/^set local check_function_bodies/i.test(l.trim()))
  return meaningful.length ? statements + '\n' : ''
}

/** Where each object is defined: `app.todos` → 30_todos.sql, policy names, trigger and index names. */
async function schemaIndex(dir: string): Promise<Map<string, string>> {
  const index = new Map<string, string>()
  for (const file of await listSchemaFiles(dir)) {
    const text = await readFile(file, 'utf8')
    const name = basename(file)
    const patterns = [
      /create (?:table|function|type|schema) ((?:app|api)\.\w+|app|api)/gi,
      /create (?:unique )?index (\w+)/gi,
      /create (?:constraint )?trigger (\w+)\s+[\s\S]*?\son (app\.\w+)/gi,
      /create policy "([^"]+)"/gi,
    ]
    for (const pattern of patterns) {
      for (const m of text.matchAll(pattern)) {
        const key = m[2] ? `${m[1]} on ${m[2]}` : m[1]!
        // Policy names are cut at 63 bytes in the catalog (and so in the diff).
        index.set(key.startsWith('app.') || key.startsWith('api.') || m[2] ? key : Buffer.from(key).subarray(0, 63).toString(), name)
      }
    }
  }
  return index
}

/**
 * The diff, statement by statement, each headed by the object it touches and the domain file
 * that defines it (or should), so a reader knows where to look.
 */
export async function explainDiff(diff: string, dir = SCHEMAS_DIR): Promise<string> {
  const index = await schemaIndex(dir)
  const statements = splitStatements(diff).filter((s) => !/^set local/i.test(s))
  return statements
    .map((statement) => {
      const flat = statement.replace(/"/g, '')
      // What the statement is, from its leading words only: a function body or a comment may
      // well mention a policy, a trigger or an index.
      const lead = statement.replace(/^(?:\s*--[^\n]*\n)*\s*/, '')
      const flatLead = lead.replace(/"/g, '')
      let where: string | undefined
      const policy = /^(?:create|drop|alter|comment on) policy (?:if exists )?"?([^"]+?)"? on /i.exec(lead)
      const trigger =
        /^create (?:or replace )?(?:constraint )?trigger (\w+)\s[\s\S]*?\son ([\w.]+)/i.exec(flatLead) ??
        /^(?:drop|alter|comment on) trigger (?:if exists )?(\w+) on ([\w.]+)/i.exec(flatLead)
      const index_ = /^(?:create (?:unique )?index (?:concurrently )?(?:if not exists )?|drop index (?:concurrently )?(?:if exists )?)(?:\w+\.)?(\w+)/i.exec(flatLead)
      if (policy) where = index.get(policy[1]!)
      else if (trigger) where = index.get(`${trigger[1]} on ${trigger[2]}`)
      else if (index_) where = index.get(index_[1]!)
      const table = /\b((?:app|api)\.\w+)/.exec(flat)?.[1] ?? /\bschema (app|api)\b/i.exec(flat)?.[1]
      where ??= table ? index.get(table) : undefined
      const object = policy ? `policy "${policy[1]}" on ${table}` : trigger ? `trigger ${trigger[1]} on ${trigger[2]}` : index_ ? `index ${index_[1]} on ${table}` : table
      const head = `-- ${object ?? 'object'}: ${where ? `supabase/schemas/${where}` : 'in no schema file (add it to its domain file)'}`
      return `${head}\n${statement};`
    })
    .join('\n\n')
}

/** Splits SQL at top-level semicolons (not inside quotes, dollar quotes or comments). */
export function splitStatements(text: string): string[] {
  const statements: string[] = []
  let start = 0
  let i = 0
  while (i < text.length) {
    const c = text[i]!
    if (c === "'" || c === '"') {
      const end = text.indexOf(c, i + 1)
      i = end < 0 ? text.length : end + 1
      continue // a doubled quote is two quoted runs, which is the same for splitting
    }
    if (c === '-' && text[i + 1] === '-') {
      const end = text.indexOf('\n', i)
      i = end < 0 ? text.length : end + 1
      continue
    }
    if (c === '$') {
      const tag = /^\$[A-Za-z_]*\$/.exec(text.slice(i))?.[0]
      if (tag) {
        const end = text.indexOf(tag, i + tag.length)
        i = end < 0 ? text.length : end + tag.length
        continue
      }
    }
    if (c === ';') {
      statements.push(text.slice(start, i).trim())
      start = i + 1
    }
    i++
  }
  statements.push(text.slice(start).trim())
  return statements.filter(Boolean)
}

/** A migration file's timestamp: now (UTC), or one second after the latest migration if that is later. */
export function nextVersion(latest: string | undefined, now = new Date()): string {
  const stamp = now.toISOString().replace(/\D/g, '').slice(0, 14)
  if (!latest || stamp > latest) return stamp
  return (BigInt(latest) + 1n).toString()
}
