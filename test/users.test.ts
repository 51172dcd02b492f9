// SPEC section 4, Users: GET /v1/users/{username|user_…|me}, GET/PATCH /v1/users/me.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { UserSchema } from '../functions/lib/schemas.ts'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'

let world: TestWorld
let alice: CreatedUser
let bob: CreatedUser

beforeAll(async () => {
  world = await startWorld()
  alice = await world.createUser('alice', '--first-name', 'Alice', '--last-name', 'Liddell', '--time-zone', 'Europe/Berlin')
  bob = await world.createUser('Bob', '--privacy', 'protected')
})
afterAll(() => world.close())

describe('GET /v1/users/{username}', () => {
  it('renders every User field with its type (strict schema)', async () => {
    const res = await world.get('/v1/users/me', { auth: alice.api_key })
    expect(res.status).toBe(200)
    const user = UserSchema.strict().parse(res.body)
    expect(user).toMatchObject({
      id: alice.id,
      username: 'alice',
      first_name: 'Alice',
      last_name: 'Liddell',
      time_zone: 'Europe/Berlin',
      privacy: 'public',
      protected: false,
      pro: true,
      streak: 0,
      best_streak: 0,
      streaking: false,
      todos_count: 0,
      followers_count: 0,
      following: false,
      follows_you: false,
      bio: null,
      location: null,
      website_url: null,
      header: null,
      dismissed_time_zone: null,
      url: 'http://api.test/@alice',
    })
    expect(user.header_color).toMatch(/^#[0-9A-F]{6}$/)
    expect(Object.values(user.avatar).every((u) => typeof u === 'string' && u.startsWith('http://api.test/'))).toBe(true)
  })

  it('finds a user by username (any case), by user_ id, and `me`', async () => {
    for (const ref of ['Bob', 'bob', 'BOB', bob.id]) {
      const res = await world.get(`/v1/users/${ref}`, { auth: alice.api_key })
      expect(res.status, ref).toBe(200)
      expect(res.body.id).toBe(bob.id)
    }
    const me = await world.get('/v1/users/me', { auth: bob.api_key })
    expect(me.body.username).toBe('Bob')
  })

  it('dismissed_time_zone appears only on your own record', async () => {
    const other = await world.get('/v1/users/alice', { auth: bob.api_key })
    expect(other.body).not.toHaveProperty('dismissed_time_zone')
    const own = await world.get('/v1/users/alice', { auth: alice.api_key })
    expect(own.body).toHaveProperty('dismissed_time_zone', null)
  })

  it('protected is derived from privacy', async () => {
    const res = await world.get('/v1/users/bob', { auth: alice.api_key })
    expect(res.body).toMatchObject({ privacy: 'protected', protected: true })
    const carol = await world.createUser('carol', '--privacy', 'private')
    expect((await world.get('/v1/users/carol', { auth: carol.api_key })).body).toMatchObject({ privacy: 'private', protected: true })
  })

  it('following, follows_you and followers_count reflect follow relations', async () => {
    const [a] = await world.sql`select id from app.users where username = 'alice'`
    const [b] = await world.sql`select id from app.users where username = 'Bob'`
    await world.sql`insert into app.user_follows (follower_id, followee_id) values (${a!.id}, ${b!.id})`
    await world.sql`update app.users set followers_count = 1 where id = ${b!.id}`
    const seenByAlice = await world.get('/v1/users/bob', { auth: alice.api_key })
    expect(seenByAlice.body).toMatchObject({ following: true, follows_you: false, followers_count: 1 })
    const aliceSeenByBob = await world.get('/v1/users/alice', { auth: bob.api_key })
    expect(aliceSeenByBob.body).toMatchObject({ following: false, follows_you: true })
  })

  it('404 with a sentence for an unknown user or malformed id', async () => {
    for (const ref of ['nobody', 'user_00000000000000000000000000000000', 'user_xyz']) {
      const res = await world.get(`/v1/users/${ref}`, { auth: alice.api_key })
      expect(res.status, ref).toBe(404)
      expect(res.body.error).toMatch(/No user matches/)
    }
  })
})

describe('PATCH /v1/users/me', () => {
  it('sets time_zone and clears a stored dismissed_time_zone', async () => {
    const dismissed = await world.patch('/v1/users/me', { auth: alice.api_key, json: { dismissed_time_zone: 'America/New_York' } })
    expect(dismissed.status).toBe(200)
    expect(dismissed.body).toMatchObject({ time_zone: 'Europe/Berlin', dismissed_time_zone: 'America/New_York' })

    const res = await world.patch('/v1/users/me', { auth: alice.api_key, json: { time_zone: 'Asia/Kolkata' } })
    expect(res.status).toBe(200)
    UserSchema.strict().parse(res.body)
    expect(res.body).toMatchObject({ time_zone: 'Asia/Kolkata', dismissed_time_zone: null })
    expect((await world.get('/v1/users/me', { auth: alice.api_key })).body.time_zone).toBe('Asia/Kolkata')
  })

  it('an explicit dismissed_time_zone in the same request wins; null clears it', async () => {
    const both = await world.patch('/v1/users/me', { auth: alice.api_key, json: { time_zone: 'UTC', dismissed_time_zone: 'Europe/Paris' } })
    expect(both.body).toMatchObject({ time_zone: 'UTC', dismissed_time_zone: 'Europe/Paris' })
    const cleared = await world.patch('/v1/users/me', { auth: alice.api_key, json: { dismissed_time_zone: null } })
    expect(cleared.body).toMatchObject({ time_zone: 'UTC', dismissed_time_zone: null })
  })

  it('an empty patch changes nothing and returns you', async () => {
    const res = await world.patch('/v1/users/me', { auth: alice.api_key, json: {} })
    expect(res.status).toBe(200)
    expect(res.body.username).toBe('alice')
  })

  it('updated_at moves on update', async () => {
    const before = (await world.get('/v1/users/me', { auth: bob.api_key })).body.updated_at
    const after = (await world.patch('/v1/users/me', { auth: bob.api_key, json: { time_zone: 'Europe/Lisbon' } })).body.updated_at
    expect(new Date(after).getTime()).toBeGreaterThan(new Date(before).getTime())
  })

  it('422 for a zone that is not an IANA identifier', async () => {
    for (const zone of ['Mars/Olympus_Mons', 'EST5EDT6', '+03:00', 'posix/Europe/Berlin']) {
      const res = await world.patch('/v1/users/me', { auth: alice.api_key, json: { time_zone: zone } })
      expect(res.status, zone).toBe(422)
      expect(res.body.error).toMatch(/^time_zone must be an IANA time zone identifier/)
    }
    const dismissed = await world.patch('/v1/users/me', { auth: alice.api_key, json: { dismissed_time_zone: 'Nowhere/Land' } })
    expect(dismissed.status).toBe(422)
    expect(dismissed.body.error).toMatch(/^dismissed_time_zone/)
  })

  it('422 for wrong types and an empty zone', async () => {
    expect((await world.patch('/v1/users/me', { auth: alice.api_key, json: { time_zone: '' } })).body).toEqual({ error: 'time_zone must not be empty' })
    expect((await world.patch('/v1/users/me', { auth: alice.api_key, json: { time_zone: null } })).status).toBe(422)
    expect((await world.patch('/v1/users/me', { auth: alice.api_key, json: ['UTC'] })).status).toBe(422)
  })

  it('403 for a read-only key and for a token without write', async () => {
    expect((await world.patch('/v1/users/me', { auth: alice.read_only_api_key, json: { time_zone: 'UTC' } })).status).toBe(403)
    const token = await world.token('alice', 'public notifications')
    expect((await world.patch('/v1/users/me', { auth: token, json: { time_zone: 'UTC' } })).status).toBe(403)
  })
})
