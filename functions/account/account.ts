// The account: asking for its deletion (reviewed by the operator's team, CLI approve-deletion /
// reject-deletion) and the billing scope's endpoint.
import { createRouter } from '../lib/router.ts'
import { respond } from '../lib/respond.ts'
import * as routes from './account.routes.ts'

export const account = createRouter()
  .openapi(routes.deleteAccount, (c) => respond(c, 'api.account_delete', [], { status: 204 }))
  .openapi(routes.getBilling, (c) => respond(c, 'api.billing_get', [c.var.deps.upgradeUrl]))
