/**
 * Exit codes scripts can branch on (README, "Operator CLI"). Stable: add new ones, never renumber.
 */
export const EXIT = {
  OK: 0,
  /** Unexpected failure: network error, service unreachable, 5xx after retries, a bug. */
  FAILURE: 1,
  /** Bad flags or arguments, missing configuration (URL, token, key). */
  USAGE: 2,
  /** The service refused the request (4xx other than 401/403): not found, validation, conflict. */
  REFUSED: 3,
  /** Authentication or authorisation failed (401, 403): wrong or missing token, key or scope, plan gate. */
  AUTH: 4,
  /** `contacts import` finished, but some rows were refused (written to the refused-rows CSV). */
  ROWS_REFUSED: 5,
  /** `campaigns watch`: the campaign ended STOPPED or FAILED. */
  CAMPAIGN_NOT_COMPLETED: 6,
  /** Interrupted (SIGINT); `contacts import` can be resumed by running the same command again. */
  INTERRUPTED: 130,
} as const;

/** An expected failure that ends the command with `code` and prints `message` (no stack). */
export class CliError extends Error {
  constructor(message: string, readonly exitCode: number) {
    super(message);
  }
}
