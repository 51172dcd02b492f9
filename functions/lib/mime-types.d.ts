// The types of `mime-types` (jshttp/mime-types: the extension table of mime-db), which ships
// none. functions/lib/media.ts uses only `lookup`. Delete this file if @types/mime-types is
// ever installed.
declare module 'mime-types' {
  /** The media type of a file name or extension (case-insensitive), or false when the table has none. */
  export function lookup(filenameOrExtension: string): string | false
  const mimeTypes: { lookup: typeof lookup }
  export default mimeTypes
}
