// A chat app's subscription, with the real supabase-js client, for the realtime tests: a
// private channel on a topic, every broadcast it receives, and a way to wait for one.
import { createClient, type RealtimeChannel, type SupabaseClient } from '@supabase/supabase-js'
import WebSocket from 'ws'

export type Vsn = '1.0.0' | '2.0.0'

export interface Listener {
  channel: RealtimeChannel
  client: SupabaseClient
  /** The last subscribe status: SUBSCRIBED, CHANNEL_ERROR, TIMED_OUT, CLOSED. */
  status: string
  reason?: string
  events: { event: string; payload: any }[]
  waitFor(event: string, match?: (payload: any) => boolean, timeoutMs?: number): Promise<any>
}

/**
 * Subscribes like a chat app does (setAuth before subscribe, a private channel), resolving once
 * the join is answered (SUBSCRIBED or CHANNEL_ERROR). The client is added to `clients`, for the
 * caller to disconnect after the test.
 */
export async function listen(baseUrl: string, clients: SupabaseClient[], token: string, topic: string, vsn: Vsn = '2.0.0'): Promise<Listener> {
  const client = createClient(baseUrl, 'anon', { realtime: { transport: WebSocket as never, vsn } })
  clients.push(client)
  await client.realtime.setAuth(token)
  const events: { event: string; payload: any }[] = []
  const waiters: { event: string; match: (p: any) => boolean; resolve: (p: any) => void }[] = []
  const channel = client.channel(topic, { config: { private: true, broadcast: { self: false } } })
  channel.on('broadcast', { event: '*' }, (message: { event: string; payload: any }) => {
    events.push({ event: message.event, payload: message.payload })
    for (const w of [...waiters]) {
      if (w.event === message.event && w.match(message.payload)) {
        waiters.splice(waiters.indexOf(w), 1)
        w.resolve(message.payload)
      }
    }
  })
  const listener: Listener = {
    channel, client, status: 'PENDING', events,
    waitFor(event, match = () => true, timeoutMs = 5000) {
      const seen = events.find((e) => e.event === event && match(e.payload))
      if (seen) return Promise.resolve(seen.payload)
      return new Promise((resolve, reject) => {
        // What the client knew at the time, so that a rare failure says where the message was lost.
        const timer = setTimeout(() => reject(new Error(`no ${event} on ${topic} within ${timeoutMs} ms ` +
          `(channel ${channel.state}, socket ${client.realtime.connectionState()}, ${events.length} events received: ` +
          `${events.map((e) => e.event).join(', ') || 'none'})`)), timeoutMs)
        waiters.push({ event, match, resolve: (p) => { clearTimeout(timer); resolve(p) } })
      })
    },
  }
  await new Promise<void>((resolve) => {
    channel.subscribe((status, err) => {
      listener.status = status
      listener.reason = err?.message
      if (status === 'SUBSCRIBED' || status === 'CHANNEL_ERROR' || status === 'TIMED_OUT') resolve()
    })
  })
  return listener
}
