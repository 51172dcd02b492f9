// Secrets generated on first start and kept in DATA_DIR, so a fresh machine needs no setup
// and a second start finds the same database password and JWT secret.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { randomToken } from '../functions/lib/tokens.ts'

export interface Secrets {
  postgresPassword: string
  jwtSecret: string
  /** Web Push VAPID keys (base64url), generated on the first start that needs them. */
  vapidPublicKey?: string
  vapidPrivateKey?: string
}

export function loadSecrets(dataDir: string): Secrets {
  const file = resolve(dataDir, 'secrets.json')
  if (existsSync(file)) return JSON.parse(readFileSync(file, 'utf8')) as Secrets
  const secrets: Secrets = { postgresPassword: randomToken(24), jwtSecret: randomToken(48) }
  mkdirSync(dataDir, { recursive: true })
  writeFileSync(file, JSON.stringify(secrets, null, 2) + '\n', { mode: 0o600 })
  return secrets
}

/**
 * The VAPID key pair of DATA_DIR: generated and added to secrets.json the first time (a start
 * from before push existed has none yet), the same on every later start, so browsers'
 * subscriptions (made for this public key) keep working.
 */
export function loadVapidKeys(dataDir: string, generate: () => { publicKey: string; privateKey: string }): { publicKey: string; privateKey: string } {
  const file = resolve(dataDir, 'secrets.json')
  const secrets = loadSecrets(dataDir)
  if (secrets.vapidPublicKey && secrets.vapidPrivateKey) return { publicKey: secrets.vapidPublicKey, privateKey: secrets.vapidPrivateKey }
  const keys = generate()
  writeFileSync(file, JSON.stringify({ ...secrets, vapidPublicKey: keys.publicKey, vapidPrivateKey: keys.privateKey }, null, 2) + '\n', { mode: 0o600 })
  return keys
}
