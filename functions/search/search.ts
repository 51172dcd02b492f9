// Search: full text over todos and mention autocomplete, for first-party apps only.
import { expandsReactions, fullTextQuery } from '../lib/filters.ts'
import { createRouter } from '../lib/router.ts'
import { respond } from '../lib/respond.ts'
import { pageArgs } from '../lib/schemas.ts'
import * as routes from './search.routes.ts'

export const search = createRouter()
  .openapi(routes.searchTodos, (c) => {
    const query = c.req.valid('query')
    // A missing query is 400 from SQL, after the credential was checked (403 comes first).
    return respond(c, 'api.search_todos', [fullTextQuery(query.query ?? ''), ...pageArgs(query), expandsReactions(c.req.url)], { access: 'search' })
  })
  .openapi(routes.searchUsers, (c) => respond(c, 'api.search_users', [fullTextQuery(c.req.valid('query').query ?? '')], { access: 'search' }))
