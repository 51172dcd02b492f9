// The operator CLI's commands (DESIGN.md section 2). Projects, accounts, keys and OAuth
// clients are created on the website, which is not part of this API, so operators and the
// test suites use these. Each command returns the one JSON object the CLI prints.
import { parseArgs } from 'node:util'
import type { Sql } from 'postgres'
import { resolveUrlMarkers } from '../functions/lib/db.ts'
import { transaction } from '../functions/lib/sql.ts'
import { newApiKey, randomToken, sha256Hex, signAccessToken, toHex } from '../functions/lib/tokens.ts'

export interface AdminContext {
  sql: Sql
  jwtSecret: string
  publicUrl: string
  /** WEB_URL: base of web url fields; default publicUrl. */
  webUrl?: string
}

/** A usage or input error: the CLI prints {"error": message} on stderr and exits 1. */
export class AdminError extends Error {}

type Options = Record<string, string | string[] | boolean | undefined>
type Command = (ctx: AdminContext, options: Options) => Promise<object>

const ACCESS_TOKEN_SECONDS = 3600
/** approve-deletion runs again after a deadlock with members' concurrent activity, this many times in all. */
const DELETION_ATTEMPTS = 5
const KNOWN_SCOPES = new Set(['public', 'write', 'billing', 'notifications', 'chat'])
const PRIVACY = new Set(['public', 'protected', 'private'])
/**
 * A client id given with --client-id (an app that already ships with one): 1 to 128 letters,
 * digits, '.', '_', '~' or '-' (RFC 3986's unreserved characters: the id travels in URLs, forms
 * and token claims unencoded), starting with a letter or digit (never read as an option). The
 * table's check constraint (app.oauth_clients) says the same.
 */
const CLIENT_ID = /^[A-Za-z0-9][A-Za-z0-9._~-]{0,127}$/
const CLIENT_ID_RULE = '--client-id must be 1 to 128 letters, digits, ".", "_", "~" or "-", starting with a letter or digit'

/** A space- or comma-separated scope list: known scopes only, repeats dropped. */
function scopeList(value: string, option: string): string[] {
  const words = value.split(/[\s,]+/).filter(Boolean)
  const unknown = words.filter((s) => !KNOWN_SCOPES.has(s))
  if (unknown.length) throw new AdminError(`${option}: unknown scope ${unknown.join(', ')}; scopes are ${[...KNOWN_SCOPES].join(' ')}`)
  // In the list's own order, as the consent page and the token's `scope` show them.
  return [...KNOWN_SCOPES].filter((scope) => words.includes(scope))
}

function required(options: Options, name: string): string {
  const value = options[name]
  if (typeof value !== 'string' || value === '') throw new AdminError(`--${name} is required`)
  return value
}

function optional(options: Options, name: string): string | null {
  const value = options[name]
  return typeof value === 'string' && value !== '' ? value : null
}

/** The most rows a listing command prints: one command reads a bounded number, whatever the tables hold. */
const MAX_LIST_LIMIT = 1000

/** --limit of a listing command: 1 to MAX_LIST_LIMIT, default 100. */
function listLimit(options: Options): number {
  const raw = optional(options, 'limit')
  const limit = raw === null ? 100 : Number(raw)
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIST_LIMIT) {
    throw new AdminError(`--limit must be a whole number from 1 to ${MAX_LIST_LIMIT}`)
  }
  return limit
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

function privacy(options: Options): string {
  const value = optional(options, 'privacy') ?? 'public'
  if (!PRIVACY.has(value)) throw new AdminError('--privacy must be public, protected or private')
  return value
}

/** A user named by username or user_ id. */
async function findUser(sql: Sql, ref: string): Promise<{ id: string; username: string }> {
  const [user] = await sql<{ id: string; username: string }[]>`
    select id, username from app.users
    where id = app.from_public_id('user', ${ref}) or lower(username) = lower(${ref})`
  if (!user) throw new AdminError(`no user matches ${JSON.stringify(ref)}`)
  return user
}

async function insertApiKey(sql: Sql, userId: string, readOnly: boolean): Promise<string> {
  const key = newApiKey()
  await sql`insert into app.api_keys (user_id, key_hash, read_only)
            values (${userId}, decode(${await sha256Hex(key)}, 'hex'), ${readOnly})`
  return key
}

