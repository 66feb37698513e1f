import base from './vitest.config.ts';
import { SETS } from './stryker.config.mjs';

/**
 * The test files of one mutation set (MUTATE_SET, see stryker.config.mjs) as vitest's own include
 * list. Stryker's `testFiles` option would do the same, but with it Stryker 9.6 activates mutants
 * of module-level values after the module has loaded, so they are reported as survivors whatever the
 * tests say (stryker-js issue 6144).
 */
const set = SETS[(process.env.MUTATE_SET ?? 'http-auth') as keyof typeof SETS];
export default {
  ...base,
  test: {
    ...base.test,
    include: set.tests,
    setupFiles: [...[base.test?.setupFiles ?? []].flat(), 'test/helpers/mutation-setup.ts'],
    // Instrumented code runs slower: the initial run of the campaign tests timed out at the usual 30 s.
    testTimeout: 120_000,
    hookTimeout: 180_000,
  },
};
