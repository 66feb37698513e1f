import { randomUUID } from 'node:crypto';
import type { LookupAddress, LookupOptions } from 'node:dns';
import { readFileSync } from 'node:fs';
import { createSecureContext, rootCertificates } from 'node:tls';
import { Agent, type Dispatcher } from 'undici';
import { deliveryHeaders } from './webhooks.signer.ts';
import { DestinationRefusedError, hostOf, resolveDestination } from './webhooks.ssrf.ts';

export const RESPONSE_BODY_CHARS = 500;
/** Only the first 500 characters are kept; reading further would let a receiver make us buffer gigabytes. */
const RESPONSE_READ_CAP_BYTES = 16 * 1024;

export type ErrorClass = 'http_status' | 'timeout' | 'tls' | 'dns' | 'connection' | 'destination_refused' | 'invalid_url';

/** The outcome of one attempt, as a value: only bugs throw. */
export type AttemptOutcome =
  | { ok: true; statusCode: number; responseTimeMs: number; responseBody: string | null }
  | { ok: false; statusCode: number | null; responseTimeMs: number; responseBody: string | null; errorClass: ErrorClass; errorMessage: string };

/** An attempt's outcome as the delivery log records it (error fields null on success). */
export interface LoggedOutcome {
  ok: boolean;
  statusCode: number | null;
  responseTimeMs: number;
  responseBody: string | null;
  errorClass: string | null;
  errorMessage: string | null;
}

export function toLoggedOutcome(outcome: AttemptOutcome): LoggedOutcome {
  const { ok, statusCode, responseTimeMs, responseBody } = outcome;
  return outcome.ok
    ? { ok, statusCode, responseTimeMs, responseBody, errorClass: null, errorMessage: null }
    : { ok, statusCode, responseTimeMs, responseBody, errorClass: outcome.errorClass, errorMessage: outcome.errorMessage };
}

export interface AttemptRequest {
  url: string;
  endpointId: string;
  eventType: string;
  /** Exact body bytes (a string is sent as its UTF-8 encoding, and signed the same way). */
  payload: Uint8Array | string;
  secret: string;
  /** X-Service-Delivery-ID: unique per attempt; generated when omitted. */
  attemptId?: string;
}

export interface SenderOptions {
  timeoutMs: number;
  extraCaFile?: string;
  /** The development CA (src/crypto/dev-ca.ts), trusted outside production beside the extra CA. */
  devCaFile?: string;
  allowPrivateNetworks: boolean;
  /**
   * Connections per origin: the deliverer's own concurrency, so never the limit; without it undici
   * opened a second connection whenever the next attempt was dispatched a moment before the
   * previous one released its socket (twice the TLS handshakes).
   */
  maxConnectionsPerOrigin?: number;
  /** Told of every attempt (deliveries and test events): `success` or the failure class, and seconds taken. */
  onAttempt?: (result: string, seconds: number) => void;
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * dns.lookup replacement for the delivery Agent (private networks disallowed): resolves through the
 * SSRF guard, so the socket connects to exactly the addresses that were checked (no DNS rebinding
 * between check and connect).
 */
export function guardedLookup(hostname: string, lookupOptions: LookupOptions, callback: LookupCallback): void {
  resolveDestination(hostname, false).then(
    (addresses) => {
      const wanted = lookupOptions.family === 4 || lookupOptions.family === 6 ? addresses.filter((a) => a.family === lookupOptions.family) : addresses;
      if (wanted.length === 0) return callback(Object.assign(new Error(`no IPv${lookupOptions.family} address for ${hostname}`), { code: 'ENOTFOUND' }), '', 0);
      if (lookupOptions.all) return callback(null, wanted);
      callback(null, wanted[0].address, wanted[0].family);
    },
    (err) => callback(err, '', 0),
  );
}

/**
 * Sends signed webhook attempts. One keep-alive Agent for all endpoints; TLS always verified (an
 * extra CA may be added for self-signed receivers); redirects are never followed (undici's request
 * does not follow them without the redirect interceptor). Unless private networks are allowed,
 * every new connection resolves its host through the SSRF guard and connects to the very address
 * the guard accepted (connect.lookup), and every attempt re-checks the destination first.
 */
export class WebhookSender {
  /** Made at the first attempt (see agent()). */
  private sharedAgent: Agent | null = null;
  private closed = false;
  /** The extra CAs' PEM text, read at construction so a missing file fails the start, not a delivery. */
  private extraCas: string[];
  /** Parsed endpoint URLs by their text: an endpoint's attempts all go to the same few URLs. */
  private urls = new Map<string, URL>();

