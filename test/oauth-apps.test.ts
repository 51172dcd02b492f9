// OAuth for third-party apps (issue 28, items 1, 3 and 5), over real HTTP on PostgreSQL with
// oauth4webapi as the apps' library and the real supabase-js client on Realtime:
// - default scopes per app (RFC 6749 section 3.3) and apps registered under their own client id:
//   the desktop client's flow, an empty scope → consent → token → an upload and a todo with it;
// - RFC 6750 section 3.1 challenges on the 403 of an invalid token or a missing scope;
// - the member's page of authorized apps: remembered consent, Revoke (tokens, codes and Realtime
//   channels), sign-out, and the forged forms an attacker would try.
// The same pages in Chromium: test/oauth-apps-browser.test.ts.
import { createHash, randomUUID } from 'node:crypto'
import type { SupabaseClient } from '@supabase/supabase-js'
import * as oauth from 'oauth4webapi'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createSql } from '../functions/lib/sql.ts'
import { sha256Hex } from '../functions/lib/tokens.ts'
import { type CreatedUser, JWT_SECRET, type TestWorld, startWorld } from './support/app.ts'
import { type AuthorizeParams, type Browserless, authorizeQuery, browserless, discover, hiddenFields, insecure, signIn } from './support/oauth.ts'
import { listen } from './support/realtime.ts'

const ISSUER = 'http://api.test'
/** A desktop app's loopback listener (RFC 8252). */
const DESKTOP_REDIRECT = 'http://127.0.0.1:8765/callback'
const REDIRECT = 'https://app.example/callback'
/** A browser app's redirect on its own site: a public client whose identity its https origin assures. */
const SPA_REDIRECT = 'https://spa.example/callback'

let world: TestWorld
let alice: CreatedUser
let bob: CreatedUser
let as: oauth.AuthorizationServer
const realtimeClients: SupabaseClient[] = []

const md5 = (file: Buffer) => createHash('md5').update(file).digest('base64')

beforeAll(async () => {
  // A minute per statement, not 5 s: the race test holds a Revoke's transaction open while an
  // authorization waits for its lock, and a loaded machine must not turn that wait into a timeout.
  world = await startWorld({ statementTimeoutMs: 60_000 })
  alice = await world.createUser('alice')
  bob = await world.createUser('bob')
  as = await discover(ISSUER, world.baseUrl)
})
afterAll(async () => {
  for (const client of realtimeClients) await client.removeAllChannels()
  await world.close()
})

/** A browser signed in as `username` through the apps page's sign-in form (it lands on the apps page). */
async function signedIn(username: string): Promise<Browserless> {
  const agent = browserless(world.baseUrl)
  const { code } = await world.admin('login-code', '--user', username)
  const answer = await agent.post('/oauth/login', { return: 'apps', code })
  expect(answer.status, await answer.clone().text()).toBe(303)
  expect(answer.headers.get('location')).toBe('apps')
  return agent
}

/** The consent page for `params` as `agent`, approved: the redirect's Location. */
async function approveOnPage(agent: Browserless, params: AuthorizeParams): Promise<URL> {
  const page = await agent.get(`/oauth/authorize?${authorizeQuery(params)}`)
  const html = await page.text()
  expect(page.status, html.slice(0, 300)).toBe(200)
  expect(html).toContain('csrf_token')
  const answer = await agent.post('/oauth/authorize', { ...hiddenFields(html), decision: 'approve' })
  expect(answer.status).toBe(302)
  return new URL(answer.headers.get('location')!)
}

/** A confidential app's tokens for the code in `location`. */
async function exchange(registered: { client_id: string; client_secret: string | null }, location: URL, state: string) {
  const client: oauth.Client = { client_id: registered.client_id }
  const callback = oauth.validateAuthResponse(as, client, location, state)
  return oauth.processAuthorizationCodeResponse(as, client,
    await oauth.authorizationCodeGrantRequest(as, client, oauth.ClientSecretBasic(registered.client_secret!), callback, REDIRECT, oauth.nopkce, insecure))
}

/** The promise's value, or an error naming `what` once the (generous) deadline passed. */
async function within<T>(promise: Promise<T>, deadlineMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error(`gave up waiting for ${what}`)), deadlineMs) })
  try {
    return await Promise.race([promise, late])
  } finally {
    clearTimeout(timer)
  }
}

