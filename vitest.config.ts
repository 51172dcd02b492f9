import { availableParallelism } from 'node:os'
import { relative } from 'node:path'
import { defineConfig } from 'vitest/config'
import { BaseSequencer, type TestSpecification } from 'vitest/node'
import durations from './test/durations.json' with { type: 'json' }

/**
 * Longest files first, so that the run does not end with one slow file on one worker while the
 * others idle. What this machine's last run measured (vitest's cache) when it knows the file,
 * else test/durations.json (a reference run's figures: a clean clone, as CI runs, has no cache);
 * files neither knows (new ones) and files that failed last time go first.
 */
class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const root = this.ctx.config.root
    const known = durations as Record<string, number>
    const last = (spec: TestSpecification) => {
      const path = relative(root, spec.moduleId).split('\\').join('/')
      const cached = this.ctx.cache.getFileTestResults(`${spec.project.name}:${path}`)
      if (cached?.failed) return Infinity
      return cached?.duration ?? known[path] ?? Infinity
    }
    return [...files].sort((a, b) => last(b) - last(a))
  }
}

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    // Every test asserts something (expect.hasAssertions() before each test): test/support/setup.ts.
    setupFiles: ['test/support/setup.ts'],
    // Each file gets its own database cloned from a migrated template, so files run in parallel.
    pool: 'forks',
    // Files spend most of their time waiting (on PostgreSQL, on sockets, on child processes,
    // on deadlines), so twice as many as there are cores; vitest's own default (cores - 1) ran
    // them one at a time on a 2-core machine. VITEST_MAX_WORKERS or --maxWorkers overrides it.
    maxWorkers: Math.max(2, availableParallelism() * 2),
    sequence: { sequencer: LongestFirst },
    testTimeout: 30_000,
    hookTimeout: 120_000,
    reporters: ['default'],
  },
})
