// Issue 30: local/gateway.ts, the stand-in for Supabase's API gateway in front of the edge
// function (`npm run start:edge`, test/edge*.test.ts). Against a real upstream that echoes what
// it received: the prefix mapping, and what a client may not tell the function through it (its
// own address, host or scheme in forwarding headers; a header it names hop-by-hop).
import { type IncomingHttpHeaders, type Server, createServer, request } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Gateway, startGateway } from '../local/gateway.ts'
import { freePort } from './support/net.ts'

let upstream: Server
let gateway: Gateway

beforeAll(async () => {
  // What the function would see: the request line's path and every header.
  upstream = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json', connection: 'close, x-upstream-hop', 'x-upstream-hop': 'hop', 'x-kept': 'end to end' })
      res.end(JSON.stringify({ url: req.url, headers: req.headers }))
    })
  })
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', () => resolve()))
  gateway = await startGateway({ port: 0, functions: { api: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}` } })
})

afterAll(async () => {
  await gateway?.close()
  await new Promise<void>((resolve) => (upstream ? upstream.close(() => resolve()) : resolve()))
})

/** One request through node:http (fetch may not send Connection or Host), its answer parsed. */
function send(path: string, headers: Record<string, string>): Promise<{ status: number; headers: IncomingHttpHeaders; body: any }> {
  const { hostname, port } = new URL(gateway.url)
  return new Promise((resolve, reject) => {
    const req = request({ hostname, port, path, method: 'GET', headers, agent: false }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => (text += chunk))
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: JSON.parse(text) }))
    })
    req.on('error', reject)
    req.end()
  })
}

describe('the local gateway', () => {
  it('maps /functions/v1/<name>/x to the function\'s /<name>/x, query included; another name is a 404 {error}', async () => {
    expect((await send('/functions/v1/api/v1/todos?limit=2', {})).body.url).toBe('/api/v1/todos?limit=2')
    expect((await send('/functions/v1/api', {})).body.url).toBe('/api')
    const other = await send('/functions/v1/other/v1/todos', {})
    expect(other.status).toBe(404)
    expect(other.body).toEqual({ error: 'No route matches GET /functions/v1/other/v1/todos.' })
  })

  it('a client\'s own Forwarded, X-Forwarded-* and X-Real-IP never reach the function; X-Forwarded-For is the socket\'s address', async () => {
    const seen = (await send('/functions/v1/api/v1/users/me', {
      host: 'evil.example',
      forwarded: 'for=203.0.113.7;host=evil.example;proto=https',
      'x-forwarded-for': '203.0.113.7',
      'x-forwarded-host': 'evil.example',
      'x-forwarded-proto': 'https',
      'x-forwarded-port': '443',
      'x-forwarded-prefix': '/elsewhere',
      'x-real-ip': '203.0.113.7',
      authorization: 'Bearer svc_sk_passed-on',
    })).body.headers as IncomingHttpHeaders
    expect(seen['x-forwarded-for']).toBe('127.0.0.1')
    for (const name of ['forwarded', 'x-forwarded-host', 'x-forwarded-proto', 'x-forwarded-port', 'x-forwarded-prefix', 'x-real-ip']) expect(seen[name], name).toBeUndefined()
    // End-to-end headers pass as sent (the function builds no link from Host: PUBLIC_URL).
    expect(seen.authorization).toBe('Bearer svc_sk_passed-on')
    expect(seen.host).toBe('evil.example')
  })

  it('headers a Connection header names are hop-by-hop: dropped in both directions', async () => {
    const answer = await send('/functions/v1/api/health', { connection: 'keep-alive, x-client-hop', 'x-client-hop': 'hop', 'x-kept': 'end to end' })
    const seen = answer.body.headers as IncomingHttpHeaders
    expect(seen['x-client-hop']).toBeUndefined()
    expect(seen['x-kept']).toBe('end to end')
    expect(answer.headers['x-upstream-hop']).toBeUndefined()
    expect(answer.headers['x-kept']).toBe('end to end')
  })

  it('a function that is not listening: 502 {error}', async () => {
    const down = await startGateway({ port: 0, functions: { api: `http://127.0.0.1:${await freePort()}` } })
    try {
      const res = await fetch(`${down.url}/functions/v1/api/health`)
      expect(res.status).toBe(502)
      expect(await res.json()).toEqual({ error: 'The edge function is not reachable.' })
    } finally {
      await down.close()
    }
  })
})
