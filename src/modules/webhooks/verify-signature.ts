import { createHmac, timingSafeEqual } from 'node:crypto';

export type HeaderBag = Record<string, string | string[] | undefined> | { get(name: string): string | null };

export interface VerifyWebhookSignatureInput {
  /** The endpoint's signing secret (`whsec_...`), as returned on create or rotate. */
  secret: string;
  /** Request headers: a plain object (any case, as Node gives them) or a fetch `Headers`. */
  headers: HeaderBag;
  /** The raw request body, exactly as received (do not re-serialise parsed JSON). */
  rawBody: string | Uint8Array;
  /** Maximum age (and clock skew) of X-Service-Timestamp; default 300 seconds. */
  toleranceSeconds?: number;
  /** Current time, for tests; defaults to Date.now(). */
  nowMs?: number;
}

function header(headers: HeaderBag, name: string): string | undefined {
  if (typeof (headers as { get?: unknown }).get === 'function') return (headers as { get(n: string): string | null }).get(name) ?? undefined;
  const bag = headers as Record<string, string | string[] | undefined>;
  const key = Object.keys(bag).find((k) => k.toLowerCase() === name);
  const value = key === undefined ? undefined : bag[key];
  return Array.isArray(value) ? value[0] : value;
}

/**
 * Verifies a webhook delivery on the receiver side: X-Service-Signature must be
 * `sha256=<hex HMAC-SHA256 of "<X-Service-Timestamp>.<raw body>">` under the signing secret
 * (compared in constant time), and the timestamp must be within `toleranceSeconds` of now
 * (rejects replays of old captured requests). Returns true only when both hold.
 */
export function verifyWebhookSignature({ secret, headers, rawBody, toleranceSeconds = 300, nowMs = Date.now() }: VerifyWebhookSignatureInput): boolean {
  const timestamp = header(headers, 'x-service-timestamp');
  const signature = header(headers, 'x-service-signature');
  if (!timestamp || !signature || !/^\d{1,15}$/.test(timestamp)) return false;
  if (Math.abs(nowMs / 1000 - Number(timestamp)) > toleranceSeconds) return false;
  const match = /^sha256=([0-9a-f]{64})$/i.exec(signature.trim());
  if (!match) return false;
  const expected = createHmac('sha256', secret).update(`${timestamp}.`).update(rawBody).digest();
  return timingSafeEqual(expected, Buffer.from(match[1], 'hex'));
}