/** Runs an api function as `userId` would through the API, for commands that print a resource. */
export async function renderAs(ctx: AdminContext, userId: string, fn: string, args: unknown[]): Promise<unknown> {
  if (!/^api\.[a-z_]+$/.test(fn)) throw new Error(`not an api function: ${fn}`)
  const claims = JSON.stringify({ sub: userId, role: 'authenticated', kind: 'api_key', can_write: true, scopes: ['public', 'write'] })
  const params = args.map((_, i) => `$${i + 1}`).join(', ')
  return await transaction(ctx.sql, async (tx) => {
    await tx`select set_config('role', 'authenticated', true), set_config('request.jwt.claims', ${claims}, true),
                    set_config('app.public_url', ${ctx.publicUrl}, true), set_config('app.web_url', ${ctx.webUrl ?? ctx.publicUrl}, true)`
    // As text, as the HTTP layer reads it: the todos come with URL markers to put in place.
    const [row] = await tx.unsafe(`select ${fn}(${params})::text as body`, args as never[])
    const body = row?.body as string | null | undefined
    return body == null ? body : JSON.parse(resolveUrlMarkers(body, ctx))
  })
}

function friendly(err: unknown): never {
  const e = err as { code?: string; constraint_name?: string; message?: string }
  if (e.code === '23505') throw new AdminError(`already taken (${e.constraint_name ?? 'unique'})`)
  if (e.code === '23514') throw new AdminError(`invalid value (${e.constraint_name ?? 'check'})`)
  if (e.code === '23503') throw new AdminError(`unknown reference (${e.constraint_name ?? 'foreign key'})`)
  throw err
}

