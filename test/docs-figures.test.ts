// The README's numbers that no run measures but the code decides (issue 31: "several numbers are
// prose only: shutdown limits, within a minute, retry schedules"): each is read here from the code
// that decides it and must be what the README says, so the prose cannot drift from the behaviour.
// Measured figures (bench, soak, test durations) say the run they come from instead.
import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import {
  PROVIDER_TOKEN_REFRESH_MS, PUSH_FAILED_KEPT_DAYS, PUSH_GIVE_UP_AFTER_MS, PUSH_MAX_ATTEMPTS, PUSH_RETRY_SCHEDULE_MS,
} from '../functions/lib/push.ts'
import { DELIVERY_TIMEOUT_MS, GIVE_UP_AFTER_MS, MAX_RETRY_AFTER_MS, RETRY_SCHEDULE_MS } from '../functions/lib/webhooks.ts'

const root = new URL('../', import.meta.url)
/** The README as one line of text (its sentences wrap anywhere). */
const readme = readFileSync(new URL('README.md', root), 'utf8').replace(/\s*\n\s*/g, ' ')
const source = (path: string) => readFileSync(new URL(path, root), 'utf8')

/** 5_000 → "5 s", 120_000 → "2 min", 3_600_000 → "1 h", 7_200_000 → "2 h": the README's way. */
function spoken(ms: number): string {
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000} h`
  if (ms % 60_000 === 0) return `${ms / 60_000} min`
  return `${ms / 1000} s`
}
const listed = (items: string[]) => `${items.slice(0, -1).join(', ')} and ${items.at(-1)}`
/** A number assigned to `name` in a source file (`const NAME = 10_000`), as a number. */
function constantIn(path: string, name: string): number {
  const match = new RegExp(`const ${name} = ([\\d_]+)`).exec(source(path))
  expect(match, `${name} in ${path}`).not.toBeNull()
  return Number(match![1]!.replace(/_/g, ''))
}

describe('README figures that the code decides', () => {
  it('push retries: how many attempts, after which waits, and the give-up', () => {
    // Attempt 1 at once, then one wait per retry; the schedule's last wait repeats.
    const waits = Array.from({ length: PUSH_MAX_ATTEMPTS - 1 }, (_, i) => PUSH_RETRY_SCHEDULE_MS[Math.min(i, PUSH_RETRY_SCHEDULE_MS.length - 1)]!)
    expect(readme).toContain(`tried **${PUSH_MAX_ATTEMPTS} times at most**: at once, then after about ${listed(waits.map(spoken))} (±10 %`)
    const total = waits.reduce((sum, ms) => sum + ms, 0)
    expect(readme).toContain(`so about ${Math.floor(total / 3_600_000)} h ${Math.round((total % 3_600_000) / 60_000)} min, never past a day`)
    expect(PUSH_GIVE_UP_AFTER_MS).toBe(24 * 3_600_000)
    expect(readme).toContain(`(kept a week for the operator)`)
    expect(PUSH_FAILED_KEPT_DAYS).toBe(7)
    expect(readme).toContain(`(renewed after ${PROVIDER_TOKEN_REFRESH_MS / 60_000} minutes)`)
  })

  it('webhook retries: the waits, the give-up after three days, the answer time', () => {
    expect(readme).toContain(`after about ${listed(RETRY_SCHEDULE_MS.map(spoken))} (each ±10 %), then every ${spoken(RETRY_SCHEDULE_MS.at(-1)!)}, until about three days`)
    expect(GIVE_UP_AFTER_MS).toBe(3 * 24 * 3_600_000)
    expect(readme).toContain(`waits at least that long (at most ${spoken(MAX_RETRY_AFTER_MS)})`)
    expect(readme).toContain(`Answer any \`2xx\` within ${DELIVERY_TIMEOUT_MS / 1000} seconds`)
  })

  it('shutdown: how long requests under way may finish, and when npm start exits anyway', () => {
    const drain = constantIn('local/start.ts', 'DRAIN_MS')
    const shutdown = constantIn('local/start.ts', 'SHUTDOWN_MS')
    expect(readme).toContain(`lets requests under way finish (up to ${drain / 1000} s)`)
    expect(readme).toContain(`(after ${shutdown / 1000} s in all it exits anyway`)
  })

  it('stored files of a deleted member go within a minute: npm start runs the storage worker every minute', () => {
    expect(source('local/start.ts')).toMatch(/setInterval\(runMaintenance, 60_000\)/)
    expect(readme).toContain('the storage worker deletes them within a minute')
  })
})
