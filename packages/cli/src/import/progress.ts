import type { RateLimitWait } from '../http.ts';

export interface ImportPace {
  /** Bytes of the file confirmed by this run, and what is left of it. */
  doneBytes: number;
  leftBytes: number;
  /** Epoch ms: when this run started, and now. */
  startedAt: number;
  now: number;
  /** The rate-limit wait under way, if any. */
  wait?: RateLimitWait;
}

/**
 * Seconds to the end: the wait under way, then the rest of the file at this run's pace, where
 * the wait counts as time already spent. A run that meets the rate limit every minute is paced by
 * it, and so is its estimate; during a wait the estimate falls second by second with the wait,
 * instead of standing still at what the last batch's speed promised. Null before anything is done.
 */
export function etaSeconds(pace: ImportPace): number | null {
  if (pace.doneBytes <= 0) return null;
  const waitLeft = Math.max(0, (pace.wait?.until ?? 0) - pace.now) / 1000;
  const spent = Math.max(0.001, (pace.now - pace.startedAt) / 1000 + waitLeft);
  return Math.ceil(waitLeft + pace.leftBytes / (pace.doneBytes / spent));
}

/** 7s, 1m 05s, 2h 03m. */
export function formatDuration(seconds: number | null): string {
  if (seconds === null || !Number.isFinite(seconds)) return '?';
  const s = Math.max(0, Math.ceil(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

/** What the bar says while the client waits for the tenant's rate limit, or '' when it does not. */
export function waitNote(wait: RateLimitWait | undefined, now: number): string {
  if (!wait || wait.until <= now) return '';
  return `waiting ${formatDuration((wait.until - now) / 1000)} for the rate limit (${wait.reason})`;
}
