// CORS for bearer-token clients on any origin (browser apps call the API with an API key or an
// OAuth token in Authorization, never with cookies). Decided by path, before routing, so a
// preflight is answered even for a route another module adds later (the OAuth token endpoints).
// The cookie-based pages (/oauth/authorize, sign-in, the web pages) are not cross-origin.
import type { MiddlewareHandler } from 'hono'

/** Paths browsers on other origins may call: the API, the public OAuth endpoints, files and images. */
export function corsPath(path: string): boolean {
  return path.startsWith('/v1/') || path === '/v1'
    || path === '/oauth/token' || path === '/oauth/revoke' || path === '/oauth/introspect' || path === '/oauth/token/info'
    || path.startsWith('/files/') || path.startsWith('/assets/') || path.startsWith('/storage/v1/object/')
    || path === '/health'
}

export const CORS_METHODS = 'GET, POST, PUT, PATCH, DELETE, OPTIONS'
/** Content-MD5: the signed upload PUT carries it. Idempotency-Key: safe retries of writes (functions/lib/idempotency.ts). */
export const CORS_HEADERS = 'Authorization, Content-Type, Content-MD5, If-None-Match, X-Request-Id, Idempotency-Key'
export const CORS_EXPOSED = 'Retry-After, ETag, X-Request-Id, Location, Content-Disposition, Idempotent-Replayed, WWW-Authenticate'

/** `routed` maps a request to the path the app routes on (without the platform prefix). */
export function cors(routed: (req: Request) => string): MiddlewareHandler {
  return async (c, next) => {
    if (!corsPath(routed(c.req.raw))) return next()
    if (c.req.method === 'OPTIONS') {
      // Answered whatever the route: no credential is sent on a preflight.
      return new Response(null, {
        status: 204,
        headers: {
          'access-control-allow-origin': '*',
          'access-control-allow-methods': CORS_METHODS,
          'access-control-allow-headers': CORS_HEADERS,
          'access-control-max-age': '86400',
          vary: 'Origin',
        },
      })
    }
    await next()
    // `*`, never credentials: a page on another origin gets only what its bearer token gets.
    c.res.headers.set('access-control-allow-origin', '*')
    c.res.headers.set('access-control-expose-headers', CORS_EXPOSED)
  }
}
