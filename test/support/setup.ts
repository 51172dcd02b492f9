// Registered in vitest.config.ts as a setup file: runs in every test file's worker before its tests.
//
// Every test must make at least one assertion (issue 31, item 5). A test that asserts nothing
// passes whatever the code does: an early `return` for a case it could not set up, a `.catch(() => {})`
// that swallows the failure it was about, a fallback taken silently. With this, such a test
// fails with "expected any number of assertion, but got none", so the class cannot come back.
// A test that has nothing to check on a machine (no Chromium) is skipped, and says so.
import { beforeEach, expect } from 'vitest'

beforeEach(() => {
  expect.hasAssertions()
})
