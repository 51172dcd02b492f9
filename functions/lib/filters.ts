// Query parameters of todo lists that zod alone cannot express as SPEC wants them: since and
// until (many date forms, 400 when unparsable) and expand (comma-separated or repeated).
import { ApiError } from './errors.ts'

/** A since/until bound for app.filter_moment: an instant, or a local moment in the viewer's zone. */
export interface Moment {
  at: string
  local: boolean
  /** until only: the bound is the start of the next period, excluded. */
  exclusive?: boolean
}

const pad = (n: number, width = 2) => String(n).padStart(width, '0')

function localStamp(year: number, month = 1, day = 1): string {
  return `${pad(year, 4)}-${pad(month)}-${pad(day)}T00:00:00`
}

function validDate(year: number, month: number, day: number): boolean {
  const d = new Date(Date.UTC(year, month - 1, day))
  return d.getUTCFullYear() === year && d.getUTCMonth() === month - 1 && d.getUTCDate() === day
}

/**
 * Parses the forms SPEC lists. Digits: exactly 4 are a year; up to 11 are Unix seconds; 12 or
 * more are Unix milliseconds. A period (YYYY, YYYY-MM, YYYY-MM-DD) means its first moment for
 * `since` and everything up to its end for `until`. Without a zone, moments are local.
 */
export function parseMoment(name: 'since' | 'until', raw: string): Moment {
  const value = raw.trim()
  const fail = (): never => {
    throw new ApiError(400, `${name} must be a Unix timestamp in seconds or milliseconds, YYYY, YYYY-MM, YYYY-MM-DD or an ISO 8601 date-time; got ${JSON.stringify(raw)}.`)
  }
  const isUntil = name === 'until'

  let m = value.match(/^(\d{4})(?:-(\d{2}))?(?:-(\d{2}))?$/)
  if (m && (m[3] === undefined || m[2] !== undefined)) {
    const year = Number(m[1])
    const month = m[2] ? Number(m[2]) : null
    const day = m[3] ? Number(m[3]) : null
    if (month !== null && (month < 1 || month > 12)) fail()
    if (day !== null && !validDate(year, month!, day)) fail()
    if (!isUntil) return { at: localStamp(year, month ?? 1, day ?? 1), local: true }
    // The end of the period: the start of the next one, excluded.
    const next = day !== null ? new Date(Date.UTC(year, month! - 1, day + 1))
      : month !== null ? new Date(Date.UTC(year, month, 1))
      : new Date(Date.UTC(year + 1, 0, 1))
    return { at: localStamp(next.getUTCFullYear(), next.getUTCMonth() + 1, next.getUTCDate()), local: true, exclusive: true }
  }

  if (/^\d+$/.test(value)) {
    const n = Number(value)
    const ms = value.length >= 12 ? n : n * 1000
    const date = new Date(ms)
    if (!Number.isFinite(ms) || Number.isNaN(date.getTime()) || date.getUTCFullYear() > 9999) fail()
    return { at: date.toISOString(), local: false }
  }

  m = value.match(/^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(\.\d{1,9})?)?(Z|[+-]\d{2}(?::?\d{2})?)?$/i)
  if (m) {
    const [, y, mo, d, h, mi, s = '00', frac = '', zone] = m
    if (!validDate(Number(y), Number(mo), Number(d)) || Number(h) > 23 || Number(mi) > 59 || Number(s) > 59) fail()
    const local = `${y}-${mo}-${d}T${h}:${mi}:${s}${frac}`
    if (!zone) return { at: local, local: true }
    const instant = new Date(`${local}${zone.toUpperCase() === 'Z' ? 'Z' : zone.length === 3 ? `${zone}:00` : zone.includes(':') ? zone : `${zone.slice(0, 3)}:${zone.slice(3)}`}`)
    if (Number.isNaN(instant.getTime())) fail()
    return { at: instant.toISOString(), local: false }
  }
  return fail()
}

export interface TodoFilterQuery {
  since?: string
  until?: string
  query?: string
}

/** The filters object the todo list functions take. */
export function todoFilters(query: TodoFilterQuery): Record<string, unknown> {
  const filters: Record<string, unknown> = {}
  if (query.since !== undefined && query.since !== '') filters.since = parseMoment('since', query.since)
  if (query.until !== undefined && query.until !== '') filters.until = parseMoment('until', query.until)
  if (query.query !== undefined && query.query.trim() !== '') filters.query = fullTextQuery(query.query)
  return filters
}

/** The most characters a `query` may have (400 above), checked before it reaches the database. */
export const MAX_QUERY_CHARACTERS = 256

/**
 * A `query` within its length, or 400: the cheap bound that keeps huge inputs away from the
 * database. The terms are counted where they are made: app.todo_search_query counts the lexemes
 * PostgreSQL's parser makes of each word (at most 16 in all, 8 in one word's phrase), since one
 * "word" such as `e_e_e…` becomes a phrase of 128 terms (issue 25; issue 11 capped words).
 */
export function fullTextQuery(raw: string): string {
  if (raw.length > MAX_QUERY_CHARACTERS) {
    throw new ApiError(400, `query may have at most ${MAX_QUERY_CHARACTERS} characters; got ${raw.length}.`)
  }
  return raw
}

/** Whether `expand=reactions` (or `expand[]=reactions`, repeated or comma-separated) was asked. */
export function expandsReactions(url: string): boolean {
  const params = new URL(url).searchParams
  const values = [...params.getAll('expand'), ...params.getAll('expand[]')]
    .flatMap((v) => v.split(','))
    .map((v) => v.trim())
    .filter(Boolean)
  const unknown = values.filter((v) => v !== 'reactions')
  if (unknown.length > 0) {
    throw new ApiError(400, `expand: the only expandable field is reactions; got ${JSON.stringify(unknown[0])}.`)
  }
  return values.length > 0
}
