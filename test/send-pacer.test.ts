import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { SendPacer, SendWindow } from '../src/modules/messages/send-pacer.ts';
import { hasRedis } from './helpers/app.ts';

const number = () => `pace-test-${Math.random().toString(36).slice(2)}`;

/** The same rules whichever backend holds the state: in process (embedded) or Redis (shared by workers). */
function pacerRules(name: string, make: () => SendPacer) {
  describe(name, () => {
    it('hands out slots 1/rate apart, at most the horizon ahead', async () => {
      const pacer = make();
      const id = number();
      const asked = performance.now();
      const first = await pacer.reserve(id, 50, 100);
      expect(first.intervalMs).toBeCloseTo(10, 5);
      // 500 ms horizon at 100/s: 50 slots fit, the next reservation gets what is left of the horizon:
      // one slot per 10 ms gone since the first was asked for (a loaded machine takes longer), and no more.
      expect(first.granted).toBe(50);
      const second = await pacer.reserve(id, 50, 100);
      const elapsed = performance.now() - asked;
      // Less than a slot short (the Redis clock offset may be refined between two replies): no overlap.
      expect(second.startAt).toBeGreaterThan(first.startAt + 50 * 10 - 10);
      expect(second.granted).toBeLessThanOrEqual(2 + Math.ceil(elapsed / 10));
    });

    it('grants whole multiples of `unit` and keeps the rest; a unit never exceeds `want` or what the horizon holds', async () => {
      const pacer = make();
      const id = number();
      // 500 ms horizon at 20/s holds 10 slots: 3 taken, 7 free (an eighth frees 50 ms later).
      const first = await pacer.reserve(id, 3, 20);
      expect(first.granted).toBe(3);
      expect((await pacer.reserve(id, 10, 20, 5)).granted).toBe(5);
      expect((await pacer.reserve(id, 10, 20, 5)).granted).toBe(0);
      // What was not granted stays: the free slots follow those granted directly.
      const rest = await pacer.reserve(id, 10, 20);
      expect(rest.granted).toBeGreaterThanOrEqual(2);
      // Within half a slot (the Redis clock offset may be refined between two replies).
      expect(Math.abs(rest.startAt - (first.startAt + 8 * 50))).toBeLessThan(25);
      // At 10/s the horizon holds 5 slots: a unit of 50 shrinks to them; a unit above `want` to `want`.
      expect((await pacer.reserve(number(), 50, 10, 50)).granted).toBe(5);
      expect((await pacer.reserve(number(), 3, 100, 50)).granted).toBe(3);
    });

    it('a rate slower than one slot per horizon still gets the next slot, and only that one', async () => {
      const pacer = make();
      const id = number();
      // 1/s with a 500 ms horizon: one slot now, the next a second later.
      const first = await pacer.reserve(id, 5, 1);
      expect(first.granted).toBe(1);
      expect(first.intervalMs).toBeCloseTo(1000, 5);
      expect((await pacer.reserve(id, 5, 1)).granted).toBe(0);
      expect((await pacer.reserve(number(), 5, 1, 5)).granted).toBe(1);
    });

    it('a 130429 halves the rate; it recovers by a quarter per recovery period', async () => {
      const pacer = make();
      const id = number();
      expect((await pacer.reserve(id, 1, 100)).intervalMs).toBeCloseTo(10, 5);
      await pacer.penalise(id);
      expect((await pacer.reserve(id, 1, 100)).intervalMs).toBeCloseTo(20, 5);
      await pacer.penalise(id); // within a second of the last: counted once
      expect((await pacer.reserve(id, 1, 100)).intervalMs).toBeCloseTo(20, 5);
      await new Promise((r) => setTimeout(r, 260)); // recovery period 250 ms
      expect((await pacer.reserve(id, 1, 100)).intervalMs).toBeCloseTo(16, 5);
    });
  });
}

pacerRules('send pacer in process', () => new SendPacer(null, { horizonMs: 500, recoveryMs: 250 }));

describe.skipIf(!hasRedis)('send pacer on Redis', () => {
  const redis = hasRedis ? new Redis(process.env.REDIS_URL!) : null;
  afterAll(() => redis?.disconnect());
  pacerRules('shared state', () => new SendPacer(redis, { horizonMs: 500, recoveryMs: 250 }));

  it('two pacers (two workers) share one number\'s slots', async () => {
    const a = new SendPacer(redis, { horizonMs: 500, recoveryMs: 250 });
    const b = new SendPacer(redis, { horizonMs: 500, recoveryMs: 250 });
    // Each learns Redis's clock from its replies (the quickest reply tells the offset best).
    for (let i = 0; i < 5; i++) await Promise.all([a.reserve(number(), 1, 100), b.reserve(number(), 1, 100)]);
    const id = number();
    const x = await a.reserve(id, 30, 100);
    const y = await b.reserve(id, 30, 100);
    expect(x.granted + y.granted).toBeLessThanOrEqual(51);
    expect(y.startAt).toBeGreaterThanOrEqual(x.startAt + x.granted * 10 - 5);
  });
});

