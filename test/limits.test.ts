// Limits on every request (issue 11, items 1 and 2): a statement timeout that really applies
// to the request's statement, capped full-text queries, a body limit checked before anything
// is parsed, capped arrays, and no validation details for a credential that does not exist.
import { connect } from 'node:net'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { callApi } from '../functions/lib/db.ts'
import { sha256Hex } from '../functions/lib/tokens.ts'
import { DEFAULT_STATEMENT_TIMEOUT_MS, createSql, statementTimeoutFrom } from '../functions/lib/sql.ts'
import { readConfig } from '../local/config.ts'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'

let world: TestWorld
let alice: CreatedUser

beforeAll(async () => {
  world = await startWorld()
  alice = await world.createUser('alice')
})
afterAll(() => world.close())

describe('the statement timeout', () => {
  it('is STATEMENT_TIMEOUT_MS, 5 s unless set, 0 turning it off', () => {
    expect(DEFAULT_STATEMENT_TIMEOUT_MS).toBe(5000)
    expect(readConfig({}).statementTimeoutMs).toBe(5000)
    expect(readConfig({ STATEMENT_TIMEOUT_MS: '1500' }).statementTimeoutMs).toBe(1500)
    expect(statementTimeoutFrom('0')).toBe(0)
    expect(() => statementTimeoutFrom('5s')).toThrow(/STATEMENT_TIMEOUT_MS/)
  })

  it('is in force inside the request’s own statement, after the switch to role authenticated', async () => {
    // A probe api function in this test's database, called exactly as every request calls its
    // function (functions/lib/db.ts): the role switch, then the function, in one statement.
    await world.sql.unsafe(`
      create function api.probe_settings() returns jsonb language sql stable set search_path = '' as $$
        select jsonb_build_object('timeout', current_setting('statement_timeout'), 'role', current_user)
      $$;
      grant execute on function api.probe_settings() to authenticated;`)
    const credential = { kind: 'api_key' as const, key_hash: await sha256Hex(alice.api_key) }
    const body = await callApi(world.sql, { credential, access: 'read', publicUrl: 'http://api.test' }, 'api.probe_settings', [])
    expect(JSON.parse(body!)).toEqual({ timeout: '5s', role: 'authenticated' })
  })

  it('cancels a slow request: 503 with Retry-After, and the server keeps serving', async () => {
    const quick = await startWorld({ statementTimeoutMs: 300 })
    const holder = createSql(quick.databaseUrl, { max: 1 })
    try {
      const bob = await quick.createUser('bob')
      // Another session holds every todo until the answer came: the request waits on the lock,
      // so only its statement timeout can answer it (without one it would wait until the test's
      // own timeout, and fail there). No clock is read: the condition is the lock, still held.
      let release!: () => void
      const released = new Promise<void>((resolve) => { release = resolve })
      let holding!: () => void
      const held = new Promise<void>((resolve) => { holding = resolve })
      const locked = holder.begin(async (tx) => {
        await tx`lock table app.todos in access exclusive mode`
        holding()
        await released
      })
      await held
      const res = await quick.get('/v1/todos', { auth: bob.api_key }).finally(release)
      expect(res.status).toBe(503)
      expect(res.body).toEqual({ error: 'The request took too long; try again.' })
      expect(res.headers.get('retry-after')).toMatch(/^\d+$/)
      await locked
      expect((await quick.get('/v1/todos', { auth: bob.api_key })).status).toBe(200)
    } finally {
      await holder.end()
      await quick.close()
    }
  })
})

describe('full-text queries are capped', () => {
  const seventeenTerms = Array.from({ length: 17 }, (_, i) => `word${i}`).join(' ')
  const sixteenTerms = Array.from({ length: 16 }, (_, i) => `w${i}`).join(' ')

  it('at 16 terms and 256 characters on every todo list: 400 naming the limit', async () => {
    for (const path of ['/v1/todos', '/v1/users/me/todos', '/v1/timeline']) {
      const tooMany = await world.get(`${path}?query=${encodeURIComponent(seventeenTerms)}`, { auth: alice.api_key })
      expect(tooMany.status, path).toBe(400)
      expect(tooMany.body.error).toMatch(/at most 16 search terms; .* makes 17/)
      const tooLong = await world.get(`${path}?query=${'a'.repeat(257)}`, { auth: alice.api_key })
      expect(tooLong.status, path).toBe(400)
      expect(tooLong.body.error).toBe('query may have at most 256 characters; got 257.')
      expect((await world.get(`${path}?query=${encodeURIComponent(sixteenTerms)}`, { auth: alice.api_key })).status).toBe(200)
      expect((await world.get(`${path}?query=${'a'.repeat(256)}`, { auth: alice.api_key })).status).toBe(200)
    }
  })

  it('on todo and user search too', async () => {
    const token = await world.token('alice', 'public', { firstParty: true })
    const todos = await world.get(`/v1/search/todos?query=${encodeURIComponent(seventeenTerms)}`, { auth: token })
    expect(todos.status).toBe(400)
    expect(todos.body.error).toMatch(/at most 16 search terms/)
    const users = await world.get(`/v1/search/users?query=${'a'.repeat(300)}`, { auth: token })
    expect(users.status).toBe(400)
    expect((await world.get('/v1/search/todos?query=ship%20it', { auth: token })).status).toBe(200)
  })
})

