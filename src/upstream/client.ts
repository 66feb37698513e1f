import { randomBytes } from 'node:crypto';
import { Agent, request } from 'undici';
import { classifyErrorCode, lookupErrorCode, retryDelayMs } from './error-codes.ts';
import type {
  CreateTemplateRequest, MediaDownload, SendTemplateRequest, SendTemplateResult, UpstreamAccount, UpstreamClient,
  UpstreamError, UpstreamOutcome, UpstreamTemplate,
} from './types.ts';

export interface UpstreamClientOptions {
  /** Graph API base including the version, e.g. https://graph.facebook.com/v21.0 */
  baseUrl: string;
  timeoutMs: number;
  /** Keep-alive connections per upstream origin. */
  connections?: number;
  /** Told of every HTTP call: the operation, its transport result (http_2xx, http_4xx, http_5xx, timeout, network) and seconds taken. */
  onCall?: (operation: UpstreamOperation, result: string, seconds: number) => void;
}

export type UpstreamOperation = 'send_template' | 'create_template' | 'get_template' | 'list_templates' | 'upload_media' | 'get_phone_number' | 'download_media';

/** Network failures are usually over in a moment (restart, reset connection). */
const NETWORK_RETRY_MS = 1000;
const SERVER_ERROR_RETRY_MS = 5000;
const TEMPLATE_FIELDS = 'id,name,language,status,category,components,parameter_format,rejected_reason';
const MAX_TEMPLATE_PAGES = 50;

type HttpResult =
  | { kind: 'response'; status: number; body: unknown }
  | { kind: 'network'; reason: string }
  | { kind: 'timeout' };

type Graph = Record<string, unknown>;
type RequestBody = { contentType: string; bytes: string | Buffer };

