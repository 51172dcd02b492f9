// The OAuth 2.0 authorization server (SPEC section 5, issue 16): authorization code with PKCE
// (RFC 6749, RFC 7636), refresh-token rotation, introspection (RFC 7662), revocation (RFC 7009),
// token info, and server metadata (RFC 8414). docs/oauth.md explains the flows and choices.
//
// Every secret is hashed here and every request is one call of one app.oauth_* function, which
// decides it in its own transaction (functions in supabase/schemas/85_oauth.sql). What this file
// does: parse and check the protocol's parameters, keep the browser pages safe (escaping, CSRF,
// no redirect to anything unregistered), and sign access tokens with the same signer as the
// operator's `issue-token` (functions/lib/tokens.ts).
import { createHmac, timingSafeEqual } from 'node:crypto'
import { Hono } from 'hono'
import type { Context } from 'hono'
import { bodyLimit } from 'hono/body-limit'
import { jwtVerify } from 'jose'
import type { AppEnv } from '../lib/context.ts'
import { appLink } from '../lib/links.ts'
import { ApiError, CLIENT_HUNG_UP_MESSAGE, RETRY_AFTER_UNAVAILABLE_SECONDS, clientHungUp, describeError, isDatabaseUnavailable, unavailableLogLine } from '../lib/errors.ts'
import { inTurn } from '../lib/respond.ts'
import { randomToken, sha256Hex, signAccessToken, verifyAccessToken } from '../lib/tokens.ts'
import { type AuthorizedApp, PAGE_HEADERS, appsPage, consentPage, errorPage, formActionFor, pageCsp, pageLink, signInPage } from './pages.ts'

export const SCOPES = ['public', 'write', 'billing', 'notifications', 'chat'] as const
/**
 * Lifetime of an access token issued by the token endpoint: 15 minutes. Supabase Realtime ends a
 * revoked token's open channels only at its expiry (docs/security.md, "Revoked tokens stop
 * receiving"), and with refresh tokens a short lifetime costs an app nothing. (The operator's
 * `issue-token` keeps its hour.)
 */
export const ACCESS_TOKEN_SECONDS = 900
/** Lifetime of an authorization code: long enough for a slow app to exchange it, short enough to be useless when it leaks. */
export const CODE_SECONDS = 120
/** Lifetime of a consent-page session. */
export const SESSION_SECONDS = 12 * 3600
/** The largest form the OAuth endpoints read: their parameters are a few hundred bytes. */
export const MAX_OAUTH_BODY_BYTES = 16 * 1024
/**
 * The session cookie's name: `__Secure-oauth_session` under https, which browsers accept only
 * from a secure origin with Secure set (RFC 6265bis section 4.1.3.1). Without the prefix a
 * network attacker answering a plain-http request for our host could plant their own session
 * in the victim's browser (login CSRF by cookie): the server cannot tell who set a cookie.
 */
function sessionCookieName(c: OAuthContext): string {
  return new URL(c.var.deps.publicUrl).protocol === 'https:' ? '__Secure-oauth_session' : 'oauth_session'
}
/** RFC 7636 section 4.1: 43 to 128 unreserved characters. */
const CODE_VERIFIER = /^[A-Za-z0-9\-._~]{43,128}$/
/** BASE64URL of a SHA-256: 43 characters. */
const CODE_CHALLENGE = /^[A-Za-z0-9_-]{43}$/
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
/** The parameters of an authorization request, carried through the sign-in and consent forms. */
const AUTHORIZE_PARAMS = ['response_type', 'client_id', 'redirect_uri', 'scope', 'state', 'code_challenge', 'code_challenge_method'] as const

type OAuthContext = Context<AppEnv>

interface OAuthFailure {
  error: string
  error_description: string
  status?: number
  retry_after?: number
}

/** An RFC 6749 section 5.2 error (401 with a challenge for client authentication, 429 with Retry-After). */
function oauthError(c: OAuthContext, failure: OAuthFailure): Response {
  const status = failure.status ?? 400
  const headers: Record<string, string> = { 'cache-control': 'no-store', pragma: 'no-cache' }
  if (status === 401) headers['www-authenticate'] = 'Basic realm="oauth", charset="UTF-8"'
  if (failure.retry_after) headers['retry-after'] = String(failure.retry_after)
  return c.json({ error: failure.error, error_description: failure.error_description }, status as 400, headers)
}

/** Who is asking, for the per-address limits: the socket on Node, the gateway's X-Forwarded-For on the edge. */
function clientAddress(c: OAuthContext): string {
  const socketAddress = (c.env as { incoming?: { socket?: { remoteAddress?: string } } } | undefined)?.incoming?.socket?.remoteAddress
  if (socketAddress) return socketAddress
  return c.req.header('x-forwarded-for')?.split(',')[0]?.trim() || 'unknown'
}

