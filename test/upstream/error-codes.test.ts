import { describe, expect, it } from 'vitest';
import { classifyErrorCode, ERROR_CATALOG, lookupErrorCode, retryDelayMs } from '../../src/upstream/error-codes.ts';

describe('upstream error-code table', () => {
  it('covers every code of the reference catalog with a class, a title and a fix', () => {
    const reference = [0, 1, 2, 3, 4, 10, 33, 100, 190, 368, 80007, 130403, 130429, 130472, 130497, 131000, 131005, 131008, 131009,
      131016, 131021, 131026, 131030, 131031, 131037, 131042, 131045, 131047, 131048, 131049, 131050, 131051, 131052, 131053,
      131056, 131057, 131062, 131063, 131064, 132000, 132001, 132005, 132007, 132008, 132012, 132015, 132016, 132018, 132068,
      132069, 133004, 133010, 134011, 135000, 137000];
    for (const code of reference) {
      const info = lookupErrorCode(code);
      expect(info, `code ${code}`).toBeDefined();
      expect(info!.title.length).toBeGreaterThan(3);
      expect(info!.fix.length).toBeGreaterThan(10);
    }
    expect(new Set(ERROR_CATALOG.map((i) => i.code)).size).toBe(ERROR_CATALOG.length);
  });

  it.each([
    [130429, 'retryable'], [131056, 'retryable'], [80007, 'retryable'], [4, 'retryable'], [2, 'retryable'], [131016, 'retryable'],
    [131057, 'retryable'], [133004, 'retryable'], [131000, 'retryable'], [1, 'retryable'],
    [131026, 'recipient'], [131049, 'recipient'], [131050, 'recipient'], [130403, 'recipient'], [137000, 'recipient'],
    [0, 'fatal'], [190, 'fatal'], [131031, 'fatal'], [132001, 'fatal'], [132015, 'fatal'], [132016, 'fatal'], [131048, 'fatal'],
    [100, 'bad_request'], [131008, 'bad_request'], [131009, 'bad_request'], [132000, 'bad_request'], [132012, 'bad_request'],
  ] as const)('classifies %i as %s', (code, errorClass) => {
    expect(classifyErrorCode(code)).toBe(errorClass);
  });

  it('treats the 200-299 permission range as fatal', () => {
    expect(classifyErrorCode(200)).toBe('fatal');
    expect(classifyErrorCode(299)).toBe('fatal');
    expect(lookupErrorCode(250)?.code).toBe(250);
  });

  it('classifies unknown codes as bad requests unless Graph marks them transient', () => {
    expect(classifyErrorCode(999_999)).toBe('bad_request');
    expect(classifyErrorCode(999_999, true)).toBe('retryable');
  });

  it('says what a retry-then-give-up code becomes once retries are exhausted', () => {
    expect(lookupErrorCode(131000)?.exhaustedClass).toBe('recipient');
    expect(lookupErrorCode(1)?.exhaustedClass).toBe('bad_request');
  });

  it('suggests retry delays: 4^X growth for the pair rate limit, doubling otherwise, both capped', () => {
    expect(retryDelayMs(130429)).toBe(1000);
    expect(retryDelayMs(130429, 2)).toBe(4000);
    expect(retryDelayMs(131056, 0)).toBe(6000);
    expect(retryDelayMs(131056, 1)).toBe(24_000);
    expect(retryDelayMs(131056, 2)).toBe(96_000);
    expect(retryDelayMs(131056, 10)).toBe(15 * 60_000);
    expect(retryDelayMs(80007)).toBe(60_000);
    expect(retryDelayMs(2, 20)).toBe(10 * 60_000);
  });
});
