import type { components } from '../../packages/sdk/src/generated/schema.ts';
import { idempotentPosts } from '../../packages/sdk/src/generated/idempotent.ts';

/** The public API's types, from the SDK (generated from the service's OpenAPI document). */
export type S = components['schemas'];
export const BASE = '/api/v1/public';

const KEY = 'console.key';

/** The key lives in sessionStorage only: gone when the tab closes, never in localStorage or a URL. */
export const session = {
  key: sessionStorage.getItem(KEY),
  scopes: [] as string[],
  set(key: string | null) {
    this.key = key;
    if (key) sessionStorage.setItem(KEY, key); else sessionStorage.removeItem(KEY);
  },
};

export function can(scope: string): boolean {
  return session.scopes.includes('*') || session.scopes.includes(scope);
}

/** An answer in the API's error envelope (or a transport failure), as the pages show it. */
export class ApiError extends Error {
  constructor(message: string, readonly status: number, readonly code: string, readonly requestId: string | null, readonly details: unknown = null) {
    super(message);
  }
}

/** Retry notices ("rate limited, retrying in 3 s"), shown in a banner while they last. */
type Notice = string | null;
const listeners = new Set<(n: Notice) => void>();
export function onNotice(fn: (n: Notice) => void) { listeners.add(fn); return () => listeners.delete(fn); }
function notify(n: Notice) { listeners.forEach((fn) => fn(n)); }

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const ATTEMPTS = 5;

/** Matches a concrete path (/campaigns/abc/send) to the SDK's list of POSTs that take an Idempotency-Key. */
function takesIdempotencyKey(path: string): boolean {
  const bare = path.split('?')[0];
  for (const pattern of idempotentPosts) {
    const re = new RegExp('^' + pattern.replace(/\{[^}]+\}/g, '[^/]+') + '$');
    if (re.test(bare)) return true;
  }
  return false;
}

export interface CallOptions { accept?: string; base?: string; noAuth?: boolean }

/**
 * One call to the API. A 429 or a lost connection is retried (the same Idempotency-Key each time)
 * and said in the banner; any other error answer becomes an ApiError with its message and request id.
 */
export async function call(method: string, path: string, body?: unknown, options: CallOptions = {}): Promise<Response> {
  const headers: Record<string, string> = { accept: options.accept ?? 'application/json' };
  if (!options.noAuth && session.key) headers.authorization = `Bearer ${session.key}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method === 'POST' && (options.base ?? BASE) === BASE && takesIdempotencyKey(path)) headers['idempotency-key'] = crypto.randomUUID();
  for (let attempt = 1; ; attempt++) {
    let response: Response;
    try {
      response = await fetch((options.base ?? BASE) + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    } catch {
      if (attempt >= ATTEMPTS) { notify(null); throw new ApiError('The connection to the service was lost; check your network and try again.', 0, 'NETWORK_ERROR', null); }
      const wait = 500 * 2 ** attempt;
      notify(`Connection lost; retrying in ${Math.ceil(wait / 1000)} s (attempt ${attempt + 1} of ${ATTEMPTS})…`);
      await sleep(wait);
      continue;
    }
    if (response.status === 429 && attempt < ATTEMPTS) {
      const wait = Math.min(30, Number(response.headers.get('retry-after')) || attempt) * 1000;
      notify(`Rate limited by the API (429); retrying in ${Math.ceil(wait / 1000)} s…`);
      await sleep(wait);
      continue;
    }
    notify(null);
    if (response.ok) return response;
    const requestId = response.headers.get('x-request-id');
    const text = await response.text();
    let envelope: { error?: { code?: string; message?: string; details?: unknown }; meta?: { request_id?: string } } = {};
    try { envelope = JSON.parse(text); } catch { /* not JSON */ }
    const message = envelope.error?.message ?? (text.slice(0, 200) || `HTTP ${response.status}`);
    const error = new ApiError(message, response.status, envelope.error?.code ?? `HTTP_${response.status}`, envelope.meta?.request_id ?? requestId, envelope.error?.details ?? null);
    if (response.status === 401 && !options.noAuth) unauthorised(error);
    throw error;
  }
}

export async function get<T>(path: string, options?: CallOptions): Promise<T> {
  return (await call('GET', path, undefined, options)).json() as Promise<T>;
}
export async function post<T>(path: string, body?: unknown, options?: CallOptions): Promise<T> {
  return (await call('POST', path, body, options)).json() as Promise<T>;
}
export async function put<T>(path: string, body?: unknown): Promise<T> {
  return (await call('PUT', path, body)).json() as Promise<T>;
}
export async function patch<T>(path: string, body: unknown): Promise<T> {
  return (await call('PATCH', path, body)).json() as Promise<T>;
}
export async function del<T>(path: string): Promise<T> {
  return (await call('DELETE', path)).json() as Promise<T>;
}

let onUnauthorised: (e: ApiError) => void = () => {};
export function whenUnauthorised(fn: (e: ApiError) => void) { onUnauthorised = fn; }
function unauthorised(e: ApiError) { onUnauthorised(e); }

export function qs(params: Record<string, string | number | undefined | null>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

/** Saves text as a file the person downloads. */
export function download(name: string, text: string, type = 'text/csv') {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement('a');
  a.href = url; a.download = name; document.body.append(a); a.click(); a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