  constructor(private options: SenderOptions) {
    this.extraCas = [options.extraCaFile, options.devCaFile].filter((f) => f !== undefined).map((f) => readFileSync(f, 'utf8'));
  }

  /**
   * The one Agent, made at the first attempt: with an extra CA it carries a TLS context holding
   * every root certificate, whose making took 0.2 s of CPU at each start, for deliveries that may
   * never come. Built once: a `ca` list given per connection is parsed again (all root
   * certificates) for every new TLS connection, which blocked the event loop for seconds when many
   * connections opened at once.
   */
  private agent(): Agent {
    if (this.sharedAgent) return this.sharedAgent;
    const { options } = this;
    const secureContext = this.extraCas.length > 0 ? createSecureContext({ ca: [...rootCertificates, ...this.extraCas] }) : undefined;
    this.sharedAgent = new Agent({
      connect: {
        ...(secureContext ? { secureContext } : {}),
        rejectUnauthorized: true,
        timeout: options.timeoutMs,
        ...(options.allowPrivateNetworks ? {} : { lookup: guardedLookup as never }),
      },
      keepAliveTimeout: 4_000,
      ...(options.maxConnectionsPerOrigin ? { connections: options.maxConnectionsPerOrigin } : {}),
      // post()'s own timer is the deadline; undici's coarse timers can fire a little early, so they
      // only back it up.
      headersTimeout: options.timeoutMs + 1_000,
      bodyTimeout: options.timeoutMs + 1_000,
    });
    // Closed before its first attempt: an attempt still made fails as on a closed Agent.
    if (this.closed) void this.sharedAgent.close();
    return this.sharedAgent;
  }

  async attempt(req: AttemptRequest): Promise<AttemptOutcome> {
    const outcome = await this.send(req);
    this.options.onAttempt?.(outcome.ok ? 'success' : outcome.errorClass, outcome.responseTimeMs / 1000);
    return outcome;
  }

  private async send(req: AttemptRequest): Promise<AttemptOutcome> {
    const started = performance.now();
    const elapsed = () => Math.round(performance.now() - started);
    let url: URL;
    try {
      url = this.parsed(req.url);
    } catch (err) {
      return { ok: false, statusCode: null, responseTimeMs: 0, responseBody: null, errorClass: 'invalid_url', errorMessage: (err as Error).message };
    }
    // One deadline for the whole attempt, the destination check (a DNS lookup) included.
    const { timeoutMs } = this.options;
    const remaining = () => Math.max(1, Math.round(started + timeoutMs - performance.now()));
    try {
      if (!this.options.allowPrivateNetworks) await withDeadline(resolveDestination(hostOf(url), false), timeoutMs);
      // Encoded once: the signature and the request body are the same bytes.
      const body = typeof req.payload === 'string' ? Buffer.from(req.payload) : req.payload;
      const headers = deliveryHeaders({
        secret: req.secret, eventType: req.eventType, attemptId: req.attemptId ?? randomUUID(), endpointId: req.endpointId, body,
      });
      const { statusCode, body: responseBody } = await post(this.agent(), url, headers, body, remaining());
      if (statusCode >= 200 && statusCode < 300) return { ok: true, statusCode, responseTimeMs: elapsed(), responseBody };
      return { ok: false, statusCode, responseTimeMs: elapsed(), responseBody, errorClass: 'http_status', errorMessage: `Endpoint answered HTTP ${statusCode}` };
    } catch (err) {
      const { errorClass, errorMessage } = classify(err, this.options.timeoutMs);
      return { ok: false, statusCode: null, responseTimeMs: elapsed(), responseBody: null, errorClass, errorMessage };
    }
  }

