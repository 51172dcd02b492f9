// Secrets generated on first start and kept in DATA_DIR, so a fresh machine needs no setup
// and a second start finds the same database password and JWT secret.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { randomToken } from '../functions/lib/tokens.ts'

export interface Secrets {
  postgresPassword: string
  jwtSecret: string
}

export function loadSecrets(dataDir: string): Secrets {
  const file = resolve(dataDir, 'secrets.json')
  if (existsSync(file)) return JSON.parse(readFileSync(file, 'utf8')) as Secrets
  const secrets: Secrets = { postgresPassword: randomToken(24), jwtSecret: randomToken(48) }
  mkdirSync(dataDir, { recursive: true })
  writeFileSync(file, JSON.stringify(secrets, null, 2) + '\n', { mode: 0o600 })
  return secrets
}
