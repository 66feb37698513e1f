import type { ErrorClass } from './types.ts';

/**
 * Meta's send-time error catalog (reference §4): what each code means, what to do about it, and
 * how a sender must react. Campaigns show `fix` to users, so it is written for them.
 */
export interface ErrorCodeInfo {
  code: number;
  title: string;
  fix: string;
  errorClass: ErrorClass;
  /** For retryable codes: how long to wait before the next attempt. */
  retryAfterMs?: number;
  /** For "retry a few times, then give up" codes (RETRY→REQ, RETRY→RCPT): the class once retries are exhausted. */
  exhaustedClass?: ErrorClass;
}

const SECOND = 1000;
const MINUTE = 60 * SECOND;

const CATALOG: ErrorCodeInfo[] = [
  { code: 0, title: 'Auth exception', fix: 'The access token expired, was revoked or is invalid; reconnect the business account with a new token.', errorClass: 'fatal' },
  { code: 1, title: 'API unknown', fix: 'Check the WhatsApp platform status and the request shape; retried a few times automatically.', errorClass: 'retryable', retryAfterMs: 5 * SECOND, exhaustedClass: 'bad_request' },
  { code: 2, title: 'API service temporarily unavailable', fix: 'Temporary downtime or overload at WhatsApp; retried with backoff automatically.', errorClass: 'retryable', retryAfterMs: 5 * SECOND },
  { code: 3, title: 'Capability or permission issue', fix: 'The token lacks a permission this call needs; check it in the access token debugger.', errorClass: 'fatal' },
  { code: 4, title: 'Too many API calls', fix: 'The app made too many API calls (mainly template management); calls resume after a pause.', errorClass: 'retryable', retryAfterMs: 60 * SECOND },
  { code: 10, title: 'Permission denied', fix: 'Grant the missing permission to the token or check the account\'s API eligibility.', errorClass: 'fatal' },
  { code: 33, title: 'Phone number deleted', fix: 'The sender phone-number id is no longer valid; reconnect the business account with a current phone number.', errorClass: 'fatal' },
  { code: 100, title: 'Invalid parameter', fix: 'A field is unsupported, misspelled or too long; see the details and correct the request.', errorClass: 'bad_request' },
  { code: 190, title: 'Access token has expired', fix: 'Reconnect the business account with a new access token.', errorClass: 'fatal' },
  { code: 368, title: 'Temporarily blocked for policy violations', fix: 'The WhatsApp Business Account is restricted for a policy violation; resolve it in Meta Business Manager.', errorClass: 'fatal' },
  { code: 80007, title: 'Rate limit issues', fix: 'Too many management calls for this WhatsApp Business Account; calls resume after a pause.', errorClass: 'retryable', retryAfterMs: 60 * SECOND },
  { code: 130403, title: 'Business blocked this user', fix: 'The business has blocked this user; unblock them before messaging again.', errorClass: 'recipient' },
  { code: 130429, title: 'Rate limit hit', fix: 'The phone number\'s messages-per-second throughput was reached; sending slows down and retries.', errorClass: 'retryable', retryAfterMs: 1 * SECOND },
  { code: 130472, title: 'User\'s number is part of an experiment', fix: 'WhatsApp held this message back as part of a marketing experiment; do not resend.', errorClass: 'recipient' },
  { code: 130497, title: 'Business account is restricted from messaging users in this country', fix: 'Your business category may not message users in this country; remove such recipients.', errorClass: 'recipient' },
  { code: 131000, title: 'Something went wrong', fix: 'An unknown error at WhatsApp; retried a few times, then the recipient is marked failed. Contact support if it persists.', errorClass: 'retryable', retryAfterMs: 5 * SECOND, exhaustedClass: 'recipient' },
  { code: 131005, title: 'Access denied', fix: 'A permission was missing or removed from the token; reconnect the business account with the right permissions.', errorClass: 'fatal' },
  { code: 131008, title: 'Required parameter is missing', fix: 'Add the missing field named in the details.', errorClass: 'bad_request' },
  { code: 131009, title: 'Parameter value is not valid', fix: 'A value is invalid, often the phone number, a URL or a media id; correct it.', errorClass: 'bad_request' },
  { code: 131016, title: 'Service unavailable', fix: 'WhatsApp is temporarily unavailable; retried with backoff automatically.', errorClass: 'retryable', retryAfterMs: 5 * SECOND },
  { code: 131021, title: 'Recipient cannot be sender', fix: 'The recipient is the business\'s own number; remove it from the audience.', errorClass: 'recipient' },
  { code: 131026, title: 'Message undeliverable', fix: 'The number may not be on WhatsApp, use an old app version, or not have accepted the terms.', errorClass: 'recipient' },
  { code: 131030, title: 'Recipient phone number not in allowed list', fix: 'A test number can only message its registered recipients; add the number or use a production number.', errorClass: 'recipient' },
  { code: 131031, title: 'Account has been locked', fix: 'The WhatsApp Business Account is restricted or disabled, or the two-step PIN is wrong; check its health status.', errorClass: 'fatal' },
  { code: 131037, title: 'Display name approval needed', fix: 'Get a display name approved for the sending phone number.', errorClass: 'fatal' },
  { code: 131042, title: 'Business eligibility payment issue', fix: 'Fix the payment method, credit line, currency or time zone of the WhatsApp Business Account.', errorClass: 'fatal' },
  { code: 131045, title: 'Incorrect certificate', fix: 'Register the phone number on the Cloud API before sending.', errorClass: 'fatal' },
  { code: 131047, title: 'Re-engagement message', fix: 'More than 24 hours since the user last wrote; send an approved template instead of a free-form message.', errorClass: 'recipient' },
  // Not retried per message: the number's campaigns pause (upstream-stops.ts), its recipients wait an hour at least.
  { code: 131048, title: 'Spam rate limit hit', fix: 'The number is restricted after blocks or spam reports; its campaigns pause. Check its quality, and resume them hours later.', errorClass: 'fatal', retryAfterMs: 60 * MINUTE },
  { code: 131049, title: 'Meta chose not to deliver', fix: 'The user reached the marketing-message cap; wait at least 24 hours or use a utility template.', errorClass: 'recipient' },
  { code: 131050, title: 'User stopped marketing messages', fix: 'The user opted out of marketing messages; do not send them marketing templates.', errorClass: 'recipient' },
  { code: 131051, title: 'Unsupported message type', fix: 'Use a supported message type.', errorClass: 'bad_request' },
  { code: 131052, title: 'Media download error', fix: 'The user\'s media could not be downloaded; ask them to send it another way.', errorClass: 'recipient' },
  { code: 131053, title: 'Media upload error', fix: 'The media file is unreadable, unsupported, or its type does not match its extension; fix the file.', errorClass: 'bad_request' },
  { code: 131056, title: 'Pair rate limit hit', fix: 'Too many messages to this user in a short time; this recipient is retried later, others are unaffected.', errorClass: 'retryable', retryAfterMs: 6 * SECOND },
  { code: 131057, title: 'Account in maintenance mode', fix: 'The account is in maintenance (e.g. a throughput upgrade); retried shortly.', errorClass: 'retryable', retryAfterMs: 15 * SECOND },
  { code: 131062, title: 'Business-scoped user id recipient not supported', fix: 'This message type cannot be sent to a business-scoped user id; use the phone number.', errorClass: 'bad_request' },
  { code: 131063, title: 'Marketing templates disabled on Cloud API', fix: 'Marketing messages are disabled for this account on the Cloud API; re-enable them.', errorClass: 'fatal' },
  { code: 131064, title: 'Messaging limit hit due to template miscategorisation', fix: 'Fix the categories of your templates; the limit lifts after the enforcement period.', errorClass: 'fatal' },
  { code: 132000, title: 'Number of parameters does not match the expected number of params', fix: 'Send exactly as many parameters as the template has variables.', errorClass: 'bad_request' },
  { code: 132001, title: 'Template name does not exist in the translation', fix: 'The template does not exist or is not approved in this language; check its name, language and status.', errorClass: 'fatal' },
  { code: 132005, title: 'Translated text too long', fix: 'The rendered text is too long, often because of long parameter values; shorten them.', errorClass: 'bad_request' },
  { code: 132007, title: 'Template format character policy violated', fix: 'The template content violates WhatsApp policy; create a compliant template.', errorClass: 'fatal' },
  { code: 132008, title: 'Template parameter value invalid', fix: 'A parameter value is invalid; correct it.', errorClass: 'bad_request' },
  { code: 132012, title: 'Parameter format does not match format in the created template', fix: 'A parameter has the wrong type for the template (e.g. text where the header expects an image).', errorClass: 'bad_request' },
  { code: 132015, title: 'Template is paused', fix: 'The template was paused for low quality; edit or appeal it and resume once it is approved again.', errorClass: 'fatal' },
  { code: 132016, title: 'Template is disabled', fix: 'The template was paused too often and is permanently disabled; create a new template.', errorClass: 'fatal' },
  { code: 132018, title: 'Template parameter validation error', fix: 'A parameter failed validation at send time; see the details.', errorClass: 'bad_request' },
  { code: 132068, title: 'Flow is in blocked state', fix: 'The Flow is blocked; fix it before sending.', errorClass: 'fatal' },
  // Throttled Flows allow 10 sends an hour: hopeless for bulk sending, so campaigns stop.
  { code: 132069, title: 'Flow is in throttled state', fix: 'The Flow is throttled to 10 sends an hour; wait, or fix the Flow before bulk sending.', errorClass: 'fatal' },
  { code: 133004, title: 'Server temporarily unavailable', fix: 'WhatsApp is temporarily unavailable; retried later automatically.', errorClass: 'retryable', retryAfterMs: 10 * SECOND },
  { code: 133010, title: 'Phone number not registered', fix: 'Register the phone number on the Cloud API.', errorClass: 'fatal' },
  { code: 134011, title: 'WhatsApp Payments terms not accepted', fix: 'Accept the WhatsApp Payments terms of service.', errorClass: 'fatal' },
  { code: 135000, title: 'Generic user error', fix: 'An unknown problem with the request parameters; check the request.', errorClass: 'bad_request' },
  { code: 137000, title: 'Identity key mismatch', fix: 'The user reinstalled or changed device; send again without the identity hash.', errorClass: 'recipient' },
];

