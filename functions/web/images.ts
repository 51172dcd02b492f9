// The default avatars, logos and headers the API hands out: initials on the member's or
// project's header colour, as PNG, drawn with a 5×7 bitmap font and deflated with
// CompressionStream, so the same code runs on Node and Deno. A URL names everything the image
// shows (kind, size, colour, initials), so an image never changes: it is cached for a year.
import { Hono } from 'hono'

/** Square avatars and logos; 3:1 headers (SPEC: banner image 3:1). */
export const IMAGE_SIZES = {
  avatar: { small: [48, 48], medium: [96, 96], large: [192, 192] },
  logo: { small: [48, 48], medium: [96, 96], large: [192, 192] },
  header: { small: [300, 100], medium: [750, 250], large: [1500, 500] },
} as const

export type ImageKind = keyof typeof IMAGE_SIZES
export type ImageSize = keyof (typeof IMAGE_SIZES)['avatar']

const GLYPHS: Record<string, string> = {
  A: '01110 10001 10001 11111 10001 10001 10001', B: '11110 10001 10001 11110 10001 10001 11110',
  C: '01110 10001 10000 10000 10000 10001 01110', D: '11110 10001 10001 10001 10001 10001 11110',
  E: '11111 10000 10000 11110 10000 10000 11111', F: '11111 10000 10000 11110 10000 10000 10000',
  G: '01110 10001 10000 10111 10001 10001 01111', H: '10001 10001 10001 11111 10001 10001 10001',
  I: '01110 00100 00100 00100 00100 00100 01110', J: '00111 00010 00010 00010 00010 10010 01100',
  K: '10001 10010 10100 11000 10100 10010 10001', L: '10000 10000 10000 10000 10000 10000 11111',
  M: '10001 11011 10101 10101 10001 10001 10001', N: '10001 10001 11001 10101 10011 10001 10001',
  O: '01110 10001 10001 10001 10001 10001 01110', P: '11110 10001 10001 11110 10000 10000 10000',
  Q: '01110 10001 10001 10001 10101 10010 01101', R: '11110 10001 10001 11110 10100 10010 10001',
  S: '01111 10000 10000 01110 00001 00001 11110', T: '11111 00100 00100 00100 00100 00100 00100',
  U: '10001 10001 10001 10001 10001 10001 01110', V: '10001 10001 10001 10001 10001 01010 00100',
  W: '10001 10001 10001 10101 10101 10101 01010', X: '10001 10001 01010 00100 01010 10001 10001',
  Y: '10001 10001 01010 00100 00100 00100 00100', Z: '11111 00001 00010 00100 01000 10000 11111',
  0: '01110 10001 10011 10101 11001 10001 01110', 1: '00100 01100 00100 00100 00100 00100 01110',
  2: '01110 10001 00001 00010 00100 01000 11111', 3: '11111 00010 00100 00010 00001 10001 01110',
  4: '00010 00110 01010 10010 11111 00010 00010', 5: '11111 10000 11110 00001 00001 10001 01110',
  6: '00110 01000 10000 11110 10001 10001 01110', 7: '11111 00001 00010 00100 01000 01000 01000',
  8: '01110 10001 10001 01110 10001 10001 01110', 9: '01110 10001 10001 01111 00001 00010 01100',
}

const CRC_TABLE = (() => {
  const table = new Uint32Array(256)
  for (let n = 0; n < 256; n++) {
    let c = n
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1
    table[n] = c >>> 0
  }
  return table
})()

function crc32(bytes: Uint8Array): number {
  let c = 0xffffffff
  for (const b of bytes) c = CRC_TABLE[(c ^ b) & 0xff]! ^ (c >>> 8)
  return (c ^ 0xffffffff) >>> 0
}

function chunk(type: string, data: Uint8Array): Uint8Array {
  const out = new Uint8Array(12 + data.length)
  const view = new DataView(out.buffer)
  view.setUint32(0, data.length)
  for (let i = 0; i < 4; i++) out[4 + i] = type.charCodeAt(i)
  out.set(data, 8)
  view.setUint32(8 + data.length, crc32(out.subarray(4, 8 + data.length)))
  return out
}

async function deflate(bytes: Uint8Array): Promise<Uint8Array> {
  const stream = new Blob([bytes as BlobPart]).stream().pipeThrough(new CompressionStream('deflate'))
  return new Uint8Array(await new Response(stream).arrayBuffer())
}

/**
 * A two-colour PNG (indexed, 1 bit per pixel: index 0 `background`, 1 `foreground`, both RGB)
 * of `bits`, `height` rows of ceil(width / 8) bytes, most significant bit first. Every image we
 * draw has two colours; at one bit a 1500×500 header is 94 KB to deflate instead of 2.25 MB of
 * RGB, so an anonymous request for a new colour costs about a millisecond, not 70.
 */
