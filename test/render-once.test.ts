// Issue 27: render once, serve many. Users, projects, mentions and attachments are rendered when
// their row is written (stored generated columns: app.users.card,
// app.projects.card, app.uploads.card) and a page is JSON text concatenated from
// them (app.todos_text, app.comments_text). This proves the answers did not change: the renderer
// as it was before (test/support/reference-renderer.sql, every page built as jsonb from the
// tables) and the new one render every todo, comment, user and project for every member after
// random sequences of writes, and must give the same JSON, value for value. Each comparison runs right after the writes,
// in a new transaction: a rendering older than the committed rows it reads would differ.
import { readFile } from 'node:fs/promises'
import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type TestWorld, startWorld } from './support/app.ts'
import { asMember } from './support/sql.ts'
import { resolveUrlMarkerBytes, resolveUrlMarkers } from '../functions/lib/db.ts'

let world: TestWorld
let sql: TestWorld['sql']

interface Member { id: string; username: string; apiKey: string }
const members: Member[] = []
const projects: string[] = []

/** What a write can put in a text: quotes, backslashes, non-ASCII, emoji and control characters (chr(1) and chr(2) are the URL markers). */
const awkward = fc.oneof(
  fc.constantFrom('"quoted"', 'back\\slash', 'tab\there', 'new\nline', '\u0001marker', '\u0002web', 'é ü ß', '日本語', '🎉', '</script>', '{"x":1}', ''),
  fc.string({ maxLength: 12 }).map((s) => s.replace(/\u0000/g, '')),
)
const maybe = <T>(arb: fc.Arbitrary<T>) => fc.option(arb, { nil: null, freq: 3 })
const index = fc.nat({ max: 1000 })
const privacy = fc.constantFrom('public', 'protected', 'private')

type Action =
  | { kind: 'post'; author: number; words: string; mention: number; tag: number; minutesAgo: number }
  | { kind: 'profile'; member: number; first: string | null; last: string | null; bio: string | null; location: string | null; avatar: boolean; header: boolean; color: string | null }
  | { kind: 'rename'; member: number; suffix: number }
  | { kind: 'privacy'; member: number; privacy: string }
  | { kind: 'subscription'; member: number }
  | { kind: 'project'; project: number; name: string; slug: boolean; privacy: string; logo: boolean; archived: boolean; color: string | null }
  | { kind: 'react'; member: number; todo: number }
  | { kind: 'comment'; member: number; todo: number; words: string; mention: number; tag: number; reply: number | null }
  | { kind: 'react_comment'; member: number; comment: number }
  | { kind: 'follow'; a: number; b: number }
  | { kind: 'request'; a: number; b: number }
  | { kind: 'mute'; a: number; b: number }
  | { kind: 'follow_project'; member: number; project: number }
  | { kind: 'maker'; member: number; project: number; accepted: boolean }
  | { kind: 'attach'; todo: number; width: number | null; octet: boolean; comment: number | null }
  | { kind: 'measure'; upload: number; width: number; height: number }
  | { kind: 'edit'; todo: number; words: string; mention: number; tag: number }
  | { kind: 'delete'; todo: number }
  | { kind: 'uncard'; todo: number }
  | { kind: 'backfill'; batch: number }
  | { kind: 'message'; a: number; b: number; words: string; client: boolean; attach: boolean }
  | { kind: 'react_message'; member: number; message: number; emoji: number }

const action: fc.Arbitrary<Action> = fc.oneof(
  fc.record({ kind: fc.constant('post' as const), author: index, words: awkward, mention: index, tag: index, minutesAgo: fc.nat({ max: 60 * 24 * 3 }) }),
  fc.record({ kind: fc.constant('profile' as const), member: index, first: maybe(awkward), last: maybe(awkward), bio: maybe(awkward), location: maybe(awkward), avatar: fc.boolean(), header: fc.boolean(), color: maybe(fc.constantFrom('#A1B2C3', 'ffeedd', 'not a colour')) }),
  fc.record({ kind: fc.constant('rename' as const), member: index, suffix: fc.nat({ max: 99999 }) }),
  fc.record({ kind: fc.constant('privacy' as const), member: index, privacy }),
  fc.record({ kind: fc.constant('subscription' as const), member: index }),
  fc.record({ kind: fc.constant('project' as const), project: index, name: awkward, slug: fc.boolean(), privacy, logo: fc.boolean(), archived: fc.boolean(), color: maybe(fc.constantFrom('#123456', 'nope')) }),
  fc.record({ kind: fc.constant('react' as const), member: index, todo: index }),
  fc.record({ kind: fc.constant('comment' as const), member: index, todo: index, words: awkward, mention: index, tag: index, reply: maybe(index) }),
  fc.record({ kind: fc.constant('react_comment' as const), member: index, comment: index }),
  fc.record({ kind: fc.constant('follow' as const), a: index, b: index }),
  fc.record({ kind: fc.constant('request' as const), a: index, b: index }),
  fc.record({ kind: fc.constant('mute' as const), a: index, b: index }),
  fc.record({ kind: fc.constant('follow_project' as const), member: index, project: index }),
  fc.record({ kind: fc.constant('maker' as const), member: index, project: index, accepted: fc.boolean() }),
  fc.record({ kind: fc.constant('attach' as const), todo: index, width: maybe(fc.integer({ min: 1, max: 4000 })), octet: fc.boolean(), comment: maybe(index) }),
  fc.record({ kind: fc.constant('measure' as const), upload: index, width: fc.integer({ min: 1, max: 4000 }), height: fc.integer({ min: 1, max: 4000 }) }),
  fc.record({ kind: fc.constant('edit' as const), todo: index, words: awkward, mention: index, tag: index }),
  fc.record({ kind: fc.constant('delete' as const), todo: index }),
  fc.record({ kind: fc.constant('uncard' as const), todo: index }),
  fc.record({ kind: fc.constant('backfill' as const), batch: fc.integer({ min: 1, max: 3 }) }),
  fc.record({ kind: fc.constant('message' as const), a: index, b: index, words: awkward, client: fc.boolean(), attach: fc.boolean() }),
  fc.record({ kind: fc.constant('react_message' as const), member: index, message: index, emoji: fc.nat({ max: 4 }) }),
)

