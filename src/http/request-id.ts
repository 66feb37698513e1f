import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

// A caller-supplied id is echoed only when it is short and printable, so it is safe in logs and headers.
const CALLER_ID = /^[\x21-\x7e]{1,128}$/;

export function requestIdFor(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  if (typeof given === 'string' && CALLER_ID.test(given)) return given;
  return newRequestId();
}

/** `req_<12-hex>`: randomUUID draws from a cached entropy pool; its first 12 hex digits are random. */
export function newRequestId(): string {
  const uuid = randomUUID();
  return `req_${uuid.slice(0, 8)}${uuid.slice(9, 13)}`;
}