/** A form body as parameters; null when it is not a form or repeats a parameter (RFC 6749 section 3.1). */
async function readForm(c: OAuthContext): Promise<URLSearchParams | OAuthFailure> {
  const type = c.req.header('content-type') ?? ''
  if (!/^application\/x-www-form-urlencoded\b/i.test(type)) {
    return { error: 'invalid_request', error_description: 'The body must be application/x-www-form-urlencoded.' }
  }
  const form = new URLSearchParams(await c.req.text())
  const seen = new Set<string>()
  for (const [name, value] of form) {
    // PostgreSQL's text takes no NUL: refused here, as the protocol's error, not the database's.
    if (name.includes('\0') || value.includes('\0')) return { error: 'invalid_request', error_description: 'A parameter contains a NUL character.' }
    if (seen.has(name)) return { error: 'invalid_request', error_description: `The parameter ${name} is sent more than once.` }
    seen.add(name)
  }
  return form
}

/** Whether any parameter of an authorization request (the query, or the sign-in form's `authorize`) holds a NUL character. */
function hasNul(params: URLSearchParams): boolean {
  for (const [name, value] of params) if (name.includes('\0') || value.includes('\0')) return true
  return false
}

interface ClientCredentials {
  clientId: string
  /** SHA-256 (hex) of the presented secret; null when none was sent (a public client). */
  secretHash: string | null
}

/** client_secret_basic, client_secret_post or none (a public client sends only client_id). */
async function clientCredentials(c: OAuthContext, form: URLSearchParams): Promise<ClientCredentials | OAuthFailure> {
  const authorization = c.req.header('authorization')
  const invalid = (description: string): OAuthFailure => ({ error: 'invalid_client', error_description: description, status: 401 })
  let clientId: string | null = form.get('client_id')
  let secret: string | null = form.get('client_secret')
  if (authorization && /^Basic\s/i.test(authorization)) {
    if (secret !== null) return { error: 'invalid_request', error_description: 'Use one client authentication method, not client_secret_basic and client_secret_post at once.' }
    let decoded: string
    try {
      decoded = atob(authorization.replace(/^Basic\s+/i, '').trim())
    } catch {
      return invalid('The Basic credentials are not base64.')
    }
    const colon = decoded.indexOf(':')
    if (colon < 0) return invalid('The Basic credentials must be client_id:client_secret.')
    try {
      // RFC 6749 section 2.3.1: both parts are form-urlencoded before they are joined.
      const fromHeader = decodeURIComponent(decoded.slice(0, colon).replace(/\+/g, ' '))
      if (clientId !== null && clientId !== fromHeader) return invalid('client_id differs from the one in the Authorization header.')
      clientId = fromHeader
      secret = decodeURIComponent(decoded.slice(colon + 1).replace(/\+/g, ' '))
    } catch {
      return invalid('The Basic credentials are not form-urlencoded.')
    }
    if (clientId.includes('\0') || secret.includes('\0')) return invalid('The Basic credentials contain a NUL character.')
  }
  if (!clientId) return invalid('Client authentication is required: client_id (and client_secret for confidential clients).')
  return { clientId, secretHash: secret === null || secret === '' ? null : await sha256Hex(secret) }
}

/** Calls one app.oauth_* function and returns its JSON. */
async function call<T = Record<string, unknown>>(c: OAuthContext, fn: string, args: unknown[]): Promise<T> {
  if (!/^app\.oauth_[a-z_]+$/.test(fn)) throw new Error(`not an OAuth function: ${fn}`)
  const params = args.map((_, i) => `$${i + 1}`).join(', ')
  // In the strangers' shared line of the fair queue (functions/lib/admission.ts): no request
  // here has a member's credential, and together they may take no more than half the pool.
  const rows = await inTurn(c, () => c.var.deps.sql.unsafe(`select ${fn}(${params}) as result`, args as never[], { prepare: true }))
  return rows[0]?.result as T
}

/** Scopes from a space-separated list: unknown ones are an error, repeats are dropped, order kept as SCOPES. */
function parseScopes(value: string | null | undefined): string[] | null {
  const words = (value ?? '').split(' ').filter(Boolean)
  if (words.some((word) => !(SCOPES as readonly string[]).includes(word))) return null
  return SCOPES.filter((scope) => words.includes(scope))
}

interface IssuedToken {
  sub: string
  jti: string
  scope: string
  client_id: string
  first_party: boolean
  chat: boolean
  expires_in: number
}

/** RFC 6749 section 5.1, never cached. */
async function tokenResponse(c: OAuthContext, issued: IssuedToken, refreshToken: string): Promise<Response> {
  const { expires_in, ...claims } = issued
  const accessToken = await signAccessToken(c.var.deps.jwtSecret, claims, ACCESS_TOKEN_SECONDS)
  return c.json(
    { access_token: accessToken, token_type: 'Bearer', expires_in, refresh_token: refreshToken, scope: issued.scope },
    200,
    { 'cache-control': 'no-store', pragma: 'no-cache' },
  )
}

/** An access token's jti (signature and audience verified; expiry ignored when asked), or a refresh token's hash. */
async function tokenLookup(c: OAuthContext, token: string, ignoreExpiry: boolean): Promise<{ jti: string | null; refreshHash: string | null }> {
  if (token.split('.').length === 3) {
    const claims = await verifyAccessToken(c.var.deps.jwtSecret, token, { ignoreExpiry })
    return { jti: claims && UUID.test(claims.jti) ? claims.jti : null, refreshHash: null }
  }
  return { jti: null, refreshHash: await sha256Hex(token) }
}

