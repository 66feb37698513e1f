import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Sandbox } from '../../src/sandbox/sandbox.ts';
import { measureSandboxCapacityDetailed } from '../../src/sandbox/capacity.ts';
import { startTestSandbox } from './helpers.ts';

describe('sandbox capacity probe', () => {
  let sandbox: Sandbox;
  beforeAll(async () => { sandbox = await startTestSandbox({ callbacks: false }); });
  afterAll(async () => { await sandbox.close(); });

  it('fires valid template sends and reports accepted sends per second', async () => {
    const result = await measureSandboxCapacityDetailed({ baseUrl: sandbox.baseUrl, seconds: 0.5, concurrency: 8 });
    // Throughput itself is measured by the benchmark; under a parallel test run only sanity holds.
    expect(result.errors).toBe(0);
    expect(result.sends).toBeGreaterThan(0);
    expect(result.sendsPerSecond).toBeGreaterThan(0);
    expect(sandbox.state.sends.size).toBe(result.sends);
  });
});
