// `npm start` on a fresh DATA_DIR: embedded PostgreSQL as the current user (root included),
// migrations, the API; the CLI reaches the same database; Ctrl-C stops everything; a second
// start reuses the data.
import { createHash } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, expect, it } from 'vitest'
import { connect } from 'node:net'
import { freePort } from './support/net.ts'
import { interrupt, runCli, startServer } from './support/process.ts'

const dirs: string[] = []

function serverAccepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1')
    socket.on('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.on('error', () => resolve(false))
  })
}
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true })
})

it('serves GET /v1/users/me with a key from the CLI, stops on Ctrl-C, and keeps the data', { timeout: 180_000 }, async () => {
  const dataDir = await mkdtemp(join(tmpdir(), 'todo-start-'))
  dirs.push(dataDir)
  const env = {
    DATA_DIR: dataDir,
    PORT: String(await freePort()),
    EMBEDDED_POSTGRES_PORT: String(await freePort()),
    DATABASE_URL: '',
    JWT_SECRET: '',
  }
  const base = `http://127.0.0.1:${env.PORT}`

  // How long a first start takes is the machine's (startServer's own deadline bounds a hang).
  const first = await startServer(env)
  expect(first.output()).toContain(`listening on ${base}`)
  expect(first.output()).toMatch(/Applied \d+ migration/)

  const created = await runCli(['create-user', '--username', 'alice'], env)
  expect(created.code, created.stderr).toBe(0)
  const { api_key } = JSON.parse(created.stdout)
  const me = await fetch(`${base}/v1/users/me`, { headers: { authorization: `Bearer ${api_key}` } })
  expect(me.status).toBe(200)
  expect((await me.json()).username).toBe('alice')

  // npm start runs the export worker: an export is ready within seconds and downloads.
  const auth = { authorization: `Bearer ${api_key}` }
  const asked = await fetch(`${base}/v1/exports`, { method: 'POST', headers: auth })
  expect(asked.status).toBe(202)
  const { id } = await asked.json()
  let exported: { status: string; url: string | null } = { status: 'pending', url: null }
  for (let i = 0; i < 100 && exported.status !== 'ready'; i++) {
    await new Promise((r) => setTimeout(r, 100))
    exported = await (await fetch(`${base}/v1/exports/${id}`, { headers: auth })).json()
  }
  expect(exported.status).toBe('ready')
  const archive = await fetch(exported.url!)
  expect(archive.status).toBe(200)
  expect((await archive.json()).profile.username).toBe('alice')

  expect([0, 'SIGINT']).toContain(await interrupt(first.child))
  expect(first.output()).toContain('SIGINT: stopping')
  await expect(fetch(`${base}/v1/users/me`)).rejects.toThrow()
  // The embedded PostgreSQL stopped with it: its port is free again.
  await expect(serverAccepts(Number(env.EMBEDDED_POSTGRES_PORT))).resolves.toBe(false)

  const second = await startServer(env)
  expect(second.output()).not.toMatch(/Applied \d+ migration/)
  const again = await fetch(`${base}/v1/users/me?api_key=${api_key}`)
  expect(again.status).toBe(200)
  expect([0, 'SIGINT']).toContain(await interrupt(second.child))
  await expect(serverAccepts(Number(env.EMBEDDED_POSTGRES_PORT))).resolves.toBe(false)
})

/** Sends SIGTERM to the process group (as a supervisor stopping the service does) and waits until it is gone. */
function terminate(child: import('node:child_process').ChildProcess, timeoutMs = 30_000): Promise<number | string | null> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('did not stop after SIGTERM')), timeoutMs)
    child.removeAllListeners('close')
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      resolve(code ?? signal)
    })
    process.kill(-child.pid!, 'SIGTERM')
  })
}

