// The operator CLI as operators run it: a separate process, one JSON object on stdout,
// {"error": …} on stderr with a non-zero exit (DESIGN.md section 2).
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createSql } from '../functions/lib/sql.ts'
import { runAdmin } from '../local/admin-commands.ts'
import { JWT_SECRET, type TestWorld, startWorld } from './support/app.ts'
import { runCli } from './support/process.ts'

let world: TestWorld
let env: Record<string, string>

beforeAll(async () => {
  world = await startWorld()
  env = { DATABASE_URL: world.databaseUrl, JWT_SECRET, PUBLIC_URL: 'http://api.test' }
})
afterAll(() => world.close())

function onlyJson(stdout: string): any {
  const lines = stdout.trim().split('\n')
  expect(lines).toHaveLength(1)
  return JSON.parse(lines[0]!)
}

describe('operator CLI', () => {
  it('create-user prints id, username and both keys; the keys work over HTTP', async () => {
    const run = await runCli(['create-user', '--username', 'quinn', '--first-name', 'Quinn', '--last-name', 'Q', '--privacy', 'protected', '--time-zone', 'America/Chicago'], env)
    expect(run.code, run.stderr).toBe(0)
    const user = onlyJson(run.stdout)
    expect(Object.keys(user).sort()).toEqual(['api_key', 'id', 'read_only_api_key', 'username'])
    expect(user).toMatchObject({ username: 'quinn', id: expect.stringMatching(/^user_[0-9a-f]{32}$/), api_key: expect.stringMatching(/^svc_sk_/), read_only_api_key: expect.stringMatching(/^svc_sk_/) })
    const me = await world.get('/v1/users/me', { auth: user.api_key })
    expect(me.body).toMatchObject({ first_name: 'Quinn', last_name: 'Q', privacy: 'protected', time_zone: 'America/Chicago', pro: true })
  })

  it('create-key, set-subscription, create-project, create-oauth-client, issue-token', async () => {
    await world.createUser('rita')
    await world.createUser('stan')
    // Stan's subscription changes first: the project below renders him as a maker.
    const sub = await runCli(['set-subscription', '--user', 'stan', '--active', 'false'], env)
    const [key, project, client] = await Promise.all([
      runCli(['create-key', '--user', 'rita', '--read-only'], env),
      runCli(['create-project', '--owner', 'rita', '--name', 'Rocket', '--slug', 'rocket', '--hashtag', 'rocket', '--privacy', 'protected', '--makers', 'stan', '--github-url', 'https://github.com/r/rocket'], env),
      runCli(['create-oauth-client', '--name', 'Mobile', '--first-party', '--chat', '--redirect-uri', 'app://cb'], env),
    ])
    for (const run of [key, sub, project, client]) expect(run.code, run.stderr).toBe(0)

    const { api_key } = onlyJson(key.stdout)
    expect((await world.patch('/v1/users/me', { auth: api_key, json: { time_zone: 'UTC' } })).status).toBe(403)

    expect(onlyJson(sub.stdout)).toEqual({ id: expect.stringMatching(/^user_/), pro: false })

    const rendered = onlyJson(project.stdout)
    const viaApi = await world.get(`/v1/projects/${rendered.id}`, { auth: (await world.admin('create-key', '--user', 'rita')).api_key })
    expect(rendered).toEqual(viaApi.body)
    expect(rendered.makers.map((m: { username: string }) => m.username)).toEqual(['rita', 'stan'])

    const { client_id, client_secret } = onlyJson(client.stdout)
    expect(client_id).toBeTruthy()
    expect(client_secret).toBeTruthy()
    const token = await runCli(['issue-token', '--user', 'rita', '--client', client_id, '--scopes', 'public write notifications chat'], env)
    expect(token.code, token.stderr).toBe(0)
    const issued = onlyJson(token.stdout)
    expect(issued).toMatchObject({ token_type: 'Bearer', expires_in: 3600, scope: 'public write notifications chat', refresh_token: expect.any(String) })
    expect((await world.patch('/v1/users/me', { auth: issued.access_token, json: { time_zone: 'Europe/Rome' } })).status).toBe(200)
  })

  it('deletion-requests, reject-deletion and approve-deletion, as operators run them', async () => {
    const una = await world.createUser('una')
    await world.createUser('vic')
    expect((await world.delete('/v1/account', { auth: una.api_key })).status).toBe(204)
    const queue = await runCli(['deletion-requests'], env)
    expect(queue.code, queue.stderr).toBe(0)
    expect(onlyJson(queue.stdout)).toEqual({
      data: [{ user: 'una', id: una.id, requested_at: expect.any(String), requested_by: { kind: 'api_key', api_key_id: expect.stringMatching(/^[0-9a-f-]{36}$/) } }],
    })
    const refused = await runCli(['approve-deletion', '--user', 'vic'], env)
    expect(refused.code).not.toBe(0)
    expect(JSON.parse(refused.stderr.trim())).toEqual({ error: 'vic has not asked for their account to be deleted' })
    const rejected = await runCli(['reject-deletion', '--user', 'una'], env)
    expect(onlyJson(rejected.stdout)).toEqual({ user: 'una', rejected: true })
    expect((await world.delete('/v1/account', { auth: una.api_key })).status).toBe(204)
    const approved = await runCli(['approve-deletion', '--user', una.id], env)
    expect(approved.code, approved.stderr).toBe(0)
    expect(onlyJson(approved.stdout)).toEqual({ deleted: una.id })
    expect((await world.get('/v1/users/me', { auth: una.api_key })).status).toBe(403)
  })

  it('failures print {"error"} on stderr, nothing on stdout, and exit non-zero', async () => {
    await world.createUser('taken')
    const cases = [
      ['no-such-command'],
      ['create-user'],
      ['create-user', '--username', 'taken'],
      ['create-user', '--username', 'bad name!'],
      ['create-user', '--username', 'zoe', '--time-zone', 'Mars/Base'],
      ['create-user', '--username', 'zoe', '--privacy', 'secret'],
      ['create-key', '--user', 'nobody'],
      ['set-subscription', '--user', 'taken', '--active', 'maybe'],
      ['issue-token', '--user', 'taken', '--client', 'nope', '--scopes', 'public'],
      ['issue-token', '--user', 'taken', '--client', 'nope', '--scopes', 'admin'],
      ['create-user', '--username', 'zoe', '--unknown-flag'],
      ['login-code', '--user', 'nobody'],
      ['login-code'],
      ['create-oauth-client', '--name', 'Evil', '--redirect-uri', 'javascript:alert(1)'],
      ['create-oauth-client', '--name', 'Frag', '--redirect-uri', 'https://app.example/cb#x'],
      ['create-oauth-client', '--name', 'Relative', '--redirect-uri', '/callback'],
    ]
    const runs = await Promise.all(cases.map((args) => runCli(args, env)))
    runs.forEach((run, i) => {
      expect(run.code, cases[i]!.join(' ')).not.toBe(0)
      expect(run.stdout, cases[i]!.join(' ')).toBe('')
      expect(JSON.parse(run.stderr.trim()), cases[i]!.join(' ')).toEqual({ error: expect.any(String) })
    })
  })
})

