// The request generators of test/fuzz.test.ts (issue 19, item 1): hostile strings, JSON, forms,
// query strings and path ids for the routes of the OpenAPI document and the pages beyond /v1.
import fc from 'fast-check'

/** Strings that broke parsers, encoders and queries elsewhere, and our own edge cases. */
export const HOSTILE_STRINGS = [
  '', ' ', '\u0000', 'a\u0000b', '\uD800', '\uDFFF', 'x\uD83Dy', '\u202Eevil\u202C', '\u200F\u200E', '\uFEFF', '\u2028\u2029',
  'e\u0301\u0301\u0301', '🙂', '👩‍👩‍👧‍👦', 'ｆｕｌｌｗｉｄｔｈ', 'İ', 'ß',
  "' or 1=1 --", "'; drop table app.users; --", '" or ""="', '1; select pg_sleep(10)', "$$; select 1; $$", '\\', "\\'", '%', '_', '*',
  '../../../../etc/passwd', '..\\..\\windows\\win.ini', '%2e%2e%2f%2e%2e%2fetc%2fpasswd', '/etc/passwd\u0000.png', '....//....//', '.', '..',
  '<script>alert(1)</script>', '{{7*7}}', '${7*7}', 'javascript:alert(1)', 'http://169.254.169.254/latest/meta-data/', 'file:///etc/passwd',
  '-1', '0', '-0', '1e309', 'NaN', 'Infinity', '9223372036854775808', '99999999999999999999999999999', '1.5', '0x10', '00001',
  'null', 'true', 'false', '[]', '{}', 'undefined', '__proto__', 'constructor',
  'me', 'user_', 'todo_', 'proj_', 'comm_', 'conv_', 'msg_', 'att_', 'exp_', 'whsub_', 'react_',
  'user_00000000000000000000000000000000', 'todo_ffffffffffffffffffffffffffffffff', 'todo_zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz',
  '00000000-0000-0000-0000-000000000000', '2026-02-30', '2026-13-01T25:61:61Z', '0000-01-01', '294277-01-01', 'Mars/Olympus',
]

/** Some long values: under and over the documented limits, and over 1 MiB as a body. */
export const HUGE_STRINGS = [
  'a'.repeat(281), 'a'.repeat(2001), 'ä'.repeat(70_000), '\u0000'.repeat(5000), '#tag '.repeat(2000), '@alice '.repeat(2000),
]

/** Real ids of the world, filled in by the test, so generated requests reach real rows. */
export const realIds: string[] = []

function stringsOf(huge: string[]): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...HOSTILE_STRINGS) },
    { weight: 3, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
    { weight: 2, arbitrary: fc.string({ maxLength: 20 }) },
    { weight: 2, arbitrary: fc.nat(999).map((i) => realIds[i % Math.max(realIds.length, 1)] ?? 'me') },
    { weight: 1, arbitrary: fc.constantFrom(...huge) },
    { weight: 1, arbitrary: fc.tuple(fc.constantFrom(...HOSTILE_STRINGS), fc.constantFrom(...HOSTILE_STRINGS)).map(([a, b]) => a + b) },
  )
}

/** Strings for bodies: hostile, random (lone surrogates included), real ids, huge. */
export const hostileString: fc.Arbitrary<string> = stringsOf(HUGE_STRINGS)

/**
 * Strings for URLs: the same, but long rather than huge. Node's HTTP server refuses a request
 * line over 16 KiB itself (431, no body, before the app sees it), so huge values there would
 * only test Node's parser.
 */
export const urlString: fc.Arbitrary<string> = stringsOf(['a'.repeat(281), 'ä'.repeat(300), '%00'.repeat(300), '#tag '.repeat(200)])

/** Any JSON value, including the hostile strings, huge and odd numbers, and deep nesting. */
export const hostileJson: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    hostileString,
    fc.constantFrom(0, -1, 1, 1.5, -0, 1e308, -1e308, 2 ** 53 + 1, 2 ** 31, 2 ** 63, Number.MIN_VALUE, true, false, null),
    fc.integer(),
    fc.double({ noNaN: true, noDefaultInfinity: true }),
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(hostileString, tie('value'), { maxKeys: 4 }),
  ),
})).value

export interface Operation {
  method: string
  /** OpenAPI path with {placeholders}. */
  path: string
  pathParams: string[]
  queryParams: string[]
  /** Top-level properties of the JSON or form body, if it has one. */
  bodyFields: string[]
  contentTypes: string[]
}

interface OpenApiDocument {
  paths: Record<string, Record<string, {
    parameters?: { name: string; in: string }[]
    requestBody?: { content: Record<string, { schema?: { properties?: Record<string, unknown>; $ref?: string } }> }
  }>>
  components?: { schemas?: Record<string, { properties?: Record<string, unknown> }> }
}

/** The operations of the OpenAPI document, with what they take. */
export function operationsOf(document: OpenApiDocument): Operation[] {
  const resolve = (schema: { properties?: Record<string, unknown>; $ref?: string } | undefined) =>
    schema?.$ref ? document.components?.schemas?.[schema.$ref.split('/').pop()!] : schema
  return Object.entries(document.paths).flatMap(([path, operations]) =>
    Object.entries(operations).map(([method, op]) => {
      const content = op.requestBody?.content ?? {}
      return {
        method: method.toUpperCase(),
        path,
        pathParams: [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]!),
        queryParams: (op.parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name),
        bodyFields: [...new Set(Object.values(content).flatMap((c) => Object.keys(resolve(c.schema)?.properties ?? {})))],
        contentTypes: Object.keys(content),
      }
    }))
}

