// A TCP proxy that can turn into a black hole: a database that goes silent without closing
// anything, as in a network partition or a failover where the old host vanishes.
//
// Forwarding, it passes bytes both ways. Swallowing, it keeps every socket open and forwards
// nothing: it stops reading on both sides, so what either side sends waits in the kernel's
// buffers (acknowledged at the TCP level, as a middlebox or a host whose process hangs would
// do), new connections are accepted and connected upstream but hear nothing, and a side that
// closes meanwhile is not told to the other. Forwarding again delivers what waited, in order,
// then the closes: like a partition that heals, TCP's retransmissions delivering late what was
// sent. (Dropping the bytes instead would corrupt the PostgreSQL streams, which no real network
// does to a TCP connection that survives.) Only 127.0.0.1.
import net from 'node:net'

export interface BlackHoleProxy {
  port: number
  /** `url` (a postgres:// URL) with its port replaced by the proxy's. */
  via(url: string): string
  /** Stop forwarding; keep every socket open. */
  swallow(): void
  /** Forward again: what waited is delivered, then the closes that happened meanwhile. */
  forward(): void
  /**
   * Close every connection from PostgreSQL's side, as a server that ends its sessions does: the
   * app gets a FIN (an orderly close, no error), PostgreSQL a reset. New connections are served.
   */
  cut(): void
  /** Connections accepted so far, and how many of them are not closed on both sides yet. */
  stats(): { accepted: number; open: number }
  close(): Promise<void>
}

interface Pair {
  client: net.Socket
  upstream: net.Socket
}

export async function startBlackHoleProxy(target: { host: string; port: number }): Promise<BlackHoleProxy> {
  const pairs = new Set<Pair>()
  /** What the sides did while swallowing (an end, a reset), passed on once forwarding. */
  let deferred: (() => void)[] = []
  let swallowing = false
  let accepted = 0
  const later = (fn: () => void) => (swallowing ? deferred.push(fn) : fn())

  const server = net.createServer((client) => {
    accepted++
    const upstream = net.connect(target.port, target.host)
    const pair: Pair = { client, upstream }
    pairs.add(pair)
    if (swallowing) {
      client.pause()
      upstream.pause()
    }
    client.on('data', (chunk) => upstream.write(chunk))
    upstream.on('data', (chunk) => client.write(chunk))
    // An end is passed on after what was written before it; a reset cuts the other side too.
    client.on('end', () => later(() => upstream.end()))
    upstream.on('end', () => later(() => client.end()))
    client.on('close', (hadError) => later(() => (hadError ? upstream.destroy() : undefined)))
    upstream.on('close', (hadError) => later(() => (hadError ? client.destroy() : undefined)))
    for (const socket of [client, upstream]) {
      socket.on('error', () => {})
      socket.on('close', () => {
        if (client.destroyed && upstream.destroyed) pairs.delete(pair)
      })
    }
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as net.AddressInfo).port

  return {
    port,
    via(url) {
      const parsed = new URL(url)
      parsed.hostname = '127.0.0.1'
      parsed.port = String(port)
      return parsed.toString()
    },
    swallow() {
      swallowing = true
      for (const { client, upstream } of pairs) {
        client.pause()
        upstream.pause()
      }
    },
    forward() {
      swallowing = false
      for (const { client, upstream } of pairs) {
        client.resume()
        upstream.resume()
      }
      const pending = deferred
      deferred = []
      for (const fn of pending) fn()
    },
    cut() {
      for (const { client, upstream } of pairs) {
        upstream.destroy()
        client.end()
      }
    },
    stats() {
      return { accepted, open: pairs.size }
    },
    async close() {
      swallowing = false
      for (const pair of pairs) {
        pair.client.destroy()
        pair.upstream.destroy()
      }
      pairs.clear()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