describe('full-text limits count the terms PostgreSQL\'s parser makes (issue 25)', () => {
  // Each word becomes a prefix match of every lexeme the `simple` parser makes of it, joined
  // into a phrase: `e_e_e…` (one 256-character word) was 128 terms, 1 to 4 s per request.
  let token: string
  beforeAll(async () => {
    await world.admin('create-project', '--owner', 'alice', '--name', 'Costly', '--slug', 'costly')
    token = await world.token('alice', 'public', { firstParty: true })
  })
  const lists = () => [
    ['/v1/todos', alice.api_key],
    ['/v1/timeline', alice.api_key],
    ['/v1/users/alice/todos', alice.api_key],
    ['/v1/projects/costly/todos', alice.api_key],
    ['/v1/search/todos', token],
  ] as const
  const ask = (path: string, auth: string, query: string) => world.get(`${path}?query=${encodeURIComponent(query)}`, { auth })

  it('one word that the parser splits into a long phrase is 400 naming the phrase limit, on every list', async () => {
    const words = {
      underscores: 'e_'.repeat(128), // 256 characters, 128 terms
      hyphens: `${'e-'.repeat(127)}e`, // the whole word and its 128 parts
      commas: `${'e,'.repeat(127)}e`,
      'dots and hyphens': `${'e.-'.repeat(85)}e`,
      'a nine-term phrase': 'a-b-c-d-e-f-g-h', // the whole word and 8 parts
    }
    for (const [path, auth] of lists()) {
      for (const [name, word] of Object.entries(words)) {
        const res = await ask(path, auth, word)
        expect(res.status, `${path}: ${name}`).toBe(400)
        expect(res.body.error, `${path}: ${name}`).toMatch(/makes a phrase of \d+ search terms; a word may make at most 8/)
      }
      const first = await ask(path, auth, words.underscores)
      expect(first.body.error).toMatch(/^query: the word "e_e_e_e_e_e_e_e_e_e_e_e_e_e_e_e_e_e_e_e_…" makes a phrase of 128 search terms/)
    }
  })

  it('counts every term of every word against the 16: 400 naming the limit and the count', async () => {
    for (const [path, auth] of lists()) {
      // Six hyphenated words of three terms each (the word and its two parts): 18.
      const res = await ask(path, auth, 'e-e f-f g-g h-h i-i j-j')
      expect(res.status, path).toBe(400)
      expect(res.body.error).toMatch(/^query may have at most 16 search terms; "e-e f-f g-g h-h i-i j-j" makes 18 /)
      // Two eight-term phrases are 16: within the limits.
      expect((await ask(path, auth, 'a-b-c-d-e-f-g a_b_c_d_e_f_g_h')).status, path).toBe(200)
    }
  })

  it('a repeated word is searched once: -t -t -t … costs what -t costs', async () => {
    const [row] = await world.sql`select app.todo_search_query('t t -t -t e-mail e-mail t')::text as q`
    expect(row!.q).toBe(`'t':* & !'t':* & 'e-mail':* <-> 'e':* <-> 'mail':*`)
  })

  it('dots and slashes alone keep a word one term (a host name, a path): accepted', async () => {
    for (const [path, auth] of lists()) {
      for (const word of ['e.'.repeat(128), 'e/'.repeat(128), 'a.b.c.d.e.f.g.h.i.j', 'a/b/c/d/e/f/g/h/i/j']) {
        expect((await ask(path, auth, word)).status, `${path}: ${word.slice(0, 10)}`).toBe(200)
      }
    }
  })

  it('the terms of real searches stay within the limits', async () => {
    const real = [
      'ship -bug', 'e-mail', 'foo.bar', 'first.last+tag@example.co.uk', 'https://example.com/a/b?c=d',
      'v1.2.3', '2026-01-15', '12:30', '+1-555-123-4567', 'f47ac10b-58cc-4372-a567-0e02b2c3d479',
      'state-of-the-art', 'x86_64', 'my_long_variable_name', 'node_modules/foo/bar', "don't",
      // 16 terms exactly: launch, the, 5 of state-of-the-art, 3 of e-mail, client, for, 4 of end-to-end.
      'launch the state-of-the-art e-mail client for end-to-end',
    ]
    for (const [path, auth] of lists()) {
      for (const query of real) expect((await ask(path, auth, query)).status, `${path}: ${query}`).toBe(200)
    }
  })
})

