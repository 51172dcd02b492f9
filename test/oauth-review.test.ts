// Findings of the security review of the OAuth authorization server (issue 16), each proved over
// HTTP against the real app on PostgreSQL: races between rotation and revocation, limits one app
// could spend for the others, and malformed input answered in the protocol's own shapes.
import { request } from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createApp } from '../functions/app.ts'
import { JWT_SECRET, type TestWorld, startWorld } from './support/app.ts'
import { type AuthorizeParams, type Browserless, authorizeQuery, browserless, consent, signIn } from './support/oauth.ts'

const REDIRECT = 'https://app.example/callback'

let world: TestWorld
let agent: Browserless

interface Registered {
  client_id: string
  client_secret: string | null
}

const register = (...flags: string[]): Promise<Registered> => world.admin('create-oauth-client', '--name', 'Review app', '--redirect-uri', REDIRECT, ...flags)
const basic = (id: string, secret: string) => `Basic ${btoa(`${encodeURIComponent(id)}:${encodeURIComponent(secret)}`)}`

function form(path: string, body: Record<string, string> | string, headers: Record<string, string> = {}) {
  return fetch(`${world.baseUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: typeof body === 'string' ? body : new URLSearchParams(body).toString(),
  })
}

/**
 * A form POST from another client address (127.0.0.2), as `{status, text}`: the per-address
 * failure limit's lock serializes one address's token requests, so a race between two parties
 * needs two addresses.
 */
function formFromElsewhere(path: string, body: Record<string, string>, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  const url = new URL(`${world.baseUrl}${path}`)
  return new Promise((resolve, reject) => {
    const req = request({
      host: url.hostname, port: url.port, path: url.pathname, method: 'POST', localAddress: '127.0.0.2',
      headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => { text += chunk })
      res.on('end', () => resolve({ status: res.statusCode!, text }))
    })
    req.on('error', reject)
    req.end(new URLSearchParams(body).toString())
  })
}

interface Tokens {
  access_token: string
  refresh_token: string
}

/** Approve as alice and exchange the code: the first tokens of a new family. */
async function grant(client: Registered, extra: Partial<AuthorizeParams> = {}): Promise<Tokens> {
  const location = await consent(agent, { client_id: client.client_id, redirect_uri: REDIRECT, scope: 'public write', state: 's', ...extra })
  const answer = await form('/oauth/token', { grant_type: 'authorization_code', code: location.searchParams.get('code')!, redirect_uri: REDIRECT },
    { authorization: basic(client.client_id, client.client_secret!) })
  expect(answer.status).toBe(200)
  return (await answer.json()) as Tokens
}

/** Waits until `count` of the app's connections wait for a lock. */
async function waitForLockWaiters(count: number) {
  for (let i = 0; i < 200; i++) {
    const [row] = await world.sql<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`
    if (row!.n >= count) return
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
  throw new Error(`fewer than ${count} connections wait for a lock`)
}

beforeAll(async () => {
  world = await startWorld()
  await world.createUser('alice')
  agent = browserless(world.baseUrl)
  const { code } = await world.admin('login-code', '--user', 'alice')
  expect((await signIn(agent, code, { client_id: 'x', redirect_uri: REDIRECT })).status).toBe(303)
})
afterAll(() => world.close())

describe('rotation and revocation at once', () => {
  it('a refresh racing a revocation of its family: what the refresh issued is revoked too', async () => {
    const client = await register()
    const auth = { authorization: basic(client.client_id, client.client_secret!) }
    const first = await grant(client)
    // Hold the refresh token's row, so the refresh and the revocation (the app, from another
    // address, while a thief refreshes) both queue behind it.
    const holder = await world.sql.reserve()
    try {
      await holder`begin`
      await holder`select 1 from app.oauth_tokens where refresh_token_hash = sha256(convert_to(${first.refresh_token}, 'UTF8')) for update`
      const refreshing = form('/oauth/token', { grant_type: 'refresh_token', refresh_token: first.refresh_token }, auth)
      await waitForLockWaiters(1)
      const revoking = formFromElsewhere('/oauth/revoke', { token: first.access_token }, auth)
      await waitForLockWaiters(2)
      await holder`commit`
      const refreshed = await refreshing
      expect((await revoking).status).toBe(200)
      // Whichever ran first, nothing of the family may outlive the revocation.
      if (refreshed.status === 200) {
        const second = (await refreshed.json()) as Tokens
        expect((await world.get('/v1/users/me', { auth: second.access_token })).status).toBe(403)
        const again = await form('/oauth/token', { grant_type: 'refresh_token', refresh_token: second.refresh_token }, auth)
        expect(again.status).toBe(400)
      } else {
        expect(refreshed.status).toBe(400)
      }
      const live = await world.sql`select jti from app.oauth_tokens t join app.oauth_clients c on c.id = t.client_id
                                   where c.client_id = ${client.client_id} and t.revoked_at is null`
      expect(live).toEqual([])
    } finally {
      holder.release()
    }
  })
})

describe('limits one app could spend for the others', () => {
  it('an app refreshing as fast as the limit allows does not stop the member’s other apps from refreshing', { timeout: 60_000 }, async () => {
    const greedy = await register()
    const other = await register()
    const otherTokens = await grant(other)
    let tokens = await grant(greedy)
    const greedyAuth = { authorization: basic(greedy.client_id, greedy.client_secret!) }
    let limited: Response | null = null
    for (let i = 0; i < 250 && !limited; i++) {
      const answer = await form('/oauth/token', { grant_type: 'refresh_token', refresh_token: tokens.refresh_token }, greedyAuth)
      if (answer.status === 200) tokens = (await answer.json()) as Tokens
      else limited = answer
    }
    // The greedy app meets oauth_refresh (200 tokens an hour) ...
    expect(limited?.status).toBe(429)
    expect(await limited!.json()).toMatchObject({ error: 'temporarily_unavailable' })
    // ... and the member's other app, which refreshed nothing yet, still can.
    const answer = await form('/oauth/token', { grant_type: 'refresh_token', refresh_token: otherTokens.refresh_token },
      { authorization: basic(other.client_id, other.client_secret!) })
    expect(answer.status, await answer.clone().text()).toBe(200)
  })
})

describe('malformed input at every endpoint', () => {
  it('NUL bytes and other garbage: RFC 6749 section 5.2 at the token, introspection and revocation endpoints, an HTML error page at the pages', async () => {
    const client = await register()
    const auth = { authorization: basic(client.client_id, client.client_secret!) }
    const rfcCases: [string, string, Record<string, string>][] = [
      ['/oauth/token', 'grant_type=refresh_token&refresh_token=x&client_id=a%00b', {}],
      ['/oauth/token', 'grant_type=authorization_code&code=x&redirect_uri=https%3A%2F%2Fapp.example%2F%00', auth],
      ['/oauth/token', 'grant_type=refresh_token&refresh_token=x%00', auth],
      ['/oauth/token', 'grant_type=refresh_token&refresh_token=x', { authorization: basic('a\0b', 'c') }],
      ['/oauth/introspect', 'token=x&client_id=a%00', {}],
      ['/oauth/revoke', 'token=x&client_id=a%00', {}],
    ]
    for (const [path, body, headers] of rfcCases) {
      const answer = await form(path, body, headers)
      expect(answer.status, `${path} ${body}`).toBeGreaterThanOrEqual(400)
      expect(answer.status, `${path} ${body}`).toBeLessThan(500)
      expect(answer.headers.get('cache-control'), path).toBe('no-store')
      expect(await answer.json(), `${path} ${body}`).toMatchObject({ error: expect.stringMatching(/^(invalid_request|invalid_client)$/), error_description: expect.any(String) })
    }
    const pageCases: [string, RequestInit][] = [
      ['/oauth/authorize?response_type=code&client_id=a%00&redirect_uri=x', {}],
      [`/oauth/authorize?response_type=code&client_id=${client.client_id}&redirect_uri=${encodeURIComponent(REDIRECT)}&state=%00`, {}],
      ['/oauth/login', { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'code=x&authorize=client_id%3Da%2500' }],
      ['/oauth/login', { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'code=x%00&authorize=' }],
      ['/oauth/login', { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `code=${'x'.repeat(20_000)}` }],
    ]
    for (const [path, init] of pageCases) {
      const answer = await fetch(`${world.baseUrl}${path}`, { redirect: 'manual', ...init })
      expect(answer.status, path).toBeGreaterThanOrEqual(400)
      expect(answer.status, path).toBeLessThan(500)
      expect(answer.headers.get('content-type'), path).toMatch(/^text\/html/)
      expect(answer.headers.get('content-security-policy'), path).toContain("default-src 'none'")
      expect(await answer.text(), path).toContain('This sign-in link does not work')
    }
  })

  it('every JSON answer of the endpoints apps call carries Cache-Control: no-store and Pragma: no-cache', async () => {
    const client = await register()
    const auth = { authorization: basic(client.client_id, client.client_secret!) }
    const tokens = await grant(client)
    const answers = [
      await form('/oauth/token', { grant_type: 'refresh_token', refresh_token: tokens.refresh_token }, auth),
      await form('/oauth/token', { grant_type: 'refresh_token', refresh_token: 'unknown' }, auth),
      await form('/oauth/introspect', { token: tokens.access_token }, auth),
      await form('/oauth/revoke', { token: 'unknown' }, auth),
      await form('/oauth/token', `grant_type=refresh_token&refresh_token=${'a'.repeat(20_000)}`, auth),
      await fetch(`${world.baseUrl}/oauth/token/info`, { headers: { authorization: 'Bearer nothing' } }),
    ]
    for (const answer of answers) {
      expect(answer.headers.get('cache-control'), `${answer.url} ${answer.status}`).toBe('no-store')
      expect(answer.headers.get('pragma'), `${answer.url} ${answer.status}`).toBe('no-cache')
    }
  })
})

describe('the session cookie under https', () => {
  it('is __Secure- prefixed, so a network attacker on plain http cannot plant a session of theirs (login CSRF by cookie)', async () => {
    const client = await register()
    const params = { client_id: client.client_id, redirect_uri: REDIRECT }
    const app = createApp({ sql: world.sql, publicUrl: 'https://todo.example/functions/v1/api', jwtSecret: JWT_SECRET, upgradeUrl: 'https://todo.example/upgrade', storage: {} as never })
    // The attacker signs in as themselves and keeps the session id.
    const { code } = await world.admin('login-code', '--user', 'alice')
    const login = await app.request('/oauth/login', {
      method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', origin: 'https://todo.example' },
      body: new URLSearchParams({ code, authorize: authorizeQuery(params) }).toString(),
    })
    expect(login.status).toBe(303)
    const cookie = login.headers.get('set-cookie')!
    // A name only a secure origin may set (RFC 6265bis section 4.1.3.1): an http:// answer cannot plant it.
    expect(cookie).toMatch(/^__Secure-oauth_session=[A-Za-z0-9_-]{43}; Path=\/functions\/v1\/api\/oauth; Max-Age=43200; HttpOnly; SameSite=Lax; Secure$/)
    const id = cookie.split(';')[0]!.split('=')[1]!
    const authorize = (cookieHeader: string) => app.request(`/oauth/authorize?${authorizeQuery(params)}`, { headers: { cookie: cookieHeader } })
    expect(await (await authorize(`__Secure-oauth_session=${id}`)).text()).toContain('csrf_token')
    // What a network attacker can plant over http:// (a name without the prefix) signs nobody in.
    const planted = await (await authorize(`oauth_session=${id}`)).text()
    expect(planted).not.toContain('csrf_token')
    expect(planted).toContain('One-time sign-in code')
  })
})

describe('failures of others at one address', () => {
  it('do not lock out a confidential client that authenticates: its failures count against it, not its address', async () => {
    await world.sql`delete from app.keyed_rate_limit_counters`
    const victim = await register()
    const victimAuth = { authorization: basic(victim.client_id, victim.client_secret!) }
    const tokens = await grant(victim)
    // A stranger behind the same address (a shared egress, or a spoofed X-Forwarded-For on the
    // edge) fails 60 times with a public client_id, which anyone may send.
    const stranger = await register('--public')
    for (let i = 0; i < 60; i++) {
      expect((await form('/oauth/token', { grant_type: 'refresh_token', refresh_token: `guess-${i}`, client_id: stranger.client_id })).status).toBe(400)
    }
    expect((await form('/oauth/token', { grant_type: 'refresh_token', refresh_token: 'guess', client_id: stranger.client_id })).status).toBe(429)
    expect((await form('/oauth/token', { grant_type: 'refresh_token', refresh_token: 'guess' }, { authorization: basic(victim.client_id, 'wrong') })).status).toBe(429)
    // The confidential client proves who it is and goes on working.
    const refreshed = await form('/oauth/token', { grant_type: 'refresh_token', refresh_token: tokens.refresh_token }, victimAuth)
    expect(refreshed.status, await refreshed.clone().text()).toBe(200)
    const next = (await refreshed.json()) as Tokens
    expect((await form('/oauth/introspect', { token: next.access_token }, victimAuth)).status).toBe(200)
    // Its own failures are still limited, against it alone.
    for (let i = 0; i < 60; i++) expect((await form('/oauth/token', { grant_type: 'refresh_token', refresh_token: `mine-${i}` }, victimAuth)).status).toBe(400)
    const limited = await form('/oauth/token', { grant_type: 'refresh_token', refresh_token: next.refresh_token }, victimAuth)
    expect(limited.status).toBe(429)
    expect(await limited.json()).toMatchObject({ error: 'temporarily_unavailable' })
    const other = await register()
    expect((await form('/oauth/introspect', { token: 'x' }, { authorization: basic(other.client_id, other.client_secret!) })).status).toBe(200)
    await world.sql`delete from app.keyed_rate_limit_counters`
  })
})

describe('failed sign-in codes at one address', () => {
  it('do not stop a member who arrives with the website’s session (nothing to guess there)', async () => {
    const { SignJWT } = await import('jose')
    await world.sql`delete from app.keyed_rate_limit_counters`
    const client = await register()
    const params = { client_id: client.client_id, redirect_uri: REDIRECT }
    for (let i = 0; i < 30; i++) expect((await signIn(browserless(world.baseUrl), `wrong-${i}`, params)).status).toBe(400)
    expect((await signIn(browserless(world.baseUrl), 'wrong', params)).status).toBe(429)
    const [alice] = await world.sql<{ id: string }[]>`select id::text from app.users where username = 'alice'`
    const session = await new SignJWT({ role: 'authenticated' }).setProtectedHeader({ alg: 'HS256' }).setAudience('authenticated')
      .setSubject(alice!.id).setExpirationTime('1h').sign(new TextEncoder().encode(JWT_SECRET))
    const answer = await browserless(world.baseUrl).post('/oauth/login', { authorize: authorizeQuery(params), supabase_access_token: session })
    expect(answer.status, await answer.clone().text()).toBe(303)
    await world.sql`delete from app.keyed_rate_limit_counters`
  })
})

describe('registering redirect URIs', () => {
  it('plain http only on the loopback interface: elsewhere the code would cross the network in the clear', async () => {
    for (const uri of ['http://app.example/callback', 'http://10.0.0.5/cb', 'http://127.0.0.1.nip.io/cb', 'http://localhost.evil.example/cb']) {
      await expect(world.admin('create-oauth-client', '--name', 'Plain', '--redirect-uri', uri), uri).rejects.toThrow(/https/)
    }
    for (const uri of ['http://127.0.0.1:8765/callback', 'http://[::1]:8765/callback', 'http://localhost:8765/callback', 'https://app.example/cb', 'com.example.app:/oauth2redirect']) {
      expect((await world.admin('create-oauth-client', '--name', 'Fine', '--redirect-uri', uri)).client_id, uri).toMatch(/^[0-9a-f]{32}$/)
    }
  })
})

describe('production sign-in from the website', () => {
  it('the website’s form (another origin, as docs/oauth.md shows it) is taken from the origins WEBSITE_ORIGINS names, and only with a website session', async () => {
    const { SignJWT } = await import('jose')
    const client = await register()
    const params = { client_id: client.client_id, redirect_uri: REDIRECT }
    const app = createApp({
      sql: world.sql, publicUrl: 'https://api.todo.example', jwtSecret: JWT_SECRET, upgradeUrl: 'https://todo.example/upgrade', storage: {} as never,
      websiteOrigins: ['https://todo.example'],
    })
    const [alice] = await world.sql<{ id: string }[]>`select id::text from app.users where username = 'alice'`
    const session = await new SignJWT({ role: 'authenticated' }).setProtectedHeader({ alg: 'HS256' }).setAudience('authenticated')
      .setSubject(alice!.id).setExpirationTime('1h').sign(new TextEncoder().encode(JWT_SECRET))
    const login = (origin: string, body: Record<string, string>) => app.request('/oauth/login', {
      method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', origin },
      body: new URLSearchParams({ authorize: authorizeQuery(params), ...body }).toString(),
    })
    const fromWebsite = await login('https://todo.example', { supabase_access_token: session })
    expect(fromWebsite.status, await fromWebsite.clone().text()).toBe(303)
    expect(fromWebsite.headers.get('location')).toBe(`authorize?${authorizeQuery(params)}`)
    // Any other origin stays refused (login CSRF), and the website posts sessions, never codes.
    expect((await login('https://evil.example', { supabase_access_token: session })).status).toBe(403)
    const { code } = await world.admin('login-code', '--user', 'alice')
    expect((await login('https://todo.example', { code })).status).toBe(403)
    expect((await login('https://api.todo.example', { code })).status).toBe(303)
  })
})

describe('error redirects of the authorization endpoint', () => {
  it('come only after the member signed in (RFC 9700 section 4.11.2): a stranger is not bounced to the app’s site by a bad request', async () => {
    const client = await register()
    const params = { client_id: client.client_id, redirect_uri: REDIRECT, scope: 'public admin', state: 'phish' }
    const stranger = browserless(world.baseUrl)
    const first = await stranger.get(`/oauth/authorize?${authorizeQuery(params)}`)
    expect(first.status).toBe(200)
    expect(first.headers.get('location')).toBeNull()
    expect(await first.text()).toContain('One-time sign-in code')
    // A wrong code shows the sign-in form again, still no redirect.
    const wrong = await signIn(stranger, 'wrong-code', params)
    expect(wrong.status).toBe(400)
    expect(wrong.headers.get('location')).toBeNull()
    expect(await wrong.text()).toContain('One-time sign-in code')
    // Signed in, the member gets the RFC's error redirect.
    const { code } = await world.admin('login-code', '--user', 'alice')
    expect((await signIn(stranger, code, params)).status).toBe(303)
    const answer = await stranger.get(`/oauth/authorize?${authorizeQuery(params)}`)
    expect(answer.status).toBe(302)
    const location = new URL(answer.headers.get('location')!)
    expect(location.origin + location.pathname).toBe(REDIRECT)
    expect(location.searchParams.get('error')).toBe('invalid_scope')
    expect(location.searchParams.get('state')).toBe('phish')
  })
})