export function createUpstreamClient(options: UpstreamClientOptions): UpstreamClient {
  const base = new URL(options.baseUrl.replace(/\/+$/, ''));
  const origin = base.origin;
  const basePath = base.pathname === '/' ? '' : base.pathname;
  // At Meta's ~100-300 ms latency, a number at the top tier (1,000 sends/s) keeps 100-300 requests
  // in flight; 256 connections carry that for one number with room for single sends beside it.
  const agent = new Agent({
    connections: options.connections ?? 256,
    pipelining: 1,
    keepAliveTimeout: 30_000,
    keepAliveMaxTimeout: 600_000,
    connect: { timeout: Math.min(options.timeoutMs, 10_000) },
  });

  async function call(operation: UpstreamOperation, method: 'GET' | 'POST', path: string, token: string, body?: RequestBody): Promise<HttpResult> {
    const started = performance.now();
    const result = await exchange(method, path, token, body);
    const label = result.kind === 'response' ? `http_${Math.floor(result.status / 100)}xx` : result.kind;
    options.onCall?.(operation, label, (performance.now() - started) / 1000);
    return result;
  }

  async function exchange(method: 'GET' | 'POST', path: string, token: string, body?: RequestBody): Promise<HttpResult> {
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => { timedOut = true; controller.abort(); }, options.timeoutMs);
    try {
      const headers: Record<string, string> = { authorization: `Bearer ${token}`, accept: 'application/json' };
      if (body) headers['content-type'] = body.contentType;
      const response = await request(origin + basePath + path, {
        method, headers, body: body?.bytes, dispatcher: agent, signal: controller.signal,
      });
      const text = await response.body.text();
      let parsed: unknown = null;
      try { parsed = text ? JSON.parse(text) : null; } catch { parsed = null; }
      return { kind: 'response', status: response.statusCode, body: parsed };
    } catch (err) {
      if (timedOut) return { kind: 'timeout' };
      const code = (err as { code?: string }).code;
      if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') return { kind: 'timeout' };
      // Refused connections never reached the upstream. A socket closed mid-request is treated
      // the same: it is nearly always a keep-alive race on an idle connection, and a send that
      // did get through is caught by biz_opaque_callback_data reconciliation.
      // Never the error object itself: undici errors can carry the request, and with it the token.
      return { kind: 'network', reason: code ?? (err as Error).name ?? 'network_error' };
    } finally {
      clearTimeout(timer);
    }
  }

  /** Turns a transport result into an outcome; `read` extracts the success value (null: unreadable). */
  function toOutcome<T>(result: HttpResult, read: (body: Graph) => T | null, attempt = 0): UpstreamOutcome<T> {
    if (result.kind === 'timeout') return { kind: 'timeout' };
    if (result.kind === 'network') return { kind: 'retryable', error: null, retryAfterMs: NETWORK_RETRY_MS, reason: `network: ${result.reason}` };
    const { status, body } = result;
    const graphError = isObject(body) && isObject(body.error) ? body.error : null;
    if (graphError) {
      const error = parseGraphError(status, graphError);
      if (error.errorClass === 'retryable') {
        return { kind: 'retryable', error, retryAfterMs: retryDelayMs(error.code, attempt), reason: `upstream error ${error.code}` };
      }
      return { kind: 'rejected', error };
    }
    if (status >= 200 && status < 300 && isObject(body)) {
      const value = read(body);
      if (value !== null) return { kind: 'accepted', value };
    }
    // No Graph error body: the status is all there is (a proxy or load balancer answered).
    if (status >= 500 || status === 429) {
      return { kind: 'retryable', error: null, retryAfterMs: SERVER_ERROR_RETRY_MS * 2 ** Math.min(attempt, 6), reason: `http ${status}` };
    }
    return {
      kind: 'rejected',
      error: {
        httpStatus: status, code: -1, subcode: null, fbtraceId: null, errorClass: 'fatal', details: null,
        title: status < 300 ? 'Unreadable upstream response' : `HTTP ${status} without an upstream error body (check UPSTREAM_BASE_URL)`,
      },
    };
  }

  const segment = (id: string) => '/' + encodeURIComponent(id);

  return {
    async sendTemplate(account: UpstreamAccount, req: SendTemplateRequest) {
      const payload: Graph = {
        messaging_product: 'whatsapp',
        recipient_type: 'individual',
        to: req.to,
        type: 'template',
        template: { name: req.templateName, language: { code: req.language, policy: 'deterministic' }, components: req.components },
      };
      if (req.callbackData !== undefined) payload.biz_opaque_callback_data = req.callbackData;
      const result = await call('send_template', 'POST', `${segment(account.phoneNumberId)}/messages`, account.accessToken, { contentType: 'application/json', bytes: JSON.stringify(payload) });
      return toOutcome<SendTemplateResult>(result, (body) => {
        const message = firstOf(body.messages);
        if (!message || typeof message.id !== 'string') return null;
        const contact = firstOf(body.contacts);
        return {
          messageId: message.id,
          waId: typeof contact?.wa_id === 'string' ? contact.wa_id : null,
          messageStatus: typeof message.message_status === 'string' ? message.message_status : null,
        };
      }, req.attempt ?? 0);
    },

    async createTemplate(account, req: CreateTemplateRequest) {
      const payload = { name: req.name, language: req.language, category: req.category, components: req.components };
      const result = await call('create_template', 'POST', `${segment(account.wabaId)}/message_templates`, account.accessToken, { contentType: 'application/json', bytes: JSON.stringify(payload) });
      return toOutcome(result, (body) => {
        if (body.id === undefined || body.id === null) return null;
        return { id: String(body.id), status: String(body.status ?? 'PENDING'), category: String(body.category ?? req.category) };
      });
    },

    async getTemplate(account, templateId) {
      const result = await call('get_template', 'GET', `${segment(templateId)}?fields=${TEMPLATE_FIELDS}`, account.accessToken);
      return toOutcome(result, readTemplate);
    },

    async listTemplates(account, filter = {}) {
      const templates: UpstreamTemplate[] = [];
      let after: string | null = null;
      for (let page = 0; page < MAX_TEMPLATE_PAGES; page++) {
        const query = new URLSearchParams({ fields: TEMPLATE_FIELDS, limit: '100' });
        if (filter.name) query.set('name', filter.name);
        if (filter.status) query.set('status', filter.status);
        if (after) query.set('after', after);
        // Pages are requested from our own base URL with the cursor, never by following
        // `paging.next`: the token must not go to whatever host a response names.
        const result = await call('list_templates', 'GET', `${segment(account.wabaId)}/message_templates?${query}`, account.accessToken);
        const outcome = toOutcome(result, (body) => (Array.isArray(body.data) ? body : null));
        if (outcome.kind !== 'accepted') return outcome;
        for (const item of outcome.value.data as unknown[]) {
          const template = isObject(item) ? readTemplate(item) : null;
          if (template) templates.push(template);
        }
        const paging = isObject(outcome.value.paging) ? outcome.value.paging : null;
        const cursors = paging && isObject(paging.cursors) ? paging.cursors : null;
        after = paging?.next && typeof cursors?.after === 'string' ? cursors.after : null;
        if (!after) break;
      }
      return { kind: 'accepted', value: templates };
    },

    async uploadMedia(account, file) {
      const form = multipartBody([
        { name: 'messaging_product', value: 'whatsapp' },
        { name: 'type', value: file.mimeType },
        { name: 'file', filename: file.filename, contentType: file.mimeType, bytes: file.bytes },
      ]);
      const result = await call('upload_media', 'POST', `${segment(account.phoneNumberId)}/media`, account.accessToken, form);
      return toOutcome(result, (body) => (body.id === undefined || body.id === null ? null : { id: String(body.id) }));
    },

    async getPhoneNumber(account) {
      const result = await call('get_phone_number', 'GET', `${segment(account.phoneNumberId)}?fields=display_phone_number,whatsapp_business_manager_messaging_limit`, account.accessToken);
      return toOutcome(result, (body) => ({
        displayPhoneNumber: typeof body.display_phone_number === 'string' ? body.display_phone_number : null,
        messagingLimitTier: typeof body.whatsapp_business_manager_messaging_limit === 'string' ? body.whatsapp_business_manager_messaging_limit : null,
      }));
    },

    async downloadMedia(account, mediaId) {
      const started = performance.now();
      const lookup = await call('download_media', 'GET', `${segment(mediaId)}?phone_number_id=${encodeURIComponent(account.phoneNumberId)}`, account.accessToken);
      const described = toOutcome(lookup, (body) => (typeof body.url === 'string' ? body : null));
      if (described.kind !== 'accepted') {
        // Graph answers an unknown (or expired) object id with 100/33.
        const gone = described.kind === 'rejected' && described.error.code === 100 && described.error.subcode === 33;
        return gone ? { kind: 'accepted', value: { gone: true } } : described;
      }
      const url = String(described.value.url);
      // The token goes with the download, so only to the upstream itself or Meta's media hosts.
      if (!mediaHostAllowed(url, origin)) {
        return { kind: 'rejected', error: { httpStatus: null, code: -1, subcode: null, fbtraceId: null, errorClass: 'fatal', details: null, title: `Refused to fetch media from ${new URL(url).host}` } };
      }
      const controller = new AbortController();
      const timer = setTimeout(() => controller.abort(), options.timeoutMs);
      try {
        const response = await request(url, {
          method: 'GET', headers: { authorization: `Bearer ${account.accessToken}` }, dispatcher: agent, signal: controller.signal,
          bodyTimeout: options.timeoutMs,
        });
        clearTimeout(timer);
        options.onCall?.('download_media', `http_${Math.floor(response.statusCode / 100)}xx`, (performance.now() - started) / 1000);
        if (response.statusCode === 404) { response.body.resume(); return { kind: 'accepted', value: { gone: true } }; }
        if (response.statusCode < 200 || response.statusCode >= 300) {
          response.body.resume();
          return { kind: 'retryable', error: null, retryAfterMs: SERVER_ERROR_RETRY_MS, reason: `media download http ${response.statusCode}` };
        }
        const length = Number(response.headers['content-length']);
        const mimeType = typeof described.value.mime_type === 'string' ? described.value.mime_type : String(response.headers['content-type'] ?? 'application/octet-stream');
        const value: MediaDownload = { body: response.body, mimeType, size: Number.isFinite(length) ? length : null };
        return { kind: 'accepted', value };
      } catch (err) {
        clearTimeout(timer);
        if (controller.signal.aborted) return { kind: 'timeout' };
        return { kind: 'retryable', error: null, retryAfterMs: NETWORK_RETRY_MS, reason: `network: ${(err as { code?: string }).code ?? 'network_error'}` };
      }
    },

    async close() {
      await agent.close();
    },
  };
}