const pick = <T>(list: T[], i: number): T => list[i % list.length]!

async function ids(table: 'todos' | 'uploads' | 'comments' | 'messages'): Promise<string[]> {
  const rows = await sql.unsafe(`select id from app.${table} order by created_at, id`)
  return rows.map((r) => r.id as string)
}

async function hashtagOf(project: string): Promise<string> {
  const [row] = await sql`select hashtag from app.projects where id = ${project}`
  return row!.hashtag as string
}

/** The cards' backfill from the first block again (after a change of app.todo_card, a migration does this). */
async function restartCardWalk(): Promise<void> {
  await sql`update app.todo_card_backfill set next_block = 0, skipped = false, done = false`
}

/** One call of the cards' backfill over `blocks` heap blocks. */
async function walkCards(blocks: number): Promise<{ carded: number; done: boolean }> {
  const [row] = await sql`select carded, done from app.render_todo_cards(${blocks})`
  return { carded: Number(row!.carded), done: row!.done as boolean }
}

/** The backfill's calls until it says done: how many todos it carded, in how many calls. */
async function walkCardsToEnd(blocks: number): Promise<{ carded: number; statements: number }> {
  let carded = 0
  let statements = 0
  for (let done = false; !done; statements++) {
    const step = await walkCards(blocks)
    carded += step.carded
    done = step.done
  }
  return { carded, statements }
}

