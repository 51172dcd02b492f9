// The OAuth endpoints in the OpenAPI document. They speak RFC 6749 (forms in, RFC error shape
// out) rather than the /v1 JSON contract, so their handlers (oauth.ts) parse by hand; these
// registrations only describe them.
import { z } from '@hono/zod-openapi'
import type { OpenAPIHono } from '@hono/zod-openapi'
import type { AppEnv } from '../lib/context.ts'

const scopes = 'Space-separated, from `public write billing notifications chat` (`chat` only for approved apps).'

const OAuthErrorSchema = z.object({
  error: z.string().openapi({ example: 'invalid_grant' }),
  error_description: z.string(),
}).openapi('OAuthError')

const TokenResponseSchema = z.object({
  access_token: z.string().openapi({ description: 'A JWT (HS256) for `Authorization: Bearer` on /v1 and for Realtime.' }),
  token_type: z.literal('Bearer'),
  expires_in: z.number().int().openapi({ example: 3600 }),
  refresh_token: z.string().openapi({ description: 'Single use: each refresh returns a new one. Presenting a used one revokes every token of the grant.' }),
  scope: z.string().openapi({ example: 'public write' }),
}).openapi('OAuthTokenResponse')

const TokenRequestSchema = z.object({
  grant_type: z.enum(['authorization_code', 'refresh_token']),
  code: z.string().optional().openapi({ description: 'authorization_code: the code from the redirect (single use, 2 minutes).' }),
  redirect_uri: z.string().optional().openapi({ description: 'authorization_code: exactly the redirect_uri of the authorization request.' }),
  code_verifier: z.string().optional().openapi({ description: 'authorization_code: the PKCE verifier (required when the request sent a code_challenge).' }),
  refresh_token: z.string().optional().openapi({ description: 'refresh_token: the current refresh token.' }),
  scope: z.string().optional().openapi({ description: `refresh_token: narrower scopes (never wider). ${scopes}` }),
  client_id: z.string().optional().openapi({ description: 'Public clients, and client_secret_post.' }),
  client_secret: z.string().optional().openapi({ description: 'client_secret_post (or use HTTP Basic: client_secret_basic).' }),
}).openapi('OAuthTokenRequest')

const TokenParamSchema = z.object({
  token: z.string(),
  token_type_hint: z.enum(['access_token', 'refresh_token']).optional(),
  client_id: z.string().optional(),
  client_secret: z.string().optional(),
}).openapi('OAuthTokenParameter')

const IntrospectionSchema = z.object({
  active: z.boolean(),
  scope: z.string().optional(),
  client_id: z.string().optional(),
  username: z.string().optional(),
  sub: z.string().optional().openapi({ example: 'user_0f1e2d3c4b5a69788796a5b4c3d2e1f0' }),
  exp: z.number().int().optional(),
  iat: z.number().int().optional(),
  token_type: z.enum(['Bearer', 'refresh_token']).optional(),
}).openapi('OAuthIntrospection')

const TokenInfoSchema = z.object({
  resource_owner_id: z.string().openapi({ example: 'user_0f1e2d3c4b5a69788796a5b4c3d2e1f0' }),
  scope: z.array(z.string()),
  expires_in: z.number().int(),
  application: z.object({ uid: z.string() }),
  created_at: z.number().int().openapi({ description: 'Unix seconds.' }),
}).openapi('OAuthTokenInfo')

const form = (schema: z.ZodTypeAny) => ({ body: { required: true, content: { 'application/x-www-form-urlencoded': { schema } } } })
const json = (schema: z.ZodTypeAny, description: string) => ({ description, content: { 'application/json': { schema } } })
const html = (description: string) => ({ description, content: { 'text/html': { schema: z.string() } } })
const oauthErrors = {
  400: json(OAuthErrorSchema, 'RFC 6749 section 5.2: invalid_request, invalid_grant, invalid_scope, unsupported_grant_type'),
  401: json(OAuthErrorSchema, 'invalid_client: client authentication failed'),
  429: json(OAuthErrorSchema, 'temporarily_unavailable: too many failed requests from this address (Retry-After)'),
}
const clientAuth: Record<string, string[]>[] = [{ clientBasic: [] }, {}]

