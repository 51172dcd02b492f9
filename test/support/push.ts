// Stand-ins for Apple's push service and a browser's Web Push service, both real servers on
// 127.0.0.1, that check what a real one checks:
// - APNs: HTTP/2 over TLS with a self-signed certificate (made with openssl for 127.0.0.1); the
//   provider token's ES256 signature (against the public half of the test's key), kid and iss;
//   the headers apns-push-type, apns-topic, apns-id; the JSON payload, and its size: over 4096
//   bytes is 413 PayloadTooLarge, as Apple answers. The provider token's age: issued (iat) more
//   than an hour before is 403 ExpiredProviderToken; and its renewals: a new token issued less
//   than 20 minutes after the one before is 429 TooManyProviderTokenUpdates (Apple's "Establishing
//   a token-based connection to APNs"; measured here between the tokens' iat, so a test's moved
//   clock counts as Apple's would). The device token: hexadecimal, 64 digits (32 bytes) up to 200
//   (Apple warns the length may grow), else 400 BadDeviceToken. Otherwise answers as told.
// - Web Push: plain HTTP (tests run with WEBHOOK_ALLOW_PRIVATE's allowance); the VAPID JWT
//   (ES256, against the k= public key) with an `exp` in the future and at most 24 hours away
//   (RFC 8292 section 2; else 403, as push services answer), and the body decrypted with http_ece
//   (RFC 8291, aes128gcm) with the subscription's private key and auth secret. A body over 4096
//   bytes is 413, as push services answer (RFC 8030 section 7.2).
import { execFileSync } from 'node:child_process'
import { createECDH, createPublicKey, generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:http'
import http2 from 'node:http2'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import ece from 'http_ece'
import { decodeProtectedHeader, importSPKI, jwtVerify } from 'jose'
import type { ApnsConfig } from '../../functions/lib/push.ts'

export interface ApnsPush {
  token: string
  headers: Record<string, string>
  payload: any
  jwt: { kid: string | undefined; iss: string | undefined; iat: number | undefined; raw: string }
  /** Why the stand-in found the request wrong, or null. */
  problem: string | null
  /** The payload's size in bytes, as sent. */
  bytes: number
}

/** `body: 'endless'`: after the status, a body that never ends (64 KiB every few ms until the client goes). */
export type ApnsAnswer = { status: number; reason?: string; retryAfter?: string; body?: 'endless' } | 'hang'

/**
 * A certificate for 127.0.0.1 (EC P-256) signed by a throwaway CA, PEM: the CA is what clients
 * are told to trust (Deno's TLS refuses a self-signed CA certificate used as the server's own).
 */
function selfSigned(): { key: string; cert: string; ca: string } {
  const dir = mkdtempSync(join(tmpdir(), 'apns-cert-'))
  const file = (name: string) => join(dir, name)
  const openssl = (...args: string[]) => execFileSync('openssl', args, { stdio: 'ignore' })
  try {
    openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
      '-subj', '/CN=Test APNs CA', '-keyout', file('ca.key'), '-out', file('ca.pem'))
    openssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', '/CN=127.0.0.1',
      '-keyout', file('key.pem'), '-out', file('leaf.csr'))
    writeFileSync(file('ext.cnf'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n')
    openssl('x509', '-req', '-in', file('leaf.csr'), '-CA', file('ca.pem'), '-CAkey', file('ca.key'), '-CAcreateserial', '-days', '1',
      '-extfile', file('ext.cnf'), '-out', file('cert.pem'))
    return { key: readFileSync(file('key.pem'), 'utf8'), cert: readFileSync(file('cert.pem'), 'utf8'), ca: readFileSync(file('ca.pem'), 'utf8') }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

export async function startApnsStandIn() {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
  const config: ApnsConfig = {
    keyId: 'KEY1234567',
    teamId: 'TEAM123456',
    privateKey: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string,
    topic: 'com.example.todos',
  }
  const verifyKey = await importSPKI(publicKey.export({ type: 'spki', format: 'pem' }) as string, 'ES256')
  const tls = selfSigned()
  const pushes: ApnsPush[] = []
  const waiters: (() => void)[] = []
  let answer: (push: ApnsPush, index: number) => ApnsAnswer | Promise<ApnsAnswer> = () => ({ status: 200 })
  let connections = 0
  /** The newest provider token seen, and its iat: a different one within 20 minutes of it is a renewal too soon. */
  let newestToken: { raw: string; iat: number } | null = null
  const server = http2.createSecureServer({ key: tls.key, cert: tls.cert })
  // A client that dies (kill -9 of a worker) resets its connection: Apple shrugs, and so does
  // this stand-in (an 'error' without a listener would end the test run as uncaught).
  server.on('session', (session) => {
    connections++
    session.on('error', () => {})
  })
  server.on('stream', (stream, headers) => {
    stream.on('error', () => {})
    const chunks: Buffer[] = []
    stream.on('data', (c: Buffer) => chunks.push(c))
    stream.on('end', async () => {
      const path = String(headers[':path'])
      const flat: Record<string, string> = {}
      for (const [k, v] of Object.entries(headers)) if (!k.startsWith(':')) flat[k] = String(v)
      const raw = (flat.authorization ?? '').replace(/^bearer /, '')
      let problem: string | null = null
      let jwt: ApnsPush['jwt'] = { kid: undefined, iss: undefined, iat: undefined, raw }
      try {
        const header = decodeProtectedHeader(raw)
        const { payload } = await jwtVerify(raw, verifyKey, { algorithms: ['ES256'] })
        jwt = { kid: header.kid, iss: payload.iss, iat: payload.iat, raw }
        if (header.kid !== config.keyId) problem = `kid ${header.kid}`
        if (payload.iss !== config.teamId) problem = `iss ${payload.iss}`
      } catch (err) {
        problem = `provider token: ${(err as Error).message}`
      }
      if (headers[':method'] !== 'POST' || !/^\/3\/device\/[0-9a-f]+$/.test(path)) problem = `request ${headers[':method']} ${path}`
      if (flat['apns-push-type'] !== 'alert') problem = 'apns-push-type'
      if (flat['apns-topic'] !== config.topic) problem = 'apns-topic'
      if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(flat['apns-id'] ?? '')) problem = 'apns-id'
      let payload: any = null
      const rawBody = Buffer.concat(chunks)
      try {
        payload = JSON.parse(rawBody.toString('utf8'))
      } catch {
        problem = 'payload is not JSON'
      }
      const push: ApnsPush = { token: path.split('/').pop()!, headers: flat, payload, jwt, problem, bytes: rawBody.length }
      pushes.push(push)
      for (const wake of waiters.splice(0)) wake()
      if (rawBody.length > 4096) {
        push.problem = `payload of ${rawBody.length} bytes`
        stream.respond({ ':status': 413 })
        stream.end(JSON.stringify({ reason: 'PayloadTooLarge' }))
        return
      }
      if (problem) {
        stream.respond({ ':status': 400 })
        stream.end(JSON.stringify({ reason: 'BadRequest', problem }))
        return
      }
      const refuse = (status: number, reason: string, why: string) => {
        push.problem = why
        stream.respond({ ':status': status, 'apns-id': flat['apns-id']! })
        stream.end(JSON.stringify({ reason }))
      }
      if (!/^(?:[0-9a-f]{2}){32,100}$/.test(push.token)) return refuse(400, 'BadDeviceToken', `device token of ${push.token.length} digits`)
      const iat = jwt.iat ?? 0
      if (Date.now() / 1000 - iat > 3600) return refuse(403, 'ExpiredProviderToken', `provider token issued ${Math.round(Date.now() / 1000 - iat)} s ago`)
      // A renewal is a token newer than the newest seen (a worker still on the one before is not).
      if (newestToken && raw !== newestToken.raw && iat >= newestToken.iat) {
        if (iat - newestToken.iat < 20 * 60) return refuse(429, 'TooManyProviderTokenUpdates', `provider token renewed ${iat - newestToken.iat} s after the last`)
      }
      if (!newestToken || iat > newestToken.iat) newestToken = { raw, iat }
      const decided = await answer(push, pushes.length - 1)
      if (decided === 'hang') return
      stream.respond({ ':status': decided.status, 'apns-id': flat['apns-id'] ?? randomUUID(), ...(decided.retryAfter ? { 'retry-after': decided.retryAfter } : {}) })
      if (decided.body === 'endless') {
        const chunk = Buffer.alloc(64 * 1024, 0x20)
        const timer = setInterval(() => { if (!stream.destroyed && !stream.closed) stream.write(chunk) }, 2)
        stream.on('close', () => clearInterval(timer))
        stream.on('error', () => clearInterval(timer))
        return
      }
      stream.end(decided.reason ? JSON.stringify({ reason: decided.reason }) : undefined)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as { port: number }
  config.url = `https://127.0.0.1:${port}`
  return {
    config,
    ca: tls.ca,
    pushes,
    get connections() { return connections },
    answer(fn: (push: ApnsPush, index: number) => ApnsAnswer | Promise<ApnsAnswer>) { answer = fn },
    async waitFor(count: number, timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs
      while (pushes.length < count) {
        if (Date.now() > deadline) throw new Error(`APNs stand-in: ${pushes.length} of ${count} pushes arrived`)
        await new Promise<void>((resolve) => { waiters.push(resolve); setTimeout(resolve, 100) })
      }
    },
    close: () => new Promise<void>((resolve) => { server.close(() => resolve()); for (const s of (server as any)._sessions ?? []) s.destroy() }),
  }
}

/** A browser's push subscription: the keys it gives the site, and its private half to decrypt. */
export function browserSubscription(endpoint: string) {
  const ecdh = createECDH('prime256v1')
  ecdh.generateKeys()
  const authSecret = randomBytes(16)
  return {
    endpoint,
    p256dh: ecdh.getPublicKey().toString('base64url'),
    auth: authSecret.toString('base64url'),
    decrypt: (body: Buffer) => ece.decrypt(body, { version: 'aes128gcm', privateKey: ecdh, authSecret }).toString('utf8'),
  }
}

export interface WebPushReceived {
  path: string
  headers: Record<string, string>
  body: Buffer
  vapid: { sub?: string; aud?: string; publicKey: string; exp?: number } | null
  problem: string | null
}

export async function startWebPushService() {
  const received: WebPushReceived[] = []
  let answer: (r: WebPushReceived, index: number) => number = () => 201
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', async () => {
      const headers = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)]))
      let problem: string | null = null
      let vapidRefused: string | null = null
      let vapid: WebPushReceived['vapid'] = null
      const match = /^vapid t=([^,]+), k=(.+)$/.exec(headers.authorization ?? '')
      if (!match) problem = `authorization ${headers.authorization}`
      else {
        try {
          const raw = Buffer.from(match[2]!, 'base64url')
          const key = createPublicKey({ key: { kty: 'EC', crv: 'P-256', x: raw.subarray(1, 33).toString('base64url'), y: raw.subarray(33).toString('base64url') }, format: 'jwk' })
          const { payload } = await jwtVerify(match[1]!, key, { algorithms: ['ES256'], requiredClaims: ['exp'] })
          vapid = { sub: payload.sub, aud: payload.aud as string, publicKey: match[2]!, exp: payload.exp }
          // jwtVerify refused an exp in the past; RFC 8292: no more than 24 hours ahead.
          if (payload.exp! - Date.now() / 1000 > 24 * 3600) vapidRefused = `vapid: exp ${payload.exp! - Math.round(Date.now() / 1000)} s ahead, past 24 hours`
        } catch (err) {
          vapidRefused = `vapid: ${(err as Error).message}`
        }
      }
      if (vapidRefused) problem = vapidRefused
      if (headers['content-encoding'] !== 'aes128gcm') problem = `content-encoding ${headers['content-encoding']}`
      if (!headers.ttl) problem = 'no TTL'
      const entry: WebPushReceived = { path: req.url ?? '/', headers, body: Buffer.concat(chunks), vapid, problem }
      received.push(entry)
      if (entry.body.length > 4096) entry.problem = `body of ${entry.body.length} bytes`
      res.statusCode = entry.body.length > 4096 ? 413 : vapidRefused ? 403 : problem ? 400 : answer(entry, received.length - 1)
      res.end()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as { port: number }
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    answer(fn: (r: WebPushReceived, index: number) => number) { answer = fn },
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }),
  }
}
