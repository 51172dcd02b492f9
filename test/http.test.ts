// The HTTP envelope every endpoint shares: JSON errors for unknown routes, wrong methods,
// malformed and invalid input; `.json` suffixes; the generated OpenAPI document and docs;
// kept-alive connections after a body the app did not read.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createServer as createTcpServer, connect, type Server as TcpServer, type Socket } from 'node:net'
import { Agent } from 'undici'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'

let world: TestWorld
let alice: CreatedUser

beforeAll(async () => {
  world = await startWorld()
  alice = await world.createUser('alice')
})
afterAll(() => world.close())

describe('errors are JSON with a sentence', () => {
  it('404 for an unknown route', async () => {
    const res = await world.get('/v1/nothing-here', { auth: alice.api_key })
    expect(res.status).toBe(404)
    expect(res.headers.get('content-type')).toMatch(/application\/json/)
    expect(res.body).toEqual({ error: 'No route matches GET /v1/nothing-here.' })
    expect((await world.get('/')).status).toBe(404)
  })

  it('405 with Allow for a known path and another method', async () => {
    const res = await world.delete('/v1/users/me', { auth: alice.api_key })
    expect(res.status).toBe(405)
    expect(res.headers.get('allow')).toBe('GET, PATCH')
    expect(res.body).toEqual({ error: 'Method DELETE is not allowed here; use GET, PATCH.' })
    expect((await world.post('/v1/projects', { auth: alice.api_key })).status).toBe(405)
  })

  it('/internal/* without the worker secret is 404 whatever the method: a stranger cannot tell a worker route from nothing (issue 25)', async () => {
    const paths = ['/internal/maintenance', '/internal/webhooks', '/internal/exports', '/internal/push', '/internal/nothing']
    for (const path of paths) {
      for (const method of ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']) {
        for (const auth of [undefined, 'wrong-secret', alice.api_key]) {
          const res = await world.request(method, path, { auth })
          const cell = `${method} ${path} ${auth ?? 'without a credential'}`
          expect(res.status, cell).toBe(404)
          expect(res.headers.get('allow'), cell).toBeNull()
          if (method !== 'HEAD') expect(res.body, cell).toEqual({ error: `No route matches ${method} ${path}.` })
        }
      }
    }
  })

  it('400 for malformed JSON', async () => {
    const res = await world.patch('/v1/users/me', {
      auth: alice.api_key,
      body: '{"time_zone": ',
      headers: { 'content-type': 'application/json' },
    })
    expect(res.status).toBe(400)
    expect(res.body).toEqual({ error: expect.stringMatching(/JSON/) })
  })

  it('422 naming the field for invalid input', async () => {
    const res = await world.patch('/v1/users/me', { auth: alice.api_key, json: { time_zone: 42 } })
    expect(res.status).toBe(422)
    expect(res.body).toEqual({ error: 'time_zone must be a string' })
    const limit = await world.get('/v1/projects?limit=abc', { auth: alice.api_key })
    expect(limit.status).toBe(422)
    expect(limit.body.error).toMatch(/^limit/)
  })

  it('422 when a JSON body is required but another content type is sent', async () => {
    const res = await world.patch('/v1/users/me', { auth: alice.api_key, body: 'time_zone=UTC', headers: { 'content-type': 'text/plain' } })
    expect(res.status).toBeGreaterThanOrEqual(400)
    expect(res.status).toBeLessThan(500)
    expect(typeof res.body.error).toBe('string')
  })

  it('never answers with a stack trace', async () => {
    const inputs = ['/v1/users/%00', '/v1/users/' + 'x'.repeat(5000), '/v1/projects/%E2%80%8B', '/v1/users/me/projects?starting_after=%27%3B--']
    for (const path of inputs) {
      const res = await world.get(path, { auth: alice.api_key })
      expect(res.status, path).toBeLessThan(500)
      expect(res.text).not.toMatch(/at .*\.ts:\d+|stack/i)
      expect(typeof res.body.error).toBe('string')
    }
  })
})

describe('.json suffix', () => {
  it('/v1/users/me.json answers like /v1/users/me', async () => {
    const plain = await world.get('/v1/users/me', { auth: alice.api_key })
    const suffixed = await world.get('/v1/users/me.json', { auth: alice.api_key })
    expect(suffixed.status).toBe(200)
    expect(suffixed.body).toEqual(plain.body)
    const list = await world.get('/v1/projects.json?limit=1', { auth: alice.api_key })
    expect(list.status).toBe(200)
    expect(list.body).toHaveProperty('data')
  })
})

