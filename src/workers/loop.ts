import type { Logger } from 'pino';

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

/** Runs each loop until stopped: straight on while there is work, the idle interval when there is none. */
export function startLoops(loops: WorkerLoop[], defaultIntervalMs: number, logger: Logger): RunningLoops {
  let stopping = false;
  const wakeups = new Set<() => void>();
  const sleep = (ms: number) => new Promise<void>((resolve) => {
    const done = () => { clearTimeout(timer); wakeups.delete(done); resolve(); };
    const timer = setTimeout(done, ms);
    wakeups.add(done);
  });

  const runs = loops.map(async (loop) => {
    while (!stopping) {
      let handled = 0;
      try {
        handled = await loop.runOnce();
      } catch (err) {
        logger.error({ err, loop: loop.name }, 'worker loop failed; retrying after the interval');
      }
      if (handled === 0 && !stopping) await sleep(loop.intervalMs ?? defaultIntervalMs);
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
