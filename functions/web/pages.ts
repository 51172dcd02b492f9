// What a browser gets at the URLs the API hands out besides /v1: the API reference (/docs, its
// script served from the installed package, so the page works offline), the web pages of
// members, todos and projects (/@username, /todos/{n}, /projects/{slug}: minimal, escaped,
// server-rendered, as an anonymous visitor may see them), and GET /health.
import { Scalar } from '@scalar/hono-api-reference'
import { Hono } from 'hono'
import type { AppEnv } from '../lib/context.ts'
import { appLink } from '../lib/links.ts'

/** The pinned @scalar/api-reference whose browser bundle /docs/scalar.js serves (package.json). */
export const SCALAR_VERSION = '1.46.4'

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (ch) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[ch]!)
}

interface PageTodo { body: string; created_at: string; url: string }
interface Page {
  kind: 'user' | 'todo' | 'project'
  title: string
  url: string
  username?: string
  bio?: string | null
  pitch?: string | null
  description?: string | null
  image?: string
  todos_hidden?: boolean
  todos?: PageTodo[]
  body?: string
  created_at?: string
  author?: { username: string; url: string }
  reactions_count?: number
  comments_count?: number
  attachments?: { filename: string; url: string }[]
}

const PAGE_CSP = "default-src 'none'; img-src * data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

function document(title: string, main: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:2rem auto;padding:0 1rem;color:#111}img{border-radius:50%}li{margin:.5rem 0}time{color:#666;font-size:.9em}</style>
</head>
<body>
${main}
</body>
</html>
`
}

const time = (iso: string) => `<time datetime="${escapeHtml(iso)}">${escapeHtml(iso.slice(0, 10))}</time>`
const todoList = (todos: PageTodo[]) =>
  `<ul>${todos.map((t) => `<li><a href="${escapeHtml(t.url)}">${escapeHtml(t.body)}</a> ${time(t.created_at)}</li>`).join('')}</ul>`

function render(page: Page): string {
  const image = page.image ? `<img src="${escapeHtml(page.image)}" alt="" width="96" height="96">` : ''
  if (page.kind === 'todo') {
    const files = (page.attachments ?? []).map((a) => `<li><a href="${escapeHtml(a.url)}">${escapeHtml(a.filename)}</a></li>`).join('')
    return document(page.title, `<article>
<p>${escapeHtml(page.body ?? '')}</p>
<p>by <a href="${escapeHtml(page.author!.url)}">@${escapeHtml(page.author!.username)}</a> ${time(page.created_at!)} · ${page.reactions_count} likes · ${page.comments_count} comments</p>
${files ? `<ul>${files}</ul>` : ''}
</article>`)
  }
  const about = [page.bio, page.pitch, page.description].filter((t): t is string => Boolean(t)).map((t) => `<p>${escapeHtml(t)}</p>`).join('')
  const heading = page.kind === 'user' ? `${escapeHtml(page.title)} <small>@${escapeHtml(page.username!)}</small>` : escapeHtml(page.title)
  const todos = page.todos_hidden ? '<p>These todos are visible to approved followers only.</p>' : todoList(page.todos ?? [])
  return document(page.title, `${image}<h1>${heading}</h1>${about}${todos}`)
}

function html(body: string, status: 200 | 404 | 503): Response {
  return new Response(body, {
    status,
    headers: {
      'content-type': 'text/html; charset=utf-8',
      'content-security-policy': PAGE_CSP,
      'x-content-type-options': 'nosniff',
      'cache-control': 'public, max-age=60',
    },
  })
}

const notFoundPage = () => html(document('Not found', '<h1>Not found</h1><p>There is nothing here, or it is not public.</p>'), 404)

export const web = new Hono<AppEnv>()

async function page(c: { var: AppEnv['Variables'] }, kind: Page['kind'], ref: string): Promise<Response> {
  const { sql, publicUrl, webUrl } = c.var.deps
  const [row] = await sql.unsafe(
    `with ctx as materialized (select set_config('app.public_url', $3::text, true), set_config('app.web_url', $4::text, true))
     select app.web_page($1::text, $2::text)::text as page from ctx`,
    [kind, ref, publicUrl, webUrl ?? publicUrl] as never[],
  )
  if (!row?.page) return notFoundPage()
  return html(render(JSON.parse(row.page as string) as Page), 200)
}

web.get('/:handle{@[A-Za-z0-9_]{1,39}}', (c) => page(c, 'user', c.req.param('handle').slice(1)))
web.get('/todos/:number{[0-9]{1,18}}', (c) => page(c, 'todo', c.req.param('number')))
web.get('/projects/:slug{[A-Za-z0-9_-]{1,64}}', (c) => page(c, 'project', c.req.param('slug')))

/** GET /health: 200 when the database answers within 2 seconds, else 503 {error}. */
web.get('/health', async (c) => {
  const check = c.var.deps.sql`select 1 as ok`.then(() => true, () => false)
  const timeout = new Promise<false>((resolve) => setTimeout(() => resolve(false), 2_000))
  const ok = await Promise.race([check, timeout])
  if (!ok) return c.json({ error: 'The database is not reachable.' }, 503, { 'retry-after': '5', 'cache-control': 'no-store' })
  return c.json({ status: 'ok' }, 200, { 'cache-control': 'no-store' })
})

/**
 * /docs and its script: the Scalar reference, loaded from this server, never from a CDN. The
 * page's links (the script, the OpenAPI document) are PUBLIC_URL's (appLink), so they lead back
 * to the function behind Supabase's gateway (/functions/v1/api/…), not to the /api/… it sees.
 */
export function docs(publicUrl: string) {
  const routes = new Hono<AppEnv>()
  routes.get('/docs', Scalar({
    url: appLink(publicUrl, '/v1/openapi.json'),
    pageTitle: 'Todo-Sharing Service API',
    cdn: appLink(publicUrl, `/docs/scalar.js?v=${SCALAR_VERSION}`),
    withDefaultFonts: false,
    telemetry: false,
    // Scalar's "Ask AI" agent: it fetches Scalar's API registry through proxy.scalar.com as the
    // page opens (1.46), and would send the document and questions to Scalar. Nothing leaves.
    agent: { disabled: true },
  }))
  routes.get('/docs/scalar.js', async (c) => {
    const script = await c.var.deps.docsScript?.()
    if (!script) return c.json({ error: 'The API reference script is not installed here (see docs/deploy.md).' }, 404)
    return c.body(script as never, 200, {
      'content-type': 'text/javascript; charset=utf-8',
      'cache-control': 'public, max-age=86400',
      etag: `W/"scalar-${SCALAR_VERSION}"`,
    })
  })
  return routes
}
