// What the Node runtime hands the app that functions/ may not import: brotli (node:zlib) and
// the API reference's browser bundle, read once from the installed @scalar/api-reference.
import { readFile } from 'node:fs/promises'
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