/** One write, straight to the tables (triggers and generated columns run as on the API's writes). */
async function apply(a: Action): Promise<void> {
  const todos = await ids('todos')
  switch (a.kind) {
    case 'post': {
      const author = pick(members, a.author)
      const body = `${a.words} @${pick(members, a.mention).username} #${await hashtagOf(pick(projects, a.tag))} done`
      await sql`insert into app.todos (user_id, body, created_at) values (${author.id}, ${body}, now() - make_interval(mins => ${a.minutesAgo}))`
      return
    }
    case 'profile':
      await sql`update app.users set first_name = ${a.first}, last_name = ${a.last}, bio = ${a.bio}, location = ${a.location},
                  avatar_key = ${a.avatar ? 'avatars/a"b\\c.png' : null}, header_key = ${a.header ? 'headers/h.png' : null},
                  header_color = ${a.color} where id = ${pick(members, a.member).id}`
      return
    case 'rename': {
      const member = pick(members, a.member)
      member.username = `m${a.suffix}_${members.indexOf(member)}`
      await sql`update app.users set username = ${member.username} where id = ${member.id}`
      return
    }
    case 'privacy':
      await sql`update app.users set privacy = ${a.privacy}::app.privacy where id = ${pick(members, a.member).id}`
      return
    case 'subscription':
      await sql`update app.users set subscription_active = not subscription_active where id = ${pick(members, a.member).id}`
      return
    case 'project': {
      const project = pick(projects, a.project)
      const slug = a.slug ? `p-${projects.indexOf(project)}-${a.name.length}` : null
      await sql`update app.projects set name = ${a.name.slice(0, 100) || 'x'}, slug = ${slug}, privacy = ${a.privacy}::app.privacy,
                  logo_key = ${a.logo ? 'logos/l.png' : null}, archived = ${a.archived}, header_color = ${a.color} where id = ${project}`
      return
    }
    case 'react': {
      if (todos.length === 0) return
      const [member, todo] = [pick(members, a.member).id, pick(todos, a.todo)]
      const removed = await sql`delete from app.reactions where todo_id = ${todo} and user_id = ${member} returning id`
      if (removed.length === 0) await sql`insert into app.reactions (user_id, todo_id) values (${member}, ${todo})`
      return
    }
    case 'comment': {
      if (todos.length === 0) return
      const todo = pick(todos, a.todo)
      // A reply names a comment on the same todo (when it has one).
      const siblings = (await sql`select id from app.comments where todo_id = ${todo} order by created_at, id`).map((r) => r.id as string)
      const parent = a.reply === null || siblings.length === 0 ? null : pick(siblings, a.reply)
      const body = `${a.words} @${pick(members, a.mention).username} #${await hashtagOf(pick(projects, a.tag))} nice`
      await sql`insert into app.comments (todo_id, user_id, parent_id, body) values (${todo}, ${pick(members, a.member).id}, ${parent}, ${body})`
      return
    }
    case 'react_comment': {
      const comments = await ids('comments')
      if (comments.length === 0) return
      const [member, comment] = [pick(members, a.member).id, pick(comments, a.comment)]
      const removed = await sql`delete from app.reactions where comment_id = ${comment} and user_id = ${member} returning id`
      if (removed.length === 0) await sql`insert into app.reactions (user_id, comment_id) values (${member}, ${comment})`
      return
    }
    case 'follow':
    case 'request':
    case 'mute': {
      const [x, y] = [pick(members, a.a).id, pick(members, a.b).id]
      if (x === y) return
      const [table, left, right] = a.kind === 'follow' ? ['user_follows', 'follower_id', 'followee_id']
        : a.kind === 'request' ? ['user_follow_requests', 'requester_id', 'followee_id'] : ['mutes', 'user_id', 'muted_user_id']
      const removed = await sql.unsafe(`delete from app.${table} where ${left} = $1 and ${right} = $2 returning 1`, [x, y])
      if (removed.length === 0) await sql.unsafe(`insert into app.${table} (${left}, ${right}) values ($1, $2)`, [x, y])
      return
    }
    case 'follow_project': {
      const [member, project] = [pick(members, a.member).id, pick(projects, a.project)]
      const removed = await sql`delete from app.project_follows where user_id = ${member} and project_id = ${project} returning 1`
      if (removed.length === 0) await sql`insert into app.project_follows (user_id, project_id) values (${member}, ${project})`
      return
    }
    case 'maker':
      await sql`insert into app.project_makers (project_id, user_id, accepted) values (${pick(projects, a.project)}, ${pick(members, a.member).id}, ${a.accepted})
                on conflict (project_id, user_id) do update set accepted = excluded.accepted`
      return
    case 'attach': {
      if (todos.length === 0) return
      const todo = pick(todos, a.todo)
      // Onto a comment (its writer's file) or onto a todo (its creator's).
      const comments = a.comment === null ? [] : await ids('comments')
      const comment = comments.length === 0 ? null : pick(comments, a.comment!)
      await sql`insert into app.uploads (user_id, key, filename, byte_size, checksum, content_type, width, height, todo_id, comment_id, attached_at, detected_type)
                select x.user_id, gen_random_uuid() || '/n"o te.txt', 'n"o te.txt', 12, decode(md5('x'), 'hex'),
                       ${a.octet ? 'application/octet-stream' : 'image/png'}, ${a.width}, ${a.width === null ? null : 3}, x.todo_id, x.comment_id, now(),
                       ${a.octet ? 'text/plain' : null}
                from (select t.user_id, t.id as todo_id, null::uuid as comment_id from app.todos t where t.id = ${todo} and ${comment}::uuid is null
                      union all
                      select c.user_id, null, c.id from app.comments c where c.id = ${comment}) x`
      return
    }
    case 'measure': {
      const uploads = await ids('uploads')
      if (uploads.length === 0) return
      await sql`update app.uploads set width = ${a.width}, height = ${a.height}, measured_at = now() where id = ${pick(uploads, a.upload)}`
      return
    }
    case 'edit': {
      if (todos.length === 0) return
      const body = `${a.words} @${pick(members, a.mention).username} #${await hashtagOf(pick(projects, a.tag))} edited`
      await sql`update app.todos set body = ${body} where id = ${pick(todos, a.todo)}`
      return
    }
    case 'delete':
      if (todos.length > 3) await sql`delete from app.todos where id = ${pick(todos, a.todo)}`
      return
    case 'uncard':
      // A todo as it was before app.todos.card existed (written without the triggers).
      if (todos.length === 0) return
      await sql.begin(async (tx) => {
        await tx`set local session_replication_role = replica`
        await tx`update app.todos set card = null where id = ${pick(todos, a.todo)}`
      })
      return
    case 'backfill':
      // The backfill, from the first block, one statement.
      await restartCardWalk()
      await walkCards(a.batch)
      return
    case 'message': {
      // A direct message from a to b (their conversation opened if need be), maybe with a client id and a file.
      const [from, to] = [pick(members, a.a).id, pick(members, a.b).id]
      if (from === to) return
      // As app.open_conversation does it for the requesting member: the pair and both sides.
      await sql`with pair as (insert into app.conversations (user_low, user_high, started_by)
                              values (least(${from}::uuid, ${to}::uuid), greatest(${from}::uuid, ${to}::uuid), ${from})
                              on conflict (user_low, user_high) do nothing returning id)
                insert into app.conversation_members (conversation_id, user_id, other_user_id)
                select pair.id, x.a, x.b from pair, (values (${from}::uuid, ${to}::uuid), (${to}::uuid, ${from}::uuid)) x(a, b)`
      const [opened] = await sql`select id as conversation_id from app.conversations
                                 where user_low = least(${from}::uuid, ${to}::uuid) and user_high = greatest(${from}::uuid, ${to}::uuid)`
      const [message] = await sql`insert into app.messages (conversation_id, user_id, body, client_message_id)
                                  values (${opened!.conversation_id}, ${from}, ${a.words}, ${a.client ? crypto.randomUUID() : null}) returning id`
      if (a.attach) {
        await sql`insert into app.uploads (user_id, key, filename, byte_size, checksum, content_type, width, height, message_id, attached_at)
                  values (${from}, gen_random_uuid() || '/p"ic.png', 'p"ic.png', 99, decode(md5('y'), 'hex'), 'image/png', 4, 3, ${message!.id}, now())`
      }
      return
    }
    case 'react_message': {
      // A participant's emoji on a message, toggled.
      const messages = await ids('messages')
      if (messages.length === 0) return
      const message = pick(messages, a.message)
      const [conv] = await sql`select c.user_low, c.user_high from app.messages m join app.conversations c on c.id = m.conversation_id where m.id = ${message}`
      const member = a.member % 2 ? conv!.user_low : conv!.user_high
      const emoji = ['👍', '❤️', '😂', '🔥', '🙏'][a.emoji]!
      const removed = await sql`delete from app.message_reactions where message_id = ${message} and user_id = ${member} and content = ${emoji} returning 1`
      if (removed.length === 0) await sql`insert into app.message_reactions (message_id, user_id, content) values (${message}, ${member}, ${emoji})`
      return
    }
  }
}

