// What the Node runtime hands the app that functions/ may not import: brotli (node:zlib),
// the API reference's browser bundle, read once from the installed @scalar/api-reference, and
// the Node server's handling of request bodies the app did not read.
import { readFile } from 'node:fs/promises'
import type { IncomingMessage } from 'node:http'
import { constants, brotliCompress } from 'node:zlib'

/** Brotli at quality 5: most of the gain of 11 at a small share of its time, for answers made per request. */
export function nodeBrotli(data: Uint8Array): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    brotliCompress(data, {
      params: { [constants.BROTLI_PARAM_QUALITY]: 5, [constants.BROTLI_PARAM_SIZE_HINT]: data.length },
    }, (err, out) => (err ? reject(err) : resolve(new Uint8Array(out.buffer, out.byteOffset, out.length))))
  })
}

/** Where the bundle is, from the repository root (the edge function reads the same file). */
export const DOCS_SCRIPT_PATH = 'node_modules/@scalar/api-reference/dist/browser/standalone.js'

let script: Promise<Uint8Array | null> | null = null

/** dist/browser/standalone.js of the pinned @scalar/api-reference (null when not installed). */
export function nodeDocsScript(): Promise<Uint8Array | null> {
  script ??= (async () => {
    try {
      return new Uint8Array(await readFile(new URL(`../${DOCS_SCRIPT_PATH}`, import.meta.url)))
    } catch {
      return null
    }
  })()
  return script
}

/**
 * Answers with `Connection: close` when the app answered without reading a request body that has
 * not fully arrived (a 403 or 415 before the input is read, a 413): the connection then ends
 * after this answer, as RFC 9112 section 9.6 asks of a server that does not read the rest.
 * Without it, @hono/node-server 2.1.8 drains the unread body after an answer sent as keep-alive
 * and, when that takes over 500 ms, destroys the socket (`drainIncoming`, dist/index.mjs): a
 * client that had meanwhile sent its next request on the kept-alive connection got no answer
 * ("other side closed" in undici; about one fuzzed request in 300, test/fuzz.test.ts). What
 * counts is whether the body is all here, not its size: a large one is still being drained, and
 * a small one behind a slow uplink (the client's write returned at once, its bytes arrive later)
 * is still on its way. A body already received whole (`incoming.complete`: parsed, waiting in
 * memory) is drained at once and keeps the connection.
 */
export function closeAfterUnreadBody<E>(fetch: (request: Request, env: E) => Response | Promise<Response>) {
  return (request: Request, env: E): Response | Promise<Response> => {
    const incoming = (env as { incoming?: IncomingMessage } | undefined)?.incoming
    // Requests without a body pass straight through, and a synchronous answer stays synchronous
    // (@hono/node-server writes those without a promise: its fast path).
    if (!incoming || !mayLeaveBodyUnread(incoming)) return fetch(request, env)
    const answer = fetch(request, env)
    return answer instanceof Promise ? answer.then((response) => closingIfUnread(response, incoming)) : closingIfUnread(answer, incoming)
  }
}

/** Whether a request has a body the app might leave unread (any but an empty one; GET and HEAD Node drains itself). */
function mayLeaveBodyUnread(incoming: IncomingMessage): boolean {
  if (incoming.method === 'GET' || incoming.method === 'HEAD') return false
  const declared = incoming.headers['content-length']
  if (declared === undefined) return incoming.headers['transfer-encoding'] !== undefined
  return declared !== '0'
}

function closingIfUnread(response: Response, incoming: IncomingMessage): Response {
  // Read by the app, or received whole (parsed into memory, drained at once): the connection stays.
  if (incoming.readableEnded || incoming.complete) return response
  try {
    response.headers.set('connection', 'close')
    return response
  } catch {
    // Immutable headers (a Response.redirect): the same answer, re-wrapped.
    const headers = new Headers(response.headers)
    headers.set('connection', 'close')
    return new Response(response.body, { status: response.status, statusText: response.statusText, headers })
  }
}
