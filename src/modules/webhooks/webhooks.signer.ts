import { createHmac, randomBytes } from 'node:crypto';

export const USER_AGENT = 'Service-Webhook/1.0';

/** `whsec_` + 32 random bytes as hex. The whole string (prefix included) is the HMAC key. */
export function newSigningSecret(): string {
  return `whsec_${randomBytes(32).toString('hex')}`;
}

/** Hex HMAC-SHA256 over `<timestamp>.<raw_body>` (spec 6.2). */
export function signPayload(secret: string, timestamp: string, body: Uint8Array | string): string {
  return createHmac('sha256', secret).update(`${timestamp}.`).update(body).digest('hex');
}

/** Request headers of one attempt; a fresh timestamp and attempt id every time. */
export function deliveryHeaders(input: {
  secret: string; eventType: string; attemptId: string; endpointId: string; body: Uint8Array | string; now?: Date;
}): Record<string, string> {
  const timestamp = String(Math.floor((input.now ?? new Date()).getTime() / 1000));
  return {
    'content-type': 'application/json',
    'user-agent': USER_AGENT,
    'x-service-event': input.eventType,
    'x-service-delivery-id': input.attemptId,
    'x-service-webhook-id': input.endpointId,
    'x-service-timestamp': timestamp,
    'x-service-signature': `sha256=${signPayload(input.secret, timestamp, input.body)}`,
  };
}