/** How many messages the comparisons saw (each as one participant sees it). */
let messagesCompared = 0
/** How many (viewer, todo with comments) totals the comparisons saw, and how many were below the todo's comments_count (hidden or muted comments). */
const commentTotals = { compared: 0, fewer: 0 }

/** Every todo, user and project, as every member sees them, by both renderers; compared as JSON values. */
async function compareForEveryone(label: string): Promise<number> {
  const todos = await ids('todos')
  const users = members.map((m) => m.id)
  let compared = 0
  for (const viewer of members) {
    // A chat token's claims (app.can_chat) too, so that the viewer reads their conversations' messages.
    const row = await asMember(sql, { sub: viewer.id, chat: true, scopes: ['public', 'write', 'chat'] }, async (tx) => {
      // A base URL that needs escaping inside a JSON string: the markers' replacement must escape it.
      await tx`select set_config('app.public_url', ${'http://api.test/a"b\\c'}, true), set_config('app.web_url', ${'https://web.test/x"y'}, true)`
      const [r] = await tx`
        select reference.todos_json(${todos}::uuid[], false) as old_plain,
               app.resolve_urls(app.todos_text(${todos}::uuid[], false))::jsonb as new_plain,
               reference.todos_json(${todos}::uuid[], true) as old_expanded,
               app.resolve_urls(app.todos_text(${todos}::uuid[], true))::jsonb as new_expanded,
               (select jsonb_object_agg(u.id, u.body) from reference.users_json(${users}::uuid[]) u) as old_users,
               (select jsonb_object_agg(u.id, u.body) from app.users_json(${users}::uuid[]) u) as new_users,
               (select jsonb_object_agg(u.id, app.resolve_urls(api.user_get(u.username))::jsonb) from app.users u where u.id = any(${users}::uuid[])) as new_user_singles,
               (select jsonb_object_agg(p.id, p.body) from reference.projects_json(${projects}::uuid[]) p) as old_projects,
               (select jsonb_object_agg(p.id, p.body) from app.projects_json(${projects}::uuid[]) p) as new_projects,
               (select jsonb_agg(app.resolve_urls(app.todo_text(t))::jsonb order by n) from unnest(${todos}::uuid[]) with ordinality x(t, n)) as new_singles,
               (select jsonb_agg(reference.todos_json(array[t], false) -> 0 order by n) from unnest(${todos}::uuid[]) with ordinality x(t, n)) as old_singles,
               (select jsonb_agg(reference.comment_json(c) order by c.todo_id, c.created_at, c.id) from app.comments c) as old_comments,
               app.resolve_urls(app.comments_text(array(select c.id from app.comments c order by c.todo_id, c.created_at, c.id)))::jsonb as new_comments,
               (select jsonb_agg(app.comment_json(c) order by c.todo_id, c.created_at, c.id) from app.comments c) as new_comment_singles,
               (select jsonb_agg(r.body order by p.created_at desc, p.id desc)
                  from app.projects p join reference.projects_json(array(select id from app.projects)) r on r.id = p.id) as old_project_page,
               (select jsonb_agg(reference.message_json(m) order by m.conversation_id, m.created_at desc, m.id desc) from app.messages m) as old_messages,
               app.resolve_urls(app.messages_text(array(select m.id from app.messages m order by m.conversation_id, m.created_at desc, m.id desc)))::jsonb as new_messages,
               (select jsonb_agg(app.message_json(m) order by m.conversation_id, m.created_at desc, m.id desc) from app.messages m) as new_message_singles,
               (select jsonb_agg(reference.conversation_json(c) order by c.id) from app.conversations c) as old_conversations,
               (select jsonb_agg(app.resolve_urls(t.body)::jsonb order by t.n)
                  from app.conversation_texts(array(select c.id from app.conversations c order by c.id)) t) as new_conversations,
               (select jsonb_agg(app.resolve_urls(api.conversation_get(app.to_public_id('conversation', c.id)))::jsonb order by c.id)
                  from app.conversations c) as new_conversation_singles,
               -- total_count of a todo's comments and of a conversation's messages, kept on write,
               -- against a recount through the policies (as the viewer: what the pages hold).
               (select jsonb_object_agg(t.id, (app.resolve_urls(api.todo_comments(app.to_public_id('todo', t.id), 100, null))::jsonb ->> 'total_count')::int)
                  from app.todos t where t.comments_count > 0) as new_comment_totals,
               (select jsonb_object_agg(t.id, (select count(*) from app.comments c where c.todo_id = t.id
                                                 and not exists (select 1 from app.mutes m where m.user_id = ${viewer.id} and m.muted_user_id = c.user_id)))
                  from app.todos t where t.comments_count > 0) as old_comment_totals,
               (select jsonb_object_agg(t.id, t.comments_count) from app.todos t where t.comments_count > 0) as comments_counts,
               -- The comments the policy lets the viewer see, against the policy before author_privacy.
               (select coalesce(jsonb_agg(c.id order by c.id), '[]') from app.comments c) as comments_seen,
               (select coalesce(jsonb_agg(id order by id), '[]') from reference.comments_seen_before(${viewer.id}) id) as comments_seen_before,
               (select jsonb_object_agg(c.id, (app.resolve_urls(api.messages_list(app.to_public_id('conversation', c.id), 100, null))::jsonb ->> 'total_count')::int)
                  from app.conversations c) as new_message_totals,
               (select jsonb_object_agg(c.id, (select count(*) from app.messages m where m.conversation_id = c.id)) from app.conversations c) as old_message_totals,
               app.resolve_urls(app.project_page(null, 100, null))::jsonb as new_project_envelope,
               (select jsonb_object_agg(u.id, app.resolve_urls(app.project_page(u.id, 100, null))::jsonb) from app.users u where u.id = any(${users}::uuid[])) as new_maker_pages,
               (select jsonb_object_agg(u.id, (
                  select jsonb_build_object('data', coalesce(jsonb_agg(r.body order by p.created_at desc, p.id desc), '[]'::jsonb),
                                            'has_more', false, 'total_count', count(*), 'after', null)
                  from app.projects p join reference.projects_json(array(select id from app.projects)) r on r.id = p.id
                  where exists (select 1 from app.project_makers m where m.project_id = p.id and m.user_id = u.id and m.accepted)))
                from app.users u where u.id = any(${users}::uuid[])) as old_maker_pages,
               (select jsonb_agg(app.resolve_urls(api.project_get(app.to_public_id('proj', p.id)))::jsonb order by p.created_at desc, p.id desc)
                  from app.projects p) as new_project_singles`
      return r!
    })
    expect(row.new_plain, `${label}: todos as ${viewer.username} sees them`).toEqual(row.old_plain)
    expect(row.new_expanded, `${label}: todos with reactions as ${viewer.username} sees them`).toEqual(row.old_expanded)
    expect(row.new_users, `${label}: users as ${viewer.username} sees them`).toEqual(row.old_users)
    expect(row.new_user_singles, `${label}: GET /v1/users/{username} as ${viewer.username}`).toEqual(row.old_users)
    expect(row.new_projects, `${label}: projects as ${viewer.username} sees them`).toEqual(row.old_projects)
    expect(row.new_singles, `${label}: GET /v1/todos/{id} as ${viewer.username}`).toEqual(row.old_singles)
    expect(row.new_comments, `${label}: comments as ${viewer.username} sees them`).toEqual(row.old_comments)
    expect(row.new_comment_singles, `${label}: a comment as POST and PATCH answer it, as ${viewer.username}`).toEqual(row.old_comments)
    expect(row.new_messages, `${label}: messages as ${viewer.username} sees them`).toEqual(row.old_messages)
    expect(row.comments_seen, `${label}: the comments the policy shows ${viewer.username}`).toEqual(row.comments_seen_before)
    expect(row.new_comment_totals, `${label}: total_count of GET /v1/todos/{id}/comments as ${viewer.username}`).toEqual(row.old_comment_totals)
    expect(row.new_message_totals, `${label}: total_count of GET /v1/conversations/{id}/messages as ${viewer.username}`).toEqual(row.old_message_totals)
    const counts = (row.comments_counts ?? {}) as Record<string, number>
    for (const [todo, total] of Object.entries((row.old_comment_totals ?? {}) as Record<string, number>)) {
      commentTotals.compared++
      if (total < counts[todo]!) commentTotals.fewer++
    }
    expect(row.new_message_singles, `${label}: a message as POST answers it, as ${viewer.username}`).toEqual(row.old_messages)
    expect(row.new_conversations, `${label}: conversations as ${viewer.username} sees them`).toEqual(row.old_conversations)
    expect(row.new_conversation_singles, `${label}: GET /v1/conversations/{id} as ${viewer.username}`).toEqual(row.old_conversations)
    const oldPage = (row.old_project_page ?? []) as unknown[]
    expect(row.new_project_envelope, `${label}: GET /v1/projects as ${viewer.username}`)
      .toEqual({ data: oldPage, has_more: false, total_count: oldPage.length, after: null })
    expect(row.new_maker_pages, `${label}: GET /v1/users/{username}/projects as ${viewer.username}`).toEqual(row.old_maker_pages)
    expect(row.new_project_singles, `${label}: GET /v1/projects/{id} as ${viewer.username}`).toEqual(row.old_project_page)
    compared += (row.old_plain as unknown[] | null)?.length ?? 0
    messagesCompared += (row.old_messages as unknown[] | null)?.length ?? 0
  }
  return compared
}

