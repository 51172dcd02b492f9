// What each route needs its credential to allow: the authorization table of docs/security.md
// in code. app.authenticate (SQL) decides, in the request's one statement, whether the
// credential allows it; this table only names what to ask for.
import type { Access } from './db.ts'
import type { AppContext } from './context.ts'

/**
 * Routes whose access is not the default of their method (GET reads: `read`, scope public;
 * every other method writes: `write`). Keys are Hono route paths.
 */
const ROUTE_ACCESS: Record<string, Access> = {
  'POST /v1/uploads': 'upload',
  'GET /v1/search/todos': 'search',
  'GET /v1/search/users': 'search',
  'GET /v1/conversations': 'chat',
  'POST /v1/conversations': 'chat',
  'POST /v1/conversations/reading': 'chat',
  'GET /v1/conversations/:conversation_id': 'chat',
  'GET /v1/conversations/:conversation_id/messages': 'chat',
  'POST /v1/conversations/:conversation_id/messages': 'chat',
  'POST /v1/conversations/:conversation_id/reading': 'chat',
  'POST /v1/messages/:message_id/reactions': 'chat',
  'DELETE /v1/messages/:message_id/reactions/:content': 'chat',
  // Subscriptions are an integration's configuration, and their URLs often carry the
  // receiver's own credential: reading them needs what changing them needs (docs/security.md).
  'GET /v1/webhooks/subscriptions': 'write',
  // An export archive holds the member's webhook URLs (above), their e-mail address and mutes
  // (which no scope grants): a read-write API key, or `write` from a first-party app.
  'POST /v1/exports': 'export',
  'GET /v1/exports': 'export',
  'GET /v1/exports/:export_id': 'export',
  // The billing scope's endpoint: any API key, or a token with `billing` (also for a lapsed account).
  'GET /v1/billing': 'billing',
  // A write, but one a lapsed account may make (issue 28: leaving needs no subscription), as it
  // may export its data (above); api.account_delete refuses third-party apps.
  'DELETE /v1/account': 'account',
  // Notifications: OAuth with scope notifications (API keys 403); devices also first-party only.
  'GET /v1/notifications': 'notifications',
  'POST /v1/notifications/reading': 'notifications',
  'POST /v1/notifications/mark_as_read': 'notifications',
  'GET /v1/notification_preferences': 'notifications',
  'PATCH /v1/notification_preferences/:identifier': 'notifications',
  'POST /v1/devices': 'devices',
  'DELETE /v1/devices/:token': 'devices',
}

/** The access a route needs: from the table, else `read` for GET and `write` for the rest. */
export function routeAccess(method: string, routePath: string): Access {
  return ROUTE_ACCESS[`${method} ${routePath}`] ?? (method === 'GET' || method === 'HEAD' ? 'read' : 'write')
}

/** The access the request being handled needs. */
export function accessOf(c: AppContext): Access {
  return routeAccess(c.req.method, c.req.routePath)
}
