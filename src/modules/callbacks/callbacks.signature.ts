import { createHmac, timingSafeEqual } from 'node:crypto';

/** X-Hub-Signature-256: `sha256=<hex>` HMAC-SHA256 of the raw body bytes, keyed by the app secret. */
export function signUpstreamBody(appSecret: string, rawBody: Buffer | string): string {
  return `sha256=${createHmac('sha256', appSecret).update(rawBody).digest('hex')}`;
}

/** Constant-time check of the header against the raw bytes (never re-serialised JSON). */
export function verifyUpstreamSignature(appSecret: string, rawBody: Buffer, header: string | undefined): boolean {
  if (typeof header !== 'string' || !/^sha256=[0-9a-fA-F]{64}$/.test(header.trim())) return false;
  const given = Buffer.from(header.trim().slice(7).toLowerCase(), 'hex');
  const expected = createHmac('sha256', appSecret).update(rawBody).digest();
  return given.length === expected.length && timingSafeEqual(given, expected);
}