const PERMISSION_RANGE: ErrorCodeInfo = {
  code: 200, title: 'API permission', fix: 'The token\'s system user lacks a permission or access to this business account; grant it in Business Manager.', errorClass: 'fatal',
};

const BY_CODE = new Map(CATALOG.map((info) => [info.code, info]));

/** Every documented code, for listings and tests. */
export const ERROR_CATALOG: readonly ErrorCodeInfo[] = CATALOG;

/** The catalog entry for a code; 200–299 share one entry. Undefined for codes the catalog does not know. */
export function lookupErrorCode(code: number): ErrorCodeInfo | undefined {
  const known = BY_CODE.get(code);
  if (known) return known;
  if (code >= 200 && code <= 299) return { ...PERMISSION_RANGE, code };
  return undefined;
}

/**
 * The class of an error code. Unknown codes are retryable only when the Graph error says
 * `is_transient`; otherwise retrying the same request would just fail the same way.
 */
export function classifyErrorCode(code: number, isTransient = false): ErrorClass {
  return lookupErrorCode(code)?.errorClass ?? (isTransient ? 'retryable' : 'bad_request');
}

/** Template-management subcodes (usually with code 100). */
export const TEMPLATE_SUBCODES = {
  templateCountLimit: 2388019,
  nameInCooldown: 2388023,
  duplicateNameLanguage: 2388024,
  statusCannotChange: 2388039,
  characterLimit: 2388040,
  headerFormat: 2388047,
  bodyFormat: 2388072,
  footerFormat: 2388073,
  tooManyVariables: 2388293,
  variableAtEdge: 2388299,
} as const;

const MAX_PAIR_RATE_DELAY_MS = 15 * MINUTE;

/**
 * Suggested wait before retrying a retryable code. `attempt` counts earlier retries of the same
 * message (0 for the first): the pair rate limit follows Meta's 4^X advice from a 6 s base (one
 * message per 6 s to a user), other codes back off by doubling.
 */
export function retryDelayMs(code: number, attempt = 0): number {
  const base = lookupErrorCode(code)?.retryAfterMs ?? 5 * SECOND;
  if (code === 131056) return Math.min(base * 4 ** attempt, MAX_PAIR_RATE_DELAY_MS);
  return Math.min(base * 2 ** attempt, Math.max(base, 10 * MINUTE));
}
