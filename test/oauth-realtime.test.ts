// Tokens from the OAuth flow on Realtime (issue 16): a chat app's access token joins the member's
// inbox topic, and when a spent refresh token of its grant is replayed, the whole family is
// revoked and the local gateway's sweep closes that channel within seconds, as it does for
// `revoke-token`.
import type { SupabaseClient } from '@supabase/supabase-js'
import * as oauth from 'oauth4webapi'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'
import { browserless, consent, discover, insecure, signIn } from './support/oauth.ts'
import { listen } from './support/realtime.ts'

let world: TestWorld
let bob: CreatedUser
const clients: SupabaseClient[] = []

beforeAll(async () => {
  // Revocation sweeps every second (npm start: every 5 s): the test waits for the sweep, not a time.
  world = await startWorld({ revocationCheckIntervalMs: 1_000 })
  bob = await world.createUser('bob')
})
afterAll(async () => {
  for (const client of clients) await client.removeAllChannels()
  await world.close()
})

it('replaying a spent refresh token closes the realtime channels of the grant’s live access token within 10 s', async () => {
  const redirectUri = 'https://chat.example/callback'
  const registered = await world.admin('create-oauth-client', '--name', 'Chat app', '--chat', '--redirect-uri', redirectUri)
  const as = await discover('http://api.test', world.baseUrl)
  const client: oauth.Client = { client_id: registered.client_id }
  const auth = oauth.ClientSecretBasic(registered.client_secret)
  const params = { client_id: registered.client_id, redirect_uri: redirectUri, scope: 'public chat', state: 'rt' }
  const agent = browserless(world.baseUrl)
  expect((await signIn(agent, (await world.admin('login-code', '--user', 'bob')).code, params)).status).toBe(303)
  const landed = await consent(agent, params)
  const first = await oauth.processAuthorizationCodeResponse(as, client,
    await oauth.authorizationCodeGrantRequest(as, client, auth, oauth.validateAuthResponse(as, client, landed, 'rt'), redirectUri, oauth.nopkce, insecure))
  const current = await oauth.processRefreshTokenResponse(as, client, await oauth.refreshTokenGrantRequest(as, client, auth, first.refresh_token!, insecure))

  const inbox = await listen(world.baseUrl, clients, current.access_token, `user:${bob.id}`)
  expect(inbox.status).toBe('SUBSCRIBED')
  const closed = new Promise<string>((resolve) => {
    inbox.channel.on('system', {}, (message: { status?: string; message?: string }) => {
      if (message.status === 'error') resolve(String(message.message))
    })
  })
  const replay = await oauth.refreshTokenGrantRequest(as, client, auth, first.refresh_token!, insecure)
  expect(replay.status).toBe(400)
  // Closed by the gateway's next revocation sweep: the condition, not a time (issue 31).
  expect(await closed).toBe('The access token was revoked')
}, 20_000)
