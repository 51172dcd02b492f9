// Row-level security and the SQL conventions, checked in the catalog and as a member.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type TestWorld, startWorld } from './support/app.ts'
import { asMember } from './support/sql.ts'
import { waitForLockWait } from './support/locks.ts'

let world: TestWorld
let alice: string
let bob: string

beforeAll(async () => {
  world = await startWorld()
  await world.createUser('alice')
  await world.createUser('bob')
  const rows = await world.sql`select id, username from app.users`
  alice = rows.find((r) => r.username === 'alice')!.id
  bob = rows.find((r) => r.username === 'bob')!.id
  await world.admin('create-project', '--owner', 'bob', '--name', 'Secret', '--slug', 'secret', '--privacy', 'private')
  await world.admin('create-project', '--owner', 'bob', '--name', 'Open', '--slug', 'open')
})
afterAll(() => world.close())

describe('conventions, from the catalog', () => {
  it('every table in app has row-level security enabled', async () => {
    const rows = await world.sql`
      select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = 'app' and c.relkind in ('r', 'p') and not c.relrowsecurity`
    expect(rows.map((r) => r.relname)).toEqual([])
  })

  it('every function in app and api sets search_path to empty (so it is never hijacked), except inlined expressions', async () => {
    const rows = await world.sql`
      select p.oid::regprocedure::text as fn from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname in ('app', 'api') and not coalesce('search_path=""' = any (p.proconfig), false)
        and not coalesce(obj_description(p.oid, 'pg_proc') like 'Inlined %', false)`
    expect(rows.map((r) => r.fn)).toEqual([])
  })

  it('inlined expressions are SQL, run as the caller, read no table and are substituted into the calling statement', async () => {
    const inlined = await world.sql`
      select p.oid::regprocedure::text as fn, l.lanname, p.prosecdef, p.proconfig, p.prosrc, p.proretset,
             obj_description(p.oid, 'pg_proc') like 'Inlined view %' as view
      from pg_proc p join pg_namespace n on n.oid = p.pronamespace join pg_language l on l.oid = p.prolang
      where n.nspname in ('app', 'api') and obj_description(p.oid, 'pg_proc') like 'Inlined %'`
    expect(inlined.map((r) => r.fn).sort()).toEqual([
      'app.can_chat()',
      'app.can_see_project(uuid,app.privacy,uuid)',
      'app.can_write()',
      'app.claims()',
      'app.comment_privacy_lock(uuid)',
      'app.conversation_topic(uuid)',
      'app.credential_is_members_own()',
      'app.default_header_color(uuid)',
      'app.device_json(app.devices)',
      'app.extract_mentions(text,text)',
      'app.filter_moment(jsonb,text)',
      'app.from_public_id(text,text)',
      'app.generated_image_path(text,text)',
      'app.image_urls(text,text,text)',
      'app.image_urls_text(text,text)',
      'app.initials(text)',
      'app.json_inner(text)',
      'app.json_text(text)',
      'app.json_time(timestamp with time zone)',
      'app.json_url(text,text)',
      'app.mentioned_project_json_body(app.projects,text)',
      'app.mentioned_user_json_body(app.users,text)',
      'app.notification_excerpt(text)',
      'app.notification_json(app.notifications,app.users,text)',
      'app.notification_name(app.users)',
      'app.notification_preference_json(text,text,text,boolean)',
      'app.notification_types()',
      'app.page_envelope(jsonb,boolean,bigint,text)',
      'app.page_envelope_text(text,boolean,bigint,text,text)',
      'app.picture_urls(text,text,text,text,text)',
      'app.picture_urls_text(text,text,text)',
      'app.project_mention_text(text)',
      'app.project_text(app.projects,text,text,boolean,boolean,bigint)',
      'app.project_todos_seen_by(uuid)',
      'app.projects_seen_by(uuid)',
      'app.public_url()',
      'app.reaction_text(app.reactions,text)',
      'app.request_credential()',
      'app.resolve_urls(text)',
      'app.resolve_urls_at(text,text)',
      'app.to_public_id(text,uuid)',
      'app.todo_card(uuid,timestamp with time zone,timestamp with time zone)',
      'app.todo_total_shard(uuid)',
      'app.user_json_body(app.users,date,uuid,text,boolean,boolean,boolean)',
      'app.user_mention_text(text)',
      'app.user_text(app.users,date,uuid,boolean,boolean,boolean)',
      'app.user_topic(uuid)',
      'app.users_seen_by(uuid)',
      'app.web_url()',
      'app.webhook_id(uuid,uuid)',
    ])
    // An inlined view (issue 27) reads tables: a set of rows for the calling statement to filter.
    for (const f of inlined) {
      expect({ fn: f.fn, language: f.lanname, definer: f.prosecdef, config: f.proconfig, readsTables: /\b(from|join)\s+"?(app|auth|storage|realtime|public|extensions)"?\./i.test(f.prosrc), set: f.proretset })
        .toEqual({ fn: f.fn, language: 'sql', definer: false, config: null, readsTables: f.view, set: f.view ? true : f.proretset })
    }
    // Substituted: a call's plan shows the body, not the function (a body more volatile than
    // the function, e.g. jsonb_build_object in an immutable one, would silently stop that).
    for (const f of inlined) {
      const [found] = await world.sql<{ types: string[] }[]>`
        select coalesce(array_agg(format_type(t, null) order by n), '{}') as types
        from pg_proc p, unnest(p.proargtypes) with ordinality a(t, n) where p.oid = ${f.fn}::regprocedure`
      const columns = found!.types.map((_, i) => `a${i}`)
      const call = `${f.fn.replace(/\(.*$/, '')}(${columns.join(', ')})`
      // A set-returning one is inlined where it is a table (FROM), not in a select list.
      const query = f.proretset ? `select x.* from args, lateral ${call} x` : `select ${call} from args`
      // Arguments from a table's columns, so nothing is folded to a constant at plan time.
      const lines = await world.sql.begin(async (tx) => {
        await tx.unsafe(`create temp table args (${found!.types.map((t, i) => `a${i} ${t}`).join(', ') || 'none int'}) on commit drop`)
        return (await tx.unsafe(`explain verbose ${query}`)).map((r) => r['QUERY PLAN'] as string)
      })
      const name = f.fn.replace(/^app\./, '').replace(/\(.*$/, '')
      expect(lines.join('\n'), f.fn).not.toContain(`${name}(`)
    }
    // And in the policies that call them with (select auth.uid()), which only a body naming the
    // viewer once can take: the projects policy shows the rule, not the function.
    const policyPlan = await asMember(world.sql, { sub: alice }, (tx) => tx`explain verbose select id from app.projects`)
    const policyText = policyPlan.map((r) => r['QUERY PLAN']).join('\n')
    expect(policyText).toContain('is_project_maker(')
    expect(policyText).not.toContain('can_see_project(')
  })

  it('no SQL function with a SET clause serves members\' requests: PostgreSQL parses and plans one again in every transaction that calls it (issue 27)', async () => {
    // Each API request is one transaction, so such a function costs its planning on every request
    // (0.1-0.5 ms on a write: docs/performance.md, "Seventh round"). Inlined helpers have no SET
    // clause; the rest are PL/pgSQL, whose plans are kept for the session. These remain SQL: the
    // workers' and the operator's batches and the timeline's filtered forms (a statement built per
    // call anyway). (Four one-row renderers no code called were dropped: migration 20261128005500.)
    const rows = await world.sql`
      select p.oid::regprocedure::text as fn from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      join pg_language l on l.oid = p.prolang
      where n.nspname in ('app', 'api') and l.lanname = 'sql' and p.proconfig is not null`
    expect(rows.map((r) => r.fn).sort()).toEqual([
      'app.complete_export(uuid,uuid,text,bigint,timestamp with time zone)',
      'app.disable_webhook_subscription(uuid,text)', 'app.export_file_started(uuid,uuid,text)', 'app.fail_export(uuid,uuid,text,integer,interval)',
      'app.fan_out_pushes(integer)', 'app.forget_file_deletions(text[])', 'app.forget_idempotency_keys(integer)',
      'app.park_export(uuid,uuid)', 'app.prune_notifications(interval,integer)', 'app.prune_push_deliveries(interval,integer)',
      'app.prune_webhook_deliveries(interval,integer)', 'app.take_file_deletions(integer)',
      'app.uninspected_uploads(integer)',
    ].sort())
  })

  it('the functions issue 27 made PL/pgSQL resolve every name they use: each, called with null arguments, raises no unknown or ambiguous name', async () => {
    // A PL/pgSQL body is parsed statement by statement as it runs, so a parameter or output
    // column named like a column of a table it reads ("column reference is ambiguous"), or a
    // misspelt name, fails only when called. These bodies run straight through (no branch skips
    // a statement on null arguments), so one call each parses all of them. Errors the functions
    // raise on purpose (null input, http_error) are not what this looks for.
    const nameErrors = ['42702', '42703', '42P01', '42883', '42804', '42601', '42P02']
    const converted = await world.sql<{ fn: string; name: string; types: string[]; set: boolean }[]>`
      select p.oid::regprocedure::text as fn, n.nspname || '.' || p.proname as name, p.proretset as set,
             coalesce((select array_agg(format_type(t, null) order by o) from unnest(p.proargtypes) with ordinality a(t, o)), '{}') as types
      from pg_proc p join pg_namespace n on n.oid = p.pronamespace join pg_language l on l.oid = p.prolang
      where n.nspname in ('app', 'api') and l.lanname = 'plpgsql'
        and obj_description(p.oid, 'pg_proc') like '%PL/pgSQL, not SQL: a SQL function with a SET clause%'`
    expect(converted.length).toBeGreaterThanOrEqual(40)
    const call = (f: { name: string; types: string[]; set: boolean }) =>
      `select ${f.set ? '* from ' : ''}${f.name}(${f.types.map((t) => `null::${t}`).join(', ')})`
    const failures: string[] = []
    await world.sql.begin(async (tx) => {
      await tx`set local statement_timeout = '5s'`
      // The check catches what it looks for: a body with an ambiguous name, made here and dropped
      // with the transaction.
      await tx.unsafe(`create function pg_temp.ambiguous(id uuid) returns uuid language plpgsql as $$
        begin return (select id from app.users u where u.id = ambiguous.id); end $$`)
      const probes = [...converted, { fn: 'pg_temp.ambiguous(uuid)', name: 'pg_temp.ambiguous', types: ['uuid'], set: false }]
      for (const f of probes) {
        await tx.savepoint((sp) => sp.unsafe(call(f))).catch((e: { code?: string; message: string }) => {
          if (nameErrors.includes(e.code ?? '')) failures.push(`${f.fn}: ${e.code} ${e.message}`)
        })
      }
      throw new Error('rolled back')
    }).catch((e: Error) => { if (e.message !== 'rolled back') throw e })
    expect(failures).toEqual(['pg_temp.ambiguous(uuid): 42702 column reference "id" is ambiguous'])
  })

  it('every function in app and api has a comment that explains it', async () => {
    const rows = await world.sql`
      select p.oid::regprocedure::text as fn from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname in ('app', 'api') and coalesce(obj_description(p.oid, 'pg_proc'), '') = ''`
    expect(rows.map((r) => r.fn)).toEqual([])
  })

  it('mentions are parsed in the calling statement: app.extract_mentions is inlined, and the planner sees a few names, not a thousand', async () => {
    const rows = await world.sql`
      select p.oid::regprocedure::text as fn, p.prorows::int as rows from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname = 'app' and p.proname = 'extract_mentions'`
    // 4 for a caller that cannot inline it (a call in a select list).
    expect(rows).toEqual([{ fn: 'app.extract_mentions(text,text)', rows: 4 }])
    // As app.tg_todos__store_mentions and app.check_mention_limits join them: the body's names as
    // a function scan of regexp_matches (10 rows estimated, so each name is looked up by index on
    // a real table), never a call planned again per transaction.
    for (const [sigil, join] of [['@', 'app.users u on lower(u.username) = m.name'], ['#', 'app.projects u on lower(u.hashtag) = m.name']]) {
      const plan = (await world.sql.unsafe(`explain select u.id from app.extract_mentions('a @b #c', '${sigil}') m join ${join}`))
        .map((r) => r['QUERY PLAN'] as string).join('\n')
      expect(plan).toMatch(/Function Scan on regexp_matches m(_1)? +\(cost=[0-9.]+ rows=10 /)
      expect(plan).not.toContain('extract_mentions')
    }
  })

  it('every foreign key says what happens on delete, and has an index leading with its columns', async () => {
    const fks = await world.sql`
      select c.conname, c.confdeltype,
             exists (select 1 from pg_index i
                     where i.indrelid = c.conrelid
                       and (i.indkey::int2[])[0:cardinality(c.conkey) - 1] = c.conkey
                       and (i.indpred is null or cardinality(c.conkey) = 1)) as indexed
      from pg_constraint c join pg_namespace n on n.oid = c.connamespace
      where c.contype = 'f' and n.nspname = 'app'`
    expect(fks.length).toBeGreaterThan(5)
    expect(fks.filter((f) => f.confdeltype === 'a').map((f) => f.conname)).toEqual([])
    expect(fks.filter((f) => !f.indexed).map((f) => f.conname)).toEqual([])
  })

  it('members cannot execute functions they were not granted (execute is revoked by default)', async () => {
    const rows = await world.sql`
      select p.oid::regprocedure::text as fn from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname in ('app', 'api') and has_function_privilege('public', p.oid, 'execute')
        and p.prorettype <> 'trigger'::regtype`
    expect(rows.map((r) => r.fn)).toEqual([])
    await expect(asMember(world.sql, { sub: alice }, (tx) => tx`select app.authenticate('{}', 'read')`)).rejects.toMatchObject({ code: '42501' })
  })
})

describe('policies, as a member', () => {
  it('credentials are invisible to members', async () => {
    for (const table of ['api_keys', 'oauth_clients', 'oauth_tokens']) {
      await expect(asMember(world.sql, { sub: alice }, (tx) => tx.unsafe(`select * from app.${table}`)), table)
        .rejects.toMatchObject({ code: '42501' })
    }
  })

  it('a member updates only their own profile, only the granted columns, only with a writing credential', async () => {
    const others = await asMember(world.sql, { sub: alice }, (tx) => tx`update app.users set time_zone = 'Asia/Tokyo' where id = ${bob} returning id`)
    expect(others).toHaveLength(0)
    const own = await asMember(world.sql, { sub: alice }, (tx) => tx`update app.users set time_zone = 'Asia/Tokyo' where id = ${alice} returning id`)
    expect(own).toHaveLength(1)
    await expect(asMember(world.sql, { sub: alice, can_write: false }, (tx) => tx`update app.users set time_zone = 'Asia/Tokyo' where id = ${alice}`))
      .rejects.toMatchObject({ code: '42501' })
    await expect(asMember(world.sql, { sub: alice }, (tx) => tx`update app.users set subscription_active = true where id = ${alice}`))
      .rejects.toMatchObject({ code: '42501' })
  })

  it('a private project is invisible to non-makers, with its makers', async () => {
    const seenByAlice = await asMember(world.sql, { sub: alice }, (tx) => tx`select slug from app.projects order by slug`)
    expect(seenByAlice.map((r) => r.slug)).toEqual(['open'])
    const makers = await asMember(world.sql, { sub: alice }, (tx) => tx`select count(*)::int as n from app.project_makers`)
    expect(makers[0]!.n).toBe(1)
    const seenByBob = await asMember(world.sql, { sub: bob }, (tx) => tx`select slug from app.projects order by slug`)
    expect(seenByBob.map((r) => r.slug)).toEqual(['open', 'secret'])
  })

  it('members cannot make themselves makers or insert projects directly', async () => {
    await expect(asMember(world.sql, { sub: alice }, (tx) =>
      tx`insert into app.project_makers (project_id, user_id) select id, ${alice} from app.projects where slug = 'open'`))
      .rejects.toMatchObject({ code: '42501' })
    await expect(asMember(world.sql, { sub: alice }, (tx) => tx`insert into app.projects (owner_id, name) values (${alice}, 'x')`))
      .rejects.toMatchObject({ code: '42501' })
  })

  it('a member follows only in their own name', async () => {
    await expect(asMember(world.sql, { sub: alice }, (tx) => tx`insert into app.user_follows (follower_id, followee_id) values (${bob}, ${alice})`))
      .rejects.toMatchObject({ code: '42501' })
    const ok = await asMember(world.sql, { sub: alice }, (tx) => tx`insert into app.user_follows (follower_id, followee_id) values (${alice}, ${bob}) returning 1`)
    expect(ok).toHaveLength(1)
  })

  it('the set renderers show a member exactly what the policies show, even given ids they may not see', async () => {
    // bob goes private and posts a todo mentioning both projects; alice may see neither the
    // todo nor the private project, whatever ids she hands the security-definer renderers.
    await world.sql`update app.projects set hashtag = slug where slug in ('secret', 'open')`
    const [todo] = await world.sql`
      with private as (update app.users set privacy = 'private' where id = ${bob})
      insert into app.todos (user_id, body) values (${bob}, 'Shipped #secret and #open') returning id`
    const [secret] = await world.sql`select id from app.projects where slug = 'secret'`
    try {
      const asAlice = await asMember(world.sql, { sub: alice }, (tx) => tx`
        select app.todos_json(array[${todo!.id}::uuid], true) as todos,
               (select count(*)::int from app.todos where id = ${todo!.id}) as policy_todos,
               (select count(*)::int from app.projects_json(array[${secret!.id}::uuid])) as projects`)
      expect(asAlice[0]).toEqual({ todos: null, policy_todos: 0, projects: 0 })

      const asBob = await asMember(world.sql, { sub: bob }, (tx) => tx`
        select app.todos_json(array[${todo!.id}::uuid], true) as todos,
               (select count(*)::int from app.projects_json(array[${secret!.id}::uuid])) as projects`)
      const [rendered] = asBob[0]!.todos as { mentioned_projects: { slug: string }[], creator: { username: string } }[]
      expect(rendered!.creator.username).toBe('bob')
      expect(rendered!.mentioned_projects.map((m) => m.slug)).toEqual(['secret', 'open'])
      expect(asBob[0]!.projects).toBe(1)

      // Public again: alice sees the todo, but still not the private project it mentions.
      await world.sql`update app.users set privacy = 'public' where id = ${bob}`
      const again = await asMember(world.sql, { sub: alice }, (tx) => tx`select app.todos_json(array[${todo!.id}::uuid], false) as todos`)
      const [seen] = again[0]!.todos as { mentioned_projects: { slug: string }[] }[]
      expect(seen!.mentioned_projects.map((m) => m.slug)).toEqual(['open'])
    } finally {
      await world.sql`delete from app.todos where id = ${todo!.id}`
      await world.sql`update app.users set privacy = 'public' where id = ${bob}`
    }
  })

  it('security-definer helpers act only for the requesting member', async () => {
    await expect(asMember(world.sql, { sub: alice }, (tx) => tx`select * from app.open_conversation(${bob}, ${alice})`))
      .rejects.toMatchObject({ code: '42501' })
    await expect(asMember(world.sql, { sub: alice }, (tx) => tx`select app.unread_conversations(${bob})`))
      .rejects.toMatchObject({ code: '42501' })
    await expect(asMember(world.sql, { sub: alice }, (tx) => tx`select app.check_message_caps(${bob}, null::app.conversations)`))
      .rejects.toMatchObject({ code: '42501' })
  })

  it('anon has no way into the app schema', async () => {
    await expect(world.sql.begin(async (tx) => {
      await tx`set local role anon`
      await tx`select * from app.users`
    })).rejects.toMatchObject({ code: '42501' })
  })
})

describe('todos carry their author\'s privacy (author_privacy), for a policy without lookups', () => {
  it('the todos policy agrees with app.can_see_member_content for every privacy and follow state', async () => {
    const created = await Promise.all(['dora', 'eve'].map((name) => world.createUser(name)))
    expect(created).toHaveLength(2)
    const members = await world.sql<{ id: string; username: string }[]>`
      select id, username from app.users where username in ('alice', 'bob', 'dora', 'eve') order by username`
    const [a, b, d, e] = members.map((m) => m.id)
    const todos = await world.sql<{ id: string; user_id: string }[]>`
      insert into app.todos (user_id, body) select id, 'visible to whom?' from app.users
      where id in ${world.sql([a!, b!, d!, e!])} returning id, user_id`
    try {
      // alice follows dora; dora follows bob. Every privacy for every author.
      await world.sql`insert into app.user_follows (follower_id, followee_id) values (${a!}, ${d!}), (${d!}, ${b!}) on conflict do nothing`
      for (const privacy of ['public', 'protected', 'private']) {
        await world.sql`update app.users set privacy = ${privacy} where id in ${world.sql([b!, d!, e!])}`
        for (const viewer of [a!, b!, d!, e!]) {
          const seen = await asMember(world.sql, { sub: viewer }, (tx) => tx<{ user_id: string }[]>`
            select user_id from app.todos where id in ${tx(todos.map((t) => t.id))}`)
          const rule = await world.sql<{ user_id: string }[]>`
            select t.user_id from app.todos t
            where t.id in ${world.sql(todos.map((t) => t.id))} and app.can_see_member_content(t.user_id, ${viewer})`
          expect(seen.map((r) => r.user_id).sort(), `${privacy} as ${viewer}`).toEqual(rule.map((r) => r.user_id).sort())
        }
      }
      // Spot checks of the rule itself: protected dora is seen by her follower alice, not by eve.
      await world.sql`update app.users set privacy = 'protected' where id = ${d!}`
      const alicesView = await asMember(world.sql, { sub: a! }, (tx) => tx`select count(*)::int as n from app.todos where user_id = ${d!}`)
      const evesView = await asMember(world.sql, { sub: e! }, (tx) => tx`select count(*)::int as n from app.todos where user_id = ${d!}`)
      expect([alicesView[0]!.n, evesView[0]!.n]).toEqual([1, 0])
    } finally {
      await world.sql`delete from app.todos where id in ${world.sql(todos.map((t) => t.id))}`
      await world.sql`delete from app.user_follows where (follower_id, followee_id) in ((${a!}, ${d!}), (${d!}, ${b!}))`
      await world.sql`update app.users set privacy = 'public' where id in ${world.sql([b!, d!, e!])}`
    }
  })

  it('the unfiltered total of GET /v1/todos equals count(*) of what each viewer sees, through posts, deletions, privacy changes and mutes', async () => {
    const members = await world.sql<{ id: string }[]>`select id from app.users order by username`
    const ids = members.map((m) => m.id)
    const inserted = await world.sql<{ id: string }[]>`
      insert into app.todos (user_id, body) select u.id, 'counted ' || g from app.users u, generate_series(1, 3) g returning id`
    const check = async (label: string) => {
      for (const viewer of ids) {
        const [row] = await asMember(world.sql, { sub: viewer }, (tx) => tx`
          select app.visible_todos_total()::int as total,
                 (select count(*)::int from app.todos t
                  where not exists (select 1 from app.mutes m where m.user_id = ${viewer} and m.muted_user_id = t.user_id)) as counted`)
        expect(row!.total, `${label}, viewer ${viewer}`).toBe(row!.counted)
      }
    }
    try {
      await check('public')
      await world.sql`update app.users set privacy = 'protected' where id = ${ids[1]!}`
      await world.sql`update app.users set privacy = 'private' where id = ${ids[2]!}`
      await world.sql`insert into app.user_follows (follower_id, followee_id) values (${ids[0]!}, ${ids[1]!}) on conflict do nothing`
      await check('protected and private')
      await world.sql`insert into app.mutes (user_id, muted_user_id) values (${ids[0]!}, ${ids[1]!}), (${ids[0]!}, ${ids[3]!}), (${ids[3]!}, ${ids[2]!})`
      await check('muted')
      await world.sql`delete from app.todos where id = ${inserted[0]!.id}`
      await world.sql`update app.users set privacy = 'public' where id = ${ids[2]!}`
      await check('after a deletion and a privacy change back')
      // One statement that changes a member's privacy and posts for them: both triggers agree.
      const [both] = await world.sql<{ id: string }[]>`
        with private as (update app.users set privacy = 'private' where id = ${ids[3]!})
        insert into app.todos (user_id, body) values (${ids[3]!}, 'posted while going private') returning id`
      inserted.push(both!)
      await check('privacy change and post in one statement')
      const [totals] = await world.sql`
        select (select sum(todos)::int from app.todo_totals) as kept, (select count(*)::int from app.todos) as counted`
      expect(totals!.kept).toBe(totals!.counted)
    } finally {
      await world.sql`delete from app.mutes where user_id in ${world.sql(ids)}`
      await world.sql`delete from app.user_follows where follower_id = ${ids[0]!} and followee_id = ${ids[1]!}`
      await world.sql`delete from app.todos where id in ${world.sql(inserted.map((t) => t.id))}`
      await world.sql`update app.users set privacy = 'public' where id in ${world.sql(ids)}`
    }
  })

  it('a todo keeps its author, even for the operator (counters, privacy and totals are per author)', async () => {
    const [todo] = await world.sql<{ id: string }[]>`insert into app.todos (user_id, body) values (${bob}, 'mine') returning id`
    try {
      await expect(world.sql`update app.todos set user_id = ${alice} where id = ${todo!.id}`).rejects.toMatchObject({ code: '23514' })
      await world.sql`update app.todos set user_id = ${bob}, body = 'still mine' where id = ${todo!.id}`
      const [row] = await world.sql`select user_id, body from app.todos where id = ${todo!.id}`
      expect(row).toEqual({ user_id: bob, body: 'still mine' })
    } finally {
      await world.sql`delete from app.todos where id = ${todo!.id}`
    }
  })

  it('a privacy change reaches every todo of the author at once, without touching updated_at', async () => {
    const [todo] = await world.sql<{ id: string; updated_at: Date }[]>`
      insert into app.todos (user_id, body) values (${bob}, 'before the switch') returning id, updated_at`
    try {
      await world.sql`update app.users set privacy = 'private' where id = ${bob}`
      const [row] = await world.sql`select author_privacy, updated_at from app.todos where id = ${todo!.id}`
      expect(row!.author_privacy).toBe('private')
      expect(row!.updated_at).toEqual(todo!.updated_at)
      const seen = await asMember(world.sql, { sub: alice }, (tx) => tx`select count(*)::int as n from app.todos where id = ${todo!.id}`)
      expect(seen[0]!.n).toBe(0)
      // A todo posted while private carries it too.
      const [later] = await world.sql`insert into app.todos (user_id, body) values (${bob}, 'while private') returning author_privacy`
      expect(later!.author_privacy).toBe('private')
    } finally {
      await world.sql`delete from app.todos where user_id = ${bob}`
      await world.sql`update app.users set privacy = 'public' where id = ${bob}`
    }
  })

  it('deleting a todo takes its author\'s row before the todo, the order a privacy change uses (no deadlock)', async () => {
    const [todo] = await world.sql<{ id: string }[]>`insert into app.todos (user_id, body) values (${bob}, 'to delete') returning id`
    const holder = await world.sql.reserve()
    const deleter = await world.sql.reserve()
    try {
      // Someone holds bob's row, as a privacy change does while it updates his todos.
      await holder`begin`
      await holder`select 1 from app.users where id = ${bob} for no key update`
      await deleter`begin`
      await deleter`select set_config('role', 'authenticated', true), set_config('request.jwt.claims', ${JSON.stringify({ sub: bob, role: 'authenticated', can_write: true })}, true)`
      const deleting = deleter`select api.todo_delete(${'todo_' + todo!.id.replace(/-/g, '')})`.execute()
      // The deletion waits for bob's row (a lock waiter, not a pause that may end before it got there)
      // and has not locked the todo yet.
      await waitForLockWait(world.sql, { query: /api\.todo_delete/ })
      const free = await world.sql`select id from app.todos where id = ${todo!.id} for update nowait`
      expect(free).toHaveLength(1)
      await holder`commit`
      await deleting
      await deleter`commit`
      expect(await world.sql`select 1 from app.todos where id = ${todo!.id}`).toHaveLength(0)
    } finally {
      await holder`rollback`.catch(() => {})
      await deleter`rollback`.catch(() => {})
      holder.release()
      deleter.release()
      await world.sql`delete from app.todos where id = ${todo!.id}`
    }
  })

  it('a todo posted while its author changes privacy ends with the new privacy, whichever commits first', async () => {
    for (const first of ['privacy change', 'todo insert'] as const) {
      const privacyTx = await world.sql.reserve()
      const todoTx = await world.sql.reserve()
      try {
        await privacyTx`begin`
        await todoTx`begin`
        let inserted: Promise<{ id: string }[]>
        if (first === 'privacy change') {
          await privacyTx`update app.users set privacy = 'private' where id = ${bob}`
          // execute(): postgres.js sends a query only when awaited, unless told to now.
          inserted = todoTx<{ id: string }[]>`insert into app.todos (user_id, body) values (${bob}, 'racing') returning id`.execute()
          await waitForLockWait(world.sql, { query: /insert into app\.todos/ }) // the insert waits for the author's row
          await privacyTx`commit`
          await inserted
          await todoTx`commit`
        } else {
          inserted = todoTx<{ id: string }[]>`insert into app.todos (user_id, body) values (${bob}, 'racing') returning id`
          await inserted
          const changed = privacyTx`update app.users set privacy = 'private' where id = ${bob}`.execute()
          await waitForLockWait(world.sql, { query: /update app\.users set privacy/ }) // the privacy change waits for the insert
          await todoTx`commit`
          await changed
          await privacyTx`commit`
        }
        const [todo] = await inserted
        const [row] = await world.sql`select author_privacy from app.todos where id = ${todo!.id}`
        expect(row!.author_privacy, first).toBe('private')
      } finally {
        privacyTx.release()
        todoTx.release()
        await world.sql`delete from app.todos where user_id = ${bob}`
        await world.sql`update app.users set privacy = 'public' where id = ${bob}`
      }
    }
  })
})
