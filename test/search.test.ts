// SPEC section 4, Search: first-party OAuth apps with scope public only; todo search capped at
// the 100 newest matches; user search for mention autocomplete, ranked by mentions.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createSql } from '../functions/lib/sql.ts'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'

let world: TestWorld
let alice: CreatedUser
let token: string

beforeAll(async () => {
  world = await startWorld()
  alice = await world.createUser('alice')
  await world.createUser('writer')
  token = await world.token('alice', 'public', { firstParty: true })
  // 120 matching todos, a minute apart (needle-119 newest), and some that do not match.
  await world.sql`
    insert into app.todos (user_id, body, created_at)
    select u.id, 'needle ' || n || case when n % 10 = 0 then ' broken' else '' end,
           timestamptz '2026-01-01' + make_interval(mins => n)
    from app.users u, generate_series(0, 119) n where u.username = 'writer'`
  await world.sql`
    insert into app.todos (user_id, body) select u.id, 'haystack ' || n from app.users u, generate_series(1, 5) n where u.username = 'writer'`
})
afterAll(() => world.close())

describe('who may search', () => {
  it('403 for API keys, other apps, and tokens without public', async () => {
    const thirdParty = await world.token('alice', 'public')
    const noPublic = await world.token('alice', 'write', { firstParty: true })
    for (const path of ['/v1/search/todos?query=needle', '/v1/search/users?query=wr']) {
      for (const auth of [alice.api_key, thirdParty, noPublic]) {
        const res = await world.get(path, { auth })
        expect(res.status, path).toBe(403)
        expect(typeof res.body.error).toBe('string')
      }
      expect((await world.get(path, { auth: token })).status).toBe(200)
    }
  })
})

describe('GET /v1/search/todos', () => {
  it('400 without a query (after the credential was checked)', async () => {
    for (const path of ['/v1/search/todos', '/v1/search/todos?query=', '/v1/search/todos?query=%20%20', '/v1/search/todos?query=*:()']) {
      const res = await world.get(path, { auth: token })
      expect(res.status, path).toBe(400)
      expect(res.body).toEqual({ error: 'query is required: the words to search for.' })
    }
    expect((await world.get('/v1/search/todos', { auth: alice.api_key })).status).toBe(403)
  })

  it('caps the result at the 100 newest matches: total_count 100, pagination ends there', async () => {
    const seen: string[] = []
    let after: string | null = null
    let pages = 0
    do {
      const res: { body: any } = await world.get(`/v1/search/todos?query=needle&limit=40${after ? `&starting_after=${after}` : ''}`, { auth: token })
      expect(res.body.total_count).toBe(100)
      seen.push(...res.body.data.map((t: { body: string }) => t.body))
      after = res.body.after
      pages++
    } while (after)
    expect(pages).toBe(3)
    expect(seen).toHaveLength(100)
    expect(seen[0]).toBe('needle 119')
    expect(seen[99]).toBe('needle 20 broken')
  })

  it('prefix matching and negation, newest first', async () => {
    const res = await world.get('/v1/search/todos?query=need%20-broken&limit=100', { auth: token })
    expect(res.body.data.every((t: { body: string }) => !t.body.includes('broken'))).toBe(true)
    expect(res.body.data[0].body).toBe('needle 119')
    expect(res.body.total_count).toBe(100)
    const hay = await world.get('/v1/search/todos?query=hay', { auth: token })
    expect(hay.body.total_count).toBe(5)
    const none = await world.get('/v1/search/todos?query=zebra', { auth: token })
    expect(none.body).toEqual({ data: [], has_more: false, total_count: 0, after: null })
  })

  it('a cursor outside the capped result is 404; expand works', async () => {
    const oldest = await world.sql`select app.to_public_id('todo', id) as id from app.todos where body = 'needle 0 broken'`
    expect((await world.get(`/v1/search/todos?query=needle&starting_after=${oldest[0]!.id}`, { auth: token })).status).toBe(404)
    const expanded = await world.get('/v1/search/todos?query=needle&limit=1&expand=reactions', { auth: token })
    expect(expanded.body.data[0].reactions).toEqual([])
  })

  it('real searches find what they name within the term limits: e-mail, URLs, versions, dates, UUIDs (issue 25)', async () => {
    const bodies = [
      'Answer the e-mail from ops', 'Read https://example.com/docs/setup?lang=en before lunch', 'Release v1.2.3 today',
      'Close f47ac10b-58cc-4372-a567-0e02b2c3d479 in the tracker', 'Plan the 2026-01-15 launch', 'Write to first.last@example.co.uk',
      'A state-of-the-art x86_64 build',
    ]
    await world.sql`insert into app.todos (user_id, body) select u.id, b from app.users u, unnest(${bodies}::text[]) b where u.username = 'writer'`
    const cases: [string, string[]][] = [
      ['e-mail', ['Answer the e-mail from ops']],
      ['e-ma ops', ['Answer the e-mail from ops']],
      // The scheme is no term of the todo (the parser leaves `https:` out), so a URL is searched without it.
      ['example.com/docs', ['Read https://example.com/docs/setup?lang=en before lunch']],
      ['example.com -lunch', []],
      ['v1.2', ['Release v1.2.3 today']],
      ['f47ac10b-58cc-4372-a567-0e02b2c3d479', ['Close f47ac10b-58cc-4372-a567-0e02b2c3d479 in the tracker']],
      ['2026-01-15', ['Plan the 2026-01-15 launch']],
      ['first.last@example.co.uk', ['Write to first.last@example.co.uk']],
      ['state-of-the-art x86_64', ['A state-of-the-art x86_64 build']],
    ]
    for (const [query, found] of cases) {
      const res = await world.get(`/v1/search/todos?query=${encodeURIComponent(query)}`, { auth: token })
      expect(res.status, query).toBe(200)
      expect(res.body.data.map((t: { body: string }) => t.body), query).toEqual(found)
    }
  })

  it('only todos the searcher may see', async () => {
    const hidden = await world.createUser('hidden', '--privacy', 'private')
    await world.post('/v1/todos', { auth: hidden.api_key, json: { body: 'uniqueword in private' } })
    expect((await world.get('/v1/search/todos?query=uniqueword', { auth: token })).body.total_count).toBe(0)
    const own = await world.token('hidden', 'public', { firstParty: true })
    expect((await world.get('/v1/search/todos?query=uniqueword', { auth: own })).body.total_count).toBe(1)
  })
})

