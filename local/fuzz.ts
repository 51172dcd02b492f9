// `npm run fuzz [-- --runs N] [--seed S] [--collect]`: the fuzz tests of test/fuzz.test.ts with
// many more runs than `npm test` gives them (docs/reliability.md records a run). The same code and
// the same world (its own database cloned from the migrated template, the real app over HTTP);
// only FUZZ_RUNS and FUZZ_SEED differ. --collect reports every failing request instead of
// stopping at the first.
import { spawnSync } from 'node:child_process'
import { parseArgs } from 'node:util'
import { ROOT } from './paths.ts'

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '5000' },
    seed: { type: 'string', default: String(Date.now() % 1_000_000) },
    collect: { type: 'boolean', default: false },
  },
})
const runs = Number(values.runs)
const seed = Number(values.seed)
if (!Number.isInteger(runs) || runs < 1 || !Number.isInteger(seed)) {
  console.error('usage: npm run fuzz -- [--runs N] [--seed S] [--collect]')
  process.exit(2)
}
console.log(`fuzz: ${runs} runs per property, seed ${seed} (repeat with --seed ${seed})`)
const started = Date.now()
const result = spawnSync('npx', ['vitest', 'run', 'test/fuzz.test.ts'], {
  cwd: ROOT,
  stdio: 'inherit',
  env: { ...process.env, FUZZ_RUNS: String(runs), FUZZ_SEED: String(seed), ...(values.collect ? { FUZZ_COLLECT: '1' } : {}) },
})
console.log(`fuzz: ${result.status === 0 ? 'passed' : 'FAILED'} in ${Math.round((Date.now() - started) / 1000)} s (seed ${seed})`)
process.exit(result.status ?? 1)
