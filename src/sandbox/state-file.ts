import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { performance } from 'node:perf_hooks';

/** Writes at most this often. */
export const STATE_WRITE_INTERVAL_MS = 150;
/** ...and never more often than this many times a write's own duration (a snapshot swollen by a dead receiver's backlog). */
const WRITE_COST_FACTOR = 10;

/**
 * A JSON snapshot kept in a file, rewritten atomically (write, then rename) after changes. Changes
 * are coalesced: a change after a quiet spell is written at once (on the next turn), then at most
 * one write per STATE_WRITE_INTERVAL_MS (or 10x the last write's duration, whichever is longer), so
 * the send path pays a flag and a timer check per change. `flush` writes what is pending now (on a
 * clean close); a process killed outright loses the changes of at most the last interval.
 */
export class StateFile<T> {
  private timer: NodeJS.Timeout | null = null;
  private dirty = false;
  private lastWriteAt = 0;
  private lastWriteMs = 0;

  constructor(private readonly path: string | undefined, private readonly snapshot: () => T, private readonly intervalMs = STATE_WRITE_INTERVAL_MS) {}

  load(): T | null {
    if (!this.path || !existsSync(this.path)) return null;
    try {
      return JSON.parse(readFileSync(this.path, 'utf8')) as T;
    } catch (err) {
      throw new Error(`sandbox state ${this.path} cannot be read (${(err as Error).message}); remove it to start the sandbox afresh`);
    }
  }

  schedule(): void {
    if (!this.path) return;
    this.dirty = true;
    if (this.timer) return;
    const interval = Math.max(this.intervalMs, WRITE_COST_FACTOR * this.lastWriteMs);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.flush();
    }, Math.max(0, this.lastWriteAt + interval - Date.now()));
    this.timer.unref();
  }

  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (!this.path || !this.dirty) return;
    this.dirty = false;
    const started = performance.now();
    mkdirSync(dirname(this.path), { recursive: true });
    writeFileSync(`${this.path}.tmp`, JSON.stringify(this.snapshot()));
    renameSync(`${this.path}.tmp`, this.path);
    this.lastWriteMs = performance.now() - started;
    this.lastWriteAt = Date.now();
  }
}
