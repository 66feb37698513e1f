import { createHmac, timingSafeEqual } from 'node:crypto';
import type { components } from './generated/schema.ts';

type Schemas = components['schemas'];

/** The envelope of every event: a union discriminated by `type` (the 24 event types of spec 6.1). */
export type WebhookEvent = { [Name in keyof Schemas]: Name extends `${string}Event` ? Schemas[Name] : never }[keyof Schemas];
export type EventType = Schemas['EventType'];
/** The envelope of one event type, e.g. `EventOf<'message.failed'>`. */
export type EventOf<T extends EventType> = Extract<WebhookEvent, { type: T }>;

// The union and the list of event types must name the same 24 types (a compile error otherwise).
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const everyEventTyped: Same<WebhookEvent['type'], EventType> = true;
void everyEventTyped;

export type WebhookHeaders = Record<string, string | string[] | undefined> | Headers;

export interface VerifyOptions {
  /** Oldest X-Service-Timestamp accepted (and clock skew), in seconds; default 300. */
  toleranceSeconds?: number;
  /** The current time in ms, for tests; default Date.now(). */
  now?: number;
}

/** Why constructEvent refused a delivery. */
export class WebhookSignatureError extends Error {
  override readonly name = 'WebhookSignatureError';
}

function header(headers: WebhookHeaders, name: string): string | undefined {
  if (headers instanceof Headers) return headers.get(name) ?? undefined;
  const key = Object.keys(headers).find((k) => k.toLowerCase() === name);
  const value = key === undefined ? undefined : headers[key];
  return Array.isArray(value) ? value[0] : value;
}

/**
 * True when X-Service-Signature is `sha256=<hex HMAC-SHA256 of "<X-Service-Timestamp>.<rawBody>">`
 * under `secret` (compared in constant time) and the timestamp is within the tolerance (spec 6.2).
 * `rawBody` must be the body exactly as received, not re-serialised JSON.
 */
export function verifyWebhookSignature(rawBody: string | Uint8Array, headers: WebhookHeaders, secret: string, options: VerifyOptions = {}): boolean {
  const timestamp = header(headers, 'x-service-timestamp');
  const signature = /^sha256=([0-9a-f]{64})$/i.exec(header(headers, 'x-service-signature')?.trim() ?? '');
  if (!timestamp || !/^\d{1,15}$/.test(timestamp) || !signature) return false;
  const ageSeconds = Math.abs((options.now ?? Date.now()) / 1000 - Number(timestamp));
  if (ageSeconds > (options.toleranceSeconds ?? 300)) return false;
  const expected = createHmac('sha256', secret).update(`${timestamp}.`).update(rawBody).digest();
  return timingSafeEqual(expected, Buffer.from(signature[1], 'hex'));
}

/**
 * Verifies a delivery and returns its event, typed by `type`: `switch (event.type)` narrows
 * `event.data`. Throws WebhookSignatureError when the signature or timestamp does not hold.
 */
export function constructEvent(rawBody: string | Uint8Array, headers: WebhookHeaders, secret: string, options: VerifyOptions = {}): WebhookEvent {
  if (!verifyWebhookSignature(rawBody, headers, secret, options)) {
    throw new WebhookSignatureError('webhook signature or timestamp does not verify');
  }
  const text = typeof rawBody === 'string' ? rawBody : new TextDecoder().decode(rawBody);
  return JSON.parse(text) as WebhookEvent;
}