// ---------------------------------------------------------------------------------------------
// The pages: authorize (sign-in or consent), login, the consent decision
// ---------------------------------------------------------------------------------------------

function page(c: OAuthContext, html: string, status = 200, extra: Record<string, string> = {}): Response {
  return c.html(html, status as 200, { ...PAGE_HEADERS, ...extra })
}

/** A page with a form (sign-in, consent) for an authorization request whose redirect_uri was checked: its forms may post here and end there. */
function formPage(c: OAuthContext, html: string, redirectUri: string, status = 200, extra: Record<string, string> = {}): Response {
  return page(c, html, status, { ...extra, 'content-security-policy': pageCsp(formActionFor(redirectUri)) })
}

function cookieValue(c: OAuthContext, name: string): string | null {
  for (const part of (c.req.header('cookie') ?? '').split(';')) {
    const [key, ...rest] = part.trim().split('=')
    if (key === name) return rest.join('=') || null
  }
  return null
}

/** Path and Secure flag of the session cookie: under PUBLIC_URL's path, Secure when it is https. */
function sessionCookie(c: OAuthContext, value: string, maxAge: number): string {
  const base = new URL(c.var.deps.publicUrl)
  const path = `${base.pathname.replace(/\/+$/, '')}/oauth`
  return `${sessionCookieName(c)}=${value}; Path=${path}; Max-Age=${maxAge}; HttpOnly; SameSite=Lax${base.protocol === 'https:' ? '; Secure' : ''}`
}

/** The consent form's CSRF token: an HMAC of the session id, so only a page served to this session carries it. */
function csrfToken(secret: string, session: string): string {
  return createHmac('sha256', secret).update(`oauth-consent:${session}`).digest('base64url')
}

function sameText(a: string, b: string): boolean {
  const x = new TextEncoder().encode(a)
  const y = new TextEncoder().encode(b)
  return x.length === y.length && timingSafeEqual(x, y)
}

/**
 * Forms post back only from our own pages: a browser sends Origin on a POST, and a foreign one
 * is refused (with the CSRF token and SameSite=Lax, a second lock on the consent form, and the
 * only one on the sign-in form, which has no session yet).
 */
function foreignOrigin(c: OAuthContext, options: { website?: boolean } = {}): boolean {
  const origin = c.req.header('origin')
  if (!origin || origin === 'null') return origin === 'null'
  const own = new Set([new URL(c.var.deps.publicUrl).origin, new URL(c.req.url).origin])
  if (options.website) for (const site of c.var.deps.websiteOrigins ?? []) own.add(site)
  return !own.has(origin)
}

interface AuthorizeContext {
  client: { name: string; public: boolean; chat: boolean; redirect_uris: string[]; default_scopes: string[] } | null
  member: { id: string; username: string } | null
  /** What the member approved for this app before (app.oauth_grants); null when nothing. */
  granted_scopes?: string[] | null
}

type ApprovableRequest = { kind: 'ok'; client: NonNullable<AuthorizeContext['client']>; redirectUri: string; scopes: string[]; state: string | null; challenge: string | null }
type AuthorizeCheck =
  | { kind: 'page'; message: string }
  | { kind: 'redirect'; client: NonNullable<AuthorizeContext['client']>; redirectUri: string; error: string; description: string; state: string | null }
  | ApprovableRequest

/** The checks of RFC 6749 section 4.1.1 and RFC 7636 in the order the RFC asks: client and redirect_uri first (a page), then the rest (a redirect). */
function checkAuthorizeRequest(params: URLSearchParams, client: AuthorizeContext['client']): AuthorizeCheck {
  const repeated = AUTHORIZE_PARAMS.find((name) => params.getAll(name).length > 1)
  if (!client) return { kind: 'page', message: 'The application (client_id) is not known to us.' }
  const redirectUri = params.get('redirect_uri')
  if (!redirectUri) return { kind: 'page', message: 'The request names no redirect_uri.' }
  if (!client.redirect_uris.includes(redirectUri) || params.getAll('redirect_uri').length > 1 || params.getAll('client_id').length > 1) {
    return { kind: 'page', message: 'The redirect_uri is not one the application registered.' }
  }
  const state = params.get('state')
  const fail = (error: string, description: string): AuthorizeCheck => ({ kind: 'redirect', client, redirectUri, error, description, state })
  if (repeated) return fail('invalid_request', `The parameter ${repeated} is sent more than once.`)
  const responseType = params.get('response_type')
  if (!responseType) return fail('invalid_request', 'response_type is required.')
  if (responseType !== 'code') return fail('unsupported_response_type', 'Only response_type=code is supported.')
  // RFC 6749 section 3.3: without a scope (none, or an empty one) the request asks for the
  // app's default scopes, which the operator set (`create-oauth-client --default-scopes`,
  // `public` unless said otherwise); the consent page shows them like any others.
  const requested = params.get('scope')
  const scopes = requested === null || requested.trim() === ''
    ? SCOPES.filter((scope) => client.default_scopes.includes(scope))
    : parseScopes(requested)
  if (!scopes || scopes.length === 0) return fail('invalid_scope', `Scopes are ${SCOPES.join(' ')}.`)
  if (scopes.includes('chat') && !client.chat) return fail('invalid_scope', 'The chat scope is for approved applications only.')
  const challenge = params.get('code_challenge')
  const method = params.get('code_challenge_method')
  if (challenge !== null || method !== null) {
    if (method !== 'S256') return fail('invalid_request', 'code_challenge_method must be S256.')
    if (!challenge || !CODE_CHALLENGE.test(challenge)) return fail('invalid_request', 'code_challenge must be the base64url SHA-256 of the code verifier (43 characters).')
  } else if (client.public) {
    return fail('invalid_request', 'Public clients must use PKCE: send code_challenge with code_challenge_method=S256.')
  }
  return { kind: 'ok', client, redirectUri, scopes, state, challenge }
}

