import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    // Every test asserts something (expect.hasAssertions() before each test): test/support/setup.ts.
    setupFiles: ['test/support/setup.ts'],
    // Each file gets its own database cloned from a migrated template, so files run in parallel.
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 120_000,
    reporters: ['default'],
  },
})
