import { isDatabaseUnavailable, type Database } from './database.ts';

/** A start that cannot use DATABASE_URL; its message is the one line printed before exiting. */
export class DatabaseStartError extends Error {}

export interface FirstConnectionOptions {
  /** DATABASE_URL, for the host, port and password (never printed) of the messages. */
  url: string;
  /** DATABASE_START_TIMEOUT_MS: how long an unreachable database is waited for. */
  timeoutMs: number;
  /** Told once per burst of attempts (every LOG_EVERY_MS), not once per attempt. */
  onWaiting(message: string): void;
}

const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 1000;
const LOG_EVERY_MS = 5000;

/**
 * Runs `step` (the migrations) once the database answers. A database that cannot be reached at
 * start (down, restarting, failing over as the service restarts) is tried again until it answers or
 * `timeoutMs` has passed, instead of exiting into a restart loop; what a retry cannot fix
 * (authentication, unknown database, a refused TLS setting) stops the start at once. Either way the
 * failure is a DatabaseStartError naming DATABASE_URL. Errors of `step` itself other than a lost
 * connection are not about the URL and are thrown as they are.
 */
export async function afterFirstConnection<T>(database: Database, options: FirstConnectionOptions, step: () => Promise<T>): Promise<T> {
  if (database.kind === 'pglite') return step(); // no server to wait for; its own errors say why it could not open
  const target = databaseTarget(options.url);
  const started = Date.now();
  let retryMs = FIRST_RETRY_MS;
  let attempts = 0;
  let loggedAt = -Infinity;
  for (;;) {
    attempts++;
    let connected = false;
    try {
      await database.withScriptConnection(async () => { connected = true; });
      return await step();
    } catch (err) {
      if (connected && !isDatabaseUnavailable(err)) throw err;
      const failure = classify(err, target);
      if (!failure.retryable) throw new DatabaseStartError(redact(failure.line, options.url));
      const elapsed = Date.now() - started;
      if (elapsed >= options.timeoutMs) {
        throw new DatabaseStartError(redact(`DATABASE_URL: the database at ${target} is unreachable (${failure.reason}) and did not answer within ${options.timeoutMs} ms (DATABASE_START_TIMEOUT_MS, ${counted(attempts)}): start it, or fix the host and port in DATABASE_URL`, options.url));
      }
      if (Date.now() - loggedAt >= LOG_EVERY_MS) {
        loggedAt = Date.now();
        options.onWaiting(redact(`database at ${target} unreachable (${failure.reason}), ${counted(attempts)} so far; retrying for up to ${options.timeoutMs} ms in all (DATABASE_START_TIMEOUT_MS)`, options.url));
      }
      await new Promise((resolve) => setTimeout(resolve, Math.min(retryMs, options.timeoutMs - elapsed)));
      retryMs = Math.min(retryMs * 2, MAX_RETRY_MS);
    }
  }
}

const counted = (attempts: number) => `${attempts} attempt${attempts === 1 ? '' : 's'}`;

type Failure = { retryable: true; reason: string } | { retryable: false; line: string };

// SQLSTATEs of a connection the server refused: invalid_authorization_specification (an unknown
// role, a pg_hba.conf rejection), invalid_password, invalid_catalog_name (no such database).
const AUTHENTICATION_FAILED = new Set(['28000', '28P01']);
const UNKNOWN_DATABASE = '3D000';

function classify(err: unknown, target: string): Failure {
  const error = err instanceof Error ? err : new Error(String(err));
  const code = (error as { code?: unknown }).code;
  if (code === 'ENOTFOUND') return { retryable: true, reason: `host ${(error as { hostname?: string }).hostname ?? target} not found` };
  if (code === 'ECONNREFUSED') return { retryable: true, reason: 'connection refused' };
  if (/^timeout exceeded when trying to connect/.test(error.message)) return { retryable: true, reason: 'no answer within DATABASE_CONNECT_TIMEOUT_MS' };
  if (isDatabaseUnavailable(error)) return { retryable: true, reason: error.message || String(code) };
  if (typeof code === 'string' && AUTHENTICATION_FAILED.has(code)) return { retryable: false, line: `DATABASE_URL: authentication failed at ${target} (${error.message}): fix the user or password in DATABASE_URL` };
  // pg's own client-side errors when the server asks for a password the URL does not give.
  if (/password|SASL/i.test(error.message)) return { retryable: false, line: `DATABASE_URL: authentication failed at ${target} (${error.message}): fix the user or password in DATABASE_URL` };
  if (code === UNKNOWN_DATABASE) return { retryable: false, line: `DATABASE_URL: unknown database at ${target} (${error.message}): create it, or fix the database name in DATABASE_URL` };
  return { retryable: false, line: `DATABASE_URL: could not connect to the database at ${target}: ${error.message}` };
}

/** host:port of a DATABASE_URL as pg reads it (a `host` parameter wins; localhost and 5432 by default). */
function databaseTarget(url: string): string {
  if (url.startsWith('/')) return url.split(' ')[0];
  let parsed: URL;
  try {
    parsed = new URL(url.replace('@/', '@host/'));
    if (url.includes('@/')) parsed.hostname = '';
  } catch {
    return 'DATABASE_URL';
  }
  if (parsed.protocol === 'socket:') return decodeURIComponent(parsed.pathname);
  const host = parsed.searchParams.get('host') || parsed.hostname || 'localhost';
  return `${host}:${parsed.searchParams.get('port') || parsed.port || 5432}`;
}

/** No message carries the URL's password, whatever a driver's error quotes. */
function redact(message: string, url: string): string {
  let password = '';
  try {
    password = decodeURIComponent(new URL(url.replace('@/', '@host/')).password);
  } catch { /* no password to hide */ }
  return password ? message.replaceAll(password, '***') : message;
}
