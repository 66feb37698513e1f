import { describe, expect, it } from 'vitest';
import { etaSeconds, formatDuration, waitNote } from '../src/import/progress.ts';

describe('import progress while waiting for the rate limit', () => {
  const startedAt = 1_000_000;

  it('counts the wait under way, then the rest at the pace with the wait counted as spent', () => {
    // 10 s sent half the file, then a 50 s wait: the first half cost 60 s, so the second half does too.
    const now = startedAt + 10_000;
    expect(etaSeconds({ doneBytes: 500, leftBytes: 500, startedAt, now })).toBe(10);
    expect(etaSeconds({ doneBytes: 500, leftBytes: 500, startedAt, now, wait: { until: now + 50_000, reason: '429 Retry-After' } })).toBe(50 + 60);
    // The estimate falls with the wait, second by second.
    expect(etaSeconds({ doneBytes: 500, leftBytes: 500, startedAt, now: now + 20_000, wait: { until: now + 50_000, reason: '429 Retry-After' } })).toBe(30 + 60);
    // A wait already over adds nothing.
    expect(etaSeconds({ doneBytes: 500, leftBytes: 500, startedAt, now: now + 50_000, wait: { until: now + 50_000, reason: '429 Retry-After' } })).toBe(60);
    expect(etaSeconds({ doneBytes: 0, leftBytes: 500, startedAt, now })).toBeNull();
  });

  it('says how long and why, and nothing once the wait is over', () => {
    const wait = { until: startedAt + 28_000, reason: '429 Retry-After' };
    expect(waitNote(wait, startedAt)).toBe('waiting 28s for the rate limit (429 Retry-After)');
    expect(waitNote(wait, startedAt + 27_100)).toBe('waiting 1s for the rate limit (429 Retry-After)');
    expect(waitNote(wait, startedAt + 28_000)).toBe('');
    expect(waitNote(undefined, startedAt)).toBe('');
  });

  it('formats durations', () => {
    expect([formatDuration(null), formatDuration(0), formatDuration(59.2), formatDuration(65), formatDuration(7380)]).toEqual(['?', '0s', '1m 00s', '1m 05s', '2h 03m']);
  });
});