it('SIGTERM lets a request under way finish, refuses new ones and closes the pool; the CLI prints the URLs of the PORT the server runs on', { timeout: 180_000 }, async () => {
  const dataDir = await mkdtemp(join(tmpdir(), 'todo-start-'))
  dirs.push(dataDir)
  const env = {
    DATA_DIR: dataDir,
    PORT: String(await freePort()),
    EMBEDDED_POSTGRES_PORT: String(await freePort()),
    DATABASE_URL: '',
    JWT_SECRET: '',
    PUBLIC_URL: '',
  }
  const base = `http://127.0.0.1:${env.PORT}`
  const server = await startServer(env)

  // The CLI, run without PORT or PUBLIC_URL, prints the running server's URLs (it printed 54321).
  const cliEnv = { ...env, PORT: '' }
  const created = await runCli(['create-user', '--username', 'alice'], cliEnv)
  expect(created.code, created.stderr).toBe(0)
  const { api_key } = JSON.parse(created.stdout)
  const todo = await runCli(['create-todo', '--user', 'alice', '--body', 'hello'], cliEnv)
  expect(todo.code, todo.stderr).toBe(0)
  const printed = JSON.parse(todo.stdout)
  expect(printed.url).toMatch(new RegExp(`^${base}/todos/\\d+$`))
  expect(printed.creator.avatar.small.startsWith(`${base}/assets/`)).toBe(true)
  expect((await fetch(printed.url)).status).toBe(200)
  expect((await fetch(printed.creator.avatar.small)).headers.get('content-type')).toBe('image/png')

  // A request under way: the PUT of an upload, half sent when SIGTERM arrives.
  const file = Buffer.alloc(64 * 1024, 7)
  const asked = await fetch(`${base}/v1/uploads`, {
    method: 'POST',
    headers: { authorization: `Bearer ${api_key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ filename: 'data.bin', byte_size: file.length, checksum: createHash('md5').update(file).digest('base64'), content_type: 'application/octet-stream' }),
  })
  expect(asked.status).toBe(200)
  const upload = (await asked.json()) as { url: string; headers: Record<string, string> }
  // On one kept-alive connection (issue 31: conditions, not 300/500 ms timers): the PUT's headers
  // with `Expect: 100-continue`, so the server's "100 Continue" says the request is under way;
  // half its body; SIGTERM; once the server says it is stopping, the rest of the body and, on the
  // same connection, a new request, which must be refused with 503 (README: "answers 503 to new
  // requests on open ones"), while the PUT under way is answered 200.
  const target = new URL(upload.url)
  const socket = connect(Number(target.port), target.hostname)
  let received = ''
  socket.on('data', (d) => { received += d.toString('latin1') })
  const ended = new Promise<void>((resolve) => socket.on('close', () => resolve()))
  socket.on('error', () => {})
  const headerLines = Object.entries({ ...upload.headers, host: target.host, 'content-length': String(file.length), expect: '100-continue' })
    .map(([name, value]) => `${name}: ${value}\r\n`).join('')
  socket.write(`PUT ${target.pathname}${target.search} HTTP/1.1\r\n${headerLines}\r\n`)
  const until = async (check: () => boolean, what: string) => {
    for (const deadline = Date.now() + 60_000; !check(); await new Promise((r) => setTimeout(r, 20))) {
      if (Date.now() > deadline) throw new Error(`${what}:\n${received}\n${server.output()}`)
    }
  }
  await until(() => received.startsWith('HTTP/1.1 100 Continue'), 'no 100 Continue')
  socket.write(file.subarray(0, file.length / 2))
  const stopped = terminate(server.child)
  await until(() => server.output().includes('SIGTERM: stopping'), 'the server did not say it was stopping')
  socket.write(Buffer.concat([file.subarray(file.length / 2), Buffer.from(`GET /health HTTP/1.1\r\nhost: ${target.host}\r\n\r\n`)]))
  await ended
  // Status lines: each answer's follows the body before it with no line break.
  const answers = [...received.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]))
  expect(answers, received + server.output()).toEqual([100, 200, 503])
  expect(received).toContain('{"error":"The server is shutting down; try again shortly."}')
  expect([0, 'SIGTERM']).toContain(await stopped)
  const output = server.output()
  expect(output).toContain('SIGTERM: stopping')
  expect(output).toContain('requests finished')
  expect(output).toContain('database pool closed')
  // One access-log line per request, with its request id.
  expect(output).toMatch(/^POST \/v1\/uploads 200 \d+\.\dms id=[0-9a-f-]{36}$/m)
  expect(output).toMatch(/^PUT \/storage\/v1\/object\/upload\/sign\/uploads\/\S+ 200 /m)
  await expect(serverAccepts(Number(env.EMBEDDED_POSTGRES_PORT))).resolves.toBe(false)
})