beforeAll(async () => {
  world = await startWorld()
  sql = world.sql
  await sql.unsafe(await readFile(new URL('./support/reference-renderer.sql', import.meta.url), 'utf8'))
  const privacies = ['public', 'public', 'protected', 'protected', 'private', 'public', 'protected', 'private']
  for (const [i, p] of privacies.entries()) {
    const created = await world.createUser(`member${i}`)
    const id = created.id.replace(/^user_(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5')
    await sql`update app.users set privacy = ${p}::app.privacy, time_zone = ${i % 2 ? 'Asia/Tokyo' : 'America/Los_Angeles'} where id = ${id}`
    members.push({ id, username: created.username, apiKey: created.api_key })
  }
  for (const [i, p] of ['public', 'protected', 'private', 'public'].entries()) {
    const [row] = await sql`insert into app.projects (owner_id, name, hashtag, slug, privacy)
                            values (${members[i]!.id}, ${`Project ${i}`}, ${`tag${i}`}, ${i % 2 ? null : `proj-${i}`}, ${p}::app.privacy) returning id`
    projects.push(row!.id as string)
  }
  // A streak that is current for some zones and not others, and a few todos to start from.
  await sql`update app.users set streak_last_day = (now() at time zone 'UTC')::date - 1, streak_length = 4, best_streak = 9 where username in ('member1', 'member2')`
  for (const [i, m] of members.entries()) {
    await sql`insert into app.todos (user_id, body) values (${m.id}, ${`first of ${m.username} @${members[(i + 1) % members.length]!.username} #tag${i % 4}`})`
  }
}, 120_000)

afterAll(async () => {
  await world?.close()
})

describe('render once, serve many (issue 27)', () => {
  it('the renderings kept on write give the same JSON as the renderer before them, for every member, after random writes', async () => {
    expect(await compareForEveryone('start')).toBeGreaterThan(0)
    // First every kind of write once (the first value of each arbitrary), so none is left to chance.
    const kinds = new Set<string>()
    for (const [i, one] of fc.sample(action, { numRuns: 400, seed: 27 }).entries()) {
      if (kinds.has(one.kind)) continue
      kinds.add(one.kind)
      await apply(one)
      await compareForEveryone(`write ${i} of the fixed sequence: ${JSON.stringify(one)}`)
    }
    expect(kinds.size).toBe(22)
    // Replies, reactions and attachments on comments, once each, whatever the sample drew.
    await apply({ kind: 'comment', member: 1, todo: 0, words: 'first "comment"', mention: 2, tag: 1, reply: null })
    await apply({ kind: 'comment', member: 2, todo: 0, words: 'a reply 🎉 \u0002', mention: 3, tag: 2, reply: 0 })
    await apply({ kind: 'react_comment', member: 3, comment: 0 })
    await apply({ kind: 'attach', todo: 0, width: 10, octet: false, comment: 0 })
    await apply({ kind: 'message', a: 0, b: 1, words: 'hi "there" 🎉', client: true, attach: true })
    await apply({ kind: 'react_message', member: 1, message: 0, emoji: 1 })
    // A protected member's comment on someone else's public todo: counted for a follower who does
    // not own the todo, left out for a member who does not follow them.
    const [protectedCommenter, follower] = [members[2]!.id, members[5]!.id]
    await sql`update app.users set privacy = 'protected' where id = ${protectedCommenter}`
    const [publicTodo] = await sql`select id from app.todos where author_privacy = 'public' and user_id not in (${protectedCommenter}, ${follower}) order by created_at limit 1`
    await sql`insert into app.comments (todo_id, user_id, body) values (${publicTodo!.id}, ${protectedCommenter}, 'for followers')`
    await sql`insert into app.user_follows (follower_id, followee_id) values (${follower}, ${protectedCommenter}) on conflict do nothing`
    await sql`delete from app.mutes where user_id = ${follower} and muted_user_id = ${protectedCommenter}`
    const [covered] = await sql`
      select (select count(*) from app.comments where parent_id is not null)::int as replies,
             (select count(*) from app.reactions where comment_id is not null)::int as reactions,
             (select count(*) from app.uploads where comment_id is not null)::int as attachments,
             (select count(*) from app.comment_user_mentions)::int as mentions,
             (select count(*) from app.messages)::int as messages,
             (select count(*) from app.message_reactions)::int as message_reactions`
    expect(Object.values(covered!).every((n) => (n as number) > 0), JSON.stringify(covered)).toBe(true)
    messagesCompared = 0
    await compareForEveryone('replies, reactions and attachments on comments, a message with a file and an emoji')
    expect(messagesCompared, 'messages seen by their participants').toBeGreaterThan(0)
    let runs = 0
    await fc.assert(
      fc.asyncProperty(fc.array(action, { minLength: 1, maxLength: 8 }), async (actions) => {
        for (const a of actions) await apply(a)
        runs++
        await compareForEveryone(`after ${JSON.stringify(actions)}`)
      }),
      { numRuns: 40 },
    )
    expect(runs).toBe(40)
    // The totals were compared where comments were hidden or muted too, not only where all were seen.
    expect(commentTotals.fewer, JSON.stringify(commentTotals)).toBeGreaterThan(0)
    expect(commentTotals.fewer, JSON.stringify(commentTotals)).toBeLessThan(commentTotals.compared)
  }, 600_000)

  it('the todos written before their card existed are carded by the backfill block by block, their answers and updated_at unchanged, held rows skipped; members cannot write a card', async () => {
    // A member of its own: the property test's writes may have ended a member's subscription (401).
    const created = await world.createUser('carder')
    const author = { id: created.id.replace(/^user_(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5'), apiKey: created.api_key }
    const posted: string[] = []
    for (let i = 0; i < 5; i++) {
      const [row] = await sql`insert into app.todos (user_id, body) values (${author.id}, ${`old todo ${i} "quoted" \\ 🎉`}) returning id, number, card`
      expect(row!.card, 'a new todo is carded on insert').toEqual((await sql`select app.todo_card(id, created_at, updated_at) as c from app.todos where id = ${row!.id}`)[0]!.c)
      posted.push(row!.id as string)
    }
    const numbers = (await sql`select number from app.todos where id = any(${posted}::uuid[]) order by number`).map((r) => String(r.number))
    const get = async (n: string) => {
      const res = await world.get(`/v1/todos/${n}`, { auth: author.apiKey })
      expect(res.status).toBe(200)
      return { body: res.text, etag: res.headers.get('etag') }
    }
    const cardedAnswers = await Promise.all(numbers.map(get))
    // As they were before the column: no card (written without the triggers).
    await sql.begin(async (tx) => {
      await tx`set local session_replication_role = replica`
      await tx`update app.todos set card = null`
    })
    const before = await sql`select id, updated_at from app.todos order by id`
    expect(await Promise.all(numbers.map(get)), 'a todo without its card answers the same, rendered from its columns').toEqual(cardedAnswers)

    const [{ pages }] = await sql`select (pg_relation_size('app.todos') / current_setting('block_size')::bigint)::int as pages` as unknown as [{ pages: number }]
    await restartCardWalk()
    const { carded, statements } = await walkCardsToEnd(1)
    expect(carded, 'every todo is carded once').toBe(before.length)
    expect(statements, 'a block per statement, in physical order, to the end (rows the walk moves land on later blocks)').toBeGreaterThanOrEqual(pages)
    expect(await walkCards(1), 'once the walk is over').toEqual({ carded: 0, done: true })
    expect(await sql`select id, updated_at from app.todos order by id`, 'the backfill is not an edit').toEqual(before)
    const wrongCards = async () => Number((await sql`select count(*)::int as n from app.todos
                                                     where card is distinct from app.todo_card(id, created_at, updated_at)`)[0]!.n)
    expect(await wrongCards()).toBe(0)
    expect(await Promise.all(numbers.map(get))).toEqual(cardedAnswers)

    // The walk repairs a card that is not app.todo_card's too (after a change of its form, a
    // migration resets the walk).
    await sql.begin(async (tx) => {
      await tx`set local session_replication_role = replica`
      await tx`update app.todos set card = null where id = any(${posted.slice(1)}::uuid[])`
      await tx`update app.todos set card = '"id":"stale"' where id = ${posted[0]!}`
    })
    await restartCardWalk()
    expect((await walkCardsToEnd(64)).carded).toBe(posted.length)
    expect(await wrongCards()).toBe(0)

    // A row another transaction holds is skipped, not waited for, and the walk goes round again
    // until it has carded it (a lock that writes nothing, as a privacy copy or an upload's key share
    // leave the card as it is).
    await sql.begin(async (tx) => {
      await tx`set local session_replication_role = replica`
      await tx`update app.todos set card = null where id = any(${posted}::uuid[])`
    })
    await restartCardWalk()
    const [{ blocksNow }] = await sql`select (pg_relation_size('app.todos') / current_setting('block_size')::bigint)::int as "blocksNow"` as unknown as [{ blocksNow: number }]
    const holder = await sql.reserve()
    try {
      await holder`begin`
      await holder`select 1 from app.todos where id = ${posted[0]!} for update`
      const started = performance.now()
      let firstPass = 0
      // More calls than a pass takes: the walk reaches the end and starts again, never done.
      for (let i = 0; i < Math.ceil(blocksNow / 64) * 2 + 2; i++) {
        const step = await walkCards(64)
        firstPass += step.carded
        expect(step.done, 'not done while a row is left').toBe(false)
      }
      expect(performance.now() - started, 'the walk did not wait for the held row').toBeLessThan(4_000)
      expect(firstPass).toBe(posted.length - 1)
      await holder`commit`
    } finally {
      holder.release()
    }
    expect((await walkCardsToEnd(64)).carded, 'the held row, once free').toBe(1)
    expect(await wrongCards()).toBe(0)
    // A privileged statement writing the card and the body is an edit: updated_at moves.
    const [was] = await sql`select updated_at from app.todos where id = ${posted[1]!}`
    await sql`update app.todos set body = 'body and card', card = null where id = ${posted[1]!}`
    const [is] = await sql`select updated_at, card, app.todo_card(id, created_at, updated_at) as expected from app.todos where id = ${posted[1]!}`
    expect(is!.updated_at.getTime()).toBeGreaterThan(was!.updated_at.getTime())
    expect(is!.card).toBe(is!.expected)

    // A member edits the body (the column they may write); the card follows. The card itself is not theirs to write.
    await asMember(sql, { sub: author.id }, async (tx) => {
      await tx`update app.todos set body = 'edited by hand' where id = ${posted[0]!}`
      const [edited] = await tx`select card, app.todo_card(id, created_at, updated_at) as expected, updated_at from app.todos where id = ${posted[0]!}`
      expect(edited!.card).toContain(JSON.stringify(edited!.updated_at).slice(1, 20))
      expect(edited!.card).toBe(edited!.expected)
      await expect(tx`update app.todos set card = '"id":"forged"' where id = ${posted[0]!}`).rejects.toThrow(/permission denied/)
    })
  })

  it("a member's text can never hold a URL marker: chr(1) in a body comes out escaped over HTTP, the URLs in place", async () => {
    const author = members[0]!
    await sql`update app.users set privacy = 'public', subscription_active = true where id = ${author.id}`
    await sql`insert into app.todos (user_id, body) values (${author.id}, ${'evil \u0001/x and \u0002/y'})`
    const [todo] = await sql`select id from app.todos order by created_at desc, id desc limit 1`
    const publicId = `todo_${(todo!.id as string).replace(/-/g, '')}`
    for (const path of [`/v1/todos/${publicId}`, `/v1/users/${author.username}/todos?limit=1`]) {
      const res = await world.get(path, { auth: author.apiKey })
      expect(res.status, res.text).toBe(200)
      expect(res.text).toContain('"body":"evil \\u0001/x and \\u0002/y"')
      expect(res.text).not.toMatch(/[\u0001\u0002]/)
      const rendered = path.startsWith('/v1/todos/') ? res.body : res.body.data[0]
      expect(rendered.body).toBe('evil \u0001/x and \u0002/y')
      expect(rendered.creator.url).toBe(`http://api.test/@${author.username}`)
      expect(rendered.url).toMatch(/^http:\/\/api\.test\/todos\/\d+$/)
    }
  })

  it('the HTTP layer puts URLs in place of the markers as app.resolve_urls does: escaped, defaults alike', async () => {
    const rendered = '{"a":"\u0001/x","b":"\u0002/y","c":["\u0001","\u0002/z"]}'
    for (const [publicUrl, webUrl] of [['http://h/"q\\b', 'http://w/\t'], ['http://api.test', ''], ['', '']] as const) {
      const expected = await sql.begin(async (tx) => {
        await tx`select set_config('app.public_url', ${publicUrl}, true), set_config('app.web_url', ${webUrl}, true)`
        const [row] = await tx`select app.resolve_urls(${rendered}) as text`
        return row!.text as string
      })
      expect(JSON.parse(expected).a).toBe(`${publicUrl || 'http://127.0.0.1:54321'}/x`)
      expect(resolveUrlMarkers(rendered, { publicUrl, webUrl })).toBe(expected)
    }
    expect(resolveUrlMarkers('{"a":1}', { publicUrl: 'x' })).toBe('{"a":1}')
  })

  it('the markers are replaced in the bytes as in the text: any text, markers anywhere, non-ASCII around them', () => {
    const piece = fc.oneof(fc.constantFrom('\u0001', '\u0002', 'é', '日本', '🎉', '"', '\\'), fc.string({ unit: 'grapheme', maxLength: 8 }))
    fc.assert(fc.property(fc.array(piece, { maxLength: 40 }), fc.constantFrom('http://api.test', 'http://h/"q\\b', "http://h/$'$&$$x", ''), fc.constantFrom('', 'http://web.test'), (pieces, publicUrl, webUrl) => {
      const text = pieces.join('')
      // As the driver hands a column over: a view into a larger read buffer, at an offset.
      const encoded = new TextEncoder().encode(text)
      const chunk = new Uint8Array(encoded.length + 9)
      chunk.set(encoded, 4)
      const row = chunk.subarray(4, 4 + encoded.length)
      const bytes = resolveUrlMarkerBytes(row, { publicUrl, webUrl })
      const expected = resolveUrlMarkers(text, { publicUrl, webUrl })
      expect(bytes.toString('utf8')).toBe(expected)
      // Always a copy: what the driver's read buffer holds next never changes the answer.
      chunk.fill(0x41)
      expect(bytes.toString('utf8')).toBe(expected)
    }), { numRuns: 500 })
  })
})
