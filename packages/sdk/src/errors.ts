import type { components } from './generated/schema.ts';

type ErrorEnvelope = components['schemas']['Error'];
export type ErrorCode = ErrorEnvelope['error']['code'];
export type ValidationIssue = components['schemas']['ValidationIssue'];

/**
 * A non-2xx answer of the API, read from its error envelope (spec section 7). Branch on `code`
 * (stable) rather than `message` (human text). `details` carries validation issues; `extra` the
 * envelope's other fields (required_permissions, feature_key, ...). `requestId` is the
 * X-Request-Id to quote to support.
 */
export class ApiError extends Error {
  override readonly name = 'ApiError';

  constructor(
    readonly status: number,
    readonly code: ErrorCode | (string & {}),
    message: string,
    readonly details: ValidationIssue[],
    readonly requestId: string | null,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
  }

  /** From a response and its body (parsed JSON when it was JSON, else text). */
  static from(response: Response, body: unknown): ApiError {
    const requestId = response.headers.get('x-request-id');
    const envelope = body as Partial<ErrorEnvelope> | undefined;
    if (!envelope || typeof envelope !== 'object' || typeof envelope.error?.code !== 'string') {
      // Not the service's envelope (a proxy's error page, say): keep what there is.
      const text = typeof body === 'string' && body.length > 0 ? body.slice(0, 500) : response.statusText;
      return new ApiError(response.status, `HTTP_${response.status}`, text || `HTTP ${response.status}`, [], requestId);
    }
    const { code, message, details, ...extra } = envelope.error;
    return new ApiError(response.status, code, message, details ?? [], envelope.meta?.request_id ?? requestId, extra);
  }
}
