// The tables of docs/security.md, read once for every test that walks them
// (test/authorization.test.ts, test/authorization-matrix.test.ts): the document is the one
// source of who may call what, so the tests follow it instead of keeping lists of their own.
import { readFileSync } from 'node:fs'

export type App = 'any' | 'first-party' | 'approved'
export interface Alternative {
  scope: string
  app: App
}
export interface Row {
  method: string
  path: string
  key: 'read-only or read-write' | 'read-write' | 'refused'
  oauth: Alternative[]
}

export const SCOPES = ['public', 'write', 'billing', 'notifications', 'chat']

const securityDoc = () => readFileSync(new URL('../../docs/security.md', import.meta.url), 'utf8')

/** The rows of the table under "## OAuth endpoints" in docs/security.md: every route outside /v1. */
export function readOAuthTable(): string[] {
  const section = securityDoc().split('## OAuth endpoints')[1]!.split('\n## ')[0]!
  return section.split('\n')
    .map((line) => line.split('|').slice(1, -1).map((cell) => cell.trim()))
    .filter((cells) => cells.length === 3 && cells[0] !== 'Method' && !cells[0]!.startsWith('---'))
    .map(([method, path]) => `${method} ${path!.replace(/`/g, '')}`)
}

/** The rows of the table under "## Authorization table" in docs/security.md. */
export function readTable(): Row[] {
  const section = securityDoc().split('## Authorization table')[1]!.split('\n## ')[0]!
  const rows: Row[] = []
  for (const line of section.split('\n')) {
    const cells = line.split('|').slice(1, -1).map((cell) => cell.trim())
    if (cells.length !== 4 || cells[0] === 'Method' || cells[0]!.startsWith('---')) continue
    const [method, path, key, oauth] = cells as [string, string, Row['key'], string]
    const alternatives = oauth.split('; or ').map((alternative) => {
      const match = alternative.match(/^`([a-z]+)`, (any|first-party|approved) app$/)
      if (!match) throw new Error(`cannot read the OAuth cell ${JSON.stringify(oauth)}`)
      return { scope: match[1]!, app: match[2] as App }
    })
    if (!['read-only or read-write', 'read-write', 'refused'].includes(key)) throw new Error(`cannot read the key cell ${key}`)
    rows.push({ method, path: path.replace(/`/g, ''), key, oauth: alternatives })
  }
  return rows
}

/** The kind of client an alternative asks for, as `world.token` takes it. */
export function appOf(app: App): { firstParty: boolean; chat: boolean } {
  return { firstParty: app === 'first-party', chat: app === 'approved' }
}

/** A concrete path: our own or unknown IDs, so an allowed request is never refused for another reason. */
export function concretePath(path: string): string {
  return path
    .replace('{todo_id}', 'todo_00000000000000000000000000000000')
    .replace('{username}', 'me')
    .replace('{user_id}', 'bob')
    .replace('{project_id}', 'no-such-project')
    .replace('{comment_id}', 'comm_00000000000000000000000000000000')
    .replace('{reaction_id}', 'reac_00000000000000000000000000000000')
    .replace('{conversation_id}', 'conversation_00000000000000000000000000000000')
    .replace('{message_id}', 'message_00000000000000000000000000000000')
    .replace('{content}', encodeURIComponent('👍'))
    .replace('{export_id}', 'exp_00000000000000000000000000000000')
}
