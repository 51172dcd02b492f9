// Conditional GETs and compression, for the responses the app builds in full (JSON, HTML, the
// reference's script, generated images). Files (/files/…, streamed, with Content-Disposition)
// pass untouched. Runtime-neutral: SHA-1 from node:crypto (Node, and Deno's Node compatibility),
// gzip from CompressionStream (Node 18+ and Deno); brotli only where the platform hands in an
// encoder (Node's zlib, from local/).
import { createHash } from 'node:crypto'
import type { MiddlewareHandler } from 'hono'
import { mutable } from './observe.ts'

/** Responses smaller than this are sent as they are: compressing them saves less than it costs. */
export const COMPRESS_MIN_BYTES = 1024

const COMPRESSIBLE = /^(application\/(json|javascript|problem\+json)|text\/(html|javascript|css|plain))\b/i

export type BrotliEncoder = (data: Uint8Array) => Uint8Array | Promise<Uint8Array>

/**
 * Whether this middleware may rewrite the response: one the app rendered, with a body (by its
 * status: reading `res.body` would turn @hono/node-server's lightweight response into a full
 * one on every request, which cost a quarter of GET /v1/todos/{id}'s throughput), not a download
 * and not already encoded.
 */
function ours(res: Response): boolean {
  const bodyless = res.status === 204 || res.status === 304 || (res.status >= 300 && res.status < 400)
  return !bodyless && !res.headers.has('content-disposition') && !res.headers.has('content-encoding')
}

/**
 * The weak tag of a body: SHA-1 of its bytes (of a string, its UTF-8 bytes), base64url. `respond()`
 * tags the JSON text it has in hand, so conditionalGet() need not read the body back. Hashed at
 * once, not with Web Crypto's digest(): that one copies the bytes (a string encoded first) and
 * answers through a promise job, a tenth of the CPU of a list of 25 todos on Node (issue 27).
 */
export function weakTag(body: Uint8Array | string): string {
  return `W/"${createHash('sha1').update(body).digest('base64url')}"`
}

