// The environment of DESIGN.md section 2, read and checked once.
import { readFileSync, rmSync, writeFileSync } from 'node:fs'
import { availableParallelism } from 'node:os'
import { join, resolve } from 'node:path'
import { deadlineMarginFrom, statementTimeoutFrom } from '../functions/lib/sql.ts'
import { type ApnsConfig, apnsConfigFrom } from '../functions/lib/push.ts'
import { generateVapidKeys, type VapidKeys } from './push-sender.ts'
import { loadSecrets, loadVapidKeys } from './secrets.ts'

export interface Config {
  host: string
  port: number
  publicUrl: string
  /** WEB_URL: base of web url fields (/@username, /todos/{n}, /projects/{slug}); default publicUrl. */
  webUrl: string
  dataDir: string
  /** Set: use this PostgreSQL; unset: the embedded one. */
  databaseUrl: string | null
  embeddedPort: number
  jwtSecret: string
  postgresPassword: string
  upgradeUrl: string
  /** statement_timeout of the API's connections (STATEMENT_TIMEOUT_MS, default 5 s; 0: none). */
  statementTimeoutMs: number
  /**
   * How long past the statement timeout a statement may go unanswered before its connection is
   * destroyed as silent (STATEMENT_DEADLINE_MARGIN_MS, default 2 s): the API's, the workers' and
   * the Realtime gateway's connections.
   */
  deadlineMarginMs: number
  /** WEBHOOK_ALLOW_PRIVATE=1: webhooks may target http and loopback/private addresses (tests, local use). */
  webhookAllowPrivate: boolean
  /** APNS_KEY_ID, APNS_TEAM_ID, APNS_PRIVATE_KEY, APNS_TOPIC (and APNS_URL); null: APNs pushes are not sent. */
  apns: ApnsConfig | null
  /** Web Push VAPID keys: VAPID_PUBLIC_KEY/VAPID_PRIVATE_KEY/VAPID_SUBJECT, or generated into DATA_DIR. */
  vapid: VapidKeys
}

function integer(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined || value === '') return fallback
  const n = Number(value)
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new Error(`${name} must be a port number, got ${JSON.stringify(value)}`)
  return n
}

export function readConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const host = env.HOST || '127.0.0.1'
  const port = integer('PORT', env.PORT, 54321)
  const dataDir = resolve(env.DATA_DIR || '.data')
  const secrets = loadSecrets(dataDir)
  const publicUrl = (env.PUBLIC_URL || `http://${host.includes(':') ? `[${host}]` : host}:${port}`).replace(/\/+$/, '')
  return {
    host,
    port,
    publicUrl,
    webUrl: (env.WEB_URL || publicUrl).replace(/\/+$/, ''),
    dataDir,
    databaseUrl: env.DATABASE_URL || null,
    embeddedPort: integer('EMBEDDED_POSTGRES_PORT', env.EMBEDDED_POSTGRES_PORT, 54322),
    jwtSecret: env.JWT_SECRET || secrets.jwtSecret,
    postgresPassword: secrets.postgresPassword,
    upgradeUrl: env.UPGRADE_URL || `${publicUrl}/upgrade`,
    statementTimeoutMs: statementTimeoutFrom(env.STATEMENT_TIMEOUT_MS),
    deadlineMarginMs: deadlineMarginFrom(env.STATEMENT_DEADLINE_MARGIN_MS),
    webhookAllowPrivate: webhookAllowPrivateFrom(env.WEBHOOK_ALLOW_PRIVATE),
    apns: apnsConfigFrom((name) => env[name]),
    vapid: vapidFrom(env, dataDir),
  }
}

/**
 * Database connections of the API server: twice the CPU cores, at least 4, at most 20. More
 * connections than the cores can run only queue inside PostgreSQL, where they contend; queued
 * in the pool instead, requests are served in order. On the 2-core machine 4 connections served
 * 15–25% more requests per second than 20 (docs/performance.md, "Pool size").
 */
export function databasePoolSize(cores = availableParallelism()): number {
  return Math.min(20, Math.max(4, 2 * cores))
}

/**
 * WEBHOOK_ALLOW_PRIVATE: exactly `1` lifts the SSRF address check (DESIGN.md's contract, and what
 * the edge entry reads); anything else leaves it on, so a typo never opens it.
 */
export function webhookAllowPrivateFrom(value: string | undefined): boolean {
  return value === '1'
}

/** Where `npm start` records the URLs it serves, so the operator CLI prints the same ones. */
const serverFile = (dataDir: string) => join(dataDir, 'server.json')

export function recordServer(config: Config): void {
  writeFileSync(serverFile(config.dataDir), JSON.stringify({ pid: process.pid, publicUrl: config.publicUrl, webUrl: config.webUrl }) + '\n')
}

export function forgetServer(config: Config): void {
  rmSync(serverFile(config.dataDir), { force: true })
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/**
 * The operator CLI's configuration: the server's rules (PUBLIC_URL, else http://HOST:PORT, and
 * WEB_URL). When the CLI is given neither PUBLIC_URL nor PORT, the URLs of the `npm start`
 * running on the same DATA_DIR win over the 54321 default: the CLI then prints the URLs that
 * server answers, whatever PORT it was started with.
 */
export function readCliConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const config = readConfig(env)
  if (env.PUBLIC_URL || env.PORT) return config
  try {
    const server = JSON.parse(readFileSync(serverFile(config.dataDir), 'utf8')) as { pid: number; publicUrl: string; webUrl: string }
    if (!alive(server.pid)) return config
    const webUrl = env.WEB_URL ? config.webUrl : server.webUrl
    return { ...config, publicUrl: server.publicUrl, webUrl, upgradeUrl: env.UPGRADE_URL || `${server.publicUrl}/upgrade` }
  } catch {
    return config
  }
}

/** VAPID keys from the environment (both keys, or neither), else DATA_DIR's generated pair. */
export function vapidFrom(env: NodeJS.ProcessEnv, dataDir: string): VapidKeys {
  const subject = env.VAPID_SUBJECT || 'mailto:push@todo-sharing.invalid'
  if (!/^(mailto:|https:\/\/)/.test(subject)) throw new Error(`VAPID_SUBJECT must be a mailto: or https: URL, got ${JSON.stringify(subject)}`)
  if (env.VAPID_PUBLIC_KEY || env.VAPID_PRIVATE_KEY) {
    if (!env.VAPID_PUBLIC_KEY || !env.VAPID_PRIVATE_KEY) throw new Error('Set both VAPID_PUBLIC_KEY and VAPID_PRIVATE_KEY, or neither (generated into DATA_DIR).')
    return { publicKey: env.VAPID_PUBLIC_KEY, privateKey: env.VAPID_PRIVATE_KEY, subject }
  }
  return { ...loadVapidKeys(dataDir, generateVapidKeys), subject }
}
