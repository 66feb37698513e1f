import { randomBytes } from 'node:crypto';
import { lookupErrorCode } from '../upstream/error-codes.ts';

export interface GraphErrorOptions {
  title?: string;
  details?: string;
  subcode?: number;
  userTitle?: string;
  userMessage?: string;
}

export interface GraphErrorReply {
  status: number;
  body: { error: Record<string, unknown> };
}

/** The HTTP status Meta pairs with an error code (reference §3); clients must not rely on it. */
export function httpStatusForCode(code: number): number {
  if (code === 0 || code === 190) return 401;
  if (code === 10 || (code >= 200 && code <= 299) || code === 368 || code === 131031 || code === 131005) return 403;
  if (code === 131000 || code === 3) return 500;
  if (code === 2 || code === 131016) return 503;
  return 400;
}

export function fbtraceId(): string {
  return 'A' + randomBytes(17).toString('base64url');
}

/** Meta's synchronous error shape: `{error:{message:"(#code) title", type, code, error_subcode?, error_data, fbtrace_id}}`. */
export function graphError(code: number, options: GraphErrorOptions = {}): GraphErrorReply {
  const title = options.title ?? lookupErrorCode(code)?.title ?? 'Unknown error';
  const error: Record<string, unknown> = {
    message: `(#${code}) ${title}`,
    type: 'OAuthException',
    code,
  };
  if (options.subcode !== undefined) error.error_subcode = options.subcode;
  if (options.userTitle) error.error_user_title = options.userTitle;
  if (options.userMessage) error.error_user_msg = options.userMessage;
  error.error_data = { messaging_product: 'whatsapp', details: options.details ?? title };
  error.fbtrace_id = fbtraceId();
  return { status: httpStatusForCode(code), body: { error } };
}

/** Missing or empty bearer token, as Graph answers it. */
export function missingTokenError(): GraphErrorReply {
  const reply = graphError(190, { title: 'Invalid OAuth access token - Cannot parse access token', details: 'An access token is required to request this resource.' });
  reply.body.error.message = 'Invalid OAuth access token - Cannot parse access token';
  return reply;
}

/**
 * Meta's own words in a failed status's `errors[]` where the sandbox knows them (reference §7's
 * example for 131049); other codes take the title of the service's error table.
 */
const STATUS_ERROR_TEXTS: Record<number, { title: string; details: string }> = {
  131049: {
    title: 'This message was not delivered to maintain healthy ecosystem engagement.',
    details: 'In order to maintain a healthy ecosystem engagement, the message failed to be delivered.',
  },
  132015: {
    title: 'Template is paused',
    details: 'The message template is paused because of low quality, so the held message was not sent.',
  },
};

/** The `title` (also the `message`) and `error_data.details` of an asynchronous error with this code. */
export function statusErrorText(code: number): { title: string; details: string } {
  const known = STATUS_ERROR_TEXTS[code];
  if (known) return known;
  const title = lookupErrorCode(code)?.title ?? 'Message failed';
  return { title, details: title };
}
