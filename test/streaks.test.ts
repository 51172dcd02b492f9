// Streaks (SPEC User.streak/best_streak/streaking) and the deletion preview, across time
// zones and midnight boundaries. Todos are placed on exact local days with the operator CLI
// (create-todo --created-at), relative to "today" in each member's zone.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type TestWorld, startWorld } from './support/app.ts'
import { addDays, localDate, zonedInstant } from './support/time.ts'

let world: TestWorld
let counter = 0

beforeAll(async () => {
  world = await startWorld()
})
afterAll(() => world.close())

/** A member in `zone` with todos on the given local days (0 = today, -1 = yesterday, …) at `time`. */
async function memberWith(zone: string, days: number[], options: { freezes?: number[]; time?: string } = {}) {
  const username = `m${++counter}`
  const member = await world.createUser(username, '--time-zone', zone)
  const today = localDate(zone)
  const todos: { id: string; day: number }[] = []
  for (const day of days) {
    const todo = await world.admin('create-todo', '--user', username, '--body', `Day ${day}`, '--created-at', zonedInstant(zone, addDays(today, day), options.time ?? '12:00'))
    todos.push({ id: todo.id, day })
  }
  for (const day of options.freezes ?? []) await world.admin('freeze-streak', '--user', username, '--date', addDays(today, day))
  return { ...member, username, zone, today, todos }
}

async function streakOf(member: { username: string; api_key: string }) {
  const res = await world.get(`/v1/users/${member.username}`, { auth: member.api_key })
  return { streak: res.body.streak, best_streak: res.body.best_streak, streaking: res.body.streaking }
}

const zones = ['UTC', 'Pacific/Kiritimati', 'Pacific/Pago_Pago', 'Asia/Kolkata', 'America/New_York', 'Europe/Berlin']

const table: { name: string; days: number[]; freezes?: number[]; streak: number; best: number; streaking: boolean }[] = [
  { name: 'no todos', days: [], streak: 0, best: 0, streaking: false },
  { name: 'today only', days: [0], streak: 1, best: 1, streaking: true },
  { name: 'yesterday only (still alive)', days: [-1], streak: 1, best: 1, streaking: false },
  { name: 'two days ago only (broken)', days: [-2], streak: 0, best: 1, streaking: false },
  { name: 'today, yesterday, the day before', days: [0, -1, -2], streak: 3, best: 3, streaking: true },
  { name: 'several todos a day count once', days: [0, 0, -1, -1, -1], streak: 2, best: 2, streaking: true },
  { name: 'a gap resets the run; best remembers', days: [0, -1, -3, -4, -5, -6], streak: 2, best: 4, streaking: true },
  { name: 'yesterday and before, not yet today', days: [-1, -2, -3], streak: 3, best: 3, streaking: false },
  { name: 'a used freeze covers a day', days: [0, -2], freezes: [-1], streak: 3, best: 3, streaking: true },
  { name: 'a freeze alone keeps yesterday alive', days: [-2], freezes: [-1], streak: 2, best: 2, streaking: false },
]

describe('streak table across time zones', () => {
  for (const zone of zones) {
    for (const row of table) {
      it(`${zone}: ${row.name}`, async () => {
        const member = await memberWith(zone, row.days, { freezes: row.freezes })
        expect(await streakOf(member)).toEqual({ streak: row.streak, best_streak: row.best, streaking: row.streaking })
      })
    }
  }
})

describe('midnight boundaries', () => {
  it('23:59 yesterday and 00:01 today are two days, in the member\'s zone', async () => {
    for (const zone of ['America/New_York', 'Asia/Kolkata', 'Pacific/Kiritimati']) {
      const username = `mid${++counter}`
      const member = await world.createUser(username, '--time-zone', zone)
      const today = localDate(zone)
      await world.admin('create-todo', '--user', username, '--body', 'late', '--created-at', zonedInstant(zone, addDays(today, -1), '23:59'))
      await world.admin('create-todo', '--user', username, '--body', 'early', '--created-at', zonedInstant(zone, today, '00:01'))
      expect(await streakOf({ username, api_key: member.api_key }), zone).toEqual({ streak: 2, best_streak: 2, streaking: true })
    }
  })

  it('the same instant is today for one zone and yesterday for another', async () => {
    // 00:30 today in Kiritimati (UTC+14) is still yesterday in UTC.
    const instant = zonedInstant('Pacific/Kiritimati', localDate('Pacific/Kiritimati'), '00:30')
    const east = await world.createUser('east', '--time-zone', 'Pacific/Kiritimati')
    const west = await world.createUser('west', '--time-zone', 'Pacific/Pago_Pago')
    const eastTodo = await world.admin('create-todo', '--user', 'east', '--body', 'x', '--created-at', instant)
    const westTodo = await world.admin('create-todo', '--user', 'west', '--body', 'x', '--created-at', instant)
    const eastDate = (await world.get(`/v1/todos/${eastTodo.id}/deletion_preview`, { auth: east.api_key })).body.date
    const westDate = (await world.get(`/v1/todos/${westTodo.id}/deletion_preview`, { auth: west.api_key })).body.date
    expect(eastDate).toBe(localDate('Pacific/Kiritimati', new Date(instant)))
    expect(westDate).toBe(localDate('Pacific/Pago_Pago', new Date(instant)))
    expect(eastDate).not.toBe(westDate)
  })

  it('a todo keeps the local day it was created on when the member changes zone', async () => {
    const member = await memberWith('Europe/Berlin', [0], { time: '23:30' })
    const todo = member.todos[0]!
    await world.patch('/v1/users/me', { auth: member.api_key, json: { time_zone: 'Asia/Tokyo' } })
    const preview = await world.get(`/v1/todos/${todo.id}/deletion_preview`, { auth: member.api_key })
    expect(preview.body.date).toBe(member.today)
  })
})

