// Account deletion (issue 17) reaches what issues 15 and 16 added: a deleted member's
// notifications (received and caused), devices, browser push subscriptions, queued pushes, OAuth
// grants, consent sessions and sign-in codes are gone with the account, other members' unread
// counts are exact, and no notification shows the member as its actor any more.
import { createECDH, randomBytes } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'
import { browserless, consent, signIn } from './support/oauth.ts'

let world: TestWorld
let lea: CreatedUser
let bob: CreatedUser
let bobNotifier: string

beforeAll(async () => {
  world = await startWorld()
  lea = await world.createUser('lea')
  bob = await world.createUser('bob')
  bobNotifier = await world.token('bob', 'notifications')
})
afterAll(() => world.close())

const uuidOf = (publicId: string) => publicId.replace(/^[a-z]+_/, '').replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5')

describe('approve-deletion removes what notifications, push and OAuth keep of the member', () => {
  it('before: Lea has notifications, devices, a browser subscription, an OAuth grant and a consent session; Bob has notifications she caused', async () => {
    // Bob posts; Lea comments and likes it (notifications for Bob, actor Lea); Bob follows Lea (one for her).
    const todo = await world.post('/v1/todos', { auth: bob.api_key, json: { body: 'shipped it' } })
    expect(todo.status).toBe(201)
    expect((await world.post('/v1/comments', { auth: lea.api_key, json: { commentable_type: 'Todo', commentable_id: todo.body.id, body: 'well done' } })).status).toBe(201)
    expect((await world.post('/v1/reactions', { auth: lea.api_key, json: { reactable_type: 'Todo', reactable_id: todo.body.id } })).status).toBe(201)
    const carl = await world.createUser('carl')
    expect((await world.post('/v1/comments', { auth: carl.api_key, json: { commentable_type: 'Todo', commentable_id: todo.body.id, body: 'nice' } })).status).toBe(201)
    expect((await world.post(`/v1/users/${lea.username}/follow`, { auth: bob.api_key })).status).toBeLessThan(300)

    const bobs = await world.get('/v1/notifications', { auth: bobNotifier })
    expect(bobs.status).toBe(200)
    expect(bobs.body.unread_count).toBe(3)
    expect(bobs.body.data.filter((n: { actor: { id: string } }) => n.actor.id === lea.id)).toHaveLength(2)

    const leaDevices = await world.token('lea', 'notifications', { firstParty: true })
    const device = await world.post('/v1/devices', { auth: leaDevices, json: { token: randomBytes(32).toString('hex'), platform: 'ios' } })
    expect(device.status).toBe(201)
    const p256dh = createECDH('prime256v1').generateKeys().toString('base64url')
    await world.admin('add-web-push-subscription', '--user', 'lea', '--endpoint', 'https://push.example.net/lea', `--p256dh=${p256dh}`, `--auth=${randomBytes(16).toString('base64url')}`)

    // An OAuth grant through the consent page: sign-in code, session cookie, code, tokens.
    const client = await world.admin<{ client_id: string }>('create-oauth-client', '--name', 'Lea app', '--public', '--redirect-uri', 'https://app.example/cb')
    const { code: loginCode } = await world.admin<{ code: string }>('login-code', '--user', 'lea')
    const agent = browserless(world.baseUrl)
    const params = { client_id: client.client_id, redirect_uri: 'https://app.example/cb', scope: 'public', state: 's', code_challenge: 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM', code_challenge_method: 'S256' }
    expect((await signIn(agent, loginCode, params)).status).toBeLessThan(400)
    const redirect = await consent(agent, params)
    expect(redirect.searchParams.get('code')).toBeTruthy()
    // An unused sign-in code too.
    await world.admin('login-code', '--user', 'lea')

    const [counts] = await world.sql`
      select (select count(*) from app.devices where user_id = ${uuidOf(lea.id)})::int as devices,
             (select count(*) from app.web_push_subscriptions where user_id = ${uuidOf(lea.id)})::int as web,
             (select count(*) from app.notifications where user_id = ${uuidOf(lea.id)} or actor_id = ${uuidOf(lea.id)})::int as notifications`
    expect(counts).toEqual({ devices: 1, web: 1, notifications: 3 })
  })

  it('after: no row anywhere names her, Bob\'s unread count is exact, and no notification shows her', async () => {
    expect((await world.delete('/v1/account', { auth: lea.api_key })).status).toBe(204)
    expect(await world.admin('approve-deletion', '--user', 'lea')).toEqual({ deleted: lea.id })

    const uuid = uuidOf(lea.id)
    const columns = await world.sql`
      select c.table_schema, c.table_name, c.column_name from information_schema.columns c
      join information_schema.tables t on t.table_schema = c.table_schema and t.table_name = c.table_name and t.table_type = 'BASE TABLE'
      where c.table_schema in ('app', 'auth', 'storage') and c.data_type = 'uuid'`
    const left: string[] = []
    for (const col of columns) {
      const [row] = await world.sql.unsafe(`select count(*)::int as n from ${col.table_schema}.${col.table_name} where ${col.column_name} = $1`, [uuid])
      if (row!.n > 0) left.push(`${col.table_schema}.${col.table_name}.${col.column_name}`)
    }
    expect(left).toEqual([])

    const bobs = await world.get('/v1/notifications', { auth: bobNotifier })
    expect(bobs.status).toBe(200)
    expect(bobs.body.unread_count).toBe(1)
    expect(bobs.body.data.map((n: { actor: { username: string } }) => n.actor.username)).toEqual(['carl'])
    expect(JSON.stringify(bobs.body)).not.toContain(lea.id)
    const [unread] = await world.sql`select count(*)::int as n from app.notifications where user_id = ${uuidOf(bob.id)} and not read and not hidden`
    expect(unread!.n).toBe(1)
  })
})
