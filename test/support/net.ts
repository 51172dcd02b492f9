// Kept where the tests import it from; the helpers live in local/net.ts (npm run db:diff uses them too).
export { databaseUrl, freePort } from '../../local/net.ts'
