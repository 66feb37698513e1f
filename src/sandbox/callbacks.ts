import { createHmac } from 'node:crypto';
import type { Logger } from 'pino';
import { Agent, request } from 'undici';

/**
 * Meta's callback bodies escape non-ASCII as \uXXXX (lower-case hex) and `/` as `\/`; doing the
 * same makes a receiver that re-serialises parsed JSON before checking the signature fail here
 * rather than in production.
 */
export function metaJson(payload: unknown): string {
  return JSON.stringify(payload)
    .replace(/[\u007f-\uffff]/g, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'))
    .replace(/\//g, '\\/');
}

export function signatureHeader(appSecret: string, body: string | Buffer): string {
  return 'sha256=' + createHmac('sha256', appSecret).update(body).digest('hex');
}

/** How Meta retries a callback its receiver did not take: backoff doubling from `baseMs` up to `maxMs`, for `forMs`. */
export interface CallbackBackoff { baseMs: number; maxMs: number; forMs: number }

/** Reference §7: non-2xx or unreachable is retried with exponential backoff for up to 7 days. */
export const META_CALLBACK_BACKOFF: CallbackBackoff = { baseMs: 200, maxMs: 3_600_000, forMs: 7 * 24 * 3_600_000 };

/** The wait before retry `attempt` (0 for the first retry), or undefined once the callback is `ageMs` old and given up. */
export function backoffDelayMs(backoff: CallbackBackoff, attempt: number, ageMs: number): number | undefined {
  if (ageMs >= backoff.forMs) return undefined;
  return Math.min(backoff.baseMs * 2 ** attempt, backoff.maxMs, backoff.forMs - ageMs);
}

export interface CallbackDelivererOptions {
  appSecret: string;
  callbackUrl: () => string | null;
  logger: Logger;
  /** Exactly these retries, then give up (tests); otherwise `backoff`. */
  retryDelaysMs?: number[];
  backoff?: CallbackBackoff;
  maxInFlight?: number;
  /** Bodies waiting for a free slot or a retry beyond this are dropped (a dead receiver must not exhaust memory). */
  maxQueued?: number;
  timeoutMs?: number;
  /** Told a post's `followUp` once that post was delivered or given up on (never when the deliverer is closed). */
  onSettled?: (followUp: unknown) => void;
  /** Told whenever what is waiting to be posted changed (to persist it). */
  onChange?: () => void;
}

interface PendingPost {
  body: string;
  signature: string;
  attempt: number;
  firstAt: number;
  /** What the poster wants back once this body is settled; JSON, so that it survives a restart with the body. */
  followUp?: unknown;
  /** Called once the body was delivered or given up on. */
  settled: () => void;
}

/** A callback still owed, as a restarted sandbox takes it back. */
export interface SavedCallback {
  body: string;
  firstAt: number;
  followUp?: unknown;
}

/** Signs and POSTs callback bodies with keep-alive, bounded concurrency and a few retries. */
export class CallbackDeliverer {
  private readonly agent = new Agent({ connections: 32, keepAliveTimeout: 30_000 });
  private readonly queue: PendingPost[] = [];
  /** Callbacks waiting to be retried, by their timer. */
  private readonly retrying = new Map<NodeJS.Timeout, PendingPost>();
  private readonly inFlight = new Set<PendingPost>();
  private closed = false;
  private readonly retryDelaysMs: number[] | undefined;
  private readonly backoff: CallbackBackoff;
  private readonly maxInFlight: number;
  private readonly maxQueued: number;
  private readonly timeoutMs: number;
  delivered = 0;
  dropped = 0;
  private lastWarnAt = 0;
  private droppedSinceWarn = 0;

  constructor(private readonly options: CallbackDelivererOptions) {
    this.retryDelaysMs = options.retryDelaysMs;
    this.backoff = options.backoff ?? META_CALLBACK_BACKOFF;
    this.maxInFlight = options.maxInFlight ?? 16;
    this.maxQueued = options.maxQueued ?? 5000;
    this.timeoutMs = options.timeoutMs ?? 10_000;
  }

  /**
   * Queues a callback; the promise settles once it was delivered or given up on (never rejects).
   * `followUp` is handed to `onSettled` then, also after a restart that restored this callback.
   */
  post(payload: unknown, followUp?: unknown): Promise<void> {
    if (this.closed) return Promise.resolve();
    const body = metaJson(payload);
    return new Promise((settled) => {
      this.enqueue({ body, signature: signatureHeader(this.options.appSecret, body), attempt: 0, firstAt: Date.now(), followUp, settled });
    });
  }

  /** Callbacks queued, in flight or waiting for a retry: what a restarted sandbox still owes. */
  owed(): SavedCallback[] {
    return [...this.inFlight, ...this.queue, ...this.retrying.values()].map(({ body, firstAt, followUp }) => ({ body, firstAt, followUp }));
  }

  /**
   * Takes back callbacks a previous run still owed. They are posted at once and then retried from
   * the first backoff step (the receiver may be restarting too), within their original 7 days.
   */
  restore(saved: SavedCallback[]): void {
    for (const { body, firstAt, followUp } of saved) {
      this.enqueue({ body, signature: signatureHeader(this.options.appSecret, body), attempt: 0, firstAt, followUp, settled: () => {} });
    }
  }

  private enqueue(post: PendingPost): void {
    if (this.queue.length + this.retrying.size >= this.maxQueued) {
      this.drop('callback queue full');
      this.settle(post);
      return;
    }
    this.queue.push(post);
    this.options.onChange?.();
    this.pump();
  }

  private settle(post: PendingPost): void {
    post.settled();
    if (!this.closed && post.followUp !== undefined) this.options.onSettled?.(post.followUp);
    this.options.onChange?.();
  }

  private pump(): void {
    while (!this.closed && this.inFlight.size < this.maxInFlight && this.queue.length > 0) {
      const post = this.queue.shift()!;
      this.inFlight.add(post);
      void this.send(post).finally(() => {
        this.inFlight.delete(post);
        this.pump();
      });
    }
  }

  private async send(post: PendingPost): Promise<void> {
    const url = this.options.callbackUrl();
    let failure: string;
    try {
      // No receiver configured (yet: a restarted sandbox may take back callbacks before the
      // service that receives them listens) is retried like an unreachable one.
      if (!url) throw new Error('no callback_url');
      const response = await request(url, {
        method: 'POST',
        dispatcher: this.agent,
        headers: { 'content-type': 'application/json', 'x-hub-signature-256': post.signature },
        body: post.body,
        headersTimeout: this.timeoutMs,
        bodyTimeout: this.timeoutMs,
      });
      await response.body.dump();
      if (response.statusCode >= 200 && response.statusCode < 300) {
        this.delivered++;
        this.settle(post);
        return;
      }
      failure = `HTTP ${response.statusCode}`;
    } catch (err) {
      failure = (err as { code?: string }).code ?? (err as Error).message;
    }
    const delay = this.retryDelaysMs ? this.retryDelaysMs[post.attempt] : backoffDelayMs(this.backoff, post.attempt, Date.now() - post.firstAt);
    if (delay === undefined || this.closed) {
      this.drop(failure);
      this.settle(post);
      return;
    }
    const timer = setTimeout(() => {
      this.retrying.delete(timer);
      this.enqueue({ ...post, attempt: post.attempt + 1 });
    }, delay);
    timer.unref();
    this.retrying.set(timer, post);
  }

  /** A dead receiver fails thousands of callbacks a second: one warning per 10 s, with a count. */
  private drop(lastFailure: string): void {
    this.dropped++;
    this.droppedSinceWarn++;
    const now = Date.now();
    if (now - this.lastWarnAt < 10_000) return;
    this.options.logger.warn({ dropped: this.droppedSinceWarn, lastFailure, callbackUrl: this.options.callbackUrl() }, 'sandbox callbacks not delivered after retries; dropped');
    this.lastWarnAt = now;
    this.droppedSinceWarn = 0;
  }

  /** True when nothing is queued, in flight or waiting for a retry. */
  idle(): boolean {
    return this.queue.length === 0 && this.inFlight.size === 0 && this.retrying.size === 0;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const [timer, post] of this.retrying) {
      clearTimeout(timer);
      post.settled();
    }
    this.retrying.clear();
    for (const post of this.queue.splice(0)) post.settled();
    await this.agent.destroy().catch(() => {});
  }
}