describe('OpenAPI and docs', () => {
  it('GET /v1/openapi.json is generated from the route schemas, without credentials', async () => {
    const res = await world.get('/v1/openapi.json')
    expect(res.status).toBe(200)
    expect(res.body.openapi).toBe('3.1.0')
    expect(res.body.info.version).toBe('1.4.0')
    expect(Object.keys(res.body.paths)).toEqual(
      expect.arrayContaining(['/v1/users/{username}', '/v1/users/me', '/v1/users/{username}/projects', '/v1/projects', '/v1/projects/{project_id}']),
    )
    expect(res.body.paths['/v1/users/me'].patch.responses['422']).toBeDefined()
    expect(res.body.components.schemas.User.required).toEqual(expect.arrayContaining(['id', 'username', 'pro', 'avatar']))
    expect(res.body.components.schemas.User.required).not.toContain('dismissed_time_zone')
  })

  it('documents every /v1 and OAuth route the app serves, with the same methods', async () => {
    const doc = (await world.get('/v1/openapi.json')).body
    const documented = Object.entries(doc.paths as Record<string, Record<string, unknown>>)
      .flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${path}`))
    // What the router serves (issue 31: from the router itself, not a copy of it): every /v1
    // route but the document itself, the OAuth routes and the discovery document, with Hono's
    // `:param` written as OpenAPI's `{param}`. Middleware (`ALL`) is not a route.
    const served = [...new Set(world.routes
      .filter((r) => r.method !== 'ALL' && /^\/(v1|oauth|\.well-known)\//.test(r.path) && r.path !== '/v1/openapi.json')
      .map((r) => `${r.method} ${r.path.replace(/:([A-Za-z_]+)/g, '{$1}')}`))]
    expect(served.length).toBeGreaterThan(70)
    expect(served).toContain('PATCH /v1/notification_preferences/{identifier}')
    const expected = served
    expect(documented.sort()).toEqual(expected.sort())
  })

  it('GET /docs serves the interactive reference, its script from this server (no CDN)', async () => {
    const res = await fetch(world.baseUrl + '/docs')
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toMatch(/text\/html/)
    const html = await res.text()
    expect(html).toContain('/v1/openapi.json')
    expect(html).toContain('src="/docs/scalar.js?v=')
    expect(html).not.toMatch(/jsdelivr|unpkg|fonts\.scalar\.com/)
  })

  // The routes beyond /v1 (not in the OpenAPI document, so not in the authorization table of
  // docs/security.md): none takes a credential.
  it.each([
    ['/health', 200, /^application\/json/],
    ['/docs/scalar.js', 200, /^text\/javascript/],
    ['/assets/avatar/small/F97316/AB.png', 200, /^image\/png$/],
    ['/assets/logo/large/3B82F6/_.png', 200, /^image\/png$/],
    ['/assets/header/medium/3B82F6/_.png', 200, /^image\/png$/],
    ['/assets/default-avatar-small.png', 200, /^image\/png$/],
    ['/@alice', 200, /^text\/html/],
    ['/todos/987654', 404, /^text\/html/],
    ['/projects/no-such-project', 404, /^text\/html/],
    ['/files/00000000000000000000000000000000/none.png', 404, /^application\/json/],
    ['/exports/00000000000000000000000000000000/export.json', 404, /^application\/json/],
  ] as const)('GET %s answers %i without a credential', async (path, status, type) => {
    const res = await fetch(world.baseUrl + path)
    expect(res.status).toBe(status)
    expect(res.headers.get('content-type')).toMatch(type)
  })
})

describe('the database pool', () => {
  it('lets at most one statement wait on a busy connection; the rest wait in one queue for the pool', async () => {
    const { createSql } = await import('../functions/lib/sql.ts')
    const sql = createSql(world.databaseUrl, { max: 2 })
    try {
      // postgres.js's default (100) queues requests behind busy connections; the benchmark's p99
      // depends on this (docs/performance.md, "One queue for the pool").
      expect((sql.options as unknown as { max_pipeline: number }).max_pipeline).toBe(1)
      const started = performance.now()
      const results = await Promise.all([1, 2, 3, 4, 5, 6].map((n) => sql`select ${n}::int as n, pg_sleep(0.05)`))
      expect(results.map((r) => r[0]!.n)).toEqual([1, 2, 3, 4, 5, 6])
      // Two connections, six 50 ms statements: three rounds.
      expect(performance.now() - started).toBeGreaterThanOrEqual(150)
    } finally {
      await sql.end()
    }
  })
})

describe('kept-alive connections', () => {
  // local/node-http.ts, closeAfterUnreadBody: a large body answered before it was read ends its
  // connection with the answer, so the client's next request goes on a new one rather than onto a
  // socket the server is about to destroy ("other side closed", found by the fuzzer).
  it('a large body the app did not read: Connection: close unless it all arrived, and the next requests are all answered', async () => {
    const dispatcher = new Agent({ connections: 1 })
    try {
      for (const size of [100_000, 400_000, 1_000_000 - 10]) {
        const refused = await fetch(`${world.baseUrl}/v1/users/me`, {
          method: 'PATCH', body: `${'a'.repeat(size)}=x`, dispatcher,
          headers: { authorization: `Bearer ${alice.api_key}`, 'content-type': 'application/x-www-form-urlencoded' },
        } as RequestInit)
        expect(refused.status).toBe(422)
        // Node stops reading a socket whose unread body passes the request's buffer, so a body
        // this large cannot have arrived whole; a smaller one may have (100 KB here did: it then
        // keeps its connection, as draining it from memory takes no time).
        if (size > 400_000) expect([size, refused.headers.get('connection')]).toEqual([size, 'close'])
        await refused.text()
        for (let i = 0; i < 3; i++) {
          const next = await fetch(`${world.baseUrl}/v1/users/me`, { headers: { authorization: `Bearer ${alice.api_key}` }, dispatcher } as RequestInit)
          expect(next.status).toBe(200)
          await next.text()
          await new Promise((r) => setTimeout(r, 300))
        }
      }
      // A small body is drained at once: its connection stays open.
      const small = await fetch(`${world.baseUrl}/v1/users/me`, {
        method: 'PATCH', body: 'a=b', dispatcher,
        headers: { authorization: `Bearer ${alice.api_key}`, 'content-type': 'application/x-www-form-urlencoded' },
      } as RequestInit)
      expect([small.status, small.headers.get('connection')]).toEqual([422, 'keep-alive'])
      await small.text()
    } finally {
      await dispatcher.close()
    }
  })

  // A slow uplink: the client has written its whole request (its kernel took it), the server
  // gets the headers at once and the body later. A body of any size the app answered without
  // reading may then still be on its way when the answer goes: the server drains it for 500 ms
  // only, then destroys the socket, so that answer must end its connection too, or the client's
  // next request, sent on it meanwhile, gets no answer ("other side closed").
  it('a small body the app did not read, still arriving when the answer went: Connection: close, the next request answered', async () => {
    const proxy = await slowBodyProxy(new URL(world.baseUrl), 800)
    const dispatcher = new Agent({ connections: 1 })
    try {
      for (const size of [1_000, 30_000, 60_000]) {
        // No credentials: refused before the body is read.
        const refused = await fetch(`${proxy.url}/v1/todos`, {
          method: 'POST', body: JSON.stringify({ body: 'a'.repeat(size) }), dispatcher, headers: { 'content-type': 'application/json' },
        } as RequestInit)
        expect(refused.status).toBe(403)
        await refused.text()
        expect(refused.headers.get('connection')).toBe('close')
        const next = await fetch(`${proxy.url}/v1/users/me`, { headers: { authorization: `Bearer ${alice.api_key}` }, dispatcher } as RequestInit)
        expect(next.status).toBe(200)
        await next.text()
      }
    } finally {
      await dispatcher.close()
      await proxy.close()
    }
  })
})

/**
 * A TCP proxy to `target` that passes each request's head at once and holds what follows (the
 * body, and anything sent after it) for `delayMs`, in order: a slow uplink under a client whose
 * writes returned at once. Answers come back untouched.
 */
async function slowBodyProxy(target: URL, delayMs: number): Promise<{ url: string; close: () => Promise<void> }> {
  const sockets = new Set<Socket>()
  const server: TcpServer = createTcpServer((client) => {
    const upstream = connect(Number(target.port), target.hostname)
    sockets.add(client).add(upstream)
    let pending = Buffer.alloc(0)
    let chain = Promise.resolve()
    client.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk])
      // Every complete head goes at once (after what was held before it); the rest is held.
      for (;;) {
        const end = pending.indexOf('\r\n\r\n')
        const head = end >= 0 && /^[A-Z]+ \S+ HTTP\/1\.1\r\n/.test(pending.subarray(0, end).toString('latin1')) ? pending.subarray(0, end + 4) : null
        const held = head ? Buffer.alloc(0) : pending
        pending = head ? pending.subarray(end + 4) : Buffer.alloc(0)
        const send = head ?? held
        const length = head ? Number(/content-length: *(\d+)/i.exec(head.toString('latin1'))?.[1] ?? 0) : 0
        const body = pending.subarray(0, length)
        pending = pending.subarray(body.length)
        chain = chain.then(async () => {
          if (send.length > 0 && !head) await new Promise((r) => setTimeout(r, delayMs))
          if (!upstream.destroyed) upstream.write(send)
          if (body.length > 0) {
            await new Promise((r) => setTimeout(r, delayMs))
            if (!upstream.destroyed) upstream.write(body)
          }
        })
        if (!head || pending.length === 0) break
      }
    })
    upstream.on('data', (chunk) => client.write(chunk))
    const end = () => {
      client.destroy()
      upstream.destroy()
    }
    client.on('close', end).on('error', end)
    upstream.on('close', end).on('error', end)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as { port: number }
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => {
      for (const socket of sockets) socket.destroy()
      return new Promise((resolve) => server.close(() => resolve()))
    },
  }
}
