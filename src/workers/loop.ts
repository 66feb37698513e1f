import type { Logger } from 'pino';
import { isDatabaseUnavailable } from '../db/database.ts';

export interface WorkerLoop {
  name: string;
  /** Does one unit of work; returns how many items it handled (0 means idle: wait before the next run). */
  runOnce(): Promise<number>;
  /** Idle wait in ms; defaults to WORKER_POLL_MS. */
  intervalMs?: number;
  /** Called once after the loop has stopped (lets work it started in the background finish). */
  stop?(): Promise<void>;
}

export interface RunningLoops {
  stop(): Promise<void>;
}

/** Longest wait between two runs of a failing loop (unless its own interval is longer). */
export const MAX_BACKOFF_MS = 2000;

/**
 * Runs each loop until stopped: straight on while there is work, the idle interval when there is
 * none. A failing loop backs off (its interval, doubled per consecutive failure, up to
 * MAX_BACKOFF_MS) and resumes by itself; a database outage is logged when it starts and ends,
 * not on every retry.
 */
export function startLoops(loops: WorkerLoop[], defaultIntervalMs: number, logger: Logger): RunningLoops {
  let stopping = false;
  const wakeups = new Set<() => void>();
  const sleep = (ms: number) => new Promise<void>((resolve) => {
    const done = () => { clearTimeout(timer); wakeups.delete(done); resolve(); };
    const timer = setTimeout(done, ms);
    wakeups.add(done);
  });

  const runs = loops.map(async (loop) => {
    const intervalMs = loop.intervalMs ?? defaultIntervalMs;
    let failures = 0;
    let databaseDown = false;
    while (!stopping) {
      let handled = 0;
      try {
        handled = await loop.runOnce();
        if (databaseDown) logger.info({ loop: loop.name, failures }, 'database available again; worker loop resumed');
        failures = 0;
        databaseDown = false;
      } catch (err) {
        failures += 1;
        if (!isDatabaseUnavailable(err)) {
          logger.error({ err, loop: loop.name }, 'worker loop failed; retrying with backoff');
        } else if (!databaseDown) {
          databaseDown = true;
          logger.warn({ err: (err as Error).message, loop: loop.name }, 'database unavailable; worker loop backs off until it returns');
        }
      }
      if (stopping) break;
      if (failures > 0) await sleep(Math.min(intervalMs * 2 ** (failures - 1), Math.max(intervalMs, MAX_BACKOFF_MS)));
      else if (handled === 0) await sleep(intervalMs);
    }
  });

  return {
    async stop() {
      stopping = true;
      for (const wake of [...wakeups]) wake();
      await Promise.all(runs);
      await Promise.all(loops.map((loop) => loop.stop?.().catch((err) => logger.error({ err, loop: loop.name }, 'worker loop stop failed'))));
    },
  };
}
