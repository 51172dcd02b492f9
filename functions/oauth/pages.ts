// The authorization pages: sign-in, consent and error, rendered on the server as plain HTML
// forms (no JavaScript, no external resources). Every value that came from a request or the
// database goes through `escape`, attributes are always double-quoted, and the pages forbid
// scripts, framing and foreign resources by their Content-Security-Policy.

/** Plain words for each scope, shown on the consent page. */
export const SCOPE_WORDS: Record<string, string> = {
  public: 'See your profile, your todos and the activity you can see',
  write: 'Post, change and delete todos, comments and reactions as you',
  billing: 'See your subscription status and billing options',
  notifications: 'See your notifications and mark them read',
  chat: 'Read and send your direct messages',
}

const ENTITIES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }

/** HTML-escapes text for element content and double-quoted attributes. */
export function escape(text: string): string {
  return text.replace(/[&<>"']/g, (ch) => ENTITIES[ch]!)
}

/**
 * The Content-Security-Policy of a page whose forms may post to `formAction`. form-action also
 * binds the redirects a form's submission follows (Chromium refuses the navigation otherwise), so
 * a page whose form ends at the app's redirect_uri must name it too: see formActionFor.
 */
export function pageCsp(formAction: string): string {
  return `default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action ${formAction}`
}

/** A redirect_uri as a CSP source: its origin (http, https), its scheme (a native app's own, `com.example.app:`), or null. */
function cspSource(redirectUri: string): string | null {
  let url: URL
  try {
    url = new URL(redirectUri)
  } catch {
    return null
  }
  if (url.protocol === 'http:' || url.protocol === 'https:') {
    // Only what a source expression can hold as it is: no space, ';' or ',' (a host the URL
    // parser lets through otherwise would end the directive and start another).
    return /^https?:\/\/([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:\d{1,5})?$/.test(url.origin) ? url.origin : null
  }
  return /^[a-z][a-z0-9+.-]*:$/.test(url.protocol) ? url.protocol : null
}

/**
 * form-action of the sign-in and consent pages: our own endpoints ('self'), and the app's
 * registered redirect_uri (checked before a page is shown), where the consent form's answer and
 * a signed-in authorization request end. Nowhere else: markup that got into a page could not
 * post what the member types (the sign-in code) or the CSRF token to another site.
 */
export function formActionFor(redirectUri: string): string {
  const source = cspSource(redirectUri)
  return source ? `'self' ${source}` : "'self'"
}

/**
 * Headers of every page: never cached, never framed, no script runs, never compressed. The
 * consent page carries the CSRF token next to what the request reflects (state, scope, the
 * app's parameters); compressed, its length would tell a network observer how much of a guess
 * at the token matched (BREACH). `no-transform` keeps our compression off it, and Deno.serve's
 * and the gateway's too.
 */
export const PAGE_HEADERS: Record<string, string> = {
  'content-type': 'text/html; charset=UTF-8',
  'cache-control': 'no-store, no-transform',
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  // same-origin, not no-referrer: with no-referrer Chromium sends `Origin: null` on our own forms.
  'referrer-policy': 'same-origin',
  // No form may post anywhere: the pages with one (sign-in, consent) say where theirs may (formActionFor).
  'content-security-policy': pageCsp("'none'"),
}

/** The pages under /oauth/ that a page's forms post to or a redirect sends the browser to. */
export type PageName = 'authorize' | 'login' | 'apps' | 'logout'

/**
 * The one place the member's pages (authorized apps, sign-out) and the redirects after their
 * forms build a link: relative to the page, like the sign-in and consent forms' `login` and
 * `authorize`, since every page lives in the same folder under PUBLIC_URL's path
 * (`{base}/oauth/…`). Change it here when links come from PUBLIC_URL instead.
 */
export function pageLink(name: PageName, query?: URLSearchParams): string {
  const search = query?.toString()
  return search ? `${name}?${search}` : name
}

function layout(title: string, body: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escape(title)}</title>
<style>
  body { font-family: system-ui, sans-serif; background: #f6f7f9; color: #1d2330; margin: 0; }
  main { max-width: 26rem; margin: 3rem auto; background: #fff; border-radius: 12px; padding: 2rem; box-shadow: 0 1px 4px rgba(0,0,0,.08); }
  h1 { font-size: 1.3rem; margin-top: 0; }
  ul { padding-left: 1.2rem; }
  li { margin: .4rem 0; }
  label { display: block; margin: 1rem 0 .3rem; font-weight: 600; }
  input[type=text] { width: 100%; box-sizing: border-box; padding: .6rem; font-size: 1rem; border: 1px solid #c5cad3; border-radius: 6px; }
  .buttons { display: flex; gap: .75rem; margin-top: 1.5rem; }
  button { flex: 1; padding: .7rem; font-size: 1rem; border-radius: 6px; border: 1px solid #c5cad3; background: #fff; cursor: pointer; }
  button.primary { background: #2563eb; border-color: #2563eb; color: #fff; }
  .error { background: #fdecec; color: #9b1c1c; padding: .6rem .8rem; border-radius: 6px; }
  .muted { color: #5b6474; font-size: .9rem; }
  .notice { background: #eaf6ec; color: #1f5f2c; padding: .6rem .8rem; border-radius: 6px; }
  .app { border-top: 1px solid #e3e6eb; padding: .8rem 0; }
  .app h2 { font-size: 1.05rem; margin: 0 0 .3rem; }
  .app form .buttons { margin-top: .6rem; }
  form.signout { margin-top: 1.2rem; }
  form.signout button { flex: none; padding: .3rem .7rem; font-size: .9rem; }
  em.new { color: #9b1c1c; font-style: normal; font-weight: 600; }
</style>
</head>
<body>
<main>
${body}
</main>
</body>
</html>
`
}

function hidden(fields: Record<string, string>): string {
  return Object.entries(fields)
    .map(([name, value]) => `<input type="hidden" name="${escape(name)}" value="${escape(value)}">`)
    .join('\n')
}

export function errorPage(message: string): string {
  return layout('Authorization error', `<h1>This sign-in link does not work</h1>
<p class="error" role="alert">${escape(message)}</p>
<p class="muted">Nothing was shared with the application. Go back to it and try again, or tell its developers.</p>`)
}

/**
 * The local sign-in form: a one-time code from the operator CLI (`login-code --user U`). It
 * continues to the authorization request (`authorize`), or to the page of authorized apps
 * (`returnTo: 'apps'`, the form's `return` field). `action`: where the form posts,
 * appLink(PUBLIC_URL, '/oauth/login') (functions/lib/links.ts).
 */
export function signInPage(options: ({ appName: string; authorize: string } | { returnTo: 'apps' }) & { action: string; error?: string }): string {
  const heading = 'returnTo' in options ? 'Sign in to see the apps you authorized' : `Sign in to continue to ${escape(options.appName)}`
  const fields: Record<string, string> = 'returnTo' in options ? { return: options.returnTo } : { authorize: options.authorize }
  return layout('Sign in', `<h1>${heading}</h1>
${options.error ? `<p class="error" role="alert">${escape(options.error)}</p>` : ''}
<form method="post" action="${escape(options.action)}">
${hidden(fields)}
<label for="code">One-time sign-in code</label>
<input type="text" id="code" name="code" autocomplete="one-time-code" required autofocus>
<p class="muted">Ask the operator for a code (<code>login-code --user YOU</code>); it works once, for 10 minutes.</p>
<div class="buttons"><button class="primary" type="submit">Sign in</button></div>
</form>`)
}

/**
 * Signs the member out of the pages (POST /oauth/logout): back to the authorization request
 * (`authorize`, its query string: the sign-in form again, for another account), or to the page
 * of authorized apps.
 */
function signOutForm(csrf: string, authorize?: string): string {
  const fields: Record<string, string> = {}
  if (authorize !== undefined) fields.authorize = authorize
  fields.csrf_token = csrf
  return `<form class="signout" method="post" action="${pageLink('logout')}">
${hidden(fields)}
<button type="submit" name="signout" value="1">Sign out</button>
</form>`
}

/**
 * The consent page: the app's name and each requested scope in plain words; Approve or Deny.
 * Scopes beyond what the member approved for the app before (`granted`) are marked new, so an
 * app that widens its request is seen doing so. `action`: where the form posts,
 * appLink(PUBLIC_URL, '/oauth/authorize') (functions/lib/links.ts).
 */
export function consentPage(options: {
  appName: string; username: string; scopes: string[]; fields: Record<string, string>; csrf: string; granted?: string[] | null; authorize: string; action: string
}): string {
  const isNew = (scope: string) => options.granted != null && !options.granted.includes(scope)
  const items = options.scopes.map((scope) => `<li><strong>${escape(scope)}</strong>: ${escape(SCOPE_WORDS[scope] ?? scope)}${isNew(scope) ? ' <em class="new">new</em>' : ''}</li>`).join('\n')
  return layout(`Authorize ${options.appName}`, `<h1><span id="app-name">${escape(options.appName)}</span> wants to use your account</h1>
<p>Signed in as <strong id="username">${escape(options.username)}</strong>. If you approve, it may:</p>
<ul id="scopes">
${items}
</ul>
<form method="post" action="${escape(options.action)}">
${hidden({ ...options.fields, csrf_token: options.csrf })}
<div class="buttons">
<button type="submit" name="decision" value="deny">Deny</button>
<button class="primary" type="submit" name="decision" value="approve">Approve</button>
</div>
</form>
<p class="muted">You can revoke its access at any time on the page of <a href="${pageLink('apps')}">apps you authorized</a>.</p>
<p class="muted">Not ${escape(options.username)}?</p>
${signOutForm(options.csrf, options.authorize)}`)
}

export interface AuthorizedApp {
  client_id: string
  name: string
  scopes: string[]
  authorized_at: string
  last_used_at: string | null
}

/** The fixed notices the apps page shows after its own forms (never text from the request). */
const NOTICES: Record<string, string> = {
  revoked: 'Access revoked: the app’s tokens no longer work, and it must ask you again.',
}

/** A timestamp as the page shows it: UTC to the minute (no script runs to show local time). */
function when(iso: string): string {
  const date = new Date(iso)
  return Number.isNaN(date.getTime()) ? iso : `${date.toISOString().slice(0, 16).replace('T', ' ')} UTC`
}

/**
 * The apps a member authorized (GET /oauth/apps): each with its scopes in plain words, when it
 * was authorized and last used, and a Revoke form; Sign out at the end.
 */
export function appsPage(options: { username: string; apps: AuthorizedApp[]; csrf: string; notice?: string | null }): string {
  // Own keys only: `?notice=constructor` must not find Object's.
  const notice = options.notice && Object.hasOwn(NOTICES, options.notice) ? NOTICES[options.notice] : undefined
  const apps = options.apps.map((app) => `<section class="app">
<h2>${escape(app.name)}</h2>
<ul>
${Object.keys(SCOPE_WORDS).filter((scope) => app.scopes.includes(scope)).map((scope) => `<li><strong>${escape(scope)}</strong>: ${escape(SCOPE_WORDS[scope] ?? scope)}</li>`).join('\n')}
</ul>
<p class="muted">Authorized ${escape(when(app.authorized_at))}; last used ${app.last_used_at ? escape(when(app.last_used_at)) : 'never'}.</p>
<form method="post" action="${pageLink('apps')}">
${hidden({ client_id: app.client_id, csrf_token: options.csrf })}
<div class="buttons"><button type="submit" name="revoke" value="1">Revoke ${escape(app.name)}</button></div>
</form>
</section>`).join('\n')
  return layout('Apps you authorized', `<h1>Apps you authorized</h1>
<p>Signed in as <strong id="username">${escape(options.username)}</strong>.</p>
${notice ? `<p class="notice" role="status">${escape(notice)}</p>` : ''}
${apps || '<p class="muted" id="no-apps">You have not authorized any app.</p>'}
${signOutForm(options.csrf)}`)
}
