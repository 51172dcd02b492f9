// A real webhook receiver on 127.0.0.1 (or another loopback address, so that tests can have
// receivers on distinct hosts: 127.0.0.2, 127.0.0.3, …): records every request (headers, raw
// body, when) and answers with whatever the test's handler decides (status, headers, delay, or
// never).
import { type IncomingMessage, type ServerResponse, createServer } from 'node:http'

export interface Received {
  headers: Record<string, string>
  body: string
  at: number
  path: string
}

export type Handler = (request: Received, response: ServerResponse, index: number) => void | Promise<void>

export async function startReceiver(handler: Handler = (_req, res) => { res.end('ok') }, options: { host?: string } = {}) {
  const host = options.host ?? '127.0.0.1'
  const received: Received[] = []
  let current = handler
  const waiters: (() => void)[] = []
  const sockets = new Set<import('node:net').Socket>()
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const entry: Received = {
        headers: Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)])),
        body: Buffer.concat(chunks).toString('utf8'),
        at: Date.now(),
        path: req.url ?? '/',
      }
      received.push(entry)
      for (const wake of waiters.splice(0)) wake()
      void current(entry, res, received.length - 1)
    })
  })
  server.on('connection', (socket) => {
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
  })
  const port = await new Promise<number>((resolve) => server.listen(0, host, () => resolve((server.address() as { port: number }).port)))
  return {
    port,
    /** The URL's host, name and port, as the worker's per-host cap and breaker count it. */
    host: `${host}:${port}`,
    url: `http://${host}:${port}`,
    received,
    /** Replaces how requests are answered from now on. */
    answer(next: Handler) {
      current = next
    },
    /** Resolves once `count` requests arrived (rejects after timeoutMs). */
    async waitFor(count: number, timeoutMs = 15_000): Promise<Received[]> {
      const deadline = Date.now() + timeoutMs
      while (received.length < count) {
        if (Date.now() > deadline) throw new Error(`the receiver got ${received.length} of ${count} requests within ${timeoutMs} ms`)
        await new Promise<void>((resolve) => {
          waiters.push(resolve)
          setTimeout(resolve, 50)
        })
      }
      return received
    },
    async close() {
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
