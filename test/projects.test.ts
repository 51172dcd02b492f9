// SPEC section 4, Projects, and DESIGN.md's privacy rule for projects: public everyone;
// protected makers and followers; private makers only. Invisible means 404.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ProjectSchema } from '../functions/lib/schemas.ts'
import { type CreatedUser, type TestWorld, startWorld } from './support/app.ts'

let world: TestWorld
const people: Record<string, CreatedUser> = {}
const projects: Record<string, { id: string; slug: string }> = {}

beforeAll(async () => {
  world = await startWorld()
  for (const name of ['olivia', 'mike', 'fred', 'sam']) people[name] = await world.createUser(name)
  for (const privacy of ['public', 'protected', 'private']) {
    const p = await world.admin('create-project', '--owner', 'olivia', '--name', `${privacy} thing`, '--slug', `${privacy}-thing`,
      '--hashtag', `${privacy}thing`, '--privacy', privacy, '--makers', 'mike', '--github-url', 'https://github.com/o/p')
    projects[privacy] = { id: p.id, slug: p.slug }
    await world.sql`insert into app.project_follows (user_id, project_id)
      select u.id, app.from_public_id('proj', ${p.id}) from app.users u where u.username = 'fred'`
  }
})
afterAll(() => world.close())

const visibility: Record<string, Record<string, boolean>> = {
  olivia: { public: true, protected: true, private: true },
  mike: { public: true, protected: true, private: true },
  fred: { public: true, protected: true, private: false },
  // Issue 13: a protected project's profile is visible to everyone (its todos are not).
  sam: { public: true, protected: true, private: false },
}

