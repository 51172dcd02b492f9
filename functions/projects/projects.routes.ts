import { createRoute, z } from '@hono/zod-openapi'
import { PaginationQuery, ProjectSchema, errors, jsonContent, paginated } from '../lib/schemas.ts'

const ProjectParam = z.object({
  project_id: z.string().min(1).openapi({ param: { name: 'project_id', in: 'path' }, description: 'proj_ ID or slug.' }),
})

export const listProjects = createRoute({
  method: 'get',
  path: '/v1/projects',
  tags: ['Projects'],
  summary: 'Projects you can see',
  description: 'Every project visible to you (public and protected ones, private ones you make; the todos of a protected one are for its makers and approved followers), newest first. Takes only the pagination parameters.',
  request: { query: PaginationQuery },
  responses: { 200: jsonContent(paginated(ProjectSchema, 'PaginatedProjects'), 'A page of projects'), ...errors(401, 403, 404, 422) },
})

export const getProject = createRoute({
  method: 'get',
  path: '/v1/projects/{project_id}',
  tags: ['Projects'],
  summary: 'A project',
  request: { params: ProjectParam },
  responses: { 200: jsonContent(ProjectSchema, 'The project'), ...errors(401, 403, 404) },
})
