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
  },
});
