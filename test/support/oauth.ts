// Driving the authorization pages over plain HTTP, as a browser without JavaScript would:
// sign in with a one-time code, read the consent form, post the decision. Used by the tests
// that exercise the protocol with oauth4webapi; the page itself is also driven in Chromium
// (test/oauth-browser.test.ts, test/oauth-start.test.ts).
import * as oauth from 'oauth4webapi'

const ENTITIES: Record<string, string> = { '&amp;': '&', '&lt;': '<', '&gt;': '>', '&quot;': '"', '&#39;': "'" }
const unescape = (text: string) => text.replace(/&(amp|lt|gt|quot|#39);/g, (entity) => ENTITIES[entity]!)

/** The hidden fields of the page's form. */
export function hiddenFields(html: string): Record<string, string> {
  const fields: Record<string, string> = {}
  for (const match of html.matchAll(/<input type="hidden" name="([^"]*)" value="([^"]*)">/g)) fields[unescape(match[1]!)] = unescape(match[2]!)
  return fields
}

export interface Browserless {
  base: string
  cookie: string | null
  get(pathAndQuery: string): Promise<Response>
  post(path: string, form: Record<string, string>, headers?: Record<string, string>): Promise<Response>
}

/** A cookie jar of one: the session cookie the sign-in sets. */
export function browserless(base: string): Browserless {
  const agent: Browserless = {
    base,
    cookie: null,
    async get(pathAndQuery) {
      return fetch(base + pathAndQuery, { redirect: 'manual', headers: agent.cookie ? { cookie: agent.cookie } : {} })
    },
    async post(path, form, headers = {}) {
      const response = await fetch(base + path, {
        method: 'POST',
        redirect: 'manual',
        headers: { 'content-type': 'application/x-www-form-urlencoded', origin: new URL(base).origin, ...(agent.cookie ? { cookie: agent.cookie } : {}), ...headers },
        body: new URLSearchParams(form).toString(),
      })
      const setCookie = response.headers.get('set-cookie')
      if (setCookie) agent.cookie = setCookie.split(';')[0]!
      return response
    },
  }
  return agent
}

export interface AuthorizeParams {
  client_id: string
  redirect_uri: string
  scope?: string
  state?: string
  code_challenge?: string
  code_challenge_method?: string
  response_type?: string
}

export function authorizeQuery(params: AuthorizeParams): string {
  const query = new URLSearchParams({ response_type: 'code', ...params } as Record<string, string>)
  return query.toString()
}

/** Signs `agent` in with a one-time code (the sign-in form's POST); returns the answer. */
export async function signIn(agent: Browserless, code: string, params: AuthorizeParams): Promise<Response> {
  return agent.post('/oauth/login', { authorize: authorizeQuery(params), code })
}

/**
 * GET /oauth/authorize as the signed-in agent, then the consent form's decision: resolves to
 * the redirect's Location (or throws with the page when there is none). A member who approved
 * these scopes for the app before is redirected with a code at once (remembered consent, issue
 * 28): that redirect is the answer to an approval too.
 */
export async function consent(agent: Browserless, params: AuthorizeParams, decision: 'approve' | 'deny' = 'approve'): Promise<URL> {
  const page = await agent.get(`/oauth/authorize?${authorizeQuery(params)}`)
  const remembered = page.status === 302 ? page.headers.get('location') : null
  if (decision === 'approve' && remembered && new URL(remembered).searchParams.has('code')) return new URL(remembered)
  const html = await page.text()
  if (page.status !== 200 || !html.includes('csrf_token')) throw new Error(`no consent page (${page.status}): ${html.slice(0, 500)}`)
  const answer = await agent.post('/oauth/authorize', { ...hiddenFields(html), decision })
  const location = answer.headers.get('location')
  if (answer.status !== 302 || !location) throw new Error(`no redirect (${answer.status}): ${(await answer.text()).slice(0, 500)}`)
  return new URL(location)
}

/** oauth4webapi options for http:// (tests run on loopback without TLS). */
export const insecure = { [oauth.allowInsecureRequests]: true } as const

/** The server's metadata through oauth4webapi (RFC 8414), its endpoints moved to `base` when the issuer is another host. */
export async function discover(issuer: string, base: string): Promise<oauth.AuthorizationServer> {
  const response = await fetch(`${base}/.well-known/oauth-authorization-server`)
  const as = await oauth.processDiscoveryResponse(new URL(issuer), response)
  const moved = Object.fromEntries(Object.entries(as).map(([key, value]) => [key, typeof value === 'string' && key.endsWith('_endpoint') ? value.replace(issuer, base) : value]))
  return moved as oauth.AuthorizationServer
}

/**
 * In a real browser (Chromium through playwright-core): open the authorization URL, sign in
 * with a one-time code, screenshot the consent page to `screenshot`, Approve, and resolve to
 * the URL the browser landed on (the app's redirect_uri with code and state).
 */
export async function consentInBrowser(
  page: import('playwright-core').Page,
  options: { authorizeUrl: string; loginCode: string; redirectUri: string; screenshot: string },
): Promise<URL> {
  await page.goto(options.authorizeUrl)
  await page.fill('#code', options.loginCode)
  await page.click('button[type=submit]')
  await page.waitForSelector('#app-name', { timeout: 5000 }).catch(async (err) => {
    throw new Error(`no consent page after signing in: ${page.url()}\n${await page.content()}`, { cause: err })
  })
  await page.screenshot({ path: options.screenshot, fullPage: true })
  await Promise.all([
    page.waitForURL((url) => url.toString().startsWith(options.redirectUri)),
    page.click('button[value=approve]'),
  ])
  return new URL(page.url())
}
