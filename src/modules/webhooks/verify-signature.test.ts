import { describe, expect, it } from 'vitest';
import { deliveryHeaders } from './webhooks.signer.ts';
import { verifyWebhookSignature } from './verify-signature.ts';

describe('verifyWebhookSignature', () => {
  const secret = 'whsec_test';
  const body = Buffer.from('{"id":"e1","type":"contact.created","created_at":"2026-01-01T00:00:00.000Z","data":{}}');
  const now = new Date('2026-01-01T00:00:00Z');
  const headers = deliveryHeaders({ secret, eventType: 'contact.created', attemptId: 'a', endpointId: 'w', body, now });

  it('accepts a genuine delivery (any header case, string or bytes body, fetch Headers)', () => {
    expect(verifyWebhookSignature({ secret, headers, rawBody: body, nowMs: now.getTime() })).toBe(true);
    const upper = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toUpperCase(), v]));
    expect(verifyWebhookSignature({ secret, headers: upper, rawBody: body.toString('utf8'), nowMs: now.getTime() })).toBe(true);
    expect(verifyWebhookSignature({ secret, headers: new Headers(headers), rawBody: body, nowMs: now.getTime() })).toBe(true);
  });

  it('rejects a wrong secret, a modified body, a bad or missing signature', () => {
    expect(verifyWebhookSignature({ secret: 'whsec_other', headers, rawBody: body, nowMs: now.getTime() })).toBe(false);
    expect(verifyWebhookSignature({ secret, headers, rawBody: body.toString() + ' ', nowMs: now.getTime() })).toBe(false);
    expect(verifyWebhookSignature({ secret, headers: { ...headers, 'x-service-signature': 'sha256=zz' }, rawBody: body, nowMs: now.getTime() })).toBe(false);
    expect(verifyWebhookSignature({ secret, headers: { ...headers, 'x-service-signature': undefined }, rawBody: body, nowMs: now.getTime() })).toBe(false);
    // Re-stamping the timestamp without re-signing fails too.
    expect(verifyWebhookSignature({ secret, headers: { ...headers, 'x-service-timestamp': String(Number(headers['x-service-timestamp']) + 1) }, rawBody: body, nowMs: now.getTime() })).toBe(false);
  });

  it('enforces the timestamp tolerance', () => {
    expect(verifyWebhookSignature({ secret, headers, rawBody: body, nowMs: now.getTime() + 299_000 })).toBe(true);
    expect(verifyWebhookSignature({ secret, headers, rawBody: body, nowMs: now.getTime() + 301_000 })).toBe(false);
    expect(verifyWebhookSignature({ secret, headers, rawBody: body, nowMs: now.getTime() + 301_000, toleranceSeconds: 600 })).toBe(true);
  });
});
