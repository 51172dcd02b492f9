// The local stand-in for Supabase's API gateway, for `npm run start:edge` and the edge tests: one
// host that serves the edge function under /functions/v1/<name> (the function sees /<name>/…, as
// on Supabase), and beside it whatever else the platform serves on that host (Storage's REST API,
// Realtime's websocket: the caller attaches them). It proxies, nothing more: no auth of its own
// (the function checks every credential), hop-by-hop headers dropped both ways (those a Connection
// header names too), the client's own forwarding headers (Forwarded, X-Forwarded-*, X-Real-IP)
// dropped, and the client's address in X-Forwarded-For.
import { type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse, createServer, request as httpRequest } from 'node:http'
import type { AddressInfo } from 'node:net'
import { getRequestListener } from '@hono/node-server'

export interface GatewayOptions {
  host?: string
  /** 0: any free port. */
  port: number
  /** Edge functions by name, each the origin its Deno.serve listens at: /functions/v1/<name>/x goes to <origin>/<name>/x. */
  functions: Record<string, string>
  /** Everything else this host serves (Storage's REST API under /storage/v1/): a fetch handler; unset: 404. */
  fetch?: Parameters<typeof getRequestListener>[0]
}

export interface Gateway {
  /** http://host:port, the platform's SUPABASE_URL. */
  url: string
  server: Server
  close(): Promise<void>
}

/** Headers of one hop, never forwarded (RFC 9110 section 7.6.1; each side frames its own body). */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'proxy-authorization', 'proxy-authenticate'])

/**
 * What a client may say about the hop it came through: never believed. The function builds every
 * link from PUBLIC_URL and counts addresses from X-Forwarded-For's first entry, but whatever
 * reads these later must find only what this gateway set, as behind Supabase's.
 */
const CLIENT_FORWARDING = new Set(['forwarded', 'x-forwarded-for', 'x-forwarded-host', 'x-forwarded-proto', 'x-forwarded-port', 'x-forwarded-prefix', 'x-real-ip', 'x-client-ip', 'true-client-ip', 'cf-connecting-ip'])

/** The hop-by-hop headers of one message: the fixed ones and those its Connection header names (RFC 9110 section 7.6.1). */
function hopByHop(connection: string | string[] | undefined): Set<string> {
  const named = new Set(HOP_BY_HOP)
  for (const value of [connection ?? []].flat()) for (const token of value.split(',')) if (token.trim()) named.add(token.trim().toLowerCase())
  return named
}

function forwardedHeaders(req: IncomingMessage): IncomingHttpHeaders {
  const headers: IncomingHttpHeaders = {}
  const dropped = hopByHop(req.headers.connection)
  for (const [name, value] of Object.entries(req.headers)) if (!dropped.has(name) && !CLIENT_FORWARDING.has(name)) headers[name] = value
  // The socket's address only: a client's own X-Forwarded-For is dropped, so it cannot choose the
  // address the function's per-address limits count (it reads the first entry).
  headers['x-forwarded-for'] = req.socket.remoteAddress ?? 'unknown'
  return headers
}

function answerError(res: ServerResponse, status: number, error: string): void {
  if (res.headersSent) {
    res.destroy()
    return
  }
  res.writeHead(status, { 'content-type': 'application/json' })
  res.end(JSON.stringify({ error }))
}

/** The function's path for a gateway path, or null: /functions/v1/api/x?q → /api/x?q. */
export function functionPath(url: string, names: string[]): { name: string; path: string } | null {
  const match = /^\/functions\/v1\/([A-Za-z0-9_-]+)([/?].*)?$/.exec(url)
  if (!match || !names.includes(match[1]!)) return null
  return { name: match[1]!, path: `/${match[1]}${match[2] ?? ''}` }
}

function proxy(req: IncomingMessage, res: ServerResponse, origin: string, path: string): void {
  const target = new URL(origin)
  const upstream = httpRequest({
    hostname: target.hostname, port: target.port, method: req.method, path, headers: forwardedHeaders(req),
  }, (answer) => {
    const headers: string[] = []
    const dropped = hopByHop(answer.headers.connection)
    for (let i = 0; i < answer.rawHeaders.length; i += 2) {
      if (!dropped.has(answer.rawHeaders[i]!.toLowerCase())) headers.push(answer.rawHeaders[i]!, answer.rawHeaders[i + 1]!)
    }
    res.writeHead(answer.statusCode ?? 502, answer.statusMessage, headers)
    answer.pipe(res)
    answer.on('error', () => res.destroy())
  })
  upstream.on('error', () => answerError(res, 502, 'The edge function is not reachable.'))
  // The client went away: so does the request to the function.
  res.on('close', () => {
    if (!res.writableFinished) upstream.destroy()
  })
  req.pipe(upstream)
}

export async function startGateway(options: GatewayOptions): Promise<Gateway> {
  const names = Object.keys(options.functions)
  const rest = options.fetch ? getRequestListener(options.fetch) : null
  const server = createServer((req, res) => {
    const routed = functionPath(req.url ?? '/', names)
    if (routed) return proxy(req, res, options.functions[routed.name]!, routed.path)
    if (rest) return void rest(req, res)
    answerError(res, 404, `No route matches ${req.method} ${(req.url ?? '/').split('?')[0]}.`)
  })
  const host = options.host ?? '127.0.0.1'
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.port, host, () => resolve())
  })
  const { port } = server.address() as AddressInfo
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    server,
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve())
      server.closeAllConnections()
    }),
  }
}