describe('GET /v1/projects/{project_id}', () => {
  it('create-project prints the project as the owner sees it, every field typed', async () => {
    const res = await world.get(`/v1/projects/${projects.public!.id}`, { auth: people.olivia!.api_key })
    expect(res.status).toBe(200)
    const project = ProjectSchema.strict().parse(res.body)
    expect(project).toMatchObject({
      slug: 'public-thing', name: 'public thing', hashtag: 'publicthing', privacy: 'public', archived: false,
      pitch: null, description: null, website_url: null, github_url: 'https://github.com/o/p', header: null,
      logo: { small: expect.stringMatching(/^http:\/\/api\.test\/assets\/logo\/small\/[0-9A-F]{6}\/PT\.png$/), medium: expect.any(String), large: expect.any(String) },
      url: 'http://api.test/projects/public-thing', following: false,
    })
    expect(project.owner.username).toBe('olivia')
    expect(project.makers.map((m) => m.username)).toEqual(['olivia', 'mike'])
    expect(project.header_color).toMatch(/^#[0-9A-F]{6}$/)
  })

  it('finds a project by proj_ id and by slug (any case)', async () => {
    for (const ref of [projects.public!.id, 'public-thing', 'PUBLIC-THING']) {
      const res = await world.get(`/v1/projects/${ref}`, { auth: people.sam!.api_key })
      expect(res.status, ref).toBe(200)
      expect(res.body.id).toBe(projects.public!.id)
    }
  })

  for (const [viewer, sees] of Object.entries(visibility)) {
    for (const [privacy, visible] of Object.entries(sees)) {
      it(`${privacy} project, seen by ${viewer}: ${visible ? '200' : '404'}`, async () => {
        for (const ref of [projects[privacy]!.id, projects[privacy]!.slug]) {
          const res = await world.get(`/v1/projects/${ref}`, { auth: people[viewer]!.api_key })
          expect(res.status).toBe(visible ? 200 : 404)
          if (!visible) expect(res.body).toEqual({ error: `No project matches '${ref}'.` })
        }
      })
    }
  }

  it('following and followers_count are as the viewer sees them', async () => {
    await world.sql`update app.projects set followers_count = 1`
    const byFred = await world.get(`/v1/projects/${projects.protected!.id}`, { auth: people.fred!.api_key })
    expect(byFred.body).toMatchObject({ following: true, followers_count: 1 })
    const byMike = await world.get(`/v1/projects/${projects.protected!.id}`, { auth: people.mike!.api_key })
    expect(byMike.body.following).toBe(false)
  })

  it('404 for unknown and malformed ids', async () => {
    for (const ref of ['proj_00000000000000000000000000000000', 'proj_nope', 'no-such-slug']) {
      expect((await world.get(`/v1/projects/${ref}`, { auth: people.sam!.api_key })).status, ref).toBe(404)
    }
  })
})

describe('project lists', () => {
  const names = (res: { body: { data: { slug: string }[] } }) => res.body.data.map((p) => p.slug).sort()

  for (const [viewer, sees] of Object.entries(visibility)) {
    it(`GET /v1/projects and /v1/users/olivia/projects show ${viewer} only what ${viewer} may see`, async () => {
      const expected = Object.entries(sees).filter(([, v]) => v).map(([p]) => `${p}-thing`).sort()
      for (const path of ['/v1/projects', '/v1/users/olivia/projects', `/v1/users/${people.mike!.id}/projects`]) {
        const res = await world.get(path, { auth: people[viewer]!.api_key })
        expect(res.status, path).toBe(200)
        expect(names(res), path).toEqual(expected)
        expect(res.body.total_count, path).toBe(expected.length)
        expect(res.body).toMatchObject({ has_more: false, after: null })
      }
    })
  }

  it('/v1/users/me/projects lists the projects you make', async () => {
    const res = await world.get('/v1/users/me/projects', { auth: people.mike!.api_key })
    expect(names(res)).toEqual(['private-thing', 'protected-thing', 'public-thing'])
    const none = await world.get('/v1/users/me/projects', { auth: people.sam!.api_key })
    expect(none.body).toEqual({ data: [], has_more: false, total_count: 0, after: null })
  })

  it('404 for the projects of an unknown user', async () => {
    const res = await world.get('/v1/users/nobody/projects', { auth: people.sam!.api_key })
    expect(res.status).toBe(404)
    expect(res.body.error).toMatch(/No user matches/)
  })

  describe('pagination', () => {
    beforeAll(async () => {
      const pam = await world.createUser('pam')
      // 105 projects, one second apart, so the order is known: newest (pam-104) first.
      await world.sql`
        insert into app.projects (owner_id, name, slug, created_at)
        select app.from_public_id('user', ${pam.id}), 'Pam ' || n, 'pam-' || lpad(n::text, 3, '0'),
               timestamptz '2026-01-01' + make_interval(secs => n)
        from generate_series(0, 104) n`
    })

    it('walks every page with limit and starting_after, newest first, with a stable total', async () => {
      const seen: string[] = []
      let cursor: string | null = null
      let pages = 0
      do {
        const query: string = cursor ? `&starting_after=${cursor}` : ''
        const res = await world.get(`/v1/users/pam/projects?limit=40${query}`, { auth: people.sam!.api_key })
        expect(res.status).toBe(200)
        expect(res.body.total_count).toBe(105)
        seen.push(...res.body.data.map((p: { slug: string }) => p.slug))
        expect(res.body.has_more).toBe(seen.length < 105)
        cursor = res.body.after
        if (cursor) expect(cursor).toBe(res.body.data.at(-1).id)
        pages++
      } while (cursor)
      expect(pages).toBe(3)
      expect(seen).toEqual(Array.from({ length: 105 }, (_, i) => `pam-${String(104 - i).padStart(3, '0')}`))
    })

    it('defaults to 25, clamps above 100, and takes per_page and after as aliases', async () => {
      const first = await world.get('/v1/users/pam/projects', { auth: people.sam!.api_key })
      expect(first.body.data).toHaveLength(25)
      const clamped = await world.get('/v1/users/pam/projects?limit=500', { auth: people.sam!.api_key })
      expect(clamped.body.data).toHaveLength(100)
      expect(clamped.body.has_more).toBe(true)
      const alias = await world.get('/v1/users/pam/projects?per_page=2', { auth: people.sam!.api_key })
      expect(alias.body.data.map((p: { slug: string }) => p.slug)).toEqual(['pam-104', 'pam-103'])
      const next = await world.get(`/v1/users/pam/projects?per_page=2&after=${alias.body.after}`, { auth: people.sam!.api_key })
      expect(next.body.data.map((p: { slug: string }) => p.slug)).toEqual(['pam-102', 'pam-101'])
    })

    it('422 for a limit below 1 or not a whole number', async () => {
      for (const limit of ['0', '-3', '2.5', 'ten']) {
        const res = await world.get(`/v1/projects?limit=${limit}`, { auth: people.sam!.api_key })
        expect(res.status, limit).toBe(422)
        expect(res.body).toEqual({ error: 'limit must be a whole number from 1 to 100' })
      }
    })

    it('404 for a starting_after that names no project', async () => {
      const res = await world.get('/v1/projects?starting_after=proj_00000000000000000000000000000000', { auth: people.sam!.api_key })
      expect(res.status).toBe(404)
      expect(res.body.error).toMatch(/^starting_after/)
      expect((await world.get('/v1/projects?after=garbage', { auth: people.sam!.api_key })).status).toBe(404)
    })

    it('a cursor naming a project the viewer cannot see is not found either', async () => {
      const res = await world.get(`/v1/projects?starting_after=${projects.private!.id}`, { auth: people.sam!.api_key })
      expect(res.status).toBe(404)
    })
  })
})