describe('send window', () => {
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  it('a send holds its place until a window after its answer, so sends that arrive late still count', async () => {
    const window = new SendWindow(200);
    const started = Date.now();
    // Three sends issued at once; the first is answered late (it may reach the upstream just then).
    const [a, b, c] = await Promise.all([window.acquire(3), window.acquire(3), window.acquire(3)]);
    expect(window.waiting).toBe(0);
    b(); c();
    const later = [0, 1, 2].map(() => window.acquire(3).then((release) => { release(); return Date.now() - started; }));
    await sleep(150);
    a();
    const [d, e, f] = await Promise.all(later);
    // Two places are free a window after b and c; the third only a window after a's answer.
    expect(d).toBeGreaterThanOrEqual(199);
    expect(e).toBeGreaterThanOrEqual(199);
    expect(e).toBeLessThan(300);
    expect(f).toBeGreaterThanOrEqual(349);
    expect(f).toBeLessThan(450);
  });

  it('while every place is in flight nothing is let through, however long it takes', async () => {
    const window = new SendWindow(50);
    const held = await Promise.all([window.acquire(2), window.acquire(2)]);
    let through = false;
    const next = window.acquire(2).then((release) => { through = true; return release; });
    await sleep(200);
    expect(through).toBe(false);
    held[0]();
    const answeredAt = Date.now();
    (await next)();
    expect(Date.now() - answeredAt).toBeGreaterThanOrEqual(49);
  });

  it('a place given back unsent is free at once, and giving back twice counts once', async () => {
    const window = new SendWindow(10_000);
    const first = await window.acquire(1);
    first(false);
    first();
    const started = Date.now();
    const second = await window.acquire(1);
    expect(Date.now() - started).toBeLessThan(100);
    second();
    let through = false;
    void window.acquire(1).then(() => { through = true; });
    await sleep(100);
    expect(through).toBe(false);
  });

  it('a send that finds no place by its deadline gets none, and those behind it still get theirs', async () => {
    const window = new SendWindow(100);
    const held = await window.acquire(1);
    const started = Date.now();
    const late = window.acquire(1, started + 150);
    const next = window.acquire(1);
    expect(window.waiting).toBe(2);
    expect(await late).toBeNull();
    expect(Date.now() - started).toBeGreaterThanOrEqual(149);
    expect(window.waiting).toBe(1);
    held();
    const answeredAt = Date.now();
    (await next)();
    expect(Date.now() - answeredAt).toBeGreaterThanOrEqual(99);
    expect(window.waiting).toBe(0);
    // A place free before the deadline is taken at once; none is given once the deadline has come.
    const roomy = new SendWindow(100);
    expect(await roomy.acquire(1, Date.now() - 1)).toBeNull();
    expect(await roomy.acquire(1, Date.now() + 1000)).toBeTypeOf('function');
  });

  it('another process\'s sends still on their way hold places; each that stops counting leaves a window later', async () => {
    const window = new SendWindow(100);
    window.setForeign(2);
    let through = false;
    const next = window.acquire(2).then((release) => { through = true; return release; });
    await sleep(150);
    expect(through).toBe(false);
    window.setForeign(1);
    const droppedAt = Date.now();
    (await next)();
    expect(Date.now() - droppedAt).toBeGreaterThanOrEqual(99);
  });

  it('lets sends through in the order they ask, at most `limit` in any window', async () => {
    const window = new SendWindow(100);
    const at: number[] = [];
    await Promise.all(Array.from({ length: 12 }, (_, i) => window.acquire(4).then((release) => { at[i] = Date.now(); release(); })));
    for (let i = 1; i < at.length; i++) expect(at[i]).toBeGreaterThanOrEqual(at[i - 1]);
    for (let i = 4; i < at.length; i++) expect(at[i] - at[i - 4]).toBeGreaterThanOrEqual(99);
  });

  it('a lowered limit holds sends until fewer places are taken; a raised one lets more through at once', async () => {
    const window = new SendWindow(10_000);
    for (let i = 0; i < 3; i++) (await window.acquire(4))();
    let through = false;
    void window.acquire(2).then(() => { through = true; });
    await sleep(100);
    expect(through).toBe(false);
    const raised = new SendWindow(10_000);
    for (let i = 0; i < 3; i++) (await raised.acquire(3))();
    const started = Date.now();
    await raised.acquire(4);
    expect(Date.now() - started).toBeLessThan(100);
  });
});