/**
 * 302 to the registered redirect_uri with the response parameters added to its query, and `iss`
 * (RFC 9207), so a client talking to several servers knows which one answered (mix-up attacks).
 */
function redirectTo(c: OAuthContext, redirectUri: string, params: Record<string, string | null>): Response {
  const target = new URL(redirectUri)
  for (const [name, value] of Object.entries({ ...params, iss: c.var.deps.publicUrl })) if (value !== null) target.searchParams.set(name, value)
  return c.body(null, 302, { location: target.toString(), 'cache-control': 'no-store' })
}

/** The parameters of an authorization request as a query string, as the forms carry it. */
function authorizeQuery(params: URLSearchParams): string {
  const kept = new URLSearchParams()
  for (const name of AUTHORIZE_PARAMS) for (const value of params.getAll(name)) kept.append(name, value)
  return kept.toString()
}

async function sessionHash(c: OAuthContext): Promise<string | null> {
  const session = cookieValue(c, sessionCookieName(c))
  return session ? await sha256Hex(session) : null
}

async function showAuthorize(c: OAuthContext, params: URLSearchParams, signInError?: string, status = 200): Promise<Response> {
  if (hasNul(params)) return page(c, errorPage('The request contains a NUL character.'), 400)
  const context = await call<AuthorizeContext>(c, 'app.oauth_authorize_context', [params.get('client_id') ?? '', await sessionHash(c)])
  const check = checkAuthorizeRequest(params, context.client)
  if (check.kind === 'page') return page(c, errorPage(check.message), 400)
  // RFC 9700 section 4.11.2: the member signs in before any redirect, errors included. Otherwise
  // a registered app could use a bad request (an unknown scope) on our trusted address as a
  // link that bounces strangers straight to its site.
  if (!context.member || signInError) {
    return formPage(c, signInPage({ appName: check.client.name, authorize: authorizeQuery(params), action: appLink(c.var.deps.publicUrl, '/oauth/login'), error: signInError }), check.redirectUri, status)
  }
  if (check.kind === 'redirect') return redirectTo(c, check.redirectUri, { error: check.error, error_description: check.description, state: check.state })
  const session = cookieValue(c, sessionCookieName(c))!
  // Remembered consent: the member approved these scopes (or more) for this app before and has
  // not revoked it, so the answer is a code at once. Anything wider shows the page again, with
  // the new scopes marked: an app cannot widen what it holds without the member seeing it. The
  // SQL side reads the approval again under its lock (a Revoke may have come in between): then
  // the page after all.
  let granted = context.granted_scopes ?? null
  if (granted && check.scopes.every((scope) => granted!.includes(scope)) && identityAssured(check)) {
    const silent = await approve(c, session, params.get('client_id')!, check, true)
    if (silent) return silent
    granted = null
  }
  const fields: Record<string, string> = {}
  for (const name of AUTHORIZE_PARAMS) {
    const value = params.get(name)
    if (value !== null) fields[name] = value
  }
  const csrf = csrfToken(c.var.deps.jwtSecret, session)
  return formPage(c, consentPage({
    appName: check.client.name, username: context.member.username, scopes: check.scopes, fields, csrf, granted, authorize: authorizeQuery(params),
    action: appLink(c.var.deps.publicUrl, '/oauth/authorize'),
  }), check.redirectUri)
}

/**
 * Approve: a code for the signed-in member, and the redirect that carries it to the app. The SQL
 * side checks again what the page checked (the form came back from the browser) and remembers
 * the approval (app.oauth_grants).
 */
async function approve(c: OAuthContext, session: string, clientId: string, check: ApprovableRequest): Promise<Response>
async function approve(c: OAuthContext, session: string, clientId: string, check: ApprovableRequest, remembered: true): Promise<Response | null>
async function approve(c: OAuthContext, session: string, clientId: string, check: ApprovableRequest, remembered = false): Promise<Response | null> {
  const code = randomToken(32)
  const result = await call<Partial<OAuthFailure> & { ok?: boolean; consent_required?: boolean }>(c, 'app.oauth_create_code', [
    await sha256Hex(session), clientId, check.redirectUri, check.scopes, check.challenge, await sha256Hex(code), CODE_SECONDS, remembered,
  ])
  // Remembered, but the approval no longer covers the request (revoked meanwhile): no code.
  if (result.consent_required) return null
  if (result.error) {
    if (result.status === 403) return page(c, errorPage(result.error_description ?? 'Start again from the application.'), 403)
    return redirectTo(c, check.redirectUri, { error: result.error, error_description: result.error_description ?? null, state: check.state })
  }
  return redirectTo(c, check.redirectUri, { code, state: check.state })
}