describe('mentions per body are capped (issue 25)', () => {
  // Every list renders every member and project a todo or comment names: 25 todos naming 700
  // members each made everyone's GET /v1/todos 6.7 MB and a second long.
  const members = Array.from({ length: 21 }, (_, i) => `named${String(i).padStart(2, '0')}`)
  const projects = Array.from({ length: 21 }, (_, i) => `Tag${String(i).padStart(2, '0')}`)
  let writer: CreatedUser
  beforeAll(async () => {
    writer = await world.createUser('mentioner')
    await world.sql`
      with made as (
        insert into auth.users (id, aud, role, raw_app_meta_data, raw_user_meta_data)
        select gen_random_uuid(), 'authenticated', 'authenticated', '{}', '{}' from unnest(${members}::text[])
        returning id)
      insert into app.users (id, username)
      select m.id, n.name from (select id, row_number() over (order by id) as i from made) m
      join (select name, row_number() over (order by name) as i from unnest(${members}::text[]) name) n on n.i = m.i`
    await world.sql`
      insert into app.projects (owner_id, name, hashtag)
      select u.id, t, t from app.users u, unnest(${projects}::text[]) t where u.username = 'mentioner'`
  })
  const naming = (names: string[], sigil: string) => names.map((n) => `${sigil}${n}`).join(' ')

  it('at 20 members and 20 projects on todos and comments: 422 naming the limit and the count', async () => {
    const todo = (await world.post('/v1/todos', { auth: writer.api_key, json: { body: 'a todo to comment on' } })).body
    const writes = (body: string): [string, string, Record<string, unknown>][] => [
      ['POST', '/v1/todos', { body }],
      ['PATCH', `/v1/todos/${todo.id}`, { body }],
      ['POST', '/v1/comments', { commentable_type: 'Todo', commentable_id: todo.id, body }],
    ]
    for (const [method, path, json] of writes(`thanks ${naming(members, '@')}`)) {
      const res = await world.request(method, path, { auth: writer.api_key, json })
      expect(res.status, `${method} ${path}`).toBe(422)
      expect(res.body).toEqual({ error: 'body may mention at most 20 members; it mentions 21.' })
    }
    for (const [method, path, json] of writes(`for ${naming(projects, '#')}`)) {
      const res = await world.request(method, path, { auth: writer.api_key, json })
      expect(res.status, `${method} ${path}`).toBe(422)
      expect(res.body).toEqual({ error: 'body may mention at most 20 projects; it mentions 21.' })
    }
    const comment = (await world.post('/v1/comments', { auth: writer.api_key, json: { commentable_type: 'Todo', commentable_id: todo.id, body: 'ok' } })).body
    const edit = await world.patch(`/v1/comments/${comment.id}`, { auth: writer.api_key, json: { body: naming(members, '@') } })
    expect(edit.status).toBe(422)
    // Twenty of each, names repeated, unknown names and mail addresses: accepted, all rendered.
    const body = `${naming(members.slice(0, 20), '@')} ${naming(projects.slice(0, 20), '#')} @named00 @nobody1 @nobody2 x@named20`
    for (const [method, path, json] of writes(body)) {
      const res = await world.request(method, path, { auth: writer.api_key, json })
      expect(res.status, `${method} ${path}`).toBeLessThan(300)
      expect(res.body.mentioned_users, `${method} ${path}`).toHaveLength(20)
      expect(res.body.mentioned_projects, `${method} ${path}`).toHaveLength(20)
    }
  })
})

describe('the request line and headers', () => {
  it('over 16 KiB are refused with 431 before any work; within, a long If-None-Match is read at once', async () => {
    // Node's limit (maxHeaderSize): it bounds every query parameter (expand, cursors, since)
    // and every header the middleware reads (If-None-Match, Accept-Encoding, X-Request-Id).
    const long = await fetch(`${world.baseUrl}/v1/todos?expand=${Array(2000).fill('reactions').join(',')}`, { headers: { authorization: `Bearer ${alice.api_key}` } })
    expect(long.status).toBe(431)
    const header = await fetch(`${world.baseUrl}/v1/todos`, { headers: { authorization: `Bearer ${alice.api_key}`, 'if-none-match': Array(3000).fill('W/"x"').join(',') } })
    expect(header.status).toBe(431)
    const within = await fetch(`${world.baseUrl}/v1/todos?expand=${Array(1400).fill('reactions').join(',')}`, {
      headers: { authorization: `Bearer ${alice.api_key}`, 'if-none-match': Array(200).fill('W/"x"').join(',') },
    })
    expect(within.status).toBe(200)
  })
})