/** Adds the OAuth endpoints to the app's OpenAPI document. */
export function documentOAuth(app: OpenAPIHono<AppEnv>) {
  const registry = app.openAPIRegistry
  registry.registerComponent('securitySchemes', 'clientBasic', {
    type: 'http', scheme: 'basic', description: 'client_secret_basic: client_id and client_secret (each form-urlencoded).',
  })
  registry.registerPath({
    method: 'get', path: '/oauth/authorize', tags: ['OAuth'], summary: 'Authorization request (the consent page)',
    description: 'RFC 6749 section 4.1.1 with PKCE (RFC 7636, S256; required for public clients). A signed-in member sees the app and each scope in plain words; Approve redirects to `redirect_uri` with `code` and `state`, Deny with `error=access_denied`. A member who approved these scopes (or more) for this app before and has not revoked it is redirected with a code at once (remembered consent), when the redirect assures the app’s identity: a confidential app, or a public app redirecting to https on a named host (RFC 8252 section 8.6; a loopback or private-scheme redirect shows the page every time). Not signed in: a sign-in form. An unknown client or unregistered `redirect_uri` is an error page, never a redirect (docs/oauth.md).',
    request: {
      query: z.object({
        response_type: z.literal('code'), client_id: z.string(), redirect_uri: z.string().openapi({ description: 'Exactly one of the registered URIs.' }),
        scope: z.string().optional().openapi({ description: `${scopes} Without it (or empty): the app’s default scopes, which the operator registered (\`public\` unless said otherwise).` }), state: z.string().optional(),
        code_challenge: z.string().optional(), code_challenge_method: z.literal('S256').optional(),
      }),
    },
    responses: {
      200: html('The sign-in form or the consent page'),
      302: { description: 'To redirect_uri with an error (invalid_request, unsupported_response_type, invalid_scope), once the member is signed in; or with a code when the member approved these scopes for this app before' },
      400: html('Error page: unknown client, unregistered or missing redirect_uri'),
    },
  })
  registry.registerPath({
    method: 'post', path: '/oauth/authorize', tags: ['OAuth'], summary: 'The consent decision (the consent page’s form)',
    description: 'The authorization request’s parameters, `csrf_token` and `decision` (`approve` or `deny`), with the session cookie.',
    request: form(z.object({ decision: z.enum(['approve', 'deny']), csrf_token: z.string(), client_id: z.string(), redirect_uri: z.string() })),
    responses: { 302: { description: 'To redirect_uri with code and state, or error=access_denied' }, 403: html('No session, or a forged form') },
  })
  registry.registerPath({
    method: 'post', path: '/oauth/login', tags: ['OAuth'], summary: 'Sign in for the consent page',
    description: 'Locally `code`, a one-time code from the operator CLI (`login-code --user U`, 10 minutes, single use); in production `supabase_access_token`, the website’s Supabase Auth session (docs/oauth.md). Sets the session cookie (HttpOnly, SameSite=Lax, Secure under https) and returns to the authorization request.',
    request: form(z.object({
      authorize: z.string().optional().openapi({ description: 'The authorization request’s query string.' }),
      return: z.literal('apps').optional().openapi({ description: 'Continue to the apps page (GET /oauth/apps) instead of an authorization request.' }),
      code: z.string().optional(), supabase_access_token: z.string().optional(),
    })),
    responses: { 303: { description: 'Back to GET /oauth/authorize, signed in' }, 400: html('The sign-in form again, with the reason'), 429: html('Too many failed codes from this address') },
  })
  registry.registerPath({
    method: 'get', path: '/oauth/apps', tags: ['OAuth'], summary: 'The apps the member authorized (a page)',
    description: 'For the member signed in as on the consent page (the same session cookie; otherwise the sign-in form): each app they authorized, its scopes, when it was authorized and last used (its newest token), and a Revoke button; Sign out. Not for apps: an HTML page for the member.',
    responses: { 200: html('The list of authorized apps, or the sign-in form') },
  })
  registry.registerPath({
    method: 'post', path: '/oauth/apps', tags: ['OAuth'], summary: 'Revoke an app (the apps page’s form)',
    description: 'Ends the signed-in member’s grant to `client_id`: every token the app holds for them (live access tokens stop at once, Realtime channels close), codes not yet exchanged, and the remembered consent. Needs the session cookie, the page’s `csrf_token`, and our own Origin.',
    request: form(z.object({ client_id: z.string(), csrf_token: z.string() })),
    responses: { 303: { description: 'Back to GET /oauth/apps' }, 403: html('No session, or a forged form') },
  })
  registry.registerPath({
    method: 'post', path: '/oauth/logout', tags: ['OAuth'], summary: 'Sign out of the consent and apps pages',
    description: 'Ends the pages’ session and clears its cookie (apps keep their tokens). With `authorize` (an authorization request’s query string, from the consent page) back to that request’s sign-in form; else to the apps page. Needs the page’s `csrf_token` and our own Origin.',
    request: form(z.object({ csrf_token: z.string(), authorize: z.string().optional() })),
    responses: { 303: { description: 'Back to the authorization request or the apps page, signed out' }, 403: html('A forged form') },
  })
  registry.registerPath({
    method: 'post', path: '/oauth/token', tags: ['OAuth'], summary: 'Token endpoint',
    description: 'RFC 6749 sections 4.1.3 and 6: `authorization_code` (single use; PKCE; the same redirect_uri) and `refresh_token` (rotation: a new refresh token every time; scope may narrow, never widen). Client authentication: client_secret_basic or client_secret_post for confidential clients, client_id alone for public ones. `Cache-Control: no-store`.',
    security: clientAuth,
    request: form(TokenRequestSchema),
    responses: { 200: json(TokenResponseSchema, 'RFC 6749 section 5.1'), ...oauthErrors },
  })
  registry.registerPath({
    method: 'post', path: '/oauth/introspect', tags: ['OAuth'], summary: 'Token introspection (RFC 7662)',
    description: 'Client-authenticated. `{"active": false}` for anything expired, revoked, used, unknown or issued to another client.',
    security: clientAuth,
    request: form(TokenParamSchema),
    responses: { 200: json(IntrospectionSchema, 'The token’s state'), ...oauthErrors },
  })
  registry.registerPath({
    method: 'post', path: '/oauth/revoke', tags: ['OAuth'], summary: 'Token revocation (RFC 7009)',
    description: 'Client-authenticated. Revokes the access or refresh token and every token of its grant (live access tokens stop at once). 200 whether or not the token was known.',
    security: clientAuth,
    request: form(TokenParamSchema),
    responses: { 200: { description: 'Revoked, or nothing to revoke' }, ...oauthErrors },
  })
  registry.registerPath({
    method: 'get', path: '/oauth/token/info', tags: ['OAuth'], summary: 'The access token’s owner, scopes and lifetime',
    security: [{ bearer: [] }],
    responses: {
      200: json(TokenInfoSchema, 'The token'),
      401: json(OAuthErrorSchema, 'invalid_token (RFC 6750): missing, expired, revoked or not ours'),
    },
  })
  registry.registerPath({
    method: 'get', path: '/.well-known/oauth-authorization-server', tags: ['OAuth'], summary: 'Authorization server metadata (RFC 8414)',
    responses: { 200: json(z.record(z.string(), z.unknown()), 'issuer (PUBLIC_URL), endpoints, scopes, grant types, PKCE methods, client authentication methods') },
  })
}
