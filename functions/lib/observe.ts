// Request ids and the access log: one line per request (method, path without secrets, status,
// duration, request id). A client's X-Request-Id is kept when it is sane, so a mobile client's
// id follows the request into our log; otherwise we make one. Runtime-neutral.
import type { MiddlewareHandler } from 'hono'

/** An id a client may choose: 1–128 characters a log line and a header can carry as they are. */
const SANE_ID = /^[A-Za-z0-9._:@=+\/-]{1,128}$/

/** Query parameters whose values never reach the log (credentials, OAuth secrets and codes). */
const SECRET_PARAMS = new Set(['api_key', 'access_token', 'refresh_token', 'token', 'code', 'client_secret', 'code_verifier', 'password', 'signature'])

/**
 * Paths that are capabilities themselves: a stored file's key (128 random bits) is all it takes
 * to read the file at /files/{key} (or, before it is attached, to learn where it will be), and an
 * export's archive at /exports/{key}/export.json, so the log keeps the route and drops the key
 * (not the export ids of /v1/exports/{id}). Storage's object paths (/storage/v1/object/[upload/]sign/
 * {bucket}/{name}, …: the signed upload and download URLs `npm start` serves) keep the route and
 * bucket and drop the name, whose token goes with the secret parameters. Older links
 * (/storage/v1/uploads/…, /storage/v1/exports/…) too.
 */
const CAPABILITY_PATHS = /^(.*?\/(?:files|storage\/v1\/object(?:\/(?:upload\/sign|sign|authenticated|info|public))?\/[a-z0-9][a-z0-9_.-]*|storage\/v1\/uploads|storage\/v1\/exports|exports(?=\/[^/]+\/export\.json$)))\/.+$/

/** The path of a URL as the log shows it: a file's key replaced. */
function loggedPathname(pathname: string): string {
  const match = CAPABILITY_PATHS.exec(pathname)
  return match ? `${match[1]}/[redacted]` : pathname
}

/** The path and query of a URL as the log shows it: file keys and secret parameters' values replaced. */
export function loggedPath(url: URL): string {
  const pathname = loggedPathname(url.pathname)
  if (!url.search) return pathname
  const parts = url.search.slice(1).split('&').map((pair) => {
    const eq = pair.indexOf('=')
    const name = decodeURIComponentSafe(eq < 0 ? pair : pair.slice(0, eq)).toLowerCase()
    return SECRET_PARAMS.has(name) ? `${eq < 0 ? pair : pair.slice(0, eq)}=[redacted]` : pair
  })
  return `${pathname}?${parts.join('&')}`
}

function decodeURIComponentSafe(text: string): string {
  try {
    return decodeURIComponent(text.replace(/\+/g, ' '))
  } catch {
    return text
  }
}

export function requestIdOf(header: string | undefined): string {
  return header !== undefined && SANE_ID.test(header) ? header : crypto.randomUUID()
}

/** Replaces a response whose headers are immutable (Response.redirect, fetch) by a copy that may change. */
export function mutable(res: Response): Response {
  try {
    res.headers.set('x-mutable-check', '1')
    res.headers.delete('x-mutable-check')
    return res
  } catch {
    return new Response(res.body, { status: res.status, statusText: res.statusText, headers: new Headers(res.headers) })
  }
}

export type AccessLog = (line: string) => void

/** Sets X-Request-Id on the response and writes one access-log line when `log` is given. */
export function observe(log: AccessLog | undefined): MiddlewareHandler {
  return async (c, next) => {
    const started = performance.now()
    const id = requestIdOf(c.req.header('x-request-id'))
    c.set('requestId' as never, id as never)
    let status = 500
    try {
      await next()
      // Replaced only when its headers are immutable: assigning c.res over a response makes Hono
      // copy it through its body, which turns a lightweight response into a full one.
      const res = mutable(c.res)
      if (res !== c.res) {
        c.res = undefined as never
        c.res = res
      }
      res.headers.set('x-request-id', id)
      status = res.status
    } finally {
      if (log) {
        const ms = (performance.now() - started).toFixed(1)
        log(`${c.req.method} ${loggedPath(new URL(c.req.url))} ${status} ${ms}ms id=${id}`)
      }
    }
  }
}