describe('operator CLI inputs are bounded (issue 25)', () => {
  it('--limit of reports and webhook-deliveries is 1 to 1000', async () => {
    await world.createUser('lister')
    for (const args of [['reports', '--limit', '1001'], ['reports', '--limit', '1e20'], ['webhook-deliveries', '--user', 'lister', '--limit', '5000']]) {
      await expect(world.admin(...args), args.join(' ')).rejects.toThrow('--limit must be a whole number from 1 to 1000')
    }
    expect(await world.admin('reports', '--limit', '1000')).toEqual({ data: [] })
  })

  it('revoke-token finds the token by its key, never by reading every token', async () => {
    await world.createUser('holder')
    await world.token('holder', 'public')
    const [token] = await world.sql`select jti::text as jti from app.oauth_tokens t join app.users u on u.id = t.user_id where u.username = 'holder'`
    // One connection of our own: its table counters, flushed when it goes idle, are the command's.
    const one = createSql(world.databaseUrl, { max: 1 })
    const counters = async () => {
      const [row] = await one`select seq_scan, coalesce(idx_scan, 0) as idx_scan from pg_stat_user_tables where relid = 'app.oauth_tokens'::regclass`
      return { seq: Number(row!.seq_scan), idx: Number(row!.idx_scan) }
    }
    try {
      await one`select pg_stat_force_next_flush()`
      const before = await counters()
      const done = await runAdmin({ sql: one, jwtSecret: JWT_SECRET, publicUrl: 'http://api.test' }, ['revoke-token', '--jti', token!.jti])
      expect(done).toEqual({ revoked: token!.jti })
      await one`select pg_stat_force_next_flush()`
      let after = await counters()
      for (const deadline = Date.now() + 20_000; after.seq === before.seq && after.idx === before.idx && Date.now() < deadline;) {
        await new Promise((resolve) => setTimeout(resolve, 100))
        after = await counters()
      }
      expect(after.seq).toBe(before.seq)
      expect(after.idx).toBeGreaterThan(before.idx)
      await expect(runAdmin({ sql: one, jwtSecret: JWT_SECRET, publicUrl: 'http://api.test' }, ['revoke-token', '--jti', 'not-a-uuid'])).rejects.toThrow('no token with jti not-a-uuid')
    } finally {
      await one.end()
    }
  })
})
