// End-to-end latency of direct messages (issue 7): from the moment a client POSTs a message to
// the moment each of 100 subscribed supabase-js clients has it, through the whole production
// path: the API, the message trigger's realtime.send, RLS-authorized private channels and the
// local Realtime gateway.
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { serve, type ServerType } from '@hono/node-server'
import { createClient, type SupabaseClient } from '@supabase/supabase-js'
import WebSocket from 'ws'
import { createApp } from '../../functions/app.ts'
import { createSql } from '../../functions/lib/sql.ts'
import { runAdmin } from '../admin-commands.ts'
import { startRealtimeGateway } from '../realtime.ts'
import { localSupabaseStorage } from '../storage-api.ts'

export interface ChatLatency {
  clients: number
  messages: number
  join_ms: number
  p50: number
  p99: number
  max: number
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!

export async function measureChatLatency(options: { databaseUrl: string; jwtSecret: string; clients?: number; messages?: number }): Promise<ChatLatency> {
  const clients = options.clients ?? 100
  const messages = options.messages ?? 20
  const sql = createSql(options.databaseUrl, { max: 10 })
  const storageDir = await mkdtemp(join(tmpdir(), 'bench-chat-'))
  let baseUrl = ''
  const { storage } = await localSupabaseStorage({ dir: storageDir, publicUrl: () => baseUrl, jwtSecret: options.jwtSecret, sql })
  const app = createApp({ sql, publicUrl: 'http://bench.test', jwtSecret: options.jwtSecret, upgradeUrl: 'http://bench.test/upgrade', storage })
  let server: ServerType | null = null
  baseUrl = await new Promise<string>((resolve) => {
    server = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }, (info) => resolve(`http://127.0.0.1:${info.port}`))
  })
  const realtime = await startRealtimeGateway({ databaseUrl: options.databaseUrl, jwtSecret: options.jwtSecret, privateOnly: true })
  realtime.attach(server!)

  const ctx = { sql, jwtSecret: options.jwtSecret, publicUrl: 'http://bench.test' }
  const suffix = Date.now().toString(36)
  const names = [`benchchat_a_${suffix}`, `benchchat_b_${suffix}`]
  const subscribers: SupabaseClient[] = []
  try {
    for (const name of names) await runAdmin(ctx, ['create-user', '--username', name])
    const client = (await runAdmin(ctx, ['create-oauth-client', '--name', 'Bench chat', '--chat'])) as { client_id: string }
    const token = async (name: string) =>
      ((await runAdmin(ctx, ['issue-token', '--user', name, '--client', client.client_id, '--scopes', 'chat'])) as { access_token: string }).access_token
    const [sender, recipient] = [await token(names[0]!), await token(names[1]!)]
    const post = (auth: string, path: string, body: unknown) =>
      fetch(baseUrl + path, { method: 'POST', headers: { authorization: `Bearer ${auth}`, 'content-type': 'application/json' }, body: JSON.stringify(body) })
    const conversation = (await (await post(sender, '/v1/conversations', { user: names[1] })).json()) as { id: string }
    await post(recipient, `/v1/conversations/${conversation.id}/messages`, { body: 'answered, so no caps apply' })

    // The recipient on 100 devices, each its own connection and private channel.
    const waiting = new Map<string, Map<number, () => void>>()
    const joinStarted = performance.now()
    await Promise.all(Array.from({ length: clients }, async (_, index) => {
      const supabase = createClient(baseUrl, 'anon', { realtime: { transport: WebSocket as never, vsn: '2.0.0' } })
      subscribers.push(supabase)
      await supabase.realtime.setAuth(recipient)
      await new Promise<void>((resolve, reject) => {
        supabase.channel(`conversation:${conversation.id}`, { config: { private: true } })
          .on('broadcast', { event: 'message.created' }, ({ payload }) => waiting.get(payload.body)?.get(index)?.())
          .subscribe((status) => (status === 'SUBSCRIBED' ? resolve() : status !== 'CLOSED' && reject(new Error(`subscribe: ${status}`))))
      })
    }))
    const joinMs = performance.now() - joinStarted

    const latencies: number[] = []
    for (let i = 0; i < messages; i++) {
      const body = `bench message ${i} ${suffix}`
      const arrivals = new Map<number, () => void>()
      const started = performance.now()
      const delivered = Promise.all(Array.from({ length: clients }, (_, index) => new Promise<void>((resolve) => {
        arrivals.set(index, () => {
          latencies.push(performance.now() - started)
          resolve()
        })
      })))
      waiting.set(body, arrivals)
      const response = await post(sender, `/v1/conversations/${conversation.id}/messages`, { body })
      if (response.status !== 201) throw new Error(`POST message: ${response.status} ${await response.text()}`)
      await Promise.race([delivered, new Promise((_, reject) => setTimeout(() => reject(new Error('delivery timed out')), 30_000))])
      waiting.delete(body)
    }
    latencies.sort((a, b) => a - b)
    return { clients, messages, join_ms: Math.round(joinMs), p50: percentile(latencies, 50), p99: percentile(latencies, 99), max: latencies.at(-1)! }
  } finally {
    await Promise.all(subscribers.map((s) => s.realtime.disconnect()))
    await realtime.close()
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()))
    // The bench members leave no trace in the data set.
    await sql`delete from auth.users where id in (select id from app.users where username = any (${names}))`.catch(() => {})
    await sql.end({ timeout: 5 })
    await rm(storageDir, { recursive: true, force: true })
  }
}
