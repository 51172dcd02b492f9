// What a stored file really is, from its first bytes, and how a file of a type may be served.
// Runtime-neutral (the attaching request and the storage worker both use it: functions/lib/inspect.ts).
import { fileTypeFromBuffer, supportedMimeTypes } from 'file-type/core'
import mimeTypes from 'mime-types'

/** Bytes of a file's start that are enough to recognise every type we accept. */
export const SNIFF_BYTES = 4096

/** Types shown inline from the API's origin: raster images and video, which no browser runs as a document. */
export const INLINE_TYPES: ReadonlySet<string> = new Set([
  'image/png', 'image/jpeg', 'image/gif', 'image/webp', 'image/heic', 'image/heif', 'image/avif',
  'video/mp4', 'video/quicktime', 'video/webm',
])

/** Whether a file of this type may be served inline; everything else is sent as an attachment. */
export function servedInline(mime: string): boolean {
  return INLINE_TYPES.has(mime.split(';')[0]!.trim().toLowerCase())
}

/**
 * The headers every file answer carries: the stored type, never sniffed; inline only for raster
 * images and video; and a sandboxing CSP, so even a document opened from the API's origin has no
 * script, no plugin and no access to the origin.
 */
export function fileHeaders(mime: string): Record<string, string> {
  return {
    'content-type': mime,
    'content-disposition': servedInline(mime) ? 'inline' : 'attachment',
    'x-content-type-options': 'nosniff',
    'content-security-policy': "sandbox; default-src 'none'; img-src 'self'; media-src 'self'; style-src 'unsafe-inline'",
  }
}

const ascii = (head: Uint8Array, at: number, length: number) => String.fromCharCode(...head.subarray(at, at + length))
const startsWith = (head: Uint8Array, bytes: number[], at = 0) => bytes.every((b, i) => head[at + i] === b)

const HEIF_BRANDS = new Set(['heic', 'heix', 'hevc', 'hevx', 'heim', 'heis', 'hevm', 'hevs', 'mif1', 'msf1', 'mif2'])
const AVIF_BRANDS = new Set(['avif', 'avis'])

/** The ISO base media (MP4, QuickTime, HEIF, AVIF) major brand, or null when the file has no ftyp box first. */
function ftypBrand(head: Uint8Array): string | null {
  return head.length >= 12 && ascii(head, 4, 4) === 'ftyp' ? ascii(head, 8, 4) : null
}

