import { lookupErrorCode, retryDelayMs } from './error-codes.ts';
import type { SendTemplateResult, UpstreamError, UpstreamOutcome } from './types.ts';

/**
 * What an upstream answer means for the message it is about, whether it came as the send's HTTP
 * answer or later as a status callback (reference §3: the same code can arrive either way). Single
 * sends and the campaign dispatcher act on these kinds, never on raw codes.
 */
export type SendOutcome =
  | { kind: 'accepted'; messageId: string }
  /** Accepted but held by template pacing: later sent, or failed with 132015. */
  | { kind: 'held'; messageId: string }
  /** Meta chose not to deliver now (per-user marketing cap): try again in a day. */
  | { kind: 'deferred'; error: UpstreamError }
  /** Transient or throttled: the same message again after `retryAfterMs`. */
  | { kind: 'retry_later'; error: UpstreamError | null; retryAfterMs: number; reason: string }
  /** This recipient cannot be messaged; others can. */
  | { kind: 'recipient_failed'; error: UpstreamError }
  /** The request (or this row's data) is wrong; sending it unchanged fails the same way. */
  | { kind: 'request_invalid'; error: UpstreamError }
  /** The template cannot be sent: paused (until approved again), disabled, or missing. */
  | { kind: 'template_stopped'; error: UpstreamError; templateStatus: 'paused' | 'disabled' | null }
  /**
   * The number is restricted for spam (131048, reference §4 and §10: pause, retry hours later): this
   * message was not sent and may go again after `retryAfterMs`; the number's campaigns pause.
   */
  | { kind: 'number_restricted'; error: UpstreamError; retryAfterMs: number }
  /** Nothing can be sent from this business account until an operator acts. */
  | { kind: 'account_stopped'; error: UpstreamError; accountStatus: AccountStopStatus | null }
  /** No answer: the request may or may not have reached the upstream. Callbacks decide. */
  | { kind: 'unknown'; reason: string };

export type OutcomeKind = SendOutcome['kind'];
export type FailureOutcome = Extract<SendOutcome, { error: UpstreamError | null }>;
export type AccountStopStatus = 'token_invalid' | 'restricted';

/** Spam rate limit hit: a restriction of the number that lifts by itself, never an account stop. */
const SPAM_RESTRICTED = 131048;

const TEMPLATE_STOPS: Record<number, 'paused' | 'disabled' | null> = {
  132001: null, 132007: null, 132015: 'paused', 132016: 'disabled', 132068: null, 132069: null,
};

/** The token no longer works (expired, revoked, lacks a permission): reconnect with a new one. */
const TOKEN_CODES = new Set([0, 3, 10, 190, 131005]);

/** Codes that stop the account as a whole, and the status the business account takes. */
function accountStop(code: number): AccountStopStatus | null {
  if (TOKEN_CODES.has(code) || (code >= 200 && code <= 299)) return 'token_invalid';
  return 'restricted';
}

/** What an error code means, however it arrived; `attempt` counts earlier attempts of the message. */
export function outcomeOfError(error: UpstreamError, attempt = 0): FailureOutcome {
  const { code } = error;
  if (code === 131049) return { kind: 'deferred', error };
  if (code === SPAM_RESTRICTED) return { kind: 'number_restricted', error, retryAfterMs: retryDelayMs(code) };
  if (code in TEMPLATE_STOPS) return { kind: 'template_stopped', error, templateStatus: TEMPLATE_STOPS[code] };
  switch (error.errorClass) {
    case 'retryable':
      return { kind: 'retry_later', error, retryAfterMs: retryDelayMs(code, attempt), reason: `upstream error ${code}` };
    case 'recipient':
      return { kind: 'recipient_failed', error };
    case 'bad_request':
      return { kind: 'request_invalid', error };
    case 'fatal':
      // -1: an HTTP error without a Graph body (a proxy, or a wrong UPSTREAM_BASE_URL): stop, but
      // the account itself is not known to be at fault.
      return { kind: 'account_stopped', error, accountStatus: code === -1 ? null : accountStop(code) };
  }
}

/**
 * A retry_later outcome whose attempts are spent: the catalog's class once retries are exhausted
 * (RETRY→RCPT, RETRY→REQ), a recipient failure otherwise.
 */
