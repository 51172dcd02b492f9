// The OAuth 2.0 authorization server (issue 16) with a real client library (oauth4webapi) over
// real HTTP on PostgreSQL: authorize → consent → token → API call → refresh → revoke →
// introspect, for a confidential and a public client, and every RFC error the issue lists.
import * as oauth from 'oauth4webapi'
import { SignJWT } from 'jose'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createApp } from '../functions/app.ts'
import { type CreatedUser, JWT_SECRET, type TestWorld, startWorld } from './support/app.ts'
import { type AuthorizeParams, type Browserless, authorizeQuery, browserless, consent, discover, hiddenFields, insecure, signIn } from './support/oauth.ts'

const ISSUER = 'http://api.test'
const REDIRECT = 'https://app.example/callback'

let world: TestWorld
let alice: CreatedUser
let as: oauth.AuthorizationServer
let agent: Browserless

interface Registered {
  client_id: string
  client_secret: string | null
}

async function register(...flags: string[]): Promise<Registered> {
  return world.admin('create-oauth-client', '--name', 'Test app', '--redirect-uri', REDIRECT, ...flags)
}

/** A signed-in browser for `username`. */
async function signedIn(username: string, params: AuthorizeParams): Promise<Browserless> {
  const browser = browserless(world.baseUrl)
  const { code } = await world.admin('login-code', '--user', username)
  const answer = await signIn(browser, code, params)
  expect(answer.status, await answer.clone().text()).toBe(303)
  return browser
}

/** Authorize and approve as alice; the callback's parameters. */
async function approve(client: Registered, extra: Partial<AuthorizeParams> = {}) {
  const params = { client_id: client.client_id, redirect_uri: REDIRECT, scope: 'public write', state: oauth.generateRandomState(), ...extra }
  const location = await consent(agent, params)
  return { location, state: params.state }
}

function tokenForm(form: Record<string, string>, headers: Record<string, string> = {}) {
  return fetch(`${world.baseUrl}/oauth/token`, {
    method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers }, body: new URLSearchParams(form).toString(),
  })
}

const basic = (id: string, secret: string) => `Basic ${btoa(`${encodeURIComponent(id)}:${encodeURIComponent(secret)}`)}`

async function expectOAuthError(promise: Promise<unknown>, error: string) {
  const thrown = await promise.then(() => null, (err: unknown) => err)
  expect(thrown, `expected ${error}`).toBeInstanceOf(oauth.ResponseBodyError)
  expect((thrown as oauth.ResponseBodyError).error).toBe(error)
  return thrown as oauth.ResponseBodyError
}

beforeAll(async () => {
  world = await startWorld()
  alice = await world.createUser('alice')
  await world.createUser('bob')
  as = await discover(ISSUER, world.baseUrl)
  agent = await signedIn('alice', { client_id: 'x', redirect_uri: REDIRECT })
})
afterAll(() => world.close())

describe('metadata (RFC 8414)', () => {
  it('describes every endpoint, the scopes, PKCE and the client authentication methods; oauth4webapi accepts it', async () => {
    expect(as).toMatchObject({
      issuer: ISSUER,
      authorization_endpoint: `${world.baseUrl}/oauth/authorize`,
      token_endpoint: `${world.baseUrl}/oauth/token`,
      introspection_endpoint: `${world.baseUrl}/oauth/introspect`,
      revocation_endpoint: `${world.baseUrl}/oauth/revoke`,
      scopes_supported: ['public', 'write', 'billing', 'notifications', 'chat'],
      response_types_supported: ['code'],
      grant_types_supported: ['authorization_code', 'refresh_token'],
      code_challenge_methods_supported: ['S256'],
      token_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'none'],
    })
  })

  it('the OpenAPI document describes the OAuth endpoints', async () => {
    const doc = (await world.get('/v1/openapi.json')).body
    for (const [path, method] of [['/oauth/authorize', 'get'], ['/oauth/authorize', 'post'], ['/oauth/login', 'post'], ['/oauth/token', 'post'],
      ['/oauth/introspect', 'post'], ['/oauth/revoke', 'post'], ['/oauth/token/info', 'get'], ['/.well-known/oauth-authorization-server', 'get']]) {
      expect(doc.paths[path!]?.[method!], `${method} ${path}`).toBeDefined()
    }
    expect(doc.paths['/oauth/token'].post.requestBody.content['application/x-www-form-urlencoded']).toBeDefined()
  })
})

