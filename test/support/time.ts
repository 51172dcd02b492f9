// Local days and moments in a time zone, computed with Intl so tests can place todos on
// exact local days (and either side of midnight) whatever day the suite runs on.

/** YYYY-MM-DD of `instant` in `zone`. */
export function localDate(zone: string, instant = new Date()): string {
  return new Intl.DateTimeFormat('en-CA', { timeZone: zone, year: 'numeric', month: '2-digit', day: '2-digit' }).format(instant)
}

/** YYYY-MM-DD `days` after (or before, if negative) `date`. */
export function addDays(date: string, days: number): string {
  const d = new Date(`${date}T00:00:00Z`)
  d.setUTCDate(d.getUTCDate() + days)
  return d.toISOString().slice(0, 10)
}

function offsetMinutes(zone: string, instant: Date): number {
  const parts = new Intl.DateTimeFormat('en-US', {
    timeZone: zone, hourCycle: 'h23', year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit',
  }).formatToParts(instant)
  const get = (type: string) => Number(parts.find((p) => p.type === type)!.value)
  const asUtc = Date.UTC(get('year'), get('month') - 1, get('day'), get('hour'), get('minute'), get('second'))
  return Math.round((asUtc - instant.getTime()) / 60000)
}

/** The instant at which it is `date` `time` (HH:MM) in `zone`, as ISO 8601 UTC. */
export function zonedInstant(zone: string, date: string, time: string): string {
  const naive = new Date(`${date}T${time}:00Z`)
  let guess = new Date(naive.getTime() - offsetMinutes(zone, naive) * 60000)
  guess = new Date(naive.getTime() - offsetMinutes(zone, guess) * 60000)
  return guess.toISOString()
}