/** Meta serves media from its CDN hosts (lookaside.fbsbx.com); a stand-in upstream serves it itself. */
const META_MEDIA_HOSTS = ['fbsbx.com', 'facebook.com', 'whatsapp.net', 'fbcdn.net'];
function mediaHostAllowed(url: string, upstreamOrigin: string): boolean {
  let parsed: URL;
  try { parsed = new URL(url); } catch { return false; }
  if (parsed.origin === upstreamOrigin) return true;
  return parsed.protocol === 'https:' && META_MEDIA_HOSTS.some((h) => parsed.hostname === h || parsed.hostname.endsWith(`.${h}`));
}

function isObject(value: unknown): value is Graph {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function firstOf(value: unknown): Graph | null {
  return Array.isArray(value) && isObject(value[0]) ? value[0] : null;
}

function numberOrNull(value: unknown): number | null {
  const n = typeof value === 'string' ? Number(value) : value;
  return typeof n === 'number' && Number.isFinite(n) ? n : null;
}

/** Meta's error object (reference §3); `error_data` may be an object or, on template APIs, a string. */
export function parseGraphError(httpStatus: number | null, error: Graph): UpstreamError {
  const code = numberOrNull(error.code) ?? -1;
  const message = typeof error.message === 'string' ? error.message : '';
  const titleFromMessage = message.replace(/^\(#\d+\)\s*/, '');
  const data = error.error_data;
  const details = isObject(data) && typeof data.details === 'string' ? data.details
    : typeof data === 'string' ? data
      : typeof error.error_user_msg === 'string' ? error.error_user_msg : null;
  return {
    httpStatus,
    code,
    subcode: numberOrNull(error.error_subcode),
    title: titleFromMessage || (typeof error.error_user_title === 'string' ? error.error_user_title : '') || lookupErrorCode(code)?.title || 'Unknown upstream error',
    details,
    fbtraceId: typeof error.fbtrace_id === 'string' ? error.fbtrace_id : null,
    errorClass: classifyErrorCode(code, error.is_transient === true),
  };
}

function readTemplate(body: Graph): UpstreamTemplate | null {
  if (body.id === undefined || typeof body.name !== 'string') return null;
  const reason = typeof body.rejected_reason === 'string' && body.rejected_reason !== 'NONE' ? body.rejected_reason : null;
  return {
    id: String(body.id),
    name: body.name,
    language: String(body.language ?? ''),
    status: String(body.status ?? ''),
    category: String(body.category ?? ''),
    components: Array.isArray(body.components) ? body.components : [],
    rejectedReason: reason,
  };
}

type Part = { name: string; value: string } | { name: string; filename: string; contentType: string; bytes: Buffer };

function multipartBody(parts: Part[]): { contentType: string; bytes: Buffer } {
  const boundary = `----upstream${randomBytes(12).toString('hex')}`;
  const chunks: Buffer[] = [];
  const quote = (s: string) => s.replace(/["\r\n\\]/g, '_');
  for (const part of parts) {
    if ('value' in part) {
      chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${part.name}"\r\n\r\n${quote(part.value)}\r\n`));
    } else {
      chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${part.name}"; filename="${quote(part.filename)}"\r\nContent-Type: ${quote(part.contentType)}\r\n\r\n`));
      chunks.push(part.bytes, Buffer.from('\r\n'));
    }
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { contentType: `multipart/form-data; boundary=${boundary}`, bytes: Buffer.concat(chunks) };
}
