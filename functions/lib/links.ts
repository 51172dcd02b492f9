// Links in what the app serves to a browser (/docs and its script, the OAuth pages' forms, the
// web pages): built from PUBLIC_URL, the address the world reaches the app at, never from the
// path the runtime hands the app. On Supabase the gateway serves the function at
// https://<ref>.supabase.co/functions/v1/api/… and hands it /api/…: a link built from what the
// function sees (/api/docs/scalar.js) leads the browser out of the function (issue 30).

/**
 * The link to one of the app's own paths (`/docs/scalar.js`, `/oauth/login`, with a query if
 * any) as a page the app serves writes it: PUBLIC_URL's path, then `path`, from the root of the
 * host the page was loaded from. With PUBLIC_URL=https://<ref>.supabase.co/functions/v1/api,
 * `appLink(publicUrl, '/oauth/login')` is `/functions/v1/api/oauth/login`.
 *
 * Root-relative rather than absolute: the page is served at PUBLIC_URL, so both name the same
 * place there, and a page reached at another address (a test server, a LAN address) still links
 * to the server that sent it, inside its own Content-Security-Policy's 'self'.
 */
export function appLink(publicUrl: string, path: string): string {
  if (!path.startsWith('/')) throw new Error(`appLink: the path must start with '/', got ${JSON.stringify(path)}`)
  return new URL(publicUrl).pathname.replace(/\/+$/, '') + path
}
