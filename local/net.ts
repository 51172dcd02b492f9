// Ports and URLs of the PostgreSQL server, for the tests and `npm run db:diff`.
import { readFileSync } from 'node:fs'
import { createServer } from 'node:net'

/** A TCP port nobody listens on right now. */
export async function freePort(): Promise<number> {
  // Below the kernel's ephemeral range: a port the kernel picks for `listen(0)` is one it also
  // hands to outgoing connections, and a server that binds it seconds later (PostgreSQL after
  // initdb, a child process) lost it to one of those about once a run when four test files and
  // their clients ran at once. Random within the range, never the same twice in a process.
  const [low, high] = [20_000, ephemeralLow() - 1]
  for (let attempt = 0; high > low && attempt < 50; attempt++) {
    const port = low + Math.floor(Math.random() * (high - low + 1))
    if (handedOut.has(port)) continue
    if (await bindable(port)) {
      handedOut.add(port)
      return port
    }
  }
  return await listenOnce(0)
}

const handedOut = new Set<number>()

/** The first port of the kernel's ephemeral range (Linux procfs), else IANA's 49152 less a margin. */
function ephemeralLow(): number {
  try {
    const [first] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number)
    if (first && first > 20_000) return first
  } catch {}
  return 32_768
}

function bindable(port: number): Promise<boolean> {
  return listenOnce(port).then(() => true, () => false)
}

/** Listens on 127.0.0.1:port (0: any), closes, and resolves to the port bound. */
function listenOnce(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.unref()
    server.on('error', reject)
    server.listen(port, '127.0.0.1', () => {
      const address = server.address()
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))))
    })
  })
}

/** The same server, another database. */
export function databaseUrl(serverUrl: string, database: string): string {
  const url = new URL(serverUrl)
  url.pathname = '/' + database
  return url.toString()
}
