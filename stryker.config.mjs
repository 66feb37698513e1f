// @ts-check
// Mutation testing (StrykerJS, vitest runner) of the modules where a bug costs money or data, one set of files at a
// time (SETS below). `npm run mutate` runs every set through scripts/mutate.mjs, which sets MUTATE_SET; reports land
// in reports/mutation/<set>/ (gitignored).
// The tests need real PostgreSQL and Redis (DATABASE_URL, REDIS_URL), as for `npm test`.

// Each set mutates a few files and runs only the test files that exercise them: with integration tests every request
// passes through auth and the error handler, so a wide set would run every test against every surviving mutant.
// `group` is the module group the README reports on (scripts/mutate.mjs adds the sets up per group).
export const SETS = {
  'http-auth': { group: 'http', mutate: ['src/http/auth.ts'], tests: ['test/auth.test.ts'] },
  'http-rate-limit': {
    group: 'http', mutate: ['src/http/rate-limit.ts'],
    tests: ['test/rate-limit.rules.test.ts', 'test/rate-limit.test.ts', 'test/rate-limit.counters.test.ts',
      'test/rate-limit-redis-outage.test.ts'],
  },
  'http-idempotency': {
    group: 'http', mutate: ['src/http/idempotency.ts'],
    tests: ['test/idempotency.store.test.ts', 'test/idempotency.test.ts', 'test/faults.idempotency.test.ts'],
  },
  'http-errors': {
    group: 'http', mutate: ['src/http/errors.ts', 'src/http/error-handler.ts'],
    tests: ['test/http.error-mapping.test.ts', 'test/errors.test.ts', 'test/unstorable-input.test.ts'],
  },
  // Its tests wait out real server timeouts over sockets: a set of its own.
  'http-client-error': { group: 'http', mutate: ['src/http/client-error.ts'], tests: ['test/http.client-errors.test.ts'] },
  'webhooks-signer': {
    group: 'webhooks', mutate: ['src/modules/webhooks/webhooks.signer.ts'],
    tests: ['src/modules/webhooks/webhooks.signer.test.ts', 'src/modules/webhooks/verify-signature.test.ts'],
  },
  'webhooks-sender': {
    group: 'webhooks', mutate: ['src/modules/webhooks/webhooks.sender.ts'],
    tests: ['test/webhooks.sender.test.ts', 'test/webhooks.delivery.test.ts'],
  },
  'webhooks-queue': {
    group: 'webhooks', mutate: ['src/modules/webhooks/webhooks.queue.ts'],
    tests: ['test/webhooks.delivery.test.ts', 'test/webhooks.recover.test.ts'],
  },
  'webhooks-deliverer': {
    group: 'webhooks', mutate: ['src/workers/webhook-deliverer.ts', 'src/workers/loop.ts'],
    // deliverer-runs first: it drives the deliverer run by run with scripted attempts and kills most mutants in seconds.
    tests: ['test/webhooks.deliverer-runs.test.ts', 'test/webhooks.delivery.test.ts', 'test/webhooks.endpoint-pace.test.ts',
      'test/webhooks.recover.test.ts', 'test/workers.loop.test.ts'],
  },
  messages: {
    group: 'messages', mutate: ['src/modules/messages/messages.statuses.ts'],
    // callbacks.fixtures.test.ts is left out: its waits for sandbox callbacks ran out on instrumented code under load.
    tests: ['test/messages.statuses.test.ts', 'test/callbacks.test.ts', 'test/messages.reads.test.ts', 'test/messages.test.ts'],
  },
  'campaigns-states': {
    // Its tables are read when the module loads: Stryker runs every test of the set against such a mutant, and the
    // lifecycle test file took about a minute per mutant. The unit test pins the whole table.
    group: 'campaigns', mutate: ['src/modules/campaigns/campaigns.states.ts'], tests: ['src/modules/campaigns/campaigns.states.test.ts'],
  },
  'campaigns-queue': {
    // The recipient queue alone: queue and counters call it directly, the others through an in-process dispatcher. Left
    // out: the kill test (its service runs in a child process, where no mutant is active) and the lifecycle test (its
    // dispatched campaign, which dispatch.test.ts covers, ran out of its 30 s on instrumented code under load 16).
    group: 'campaigns', mutate: ['src/modules/campaigns/campaigns.queue.ts'],
    tests: ['test/campaigns.queue.test.ts', 'test/campaigns.counters.test.ts', 'test/campaigns.dispatch-outcomes.test.ts', 'test/campaigns.dispatch.test.ts'],
  },
  'campaigns-dispatch': {
    // The dispatcher's loop turn by turn (dispatch-loop), its recording of outcomes (dispatch-outcomes), then the
    // dispatch tests through running workers. Left out, as for campaigns-queue: the kill test (its workers are child
    // processes, where no mutant is active) and the lifecycle test (slow under instrumentation; its dispatcher runs
    // in a beforeAll, where coverage counts as static, so every such mutant reran it; what it dispatches is pinned here).
    group: 'campaigns', mutate: ['src/modules/campaigns/campaigns.queue.ts', 'src/workers/campaign-dispatcher.ts'],
    tests: ['test/campaigns.dispatch-loop.test.ts', 'test/campaigns.dispatch-outcomes.test.ts', 'test/campaigns.dispatch.test.ts'],
  },
};

const name = process.env.MUTATE_SET ?? 'http-auth';
const group = SETS[/** @type {keyof typeof SETS} */ (name)];
if (!group) throw new Error(`MUTATE_SET=${name}: sets are ${Object.keys(SETS).join(', ')}`);

/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: 'vitest',
  // The set's test files are the include list of vitest.mutate.config.ts (not Stryker's testFiles: see there).
  vitest: { configFile: 'vitest.mutate.config.ts', related: false },
  coverageAnalysis: 'perTest',
  concurrency: Number(process.env.MUTATE_CONCURRENCY ?? 1),
  mutate: group.mutate,
  // '.stryker-tmp': Stryker leaves out only its own set's sandbox, and a run copying another set's while it changes fails.
  ignorePatterns: ['data', 'dist', '.dist-*', 'bench/results', '.scratch', 'packages', '.stryker-tmp'],
  reporters: ['clear-text', 'progress', 'html', 'json'],
  htmlReporter: { fileName: `reports/mutation/${name}/index.html` },
  jsonReporter: { fileName: `reports/mutation/${name}/mutation.json` },
  incrementalFile: `reports/mutation/${name}/stryker-incremental.json`,
  // Integration tests against real services on a shared machine: generous timeouts.
  timeoutMS: 15_000,
  timeoutFactor: 2,
  dryRunTimeoutMinutes: 30,
  tempDirName: `.stryker-tmp/${name}`,
  cleanTempDir: 'always',
};