export function exhausted(outcome: Extract<SendOutcome, { kind: 'retry_later' }>): FailureOutcome {
  // No upstream code (a connection refused, a 5xx without a body): -1, never a catalog code.
  const error: UpstreamError = outcome.error ?? { httpStatus: null, code: -1, subcode: null, title: outcome.reason, details: null, fbtraceId: null, errorClass: 'recipient' };
  const after = lookupErrorCode(error.code)?.exhaustedClass;
  return after === 'bad_request' ? { kind: 'request_invalid', error } : { kind: 'recipient_failed', error };
}

/** Answers that stop more than this message (a template, a number, an account): the campaign halts at once. */
export type StopOutcome = Extract<SendOutcome, { kind: 'template_stopped' | 'number_restricted' | 'account_stopped' }>;
export function isStop(outcome: SendOutcome): outcome is StopOutcome {
  return outcome.kind === 'template_stopped' || outcome.kind === 'number_restricted' || outcome.kind === 'account_stopped';
}

/** Throttling answers: the caller (or the number's pace) should slow down, nothing failed. */
export function isThrottle(outcome: SendOutcome): boolean {
  return outcome.kind === 'retry_later' && (outcome.error?.code === 130429 || outcome.error?.code === 131056);
}

/** Connection failures that happen before a request is written: the upstream never saw it. */
const NOT_SENT_NETWORK = /^network: (ECONNREFUSED|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|UND_ERR_CONNECT_TIMEOUT)$/;

/** The synchronous answer to a send. */
export function outcomeOfSend(result: UpstreamOutcome<SendTemplateResult>, attempt = 0): SendOutcome {
  switch (result.kind) {
    case 'accepted': {
      const status = result.value.messageStatus;
      // Template pacing (reference §2): held (or paused) messages are released or failed later.
      if (status === 'held_for_quality_assessment' || status === 'paused') return { kind: 'held', messageId: result.value.messageId };
      return { kind: 'accepted', messageId: result.value.messageId };
    }
    case 'timeout':
      return { kind: 'unknown', reason: 'the upstream did not answer in time' };
    case 'retryable':
      if (result.error) return outcomeOfError(result.error, attempt);
      // A connection lost after the request was written may have delivered it.
      if (result.reason.startsWith('network: ') && !NOT_SENT_NETWORK.test(result.reason)) return { kind: 'unknown', reason: `connection lost (${result.reason.slice(9)})` };
      return { kind: 'retry_later', error: null, retryAfterMs: result.retryAfterMs, reason: result.reason };
    case 'rejected':
      // A 2xx the client could not read: the upstream may well have taken the message.
      if (result.error.code === -1 && result.error.httpStatus !== null && result.error.httpStatus < 300) return { kind: 'unknown', reason: result.error.title };
      return outcomeOfError(result.error, attempt);
  }
}

/**
 * A `failed` status callback's error, as an outcome (its title and code come from the callback).
 * A callback without a usable code (read as 0) is a recipient failure: never Meta's code 0, which
 * would stop the whole account.
 */
export function outcomeOfCallbackFailure(code: number, title: string, attempt = 0): FailureOutcome {
  if (code === 0) return { kind: 'recipient_failed', error: { httpStatus: null, code, subcode: null, title, details: null, fbtraceId: null, errorClass: 'recipient' } };
  const info = lookupErrorCode(code);
  const error: UpstreamError = {
    httpStatus: null, code, subcode: null, title, details: null, fbtraceId: null,
    // Unknown codes by callback: the message failed, and nothing says a resend would not.
    errorClass: info?.errorClass ?? 'recipient',
  };
  return outcomeOfError(error, attempt);
}

/** 131050: the user stopped marketing messages from this business (reference §4, §11). */
const USER_STOPPED_MARKETING = 131050;

/**
 * Whether a failure with this code means the user opted out of marketing messages: the contact
 * is marked opted out (as by a `user_preferences` stop), whether the code came in the send's
 * answer or by callback.
 */
export function optsOutOfMarketing(code: number | null | undefined): boolean {
  return code === USER_STOPPED_MARKETING;
}