/** Whether the file's first bytes are what a file of the declared type starts with. */
export function looksLike(declared: string, head: Uint8Array): boolean {
  const brand = ftypBrand(head)
  switch (declared) {
    case 'image/png': return startsWith(head, [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
    case 'image/jpeg': return startsWith(head, [0xff, 0xd8, 0xff])
    case 'image/gif': return ascii(head, 0, 6) === 'GIF87a' || ascii(head, 0, 6) === 'GIF89a'
    case 'image/webp': return ascii(head, 0, 4) === 'RIFF' && ascii(head, 8, 4) === 'WEBP'
    case 'image/heic':
    case 'image/heif': return brand !== null && (HEIF_BRANDS.has(brand) || AVIF_BRANDS.has(brand))
    case 'image/avif': return brand !== null && (AVIF_BRANDS.has(brand) || brand === 'mif1' || brand === 'msf1')
    case 'video/mp4': return brand !== null && !HEIF_BRANDS.has(brand) && !AVIF_BRANDS.has(brand)
    case 'video/quicktime': return brand !== null || ['moov', 'mdat', 'wide', 'free', 'skip', 'pnot'].includes(ascii(head, 4, 4))
    case 'video/webm': return startsWith(head, [0x1a, 0x45, 0xdf, 0xa3])
    case 'application/pdf': return ascii(head, 0, Math.min(head.length, 1024)).includes('%PDF-')
    case 'application/zip':
    case 'application/vnd.openxmlformats-officedocument.wordprocessingml.document':
    case 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet':
    case 'application/vnd.openxmlformats-officedocument.presentationml.presentation':
      return startsWith(head, [0x50, 0x4b, 0x03, 0x04]) || startsWith(head, [0x50, 0x4b, 0x05, 0x06])
    case 'application/msword': return startsWith(head, [0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1])
    case 'text/plain':
    case 'text/markdown':
    case 'text/csv': return !head.includes(0)
    default: return false
  }
}

/** The type file-type finds in a file's first bytes (binary formats only: never HTML, SVG or text), or null. */
export async function detectType(head: Uint8Array): Promise<string | null> {
  try {
    return (await fileTypeFromBuffer(head))?.mime ?? null
  } catch {
    return null
  }
}

/**
 * The types a file name may give (issue 28), and only these: plain text and textual data, which
 * no browser or client app runs, renders as a document or installs. A list of what is allowed,
 * not of what is refused: the extension table (mime-db) maps names to hundreds of types, and
 * many that are neither HTML, XML nor script are still run or opened by an application
 * registered for them (Word opens HTML named .doc; .xbap, .spl, .jad, .ymp, .class, .tcl, .deb,
 * .p7b…). A type missing here only means the file stays application/octet-stream, a download.
 * None is a type file-type recognises from bytes (text/calendar, text/vcard, text/vtt are), so a
 * name never vouches for what bytes would have shown.
 */
export const NAME_TYPES: ReadonlySet<string> = new Set([
  // Documents and tables.
  'text/plain', 'text/markdown', 'text/x-markdown', 'text/csv', 'text/tab-separated-values', 'text/x-org',
  'text/x-nfo', 'text/x-setext',
  // Data and configuration.
  'text/yaml', 'application/json', 'application/geo+json', 'application/ld+json', 'application/json5',
  'application/hjson', 'application/toml', 'application/x-sql', 'text/turtle', 'text/n3', 'text/vnd.graphviz',
  // Source code that no browser runs, and TeX.
  'text/x-c', 'text/x-java-source', 'text/x-lua', 'text/x-asm', 'text/x-fortran', 'text/x-pascal',
  'text/x-sass', 'text/x-scss', 'text/less', 'text/stylus',
  'application/x-tex', 'application/x-latex', 'application/x-texinfo',
  // Subtitles.
  'application/x-subrip',
])

/** Whether a name may give this type: one of NAME_TYPES (inert text), never anything a browser or an app runs. */
export function inertByName(mime: string): boolean {
  const type = mime.split(';')[0]!.trim().toLowerCase()
  return NAME_TYPES.has(type) && !supportedMimeTypes.has(type)
}

/**
 * The type a file name's extension gives (the `mime-types` table, from mime-db), when it is one
 * a name may give (inertByName) and the bytes are text (no NUL in the first SNIFF_BYTES, as
 * looksLike checks a declared text/plain); else null. Only for files whose bytes match no
 * signature: the bytes always win.
 */
export function typeFromName(filename: string | null | undefined, head: Uint8Array): string | null {
  // The last dot's extension of the last path segment; no dot, no extension (the table would
  // read a bare "txt" as one).
  const extension = /\.([A-Za-z0-9_+-]{1,32})$/.exec((filename ?? '').split(/[\\/]/).pop() ?? '')?.[1]
  if (!extension) return null
  const found = mimeTypes.lookup(extension)
  if (!found || !inertByName(found)) return null
  if (head.subarray(0, SNIFF_BYTES).includes(0)) return null
  return found
}

/**
 * The type of a file declared application/octet-stream: what its bytes say (file-type), else
 * what its name says when that may be said by a name (typeFromName), else null.
 */
export async function detectedType(head: Uint8Array, filename: string | null | undefined): Promise<string | null> {
  return (await detectType(head)) ?? typeFromName(filename, head)
}

/**
 * The type to record for a stored file. Declared as one of the named types: that type when the
 * file starts as one, else application/octet-stream (attaching then refuses it, and it is only
 * ever served as a download). Declared application/octet-stream (any type we do not name): the
 * type found in the bytes, else its name's (never an active type: typeFromName), else
 * application/octet-stream.
 */
export async function storedType(declared: string, head: Uint8Array, filename?: string | null): Promise<string> {
  if (declared === 'application/octet-stream') return (await detectedType(head, filename)) ?? 'application/octet-stream'
  return looksLike(declared, head) ? declared : 'application/octet-stream'
}
