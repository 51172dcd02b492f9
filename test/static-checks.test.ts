// Static checks as tests (issue 19, item 5): rules a reviewer would otherwise have to remember,
// read from the catalog of a migrated database and from the TypeScript sources. test/sql.test.ts
// already checks RLS on app tables, search_path on every app/api function, function comments,
// and foreign keys (on delete, index); this file adds what it does not cover.
import ts from 'typescript'
import { readFileSync, readdirSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ROOT } from '../local/paths.ts'
import { type TestWorld, startWorld } from './support/app.ts'

/**
 * The schemas this project owns. `auth`, `storage`, `realtime` and `extensions` are Supabase's
 * (sql/platform.sql only stands them in locally); our policies on realtime.messages are covered
 * by test/realtime-policies.test.ts. `public` is listed so that a table created there by mistake
 * is held to the same rules.
 */
const OWNED_SCHEMAS = ['app', 'api', 'public']

/**
 * The convention for a table without a policy (RLS on, so members can do nothing with it): its
 * comment says so and why, in a sentence starting "No policy" (e.g. "No policy and no grant: the
 * trigger writes, the worker reads."). A reader of the table learns it is deliberate.
 */
const NO_POLICY = /\bNo policy\b/

let world: TestWorld

beforeAll(async () => {
  world = await startWorld()
})
afterAll(() => world.close())

describe('row-level security, in every schema we own', () => {
  it('every table has RLS enabled and either a policy or a comment that says why it has none ("No policy…")', async () => {
    const tables = await world.sql<{ name: string; rls: boolean; policies: number; comment: string | null }[]>`
      select format('%I.%I', n.nspname, c.relname) as name, c.relrowsecurity as rls,
             (select count(*)::int from pg_policy p where p.polrelid = c.oid) as policies,
             obj_description(c.oid, 'pg_class') as comment
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = any (${OWNED_SCHEMAS}) and c.relkind in ('r', 'p')`
    expect(tables.length).toBeGreaterThan(40)
    expect(tables.filter((t) => !t.rls).map((t) => t.name)).toEqual([])
    const unexplained = tables.filter((t) => t.policies === 0 && !NO_POLICY.test(t.comment ?? ''))
    expect(unexplained.map((t) => t.name)).toEqual([])
    // The convention is in use (and the check above is not vacuous).
    expect(tables.filter((t) => t.policies === 0).length).toBeGreaterThan(5)
  })

  it('a table the comment says has no policy really has none (the comment does not go stale)', async () => {
    const stale = await world.sql<{ name: string }[]>`
      select format('%I.%I', n.nspname, c.relname) as name
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = any (${OWNED_SCHEMAS}) and c.relkind in ('r', 'p')
        and obj_description(c.oid, 'pg_class') ~ '\\mNo policy\\M'
        and exists (select 1 from pg_policy p where p.polrelid = c.oid)`
    expect(stale.map((t) => t.name)).toEqual([])
  })

  it('a table without a policy grants members nothing either (a grant there would be dead, or a policy forgotten)', async () => {
    const granted = await world.sql<{ name: string; role: string }[]>`
      select format('%I.%I', n.nspname, c.relname) as name, r.rolname as role
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
      cross join pg_roles r
      where n.nspname = any (${OWNED_SCHEMAS}) and c.relkind in ('r', 'p')
        and r.rolname in ('anon', 'authenticated')
        and not exists (select 1 from pg_policy p where p.polrelid = c.oid)
        and has_table_privilege(r.oid, c.oid, 'select, insert, update, delete, truncate, references, trigger')`
    expect(granted).toEqual([])
  })

  it('every table and view has a comment that says what it holds', async () => {
    const rows = await world.sql<{ name: string }[]>`
      select format('%I.%I', n.nspname, c.relname) as name
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = any (${OWNED_SCHEMAS}) and c.relkind in ('r', 'p', 'v', 'm')
        and coalesce(obj_description(c.oid, 'pg_class'), '') = ''`
    expect(rows.map((r) => r.name)).toEqual([])
  })

  it('views run with the caller\'s rights (security_invoker), so they cannot bypass RLS', async () => {
    const rows = await world.sql<{ name: string }[]>`
      select format('%I.%I', n.nspname, c.relname) as name
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = any (${OWNED_SCHEMAS}) and c.relkind in ('v', 'm')
        and not coalesce('security_invoker=true' = any (c.reloptions) or 'security_invoker=on' = any (c.reloptions), false)`
    expect(rows.map((r) => r.name)).toEqual([])
  })
})

