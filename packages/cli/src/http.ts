import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request } from 'undici';
import { CliError, EXIT } from './exit-codes.ts';

export const PUBLIC_PREFIX = '/api/v1/public';
export const ADMIN_PREFIX = '/admin/v1';

/** An error answer of the service, from its envelope (spec section 7). */
export class ApiError extends CliError {
  constructor(readonly status: number, readonly code: string, message: string, readonly requestId: string | undefined, readonly details: unknown) {
    super(`${status} ${code}: ${message}`, status === 401 || status === 403 ? EXIT.AUTH : status >= 500 || status === 429 ? EXIT.FAILURE : EXIT.REFUSED);
  }
}

export interface ApiResponse<T> {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: T;
}

export interface RequestOptions {
  body?: unknown;
  query?: Record<string, string | number | undefined>;
  headers?: Record<string, string>;
  /** Also retry 5xx answers and network errors (only for requests that are safe to repeat). */
  retryServerErrors?: boolean;
  /** Give up retrying 429 and 5xx after this many attempts (default 8). */
  maxAttempts?: number;
}

const header = (headers: ApiResponse<unknown>['headers'], name: string) => {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
};

/**
 * A JSON client of one API (the operator API or the public API) with one bearer credential.
 * 429 is always waited out (Retry-After); when an answer says the minute budget is spent
 * (X-RateLimit-Remaining-Minute 0), every request of this client waits for X-RateLimit-Reset
 * instead of spending a request on a 429.
 */
export class Api {
  private agent = new Agent({ keepAliveTimeout: 10_000, connections: 16 });
  private pausedUntil = 0;

  constructor(readonly baseUrl: string, private prefix: string, private token: string) {}

  async call<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    return (await this.send<T>(method, path, options)).body;
  }

  async send<T>(method: string, path: string, options: RequestOptions = {}): Promise<ApiResponse<T>> {
    const url = new URL(this.baseUrl + this.prefix + path);
    for (const [key, value] of Object.entries(options.query ?? {})) if (value !== undefined) url.searchParams.set(key, String(value));
    const maxAttempts = options.maxAttempts ?? 8;
    for (let attempt = 1; ; attempt++) {
      const wait = this.pausedUntil - Date.now();
      if (wait > 0) await sleep(wait);
      let res: ApiResponse<T>;
      try {
        res = await this.once<T>(method, url, options);
      } catch (err) {
        if (!options.retryServerErrors || attempt >= maxAttempts) {
          throw new CliError(`cannot reach ${this.baseUrl}: ${(err as Error).message}`, EXIT.FAILURE);
        }
        await sleep(backoffMs(attempt));
        continue;
      }
      this.notePacing(res);
      if (res.status < 400) return res;
      const retryable = res.status === 429 || (options.retryServerErrors && res.status >= 500);
      if (retryable && attempt < maxAttempts) {
        const retryAfter = Number(header(res.headers, 'retry-after'));
        await sleep(res.status === 429 && retryAfter > 0 ? retryAfter * 1000 + Math.random() * 250 : backoffMs(attempt));
        continue;
      }
      throw toApiError(res);
    }
  }

  private async once<T>(method: string, url: URL, options: RequestOptions): Promise<ApiResponse<T>> {
    const res = await request(url, {
      method: method as 'GET',
      dispatcher: this.agent,
      headers: {
        authorization: `Bearer ${this.token}`,
        accept: 'application/json',
        ...(options.body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...options.headers,
      },
      body: options.body !== undefined ? JSON.stringify(options.body) : undefined,
    });
    const text = await res.body.text();
    let body: unknown = text;
    try {
      body = text ? JSON.parse(text) : null;
    } catch { /* not JSON: kept as text for the error */ }
    return { status: res.statusCode, headers: res.headers, body: body as T };
  }

  private notePacing(res: ApiResponse<unknown>): void {
    if (header(res.headers, 'x-ratelimit-remaining-minute') !== '0') return;
    const reset = Number(header(res.headers, 'x-ratelimit-reset'));
    // The minute window (the tighter one when the day still has budget) resets within a minute.
    if (reset > 0) this.pausedUntil = Math.max(this.pausedUntil, Math.min(reset * 1000, Date.now() + 61_000) + 50);
  }

  async close(): Promise<void> {
    await this.agent.close();
  }
}

/** Jittered exponential backoff: about 0.25, 0.5, 1, 2, 4, 8 s, at most 10 s. */
function backoffMs(attempt: number): number {
  return Math.min(10_000, 250 * 2 ** (attempt - 1)) * (0.5 + Math.random() / 2);
}

function toApiError(res: ApiResponse<unknown>): ApiError {
  const envelope = res.body as { error?: { code?: string; message?: string; details?: unknown }; meta?: { request_id?: string } } | null;
  const requestId = envelope?.meta?.request_id ?? header(res.headers, 'x-request-id');
  if (envelope && typeof envelope === 'object' && envelope.error) {
    return new ApiError(res.status, envelope.error.code ?? 'ERROR', envelope.error.message ?? '', requestId, envelope.error.details);
  }
  return new ApiError(res.status, 'HTTP_ERROR', typeof res.body === 'string' ? res.body.slice(0, 200) : `HTTP ${res.status}`, requestId, undefined);
}
