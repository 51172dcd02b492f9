// A router per resource, all sharing the validation hook: invalid input is 422 with a
// sentence that names the field (SPEC section 7), never zod's raw issue list.
import { OpenAPIHono } from '@hono/zod-openapi'
import type { AppEnv } from './context.ts'
import { refuseUnknownCredential } from './auth.ts'

interface Issue {
  path: PropertyKey[]
  message: string
  code?: string
}

export function describeIssue(issue: Issue): string {
  const field = issue.path.map(String).join('.')
  if (!field) return issue.message
  return issue.message.startsWith(field) ? issue.message : `${field}: ${issue.message}`
}

/** A router whose invalid input answers `validationStatus` (422; SPEC wants 400 for uploads). */
export function createRouter(validationStatus: 400 | 422 = 422) {
  return new OpenAPIHono<AppEnv>({
    defaultHook: async (result, c) => {
      if (!result.success) {
        // A credential that does not exist gets its 403, not our input rules.
        await refuseUnknownCredential(c)
        const issue = result.error.issues[0] as Issue
        return c.json({ error: describeIssue(issue) }, validationStatus)
      }
    },
  })
}