describe('functions, in every schema we own', () => {
  it('every security definer function sets search_path (a definer must not resolve names through the caller\'s path)', async () => {
    const definers = await world.sql<{ fn: string; config: string[] | null }[]>`
      select p.oid::regprocedure::text as fn, p.proconfig as config
      from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where p.prosecdef and n.nspname = any (${OWNED_SCHEMAS})`
    expect(definers.length).toBeGreaterThan(20)
    expect(definers.filter((d) => !(d.config ?? []).some((s) => s.startsWith('search_path='))).map((d) => d.fn)).toEqual([])
  })

  it('every function in a schema we own has a comment (public included; app and api are in test/sql.test.ts)', async () => {
    const rows = await world.sql<{ fn: string }[]>`
      select p.oid::regprocedure::text as fn from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname = any (${OWNED_SCHEMAS}) and coalesce(obj_description(p.oid, 'pg_proc'), '') = ''
        and not exists (select 1 from pg_depend d where d.objid = p.oid and d.deptype = 'e')`
    expect(rows.map((r) => r.fn)).toEqual([])
  })

  it('no function in a schema we own sets or names statement_timeout (the statements after it would outlast the deadline that watches them)', async () => {
    // The deadline of a silent database (functions/lib/sql.ts, WatchedSocket) assumes the pool's
    // statement timeout unless a statement our code sends names the setting; a function that
    // raised it (set_config, SET, or a SET clause of its own) would do so where the watch cannot see.
    const rows = await world.sql<{ fn: string }[]>`
      select p.oid::regprocedure::text as fn from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname = any (${OWNED_SCHEMAS})
        and (position('statement_timeout' in lower(p.prosrc)) > 0
             or position('statement_timeout' in lower(coalesce(array_to_string(p.proconfig, ' '), ''))) > 0)`
    expect(rows.map((r) => r.fn)).toEqual([])
  })

  it('every foreign key of a table in a schema we own says what happens on delete and is indexed (public included)', async () => {
    const fks = await world.sql<{ name: string; ondelete: string; indexed: boolean }[]>`
      select format('%I.%I', n.nspname, c.conname) as name, c.confdeltype as ondelete,
             exists (select 1 from pg_index i
                     where i.indrelid = c.conrelid
                       and (i.indkey::int2[])[0:cardinality(c.conkey) - 1] = c.conkey
                       and (i.indpred is null or cardinality(c.conkey) = 1)) as indexed
      from pg_constraint c join pg_class t on t.oid = c.conrelid join pg_namespace n on n.oid = t.relnamespace
      where c.contype = 'f' and n.nspname = any (${OWNED_SCHEMAS})`
    expect(fks.filter((f) => f.ondelete === 'a' || !f.indexed).map((f) => f.name)).toEqual([])
  })
})

// ----------------------------------------------------------------------------------------------
// No query text built from strings in TypeScript
// ----------------------------------------------------------------------------------------------

/** Where query text is written: the app, the local tooling, the edge function. */
const SOURCE_DIRS = ['functions', 'local', 'supabase/functions']

/**
 * Calls of `.unsafe(text)` whose text is not one string literal, and why each is safe. postgres.js
 * tagged templates send values as parameters; `.unsafe` sends its text as SQL, so anything built
 * into it must come from code, never from a request. Keyed by file and the start of the argument
 * (whitespace collapsed); a new construction fails the test until it is listed here with a reason.
 */
