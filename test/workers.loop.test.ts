import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { startLoops } from '../src/workers/loop.ts';
import { eventually } from './helpers/app.ts';

describe('worker loop runner', () => {
  it('backs off while its work fails on a lost database connection, logs the outage once, and resumes by itself', async () => {
    const lines: { level: number; msg: string }[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => { lines.push(JSON.parse(line)); } });
    const runs: number[] = [];
    let outage = true;
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
      await eventually(async () => runs.length >= failedRuns + 3, 10_000, 5);
    } finally {
      await loops.stop();
    }
    // Waits double: 10, 20, 40, 80, 160 ms (a fixed 10 ms retry would hammer a database that is down).
    const gaps = runs.slice(1, 6).map((at, i) => at - runs[i]);
    for (const [i, gap] of gaps.entries()) expect(gap).toBeGreaterThanOrEqual(10 * 2 ** i - 2);
    expect(lines.filter((l) => l.level === 40).map((l) => l.msg)).toEqual(['database unavailable; worker loop backs off until it returns']);
    expect(lines.filter((l) => l.level >= 50)).toEqual([]);
    expect(lines.some((l) => l.msg === 'database available again; worker loop resumed')).toBe(true);
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
  });
});
