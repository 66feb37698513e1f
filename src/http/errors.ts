/** The spec's closed list of error codes, plus the two upstream codes for 502/504. */
export const ERROR_CODES = [
  'AUTHENTICATION_REQUIRED',
  'FORBIDDEN',
  'NOT_FOUND',
  'VALIDATION_ERROR',
  'RATE_LIMIT_EXCEEDED',
  'UPGRADE_REQUIRED',
  'CONFLICT',
  'INTERNAL_ERROR',
  'UPSTREAM_ERROR',
  'UPSTREAM_TIMEOUT',
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

const DEFAULT_STATUS: Record<ErrorCode, number> = {
  AUTHENTICATION_REQUIRED: 401,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  VALIDATION_ERROR: 400,
  RATE_LIMIT_EXCEEDED: 429,
  UPGRADE_REQUIRED: 403,
  CONFLICT: 409,
  INTERNAL_ERROR: 500,
  UPSTREAM_ERROR: 502,
  UPSTREAM_TIMEOUT: 504,
};

export interface ValidationDetail {
  type: string;
  loc: (string | number)[];
  msg: string;
  input: unknown;
}

export interface ErrorExtras {
  details?: ValidationDetail[];
  required_permissions?: string[];
  current_permissions?: string[];
  upgrade_required?: boolean;
  feature_key?: string;
  /** A refusal by the messaging platform: its numeric code, title and details. */
  upstream_error?: { code: number; title: string; details: string | null };
}

/** An expected failure: carries one of the spec's codes; the envelope is built in one place. */
export class AppError extends Error {
  readonly status: number;
  /** Seconds the caller should wait before retrying, sent as Retry-After. */
  retryAfterSeconds?: number;
  /**
   * The request may have reached the upstream and its outcome is not known yet: its
   * Idempotency-Key is kept (neither replayed nor released) until the outcome is.
   */
  outcomeUnknown = false;
  constructor(readonly code: ErrorCode, message: string, readonly extras: ErrorExtras = {}, status?: number) {
    super(message);
    this.status = status ?? DEFAULT_STATUS[code];
  }
}

export const notFound = (what: string) => new AppError('NOT_FOUND', `${what} not found`);
export const conflict = (message: string) => new AppError('CONFLICT', message);

export function validationError(message: string, loc: (string | number)[] = [], input: unknown = null, type = 'value_error'): AppError {
  return new AppError('VALIDATION_ERROR', message, { details: [{ type, loc, msg: message, input }] });
}

export function errorEnvelope(requestId: string, code: ErrorCode, message: string, extras: ErrorExtras = {}) {
  return {
    success: false as const,
    error: { code, message, ...extras },
    meta: { request_id: requestId, timestamp: new Date().toISOString() },
  };
}