/**
 * Whether a remembered approval may answer without the consent page: only when the code can go
 * to no one but the app (RFC 8252 section 8.6). A confidential client proves who it is at the
 * token endpoint; a public client's https redirect on a real host is the app's own site. A
 * public client's loopback or private-scheme redirect is not: any program on the member's
 * machine can listen on that port or claim that scheme, send the browser to us with the app's
 * public client_id and its own PKCE challenge, and would get the member's tokens without the
 * member seeing a page. Those apps show the consent page every time (their approval is still
 * listed on the apps page, and Revoke still ends it).
 */
function identityAssured(check: ApprovableRequest): boolean {
  if (!check.client.public) return true
  const url = new URL(check.redirectUri)
  if (url.protocol !== 'https:') return false
  // Not a name on the member's own machine, nor an address literal (loopback, or any other: a
  // real site has a name, and a literal may be the member's machine under another spelling).
  const host = url.hostname.toLowerCase()
  return !(host === 'localhost' || host.endsWith('.localhost') || host.startsWith('[') || /^[0-9.]+$/.test(host))
}

/** Where the sign-in form continues: the page of authorized apps, or the authorization request. */
function signInReturnsToApps(form: URLSearchParams): boolean {
  return form.get('return') === 'apps'
}

/** The page of authorized apps, and the sign-in form in its place: forms post only to our own pages. */
function appsFormPage(c: OAuthContext, html: string, status = 200): Response {
  return page(c, html, status, { 'content-security-policy': pageCsp("'self'") })
}

/** A form of the member's pages (Revoke, Sign out): from our own origin, with the session's CSRF token; else the answer refusing it. */
function refuseForgedForm(c: OAuthContext, form: URLSearchParams, session: string | null): Response | null {
  if (foreignOrigin(c)) return page(c, errorPage('This form may only be sent from our own pages.'), 403)
  if (!session || !sameText(form.get('csrf_token') ?? '', csrfToken(c.var.deps.jwtSecret, session))) {
    return page(c, errorPage('Your session has ended or this form did not come from our pages. Open the page again.'), 403)
  }
  return null
}

/** A Supabase Auth session (the website's), verified with the project's JWT secret: the member's auth.users id. */
async function supabaseSessionMember(secret: string, token: string): Promise<string | null> {
  try {
    const { payload } = await jwtVerify(token, new TextEncoder().encode(secret), { algorithms: ['HS256'], audience: 'authenticated', requiredClaims: ['exp', 'sub'] })
    return payload.role === 'authenticated' && typeof payload.sub === 'string' && UUID.test(payload.sub) ? payload.sub : null
  } catch {
    return null
  }
}

export const oauth = new Hono<AppEnv>()

/** The browser's routes, which answer HTML pages; every other OAuth route answers RFC 6749 JSON. */
function isPage(c: OAuthContext): boolean {
  return /\/oauth\/(authorize|login|apps|logout)$/.test(new URL(c.req.url).pathname)
}

oauth.use('/oauth/*', bodyLimit({
  maxSize: MAX_OAUTH_BODY_BYTES,
  onError: (c) => {
    const description = `The request body is larger than ${MAX_OAUTH_BODY_BYTES} bytes.`
    if (isPage(c)) return page(c, errorPage(description), 413, { connection: 'close' })
    return c.json({ error: 'invalid_request', error_description: description }, 413, { connection: 'close', 'cache-control': 'no-store', pragma: 'no-cache' })
  },
}))

// Whatever else fails (a value the database refuses, a bug) is answered in the endpoint's own
// shape, an error page or RFC 6749 section 5.2, never the /v1 contract's; details only in the log.
oauth.onError((err, c) => {
  // A client that hung up mid-body: no lost database, nothing to log (the access log keeps the 400).
  if (clientHungUp(err, c.req.raw)) {
    if (isPage(c)) return page(c, errorPage(CLIENT_HUNG_UP_MESSAGE), 400)
    return oauthError(c, { error: 'invalid_request', error_description: CLIENT_HUNG_UP_MESSAGE })
  }
  // No turn in the fair queue (too many requests at once): worth retrying, as below.
  if (err instanceof ApiError && (err.status === 429 || err.status === 503)) {
    const retryAfter = Number(err.headers['Retry-After'] ?? RETRY_AFTER_UNAVAILABLE_SECONDS)
    if (isPage(c)) return page(c, errorPage('The service is busy. Try again in a moment.'), 503, { 'retry-after': String(retryAfter) })
    return oauthError(c, { error: 'temporarily_unavailable', error_description: err.message, status: 503, retry_after: retryAfter })
  }
  // The database out of reach (a restart): 503, worth retrying (temporarily_unavailable, RFC 6749 section 4.1.2.1).
  if (isDatabaseUnavailable(err)) {
    console.error(unavailableLogLine(err))
    if (isPage(c)) return page(c, errorPage('The service is briefly unavailable. Try again in a moment.'), 503, { 'retry-after': String(RETRY_AFTER_UNAVAILABLE_SECONDS) })
    return oauthError(c, { error: 'temporarily_unavailable', error_description: 'The service is briefly unavailable; try again shortly.', status: 503, retry_after: RETRY_AFTER_UNAVAILABLE_SECONDS })
  }
  const { status } = describeError(err, c.var.deps.upgradeUrl)
  if (status >= 500) console.error(err)
  if (isPage(c)) return page(c, errorPage(status >= 500 ? 'Something went wrong on our side. Try again from the application.' : 'The request could not be read.'), status >= 500 ? 500 : 400)
  return oauthError(c, status >= 500
    ? { error: 'server_error', error_description: 'Something went wrong on our side.', status: 500 }
    : { error: 'invalid_request', error_description: 'The request could not be read.' })
})

