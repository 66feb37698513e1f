import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';

// A resolver that never answers for one name: the attempt's deadline must cover the DNS check too.
vi.mock('node:dns/promises', async (original) => {
  const real = await original<typeof import('node:dns/promises')>();
  const lookup = (host: string, options: object) => (host === 'dns-hangs.example' ? new Promise(() => {}) : real.lookup(host, options as never));
  return { ...real, lookup, default: { ...real, lookup } };
});
import { WebhookSender } from '../src/modules/webhooks/webhooks.sender.ts';
import { startReceiver, type Receiver } from './helpers/https-receiver.ts';

const ENDPOINT_ID = '00000000-0000-4000-8000-000000000000';

describe('webhook sender (one attempt against a real HTTPS receiver)', () => {
  let receiver: Receiver;
  let sender: WebhookSender;
  let n = 0;
  const attempt = (url: string) => sender.attempt({ url, endpointId: ENDPOINT_ID, eventType: 'contact.created', payload: '{"id":"x"}', secret: 'whsec_test' });

  beforeAll(async () => {
    receiver = await startReceiver();
    // Generous enough for a TLS handshake on a loaded machine; the flood test must end well before it.
    sender = new WebhookSender({ timeoutMs: 1_500, extraCaFile: receiver.caFile, allowPrivateNetworks: true });
  });
  afterAll(async () => {
    await sender.close();
    await receiver.close();
  });

  it('times out within the deadline when resolving the destination hangs (private networks disallowed)', async () => {
    const guarded = new WebhookSender({ timeoutMs: 300, allowPrivateNetworks: false });
    try {
      const started = Date.now();
      const outcome = await guarded.attempt({ url: 'https://dns-hangs.example/in', endpointId: ENDPOINT_ID, eventType: 'contact.created', payload: '{}', secret: 'whsec_test' });
      expect(outcome).toMatchObject({ ok: false, statusCode: null, errorClass: 'timeout', errorMessage: 'No response within 300 ms' });
      expect(Date.now() - started).toBeLessThan(1000);
      expect(outcome.responseTimeMs).toBeLessThan(1000);
    } finally {
      await guarded.close();
    }
  });

  it('keeps the first 500 characters of the response body', async () => {
    const path = `/fails-${++n}`;
    receiver.behave(path, 500);
    const outcome = await attempt(receiver.url(path));
    expect(outcome).toMatchObject({ ok: false, statusCode: 500, errorClass: 'http_status' });
    expect(outcome.responseBody).toHaveLength(500);
    expect(outcome.responseBody!.startsWith('failure 500 xxx')).toBe(true);
    expect(receiver.at(path)[0].body).toBe('{"id":"x"}');
  });

  it('drops NUL characters from the kept response body (it is stored as text)', async () => {
    const path = `/nul-${++n}`;
    receiver.behave(path, 'nul');
    expect(await attempt(receiver.url(path))).toMatchObject({ ok: true, statusCode: 200, responseBody: 'okdone' });
  });

  it('records an empty body as null', async () => {
    const path = `/empty-${++n}`;
    receiver.behave(path, 204);
    expect(await attempt(receiver.url(path))).toMatchObject({ ok: true, statusCode: 204, responseBody: null });
  });

  it('stops reading a body that never ends, well before the timeout', async () => {
    const path = `/flood-${++n}`;
    receiver.behave(path, 'flood');
    const outcome = await attempt(receiver.url(path));
    expect(outcome).toMatchObject({ ok: true, statusCode: 200 });
    expect(outcome.responseBody).toBe('y'.repeat(500));
    expect(outcome.responseTimeMs).toBeLessThan(1_500);
  });

  it('times out a receiver that never answers, at the configured deadline', async () => {
    const path = `/hang-${++n}`;
    receiver.behave(path, 'hang');
    const outcome = await attempt(receiver.url(path));
    expect(outcome).toMatchObject({ ok: false, statusCode: null, errorClass: 'timeout', errorMessage: 'No response within 1500 ms' });
    expect(outcome.responseTimeMs).toBeGreaterThanOrEqual(1_480);
    expect(outcome.responseTimeMs).toBeLessThan(2_500);
  });

  it('classifies a refused connection', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as { port: number }).port;
    await new Promise((resolve) => closed.close(resolve));
    const outcome = await attempt(`https://127.0.0.1:${port}/hook`);
    expect(outcome).toMatchObject({ ok: false, statusCode: null, errorClass: 'connection' });
    expect(outcome.ok === false && outcome.errorMessage).toContain('ECONNREFUSED');
  });

  it('refuses a URL that is not https without sending anything', async () => {
    expect(await attempt(`http://127.0.0.1:${receiver.port}/plain`)).toMatchObject({ ok: false, errorClass: 'invalid_url' });
  });

  // The TLS context (every root certificate and the extra CA) is made at the first attempt, not at start.
  it('reads the extra CA when made: a missing file fails the start, not a delivery', () => {
    expect(() => new WebhookSender({ timeoutMs: 1_000, extraCaFile: '/nonexistent/ca.pem', allowPrivateNetworks: true })).toThrow(/ENOENT/);
  });

  it('trusts the extra CA from its first attempt, and sends nothing once closed', async () => {
    const fresh = new WebhookSender({ timeoutMs: 1_500, extraCaFile: receiver.caFile, allowPrivateNetworks: true });
    const send = (path: string) => fresh.attempt({ url: receiver.url(path), endpointId: ENDPOINT_ID, eventType: 'contact.created', payload: '{}', secret: 'whsec_test' });
    const first = `/first-${++n}`;
    expect(await send(first)).toMatchObject({ ok: true, statusCode: 200 });
    await fresh.close();
    const late = `/after-close-${++n}`;
    expect(await send(late)).toMatchObject({ ok: false, statusCode: null });
    expect(receiver.at(late)).toHaveLength(0);

    const closedUnused = new WebhookSender({ timeoutMs: 1_500, extraCaFile: receiver.caFile, allowPrivateNetworks: true });
    await closedUnused.close();
    const never = `/closed-before-use-${++n}`;
    expect(await closedUnused.attempt({ url: receiver.url(never), endpointId: ENDPOINT_ID, eventType: 'contact.created', payload: '{}', secret: 'whsec_test' })).toMatchObject({ ok: false, statusCode: null });
    expect(receiver.at(never)).toHaveLength(0);
  });
});