const ALLOWED_DYNAMIC_SQL: { file: string; text: string; why: string }[] = [
  // The request path: function names come from the route table in code, checked against a pattern
  // before use; every value is a $n parameter.
  { file: 'functions/lib/db.ts', text: 'statementFor(fn, args.length, Boolean(idempotency))', why: 'api.* name from a route (checked /^api\\.[a-z_]+$/), values (an Idempotency-Key too) as $n parameters, prepared' },
  { file: 'functions/oauth/oauth.ts', text: '`select ${fn}(${params}) as result`', why: 'app.oauth_* name from code (checked /^app\\.oauth_[a-z_]+$/), $n placeholders only' },
  { file: 'local/admin-commands.ts', text: '`select ${fn}(${params})::text as body`', why: 'api.* name from the CLI\'s command table (checked), $n placeholders only' },
  // Local tooling: migrations and schema files are the project's own SQL files, read from disk.
  { file: 'local/migrate.ts', text: 'await readFile(PLATFORM_SHIM, \'utf8\')', why: 'sql/platform.sql, the project\'s own file' },
  { file: 'local/migrate.ts', text: 'text', why: 'a migration file of supabase/migrations' },
  { file: 'local/schema.ts', text: 'text', why: 'a statement of a supabase/schemas file' },
  // Scratch databases: identifiers made in code (pid, timestamp), not from input.
  { file: 'local/db-diff.ts', text: '`create database ${db}`', why: 'scratch database name built from the pid and time' },
  { file: 'local/db-diff.ts', text: '`drop database if exists ${db} with (force)`', why: 'the same scratch database' },
  // The benchmark (npm run bench / seed): database, table and index names and numbers from its own
  // constants and the catalog; it never takes input from the network.
  { file: 'local/bench/databases.ts', text: '`create database ${name}`', why: 'benchmark database name, a constant' },
  { file: 'local/bench/notifications.ts', text: '`drop database if exists ${DATABASE} with (force)`', why: 'a constant' },
  { file: 'local/bench/per-transaction.ts', text: "side === 'after' ? after : before", why: 'the SQL files its operator names (--before, --after): a migration and the definitions it replaces' },
  { file: 'local/bench/per-transaction.ts', text: 'after', why: 'the --after SQL file again, left in place at the end' },
  { file: 'local/bench/notifications.ts', text: '`create database ${DATABASE}`', why: 'a constant' },
  { file: 'local/bench/notifications.ts', text: '`alter table app.comments ${verb} trigger _500_notify`', why: 'verb is enable or disable' },
  { file: 'local/bench/notifications.ts', text: '`alter table app.comment_user_mentions ${verb} trigger _500_notify`', why: 'verb is enable or disable' },
  { file: 'local/bench/notifications.ts', text: '`alter table app.reactions ${verb} trigger _500_notify`', why: 'verb is enable or disable' },
  { file: 'local/bench/webhooks.ts', text: '`drop database if exists ${DATABASE} with (force)`', why: 'a constant' },
  { file: 'local/bench/webhooks.ts', text: '`create database ${DATABASE}`', why: 'a constant' },
  { file: 'local/bench/profile.ts', text: '`set auto_explain.log_min_duration = \'${minMs}ms\';', why: 'a number of the profiler' },
  { file: 'local/bench/seed-data.ts', text: '`drop index ${row.name}`', why: 'index names read from pg_indexes' },
  { file: 'local/bench/seed-data.ts', text: '` insert into app.user_follows', why: 'seed and sizes: numbers and a seed string of the generator options' },
  { file: 'local/bench/seed-data.ts', text: '` insert into app.project_follows', why: 'as above' },
  { file: 'local/bench/seed-data.ts', text: '` insert into app.mutes', why: 'as above' },
  { file: 'local/bench/seed-data.ts', text: '` insert into seed_todos', why: 'as above' },
  { file: 'local/bench/seed-data.ts', text: '` insert into seed_comments', why: 'as above' },
  { file: 'local/bench/seed-data.ts', text: "` with made as materialized ( select", why: 'reactions on todos and comments: numbers and a seed string of the generator options' },
  { file: 'local/bench/seed-data.ts', text: '`alter table ${key.table} drop constraint ${key.name}`', why: 'unreferenced keys of bulk tables, read from pg_constraint, rebuilt at the end' },
  { file: 'local/bench/seed-data.ts', text: '`alter table ${key.table} add constraint ${key.name} ${key.def}`', why: 'the same keys, pg_get_constraintdef of each' },
  { file: 'local/bench/seed-data.ts', text: '`comment on constraint ${key.name} on ${key.table} is ${literal(key.comment)}`', why: 'the same keys, their comments quoted by literal()' },
  { file: 'local/bench/seed-data.ts', text: "`comment on index ${key.table.split('.')[0]}.${key.name} is ${literal(key.index_comment)}`", why: 'the same keys\' indexes, comments quoted by literal()' },
  { file: 'local/bench/seed-data.ts', text: "`select setval(pg_get_serial_sequence('app.todos', 'number'), ${Math.max(o.todos, 1)})`", why: 'a number of the generator options' },
  { file: 'local/bench/seed-data.ts', text: '`select count(*)::int as n from app.todos where number <= ${WORD_SAMPLE}`', why: 'a constant' },
  { file: 'local/bench/seed-data.ts', text: "` select s.word, s.ndoc from ts_stat($1) s", why: 'the order of the word picked: one of two constant expressions with numbers' },
  { file: 'local/bench/write-cost.ts', text: "`alter table ${t.table} ${enabled ? 'enable' : 'disable'} trigger ${JSON.stringify(t.name)}`", why: 'trigger and table names read from pg_trigger, the name quoted' },
  { file: 'local/bench/write-cost.ts', text: "`alter table ${t.table} ${scenario === 'enabled' ? 'enable' : 'disable'} trigger ${JSON.stringify(t.", why: 'trigger and table names read from pg_trigger, the name quoted (the database rounds)' },
  { file: 'local/bench/write-cost.ts', text: '`alter table app.todos enable trigger ${JSON.stringify(name)}`', why: 'a disabled trigger name read from pg_trigger, quoted (repairing an interrupted run)' },
  { file: 'local/bench/render-cost.ts', text: '`alter table ${table} alter column ${column} drop expression`', why: 'table and column names from the constant RENDERINGS list in the same file' },
  { file: 'local/bench/render-cost.ts', text: '`alter table ${table} disable trigger ${trigger}`', why: 'table and trigger names from the constant RENDERING_TRIGGERS list in the same file' },
  { file: 'local/bench/seed-data.ts', text: '` insert into app.todos', why: 'as above' },
  { file: 'local/bench/seed-data.ts', text: 'RECOUNT_TODO_TOTALS', why: 'a constant statement' },
  { file: 'local/bench/seed-data.ts', text: 'index.def', why: 'pg_get_indexdef of an index dropped before the load, recreated after' },
  { file: 'local/bench/seed-data.ts', text: '`comment on index ${index.name} is ${literal(index.comment)}`', why: 'the same index, its comment quoted by literal()' },
  { file: 'local/bench/seed-data.ts', text: '`select count(*)::int as n from ${table}`', why: 'table names from a constant list' },
  { file: 'local/bench/seed-data.ts', text: '`vacuum (analyze) ${table}`', why: 'table names from a constant list' },
  { file: 'local/bench/subset.ts', text: '`delete from ${fk.table} x where ${missing}`', why: 'tables and columns from a constant list of foreign keys' },
  { file: 'local/bench/subset.ts', text: '`update ${fk.table} x set ${fk.column} = null where ${missing}`', why: 'as above' },
  { file: 'local/bench/subset.ts', text: '`drop database if exists ${name} with (force)`', why: 'benchmark database name, from code' },
  { file: 'local/bench/subset.ts', text: '`create database ${name} template ${large.name}', why: 'benchmark database names, from code' },
  { file: 'local/bench/subset.ts', text: '`insert into keep select id from app.todos', why: 'a fill fraction, a number' },
  { file: 'local/bench/subset.ts', text: 'RECOUNT_TODO_TOTALS', why: 'a constant statement' },
  { file: 'local/bench/subset.ts', text: '`vacuum (full, analyze) ${t.name}`', why: 'table names from the catalog' },
  { file: 'local/bench/subset.ts', text: '`select count(*)::int as n from app.${table}`', why: 'table names from a constant list' },
]

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    if (name === 'node_modules') return []
    return statSync(path).isDirectory() ? sourceFiles(path) : /\.(m|c)?tsx?$/.test(name) && !name.endsWith('.d.ts') ? [path] : []
  })
}