/** Polls `probe` until `done` says so; gives up after a generous deadline (a condition, not a speed claim). */
async function until<T>(what: string, probe: () => Promise<T>, done: (value: T) => boolean, deadlineMs = 60_000): Promise<T> {
  const deadline = Date.now() + deadlineMs
  for (;;) {
    const value = await probe()
    if (done(value)) return value
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}; last: ${JSON.stringify(value)}`)
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
}

/** The apps page's forms as hidden fields, per app: client_id → that app's Revoke form. */
function revokeForms(html: string): Map<string, Record<string, string>> {
  const forms = new Map<string, Record<string, string>>()
  for (const match of html.matchAll(/<form method="post" action="apps">([\s\S]*?)<\/form>/g)) {
    const fields = hiddenFields(match[1]!)
    forms.set(fields.client_id!, fields)
  }
  return forms
}

describe('default scopes per app, and apps registered under their own client id (item 1)', () => {
  it('the desktop client: an empty scope asks for the app’s default scopes (public write) on the consent page; its token uploads and posts a todo with the upload', async () => {
    const registered = await world.admin('create-oauth-client', '--name', 'Todo Desktop', '--public', '--redirect-uri', DESKTOP_REDIRECT,
      '--default-scopes', 'public write', '--client-id', 'todo-desktop.app')
    expect(registered).toEqual({ client_id: 'todo-desktop.app', client_secret: null })
    const client: oauth.Client = { client_id: 'todo-desktop.app', token_endpoint_auth_method: 'none' }
    const verifier = oauth.generateRandomCodeVerifier()
    // What the desktop client sends: `scope=` with nothing in it.
    const params = {
      client_id: 'todo-desktop.app', redirect_uri: DESKTOP_REDIRECT, scope: '', state: 'desktop',
      code_challenge: await oauth.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256',
    }
    const agent = browserless(world.baseUrl)
    expect((await signIn(agent, (await world.admin('login-code', '--user', 'alice')).code, params)).status).toBe(303)
    const page = await agent.get(`/oauth/authorize?${authorizeQuery(params)}`)
    expect(page.status).toBe(200)
    const html = await page.text()
    // The member is asked for both default scopes, in plain words.
    expect(html).toContain('<strong>public</strong>')
    expect(html).toContain('<strong>write</strong>: Post, change and delete')
    const answer = await agent.post('/oauth/authorize', { ...hiddenFields(html), decision: 'approve' })
    expect(answer.status).toBe(302)
    const callback = oauth.validateAuthResponse(as, client, new URL(answer.headers.get('location')!), 'desktop')
    const tokens = await oauth.processAuthorizationCodeResponse(as, client,
      await oauth.authorizationCodeGrantRequest(as, client, oauth.None(), callback, DESKTOP_REDIRECT, verifier, insecure))
    expect(tokens.scope).toBe('public write')

    const file = Buffer.from('Release notes: the desktop client signs in and posts.\n')
    const asked = await world.post('/v1/uploads', {
      auth: tokens.access_token, json: { filename: 'notes.txt', byte_size: file.length, checksum: md5(file), content_type: 'text/plain' },
    })
    expect(asked.status, asked.text).toBe(200)
    const put = await fetch(String(asked.body.url).replace(ISSUER, world.baseUrl), { method: 'PUT', headers: asked.body.headers, body: new Uint8Array(file) })
    expect(put.status).toBe(200)
    const todo = await world.post('/v1/todos', { auth: tokens.access_token, json: { body: 'Shipped the desktop client', attachments: [asked.body.signed_id] } })
    expect(todo.status, todo.text).toBe(201)
    expect(todo.body.attachments).toHaveLength(1)
    expect(todo.body.creator.id).toBe(alice.id)
  })

  it('without --default-scopes an app’s default is public: a request without scope asks for public only', async () => {
    const registered = await world.admin('create-oauth-client', '--name', 'Reader', '--redirect-uri', REDIRECT)
    const agent = await signedIn('alice')
    const page = await agent.get(`/oauth/authorize?${authorizeQuery({ client_id: registered.client_id, redirect_uri: REDIRECT, state: 'r' })}`)
    const html = await page.text()
    expect(page.status).toBe(200)
    expect(html).toContain('<strong>public</strong>')
    expect(html).not.toContain('<strong>write</strong>')
    const [row] = await world.sql`select default_scopes from app.oauth_clients where client_id = ${registered.client_id}`
    expect(row!.default_scopes).toEqual(['public'])
  })

  it('--client-id is unique and validated (1 to 128 letters, digits, ".", "_", "~", "-", starting with a letter or digit); --default-scopes takes known scopes only, chat only with --chat', async () => {
    await world.admin('create-oauth-client', '--name', 'First', '--client-id', 'com.example.todo')
    await expect(world.admin('create-oauth-client', '--name', 'Impostor', '--client-id', 'com.example.todo')).rejects.toThrow(/already exists/)
    const [row] = await world.sql`select count(*)::int as n, min(name) as name from app.oauth_clients where client_id = 'com.example.todo'`
    expect(row).toEqual({ n: 1, name: 'First' })
    for (const bad of ['--client-id=', '--client-id=-rf', '--client-id=.hidden', '--client-id=has space', '--client-id=a/b', '--client-id=a"b', '--client-id=é', `--client-id=${'x'.repeat(129)}`]) {
      await expect(world.admin('create-oauth-client', '--name', 'Bad', bad), bad).rejects.toThrow(/--client-id must be 1 to 128 letters/)
    }
    expect((await world.admin('create-oauth-client', '--name', 'Long', `--client-id=${'x'.repeat(128)}`)).client_id).toBe('x'.repeat(128))
    expect((await world.admin('create-oauth-client', '--name', 'Marks', '--client-id', 'A.b_c~d-9')).client_id).toBe('A.b_c~d-9')
    // The table says the same, whoever writes it.
    await expect(world.sql`insert into app.oauth_clients (client_id, name) values ('-x', 'Raw')`).rejects.toThrow(/oauth_clients_client_id_format/)

    await expect(world.admin('create-oauth-client', '--name', 'S', '--default-scopes', 'public admin')).rejects.toThrow(/unknown scope admin/)
    await expect(world.admin('create-oauth-client', '--name', 'S', '--default-scopes', '')).rejects.toThrow(/at least one scope/)
    await expect(world.admin('create-oauth-client', '--name', 'S', '--default-scopes', 'public chat')).rejects.toThrow(/chat only for an app approved/)
    const chat = await world.admin('create-oauth-client', '--name', 'S', '--chat', '--default-scopes', 'chat,public')
    const [stored] = await world.sql`select default_scopes from app.oauth_clients where client_id = ${chat.client_id}`
    expect(stored!.default_scopes).toEqual(['public', 'chat'])
  })
})

describe('WWW-Authenticate on the 403 of an OAuth token (item 3, RFC 6750 section 3.1)', () => {
  it('a missing scope: Bearer error="insufficient_scope" with the scope that would do; SPEC’s 403 and body kept', async () => {
    const firstParty = await world.admin('create-oauth-client', '--name', 'Ours', '--first-party')
    const readOnly = (await world.admin('issue-token', '--user', 'alice', '--client', firstParty.client_id, '--scopes', 'public')).access_token
    const write = await world.post('/v1/todos', { auth: readOnly, json: { body: 'no write scope' } })
    expect(write.status).toBe(403)
    expect(write.body).toEqual({ error: 'This access token lacks the write scope.' })
    expect(write.headers.get('www-authenticate')).toBe('Bearer error="insufficient_scope", scope="write"')
    const upload = await world.post('/v1/uploads', { auth: readOnly, json: { filename: 'a.txt', byte_size: 1, checksum: md5(Buffer.from('a')), content_type: 'text/plain' } })
    expect(upload.status).toBe(403)
    expect(upload.headers.get('www-authenticate')).toBe('Bearer error="insufficient_scope", scope="write"')
    const notifications = await world.get('/v1/notifications', { auth: readOnly })
    expect(notifications.status).toBe(403)
    expect(notifications.headers.get('www-authenticate')).toBe('Bearer error="insufficient_scope", scope="notifications"')
    const billing = await world.get('/v1/billing', { auth: readOnly })
    expect(billing.status).toBe(403)
    expect(billing.headers.get('www-authenticate')).toBe('Bearer error="insufficient_scope", scope="billing"')
    const noPublic = (await world.admin('issue-token', '--user', 'alice', '--client', firstParty.client_id, '--scopes', 'billing')).access_token
    const read = await world.get('/v1/users/me', { auth: noPublic })
    expect(read.status).toBe(403)
    expect(read.headers.get('www-authenticate')).toBe('Bearer error="insufficient_scope", scope="public"')
    // The browser apps that read it may: CORS exposes the header.
    expect(write.headers.get('access-control-expose-headers')).toMatch(/\bWWW-Authenticate\b/)
  })

  it('no challenge where no scope would help (a third-party app on a first-party endpoint) nor for API keys', async () => {
    const thirdParty = (await world.admin('issue-token', '--user', 'alice', '--client', (await world.admin('create-oauth-client', '--name', 'Theirs')).client_id, '--scopes', 'public write')).access_token
    const search = await world.get('/v1/search/todos?query=x', { auth: thirdParty })
    expect(search.status).toBe(403)
    expect(search.headers.get('www-authenticate')).toBeNull()
    const readOnlyKey = await world.post('/v1/todos', { auth: alice.read_only_api_key, json: { body: 'read-only' } })
    expect(readOnlyKey.status).toBe(403)
    expect(readOnlyKey.headers.get('www-authenticate')).toBeNull()
    const unknownKey = await world.get('/v1/users/me', { auth: 'svc_sk_' + 'x'.repeat(43) })
    expect(unknownKey.status).toBe(403)
    expect(unknownKey.headers.get('www-authenticate')).toBeNull()
    const none = await world.get('/v1/users/me')
    expect(none.status).toBe(403)
    expect(none.headers.get('www-authenticate')).toBeNull()
  })

  it('an expired, revoked, unknown or forged token: Bearer error="invalid_token", also where the input is wrong too', async () => {
    const app = await world.admin('create-oauth-client', '--name', 'Expiring')
    const issued = await world.admin('issue-token', '--user', 'alice', '--client', app.client_id, '--scopes', 'public write')
    expect((await world.get('/v1/users/me', { auth: issued.access_token })).status).toBe(200)
    await world.admin('revoke-token', '--token', issued.access_token)
    const claims = { sub: alice.id, jti: randomUUID(), scope: 'public write', client_id: app.client_id, first_party: false, chat: false }
    const cases: [string, string][] = [
      ['revoked', issued.access_token],
      ['expired', await world.sign(JWT_SECRET, claims, -60)],
      ['never issued', await world.sign(JWT_SECRET, claims, 600)],
      ['forged', await world.sign('another-secret-that-is-long-enough-for-hs256', claims, 600)],
      ['not a JWT', 'not-a-token'],
    ]
    for (const [name, token] of cases) {
      const answer = await world.get('/v1/users/me', { auth: token })
      expect(answer.status, name).toBe(403)
      expect(answer.body.error, name).toEqual(expect.any(String))
      expect(answer.headers.get('www-authenticate'), name).toBe('Bearer error="invalid_token"')
      // An input error behind it is not shown: the token's 403, with its challenge.
      const invalid = await world.post('/v1/todos', { auth: token, json: { body: 42 } })
      expect(invalid.status, name).toBe(403)
      expect(invalid.headers.get('www-authenticate'), name).toBe('Bearer error="invalid_token"')
    }
  })
})

describe('remembered consent (item 5)', () => {
  it('the same app asking again for the same or fewer scopes gets its code without a consent page; wider scopes show the page, the new ones marked', async () => {
    const registered = await world.admin('create-oauth-client', '--name', 'Remembered', '--redirect-uri', REDIRECT, '--chat')
    const agent = await signedIn('bob')
    const first = await approveOnPage(agent, { client_id: registered.client_id, redirect_uri: REDIRECT, scope: 'public write', state: 'one' })
    expect(first.searchParams.get('code')).toBeTruthy()

    for (const [scope, state] of [['public write', 'two'], ['write public', 'three'], ['public', 'four']] as const) {
      const again = await agent.get(`/oauth/authorize?${authorizeQuery({ client_id: registered.client_id, redirect_uri: REDIRECT, scope, state })}`)
      expect(again.status, scope).toBe(302)
      const location = new URL(again.headers.get('location')!)
      expect(location.origin + location.pathname).toBe(REDIRECT)
      expect(location.searchParams.get('state')).toBe(state)
      expect(location.searchParams.get('iss')).toBe(ISSUER)
      const tokens = await exchange(registered, location, state)
      expect(tokens.scope).toBe(scope === 'public' ? 'public' : 'public write')
    }

    // Wider: the page again, with what is new marked, and only after Approve a code.
    const wider = await agent.get(`/oauth/authorize?${authorizeQuery({ client_id: registered.client_id, redirect_uri: REDIRECT, scope: 'public write chat', state: 'five' })}`)
    expect(wider.status).toBe(200)
    const html = await wider.text()
    expect(html).toContain('<strong>chat</strong>: Read and send your direct messages <em class="new">new</em>')
    expect(html).not.toContain('<strong>write</strong>: Post, change and delete todos, comments and reactions as you <em')
    // Another member is asked, whatever bob approved.
    const other = await signedIn('alice')
    expect((await other.get(`/oauth/authorize?${authorizeQuery({ client_id: registered.client_id, redirect_uri: REDIRECT, scope: 'public' })}`)).status).toBe(200)
  })

  it('a public app remembered still needs PKCE: the silent answer checks what the page checks', async () => {
    const registered = await world.admin('create-oauth-client', '--name', 'Public remembered', '--public', '--redirect-uri', SPA_REDIRECT)
    const agent = await signedIn('bob')
    const pkce = async () => ({ code_challenge: await oauth.calculatePKCECodeChallenge(oauth.generateRandomCodeVerifier()), code_challenge_method: 'S256' })
    await approveOnPage(agent, { client_id: registered.client_id, redirect_uri: SPA_REDIRECT, scope: 'public', ...(await pkce()) })
    // With PKCE, remembered: a code at once (the app's https site is where it goes).
    const silent = await agent.get(`/oauth/authorize?${authorizeQuery({ client_id: registered.client_id, redirect_uri: SPA_REDIRECT, scope: 'public', state: 'y', ...(await pkce()) })}`)
    expect(silent.status).toBe(302)
    expect(new URL(silent.headers.get('location')!).searchParams.get('code')).toBeTruthy()
    const without = await agent.get(`/oauth/authorize?${authorizeQuery({ client_id: registered.client_id, redirect_uri: SPA_REDIRECT, scope: 'public', state: 'x' })}`)
    expect(without.status).toBe(302)
    const location = new URL(without.headers.get('location')!)
    expect(location.searchParams.get('error')).toBe('invalid_request')
    expect(location.searchParams.get('code')).toBeNull()
  })

  it('a public app whose redirect is a loopback listener or a private scheme (a desktop or mobile app) is asked again every time: any program on the machine could pose as it (RFC 8252 section 8.6)', async () => {
    const privateScheme = 'com.example.todo:/oauth/callback'
    const registered = await world.admin('create-oauth-client', '--name', 'Desktop remembered', '--public',
      '--redirect-uri', DESKTOP_REDIRECT, '--redirect-uri', 'http://localhost:8765/callback', '--redirect-uri', privateScheme)
    const agent = await signedIn('bob')
    const pkce = async () => ({ code_challenge: await oauth.calculatePKCECodeChallenge(oauth.generateRandomCodeVerifier()), code_challenge_method: 'S256' })
    for (const redirect of [DESKTOP_REDIRECT, 'http://localhost:8765/callback', privateScheme]) {
      const params = { client_id: registered.client_id, redirect_uri: redirect, scope: 'public', state: 'again' }
      await approveOnPage(agent, { ...params, ...(await pkce()) })
      // The same request again, as an impostor listening on the app's port would send it: the
      // consent page, no code.
      const again = await agent.get(`/oauth/authorize?${authorizeQuery({ ...params, ...(await pkce()) })}`)
      expect(again.status, redirect).toBe(200)
      const html = await again.text()
      expect(html, redirect).toContain('Desktop remembered</span> wants to use your account')
      expect(again.headers.get('location'), redirect).toBeNull()
    }
    // The approval is on record all the same: listed, and Revoke ends it.
    expect(revokeForms(await (await agent.get('/oauth/apps')).text()).has(registered.client_id)).toBe(true)
  })

  it('a Revoke that commits while a remembered authorization is under way wins: no code, no approval brought back, the consent page instead', async () => {
    const registered = await world.admin('create-oauth-client', '--name', 'Racing', '--redirect-uri', REDIRECT)
    const agent = await signedIn('bob')
    const params = { client_id: registered.client_id, redirect_uri: REDIRECT, scope: 'public', state: 'race' }
    await approveOnPage(agent, params)
    const session = await sha256Hex(agent.cookie!.slice(agent.cookie!.indexOf('=') + 1))
    const [ids] = await world.sql<{ user_id: string; client_id: string }[]>`
      select g.user_id, g.client_id from app.oauth_grants g join app.oauth_clients c on c.id = g.client_id where c.client_id = ${registered.client_id}`
    expect(ids).toBeDefined()

    // The Revoke, in a transaction of the test's own: the approval's row stays locked until commit.
    const holder = createSql(world.databaseUrl, { max: 1 })
    const revoking = await holder.reserve()
    try {
      await revoking`begin`
      const [revoked] = await revoking`select app.oauth_revoke_grant(${session}, ${registered.client_id}) as result`
      expect(revoked!.result).toEqual({ revoked: true })
      // Meanwhile the app sends the member's browser round again: GET /oauth/authorize read the
      // approval (the Revoke is not committed) and now waits at the approval's row.
      const answer = agent.get(`/oauth/authorize?${authorizeQuery(params)}`)
      await until('the remembered authorization waiting for the Revoke\'s lock', async () => {
        const [row] = await world.sql<{ n: number }[]>`
          select count(*)::int as n from pg_stat_activity
          where datname = current_database() and wait_event_type = 'Lock' and query like '%oauth_create_code%'`
        return row!.n
      }, (n) => n > 0)
      await revoking`commit`
      const page = await answer
      expect(page.headers.get('location')).toBeNull()
      expect(page.status).toBe(200)
      expect(await page.text()).toContain('Racing</span> wants to use your account')
    } finally {
      await revoking`rollback`.catch(() => {})
      revoking.release()
      await holder.end({ timeout: 5 })
    }
    const [left] = await world.sql<{ grants: number; codes: number }[]>`
      select (select count(*)::int from app.oauth_grants where user_id = ${ids!.user_id} and client_id = ${ids!.client_id}) as grants,
             (select count(*)::int from app.oauth_authorization_codes where user_id = ${ids!.user_id} and client_id = ${ids!.client_id} and used_at is null) as codes`
    expect(left).toEqual({ grants: 0, codes: 0 })
  })
})

describe('the page of authorized apps (item 5)', () => {
  it('lists the apps with their scopes and last use; Revoke ends the grant: its tokens, its refresh, its Realtime channel, and the remembered consent', async () => {
    const registered = await world.admin('create-oauth-client', '--name', 'Chat & "Co"', '--redirect-uri', REDIRECT, '--chat')
    // A member of this test alone: after the Revoke their list is empty, whatever other tests approved.
    const carol = await world.createUser('carol')
    const agent = await signedIn('carol')
    const location = await approveOnPage(agent, { client_id: registered.client_id, redirect_uri: REDIRECT, scope: 'public chat', state: 'c' })
    const tokens = await exchange(registered, location, 'c')
    expect((await world.get('/v1/users/me', { auth: tokens.access_token })).status).toBe(200)
    const inbox = await listen(world.baseUrl, realtimeClients, tokens.access_token, `user:${carol.id}`)
    expect(inbox.status).toBe('SUBSCRIBED')
    const closed = new Promise<string>((resolve) => {
      inbox.channel.on('system', {}, (message: { status?: string; message?: string }) => {
        if (message.status === 'error') resolve(String(message.message))
      })
    })

    const page = await agent.get('/oauth/apps')
    expect(page.status).toBe(200)
    const html = await page.text()
    expect(html).toContain('Chat &amp; &quot;Co&quot;')
    expect(html).toContain('<strong>chat</strong>: Read and send your direct messages')
    expect(html).toMatch(/last used \d{4}-\d\d-\d\d \d\d:\d\d UTC/)
    // As the consent pages: never framed, no script, forms post only to our own pages, not cached.
    const csp = page.headers.get('content-security-policy')!
    expect(csp).toContain("default-src 'none'")
    expect(csp).toContain("frame-ancestors 'none'")
    expect(csp).toMatch(/form-action 'self'$/)
    expect(page.headers.get('x-frame-options')).toBe('DENY')
    expect(page.headers.get('cache-control')).toBe('no-store, no-transform')

    const form = revokeForms(html).get(registered.client_id)!
    expect(form.csrf_token).toBeTruthy()
    const answer = await agent.post('/oauth/apps', form)
    expect(answer.status).toBe(303)
    expect(answer.headers.get('location')).toBe('apps?notice=revoked')

    const refused = await world.get('/v1/users/me', { auth: tokens.access_token })
    expect(refused.status).toBe(403)
    expect(refused.headers.get('www-authenticate')).toBe('Bearer error="invalid_token"')
    const client: oauth.Client = { client_id: registered.client_id }
    const refresh = await oauth.refreshTokenGrantRequest(as, client, oauth.ClientSecretBasic(registered.client_secret!), tokens.refresh_token!, insecure)
    expect(refresh.status).toBe(400)
    expect((await refresh.json()).error).toBe('invalid_grant')
    // The local gateway's sweep (every 5 s) closes the channel: waited for, however loaded the
    // machine, with a deadline only so that a channel never closed fails with a message.
    expect(await within(closed, 60_000, 'the revoked token\'s channel to close')).toBe('The access token was revoked')

    // Only the page's own notices: anything else in the query shows nothing (and breaks nothing).
    for (const notice of ['constructor', '__proto__', '<script>']) {
      const odd = await agent.get(`/oauth/apps?notice=${encodeURIComponent(notice)}`)
      expect(odd.status).toBe(200)
      expect(await odd.text()).not.toContain('class="notice"')
    }
    const after = await (await agent.get('/oauth/apps?notice=revoked')).text()
    expect(after).toContain('Access revoked')
    expect(after).not.toContain('Chat &amp;')
    expect(after).toContain('You have not authorized any app.')
    // Asked again next time.
    expect((await agent.get(`/oauth/authorize?${authorizeQuery({ client_id: registered.client_id, redirect_uri: REDIRECT, scope: 'public' })}`)).status).toBe(200)
  }, 120_000)

  it('Revoke also ends what the app has not exchanged yet: a code approved before it is invalid_grant', async () => {
    const registered = await world.admin('create-oauth-client', '--name', 'Slow app', '--redirect-uri', REDIRECT)
    const agent = await signedIn('bob')
    const location = await approveOnPage(agent, { client_id: registered.client_id, redirect_uri: REDIRECT, scope: 'public', state: 's' })
    const form = revokeForms(await (await agent.get('/oauth/apps')).text()).get(registered.client_id)!
    expect((await agent.post('/oauth/apps', form)).status).toBe(303)
    const client: oauth.Client = { client_id: registered.client_id }
    const late = await oauth.authorizationCodeGrantRequest(as, client, oauth.ClientSecretBasic(registered.client_secret!),
      oauth.validateAuthResponse(as, client, location, 's'), REDIRECT, oauth.nopkce, insecure)
    expect(late.status).toBe(400)
    expect((await late.json()).error).toBe('invalid_grant')
  })

  it('an app holding a token the member never approved on the page (the operator’s issue-token) is listed too, and Revoke ends it', async () => {
    const registered = await world.admin('create-oauth-client', '--name', 'Operator issued', '--redirect-uri', REDIRECT)
    const issued = await world.admin('issue-token', '--user', 'bob', '--client', registered.client_id, '--scopes', 'write public')
    const agent = await signedIn('bob')
    const html = await (await agent.get('/oauth/apps')).text()
    const form = revokeForms(html).get(registered.client_id)
    expect(form).toBeDefined()
    expect(html).toMatch(/<h2>Operator issued<\/h2>\n<ul>\n<li><strong>public<\/strong>[^\n]*\n<li><strong>write<\/strong>/)
    // Not approved on the page: no remembered consent.
    expect((await agent.get(`/oauth/authorize?${authorizeQuery({ client_id: registered.client_id, redirect_uri: REDIRECT, scope: 'public' })}`)).status).toBe(200)
    expect((await agent.post('/oauth/apps', form!)).status).toBe(303)
    expect((await world.get('/v1/users/me', { auth: issued.access_token })).status).toBe(403)
    expect(revokeForms(await (await agent.get('/oauth/apps')).text()).has(registered.client_id)).toBe(false)
  })

  it('a forged revoke does nothing: no CSRF token, a wrong one, another member’s, a foreign Origin, no session; and a member can name only their own grants', async () => {
    const registered = await world.admin('create-oauth-client', '--name', 'Target', '--redirect-uri', REDIRECT)
    const victim = await signedIn('bob')
    const tokens = await exchange(registered, await approveOnPage(victim, { client_id: registered.client_id, redirect_uri: REDIRECT, scope: 'public', state: 't' }), 't')
    const fields = revokeForms(await (await victim.get('/oauth/apps')).text()).get(registered.client_id)!
    const attacker = await signedIn('alice')
    const attackerToken = hiddenFields(await (await attacker.get('/oauth/apps')).text()).csrf_token!
    const { csrf_token: _token, ...withoutToken } = fields
    const forged = [
      () => victim.post('/oauth/apps', withoutToken),
      () => victim.post('/oauth/apps', { ...fields, csrf_token: 'x'.repeat(43) }),
      () => victim.post('/oauth/apps', { ...fields, csrf_token: attackerToken }),
      () => victim.post('/oauth/apps', fields, { origin: 'https://evil.example' }),
      () => victim.post('/oauth/apps', fields, { origin: 'null' }),
      () => browserless(world.baseUrl).post('/oauth/apps', fields),
    ]
    for (const attempt of forged) {
      const answer = await attempt()
      expect(answer.status).toBe(403)
      expect(answer.headers.get('location')).toBeNull()
    }
    // The attacker's own session, naming the victim's app: only the attacker's grant (none) ends.
    expect((await attacker.post('/oauth/apps', { client_id: registered.client_id, csrf_token: attackerToken })).status).toBe(303)
    expect((await world.get('/v1/users/me', { auth: tokens.access_token })).status).toBe(200)
    expect(revokeForms(await (await victim.get('/oauth/apps')).text()).has(registered.client_id)).toBe(true)
  })

  it('a stranger gets the sign-in form, which returns to the apps page; sign-out ends the session (and a forged sign-out does not)', async () => {
    const stranger = await browserless(world.baseUrl).get('/oauth/apps')
    expect(stranger.status).toBe(200)
    const signInHtml = await stranger.text()
    expect(signInHtml).toContain('Sign in to see the apps you authorized')
    expect(hiddenFields(signInHtml)).toEqual({ return: 'apps' })
    expect(stranger.headers.get('content-security-policy')).toMatch(/form-action 'self'$/)

    const agent = await signedIn('alice')
    const html = await (await agent.get('/oauth/apps')).text()
    expect(html).toContain('Signed in as <strong id="username">alice</strong>')
    const csrf = hiddenFields(html).csrf_token!
    const session = agent.cookie!
    expect((await agent.post('/oauth/logout', { csrf_token: csrf }, { origin: 'https://evil.example' })).status).toBe(403)
    expect((await agent.post('/oauth/logout', { csrf_token: 'x'.repeat(43) })).status).toBe(403)
    expect(await (await agent.get('/oauth/apps')).text()).toContain('Signed in as')

    const out = await agent.post('/oauth/logout', { csrf_token: csrf })
    expect(out.status).toBe(303)
    expect(out.headers.get('location')).toBe('apps')
    expect(out.headers.get('set-cookie')).toMatch(/^oauth_session=; Path=\/oauth; Max-Age=0; HttpOnly; SameSite=Lax$/)
    // The old cookie, kept by a copy somewhere, opens nothing any more.
    const replayed = await fetch(`${world.baseUrl}/oauth/apps`, { headers: { cookie: session } })
    expect(await replayed.text()).toContain('Sign in to see the apps you authorized')
  })

  it('sign-out from the consent page goes back to the authorization request’s sign-in form, so another account can sign in', async () => {
    const registered = await world.admin('create-oauth-client', '--name', 'Shared computer', '--redirect-uri', REDIRECT)
    const params = { client_id: registered.client_id, redirect_uri: REDIRECT, scope: 'public', state: 'shared' }
    const agent = await signedIn('alice')
    const consentHtml = await (await agent.get(`/oauth/authorize?${authorizeQuery(params)}`)).text()
    const signOut = /<form class="signout" method="post" action="logout">([\s\S]*?)<\/form>/.exec(consentHtml)
    expect(signOut).not.toBeNull()
    const out = await agent.post('/oauth/logout', hiddenFields(signOut![1]!))
    expect(out.status).toBe(303)
    expect(out.headers.get('location')).toBe(`authorize?${authorizeQuery(params)}`)
    const next = await agent.get(`/oauth/authorize?${authorizeQuery(params)}`)
    expect(await next.text()).toContain('One-time sign-in code')
  })
})
