import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { createSandbox, type Sandbox, type SandboxOptions } from '../../src/sandbox/sandbox.ts';
import { withExamples } from '../helpers/template-examples.ts';

export const APP_SECRET = 'sandbox-test-secret';
export const TOKEN = 'test-token';

/** One callback POST as the receiver got it. */
export interface ReceivedCallback {
  raw: string;
  body: any;
  signatureValid: boolean;
}

/** A small HTTP receiver standing in for the service's /upstream/webhook. */
export interface CallbackReceiver {
  url: string;
  received: ReceivedCallback[];
  /** Every status object received, flattened out of the envelopes. */
  statuses(): any[];
  /** Answer this HTTP status to the next `count` callbacks (to exercise the sandbox's retries). */
  failNext(count: number, status?: number): void;
  close(): Promise<void>;
}

export async function startReceiver(appSecret = APP_SECRET): Promise<CallbackReceiver> {
  const received: ReceivedCallback[] = [];
  let failures = 0;
  let failStatus = 500;
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (failures > 0) {
        failures--;
        res.writeHead(failStatus).end();
        return;
      }
      const raw = Buffer.concat(chunks);
      const expected = Buffer.from('sha256=' + createHmac('sha256', appSecret).update(raw).digest('hex'));
      const given = Buffer.from(String(req.headers['x-hub-signature-256'] ?? ''));
      received.push({ raw: raw.toString('utf8'), body: JSON.parse(raw.toString('utf8')), signatureValid: given.length === expected.length && timingSafeEqual(given, expected) });
      res.writeHead(200).end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/upstream/webhook`,
    received,
    statuses: () => received.flatMap((r) => r.body.entry.flatMap((e: any) => e.changes.flatMap((c: any) => c.value.statuses ?? []))),
    failNext(count, status = 500) { failures = count; failStatus = status; },
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}

export async function startTestSandbox(options: Partial<SandboxOptions> = {}): Promise<Sandbox> {
  return createSandbox({ port: 0, appSecret: APP_SECRET, reviewMs: 20, statusFlushMs: 10, callbackRetryDelaysMs: [20, 50], ...options });
}

export interface HttpReply { status: number; body: any }

export async function http(method: string, url: string, body?: unknown, headers: Record<string, string> = { authorization: `Bearer ${TOKEN}` }): Promise<HttpReply> {
  const res = await request(url, {
    method: method as 'GET',
    headers: body === undefined ? headers : { ...headers, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.body.text();
  return { status: res.statusCode, body: text ? JSON.parse(text) : null };
}

export const uniqueName = (prefix = 'tpl') => `${prefix}_${randomBytes(4).toString('hex')}`;
export const uniqueId = () => String(100_000_000_000 + Math.floor(Math.random() * 800_000_000_000));
let phoneCounter = Math.floor(Math.random() * 1_000_000);
export const uniquePhone = () => `+1415${String(2_000_000 + (phoneCounter++ % 7_000_000)).padStart(7, '0')}`;

/** Creates a template on a WABA (with sample values added where missing) and forces it APPROVED through the control API. */
export async function approvedTemplate(sandbox: Sandbox, wabaId: string, components: unknown[] = [{ type: 'BODY', text: 'Hello {{1}}, order {{2}} shipped.' }], name = uniqueName(), category = 'UTILITY'): Promise<{ id: string; name: string }> {
  const created = await http('POST', `${sandbox.baseUrl}/${wabaId}/message_templates`, { name, language: 'en_US', category, components: withExamples(components) });
  if (created.status !== 200) throw new Error(`template create failed: ${JSON.stringify(created.body)}`);
  await http('POST', `${sandbox.url}/__sandbox/templates/review`, { name, language: 'en_US', status: 'APPROVED' });
  return { id: created.body.id, name };
}

export function templateSend(to: string, name: string, bodyParams: string[] = ['Ada', 'A-1'], extra: Record<string, unknown> = {}) {
  return {
    messaging_product: 'whatsapp', to, type: 'template',
    template: { name, language: { code: 'en_US' }, components: [{ type: 'body', parameters: bodyParams.map((text) => ({ type: 'text', text })) }] },
    ...extra,
  };
}

export interface UploadOptions {
  /** The file part's Content-Type; null leaves the header out. */
  contentType?: string | null;
  filename?: string;
  /** Form fields sent before the file (messaging_product, type). */
  fields?: Record<string, string>;
  /** Query string fields (as whatsapp-api-js sends messaging_product). */
  query?: Record<string, string>;
}

/** POST /{phone}/media as a multipart form, the way Graph clients send it. */
export async function uploadMedia(sandbox: Sandbox, phoneId: string, bytes: Buffer, options: UploadOptions = {}): Promise<HttpReply> {
  const boundary = `----sandboxtest${randomBytes(6).toString('hex')}`;
  const fields = options.fields ?? { messaging_product: 'whatsapp', type: options.contentType ?? 'image/png' };
  const parts: Buffer[] = Object.entries(fields).map(([name, value]) => Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`));
  const type = options.contentType === undefined ? 'image/png' : options.contentType;
  parts.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${options.filename ?? 'file.png'}"\r\n${type === null ? '' : `Content-Type: ${type}\r\n`}\r\n`), bytes, Buffer.from(`\r\n--${boundary}--\r\n`));
  const query = options.query ? `?${new URLSearchParams(options.query)}` : '';
  const res = await request(`${sandbox.baseUrl}/${phoneId}/media${query}`, {
    method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': `multipart/form-data; boundary=${boundary}` }, body: Buffer.concat(parts),
  });
  const text = await res.body.text();
  return { status: res.statusCode, body: text ? JSON.parse(text) : null };
}

export const PNG_BYTES = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), Buffer.alloc(64, 1)]);
export const PDF_BYTES = Buffer.from('%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n');