/** Percent-encodes the UTF-8 of a string (lone surrogates become U+FFFD, as a browser sends them). */
export function encodePart(value: string): string {
  return [...Buffer.from(value, 'utf8')].map((b) =>
    /[A-Za-z0-9\-_.~]/.test(String.fromCharCode(b)) ? String.fromCharCode(b) : '%' + b.toString(16).toUpperCase().padStart(2, '0')).join('')
}

/** A path segment: encoded properly, or raw garbage a client might send (bad escapes, dot segments). */
export const pathSegment: fc.Arbitrary<string> = fc.oneof(
  { weight: 5, arbitrary: urlString.map(encodePart) },
  { weight: 1, arbitrary: fc.constantFrom('%', '%zz', '%ff%fe', '%00', '%C0%AF', '..', '.', '%2e%2e', '%2F', '..%2F..%2Fetc', ';', '@', '%uD800') },
)

/** A query string over the operation's documented parameters and some others, with repeats. */
export function queryString(names: string[]): fc.Arbitrary<string> {
  const name = fc.oneof(
    { weight: 4, arbitrary: names.length > 0 ? fc.constantFrom(...names) : fc.constant('q') },
    { weight: 1, arbitrary: fc.constantFrom('expand[]', 'page[after]', 'limit', 'per_page', 'cursor', 'since', '__proto__', 'q[]') },
    { weight: 1, arbitrary: urlString },
  )
  const value = fc.oneof(urlString, fc.constantFrom('1', '25', '100', '101', '0', '-5', 'reactions', 'true'))
  return fc.array(fc.tuple(name, value), { maxLength: 5 }).map((pairs) =>
    pairs.length === 0 ? '' : '?' + pairs.map(([k, v]) => `${encodePart(k)}=${encodePart(v)}`).join('&'))
}

/** A body for the operation: JSON shaped like its schema with hostile values, or not JSON at all. */
export type Body = { contentType?: string; data: string | Uint8Array }
export function bodyFor(fields: string[]): fc.Arbitrary<Body | undefined> {
  const shaped = fields.length === 0
    ? fc.dictionary(hostileString, hostileJson, { maxKeys: 3 })
    : fc.dictionary(fc.oneof({ weight: 5, arbitrary: fc.constantFrom(...fields) }, { weight: 1, arbitrary: hostileString }), hostileJson, { maxKeys: fields.length + 1 })
  return fc.oneof(
    { weight: 6, arbitrary: shaped.map((o) => ({ contentType: 'application/json', data: JSON.stringify(o) })) },
    { weight: 1, arbitrary: hostileJson.map((v) => ({ contentType: 'application/json', data: JSON.stringify(v) ?? 'null' })) },
    { weight: 2, arbitrary: fc.dictionary(fc.oneof(fc.constantFrom(...(fields.length ? fields : ['body'])), hostileString), hostileString, { maxKeys: 4 })
      .map((o) => ({ contentType: 'application/x-www-form-urlencoded', data: Object.entries(o).map(([k, v]) => `${encodePart(k)}=${encodePart(v)}`).join('&') })) },
    { weight: 1, arbitrary: fc.constantFrom<Body>(
      { contentType: 'application/json', data: '{' },
      { contentType: 'application/json', data: '{"body": "unterminated' },
      { contentType: 'application/json', data: '' },
      { contentType: 'application/json', data: '[' .repeat(5000) + ']'.repeat(5000) },
      { contentType: 'application/json', data: '{"__proto__": {"admin": true}, "constructor": {"prototype": {"x": 1}}}' },
      { contentType: 'application/json', data: new Uint8Array([0x7b, 0x22, 0x62, 0x6f, 0x64, 0x79, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0xc0, 0xaf, 0x22, 0x7d]) },
      { contentType: 'application/json', data: JSON.stringify({ body: 'x'.repeat(1024 * 1024 + 10) }) },
      { contentType: 'application/json; charset=utf-16', data: '{"body":"x"}' },
      { contentType: 'text/plain', data: 'body=hello' },
      { contentType: 'multipart/form-data; boundary=x', data: '--x\r\nContent-Disposition: form-data; name="body"\r\n\r\nhi\r\n--x--\r\n' },
      { contentType: 'multipart/form-data', data: 'garbage' },
      { contentType: 'application/x-www-form-urlencoded', data: '%zz=%ff&body=%00&attachments[]=../../etc/passwd' },
      { contentType: 'application/xml', data: '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><x>&e;</x>' },
      { data: '{"body":"no content type"}' },
    ) },
    { weight: 1, arbitrary: fc.constant(undefined) },
  )
}

/** What an answer must never contain: a stack frame or an error dump. */
export const STACK_TRACE = /(^|\n)\s*at \S+ \(?[^\s)]*:\d+:\d+\)?|\b(Type|Reference|Syntax|Range|Postgres|Zod)?Error: |\bnode:internal\b|\/node_modules\//

/** Headers the middleware reads (request id, conditional GET, compression, CORS, language, idempotency keys), with junk values. */
const headerValue = fc.oneof(
  fc.stringMatching(/^[\x20-\x7e]{0,200}$/),
  fc.constantFrom('', ' ', '*', 'null', 'W/"x"', '"', 'br;q=2, gzip;q=-1, *;q=NaN', 'identity;q=0', 'x'.repeat(2000), "' or 1=1 --", '../../etc/passwd'),
)
export const extraHeaders: fc.Arbitrary<Record<string, string>> = fc.dictionary(
  fc.constantFrom('x-request-id', 'if-none-match', 'if-modified-since', 'accept-encoding', 'accept', 'origin', 'accept-language',
    'access-control-request-method', 'access-control-request-headers', 'cookie', 'x-forwarded-for', 'range', 'prefer', 'idempotency-key'),
  headerValue,
  { maxKeys: 3 },
)