/**
 * POSTs a body of `size` bytes over a raw socket, announced with Content-Length or sent
 * chunked, and reads the answer; the server may answer and close before the body is sent.
 */
function postRaw(path: string, size: number, options: { chunked: boolean; auth: string }): Promise<{ status: number; body: string }> {
  const url = new URL(world.baseUrl + path)
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname)
    let received = ''
    socket.on('data', (data) => (received += data.toString('utf8')))
    socket.on('error', () => {}) // EPIPE / ECONNRESET once the server has answered
    socket.on('close', () => {
      const [head = '', body = ''] = received.split('\r\n\r\n')
      const status = Number(head.split(' ')[1])
      if (!status) return reject(new Error(`no answer: ${JSON.stringify(received.slice(0, 200))}`))
      // A chunked answer: the JSON is the line after the first chunk size.
      const json = /^[0-9a-f]+\r\n/i.test(body) ? body.split('\r\n')[1]! : body
      resolve({ status, body: json })
    })
    socket.write([
      `POST ${url.pathname} HTTP/1.1`, `host: ${url.host}`, `authorization: Bearer ${options.auth}`,
      'content-type: application/json', 'connection: close',
      options.chunked ? 'transfer-encoding: chunked' : `content-length: ${size}`, '', '',
    ].join('\r\n'))
    const piece = Buffer.alloc(64 * 1024, 'a')
    let sent = 0
    const pump = () => {
      while (sent < size && !socket.destroyed) {
        const part = piece.subarray(0, Math.min(piece.length, size - sent))
        sent += part.length
        const ok = socket.write(options.chunked ? Buffer.concat([Buffer.from(`${part.length.toString(16)}\r\n`), part, Buffer.from('\r\n')]) : part)
        if (!ok) return void socket.once('drain', pump)
      }
      if (options.chunked && !socket.destroyed) socket.write('0\r\n\r\n')
    }
    pump()
  })
}

describe('the body limit', () => {
  it('refuses a JSON body over 1 MiB with 413, announced or chunked', async () => {
    for (const chunked of [false, true]) {
      const res = await postRaw('/v1/todos', 3 * 1024 * 1024, { chunked, auth: alice.api_key })
      expect(res.status, chunked ? 'chunked' : 'content-length').toBe(413)
      expect(JSON.parse(res.body)).toEqual({ error: expect.stringMatching(/larger than the limit of 1048576 bytes/) })
    }
    expect((await world.get('/v1/users/me/todos', { auth: alice.api_key })).body.data).toEqual([])
  })

  it('refuses a form body over 1 MiB too', async () => {
    const res = await world.post('/v1/todos', {
      auth: alice.api_key,
      body: `body=${'a'.repeat(1024 * 1024 + 1)}`,
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    })
    expect(res.status).toBe(413)
  })

  it('reads a body under the limit as before', async () => {
    const res = await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'shipped', padding: 'x'.repeat(900 * 1024) } })
    expect(res.status).toBe(201)
  })
})

