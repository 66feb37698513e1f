import { AppError } from '../../http/errors.ts';
import type { UpstreamError, UpstreamOutcome } from '../../upstream/types.ts';

type Failure = Exclude<UpstreamOutcome<unknown>, { kind: 'accepted' }>;

function describe(error: UpstreamError | null): string {
  if (!error) return '';
  return ` (upstream code ${error.code}${error.subcode ? `/${error.subcode}` : ''}: ${error.title}${error.details ? ` - ${error.details}` : ''})`;
}

/**
 * A failed upstream call as the API answers it: 504 when the upstream did not answer in time,
 * 502 otherwise (rejected or retryable). Both are safe for the caller to retry.
 */
export function upstreamFailure(outcome: Failure, what: string): AppError {
  switch (outcome.kind) {
    case 'timeout':
      return new AppError('UPSTREAM_TIMEOUT', `The messaging platform did not answer in time while ${what}; retry with backoff`);
    case 'retryable':
      return new AppError('UPSTREAM_ERROR', `The messaging platform is temporarily unavailable while ${what}${describe(outcome.error)}; retry with backoff`);
    case 'rejected':
      return new AppError('UPSTREAM_ERROR', `The messaging platform refused the request while ${what}${describe(outcome.error)}`);
  }
}