oauth.get('/oauth/authorize', async (c) => showAuthorize(c, new URL(c.req.url).searchParams))

oauth.post('/oauth/login', async (c) => {
  const form = await readForm(c)
  if (!(form instanceof URLSearchParams)) {
    if (foreignOrigin(c, { website: true })) return page(c, errorPage('This form may only be sent from our own sign-in page.'), 403)
    return page(c, errorPage('The sign-in form could not be read.'), 400)
  }
  // Our own sign-in page posts codes; the website (WEBSITE_ORIGINS, another origin in
  // production) posts the member's Supabase Auth session. Any other origin is login CSRF.
  if (foreignOrigin(c, { website: form.has('supabase_access_token') })) return page(c, errorPage('This form may only be sent from our own sign-in page.'), 403)
  const authorize = new URLSearchParams(form.get('authorize') ?? '')
  if (hasNul(authorize)) return page(c, errorPage('The request contains a NUL character.'), 400)
  const toApps = signInReturnsToApps(form)
  const code = form.get('code')?.trim() ?? ''
  const supabaseToken = form.get('supabase_access_token')
  let memberId: string | null = null
  if (supabaseToken) {
    memberId = await supabaseSessionMember(c.var.deps.jwtSecret, supabaseToken)
    const invalid = 'That website session is not valid; sign in on the website again.'
    if (!memberId) return toApps ? appsFormPage(c, signInPage({ returnTo: 'apps', action: appLink(c.var.deps.publicUrl, '/oauth/login'), error: invalid }), 400) : showAuthorize(c, authorize, invalid, 400)
  } else if (!code) {
    const missing = 'Enter your one-time sign-in code.'
    return toApps ? appsFormPage(c, signInPage({ returnTo: 'apps', action: appLink(c.var.deps.publicUrl, '/oauth/login'), error: missing }), 400) : showAuthorize(c, authorize, missing, 400)
  }
  const session = randomToken(32)
  const result = await call<{ member?: string } & Partial<OAuthFailure>>(c, 'app.oauth_start_session', [
    memberId ? null : await sha256Hex(code), memberId, clientAddress(c), await sha256Hex(session), SESSION_SECONDS,
  ])
  if (result.error) {
    const extra: Record<string, string> = result.retry_after ? { 'retry-after': String(result.retry_after) } : {}
    if (toApps) return page(c, signInPage({ returnTo: 'apps', action: appLink(c.var.deps.publicUrl, '/oauth/login'), error: result.error_description }), result.status ?? 400, { ...extra, 'content-security-policy': pageCsp("'self'") })
    const context = await call<AuthorizeContext>(c, 'app.oauth_authorize_context', [authorize.get('client_id') ?? '', null])
    const check = checkAuthorizeRequest(authorize, context.client)
    if (check.kind === 'page') return page(c, errorPage(check.message), 400)
    return formPage(c, signInPage({ appName: check.client.name, authorize: authorizeQuery(authorize), action: appLink(c.var.deps.publicUrl, '/oauth/login'), error: result.error_description }), check.redirectUri, result.status ?? 400, extra)
  }
  // Back to the authorization request or the apps page (always our own path: no open redirect), now signed in.
  const location = toApps ? pageLink('apps') : `authorize?${authorizeQuery(authorize)}`
  return c.body(null, 303, { location, 'set-cookie': sessionCookie(c, session, SESSION_SECONDS), 'cache-control': 'no-store' })
})

oauth.post('/oauth/authorize', async (c) => {
  if (foreignOrigin(c)) return page(c, errorPage('This form may only be sent from our own consent page.'), 403)
  const form = await readForm(c)
  if (!(form instanceof URLSearchParams)) return page(c, errorPage('The consent form could not be read.'), 400)
  const session = cookieValue(c, sessionCookieName(c))
  const presented = form.get('csrf_token') ?? ''
  if (!session || !sameText(presented, csrfToken(c.var.deps.jwtSecret, session))) {
    return page(c, errorPage('Your session has ended or this form did not come from our consent page. Start again from the application.'), 403)
  }
  const params = new URLSearchParams(authorizeQuery(form))
  const decision = form.get('decision')
  const context = await call<AuthorizeContext>(c, 'app.oauth_authorize_context', [params.get('client_id') ?? '', await sha256Hex(session)])
  const check = checkAuthorizeRequest(params, context.client)
  if (check.kind === 'page') return page(c, errorPage(check.message), 400)
  if (check.kind === 'redirect') return redirectTo(c, check.redirectUri, { error: check.error, error_description: check.description, state: check.state })
  if (!context.member) return page(c, errorPage('Your session has ended. Start again from the application.'), 403)
  if (decision !== 'approve') {
    return redirectTo(c, check.redirectUri, { error: 'access_denied', error_description: 'The member denied the request.', state: check.state })
  }
  return approve(c, session, params.get('client_id')!, check)
})

