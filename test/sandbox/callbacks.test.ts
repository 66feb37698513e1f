import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { backoffDelayMs, CallbackDeliverer, META_CALLBACK_BACKOFF, type CallbackDelivererOptions } from '../../src/sandbox/callbacks.ts';
import { APP_SECRET, startReceiver, type CallbackReceiver } from './helpers.ts';

const HOUR = 3_600_000;
const WEEK = 7 * 24 * HOUR;

describe('sandbox callback retries: Meta\'s backoff (reference §7: up to 7 days)', () => {
  it('doubles from 200 ms up to an hour between retries, and gives up once the callback is 7 days old', () => {
    expect(META_CALLBACK_BACKOFF).toEqual({ baseMs: 200, maxMs: HOUR, forMs: WEEK });
    const delays = [0, 1, 2, 3, 13, 14, 15, 40].map((attempt) => backoffDelayMs(META_CALLBACK_BACKOFF, attempt, 0));
    expect(delays).toEqual([200, 400, 800, 1600, 1_638_400, 3_276_800, HOUR, HOUR]);
    // The last wait ends at the 7 days, not after them.
    expect(backoffDelayMs(META_CALLBACK_BACKOFF, 40, WEEK - 1_000)).toBe(1_000);
    expect(backoffDelayMs(META_CALLBACK_BACKOFF, 40, WEEK)).toBeUndefined();
    expect(backoffDelayMs(META_CALLBACK_BACKOFF, 0, WEEK + 1)).toBeUndefined();
  });

  let receiver: CallbackReceiver;
  let deliverer: CallbackDeliverer | undefined;
  beforeEach(async () => { receiver = await startReceiver(); });
  afterEach(async () => { await deliverer?.close(); await receiver.close(); });

  const start = (options: Partial<CallbackDelivererOptions> = {}) => {
    deliverer = new CallbackDeliverer({ appSecret: APP_SECRET, callbackUrl: () => receiver.url, logger: pino({ level: 'silent' }), ...options });
    return deliverer;
  };

  it('by default keeps retrying a refused callback past a few attempts until it is taken', async () => {
    receiver.failNext(4, 503);
    const d = start();
    const began = Date.now();
    await d.post({ object: 'whatsapp_business_account', entry: [] });
    expect(receiver.received).toHaveLength(1);
    expect([d.delivered, d.dropped]).toEqual([1, 0]);
    // 200 + 400 + 800 + 1600 ms of backoff before the fifth attempt.
    expect(Date.now() - began).toBeGreaterThanOrEqual(3_000);
  });

  it('gives up (drops) a callback once its retry window has passed', async () => {
    receiver.failNext(1_000, 503);
    const d = start({ backoff: { baseMs: 5, maxMs: 20, forMs: 300 } });
    const began = Date.now();
    await d.post({ entry: [] });
    expect([d.delivered, d.dropped]).toEqual([0, 1]);
    expect(Date.now() - began).toBeGreaterThanOrEqual(300);
    expect(receiver.received).toHaveLength(0);
  });

  it('bounds what waits for a retry (beyond maxQueued a new callback is dropped at once); close settles every waiting one', async () => {
    receiver.failNext(1_000, 503);
    const d = start({ backoff: { baseMs: 60_000, maxMs: 60_000, forMs: HOUR }, maxQueued: 3 });
    const waiting = [1, 2, 3].map((n) => d.post({ n }));
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(d.idle()).toBe(false);
    await d.post({ n: 4 });
    expect(d.dropped).toBe(1);
    await d.close();
    await Promise.all(waiting);
  });
});
