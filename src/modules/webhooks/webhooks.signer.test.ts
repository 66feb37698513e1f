import { describe, expect, it } from 'vitest';
import { deliveryHeaders, newSigningSecret, signPayload, USER_AGENT } from './webhooks.signer.ts';

/**
 * Spec 6.2, against a vector computed outside this code (`printf '%s' '1767225600.{"id":"e1"}' |
 * openssl dgst -sha256 -hmac whsec_test`): a receiver following the spec must accept our signature.
 */
const VECTOR = { secret: 'whsec_test', timestamp: '1767225600', body: '{"id":"e1"}', hex: '454f7f9597bf74f9ee7b13eab0ac98e91665e9039d783864ee4129a0f2c9c88f' };

describe('webhook signer (spec 6.2)', () => {
  it('signs HMAC-SHA256 over "<timestamp>.<raw body>" with the whole secret as the key, as hex', () => {
    expect(signPayload(VECTOR.secret, VECTOR.timestamp, VECTOR.body)).toBe(VECTOR.hex);
    expect(signPayload(VECTOR.secret, VECTOR.timestamp, Buffer.from(VECTOR.body))).toBe(VECTOR.hex);
  });

  it('every attempt carries the documented headers, the timestamp in whole seconds and the signature over it', () => {
    const headers = deliveryHeaders({
      secret: VECTOR.secret, eventType: 'contact.created', attemptId: 'att_1', endpointId: 'wh_1', body: VECTOR.body,
      now: new Date(Number(VECTOR.timestamp) * 1000 + 999),
    });
    expect(headers).toEqual({
      'content-type': 'application/json',
      'user-agent': 'Service-Webhook/1.0',
      'x-service-event': 'contact.created',
      'x-service-delivery-id': 'att_1',
      'x-service-webhook-id': 'wh_1',
      'x-service-timestamp': VECTOR.timestamp,
      'x-service-signature': `sha256=${VECTOR.hex}`,
    });
    expect(USER_AGENT).toBe('Service-Webhook/1.0');
  });

  it('without a clock given, the timestamp is now', () => {
    const before = Math.floor(Date.now() / 1000);
    const { 'x-service-timestamp': ts } = deliveryHeaders({ secret: 's', eventType: 'e', attemptId: 'a', endpointId: 'w', body: '' });
    expect(Number(ts)).toBeGreaterThanOrEqual(before);
    expect(Number(ts)).toBeLessThanOrEqual(Math.floor(Date.now() / 1000));
  });

  it('a signing secret is whsec_ and 32 random bytes in hex, different every time', () => {
    const a = newSigningSecret();
    expect(a).toMatch(/^whsec_[0-9a-f]{64}$/);
    expect(newSigningSecret()).not.toBe(a);
  });
});
