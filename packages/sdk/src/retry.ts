/**
 * How the client retries: 429, 5xx and network errors, and a 409 that carries Retry-After (an
 * Idempotency-Key whose first request is still running); never another 4xx.
 */
export interface RetryOptions {
  /** Retries after the first attempt; 0 turns retrying off. Default 3. */
  maxRetries: number;
  /** First backoff step; each retry doubles it, with jitter. Default 500 ms. */
  baseDelayMs: number;
  /**
   * Longest single wait. A 429 or 409 (or a spent rate-limit window) that asks for longer is not
   * waited for: the error is returned at once. Default 60 s (a minute window always resets within it).
   */
  maxDelayMs: number;
}

export const defaultRetryOptions: RetryOptions = { maxRetries: 3, baseDelayMs: 500, maxDelayMs: 60_000 };

type Fetch = (request: Request) => Promise<Response>;

/**
 * A fetch that retries the same Request (so the same Idempotency-Key) on network errors, 5xx, 429
 * and a 409 with Retry-After, and holds requests back while the last response said the tenant's
 * rate-limit window is spent (X-RateLimit-Remaining-* at 0 until X-RateLimit-Reset).
 */
export function retryingFetch(options: RetryOptions, baseFetch: Fetch = (request) => globalThis.fetch(request)): Fetch {
  let windowResetsAt = 0; // epoch ms before which the budget is known to be spent
  return async (request) => {
    for (let attempt = 0; ; attempt++) {
      const hold = windowResetsAt - Date.now();
      if (hold > 0 && hold <= options.maxDelayMs) await sleep(hold + jitter(250), request.signal);
      let response: Response;
      try {
        response = await baseFetch(request.clone());
      } catch (error) {
        if (request.signal.aborted || attempt >= options.maxRetries) throw error;
        await sleep(backoff(attempt, options), request.signal);
        continue;
      }
      windowResetsAt = spentWindowResetsAt(response) ?? 0;
      const delay = retryDelay(response, attempt, options);
      if (delay === null || attempt >= options.maxRetries) return response;
      await response.body?.cancel();
      await sleep(delay, request.signal);
    }
  };
}

/** How long to wait before retrying this response, or null when it is final. */
function retryDelay(response: Response, attempt: number, options: RetryOptions): number | null {
  // The service sends Retry-After on a 409 only while the key's first request is still running
  // (the retry then gets its outcome); a 409 without it (a duplicate, a reused key) is final.
  if (response.status === 409) return askedDelay(retryAfterMs(response), options);
  if (response.status !== 429 && response.status < 500) return null;
  const asked = retryAfterMs(response) ?? (response.status === 429 ? resetInMs(response) : null);
  if (asked === null) return backoff(attempt, options);
  return askedDelay(asked, options);
}

/** The wait the service asked for, with jitter; null (final) when it asked for none or for longer than maxDelayMs. */
function askedDelay(asked: number | null, options: RetryOptions): number | null {
  if (asked === null || asked > options.maxDelayMs) return null;
  return asked + jitter(250);
}

/** Exponential backoff with "equal jitter": between half and all of base * 2^attempt, capped. */
function backoff(attempt: number, options: RetryOptions): number {
  const step = Math.min(options.maxDelayMs, options.baseDelayMs * 2 ** attempt);
  return step / 2 + jitter(step / 2);
}

function jitter(ms: number): number {
  return Math.random() * ms;
}

/** Retry-After as seconds or an HTTP date. */
function retryAfterMs(response: Response): number | null {
  const value = response.headers.get('retry-after');
  if (!value) return null;
  const ms = /^\d+$/.test(value.trim()) ? Number(value) * 1000 : Date.parse(value) - Date.now();
  return Number.isFinite(ms) ? Math.max(0, ms) : null;
}

function resetInMs(response: Response): number | null {
  const reset = Number(response.headers.get('x-ratelimit-reset'));
  return reset > 0 ? Math.max(0, reset * 1000 - Date.now()) : null;
}

/** When the response says a window has no request left (a day of -1 is unlimited), when it resets. */
function spentWindowResetsAt(response: Response): number | null {
  const remaining = ['x-ratelimit-remaining-minute', 'x-ratelimit-remaining-day'].map((name) => response.headers.get(name));
  if (!remaining.includes('0')) return null;
  const reset = Number(response.headers.get('x-ratelimit-reset'));
  return reset > 0 ? reset * 1000 : null;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => { clearTimeout(timer); reject(signal.reason); };
    const timer = setTimeout(() => { signal.removeEventListener('abort', onAbort); resolve(); }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
