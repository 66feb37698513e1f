// @ts-check
// Mutation testing (StrykerJS, vitest runner) of the modules where a bug costs money or data. One group runs at a
// time: it mutates its own source files and runs only the test files that exercise them. `npm run mutate` runs every
// group through scripts/mutate.mjs, which sets MUTATE_GROUP; reports land in reports/mutation/<group>/ (gitignored).
// The tests need real PostgreSQL and Redis (DATABASE_URL, REDIS_URL), as for `npm test`.

export const GROUPS = {
  http: {
    mutate: ['src/http/auth.ts', 'src/http/rate-limit.ts', 'src/http/idempotency.ts', 'src/http/errors.ts',
      'src/http/error-handler.ts', 'src/http/client-error.ts'],
    tests: ['test/auth.test.ts', 'test/rate-limit.test.ts', 'test/rate-limit.counters.test.ts',
      'test/rate-limit-redis-outage.test.ts', 'test/idempotency.test.ts', 'test/faults.idempotency.test.ts',
      'test/errors.test.ts', 'test/http.client-errors.test.ts', 'test/unstorable-input.test.ts'],
  },
  webhooks: {
    mutate: ['src/modules/webhooks/webhooks.signer.ts', 'src/modules/webhooks/webhooks.queue.ts',
      'src/modules/webhooks/webhooks.sender.ts', 'src/workers/webhook-deliverer.ts', 'src/workers/loop.ts'],
    tests: ['test/webhooks.delivery.test.ts', 'test/webhooks.sender.test.ts', 'test/webhooks.recover.test.ts',
      'test/webhooks.endpoint-pace.test.ts', 'test/workers.loop.test.ts', 'src/modules/webhooks/verify-signature.test.ts'],
  },
  messages: {
    mutate: ['src/modules/messages/messages.statuses.ts'],
    tests: ['test/callbacks.test.ts', 'test/messages.reads.test.ts', 'test/messages.test.ts'],
  },
  campaigns: {
    mutate: ['src/modules/campaigns/campaigns.states.ts', 'src/modules/campaigns/campaigns.queue.ts',
      'src/workers/campaign-dispatcher.ts'],
    tests: ['test/campaigns.lifecycle.test.ts', 'test/campaigns.dispatch.test.ts', 'test/campaigns.kill.test.ts',
      'test/campaigns.api.test.ts'],
  },
};

const name = process.env.MUTATE_GROUP ?? 'http';
const group = GROUPS[/** @type {keyof typeof GROUPS} */ (name)];
if (!group) throw new Error(`MUTATE_GROUP=${name}: groups are ${Object.keys(GROUPS).join(', ')}`);

/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: 'vitest',
  vitest: { configFile: 'vitest.config.ts', related: false },
  coverageAnalysis: 'perTest',
  concurrency: Number(process.env.MUTATE_CONCURRENCY ?? 1),
  mutate: group.mutate,
  testFiles: group.tests,
  ignorePatterns: ['data', 'dist', '.dist-*', 'bench/results', '.scratch', 'packages'],
  reporters: ['clear-text', 'progress', 'html', 'json'],
  htmlReporter: { fileName: `reports/mutation/${name}/index.html` },
  jsonReporter: { fileName: `reports/mutation/${name}/mutation.json` },
  incrementalFile: `reports/mutation/${name}/stryker-incremental.json`,
  // Integration tests against real services on a shared machine: generous timeouts.
  timeoutMS: 15_000,
  timeoutFactor: 2,
  dryRunTimeoutMinutes: 30,
  tempDirName: '.stryker-tmp',
  cleanTempDir: 'always',
};