  /** The URL, parsed once per distinct text (URL objects are only read here). */
  private parsed(text: string): URL {
    let url = this.urls.get(text);
    if (url === undefined) {
      url = new URL(text);
      if (url.protocol !== 'https:') throw new Error('webhook URL must use https');
      if (this.urls.size >= 10_000) this.urls.clear();
      this.urls.set(text, url);
    }
    return url;
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.sharedAgent?.close();
  }
}

class AttemptTimeoutError extends Error {
  override name = 'TimeoutError';
}

/**
 * One POST through undici's dispatch API: the response body is collected straight from the socket's
 * chunks up to the read cap (no stream, no AbortSignal), which is what the delivery rate is made of.
 * The deadline covers everything from here (queueing, connecting, headers, body): when it passes,
 * the promise settles at once and the request is aborted as soon as undici hands it a controller.
 */
export function post(agent: Agent, url: URL, headers: Record<string, string>, body: Uint8Array | string, timeoutMs: number): Promise<{ statusCode: number; body: string | null }> {
  return new Promise((resolve, reject) => {
    let controller: Dispatcher.DispatchController | null = null;
    let settled = false;
    let statusCode = 0;
    const chunks: Buffer[] = [];
    let size = 0;
    const settle = (err: Error | null) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (err) return reject(err);
      // Stored in a text column: NUL characters are dropped (UTF-8 decoding already replaced invalid bytes).
      resolve({ statusCode, body: size === 0 ? null : Buffer.concat(chunks).toString('utf8').replaceAll('\u0000', '').slice(0, RESPONSE_BODY_CHARS) });
    };
    const timer = setTimeout(() => {
      const timeout = new AttemptTimeoutError(`No response within ${timeoutMs} ms`);
      controller?.abort(timeout);
      settle(timeout);
    }, timeoutMs);
    agent.dispatch({ origin: url.origin, path: url.pathname + url.search, method: 'POST', headers, body }, {
      onRequestStart(c) {
        controller = c;
        if (settled) c.abort(new AttemptTimeoutError(`No response within ${timeoutMs} ms`));
      },
      onResponseStart(_c, code) {
        statusCode = code;
      },
      onResponseData(c, chunk) {
        chunks.push(chunk);
        size += chunk.length;
        if (size >= RESPONSE_READ_CAP_BYTES) {
          settle(null);
          c.abort(new Error('response body over the read cap'));
        }
      },
      onResponseEnd() {
        settle(null);
      },
      onResponseError(_c, err) {
        settle(err);
      },
    });
  });
}

function withDeadline<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new AttemptTimeoutError(`No response within ${ms} ms`)), ms);
  });
  return Promise.race([work, expired]).finally(() => clearTimeout(timer));
}

const TLS_CODES = /CERT|SSL|TLS|SELF_SIGNED|UNABLE_TO_(GET|VERIFY)|HOSTNAME|ERR_TLS/i;

function classify(err: unknown, timeoutMs: number): { errorClass: ErrorClass; errorMessage: string } {
  const e = err as { code?: string; name?: string; message?: string; cause?: { code?: string; message?: string } };
  const code = e.code ?? e.cause?.code ?? '';
  const message = e.message ?? String(err);
  if (err instanceof DestinationRefusedError || code === 'ERR_DESTINATION_REFUSED' || e.cause instanceof DestinationRefusedError) {
    return { errorClass: 'destination_refused', errorMessage: err instanceof DestinationRefusedError ? message : e.cause?.message ?? message };
  }
  if (e.name === 'TimeoutError' || e.name === 'AbortError' || /TIMEOUT/.test(code)) {
    return { errorClass: 'timeout', errorMessage: `No response within ${timeoutMs} ms` };
  }
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'ENODATA') return { errorClass: 'dns', errorMessage: message };
  if (TLS_CODES.test(code) || TLS_CODES.test(message)) return { errorClass: 'tls', errorMessage: message };
  return { errorClass: 'connection', errorMessage: code ? `${code}: ${message}` : message };
}