const commands: Record<string, { options: Record<string, { type: 'string' | 'boolean'; multiple?: boolean }>; run: Command }> = {
  'create-user': {
    options: {
      username: { type: 'string' }, 'first-name': { type: 'string' }, 'last-name': { type: 'string' },
      privacy: { type: 'string' }, 'time-zone': { type: 'string' }, 'no-subscription': { type: 'boolean' },
    },
    run: async (ctx, o) => {
      const username = required(o, 'username')
      const timeZone = optional(o, 'time-zone') ?? 'UTC'
      const [zone] = await ctx.sql`select 1 from app.time_zones where name = ${timeZone}`
      if (!zone) throw new AdminError(`--time-zone ${JSON.stringify(timeZone)} is not an IANA time zone`)
      return await transaction(ctx.sql, async (tx) => {
        const [auth] = await tx<{ id: string }[]>`
          insert into auth.users (id, aud, role, raw_app_meta_data, raw_user_meta_data)
          values (gen_random_uuid(), 'authenticated', 'authenticated', '{}', ${tx.json({ username })})
          returning id`
        await tx`insert into app.users (id, username, first_name, last_name, privacy, time_zone, subscription_active)
                 values (${auth!.id}, ${username}, ${optional(o, 'first-name')}, ${optional(o, 'last-name')},
                         ${privacy(o)}, ${timeZone}, ${!o['no-subscription']})`.catch(friendly)
        return {
          id: `user_${auth!.id.replace(/-/g, '')}`,
          username,
          api_key: await insertApiKey(tx as unknown as Sql, auth!.id, false),
          read_only_api_key: await insertApiKey(tx as unknown as Sql, auth!.id, true),
        }
      })
    },
  },

  'create-key': {
    options: { user: { type: 'string' }, 'read-only': { type: 'boolean' } },
    run: async (ctx, o) => {
      const user = await findUser(ctx.sql, required(o, 'user'))
      return { api_key: await insertApiKey(ctx.sql, user.id, Boolean(o['read-only'])) }
    },
  },

  'set-subscription': {
    options: { user: { type: 'string' }, active: { type: 'string' } },
    run: async (ctx, o) => {
      const user = await findUser(ctx.sql, required(o, 'user'))
      const active = required(o, 'active')
      if (active !== 'true' && active !== 'false') throw new AdminError('--active must be true or false')
      await ctx.sql`update app.users set subscription_active = ${active === 'true'} where id = ${user.id}`
      return { id: `user_${user.id.replace(/-/g, '')}`, pro: active === 'true' }
    },
  },

  'create-project': {
    options: {
      owner: { type: 'string' }, name: { type: 'string' }, slug: { type: 'string' }, hashtag: { type: 'string' },
      privacy: { type: 'string' }, makers: { type: 'string' }, 'github-url': { type: 'string' },
    },
    run: async (ctx, o) => {
      const owner = await findUser(ctx.sql, required(o, 'owner'))
      const makers = await Promise.all(
        (optional(o, 'makers') ?? '').split(',').map((m) => m.trim()).filter(Boolean).map((m) => findUser(ctx.sql, m)),
      )
      const id = await transaction(ctx.sql, async (tx) => {
        const [project] = await tx<{ id: string }[]>`
          insert into app.projects (owner_id, name, slug, hashtag, privacy, github_url)
          values (${owner.id}, ${required(o, 'name')}, ${optional(o, 'slug')}, ${optional(o, 'hashtag')},
                  ${privacy(o)}, ${optional(o, 'github-url')})
          returning id`.catch(friendly)
        for (const maker of makers) {
          await tx`insert into app.project_makers (project_id, user_id, accepted) values (${project!.id}, ${maker.id}, true)
                   on conflict do nothing`
        }
        return project!.id
      })
      return (await renderAs(ctx, owner.id, 'api.project_get', [`proj_${id.replace(/-/g, '')}`])) as object
    },
  },

  'create-oauth-client': {
    options: {
      name: { type: 'string' }, 'first-party': { type: 'boolean' }, chat: { type: 'boolean' }, public: { type: 'boolean' },
      'redirect-uri': { type: 'string', multiple: true }, 'default-scopes': { type: 'string' }, 'client-id': { type: 'string' },
    },
    run: async (ctx, o) => {
      // Hex, not base64url: an id that starts with '-' would read as an option on the command line.
      // An empty --client-id (an unset variable in a script) is refused, not replaced by a random id.
      const clientId = typeof o['client-id'] === 'string' ? o['client-id'] : toHex(crypto.getRandomValues(new Uint8Array(16)))
      if (!CLIENT_ID.test(clientId)) throw new AdminError(CLIENT_ID_RULE)
      const defaultScopes = scopeList(typeof o['default-scopes'] === 'string' ? o['default-scopes'] : 'public', '--default-scopes')
      if (defaultScopes.length === 0) throw new AdminError('--default-scopes needs at least one scope')
      if (defaultScopes.includes('chat') && !o.chat) throw new AdminError('--default-scopes may include chat only for an app approved for it (--chat)')
      // A public client (desktop, mobile) cannot keep a secret: it gets none and must use PKCE.
      const clientSecret = o.public ? null : randomToken(32)
      const redirects = [...new Set((o['redirect-uri'] as string[] | undefined) ?? [])]
      for (const uri of redirects) {
        let parsed: URL
        try {
          parsed = new URL(uri)
        } catch {
          throw new AdminError(`--redirect-uri ${JSON.stringify(uri)} is not an absolute URI`)
        }
        // RFC 6749 section 3.1.2: no fragment; javascript: and data: would run in our page's place.
        if (parsed.hash || uri.includes('#') || ['javascript:', 'data:', 'vbscript:', 'file:'].includes(parsed.protocol)) {
          throw new AdminError(`--redirect-uri ${JSON.stringify(uri)} may not have a fragment or be a ${parsed.protocol} URI`)
        }
        // RFC 6749 section 3.1.2.1, RFC 8252 section 7.3: the code crosses the network only under
        // TLS; plain http only to the member's own machine (a native app's loopback listener).
        if (parsed.protocol === 'http:' && !['127.0.0.1', '[::1]', 'localhost'].includes(parsed.hostname)) {
          throw new AdminError(`--redirect-uri ${JSON.stringify(uri)} must be https (plain http only for 127.0.0.1, [::1] or localhost)`)
        }
      }
      const name = required(o, 'name')
      const [created] = await ctx.sql<{ client_id: string }[]>`
        insert into app.oauth_clients (client_id, secret_hash, name, first_party, chat_enabled, redirect_uris, default_scopes)
        values (${clientId}, decode(${clientSecret ? await sha256Hex(clientSecret) : null}::text, 'hex'), ${name},
                ${Boolean(o['first-party'])}, ${Boolean(o.chat)}, ${redirects}, ${defaultScopes})
        on conflict (client_id) do nothing
        returning client_id`
      // Never a second app under one id: the id is what the authorization and token endpoints trust.
      if (!created) throw new AdminError(`an OAuth client with --client-id ${clientId} already exists`)
      return { client_id: clientId, client_secret: clientSecret }
    },
  },

  'login-code': {
    options: { user: { type: 'string' } },
    run: async (ctx, o) => {
      const user = await findUser(ctx.sql, required(o, 'user'))
      // 24 random bytes (192 bits): unguessable, still short enough to paste into the sign-in form.
      const code = randomToken(24)
      await ctx.sql`insert into app.oauth_login_codes (code_hash, user_id, expires_at)
                    values (decode(${await sha256Hex(code)}, 'hex'), ${user.id}, now() + interval '10 minutes')`
      return { code }
    },
  },

  'issue-token': {
    options: { user: { type: 'string' }, client: { type: 'string' }, scopes: { type: 'string' } },
    run: async (ctx, o) => {
      const user = await findUser(ctx.sql, required(o, 'user'))
      const scopes = [...new Set(required(o, 'scopes').split(/[\s,]+/).filter(Boolean))]
      const unknown = scopes.filter((s) => !KNOWN_SCOPES.has(s))
      if (unknown.length) throw new AdminError(`unknown scope ${unknown.join(', ')}; scopes are ${[...KNOWN_SCOPES].join(' ')}`)
      const [client] = await ctx.sql<{ id: string; client_id: string; first_party: boolean; chat_enabled: boolean }[]>`
        select id, client_id, first_party, chat_enabled from app.oauth_clients where client_id = ${required(o, 'client')}`
      if (!client) throw new AdminError(`no OAuth client ${JSON.stringify(o.client)}`)
      const jti = crypto.randomUUID()
      const refreshToken = randomToken(32)
      await ctx.sql`insert into app.oauth_tokens (jti, client_id, user_id, scopes, refresh_token_hash, expires_at)
                    values (${jti}, ${client.id}, ${user.id}, ${scopes}, decode(${await sha256Hex(refreshToken)}, 'hex'),
                            now() + make_interval(secs => ${ACCESS_TOKEN_SECONDS}))`
      const accessToken = await signAccessToken(ctx.jwtSecret, {
        sub: `user_${user.id.replace(/-/g, '')}`, jti, scope: scopes.join(' '), client_id: client.client_id,
        first_party: client.first_party, chat: client.chat_enabled,
      }, ACCESS_TOKEN_SECONDS)
      return { access_token: accessToken, refresh_token: refreshToken, token_type: 'Bearer', expires_in: ACCESS_TOKEN_SECONDS, scope: scopes.join(' ') }
    },
  },

  'create-todo': {
    options: { user: { type: 'string' }, body: { type: 'string' }, 'created-at': { type: 'string' } },
    run: async (ctx, o) => {
      const user = await findUser(ctx.sql, required(o, 'user'))
      const createdAt = optional(o, 'created-at')
      if (createdAt !== null && Number.isNaN(Date.parse(createdAt))) throw new AdminError('--created-at must be an ISO 8601 date-time')
      // Inserted as the operator (created_at is not a member-writable column), so the
      // triggers file mentions, counters and the streak exactly as for a todo posted now.
      // With the API's {base_url}, so the webhook body the outbox trigger renders at commit has
      // the same `url`s as the todo's API answer.
      const [todo] = await transaction(ctx.sql, async (tx) => {
        await tx`select set_config('app.public_url', ${ctx.publicUrl}, true), set_config('app.web_url', ${ctx.webUrl ?? ctx.publicUrl}, true)`
        return await tx<{ id: string }[]>`
          insert into app.todos (user_id, body, created_at, updated_at)
          values (${user.id}, ${required(o, 'body')}, coalesce(${createdAt}::timestamptz, now()), coalesce(${createdAt}::timestamptz, now()))
          returning id`
      }).catch(friendly)
      return (await renderAs(ctx, user.id, 'api.todo_get', [`todo_${todo!.id.replace(/-/g, '')}`, false])) as object
    },
  },

  'freeze-streak': {
    options: { user: { type: 'string' }, date: { type: 'string' } },
    run: async (ctx, o) => {
      const user = await findUser(ctx.sql, required(o, 'user'))
      const date = required(o, 'date')
      if (!/^\d{4}-\d{2}-\d{2}$/.test(date) || Number.isNaN(Date.parse(`${date}T00:00:00Z`))) throw new AdminError('--date must be YYYY-MM-DD')
      await ctx.sql`insert into app.streak_freezes (user_id, day) values (${user.id}, ${date}) on conflict do nothing`
      return { user: user.username, date }
    },
  },

  reports: {
    options: { limit: { type: 'string' } },
    run: async (ctx, o) => {
      const limit = listLimit(o)
      const rows = await ctx.sql`
        select app.to_public_id('rep', r.id) as id, u.username as reporter, r.reportable_type, r.reportable_id,
               (r.todo_id is null and r.comment_id is null and r.reported_user_id is null) as target_deleted, r.created_at
        from app.reports r join app.users u on u.id = r.reporter_id
        order by r.created_at desc limit ${limit}`
      return { data: rows.map((r) => ({ ...r, created_at: (r.created_at as Date).toISOString() })) }
    },
  },

  'webhook-deliveries': {
    options: { user: { type: 'string' }, limit: { type: 'string' } },
    run: async (ctx, o) => {
      const user = await findUser(ctx.sql, required(o, 'user'))
      const limit = listLimit(o)
      // The delivery log of the member's subscriptions, newest first; id is the webhook-id sent.
      const rows = await ctx.sql`
        select app.webhook_id(d.subscription_id, d.todo_id) as id, app.to_public_id('hook', d.subscription_id) as subscription_id,
               app.to_public_id('todo', d.todo_id) as todo_id, d.status, d.attempts, d.last_status, d.next_attempt_at
        from app.webhook_deliveries d join app.webhook_subscriptions s on s.id = d.subscription_id
        where s.user_id = ${user.id}
        order by d.created_at desc, d.subscription_id, d.todo_id limit ${limit}`
      return {
        data: rows.map((r) => ({ ...r, next_attempt_at: r.next_attempt_at ? (r.next_attempt_at as Date).toISOString() : null })),
      }
    },
  },

  'deletion-requests': {
    options: {},
    run: async (ctx) => {
      // The review queue, oldest first, with what asked: {"kind":"api_key","api_key_id"} or
      // {"kind":"oauth","client_id"} (a first-party app); null for requests made before it was recorded.
      const rows = await ctx.sql`
        select u.username as user, app.to_public_id('user', u.id) as id, r.requested_at, r.requested_by
        from app.account_deletion_requests r join app.users u on u.id = r.user_id
        order by r.requested_at, r.user_id`
      return {
        data: rows.map((r) => ({
          user: r.user, id: r.id, requested_at: (r.requested_at as Date).toISOString(), requested_by: r.requested_by ?? null,
        })),
      }
    },
  },

  'approve-deletion': {
    options: { user: { type: 'string' } },
    run: async (ctx, o) => {
      const user = await findUser(ctx.sql, required(o, 'user'))
      // One transaction: every row of the member, their credentials with them, and the outbox
      // rows that make the storage worker delete their files (app.delete_account). It locks the
      // member first and their rows as the cascade reaches them, while others keep reacting to
      // and commenting on those rows (locking them first, then the member's row through a
      // mention): a deadlock between the two is possible, and PostgreSQL may pick the deletion to
      // abort. Nothing of it is kept then, so it is simply run again.
      for (let attempt = 1; ; attempt++) {
        try {
          return await transaction(ctx.sql, async (tx) => {
            const [request] = await tx`select 1 from app.account_deletion_requests where user_id = ${user.id} for update`
            if (!request) throw new AdminError(`${user.username} has not asked for their account to be deleted`)
            const [row] = await tx<{ result: { deleted: string } }[]>`select app.delete_account(${user.id}::uuid) as result`
            return row!.result
          })
        } catch (err) {
          const code = (err as { code?: string }).code
          if (attempt >= DELETION_ATTEMPTS || (code !== '40P01' && code !== '40001')) throw err
          await new Promise((resolve) => setTimeout(resolve, 100 * attempt))
        }
      }
    },
  },

  'reject-deletion': {
    options: { user: { type: 'string' } },
    run: async (ctx, o) => {
      const user = await findUser(ctx.sql, required(o, 'user'))
      const rows = await ctx.sql`delete from app.account_deletion_requests where user_id = ${user.id} returning user_id`
      if (rows.length === 0) throw new AdminError(`${user.username} has no pending deletion request`)
      return { user: user.username, rejected: true }
    },
  },

  'add-web-push-subscription': {
    options: { user: { type: 'string' }, endpoint: { type: 'string' }, p256dh: { type: 'string' }, auth: { type: 'string' } },
    run: async (ctx, o) => {
      const user = await findUser(ctx.sql, required(o, 'user'))
      const endpoint = required(o, 'endpoint')
      const p256dh = required(o, 'p256dh')
      const auth = required(o, 'auth')
      let url: URL
      try {
        url = new URL(endpoint)
      } catch {
        throw new AdminError('--endpoint must be an absolute URL (the PushSubscription endpoint)')
      }
      if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new AdminError('--endpoint must be an https URL')
      // keys.p256dh: the browser's P-256 public key (65 bytes, uncompressed); keys.auth: 16 bytes.
      const bytes = (value: string) => /^[A-Za-z0-9_-]+={0,2}$/.test(value) ? Buffer.from(value, 'base64url').length : -1
      if (bytes(p256dh) !== 65) throw new AdminError('--p256dh must be the subscription\'s keys.p256dh (base64url, 65 bytes)')
      if (bytes(auth) !== 16) throw new AdminError('--auth must be the subscription\'s keys.auth (base64url, 16 bytes)')
      // An endpoint belongs to one account: subscribing it again (another account signed in on
      // that browser) moves it, and what was queued for the previous account is dropped.
      const [row] = await transaction(ctx.sql, async (tx) => {
        await tx`delete from app.push_deliveries d using app.web_push_subscriptions w
                 where d.web_subscription_id = w.id and w.endpoint = ${url.href} and w.user_id <> ${user.id}`
        return await tx<{ id: string; created_at: Date }[]>`
          insert into app.web_push_subscriptions (user_id, endpoint, p256dh, auth)
          values (${user.id}, ${url.href}, ${p256dh}, ${auth})
          on conflict (endpoint) do update set user_id = excluded.user_id, p256dh = excluded.p256dh, auth = excluded.auth
          returning id, created_at`.catch(friendly)
      })
      return { id: row!.id, user: user.username, endpoint: url.href, created_at: row!.created_at.toISOString() }
    },
  },

  'revoke-token': {
    options: { jti: { type: 'string' }, token: { type: 'string' } },
    run: async (ctx, o) => {
      let jti = optional(o, 'jti')
      const token = optional(o, 'token')
      if (!jti && token) {
        try {
          jti = (JSON.parse(atob((token.split('.')[1] ?? '').replace(/-/g, '+').replace(/_/g, '/'))) as { jti?: string }).jti ?? null
        } catch {
          throw new AdminError('--token is not a JWT')
        }
      }
      if (!jti) throw new AdminError('--token or --jti is required')
      // By the primary key: `jti::text = …` read every token ever issued.
      if (!UUID.test(jti)) throw new AdminError(`no token with jti ${jti}`)
      const rows = await ctx.sql<{ jti: string }[]>`
        update app.oauth_tokens set revoked_at = coalesce(revoked_at, now()) where jti = ${jti}::uuid returning jti`
      if (rows.length === 0) throw new AdminError(`no token with jti ${jti}`)
      return { revoked: rows[0]!.jti }
    },
  },
}

export const COMMAND_NAMES = Object.keys(commands)

/** Parses `argv` (command first) and runs it. */
export async function runAdmin(ctx: AdminContext, argv: string[]): Promise<object> {
  const [name, ...rest] = argv
  const command = name ? commands[name] : undefined
  if (!command) throw new AdminError(`unknown command ${JSON.stringify(name ?? '')}; commands: ${COMMAND_NAMES.join(', ')}`)
  let values: Options
  try {
    values = parseArgs({ args: rest, options: command.options, strict: true, allowPositionals: false }).values as Options
  } catch (err) {
    throw new AdminError((err as Error).message)
  }
  return await command.run(ctx, values)
}
