import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request } from 'undici';
// The SDK's list, generated from the service's OpenAPI document: the CLI keys the same POSTs.
import { idempotentPosts } from '../../sdk/src/generated/idempotent.ts';
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

/** A pause of this client for the tenant's rate limit: until when (epoch ms), and what asked for it. */
export interface RateLimitWait {
  until: number;
  reason: string;
}

/** A 429 asking for longer than this (the day's quota is spent) is an error, not a wait: a minute window always resets sooner. */
const LONGEST_WAIT_MS = 65_000;

/** The creating and sending POSTs, as path patterns (`/campaigns/{id}/send` matches any id). */
const IDEMPOTENT_POSTS = [...idempotentPosts].map((template) => new RegExp(`^${template.replace(/\{[^}]+\}/g, '[^/]+')}$`));
const takesIdempotencyKey = (method: string, path: string) => method === 'POST' && IDEMPOTENT_POSTS.some((pattern) => pattern.test(path));

const header = (headers: ApiResponse<unknown>['headers'], name: string) => {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
};

/**
 * A JSON client of one API (the operator API or the public API) with one bearer credential.
 * 429 is waited out (Retry-After, up to a minute); when an answer says the minute budget is spent
 * (X-RateLimit-Remaining-Minute 0), every request of this client waits for X-RateLimit-Reset
 * instead of spending a request on a 429. `onRateLimitWait` hears of each such wait as it starts.
 * The creating and sending POSTs carry an Idempotency-Key, the same one across retries, as the
 * SDK's do (a caller's own key, in `headers`, is kept).
 */
export class Api {
  private agent = new Agent({ keepAliveTimeout: 10_000, connections: 16 });
  private pausedUntil = 0;
  onRateLimitWait?: (wait: RateLimitWait) => void;

  constructor(readonly baseUrl: string, private prefix: string, private token: string) {}

  async call<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    return (await this.send<T>(method, path, options)).body;
  }

  async send<T>(method: string, path: string, options: RequestOptions = {}): Promise<ApiResponse<T>> {
    const url = new URL(this.baseUrl + this.prefix + path);
    for (const [key, value] of Object.entries(options.query ?? {})) if (value !== undefined) url.searchParams.set(key, String(value));
    const maxAttempts = options.maxAttempts ?? 8;
    if (takesIdempotencyKey(method, path) && !Object.keys(options.headers ?? {}).some((h) => h.toLowerCase() === 'idempotency-key')) {
      options = { ...options, headers: { ...options.headers, 'idempotency-key': randomUUID() } };
    }
    for (let attempt = 1; ; attempt++) {
      const until = this.pausedUntil;
      if (until > Date.now()) {
        this.onRateLimitWait?.({ until, reason: 'X-RateLimit-Remaining-Minute 0' });
        await sleep(Math.max(0, until - Date.now()));
      }
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
      const retryAfterMs = res.status === 429 ? Number(header(res.headers, 'retry-after')) * 1000 : 0;
      if (retryable && attempt < maxAttempts && !(retryAfterMs > LONGEST_WAIT_MS)) {
        if (retryAfterMs > 0) {
          const resumeAt = Date.now() + retryAfterMs + Math.random() * 250;
          this.onRateLimitWait?.({ until: resumeAt, reason: '429 Retry-After' });
          await sleep(Math.max(0, resumeAt - Date.now()));
        } else {
          await sleep(backoffMs(attempt));
        }
        continue;
      }
      throw toApiError(res, retryAfterMs > LONGEST_WAIT_MS ? ` (Retry-After ${retryAfterMs / 1000} s: more than msvc waits; the day's request quota is likely spent)` : '');
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

function toApiError(res: ApiResponse<unknown>, note = ''): ApiError {
  const envelope = res.body as { error?: { code?: string; message?: string; details?: unknown }; meta?: { request_id?: string } } | null;
  const requestId = envelope?.meta?.request_id ?? header(res.headers, 'x-request-id');
  if (envelope && typeof envelope === 'object' && envelope.error) {
    return new ApiError(res.status, envelope.error.code ?? 'ERROR', `${envelope.error.message ?? ''}${note}`, requestId, envelope.error.details);
  }
  return new ApiError(res.status, 'HTTP_ERROR', typeof res.body === 'string' ? res.body.slice(0, 200) : `HTTP ${res.status}`, requestId, undefined);
}