describe('the whole flow with oauth4webapi', () => {
  it('a confidential client: authorize → consent → token → API → token info → refresh → revoke → introspect', async () => {
    const registered = await register()
    const client: oauth.Client = { client_id: registered.client_id }
    const secret = registered.client_secret!
    const verifier = oauth.generateRandomCodeVerifier()
    const { location, state } = await approve(registered, { code_challenge: await oauth.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256' })
    expect(location.origin + location.pathname).toBe(REDIRECT)
    const callback = oauth.validateAuthResponse(as, client, location, state)

    const response = await oauth.authorizationCodeGrantRequest(as, client, oauth.ClientSecretBasic(secret), callback, REDIRECT, verifier, insecure)
    expect(response.headers.get('cache-control')).toBe('no-store')
    const tokens = await oauth.processAuthorizationCodeResponse(as, client, response)
    expect(tokens).toMatchObject({ token_type: 'bearer', expires_in: expect.any(Number), scope: 'public write', refresh_token: expect.any(String) })
    expect(tokens.expires_in).toBeGreaterThan(890)
    expect(tokens.expires_in).toBeLessThanOrEqual(900)

    // The access token is the API's JWT: role api_client, audience todo-sharing-api, sub user_…
    const claims = JSON.parse(atob(tokens.access_token.split('.')[1]!.replace(/-/g, '+').replace(/_/g, '/')))
    expect(claims).toMatchObject({ role: 'api_client', aud: 'todo-sharing-api', sub: alice.id, scope: 'public write', client_id: registered.client_id, first_party: false, chat: false, jti: expect.any(String) })
    const me = await world.get('/v1/users/me', { auth: tokens.access_token })
    expect(me.status).toBe(200)
    expect(me.body.username).toBe('alice')
    expect((await world.patch('/v1/users/me', { auth: tokens.access_token, json: { time_zone: 'Europe/Rome' } })).status).toBe(200)

    const info = await world.get('/oauth/token/info', { auth: tokens.access_token })
    expect(info.status).toBe(200)
    expect(info.body).toEqual({ resource_owner_id: alice.id, scope: ['public', 'write'], expires_in: expect.any(Number), application: { uid: registered.client_id }, created_at: expect.any(Number) })

    const refreshed = await oauth.processRefreshTokenResponse(as, client,
      await oauth.refreshTokenGrantRequest(as, client, oauth.ClientSecretPost(secret), tokens.refresh_token!, insecure))
    expect(refreshed.refresh_token).not.toBe(tokens.refresh_token)
    expect(refreshed.scope).toBe('public write')
    expect((await world.get('/v1/users/me', { auth: refreshed.access_token })).status).toBe(200)

    const live = await oauth.processIntrospectionResponse(as, client,
      await oauth.introspectionRequest(as, client, oauth.ClientSecretBasic(secret), refreshed.access_token, insecure))
    expect(live).toMatchObject({ active: true, scope: 'public write', client_id: registered.client_id, username: 'alice', sub: alice.id, token_type: 'Bearer', exp: expect.any(Number), iat: expect.any(Number) })
    const liveRefresh = await oauth.processIntrospectionResponse(as, client,
      await oauth.introspectionRequest(as, client, oauth.ClientSecretBasic(secret), refreshed.refresh_token!, insecure))
    expect(liveRefresh).toMatchObject({ active: true, token_type: 'refresh_token', sub: alice.id })

    await oauth.processRevocationResponse(await oauth.revocationRequest(as, client, oauth.ClientSecretBasic(secret), refreshed.refresh_token!, insecure))
    // The whole family: the refreshed access token and the first one stop at once.
    for (const token of [refreshed.access_token, tokens.access_token]) {
      expect((await world.get('/v1/users/me', { auth: token })).status).toBe(403)
      const gone = await oauth.processIntrospectionResponse(as, client, await oauth.introspectionRequest(as, client, oauth.ClientSecretBasic(secret), token, insecure))
      expect(gone).toEqual({ active: false })
    }
    expect((await world.get('/oauth/token/info', { auth: refreshed.access_token })).status).toBe(401)
    await expectOAuthError(oauth.processRefreshTokenResponse(as, client,
      await oauth.refreshTokenGrantRequest(as, client, oauth.ClientSecretBasic(secret), refreshed.refresh_token!, insecure)), 'invalid_grant')
  })

  it('a public client: PKCE required, no secret; refresh, revoke of the access token, introspect', async () => {
    const registered = await register('--public')
    expect(registered.client_secret).toBeNull()
    const client: oauth.Client = { client_id: registered.client_id, token_endpoint_auth_method: 'none' }
    const verifier = oauth.generateRandomCodeVerifier()
    const { location, state } = await approve(registered, { scope: 'public', code_challenge: await oauth.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256' })
    const callback = oauth.validateAuthResponse(as, client, location, state)
    const tokens = await oauth.processAuthorizationCodeResponse(as, client,
      await oauth.authorizationCodeGrantRequest(as, client, oauth.None(), callback, REDIRECT, verifier, insecure))
    expect(tokens.scope).toBe('public')
    expect((await world.get('/v1/todos', { auth: tokens.access_token })).status).toBe(200)
    expect((await world.post('/v1/todos', { auth: tokens.access_token, json: { body: 'no write scope' } })).status).toBe(403)

    const refreshed = await oauth.processRefreshTokenResponse(as, client, await oauth.refreshTokenGrantRequest(as, client, oauth.None(), tokens.refresh_token!, insecure))
    expect((await world.get('/v1/users/me', { auth: refreshed.access_token })).status).toBe(200)

    await oauth.processRevocationResponse(await oauth.revocationRequest(as, client, oauth.None(), refreshed.access_token, insecure))
    expect((await world.get('/v1/users/me', { auth: refreshed.access_token })).status).toBe(403)
    const introspected = await oauth.processIntrospectionResponse(as, client, await oauth.introspectionRequest(as, client, oauth.None(), refreshed.refresh_token!, insecure))
    expect(introspected).toEqual({ active: false })
  })

  it('chat from an approved app reaches direct messages; scopes a refresh narrows stay narrow', async () => {
    const registered = await register('--chat', '--first-party')
    const client: oauth.Client = { client_id: registered.client_id }
    const { location, state } = await approve(registered, { scope: 'public write chat' })
    const tokens = await oauth.processAuthorizationCodeResponse(as, client,
      await oauth.authorizationCodeGrantRequest(as, client, oauth.ClientSecretBasic(registered.client_secret!), oauth.validateAuthResponse(as, client, location, state), REDIRECT, oauth.nopkce, insecure))
    expect((await world.get('/v1/conversations', { auth: tokens.access_token })).status).toBe(200)
    expect((await world.get('/v1/search/users?query=al', { auth: tokens.access_token })).status).toBe(200)

    const narrowed = await oauth.processRefreshTokenResponse(as, client, await oauth.refreshTokenGrantRequest(as, client,
      oauth.ClientSecretBasic(registered.client_secret!), tokens.refresh_token!, { ...insecure, additionalParameters: { scope: 'public' } }))
    expect(narrowed.scope).toBe('public')
    expect((await world.get('/v1/conversations', { auth: narrowed.access_token })).status).toBe(403)
    // Narrowed once, a later refresh cannot widen back.
    await expectOAuthError(oauth.processRefreshTokenResponse(as, client, await oauth.refreshTokenGrantRequest(as, client,
      oauth.ClientSecretBasic(registered.client_secret!), narrowed.refresh_token!, { ...insecure, additionalParameters: { scope: 'public chat' } })), 'invalid_scope')
  })

  it('operator-issued tokens keep working (issue-token) and are refreshed and revoked like the others', async () => {
    const registered = await register()
    const issued = await world.admin('issue-token', '--user', 'alice', '--client', registered.client_id, '--scopes', 'public')
    expect((await world.get('/v1/users/me', { auth: issued.access_token })).status).toBe(200)
    const client: oauth.Client = { client_id: registered.client_id }
    const refreshed = await oauth.processRefreshTokenResponse(as, client,
      await oauth.refreshTokenGrantRequest(as, client, oauth.ClientSecretBasic(registered.client_secret!), issued.refresh_token, insecure))
    expect((await world.get('/v1/users/me', { auth: refreshed.access_token })).status).toBe(200)
  })
})

describe('token endpoint errors (RFC 6749 section 5.2)', () => {
  it('PKCE mismatch: invalid_grant', async () => {
    const registered = await register('--public')
    const client: oauth.Client = { client_id: registered.client_id, token_endpoint_auth_method: 'none' }
    const verifier = oauth.generateRandomCodeVerifier()
    const { location, state } = await approve(registered, { code_challenge: await oauth.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256' })
    const callback = oauth.validateAuthResponse(as, client, location, state)
    const err = await expectOAuthError(oauth.processAuthorizationCodeResponse(as, client,
      await oauth.authorizationCodeGrantRequest(as, client, oauth.None(), callback, REDIRECT, oauth.generateRandomCodeVerifier(), insecure)), 'invalid_grant')
    expect(err.status).toBe(400)
    expect(err.cause).toMatchObject({ error: 'invalid_grant', error_description: expect.stringContaining('PKCE') })
    // Leaving the verifier out is no way around it.
    const raw = await tokenForm({ grant_type: 'authorization_code', code: callback.get('code')!, redirect_uri: REDIRECT, client_id: registered.client_id })
    expect(raw.status).toBe(400)
    expect(await raw.json()).toMatchObject({ error: 'invalid_grant' })
  })

  it('code reuse: invalid_grant, and the tokens from that code are revoked', async () => {
    const registered = await register()
    const client: oauth.Client = { client_id: registered.client_id }
    const auth = oauth.ClientSecretBasic(registered.client_secret!)
    const { location, state } = await approve(registered)
    const callback = oauth.validateAuthResponse(as, client, location, state)
    const tokens = await oauth.processAuthorizationCodeResponse(as, client, await oauth.authorizationCodeGrantRequest(as, client, auth, callback, REDIRECT, oauth.nopkce, insecure))
    expect((await world.get('/v1/users/me', { auth: tokens.access_token })).status).toBe(200)
    const err = await expectOAuthError(oauth.processAuthorizationCodeResponse(as, client,
      await oauth.authorizationCodeGrantRequest(as, client, auth, callback, REDIRECT, oauth.nopkce, insecure)), 'invalid_grant')
    expect(err.cause).toMatchObject({ error_description: expect.stringContaining('already used') })
    expect((await world.get('/v1/users/me', { auth: tokens.access_token })).status).toBe(403)
    await expectOAuthError(oauth.processRefreshTokenResponse(as, client, await oauth.refreshTokenGrantRequest(as, client, auth, tokens.refresh_token!, insecure)), 'invalid_grant')
  })

  it('two exchanges of one code at once: exactly one gets tokens', async () => {
    const registered = await register()
    const { location } = await approve(registered)
    const form = { grant_type: 'authorization_code', code: location.searchParams.get('code')!, redirect_uri: REDIRECT }
    const answers = await Promise.all(Array.from({ length: 5 }, () => tokenForm(form, { authorization: basic(registered.client_id, registered.client_secret!) })))
    expect(answers.map((a) => a.status).sort()).toEqual([200, 400, 400, 400, 400])
  })

  it('refresh reuse: invalid_grant, and the whole family is revoked, live access tokens included', async () => {
    const registered = await register()
    const client: oauth.Client = { client_id: registered.client_id }
    const auth = oauth.ClientSecretBasic(registered.client_secret!)
    const { location, state } = await approve(registered)
    const first = await oauth.processAuthorizationCodeResponse(as, client,
      await oauth.authorizationCodeGrantRequest(as, client, auth, oauth.validateAuthResponse(as, client, location, state), REDIRECT, oauth.nopkce, insecure))
    const second = await oauth.processRefreshTokenResponse(as, client, await oauth.refreshTokenGrantRequest(as, client, auth, first.refresh_token!, insecure))
    const third = await oauth.processRefreshTokenResponse(as, client, await oauth.refreshTokenGrantRequest(as, client, auth, second.refresh_token!, insecure))
    expect((await world.get('/v1/users/me', { auth: third.access_token })).status).toBe(200)
    // An attacker replays the first refresh token.
    const err = await expectOAuthError(oauth.processRefreshTokenResponse(as, client, await oauth.refreshTokenGrantRequest(as, client, auth, first.refresh_token!, insecure)), 'invalid_grant')
    expect(err.cause).toMatchObject({ error_description: expect.stringContaining('already used') })
    for (const token of [first.access_token, second.access_token, third.access_token]) expect((await world.get('/v1/users/me', { auth: token })).status).toBe(403)
    await expectOAuthError(oauth.processRefreshTokenResponse(as, client, await oauth.refreshTokenGrantRequest(as, client, auth, third.refresh_token!, insecure)), 'invalid_grant')
  })

  it('wrong redirect_uri: invalid_grant (a second registered URI included)', async () => {
    const registered: Registered = await world.admin('create-oauth-client', '--name', 'Two URIs', '--redirect-uri', REDIRECT, '--redirect-uri', 'https://app.example/other')
    const client: oauth.Client = { client_id: registered.client_id }
    const { location, state } = await approve(registered)
    const err = await expectOAuthError(oauth.processAuthorizationCodeResponse(as, client, await oauth.authorizationCodeGrantRequest(as, client,
      oauth.ClientSecretBasic(registered.client_secret!), oauth.validateAuthResponse(as, client, location, state), 'https://app.example/other', oauth.nopkce, insecure)), 'invalid_grant')
    expect(err.cause).toMatchObject({ error_description: expect.stringContaining('redirect_uri') })
  })

  it('scope widening on refresh: invalid_scope; unknown scopes too', async () => {
    const registered = await register('--chat')
    const client: oauth.Client = { client_id: registered.client_id }
    const auth = oauth.ClientSecretBasic(registered.client_secret!)
    const { location, state } = await approve(registered, { scope: 'public' })
    const tokens = await oauth.processAuthorizationCodeResponse(as, client,
      await oauth.authorizationCodeGrantRequest(as, client, auth, oauth.validateAuthResponse(as, client, location, state), REDIRECT, oauth.nopkce, insecure))
    for (const scope of ['public write', 'chat', 'public admin']) {
      await expectOAuthError(oauth.processRefreshTokenResponse(as, client,
        await oauth.refreshTokenGrantRequest(as, client, auth, tokens.refresh_token!, { ...insecure, additionalParameters: { scope } })), 'invalid_scope')
    }
    // The refused requests spent nothing: the refresh token still works.
    const refreshed = await oauth.processRefreshTokenResponse(as, client, await oauth.refreshTokenGrantRequest(as, client, auth, tokens.refresh_token!, insecure))
    expect(refreshed.scope).toBe('public')
  })

  it('an expired code: invalid_grant', async () => {
    const registered = await register()
    const { location } = await approve(registered)
    await world.sql`update app.oauth_authorization_codes set expires_at = now() - interval '1 second' where used_at is null`
    const answer = await tokenForm({ grant_type: 'authorization_code', code: location.searchParams.get('code')!, redirect_uri: REDIRECT },
      { authorization: basic(registered.client_id, registered.client_secret!) })
    expect(answer.status).toBe(400)
    expect(await answer.json()).toEqual({ error: 'invalid_grant', error_description: 'The authorization code has expired.' })
  })

  it('a code of another client: invalid_grant', async () => {
    const owner = await register()
    const thief = await register()
    const { location } = await approve(owner)
    const answer = await tokenForm({ grant_type: 'authorization_code', code: location.searchParams.get('code')!, redirect_uri: REDIRECT },
      { authorization: basic(thief.client_id, thief.client_secret!) })
    expect(answer.status).toBe(400)
    expect((await answer.json()).error).toBe('invalid_grant')
  })

  it('client authentication: 401 invalid_client with a challenge, for a wrong secret, an unknown client, a missing secret, a public client sending one', async () => {
    const confidential = await register()
    const publicClient = await register('--public')
    const { location } = await approve(confidential)
    const code = location.searchParams.get('code')!
    const cases: [Record<string, string>, Record<string, string>][] = [
      [{}, { authorization: basic(confidential.client_id, 'wrong') }],
      [{ client_id: confidential.client_id, client_secret: 'wrong' }, {}],
      [{ client_id: confidential.client_id }, {}],
      [{ client_id: 'no-such-client', client_secret: 'x' }, {}],
      [{}, {}],
      [{ client_id: publicClient.client_id, client_secret: 'made-up' }, {}],
    ]
    for (const [form, headers] of cases) {
      const answer = await tokenForm({ grant_type: 'authorization_code', code, redirect_uri: REDIRECT, ...form }, headers)
      expect(answer.status, JSON.stringify(form)).toBe(401)
      expect(answer.headers.get('www-authenticate')).toMatch(/^Basic/)
      expect(answer.headers.get('cache-control')).toBe('no-store')
      expect(await answer.json()).toMatchObject({ error: 'invalid_client', error_description: expect.any(String) })
    }
    // None of that spent the code.
    const good = await tokenForm({ grant_type: 'authorization_code', code, redirect_uri: REDIRECT }, { authorization: basic(confidential.client_id, confidential.client_secret!) })
    expect(good.status).toBe(200)
  })

  it('invalid_request and unsupported_grant_type', async () => {
    const registered = await register()
    const auth = { authorization: basic(registered.client_id, registered.client_secret!) }
    const cases: [string, Record<string, string> | string, string][] = [
      ['no grant_type', {}, 'invalid_request'],
      ['password grant', { grant_type: 'password', username: 'alice', password: 'x' }, 'unsupported_grant_type'],
      ['client_credentials', { grant_type: 'client_credentials' }, 'unsupported_grant_type'],
      ['no code', { grant_type: 'authorization_code', redirect_uri: REDIRECT }, 'invalid_request'],
      ['no refresh token', { grant_type: 'refresh_token' }, 'invalid_request'],
      ['a repeated parameter', 'grant_type=authorization_code&code=a&code=b', 'invalid_request'],
      ['a malformed verifier', { grant_type: 'authorization_code', code: 'x', code_verifier: 'short' }, 'invalid_request'],
    ]
    for (const [name, form, error] of cases) {
      const answer = await fetch(`${world.baseUrl}/oauth/token`, {
        method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', ...auth }, body: typeof form === 'string' ? form : new URLSearchParams(form).toString(),
      })
      expect(answer.status, name).toBe(400)
      expect(await answer.json(), name).toMatchObject({ error, error_description: expect.any(String) })
    }
    const json = await fetch(`${world.baseUrl}/oauth/token`, { method: 'POST', headers: { 'content-type': 'application/json', ...auth }, body: '{"grant_type":"refresh_token"}' })
    expect(json.status).toBe(400)
    expect((await json.json()).error).toBe('invalid_request')
    const huge = await fetch(`${world.baseUrl}/oauth/token`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', ...auth }, body: `grant_type=refresh_token&refresh_token=${'a'.repeat(100_000)}` })
    expect(huge.status).toBe(413)
    expect((await huge.json()).error).toBe('invalid_request')
  })
})

describe('introspection, revocation and token info', () => {
  it('introspection needs client authentication and shows a client only its own tokens', async () => {
    const mine = await register()
    const other = await register()
    const issued = await world.admin('issue-token', '--user', 'alice', '--client', mine.client_id, '--scopes', 'public')
    const introspect = (form: Record<string, string>, headers: Record<string, string> = {}) => fetch(`${world.baseUrl}/oauth/introspect`, {
      method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers }, body: new URLSearchParams(form).toString(),
    })
    expect((await introspect({ token: issued.access_token })).status).toBe(401)
    expect((await introspect({ token: issued.access_token }, { authorization: basic(mine.client_id, 'wrong') })).status).toBe(401)
    expect(await (await introspect({ token: issued.access_token }, { authorization: basic(other.client_id, other.client_secret!) })).json()).toEqual({ active: false })
    expect(await (await introspect({ token: 'garbage' }, { authorization: basic(mine.client_id, mine.client_secret!) })).json()).toEqual({ active: false })
    expect(await (await introspect({ token: 'a.b.c' }, { authorization: basic(mine.client_id, mine.client_secret!) })).json()).toEqual({ active: false })
    const forged = await world.sign('another-secret-that-is-long-enough-for-hs256!', { sub: alice.id, jti: crypto.randomUUID(), scope: 'public', client_id: mine.client_id, first_party: false, chat: false }, 3600)
    expect(await (await introspect({ token: forged }, { authorization: basic(mine.client_id, mine.client_secret!) })).json()).toEqual({ active: false })
    expect((await introspect({}, { authorization: basic(mine.client_id, mine.client_secret!) })).status).toBe(400)
    const active = await (await introspect({ token: issued.access_token, token_type_hint: 'access_token' }, { authorization: basic(mine.client_id, mine.client_secret!) })).json()
    expect(active).toMatchObject({ active: true, client_id: mine.client_id, username: 'alice', sub: alice.id, scope: 'public', token_type: 'Bearer' })
    // Expired: inactive.
    await world.sql`update app.oauth_tokens set expires_at = now() - interval '1 second' where refresh_token_hash = sha256(convert_to(${issued.refresh_token}, 'UTF8'))`
    expect(await (await introspect({ token: issued.access_token }, { authorization: basic(mine.client_id, mine.client_secret!) })).json()).toEqual({ active: false })
  })

  it('revocation: 200 for unknown tokens and other clients’ tokens (which it leaves alone), 401 for a failed client authentication', async () => {
    const mine = await register()
    const other = await register()
    const issued = await world.admin('issue-token', '--user', 'alice', '--client', mine.client_id, '--scopes', 'public')
    const revoke = (form: Record<string, string>, headers: Record<string, string>) => fetch(`${world.baseUrl}/oauth/revoke`, {
      method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers }, body: new URLSearchParams(form).toString(),
    })
    expect((await revoke({ token: 'never-issued' }, { authorization: basic(mine.client_id, mine.client_secret!) })).status).toBe(200)
    expect((await revoke({ token: issued.access_token }, { authorization: basic(other.client_id, other.client_secret!) })).status).toBe(200)
    expect((await world.get('/v1/users/me', { auth: issued.access_token })).status).toBe(200)
    expect((await revoke({ token: issued.access_token }, { authorization: basic(mine.client_id, 'wrong') })).status).toBe(401)
    expect((await revoke({ token: issued.access_token }, { authorization: basic(mine.client_id, mine.client_secret!) })).status).toBe(200)
    expect((await world.get('/v1/users/me', { auth: issued.access_token })).status).toBe(403)
    // An expired access token still names its family: revoking it ends the refresh token too.
    const again = await world.admin('issue-token', '--user', 'alice', '--client', mine.client_id, '--scopes', 'public')
    await world.sql`update app.oauth_tokens set expires_at = now() - interval '1 minute' where refresh_token_hash = sha256(convert_to(${again.refresh_token}, 'UTF8'))`
    const expired = await world.sign(JWT_SECRET, { sub: alice.id, jti: JSON.parse(atob(again.access_token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/'))).jti, scope: 'public', client_id: mine.client_id, first_party: false, chat: false }, -60)
    expect((await revoke({ token: expired }, { authorization: basic(mine.client_id, mine.client_secret!) })).status).toBe(200)
    const refresh = await tokenForm({ grant_type: 'refresh_token', refresh_token: again.refresh_token }, { authorization: basic(mine.client_id, mine.client_secret!) })
    expect(await refresh.json()).toMatchObject({ error: 'invalid_grant', error_description: 'The refresh token was revoked.' })
  })

  it('token info: 401 invalid_token without a token, for a forged, an API key or a revoked one', async () => {
    expect((await world.get('/oauth/token/info')).status).toBe(401)
    const noToken = await world.get('/oauth/token/info')
    expect(noToken.body).toMatchObject({ error: 'invalid_token' })
    expect(noToken.headers.get('www-authenticate')).toBe('Bearer')
    expect((await world.get('/oauth/token/info', { auth: alice.api_key })).status).toBe(401)
    const token = await world.token('alice', 'public')
    expect((await world.get('/oauth/token/info', { auth: token })).status).toBe(200)
    await world.admin('revoke-token', '--token', token)
    const revoked = await world.get('/oauth/token/info', { auth: token })
    expect(revoked.status).toBe(401)
    expect(revoked.headers.get('www-authenticate')).toBe('Bearer error="invalid_token"')
  })
})

describe('the authorization endpoint', () => {
  it('an unknown client or an unregistered redirect_uri is an error page, never a redirect', async () => {
    const registered = await register()
    const cases = [
      authorizeQuery({ client_id: 'no-such-client', redirect_uri: REDIRECT }),
      authorizeQuery({ client_id: registered.client_id, redirect_uri: 'https://evil.example/callback' }),
      authorizeQuery({ client_id: registered.client_id, redirect_uri: `${REDIRECT}/more` }),
      authorizeQuery({ client_id: registered.client_id, redirect_uri: `${REDIRECT}?x=1` }),
      `response_type=code&client_id=${registered.client_id}`,
      `${authorizeQuery({ client_id: registered.client_id, redirect_uri: REDIRECT })}&redirect_uri=${encodeURIComponent('https://evil.example/')}`,
    ]
    for (const query of cases) {
      const page = await agent.get(`/oauth/authorize?${query}`)
      expect(page.status, query).toBe(400)
      expect(page.headers.get('location')).toBeNull()
      expect(page.headers.get('content-type')).toMatch(/text\/html/)
      expect(await page.text()).toContain('does not work')
    }
  })

  it('redirects errors to a registered redirect_uri: unsupported_response_type, invalid_scope (chat from an unapproved app, unknown scopes), invalid_request (PKCE)', async () => {
    const confidential = await register()
    const publicClient = await register('--public')
    const cases: [AuthorizeParams, string][] = [
      [{ client_id: confidential.client_id, redirect_uri: REDIRECT, response_type: 'token', state: 's1' }, 'unsupported_response_type'],
      [{ client_id: confidential.client_id, redirect_uri: REDIRECT, scope: 'public chat', state: 's2' }, 'invalid_scope'],
      [{ client_id: confidential.client_id, redirect_uri: REDIRECT, scope: 'public admin', state: 's3' }, 'invalid_scope'],
      [{ client_id: publicClient.client_id, redirect_uri: REDIRECT, state: 's4' }, 'invalid_request'],
      [{ client_id: confidential.client_id, redirect_uri: REDIRECT, code_challenge: 'x'.repeat(43), code_challenge_method: 'plain', state: 's5' }, 'invalid_request'],
      [{ client_id: confidential.client_id, redirect_uri: REDIRECT, code_challenge: 'short', code_challenge_method: 'S256', state: 's6' }, 'invalid_request'],
    ]
    for (const [params, error] of cases) {
      const answer = await agent.get(`/oauth/authorize?${authorizeQuery(params)}`)
      expect(answer.status, error).toBe(302)
      const location = new URL(answer.headers.get('location')!)
      expect(location.origin + location.pathname).toBe(REDIRECT)
      expect(location.searchParams.get('error')).toBe(error)
      expect(location.searchParams.get('state')).toBe(params.state)
      const client: oauth.Client = { client_id: params.client_id }
      expect(() => oauth.validateAuthResponse(as, client, location, params.state!)).toThrow(oauth.AuthorizationResponseError)
    }
  })

  it('Deny redirects with access_denied and the state', async () => {
    const registered = await register()
    const location = await consent(agent, { client_id: registered.client_id, redirect_uri: REDIRECT, state: 'keep me' }, 'deny')
    expect(location.searchParams.get('error')).toBe('access_denied')
    expect(location.searchParams.get('state')).toBe('keep me')
    expect(location.searchParams.get('code')).toBeNull()
    // RFC 9207: every authorization response names its issuer (oauth4webapi checks it).
    expect(location.searchParams.get('iss')).toBe(ISSUER)
  })

  it('the consent page names the app and each scope in plain words, escaped; it cannot be framed and runs no script', async () => {
    const registered: Registered = await world.admin('create-oauth-client', '--name', '<script>alert("x")</script> & "Co"', '--redirect-uri', REDIRECT, '--chat')
    const state = `"><script>alert(1)</script>`
    const page = await agent.get(`/oauth/authorize?${authorizeQuery({ client_id: registered.client_id, redirect_uri: REDIRECT, scope: 'public write billing notifications chat', state })}`)
    expect(page.status).toBe(200)
    const html = await page.text()
    expect(html).not.toContain('<script>')
    expect(html).toContain('&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &quot;Co&quot;')
    expect(html).toContain('value="&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"')
    for (const words of ['See your profile', 'Post, change and delete', 'subscription status', 'notifications', 'direct messages']) expect(html).toContain(words)
    expect(html).toContain('alice')
    expect(page.headers.get('content-security-policy')).toContain("default-src 'none'")
    expect(page.headers.get('content-security-policy')).toContain("frame-ancestors 'none'")
    expect(page.headers.get('x-frame-options')).toBe('DENY')
    expect(page.headers.get('cache-control')).toBe('no-store, no-transform')
    // The state comes back unchanged.
    const answer = await agent.post('/oauth/authorize', { ...hiddenFields(html), decision: 'approve' })
    expect(new URL(answer.headers.get('location')!).searchParams.get('state')).toBe(state)
  })

  it('every page limits where its forms may post (CSP form-action): our own pages, then only the app’s registered redirect_uri (issue 25)', async () => {
    const policy = (res: Response) => res.headers.get('content-security-policy') ?? ''
    const formAction = (res: Response) => /(?:^|;)\s*form-action ([^;]*)/.exec(policy(res))?.[1]?.trim()
    const native = 'com.example.todo:/oauth/callback'
    const loopback = 'http://127.0.0.1:49152/callback'
    const registered: Registered = await world.admin('create-oauth-client', '--name', 'Many', '--redirect-uri', REDIRECT, '--redirect-uri', native, '--redirect-uri', loopback)
    const cases: [string, string][] = [[REDIRECT, "'self' https://app.example"], [native, "'self' com.example.todo:"], [loopback, "'self' http://127.0.0.1:49152"]]
    for (const [redirectUri, expected] of cases) {
      const params = { client_id: registered.client_id, redirect_uri: redirectUri, scope: 'public write' }
      // The consent page (signed in): its form posts here and ends at the app's redirect_uri.
      const consentPage = await agent.get(`/oauth/authorize?${authorizeQuery(params)}`)
      expect(consentPage.status).toBe(200)
      expect(formAction(consentPage), redirectUri).toBe(expected)
      // The sign-in page (a stranger): its form posts here, comes back to authorize, and may end there too.
      const signInPage = await browserless(world.baseUrl).get(`/oauth/authorize?${authorizeQuery(params)}`)
      expect(await signInPage.text()).toContain('One-time sign-in code')
      expect(formAction(signInPage), redirectUri).toBe(expected)
    }
    // A page without a form (an error) allows none.
    const error = await agent.get(`/oauth/authorize?${authorizeQuery({ client_id: registered.client_id, redirect_uri: 'https://evil.example/cb' })}`)
    expect(error.status).toBe(400)
    expect(formAction(error)).toBe("'none'")
    expect(policy(error)).toContain("default-src 'none'")
  })

  it('the consent form is CSRF-protected: no token, a wrong one, another session’s, or a foreign Origin get 403 and no redirect', async () => {
    const registered = await register()
    const params = { client_id: registered.client_id, redirect_uri: REDIRECT, scope: 'public write' }
    const html = await (await agent.get(`/oauth/authorize?${authorizeQuery(params)}`)).text()
    const fields = hiddenFields(html)
    const { csrf_token: _csrf, ...withoutToken } = fields
    const bob = await signedIn('bob', params)
    const bobFields = hiddenFields(await (await bob.get(`/oauth/authorize?${authorizeQuery(params)}`)).text())
    const forged = [
      () => agent.post('/oauth/authorize', { ...withoutToken, decision: 'approve' }),
      () => agent.post('/oauth/authorize', { ...fields, csrf_token: 'x'.repeat(43), decision: 'approve' }),
      () => agent.post('/oauth/authorize', { ...fields, csrf_token: bobFields.csrf_token!, decision: 'approve' }),
      () => agent.post('/oauth/authorize', { ...fields, decision: 'approve' }, { origin: 'https://evil.example' }),
      () => browserless(world.baseUrl).post('/oauth/authorize', { ...fields, decision: 'approve' }),
    ]
    for (const attempt of forged) {
      const answer = await attempt()
      expect(answer.status).toBe(403)
      expect(answer.headers.get('location')).toBeNull()
    }
    expect((await world.sql`select count(*)::int as n from app.oauth_authorization_codes a join app.oauth_clients c on c.id = a.client_id where c.client_id = ${registered.client_id}`)[0]!.n).toBe(0)
  })

  it('a scope the form widens is checked again: chat added to an unapproved app’s form is invalid_scope', async () => {
    const registered = await register()
    const params = { client_id: registered.client_id, redirect_uri: REDIRECT, scope: 'public', state: 'st' }
    const fields = hiddenFields(await (await agent.get(`/oauth/authorize?${authorizeQuery(params)}`)).text())
    const answer = await agent.post('/oauth/authorize', { ...fields, scope: 'public chat', decision: 'approve' })
    expect(new URL(answer.headers.get('location')!).searchParams.get('error')).toBe('invalid_scope')
    const evil = await agent.post('/oauth/authorize', { ...fields, redirect_uri: 'https://evil.example/', decision: 'approve' })
    expect(evil.status).toBe(400)
    expect(evil.headers.get('location')).toBeNull()
  })
})

describe('signing in', () => {
  const params = () => ({ client_id: '', redirect_uri: REDIRECT })

  it('login-code: single use, 10 minutes; the cookie is HttpOnly and SameSite=Lax, Secure only under https', async () => {
    const registered = await register()
    const p = { ...params(), client_id: registered.client_id }
    const { code } = await world.admin('login-code', '--user', 'alice')
    expect(code).toMatch(/^[A-Za-z0-9_-]{32}$/)
    const browser = browserless(world.baseUrl)
    const first = await signIn(browser, code, p)
    expect(first.status).toBe(303)
    expect(first.headers.get('location')).toBe(`authorize?${authorizeQuery(p)}`)
    const cookie = first.headers.get('set-cookie')!
    expect(cookie).toMatch(/^oauth_session=[A-Za-z0-9_-]{43}; Path=\/oauth; Max-Age=43200; HttpOnly; SameSite=Lax$/)
    const stored = await world.sql`select count(*)::int as n from app.oauth_sessions where id_hash = sha256(convert_to(${cookie.split(';')[0]!.split('=')[1]!}, 'UTF8'))`
    expect(stored[0]!.n).toBe(1)

    const second = await signIn(browserless(world.baseUrl), code, p)
    expect(second.status).toBe(400)
    expect(second.headers.get('set-cookie')).toBeNull()
    expect(await second.text()).toContain('not valid')

    const { code: late } = await world.admin('login-code', '--user', 'alice')
    await world.sql`update app.oauth_login_codes set expires_at = now() - interval '1 second'`
    expect((await signIn(browserless(world.baseUrl), late, p)).status).toBe(400)

    // Under https the cookie is Secure.
    const app = createApp({ sql: world.sql, publicUrl: 'https://todo.example/functions/v1/api', jwtSecret: JWT_SECRET, upgradeUrl: 'https://todo.example/upgrade', storage: {} as never })
    const { code: third } = await world.admin('login-code', '--user', 'alice')
    const secure = await app.request('/oauth/login', {
      method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', origin: 'https://todo.example' },
      body: new URLSearchParams({ code: third, authorize: authorizeQuery(p) }).toString(),
    })
    expect(secure.status).toBe(303)
    expect(secure.headers.get('set-cookie')).toMatch(/; Path=\/functions\/v1\/api\/oauth; Max-Age=43200; HttpOnly; SameSite=Lax; Secure$/)
  })

  it('production: the website’s Supabase Auth session signs the member in; other JWTs do not', async () => {
    const registered = await register()
    const p = { ...params(), client_id: registered.client_id }
    const uuid = alice.id.replace(/^user_(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5')
    const session = (claims: Record<string, unknown>, secret = JWT_SECRET) => new SignJWT(claims).setProtectedHeader({ alg: 'HS256' }).setExpirationTime('1h').sign(new TextEncoder().encode(secret))
    const post = (token: string) => browserless(world.baseUrl).post('/oauth/login', { authorize: authorizeQuery(p), supabase_access_token: token })
    expect((await post(await session({ sub: uuid, role: 'authenticated', aud: 'authenticated' }))).status).toBe(303)
    const refused = [
      await session({ sub: uuid, role: 'authenticated', aud: 'authenticated' }, 'some-other-secret-that-is-long-enough!!'),
      await session({ sub: uuid, role: 'anon', aud: 'authenticated' }),
      await world.token('alice', 'public'),
      // No expiry: a session must end.
      await new SignJWT({ sub: uuid, role: 'authenticated', aud: 'authenticated' }).setProtectedHeader({ alg: 'HS256' }).sign(new TextEncoder().encode(JWT_SECRET)),
      await session({ sub: uuid, role: 'authenticated', aud: 'authenticated' }).then((token) => token.slice(0, -2) + (token.endsWith('AA') ? 'BB' : 'AA')),
    ]
    for (const token of refused) expect((await post(token)).status).toBe(400)
  })

  it('a member keeps at most 10 sessions: the oldest go', async () => {
    const registered = await register()
    const p = { ...params(), client_id: registered.client_id }
    const agents: Browserless[] = []
    for (let i = 0; i < 12; i++) {
      const browser = browserless(world.baseUrl)
      expect((await signIn(browser, (await world.admin('login-code', '--user', 'bob')).code, p)).status).toBe(303)
      agents.push(browser)
    }
    const [row] = await world.sql`select count(*)::int as n from app.oauth_sessions s join app.users u on u.id = s.user_id where u.username = 'bob'`
    expect(row!.n).toBe(10)
    const query = `/oauth/authorize?${authorizeQuery(p)}`
    expect(await (await agents[0]!.get(query)).text()).toContain('One-time sign-in code')
    expect(await (await agents[11]!.get(query)).text()).toContain('csrf_token')
  })

  it('a sign-in form from another origin is refused', async () => {
    const registered = await register()
    const { code } = await world.admin('login-code', '--user', 'alice')
    const answer = await browserless(world.baseUrl).post('/oauth/login', { authorize: authorizeQuery({ client_id: registered.client_id, redirect_uri: REDIRECT }), code }, { origin: 'https://evil.example' })
    expect(answer.status).toBe(403)
    expect(answer.headers.get('set-cookie')).toBeNull()
  })

  it('the sign-in page is shown to a stranger, and the redirect after sign-in stays on our authorize path', async () => {
    const registered = await register()
    const page = await browserless(world.baseUrl).get(`/oauth/authorize?${authorizeQuery({ client_id: registered.client_id, redirect_uri: REDIRECT })}`)
    expect(page.status).toBe(200)
    const html = await page.text()
    expect(html).toContain('One-time sign-in code')
    expect(html).not.toContain('csrf_token')
    const { code } = await world.admin('login-code', '--user', 'alice')
    const answer = await browserless(world.baseUrl).post('/oauth/login', { authorize: 'x=1&redirect_uri=https://evil.example&client_id=y', code })
    expect(answer.headers.get('location')).toMatch(/^authorize\?/)
  })
})

describe('rate limits of the OAuth endpoints', () => {
  it('30 failed sign-in codes per address in 10 minutes, then 429 with Retry-After, even for a good code', async () => {
    const registered = await register()
    const p = { client_id: registered.client_id, redirect_uri: REDIRECT }
    // The tests above failed a few sign-ins from this address already.
    await world.sql`delete from app.keyed_rate_limit_counters`
    for (let i = 0; i < 30; i++) expect((await signIn(browserless(world.baseUrl), `wrong-${i}`, p)).status).toBe(400)
    const { code } = await world.admin('login-code', '--user', 'alice')
    const limited = await signIn(browserless(world.baseUrl), code, p)
    expect(limited.status).toBe(429)
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0)
    await world.sql`delete from app.keyed_rate_limit_counters where action = 'oauth_sign_in_failure'`
    expect((await signIn(browserless(world.baseUrl), code, p)).status).toBe(303)
  })

  it('60 failed token requests per address in 10 minutes, then 429 temporarily_unavailable', async () => {
    const registered = await register()
    await world.sql`delete from app.keyed_rate_limit_counters`
    for (let i = 0; i < 60; i++) {
      const answer = await tokenForm({ grant_type: 'refresh_token', refresh_token: `guess-${i}` }, { authorization: basic(registered.client_id, registered.client_secret!) })
      expect(answer.status).toBe(400)
    }
    const limited = await tokenForm({ grant_type: 'refresh_token', refresh_token: 'guess' }, { authorization: basic(registered.client_id, registered.client_secret!) })
    expect(limited.status).toBe(429)
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0)
    expect(await limited.json()).toMatchObject({ error: 'temporarily_unavailable' })
    await world.sql`delete from app.keyed_rate_limit_counters where action = 'oauth_token_failure'`
  })
})
