// Notifications, devices and notification preferences (SPEC "Notifications and devices").
// Notifications are written by triggers (supabase/schemas/90_notifications.sql) and pushed by
// the worker (functions/lib/push.ts); these routes read them and manage where they go.
import { createRouter } from '../lib/router.ts'
import { respond } from '../lib/respond.ts'
import { pageArgs } from '../lib/schemas.ts'
import * as routes from './notifications.routes.ts'

export const notifications = createRouter()
  .openapi(routes.listNotifications, (c) => {
    const query = c.req.valid('query')
    return respond(c, 'api.notifications_list', [query.unread === 'true', ...pageArgs(query)])
  })
  .openapi(routes.readNotifications, (c) => respond(c, 'api.notifications_read', [], { status: 204 }))
  .openapi(routes.markAsRead, (c) => respond(c, 'api.notifications_read', [], { status: 204 }))
  .openapi(routes.registerDevice, (c) => {
    const input = c.req.valid('json')
    return respond(c, 'api.device_register', [input.token, input.platform, input.apns_environment ?? null], { status: 201 })
  })
  .openapi(routes.deleteDevice, (c) => respond(c, 'api.device_delete', [c.req.valid('param').token], { status: 204 }))
  .openapi(routes.listPreferences, (c) => respond(c, 'api.notification_preferences', []))
  .openapi(routes.updatePreference, (c) =>
    respond(c, 'api.notification_preference_update', [c.req.valid('param').identifier, c.req.valid('json').mobile_push_enabled ?? null]))
