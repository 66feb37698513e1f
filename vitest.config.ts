import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'src/**/*.test.ts', 'packages/*/test/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],

    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Each test makes its own tenant, so files run in parallel against one database.
    fileParallelism: true,
    // vitest's default is one worker fewer than the cores: a single worker on a 2-core machine, so the
    // files ran one after another although most of a file's time is spent waiting (the database, the
    // sandbox over HTTP, worker intervals, child processes). Two, one per core: three were 3.5 times
    // faster than one on a subset but timed tests out on a machine loaded by other work
    // (`npx vitest run --maxWorkers=N` to try another count).
    maxWorkers: 2,
  },
});
