import { resolve } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';
import base from './vitest.config.ts';
import { SETS } from './stryker.config.mjs';

/**
 * The test files of one mutation set (MUTATE_SET, see stryker.config.mjs) as vitest's own include
 * list. Stryker's `testFiles` option would do the same, but with it Stryker 9.6 activates mutants
 * of module-level values after the module has loaded, so they are reported as survivors whatever the
 * tests say (stryker-js issue 6144).
 */
const set = SETS[(process.env.MUTATE_SET ?? 'http-auth') as keyof typeof SETS];

/**
 * Test files in the set's order (fast, focused files first). Stryker stops at a mutant's first failing
 * test, and vitest's own order puts the longest files first, so each mutant paid for the slow
 * integration files before the unit test that kills it ran. The order changes no result.
 */
class SetOrder extends BaseSequencer {
  override async sort(files: TestSpecification[]) {
    const rank = (f: TestSpecification) => set.tests.findIndex((t) => resolve(t) === resolve(f.moduleId));
    return [...files].sort((a, b) => rank(a) - rank(b));
  }
}
export default {
  ...base,
  test: {
    ...base.test,
    include: set.tests,
    sequence: { ...base.test?.sequence, sequencer: SetOrder },
    setupFiles: [...[base.test?.setupFiles ?? []].flat(), 'test/helpers/mutation-setup.ts'],
    // Instrumented code runs slower: the initial run of the campaign tests timed out at the usual 30 s.
    testTimeout: 120_000,
    hookTimeout: 180_000,
  },
};