describe('GET /v1/search/users', () => {
  beforeAll(async () => {
    for (const [name, first, last] of [['samira', 'Samira', 'Khan'], ['sam', 'Sam', 'Stone'], ['samuel', 'Samuel', 'Okafor'], ['bob', 'Bob', 'Samson']]) {
      await world.createUser(name!, '--first-name', first!, '--last-name', last!)
    }
    for (let i = 0; i < 14; i++) await world.createUser(`sx${String(i).padStart(2, '0')}`)
    // Alice mentions samuel three times and bob once.
    for (const body of ['with @samuel', 'again @samuel', '@samuel and @bob', 'thanks @bob? no, @samuel']) {
      await world.post('/v1/todos', { auth: alice.api_key, json: { body } })
    }
  })
  const names = (res: { body: { data: { username: string }[] } }) => res.body.data.map((u) => u.username)

  it('the people you mention most come first, then exact and shorter usernames', async () => {
    const res = await world.get('/v1/search/users?query=sam', { auth: token })
    expect(res.status).toBe(200)
    expect(names(res).slice(0, 4)).toEqual(['samuel', 'bob', 'sam', 'samira'])
    expect(res.body).toMatchObject({ has_more: false, after: null, total_count: res.body.data.length })
  })

  it('matches first names, last names and full names by prefix, case-insensitively', async () => {
    expect(names(await world.get('/v1/search/users?query=STON', { auth: token }))).toEqual(['sam'])
    expect(names(await world.get('/v1/search/users?query=samira%20k', { auth: token }))).toEqual(['samira'])
    expect(names(await world.get('/v1/search/users?query=okaf', { auth: token }))).toEqual(['samuel'])
  })

  it('an empty or missing query returns only frequent mentions', async () => {
    for (const path of ['/v1/search/users', '/v1/search/users?query=']) {
      expect(names(await world.get(path, { auth: token }))).toEqual(['samuel', 'bob'])
    }
  })

  it('treats % and _ as the characters they are', async () => {
    for (const query of ['%25', '_', '%25am']) {
      expect(names(await world.get(`/v1/search/users?query=${query}`, { auth: token })), query).toEqual([])
    }
  })

  it('reads a bounded number of members whatever their number, never all of them (issue 25)', async () => {
    // It read every member for every keystroke (0.5 s at 500k members). 2000 more members whose
    // names match none of these queries: the rows read of app.users stay far below them.
    await world.sql`
      with made as (
        insert into auth.users (id, aud, role, raw_app_meta_data, raw_user_meta_data)
        select gen_random_uuid(), 'authenticated', 'authenticated', '{}', '{}' from generate_series(1, 2000)
        returning id)
      insert into app.users (id, username, first_name, last_name)
      select id, 'zz' || lpad((row_number() over (order by id))::text, 4, '0'), 'Zed', 'Zulu' from made`
    await world.sql`analyze app.users`
    const [me] = await world.sql`select id from app.users where username = 'alice'`
    const claims = JSON.stringify({ sub: me!.id, role: 'authenticated' })
    // A session of its own, so its counters hold only this statement's reads.
    const session = createSql(world.databaseUrl, { max: 1 })
    try {
      for (const query of ['s', 'sam', 'samira k', 'okaf', '']) {
        const [stats] = await session.begin(async (tx) => {
          // The difference across the call: the counters also hold what earlier transactions of this
          // session read until the backend flushes them (at most once a second).
          const [before] = await tx`select seq_tup_read + idx_tup_fetch as rows from pg_stat_xact_user_tables where schemaname = 'app' and relname = 'users'`
          await tx`select set_config('role', 'authenticated', true), set_config('request.jwt.claims', ${claims}, true)`
          await tx`select api.search_users(${query})`
          await tx`reset role`
          const [after] = await tx`select seq_tup_read + idx_tup_fetch as rows from pg_stat_xact_user_tables where schemaname = 'app' and relname = 'users'`
          return [{ rows: Number(after!.rows) - Number(before!.rows) }]
        })
        expect(stats!.rows, JSON.stringify(query)).toBeLessThan(200)
      }
    } finally {
      await session.end()
    }
  })

  it('ranks the first 100 matches of a name by its index: exact while no name has more (issue 25)', async () => {
    // 120 members sharing a prefix: the ten shortest usernames, alphabetically, of the first
    // 100 of each name in byte order; the viewer's frequent mentions first wherever they are.
    await world.sql`
      with made as (
        insert into auth.users (id, aud, role, raw_app_meta_data, raw_user_meta_data)
        select gen_random_uuid(), 'authenticated', 'authenticated', '{}', '{}' from generate_series(1, 120)
        returning id)
      insert into app.users (id, username)
      select id, 'many' || lpad((row_number() over (order by id))::text, 3, '0') from made`
    await world.post('/v1/todos', { auth: alice.api_key, json: { body: 'thanks @many120' } })
    const res = await world.get('/v1/search/users?query=many', { auth: token })
    expect(names(res)).toEqual(['many120', ...Array.from({ length: 9 }, (_, i) => `many${String(i + 1).padStart(3, '0')}`)])
  })

  it('reads whom you mention most from your 1000 newest todos, however many you wrote (issue 25)', async () => {
    const prolific = await world.createUser('prolific')
    const own = await world.token('prolific', 'public', { firstParty: true })
    await world.sql`
      insert into app.todos (user_id, body, created_at)
      select u.id, case when n = 0 then 'long ago with @samuel' else 'plain ' || n end, timestamptz '2025-01-01' + make_interval(mins => n)
      from app.users u, generate_series(0, 3000) n where u.username = 'prolific'`
    await world.sql`analyze app.todos`
    expect(names(await world.get('/v1/search/users', { auth: own }))).toEqual([])
    const claims = JSON.stringify({ sub: prolific.id.replace(/^user_(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5'), role: 'authenticated' })
    const session = createSql(world.databaseUrl, { max: 1 })
    try {
      const [stats] = await session.begin(async (tx) => {
        // The ordered index scan that stops at 1000 is the plan once a member has many more;
        // with a few thousand, reading them all (a scan, a bitmap) costs less and is chosen.
        await tx`set local enable_seqscan = off`
        await tx`set local enable_bitmapscan = off`
        const [before] = await tx`select seq_tup_read + idx_tup_fetch as rows from pg_stat_xact_user_tables where schemaname = 'app' and relname = 'todos'`
        await tx`select set_config('role', 'authenticated', true), set_config('request.jwt.claims', ${claims}, true)`
        await tx`select api.search_users('sam')`
        await tx`reset role`
        const [after] = await tx`select seq_tup_read + idx_tup_fetch as rows from pg_stat_xact_user_tables where schemaname = 'app' and relname = 'todos'`
        return [{ rows: Number(after!.rows) - Number(before!.rows) }]
      })
      // 1000 of their 3001 todos, and the few that policies and the rendering of the matches read.
      expect(Number(stats!.rows)).toBeLessThan(1500)
    } finally {
      await session.end()
    }
  })

  it('returns at most 10 and never yourself', async () => {
    const res = await world.get('/v1/search/users?query=s', { auth: token })
    expect(res.body.data).toHaveLength(10)
    expect(names(await world.get('/v1/search/users?query=alic', { auth: token }))).toEqual([])
  })
})