export async function encodePng(width: number, height: number, background: [number, number, number], foreground: [number, number, number], bits: Uint8Array): Promise<Uint8Array> {
  const stride = Math.ceil(width / 8)
  const raw = new Uint8Array(height * (stride + 1))
  for (let y = 0; y < height; y++) raw.set(bits.subarray(y * stride, (y + 1) * stride), y * (stride + 1) + 1)
  const header = new Uint8Array(13)
  const view = new DataView(header.buffer)
  view.setUint32(0, width)
  view.setUint32(4, height)
  header.set([1, 3, 0, 0, 0], 8)
  const parts = [
    new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', header),
    chunk('PLTE', new Uint8Array([...background, ...foreground])), chunk('IDAT', await deflate(raw)), chunk('IEND', new Uint8Array()),
  ]
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0))
  let at = 0
  for (const part of parts) {
    out.set(part, at)
    at += part.length
  }
  return out
}

/** Initials (up to two of A–Z, 0–9) in white, centred on a colour (RRGGBB). */
export async function initialsPng(width: number, height: number, color: string, text: string): Promise<Uint8Array> {
  const [r, g, b] = [0, 2, 4].map((i) => parseInt(color.slice(i, i + 2), 16)) as [number, number, number]
  const stride = Math.ceil(width / 8)
  const bits = new Uint8Array(stride * height)
  const glyphs = [...text].map((ch) => GLYPHS[ch]).filter((g): g is string => g !== undefined).slice(0, 2)
  if (glyphs.length > 0) {
    const units = glyphs.length * 6 - 1
    const scale = Math.max(1, Math.floor(Math.min((width * 0.55) / units, (height * 0.45) / 7)))
    const left = Math.floor((width - units * scale) / 2)
    const top = Math.floor((height - 7 * scale) / 2)
    glyphs.forEach((glyph, index) => {
      glyph.split(' ').forEach((row, gy) => {
        for (let gx = 0; gx < 5; gx++) {
          if (row[gx] !== '1') continue
          for (let dy = 0; dy < scale; dy++) {
            for (let dx = 0; dx < scale; dx++) {
              const x = left + (index * 6 + gx) * scale + dx
              const y = top + gy * scale + dy
              bits[y * stride + (x >> 3)]! |= 0x80 >> (x & 7)
            }
          }
        }
      })
    })
  }
  return await encodePng(width, height, [r, g, b], [255, 255, 255], bits)
}

const GENERIC_COLOR = '94A3B8'
const made = new Map<string, Promise<Uint8Array>>()
const MADE_ENTRIES = 512

function image(kind: ImageKind, size: ImageSize, color: string, text: string): Promise<Uint8Array> {
  const key = `${kind}/${size}/${color}/${text}`
  let png = made.get(key)
  if (!png) {
    const [width, height] = IMAGE_SIZES[kind][size]
    png = initialsPng(width, height, color, kind === 'header' ? '' : text)
    if (made.size >= MADE_ENTRIES) made.delete(made.keys().next().value!)
    made.set(key, png)
  }
  return png
}

function pngResponse(bytes: Uint8Array, tag: string): Response {
  return new Response(bytes as BodyInit, {
    headers: {
      'content-type': 'image/png',
      'cache-control': 'public, max-age=31536000, immutable',
      etag: `"${tag}"`,
      'x-content-type-options': 'nosniff',
    },
  })
}

const notFound = () => new Response(JSON.stringify({ error: 'No such image.' }), { status: 404, headers: { 'content-type': 'application/json' } })
const isKind = (k: string): k is ImageKind => k in IMAGE_SIZES
const isSize = (s: string): s is ImageSize => s === 'small' || s === 'medium' || s === 'large'

/**
 * GET /assets/{kind}/{size}/{RRGGBB}/{INITIALS}.png (what the API hands out; `_` for no
 * initials), and GET /assets/default-{kind}-{size}.png (a plain image, for older URLs).
 */
export const images = new Hono()
images.get('/assets/:kind/:size/:color/:file', async (c) => {
  const { kind, size, color } = c.req.param()
  const text = /^([A-Z0-9]{1,2}|_)\.png$/.exec(c.req.param('file'))?.[1]
  if (!isKind(kind) || !isSize(size) || !/^[0-9A-F]{6}$/.test(color) || text === undefined) return notFound()
  return pngResponse(await image(kind, size, color, text === '_' ? '' : text), `${kind}-${size}-${color}-${text}`)
})
images.get('/assets/:file', async (c) => {
  const match = /^default-(avatar|logo|header)-(small|medium|large)\.png$/.exec(c.req.param('file'))
  if (!match) return notFound()
  const [, kind, size] = match as unknown as [string, ImageKind, ImageSize]
  return pngResponse(await image(kind, size, GENERIC_COLOR, ''), `default-${kind}-${size}`)
})