// ---------------------------------------------------------------------------------------------
// The member's pages: the apps they authorized (Revoke), sign-out
// ---------------------------------------------------------------------------------------------

interface MemberApps {
  member: { id: string; username: string } | null
  apps: AuthorizedApp[]
}

oauth.get('/oauth/apps', async (c) => {
  const session = cookieValue(c, sessionCookieName(c))
  const listing = await call<MemberApps>(c, 'app.oauth_member_apps', [session ? await sha256Hex(session) : null])
  // Signed in as on the consent page: the same session, the same sign-in form.
  if (!session || !listing.member) return appsFormPage(c, signInPage({ returnTo: 'apps', action: appLink(c.var.deps.publicUrl, '/oauth/login') }))
  return appsFormPage(c, appsPage({
    username: listing.member.username, apps: listing.apps, csrf: csrfToken(c.var.deps.jwtSecret, session), notice: c.req.query('notice') ?? null,
  }))
})

// Revoke: ends the member's grant to one app (its tokens, its codes, the remembered consent).
oauth.post('/oauth/apps', async (c) => {
  if (foreignOrigin(c)) return page(c, errorPage('This form may only be sent from our own pages.'), 403)
  const form = await readForm(c)
  if (!(form instanceof URLSearchParams)) return page(c, errorPage('The form could not be read.'), 400)
  const session = cookieValue(c, sessionCookieName(c))
  const refused = refuseForgedForm(c, form, session)
  if (refused) return refused
  const clientId = form.get('client_id')
  if (!clientId) return page(c, errorPage('The form names no application.'), 400)
  const result = await call<Partial<OAuthFailure> & { revoked?: boolean }>(c, 'app.oauth_revoke_grant', [await sha256Hex(session!), clientId])
  if (result.error) return page(c, errorPage(result.error_description ?? 'Your session has ended; sign in again.'), result.status ?? 403)
  // POST, then redirect, then GET: reloading the page does not post the form again.
  return c.body(null, 303, { location: pageLink('apps', new URLSearchParams({ notice: 'revoked' })), 'cache-control': 'no-store' })
})

// Sign-out: ends the session of the pages (not the apps' tokens), and clears the cookie.
oauth.post('/oauth/logout', async (c) => {
  if (foreignOrigin(c)) return page(c, errorPage('This form may only be sent from our own pages.'), 403)
  const form = await readForm(c)
  if (!(form instanceof URLSearchParams)) return page(c, errorPage('The form could not be read.'), 400)
  const session = cookieValue(c, sessionCookieName(c))
  // No session: nothing to end, and nothing for a forged form to do.
  if (session) {
    const refused = refuseForgedForm(c, form, session)
    if (refused) return refused
    await call(c, 'app.oauth_end_session', [await sha256Hex(session)])
  }
  const authorize = form.get('authorize')
  if (authorize !== null && hasNul(new URLSearchParams(authorize))) return page(c, errorPage('The request contains a NUL character.'), 400)
  // Back to the authorization request (now the sign-in form: another account may sign in), or the apps page.
  const location = authorize === null ? pageLink('apps') : pageLink('authorize', new URLSearchParams(authorizeQuery(new URLSearchParams(authorize))))
  return c.body(null, 303, { location, 'set-cookie': sessionCookie(c, '', 0), 'cache-control': 'no-store' })
})

// ---------------------------------------------------------------------------------------------
// The endpoints apps call: token, introspect, revoke, token info, metadata
// ---------------------------------------------------------------------------------------------

