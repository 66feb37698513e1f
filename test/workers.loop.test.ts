import pino from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { MAX_BACKOFF_MS, startLoops } from '../src/workers/loop.ts';
import { eventually } from './helpers/app.ts';

describe('worker loop runner', () => {
  it('backs off while its work fails on a lost database connection, logs the outage once, and resumes by itself', async () => {
    const lines: { level: number; msg: string }[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => { lines.push(JSON.parse(line)); } });
    const runs: number[] = [];
    let outage = true;
    let failedRunsAtRecovery = -1;
    const loops = startLoops([{
      name: 'probe',
      intervalMs: 10,
      async runOnce() {
        runs.push(performance.now());
        // pg's error for a connection that died under a query
        if (outage) throw new Error('Connection terminated unexpectedly');
        return 0;
      },
    }], 10, logger);
    try {
      await eventually(async () => runs.length >= 6, 10_000, 5);
      outage = false;
      const failedRuns = runs.length;
      failedRunsAtRecovery = failedRuns;
      await eventually(async () => runs.length >= failedRuns + 3, 10_000, 5);
    } finally {
      await loops.stop();
    }
    // Waits double: 10, 20, 40, 80, 160 ms (a fixed 10 ms retry would hammer a database that is down).
    const gaps = runs.slice(1, 6).map((at, i) => at - runs[i]);
    for (const [i, gap] of gaps.entries()) expect(gap).toBeGreaterThanOrEqual(10 * 2 ** i - 2);
    expect(lines.filter((l) => l.level === 40)).toMatchObject([
      { msg: 'database unavailable; worker loop backs off until it returns', loop: 'probe', err: 'Connection terminated unexpectedly' },
    ]);
    expect(lines.filter((l) => l.level >= 50)).toEqual([]);
    // Once, when it came back (not at every run after), with the failures it took.
    expect(lines.filter((l) => l.level === 30)).toMatchObject([{ msg: 'database available again; worker loop resumed', loop: 'probe', failures: failedRunsAtRecovery }]);
  });

  it('a failure that is not a lost connection is logged as an error each time, and backs off too', async () => {
    const lines: { level: number; msg: string }[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => { lines.push(JSON.parse(line)); } });
    const runs: number[] = [];
    const loops = startLoops([{
      name: 'buggy',
      intervalMs: 10,
      async runOnce() {
        runs.push(performance.now());
        throw new TypeError("Cannot read properties of undefined (reading 'id')");
      },
    }], 10, logger);
    try {
      await eventually(async () => runs.length >= 4, 10_000, 5);
    } finally {
      await loops.stop();
    }
    expect(runs[3] - runs[2]).toBeGreaterThanOrEqual(38);
    expect(lines.filter((l) => l.level === 50).length).toBe(runs.length);
    expect(lines[0]).toMatchObject({ msg: 'worker loop failed; retrying with backoff', loop: 'buggy', err: { type: 'TypeError', message: "Cannot read properties of undefined (reading 'id')" } });
  });
});

describe('worker loop runner, on fake timers', () => {
  afterEach(() => { vi.useRealTimers(); });
  const silent = () => pino({ level: 'silent' });

  it('waits its interval doubled per consecutive failure, up to MAX_BACKOFF_MS, and its interval again after a success', async () => {
    vi.useFakeTimers({ now: 0 });
    const runs: number[] = [];
    let failing = true;
    const loops = startLoops([{
      name: 'flaky',
      intervalMs: 10,
      async runOnce() {
        runs.push(Date.now());
        if (failing) throw new Error('Connection terminated unexpectedly');
        return 0;
      },
    }], 10, silent());
    await vi.advanceTimersByTimeAsync(5_000);
    const gaps = runs.slice(1).map((at, i) => at - runs[i]);
    expect(gaps).toEqual([10, 20, 40, 80, 160, 320, 640, 1280, MAX_BACKOFF_MS]);
    failing = false;
    const before = runs.length;
    await vi.advanceTimersByTimeAsync(2_000 + 100);
    const after = runs.slice(before);
    expect(after.slice(1, 4).map((at, i) => at - after[i])).toEqual([10, 10, 10]);
    await loops.stop();
  });

  it('a loop whose own interval is longer than MAX_BACKOFF_MS backs off by its interval', async () => {
    vi.useFakeTimers({ now: 0 });
    const runs: number[] = [];
    const loops = startLoops([{ name: 'slow', intervalMs: 3_000, async runOnce() { runs.push(Date.now()); throw new Error('boom'); } }], 10, silent());
    await vi.advanceTimersByTimeAsync(9_500);
    expect(runs).toEqual([0, 3_000, 6_000, 9_000]);
    await loops.stop();
  });

  it('stop wakes a sleeping loop at once, and a loop stopped in the middle of a run does not sleep again', async () => {
    vi.useFakeTimers({ now: 0 });
    let runs = 0;
    let finishRun: (() => void) | null = null;
    const idle = startLoops([{ name: 'idle', intervalMs: 60_000, async runOnce() { runs++; return 0; } }], 10, silent());
    await vi.advanceTimersByTimeAsync(1);
    let stopped = false;
    void idle.stop().then(() => { stopped = true; });
    await vi.advanceTimersByTimeAsync(1);
    expect(stopped).toBe(true);
    expect(runs).toBe(1);

    const busy = startLoops([{ name: 'busy', intervalMs: 60_000, runOnce: () => new Promise<number>((resolve) => { finishRun = () => resolve(0); }) }], 10, silent());
    await vi.advanceTimersByTimeAsync(1);
    let busyStopped = false;
    void busy.stop().then(() => { busyStopped = true; });
    finishRun!();
    await vi.advanceTimersByTimeAsync(1);
    expect(busyStopped).toBe(true);
  });

  it('runs each loop\'s stop after the loops end; a failing stop is logged and does not fail the others', async () => {
    const lines: { level: number; msg: string; loop?: string }[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => { lines.push(JSON.parse(line)); } });
    const stopped: string[] = [];
    const loops = startLoops([
      { name: 'breaks-on-stop', intervalMs: 5, runOnce: async () => 0, stop: async () => { throw new Error('flush failed'); } },
      { name: 'stops-cleanly', intervalMs: 5, runOnce: async () => 0, stop: async () => { stopped.push('stops-cleanly'); } },
    ], 5, logger);
    await loops.stop();
    expect(stopped).toEqual(['stops-cleanly']);
    expect(lines).toMatchObject([{ level: 50, msg: 'worker loop stop failed', loop: 'breaks-on-stop', err: { message: 'flush failed' } }]);
  });
});