interface DynamicSql { file: string; line: number; text: string }

/** Every `.unsafe(…)` call whose first argument is not a single string literal, in `text` of `file`. */
function dynamicSqlCalls(file: string, text: string): DynamicSql[] {
  const found: DynamicSql[] = []
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true)
  const visit = (node: ts.Node) => {
    if (ts.isCallExpression(node) && ts.isPropertyAccessExpression(node.expression) && node.expression.name.text === 'unsafe') {
      const arg = node.arguments[0]
      if (arg && !ts.isStringLiteral(arg) && !ts.isNoSubstitutionTemplateLiteral(arg)) {
        found.push({ file, line: source.getLineAndCharacterOfPosition(node.getStart()).line + 1, text: arg.getText().replace(/\s+/g, ' ') })
      }
    }
    ts.forEachChild(node, visit)
  }
  visit(source)
  return found
}

const allowed = (call: DynamicSql) => ALLOWED_DYNAMIC_SQL.find((a) => a.file === call.file && call.text.startsWith(a.text.replace(/\s+/g, ' ')))

describe('no query text built from strings in TypeScript', () => {
  const files = SOURCE_DIRS.flatMap((dir) => sourceFiles(join(ROOT, dir)))
  const calls = files.flatMap((path) => dynamicSqlCalls(relative(ROOT, path).split('\\').join('/'), readFileSync(path, 'utf8')))

  it('finds the sources and the calls (the scan is not vacuous)', () => {
    expect(files.length).toBeGreaterThan(50)
    expect(calls.length).toBeGreaterThan(10)
  })

  it('every .unsafe(…) with built text is on the commented allowlist', () => {
    const unlisted = calls.filter((c) => !allowed(c)).map((c) => `${c.file}:${c.line} ${c.text.slice(0, 100)}`)
    expect(unlisted).toEqual([])
  })

  it('every allowlist entry still matches a call (no stale permission left behind)', () => {
    const stale = ALLOWED_DYNAMIC_SQL.filter((a) => !calls.some((c) => allowed(c) === a)).map((a) => `${a.file}: ${a.text}`)
    expect(stale).toEqual([])
    for (const entry of ALLOWED_DYNAMIC_SQL) expect(entry.why.length, entry.text).toBeGreaterThan(5)
  })

  it('the scan catches interpolation, concatenation and variables (it would fail on a new one)', () => {
    const probe = [
      "await sql.unsafe('select 1')", // a literal: fine
      'await sql.unsafe(`select 2`)', // a template without holes: fine
      'await sql.unsafe(`select * from app.users where username = \'${c.req.query("u")}\'`)',
      "await tx.unsafe('select * from app.todos where body = ' + body)",
      'await c.var.deps.sql.unsafe(query, [])',
    ].join('\n')
    const found = dynamicSqlCalls('functions/todos/todos.ts', probe)
    expect(found.map((f) => f.line)).toEqual([3, 4, 5])
    expect(found.filter(allowed)).toEqual([])
  })
})

describe('every test asserts something (issue 31, item 5)', () => {
  it('vitest runs test/support/setup.ts before each file, and it makes every test expect at least one assertion', () => {
    const config = readFileSync(join(ROOT, 'vitest.config.ts'), 'utf8')
    expect(config).toMatch(/setupFiles:\s*\[\s*'test\/support\/setup\.ts'\s*\]/)
    const setup = readFileSync(join(ROOT, 'test/support/setup.ts'), 'utf8')
    expect(setup).toMatch(/beforeEach\(\(\) => \{\s*expect\.hasAssertions\(\)\s*\}\)/)
  })
})
