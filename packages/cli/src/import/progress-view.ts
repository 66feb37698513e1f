import cliProgress from 'cli-progress';
import type { RateLimitWait } from '../http.ts';
import type { ImportProgress } from './importer.ts';
import { etaSeconds, formatDuration, waitNote } from './progress.ts';

/**
 * How an import shows its progress on stderr: a bar on a terminal, redrawn every second so a
 * rate-limit wait counts down in it; otherwise (a pipe, --no-progress, --json) one line per
 * rate-limit wait, so a run that seems stuck says why.
 */
export class ImportProgressView {
  private readonly startedAt = Date.now();
  private last: ImportProgress | undefined;
  private wait: RateLimitWait | undefined;
  private announcedUntil = 0;
  private readonly bar: cliProgress.SingleBar | undefined;
  private readonly ticker: NodeJS.Timeout | undefined;

  constructor(private readonly totalBytes: number, private readonly mode: 'bar' | 'lines' | 'json') {
    if (mode !== 'bar') return;
    this.bar = new cliProgress.SingleBar({
      stream: process.stderr, fps: 5,
      format: ' {bar} {percentage}% | {rows} rows | {rate} rows/s | ETA {time_left} | created {created} refused {refused}{note}',
    }, cliProgress.Presets.shades_classic);
    this.bar.start(totalBytes, 0, this.payload(Date.now()));
    this.ticker = setInterval(() => this.render(), 1000);
    this.ticker.unref();
  }

  update(progress: ImportProgress): void {
    this.last = progress;
    this.render();
  }

  /** Several requests in flight meet the same window: the latest end is the one to wait for. */
  rateLimitWait(wait: RateLimitWait): void {
    if (!this.wait || wait.until > this.wait.until) this.wait = wait;
    if (this.bar) return this.render();
    if (wait.until <= this.announcedUntil + 1000) return;
    this.announcedUntil = wait.until;
    const now = Date.now();
    const eta = this.eta(now);
    const percent = this.totalBytes > 0 ? Math.floor(((this.last?.bytes ?? 0) / this.totalBytes) * 100) : 0;
    process.stderr.write(this.mode === 'json'
      ? `${JSON.stringify({ waiting: { seconds: Math.ceil((wait.until - now) / 1000), reason: wait.reason, until: new Date(wait.until).toISOString(), percent, eta_seconds: eta } })}\n`
      : `msvc: ${waitNote(wait, now)}; ${percent}% imported, ETA ${formatDuration(eta)}\n`);
  }

  stop(): void {
    if (this.ticker) clearInterval(this.ticker);
    this.bar?.stop();
  }

  private render(): void {
    this.bar?.update(this.last?.bytes ?? 0, this.payload(Date.now()));
  }

  private eta(now: number): number | null {
    const done = this.last?.bytesThisRun ?? 0;
    return etaSeconds({ doneBytes: done, leftBytes: this.totalBytes - (this.last?.bytes ?? 0), startedAt: this.startedAt, now, wait: this.wait });
  }

  // Not named eta: cli-progress fills its own {eta} (from the last updates' speed, blind to a wait) over a payload's.
  private payload(now: number) {
    const p = this.last;
    const seconds = (now - this.startedAt) / 1000;
    const note = waitNote(this.wait, now);
    return {
      rows: p?.rows ?? 0, created: p?.created ?? 0, refused: p?.refused ?? 0,
      rate: p && seconds > 0 ? Math.round(p.rowsThisRun / seconds) : 0,
      time_left: formatDuration(this.eta(now)),
      note: note ? ` | ${note}` : '',
    };
  }
}
