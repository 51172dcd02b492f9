// Writes the Edge Function's copy of postgres.js (supabase/functions/_vendor/postgres) from
// node_modules/postgres as patch-package left it (patches/postgres+3.4.9.patch: porsager/postgres
// #1181, #1208). Deno never runs npm's postinstall, so `npm:postgres@3.4.9` in the function's
// import map was the release without our patch; the map now names this copy. Run it after the
// patch or the version changes (`npm run vendor:postgres`); test/driver-deno.test.ts fails while
// the copy differs from what this would write, and runs the driver bugs under Deno through it.
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { ROOT } from './paths.ts'

export const VENDORED_POSTGRES = join(ROOT, 'supabase', 'functions', '_vendor', 'postgres')
const SOURCE = join(ROOT, 'node_modules', 'postgres')

// Node's built-ins as postgres.js names them (bare); Deno wants them as node:… in a local file.
const BARE_BUILTIN = /from '(net|tls|crypto|stream|perf_hooks|os|fs)'/g

/**
 * The Node globals a file uses, imported: Deno gives them to npm packages only (in a local file,
 * setTimeout would be the web one and Buffer missing), as postgres.js's own Deno build imports
 * them too.
 */
function nodeGlobals(text: string): string {
  const uses = (name: string) => new RegExp(`\\b${name}\\b`).test(text)
  const lines: string[] = []
  if (uses('Buffer')) lines.push("import { Buffer } from 'node:buffer'")
  if (uses('process')) lines.push("import process from 'node:process'")
  const timers = ['clearImmediate', 'clearTimeout', 'setImmediate', 'setTimeout'].filter(uses)
  if (timers.length > 0) lines.push(`import { ${timers.join(', ')} } from 'node:timers'`)
  return lines.map((line) => `${line}\n`).join('')
}

/**
 * postgres.js's type definitions as an ES module's. They end in `export = postgres` (CommonJS),
 * which Deno honours for an npm package but not for a local file, whose default import then has
 * no type (TS1192, `deno run --check`): the default export, and each member of the namespace as a
 * named export (`import type { Sql } from 'postgres'`), instead.
 */
function asEsModuleTypes(text: string): string {
  const body = /^declare namespace postgres \{\n([\s\S]*?)^\}/m.exec(text)?.[1]
  if (!body || !/^export = postgres;$/m.test(text)) throw new Error('node_modules/postgres/types/index.d.ts: no `declare namespace postgres` or `export = postgres` where expected')
  const names = [...new Set([...body.matchAll(/^ {2}(?:export )?(?:interface|type|class|function|const|let|var|enum|namespace) ([A-Za-z_$][\w$]*)/gm)].map((m) => m[1]!))].sort()
  return text.replace(/^export = postgres;$/m, [
    '// Written by npm run vendor:postgres in place of `export = postgres`: Deno reads a local file as an ES module.',
    'export default postgres;',
    ...names.map((name) => `export import ${name} = postgres.${name};`),
  ].join('\n'))
}

/** The vendored files, by their path under VENDORED_POSTGRES, as they must read. */
export function vendoredPostgres(): Map<string, string> {
  const version = (JSON.parse(readFileSync(join(SOURCE, 'package.json'), 'utf8')) as { version: string }).version
  const files = new Map<string, string>()
  for (const name of readdirSync(join(SOURCE, 'src')).filter((n) => n.endsWith('.js')).sort()) {
    const original = readFileSync(join(SOURCE, 'src', name), 'utf8')
    let text = nodeGlobals(original) + original.replace(BARE_BUILTIN, "from 'node:$1'")
    if (name === 'index.js') {
      text = '// @ts-self-types="../types/index.d.ts"\n'
        + `// postgres.js ${version} with patches/postgres+${version}.patch, for the Edge Function (Deno): written by\n`
        + '// `npm run vendor:postgres` (local/vendor-postgres.ts) from node_modules/postgres. Do not edit.\n'
        + text
    }
    files.set(`src/${name}`, text)
  }
  files.set('types/index.d.ts', asEsModuleTypes(readFileSync(join(SOURCE, 'types', 'index.d.ts'), 'utf8')))
  files.set('README.md', notice(version, (JSON.parse(readFileSync(join(SOURCE, 'package.json'), 'utf8')) as { license: string }).license))
  return files
}

/** Where the vendored files come from, under which license, and how they are kept. */
function notice(version: string, license: string): string {
  return `# postgres.js ${version}, vendored for the Edge Function

Written by \`npm run vendor:postgres\` (\`local/vendor-postgres.ts\`) from \`node_modules/postgres\`,
which \`npm install\` patched with \`patches/postgres+${version}.patch\` (patch-package). Do not edit:
change the patch and run the script again (\`test/driver-deno.test.ts\` fails while these files
differ from what it writes).

- **Source:** https://github.com/porsager/postgres, the npm package \`postgres@${version}\`: its
  \`src/*.js\` and \`types/index.d.ts\`, with Node's built-ins imported as \`node:…\` and the Node
  globals each file uses imported (Deno gives them to npm packages only), and the types' \`export =\`
  written as an ES module's exports (Deno type-checks a local file as an ES module).
- **License:** ${license} (the package's \`license\`): postgres.js is dedicated to the public domain,
  so no notice is required; this one says where the files come from.
- **Why a copy:** Deno has no install step, so \`npm:postgres@${version}\` in the function's import
  map was the release without our patch (porsager/postgres#1181, pull request #1190; #1154 and
  #1208, pull request #1209). When a release carries the fixes, drop the patch and this directory,
  and map \`postgres\` to \`npm:postgres@<that release>\` again.
`
}

/** The files under VENDORED_POSTGRES now, by their path under it. */
export function vendoredPostgresOnDisk(dir = VENDORED_POSTGRES, prefix = ''): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? vendoredPostgresOnDisk(join(dir, entry.name), `${prefix}${entry.name}/`) : [`${prefix}${entry.name}`])
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const files = vendoredPostgres()
  rmSync(VENDORED_POSTGRES, { recursive: true, force: true })
  for (const [path, text] of files) {
    mkdirSync(dirname(join(VENDORED_POSTGRES, path)), { recursive: true })
    writeFileSync(join(VENDORED_POSTGRES, path), text)
  }
  console.log(`wrote ${files.size} files to ${VENDORED_POSTGRES}`)
}