/** Whether an If-None-Match header names this tag (weak comparison, RFC 9110 13.1.2). */
export function noneMatch(header: string | undefined, etag: string): boolean {
  if (!header) return false
  if (header.trim() === '*') return true
  const bare = (tag: string) => tag.trim().replace(/^W\//, '')
  return header.split(',').some((tag) => bare(tag) === bare(etag))
}

/**
 * ETag on every successful GET the app renders (a weak tag of the body; a route may set its own,
 * from a version), and 304 with no body when If-None-Match names it. API answers are
 * `Cache-Control: private, no-cache`: a client may keep them, but asks again each time (a poll
 * then costs a 304 of a few bytes instead of the page).
 */
export function conditionalGet(): MiddlewareHandler {
  return async (c, next) => {
    await next()
    if (c.req.method !== 'GET' || c.res.status !== 200) return
    const given = c.res.headers.get('etag')
    if (!ours(c.res)) {
      // A file with a tag of its own (its MD5): revalidated without sending it again.
      if (given && noneMatch(c.req.header('if-none-match'), given)) {
        const cacheControl = c.res.headers.get('cache-control') ?? 'private, max-age=3600'
        await c.res.body?.cancel()
        c.res = undefined as never
        c.res = new Response(null, { status: 304, headers: { etag: given, 'cache-control': cacheControl } })
      }
      return
    }
    let res = mutable(c.res)
    let etag = res.headers.get('etag')
    if (!etag) {
      const bytes = new Uint8Array(await res.arrayBuffer())
      etag = weakTag(bytes)
      res = new Response(bytes, { status: res.status, headers: res.headers })
      res.headers.set('etag', etag)
    }
    if (!res.headers.has('cache-control')) res.headers.set('cache-control', 'private, no-cache')
    if (noneMatch(c.req.header('if-none-match'), etag)) {
      const headers = new Headers()
      for (const name of ['etag', 'cache-control', 'vary', 'content-location', 'expires']) {
        const value = res.headers.get(name)
        if (value !== null) headers.set(name, value)
      }
      await res.body?.cancel()
      c.res = undefined as never
      c.res = new Response(null, { status: 304, headers })
      return
    }
    c.res = undefined as never
    c.res = res
  }
}

/** The encoding to answer with: br when the client takes it and we have it, else gzip, else none. */
export function chooseEncoding(acceptEncoding: string | undefined, brotli: boolean): 'br' | 'gzip' | null {
  if (!acceptEncoding) return null
  const offered = new Map<string, number>()
  for (const part of acceptEncoding.split(',')) {
    const [name, ...params] = part.trim().toLowerCase().split(';')
    const q = params.map((p) => p.trim()).find((p) => p.startsWith('q='))
    offered.set(name!, q ? Number(q.slice(2)) : 1)
  }
  const quality = (name: string) => offered.get(name) ?? (offered.has('*') ? offered.get('*')! : 0)
  if (brotli && quality('br') > 0) return 'br'
  if (quality('gzip') > 0) return 'gzip'
  return null
}

async function gzip(bytes: Uint8Array): Promise<Uint8Array> {
  const stream = new Blob([bytes as BlobPart]).stream().pipeThrough(new CompressionStream('gzip'))
  return new Uint8Array(await new Response(stream).arrayBuffer())
}

/**
 * Compressed copies of large public bodies with a tag (the reference's script, 4 MB: about
 * 100 ms to compress), so they are compressed once, however many ask at the same time. Only
 * `Cache-Control: public` answers: a member's private pages are never asked for twice alike,
 * and would only push the script out (then every anonymous request compressed it again).
 */
const cache = new Map<string, Promise<Uint8Array>>()
const CACHE_FROM_BYTES = 64 * 1024
const CACHE_ENTRIES = 16

/**
 * gzip (or br) for bodies of at least 1 KiB when the client asks. Never twice: a response that
 * already has a Content-Encoding (or says no-transform) is left alone, and the layers in front
 * of us (Deno.serve's own compression, Supabase's gateway) leave ours alone for the same reason.
 */
export function compression(options: { brotli?: BrotliEncoder } = {}): MiddlewareHandler {
  return async (c, next) => {
    await next()
    const res = c.res
    if (c.req.method !== 'GET' && c.req.method !== 'POST' && c.req.method !== 'PATCH' && c.req.method !== 'PUT') return
    if (!ours(res) || !COMPRESSIBLE.test(res.headers.get('content-type') ?? '')) return
    if (/no-transform/i.test(res.headers.get('cache-control') ?? '')) return
    // An answer to a request with cookies may carry a cookie-bound secret (a CSRF token) beside
    // what the request reflects: compressed, its length is a BREACH oracle. Bearer-token answers
    // are safe: another site cannot make a client send its token with the attacker's input.
    if (c.req.header('cookie') !== undefined || res.headers.has('set-cookie')) return
    const length = Number(res.headers.get('content-length') ?? NaN)
    if (length < COMPRESS_MIN_BYTES) return
    const out = mutable(res)
    out.headers.append('vary', 'Accept-Encoding')
    const encoding = chooseEncoding(c.req.header('accept-encoding'), options.brotli !== undefined)
    if (!encoding) {
      c.res = undefined as never
      c.res = out
      return
    }
    const bytes = new Uint8Array(await out.arrayBuffer())
    if (bytes.length < COMPRESS_MIN_BYTES) {
      c.res = undefined as never
      c.res = new Response(bytes, { status: out.status, headers: out.headers })
      return
    }
    const etag = out.headers.get('etag')
    const shared = /(^|[\s,])public\b/i.test(out.headers.get('cache-control') ?? '')
    const key = etag && shared && bytes.length >= CACHE_FROM_BYTES ? `${encoding} ${bytes.length} ${etag}` : null
    const encode = async () => (encoding === 'br' ? await options.brotli!(bytes) : await gzip(bytes))
    let packed: Uint8Array
    if (key) {
      let pending = cache.get(key)
      if (!pending) {
        pending = encode()
        if (cache.size >= CACHE_ENTRIES) cache.delete(cache.keys().next().value!)
        cache.set(key, pending)
        pending.catch(() => cache.delete(key))
      }
      packed = await pending
    } else {
      packed = await encode()
    }
    const headers = new Headers(out.headers)
    headers.set('content-encoding', encoding)
    headers.set('content-length', String(packed.length))
    c.res = undefined as never
    c.res = new Response(packed as BodyInit, { status: out.status, headers })
  }
}