oauth.post('/oauth/token', async (c) => {
  const form = await readForm(c)
  if (!(form instanceof URLSearchParams)) return oauthError(c, form)
  const grantType = form.get('grant_type')
  if (!grantType) return oauthError(c, { error: 'invalid_request', error_description: 'grant_type is required.' })
  if (grantType !== 'authorization_code' && grantType !== 'refresh_token') {
    return oauthError(c, { error: 'unsupported_grant_type', error_description: 'grant_type must be authorization_code or refresh_token.' })
  }
  const client = await clientCredentials(c, form)
  if (!('clientId' in client)) return oauthError(c, client)
  const jti = crypto.randomUUID()
  const refreshToken = randomToken(32)
  let result: Partial<OAuthFailure> & Partial<IssuedToken>
  if (grantType === 'authorization_code') {
    const code = form.get('code')
    const verifier = form.get('code_verifier')
    if (!code) return oauthError(c, { error: 'invalid_request', error_description: 'code is required.' })
    if (verifier !== null && !CODE_VERIFIER.test(verifier)) {
      return oauthError(c, { error: 'invalid_request', error_description: 'code_verifier must be 43 to 128 letters, digits, "-", ".", "_" or "~".' })
    }
    result = await call(c, 'app.oauth_exchange_code', [
      client.clientId, client.secretHash, clientAddress(c), await sha256Hex(code), form.get('redirect_uri'), verifier, jti,
      await sha256Hex(refreshToken), ACCESS_TOKEN_SECONDS,
    ])
  } else {
    const presented = form.get('refresh_token')
    if (!presented) return oauthError(c, { error: 'invalid_request', error_description: 'refresh_token is required.' })
    const requested = form.get('scope')
    const scopes = requested === null ? null : parseScopes(requested)
    if (scopes === null && requested !== null) return oauthError(c, { error: 'invalid_scope', error_description: `Scopes are ${SCOPES.join(' ')}.` })
    result = await call(c, 'app.oauth_refresh', [
      client.clientId, client.secretHash, clientAddress(c), await sha256Hex(presented), scopes, jti, await sha256Hex(refreshToken), ACCESS_TOKEN_SECONDS,
    ])
  }
  if (result.error) return oauthError(c, result as OAuthFailure)
  return tokenResponse(c, result as IssuedToken, refreshToken)
})

oauth.post('/oauth/introspect', async (c) => {
  const form = await readForm(c)
  if (!(form instanceof URLSearchParams)) return oauthError(c, form)
  const client = await clientCredentials(c, form)
  if (!('clientId' in client)) return oauthError(c, client)
  const token = form.get('token')
  if (!token) return oauthError(c, { error: 'invalid_request', error_description: 'token is required.' })
  const { jti, refreshHash } = await tokenLookup(c, token, false)
  const result = await call<Record<string, unknown> & Partial<OAuthFailure>>(c, 'app.oauth_introspect', [
    client.clientId, client.secretHash, clientAddress(c), jti, refreshHash,
  ])
  if (result.error) return oauthError(c, result as OAuthFailure)
  return c.json(result, 200, { 'cache-control': 'no-store', pragma: 'no-cache' })
})

oauth.post('/oauth/revoke', async (c) => {
  const form = await readForm(c)
  if (!(form instanceof URLSearchParams)) return oauthError(c, form)
  const client = await clientCredentials(c, form)
  if (!('clientId' in client)) return oauthError(c, client)
  const token = form.get('token')
  if (!token) return oauthError(c, { error: 'invalid_request', error_description: 'token is required.' })
  const { jti, refreshHash } = await tokenLookup(c, token, true)
  const result = await call<Partial<OAuthFailure>>(c, 'app.oauth_revoke', [client.clientId, client.secretHash, clientAddress(c), jti, refreshHash])
  if (result.error) return oauthError(c, result as OAuthFailure)
  // RFC 7009 section 2.2: 200 whether or not there was anything to revoke.
  return c.body(null, 200, { 'cache-control': 'no-store', pragma: 'no-cache' })
})

oauth.get('/oauth/token/info', async (c) => {
  const token = c.req.header('authorization')?.match(/^Bearer\s+(\S+)\s*$/i)?.[1]
  const claims = token ? await verifyAccessToken(c.var.deps.jwtSecret, token) : null
  const info = claims && UUID.test(claims.jti) ? await call<Record<string, unknown> | null>(c, 'app.oauth_token_info', [claims.jti, claims.sub]) : null
  if (!info) {
    // RFC 6750 section 3.1.
    return c.json({ error: 'invalid_token', error_description: 'The access token is missing, expired, revoked or not ours.' }, 401, {
      'www-authenticate': token ? 'Bearer error="invalid_token"' : 'Bearer',
      'cache-control': 'no-store',
      pragma: 'no-cache',
    })
  }
  return c.json(info, 200, { 'cache-control': 'no-store', pragma: 'no-cache' })
})

oauth.get('/.well-known/oauth-authorization-server', (c) => c.json(authorizationServerMetadata(c.var.deps.publicUrl)))

/** RFC 8414 metadata: the issuer is PUBLIC_URL, every endpoint under it. */
export function authorizationServerMetadata(publicUrl: string) {
  const authMethods = ['client_secret_basic', 'client_secret_post', 'none']
  return {
    issuer: publicUrl,
    authorization_endpoint: `${publicUrl}/oauth/authorize`,
    token_endpoint: `${publicUrl}/oauth/token`,
    introspection_endpoint: `${publicUrl}/oauth/introspect`,
    revocation_endpoint: `${publicUrl}/oauth/revoke`,
    token_info_endpoint: `${publicUrl}/oauth/token/info`,
    scopes_supported: [...SCOPES],
    response_types_supported: ['code'],
    response_modes_supported: ['query'],
    grant_types_supported: ['authorization_code', 'refresh_token'],
    code_challenge_methods_supported: ['S256'],
    authorization_response_iss_parameter_supported: true,
    token_endpoint_auth_methods_supported: authMethods,
    introspection_endpoint_auth_methods_supported: authMethods,
    revocation_endpoint_auth_methods_supported: authMethods,
    service_documentation: `${publicUrl}/docs`,
  }
}
