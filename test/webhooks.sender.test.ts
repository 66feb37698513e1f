import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';

// A resolver with names of its own (`.example` hosts; others go to the real one): one that never
// answers (the attempt's deadline must cover the DNS check too), resolver failures, names with
// public and private answers, and one that rebinds from a public to a private address.
const dns = vi.hoisted(() => ({ rebindsLookups: 0 }));
vi.mock('node:dns/promises', async (original) => {
  const real = await original<typeof import('node:dns/promises')>();
  const failure = (code: string, host: string) => Promise.reject(Object.assign(new Error(`getaddrinfo ${code} ${host}`), { code }));
  const answers: Record<string, () => Promise<{ address: string; family: number }[]>> = {
    'dns-hangs.example': () => new Promise(() => {}),
    'nx.example': () => failure('ENOTFOUND', 'nx.example'),
    'eai-again.example': () => failure('EAI_AGAIN', 'eai-again.example'),
    'nodata.example': () => failure('ENODATA', 'nodata.example'),
    'dual.example': async () => [{ address: '93.184.216.34', family: 4 }, { address: '2606:2800:220:1::1', family: 6 }, { address: '93.184.216.35', family: 4 }],
    'v4only.example': async () => [{ address: '93.184.216.34', family: 4 }],
    'private.example': async () => [{ address: '93.184.216.34', family: 4 }, { address: '10.0.0.5', family: 4 }],
    'empty.example': async () => [],
    'rebinds.example': async () => [{ address: ++dns.rebindsLookups === 1 ? '93.184.216.34' : '10.0.0.5', family: 4 }],
  };
  const lookup = (host: string, options: object) => answers[host]?.() ?? real.lookup(host, options as never);
  return { ...real, lookup, default: { ...real, lookup } };
});
import type { LookupAddress } from 'node:dns';
import { readFileSync } from 'node:fs';
import { Agent } from 'undici';
import { guardedLookup, post, WebhookSender } from '../src/modules/webhooks/webhooks.sender.ts';
import { DestinationRefusedError } from '../src/modules/webhooks/webhooks.ssrf.ts';
import { eventually } from './helpers/app.ts';
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

  it('classifies resolver failures of the destination check as dns, with the resolver\'s message', async () => {
    const guarded = new WebhookSender({ timeoutMs: 1_000, allowPrivateNetworks: false });
    try {
      for (const [host, code] of [['nx.example', 'ENOTFOUND'], ['eai-again.example', 'EAI_AGAIN'], ['nodata.example', 'ENODATA']]) {
        const outcome = await guarded.attempt({ url: `https://${host}/in`, endpointId: ENDPOINT_ID, eventType: 'contact.created', payload: '{}', secret: 'whsec_test' });
        expect(outcome, host).toMatchObject({ ok: false, statusCode: null, responseBody: null, errorClass: 'dns', errorMessage: `getaddrinfo ${code} ${host}` });
      }
      const empty = await guarded.attempt({ url: 'https://empty.example/in', endpointId: ENDPOINT_ID, eventType: 'contact.created', payload: '{}', secret: 'whsec_test' });
      expect(empty).toMatchObject({ ok: false, statusCode: null, errorClass: 'connection', errorMessage: 'empty.example did not resolve to any address' });
      const refused = await guarded.attempt({ url: 'https://private.example/in', endpointId: ENDPOINT_ID, eventType: 'contact.created', payload: '{}', secret: 'whsec_test' });
      expect(refused).toMatchObject({ ok: false, statusCode: null, errorClass: 'destination_refused', errorMessage: 'destination private.example resolves to a non-public address (10.0.0.5)' });
    } finally {
      await guarded.close();
    }
  });

  it('connects only to the address it checked: a name that rebinds to a private address after the check is refused at connect', async () => {
    const guarded = new WebhookSender({ timeoutMs: 1_000, allowPrivateNetworks: false });
    try {
      dns.rebindsLookups = 0;
      const outcome = await guarded.attempt({ url: 'https://rebinds.example/in', endpointId: ENDPOINT_ID, eventType: 'contact.created', payload: '{}', secret: 'whsec_test' });
      expect(dns.rebindsLookups).toBe(2); // the attempt's check, then the connection's own lookup
      expect(outcome).toMatchObject({ ok: false, statusCode: null, errorClass: 'destination_refused', errorMessage: 'destination rebinds.example resolves to a non-public address (10.0.0.5)' });
    } finally {
      await guarded.close();
    }
  });

  it('the connection lookup answers with the checked addresses of the family asked for', async () => {
    const lookup = (host: string, options: { family?: number; all?: boolean }) =>
      new Promise<{ err: NodeJS.ErrnoException | null; address: string | LookupAddress[]; family?: number }>((resolve) => {
        guardedLookup(host, options, (err, address, family) => resolve({ err, address, family }));
        setTimeout(() => resolve({ err: new Error('the callback was never called'), address: '' }), 2_000);
      });
    expect(await lookup('dual.example', {})).toEqual({ err: null, address: '93.184.216.34', family: 4 });
    expect(await lookup('dual.example', { family: 6 })).toEqual({ err: null, address: '2606:2800:220:1::1', family: 6 });
    expect(await lookup('dual.example', { family: 4, all: true })).toEqual({ err: null, address: [{ address: '93.184.216.34', family: 4 }, { address: '93.184.216.35', family: 4 }], family: undefined });
    expect(await lookup('dual.example', { family: 0, all: true })).toMatchObject({ err: null, address: [{ family: 4 }, { family: 6 }, { family: 4 }] });
    const none = await lookup('v4only.example', { family: 6 });
    expect(none).toMatchObject({ address: '', family: 0 });
    expect(none.err).toMatchObject({ code: 'ENOTFOUND', message: 'no IPv6 address for v4only.example' });
    const refused = await lookup('private.example', { family: 4 });
    expect(refused.err).toBeInstanceOf(DestinationRefusedError);
    expect(refused).toMatchObject({ address: '', family: 0 });
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
    expect(await attempt(`http://127.0.0.1:${receiver.port}/plain`)).toMatchObject({ ok: false, statusCode: null, errorClass: 'invalid_url', errorMessage: 'webhook URL must use https' });
    expect(receiver.at('/plain')).toHaveLength(0);
  });

  it('a 3xx (here 300) is a failed attempt like any status outside 2xx', async () => {
    const path = `/multiple-choices-${++n}`;
    receiver.behave(path, 300);
    expect(await attempt(receiver.url(path))).toMatchObject({ ok: false, statusCode: 300, errorClass: 'http_status', errorMessage: 'Endpoint answered HTTP 300' });
  });

  it('reads a body that arrives in parts to its end', async () => {
    const path = `/two-parts-${++n}`;
    receiver.behave(path, 'two-parts');
    expect(await attempt(receiver.url(path))).toMatchObject({ ok: true, statusCode: 200, responseBody: 'first part, second part' });
  });

  it('tells onAttempt of every attempt: success or the failure class, and the seconds it took', async () => {
    const told: [string, number][] = [];
    const counted = new WebhookSender({ timeoutMs: 1_500, extraCaFile: receiver.caFile, allowPrivateNetworks: true, onAttempt: (result, seconds) => told.push([result, seconds]) });
    try {
      const ok = `/counted-${++n}`;
      const failing = `/counted-fails-${++n}`;
      receiver.behave(failing, 503);
      const outcomes = [
        await counted.attempt({ url: receiver.url(ok), endpointId: ENDPOINT_ID, eventType: 'contact.created', payload: '{}', secret: 'whsec_test' }),
        await counted.attempt({ url: receiver.url(failing), endpointId: ENDPOINT_ID, eventType: 'contact.created', payload: '{}', secret: 'whsec_test' }),
      ];
      expect(told.map(([result]) => result)).toEqual(['success', 'http_status']);
      for (const [i, [, seconds]] of told.entries()) expect(seconds).toBe(outcomes[i].responseTimeMs / 1000);
      expect(told[0][1]).toBeLessThan(1.5);
    } finally {
      await counted.close();
    }
  });

  it('keeps its connection alive between attempts, and holds to maxConnectionsPerOrigin', async () => {
    const one = new WebhookSender({ timeoutMs: 1_500, extraCaFile: receiver.caFile, allowPrivateNetworks: true, maxConnectionsPerOrigin: 1 });
    const send = (path: string) => one.attempt({ url: receiver.url(path), endpointId: ENDPOINT_ID, eventType: 'contact.created', payload: '{}', secret: 'whsec_test' });
    try {
      const first = `/alive-${++n}`;
      const second = `/alive-${++n}`;
      expect(await send(first)).toMatchObject({ ok: true });
      expect(await send(second)).toMatchObject({ ok: true });
      expect(receiver.at(second)[0].remotePort).toBe(receiver.at(first)[0].remotePort);
      // Two at once: the second waits for the one connection instead of opening another.
      const together = [`/together-${++n}`, `/together-${++n}`];
      expect(await Promise.all(together.map(send))).toMatchObject([{ ok: true }, { ok: true }]);
      expect(together.map((path) => receiver.at(path)[0].remotePort)).toEqual([receiver.at(first)[0].remotePort, receiver.at(first)[0].remotePort]);
    } finally {
      await one.close();
    }
  });

  it('a request whose deadline passed while it waited for a connection is never sent', async () => {
    // One connection, held by a request with a longer deadline than the one queued behind it.
    const agent = new Agent({ connect: { ca: readFileSync(receiver.caFile, 'utf8') }, connections: 1 });
    try {
      const hung = `/holds-the-connection-${++n}`;
      receiver.behave(hung, 'hang');
      const queued = `/queued-${++n}`;
      const holding = post(agent, new URL(receiver.url(hung)), {}, '{}', 800);
      await eventually(async () => receiver.at(hung).length === 1, 5_000, 5);
      await expect(post(agent, new URL(receiver.url(queued)), {}, '{}', 100)).rejects.toMatchObject({ name: 'TimeoutError' });
      await expect(holding).rejects.toMatchObject({ name: 'TimeoutError' });
      // The connection is free now: a late start of the queued request would reach the receiver at once.
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(receiver.at(queued)).toHaveLength(0);
    } finally {
      await agent.close();
    }
  });

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