describe('streaks follow writes', () => {
  it('posting today extends a streak that ended yesterday; deleting it shortens it again', async () => {
    const member = await memberWith('UTC', [-1, -2])
    expect(await streakOf(member)).toEqual({ streak: 2, best_streak: 2, streaking: false })
    const todo = (await world.post('/v1/todos', { auth: member.api_key, json: { body: 'Today' } })).body
    expect(todo.creator).toMatchObject({ streak: 3, best_streak: 3, streaking: true })
    expect((await world.delete(`/v1/todos/${todo.id}`, { auth: member.api_key })).status).toBe(204)
    expect(await streakOf(member)).toEqual({ streak: 2, best_streak: 2, streaking: false })
  })

  it('deleting the only todo of a day inside the streak breaks it', async () => {
    const member = await memberWith('UTC', [0, -1, -2, -3])
    const middle = member.todos.find((t) => t.day === -2)!
    await world.delete(`/v1/todos/${middle.id}`, { auth: member.api_key })
    expect(await streakOf(member)).toEqual({ streak: 2, best_streak: 2, streaking: true })
  })
})

describe('GET /v1/todos/{id}/deletion_preview', () => {
  it('none: another todo covers the day', async () => {
    const member = await memberWith('Asia/Kolkata', [0, 0, -1])
    const res = await world.get(`/v1/todos/${member.todos[0]!.id}/deletion_preview`, { auth: member.api_key })
    expect(res.status).toBe(200)
    expect(res.body).toEqual({ impact: 'none', safe_to_delete: true, date: member.today, current_streak: 2 })
  })

  it('none: a freeze used before covers the day', async () => {
    const member = await memberWith('UTC', [0, -1], { freezes: [-1] })
    const yesterday = member.todos.find((t) => t.day === -1)!
    const res = await world.get(`/v1/todos/${yesterday.id}/deletion_preview`, { auth: member.api_key })
    expect(res.body).toEqual({ impact: 'none', safe_to_delete: true, date: addDays(member.today, -1), current_streak: 2 })
  })

  it('empties_today: the only todo of today', async () => {
    const member = await memberWith('America/New_York', [0, -1])
    const today = member.todos.find((t) => t.day === 0)!
    const res = await world.get(`/v1/todos/${today.id}/deletion_preview`, { auth: member.api_key })
    expect(res.body).toEqual({ impact: 'empties_today', safe_to_delete: false, date: member.today, current_streak: 2 })
  })

  it('breaks_current_streak: the only todo of a closed day inside the streak, not rescued by a new freeze', async () => {
    const member = await memberWith('Europe/Berlin', [0, -1, -2])
    const yesterday = member.todos.find((t) => t.day === -1)!
    const res = await world.get(`/v1/todos/${yesterday.id}/deletion_preview`, { auth: member.api_key })
    expect(res.body).toEqual({ impact: 'breaks_current_streak', safe_to_delete: false, date: addDays(member.today, -1), current_streak: 3 })
  })

  it('breaks_current_streak also while today is not covered yet', async () => {
    const member = await memberWith('UTC', [-1, -2, -3])
    const res = await world.get(`/v1/todos/${member.todos.find((t) => t.day === -2)!.id}/deletion_preview`, { auth: member.api_key })
    expect(res.body).toMatchObject({ impact: 'breaks_current_streak', safe_to_delete: false, current_streak: 3 })
  })

  it('empties_past_day: the only todo of a day outside the current streak', async () => {
    const member = await memberWith('Pacific/Pago_Pago', [0, -5])
    const old = member.todos.find((t) => t.day === -5)!
    const res = await world.get(`/v1/todos/${old.id}/deletion_preview`, { auth: member.api_key })
    expect(res.body).toEqual({ impact: 'empties_past_day', safe_to_delete: true, date: addDays(member.today, -5), current_streak: 1 })
  })

  it('403 for someone else\'s todo, 404 for an unknown one', async () => {
    const owner = await memberWith('UTC', [0])
    const other = await world.createUser('previewer')
    const res = await world.get(`/v1/todos/${owner.todos[0]!.id}/deletion_preview`, { auth: other.api_key })
    expect(res.status).toBe(403)
    expect((await world.get('/v1/todos/todo_00000000000000000000000000000000/deletion_preview', { auth: other.api_key })).status).toBe(404)
  })
})

describe('operator CLI for history', () => {
  it('create-todo prints the todo; freeze-streak prints user and date; bad input is an error', async () => {
    await world.createUser('hist', '--time-zone', 'UTC')
    const todo = await world.admin('create-todo', '--user', 'hist', '--body', 'Backdated #nothing', '--created-at', '2025-06-01T10:00:00Z')
    expect(todo).toMatchObject({ body: 'Backdated #nothing', created_at: '2025-06-01T10:00:00+00:00' })
    expect(await world.admin('freeze-streak', '--user', 'hist', '--date', '2025-06-02')).toEqual({ user: 'hist', date: '2025-06-02' })
    const [row] = await world.sql`select best_streak from app.users where username = 'hist'`
    expect(row!.best_streak).toBe(2)
    await expect(world.admin('create-todo', '--user', 'hist', '--body', 'x', '--created-at', 'not a date')).rejects.toThrow(/created-at/)
    await expect(world.admin('freeze-streak', '--user', 'hist', '--date', '2025-6-2')).rejects.toThrow(/date/)
  })
})