describe('a client that hangs up mid-body (issue 25)', () => {
  /** Sends the head and part of a body, then destroys the socket; resolves to the access-log line of that request. */
  async function hangUp(head: string[], part: string): Promise<string> {
    const id = `hangup-${Math.random().toString(36).slice(2)}`
    const url = new URL(world.baseUrl)
    const socket = connect(Number(url.port), url.hostname)
    socket.on('error', () => {})
    await new Promise((resolve) => socket.once('connect', resolve))
    socket.write([...head, `host: ${url.host}`, `x-request-id: ${id}`, '', part].join('\r\n'))
    // Time for the server to start reading the body (it answers nothing before the body ends).
    await new Promise((resolve) => setTimeout(resolve, 500))
    socket.destroy()
    const deadline = Date.now() + 20_000
    for (;;) {
      const line = world.accessLog.find((l) => l.endsWith(`id=${id}`))
      if (line) return line
      if (Date.now() > deadline) throw new Error(`no access-log line for ${id}`)
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }

  it('is no lost database: 400 in the access log, never 503, and no "database unavailable" line (JSON, chunked, form, OAuth)', async () => {
    const hana = await world.createUser('hana')
    const logged = vi.spyOn(console, 'error').mockImplementation(() => {})
    try {
      const auth = `authorization: Bearer ${hana.api_key}`
      const cases: [string[], string][] = [
        [['POST /v1/todos HTTP/1.1', auth, 'content-type: application/json', 'transfer-encoding: chunked'], '9\r\n{"body":"h\r\n'],
        [['POST /v1/todos HTTP/1.1', auth, 'content-type: application/json', 'content-length: 100'], '{"body":"h'],
        [['POST /v1/todos HTTP/1.1', auth, 'content-type: application/x-www-form-urlencoded', 'content-length: 100'], 'body=h'],
        [['PATCH /v1/users/me HTTP/1.1', auth, 'content-type: application/json', 'transfer-encoding: chunked'], '5\r\n{"bio\r\n'],
        [['POST /oauth/token HTTP/1.1', 'content-type: application/x-www-form-urlencoded', 'content-length: 100'], 'grant_type=auth'],
        [['POST /oauth/token HTTP/1.1', 'content-type: application/x-www-form-urlencoded', 'transfer-encoding: chunked'], '4\r\ngran\r\n'],
      ]
      for (const [head, part] of cases) {
        const line = await hangUp(head, part)
        expect(line, head.join(' | ')).toMatch(/^(POST|PATCH) \S+ 400 /)
      }
      expect(logged.mock.calls.map((args) => args.map(String).join(' '))).toEqual([])
    } finally {
      logged.mockRestore()
    }
    // Nothing of the cut requests was written.
    expect((await world.get('/v1/users/me/todos', { auth: hana.api_key })).body.data).toEqual([])
  })
})

describe('arrays are capped at 20', () => {
  const ids = (n: number) => Array.from({ length: n }, (_, i) => `signed-${i}`)

  it('attachments and remove_attachment_ids of todos and comments: 422 above 20', async () => {
    const todo = (await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'with files' } })).body
    const cases: [string, string, Record<string, unknown>][] = [
      ['POST', '/v1/todos', { body: 'x', attachments: ids(21) }],
      ['PATCH', `/v1/todos/${todo.id}`, { attachments: ids(21) }],
      ['PATCH', `/v1/todos/${todo.id}`, { remove_attachment_ids: ids(21) }],
      ['POST', '/v1/comments', { commentable_type: 'Todo', commentable_id: todo.id, body: 'x', attachments: ids(21) }],
    ]
    for (const [method, path, json] of cases) {
      const res = await world.request(method, path, { auth: alice.api_key, json })
      expect(res.status, `${method} ${path}`).toBe(422)
      expect(res.body.error).toMatch(/at most 20 items/)
    }
    const form = await world.post('/v1/todos', {
      auth: alice.api_key,
      body: `body=x&${ids(21).map((id) => `attachments[]=${id}`).join('&')}`,
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    })
    expect(form.status).toBe(422)
    expect(form.body.error).toMatch(/at most 20 items/)
  })
})

describe('validation details only for credentials that exist', () => {
  const unknownKey = 'svc_sk_this-key-does-not-exist'

  it('an unknown key gets 403 whatever the body', async () => {
    const bodies: [string, string, { json?: unknown; body?: string; headers?: Record<string, string> }][] = [
      ['POST', '/v1/todos', { json: { body: 42 } }],
      ['POST', '/v1/todos', { body: '{not json', headers: { 'content-type': 'application/json' } }],
      ['POST', '/v1/todos', { body: 'x', headers: { 'content-type': 'text/plain' } }],
      ['POST', '/v1/uploads', { json: { filename: 1 } }],
      ['GET', '/v1/todos?since=not-a-date', {}],
      ['GET', '/v1/todos?expand=everything', {}],
      ['GET', `/v1/todos?query=${'a'.repeat(300)}`, {}],
    ]
    for (const [method, path, options] of bodies) {
      const res = await world.request(method, path, { auth: unknownKey, ...options })
      expect(res.status, `${method} ${path}`).toBe(403)
      expect(res.body).toEqual({ error: 'The API key is not valid.' })
    }
  })

  it('a read-only key gets its 403 before its input is judged; a valid key gets the details', async () => {
    const readOnly = await world.post('/v1/todos', { auth: alice.read_only_api_key, json: { body: 42 } })
    expect(readOnly.status).toBe(403)
    expect(readOnly.body).toEqual({ error: 'This API key is read-only.' })
    const valid = await world.post('/v1/todos', { auth: alice.api_key, json: { body: 42 } })
    expect(valid.status).toBe(422)
    expect(valid.body.error).toMatch(/body/)
  })
})
