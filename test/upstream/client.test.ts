import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { eventually } from '../helpers/app.ts';
import type { Sandbox } from '../../src/sandbox/sandbox.ts';
import { createUpstreamClient } from '../../src/upstream/client.ts';
import type { UpstreamAccount, UpstreamClient } from '../../src/upstream/types.ts';
import { http, startTestSandbox, uniqueId, uniqueName, uniquePhone } from '../sandbox/helpers.ts';

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe('upstream client against the sandbox', () => {
  let sandbox: Sandbox;
  let client: UpstreamClient;
  const account: UpstreamAccount = { wabaId: uniqueId(), phoneNumberId: uniqueId(), accessToken: 'secret-token-xyz' };
  let templateName: string;

  beforeAll(async () => {
    sandbox = await startTestSandbox({ reviewMs: 10, callbacks: false });
    client = createUpstreamClient({ baseUrl: sandbox.baseUrl, timeoutMs: 2000, connections: 8 });
    await http('POST', `${sandbox.url}/__sandbox/phone_numbers`, { phone_number_id: account.phoneNumberId, waba_id: account.wabaId });
    templateName = uniqueName('client');
    const created = await client.createTemplate(account, { name: templateName, language: 'en_US', category: 'UTILITY', components: [{ type: 'BODY', text: 'Hi {{1}}, welcome.', example: { body_text: [['Ana']] } }] });
    expect(created.kind).toBe('accepted');
    await eventually(async () => {
      const got = await client.getTemplate(account, created.kind === 'accepted' ? created.value.id : '');
      return got.kind === 'accepted' && got.value.status === 'APPROVED';
    });
  });
  afterAll(async () => {
    await client.close();
    await sandbox.close();
  });
  beforeEach(async () => {
    await http('POST', `${sandbox.url}/__sandbox/reset`);
    await http('PUT', `${sandbox.url}/__sandbox/config`, { callbacks: false });
  });

  const body = (text = 'Ada') => [{ type: 'body' as const, parameters: [{ type: 'text', text }] }];

  it('sends a template and returns accepted with the message id and wa_id, echoing the callback data to the upstream', async () => {
    const to = uniquePhone();
    const outcome = await client.sendTemplate(account, { to, templateName, language: 'en_US', components: body(), callbackData: 'rcpt-1' });
    expect(outcome).toEqual({ kind: 'accepted', value: { messageId: expect.stringMatching(/^wamid\./), waId: to.slice(1), messageStatus: null } });
    const log = await http('GET', `${sandbox.url}/__sandbox/sends?to=${encodeURIComponent(to)}`);
    expect(log.body.data[0]).toMatchObject({ biz_opaque_callback_data: 'rcpt-1', template: templateName, language: 'en_US' });
  });

  it('returns rejected with the code, title, details, trace id and class', async () => {
    const outcome = await client.sendTemplate(account, { to: uniquePhone(), templateName, language: 'en_US', components: [] });
    expect(outcome.kind).toBe('rejected');
    if (outcome.kind !== 'rejected') return;
    expect(outcome.error).toMatchObject({
      httpStatus: 400, code: 132000, title: 'Number of parameters does not match the expected number of params',
      details: expect.stringContaining('body'), fbtraceId: expect.any(String), errorClass: 'bad_request', subcode: null,
    });

    const unknown = await client.sendTemplate(account, { to: uniquePhone(), templateName: 'nope', language: 'en_US', components: [] });
    expect(unknown.kind === 'rejected' && unknown.error.errorClass).toBe('fatal');

    const to = uniquePhone();
    await http('POST', `${sandbox.url}/__sandbox/recipients`, { to, outcome: 'reject', error_code: 131026 });
    const recipient = await client.sendTemplate(account, { to, templateName, language: 'en_US', components: body() });
    expect(recipient.kind === 'rejected' && recipient.error.errorClass).toBe('recipient');
  });

  it('returns rejected fatal (190) for an empty token', async () => {
    const outcome = await client.sendTemplate({ ...account, accessToken: '' }, { to: uniquePhone(), templateName, language: 'en_US', components: body() });
    expect(outcome.kind === 'rejected' && outcome.error).toMatchObject({ code: 190, httpStatus: 401, errorClass: 'fatal' });
  });

  it('returns retryable with a suggested delay on 130429, growing with the attempt', async () => {
    await http('PUT', `${sandbox.url}/__sandbox/config`, { mps_limit: 1 });
    let outcome = await client.sendTemplate(account, { to: uniquePhone(), templateName, language: 'en_US', components: body() });
    for (let i = 0; i < 3 && outcome.kind === 'accepted'; i++) {
      outcome = await client.sendTemplate(account, { to: uniquePhone(), templateName, language: 'en_US', components: body(), attempt: 2 });
    }
    expect(outcome.kind).toBe('retryable');
    if (outcome.kind !== 'retryable') return;
    expect(outcome.error).toMatchObject({ code: 130429, subcode: 2494055, errorClass: 'retryable' });
    expect(outcome.retryAfterMs).toBe(4000);
  });

  it('returns timeout when the upstream answers slower than the client timeout', async () => {
    const impatient = createUpstreamClient({ baseUrl: sandbox.baseUrl, timeoutMs: 100 });
    try {
      await http('PUT', `${sandbox.url}/__sandbox/config`, { latency_ms: 400 });
      const started = Date.now();
      const outcome = await impatient.sendTemplate(account, { to: uniquePhone(), templateName, language: 'en_US', components: body() });
      expect(outcome).toEqual({ kind: 'timeout' });
      expect(Date.now() - started).toBeLessThan(350);
    } finally {
      await impatient.close();
    }
  });

  it('returns retryable for a network error (nothing listening)', async () => {
    const server = createServer();
    const url = await listen(server);
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const dead = createUpstreamClient({ baseUrl: `${url}/v21.0`, timeoutMs: 1000 });
    try {
      const outcome = await dead.sendTemplate(account, { to: uniquePhone(), templateName, language: 'en_US', components: body() });
      expect(outcome).toMatchObject({ kind: 'retryable', error: null, reason: expect.stringContaining('ECONNREFUSED') });
    } finally {
      await dead.close();
    }
  });

  it('returns retryable for a 5xx without a Graph body, and classifies a 5xx with one by its code', async () => {
    let graphBody = false;
    const server = createServer((req, res) => {
      req.resume();
      if (graphBody) res.writeHead(503, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: '(#131016) Service unavailable', code: 131016, fbtrace_id: 'T1' } }));
      else res.writeHead(500, { 'content-type': 'text/html' }).end('<html>oops</html>');
    });
    const url = await listen(server);
    const broken = createUpstreamClient({ baseUrl: `${url}/v21.0`, timeoutMs: 1000 });
    try {
      const plain = await broken.sendTemplate(account, { to: uniquePhone(), templateName, language: 'en_US', components: body() });
      expect(plain).toMatchObject({ kind: 'retryable', error: null, reason: 'http 500', retryAfterMs: expect.any(Number) });
      graphBody = true;
      const graph = await broken.sendTemplate(account, { to: uniquePhone(), templateName, language: 'en_US', components: body() });
      expect(graph).toMatchObject({ kind: 'retryable', error: { code: 131016, httpStatus: 503, fbtraceId: 'T1' } });
    } finally {
      await broken.close();
      await new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); });
    }
  });

  it('rejects a non-Graph 4xx (wrong base URL) as fatal instead of retrying forever', async () => {
    const server = createServer((req, res) => { req.resume(); res.writeHead(404).end('not found'); });
    const url = await listen(server);
    const wrong = createUpstreamClient({ baseUrl: `${url}/v21.0`, timeoutMs: 1000 });
    try {
      const outcome = await wrong.getTemplate(account, '1');
      expect(outcome.kind === 'rejected' && outcome.error).toMatchObject({ httpStatus: 404, errorClass: 'fatal' });
    } finally {
      await wrong.close();
      await new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); });
    }
  });

  it('creates, reads and lists templates, following pages by cursor', async () => {
    const names = [uniqueName('page'), uniqueName('page'), uniqueName('page')];
    const paged = { ...account, wabaId: uniqueId() };
    for (const name of names) {
      const created = await client.createTemplate(paged, { name, language: 'pt_BR', category: 'MARKETING', components: [{ type: 'BODY', text: 'Oi' }] });
      expect(created).toEqual({ kind: 'accepted', value: { id: expect.stringMatching(/^\d+$/), status: 'PENDING', category: 'MARKETING' } });
    }
    const duplicate = await client.createTemplate(paged, { name: names[0], language: 'pt_BR', category: 'MARKETING', components: [{ type: 'BODY', text: 'Oi' }] });
    expect(duplicate.kind === 'rejected' && duplicate.error).toMatchObject({ code: 100, subcode: 2388024, errorClass: 'bad_request' });

    // 150 templates make the sandbox page (limit 100), so the client must follow the cursor.
    for (let i = 0; i < 150; i++) await client.createTemplate(paged, { name: `bulk_${i}`, language: 'en', category: 'UTILITY', components: [{ type: 'BODY', text: 'x' }] });
    const all = await client.listTemplates(paged);
    expect(all.kind === 'accepted' && all.value.length).toBe(153);
    const one = await client.listTemplates(paged, { name: names[1] });
    expect(one.kind === 'accepted' && one.value.map((t) => t.name)).toEqual([names[1]]);
    expect(one.kind === 'accepted' && one.value[0]).toMatchObject({ language: 'pt_BR', category: 'MARKETING', rejectedReason: null, components: [{ type: 'BODY', text: 'Oi' }] });

    await http('POST', `${sandbox.url}/__sandbox/templates/review`, { name: names[2], language: 'pt_BR', status: 'REJECTED', reason: 'SCAM' });
    const rejected = await client.listTemplates(paged, { status: 'REJECTED' });
    expect(rejected.kind === 'accepted' && rejected.value.map((t) => [t.name, t.rejectedReason])).toEqual([[names[2], 'SCAM']]);
  });

  it('uploads media as multipart and gets an id', async () => {
    const outcome = await client.uploadMedia(account, { bytes: Buffer.from('%PDF-1.4 test'), mimeType: 'application/pdf', filename: 'invoice "1".pdf' });
    expect(outcome).toEqual({ kind: 'accepted', value: { id: expect.stringMatching(/^\d+$/) } });
    const id = outcome.kind === 'accepted' ? outcome.value.id : '';
    expect(sandbox.state.media.get(id)).toMatchObject({ mimeType: 'application/pdf', size: 13, phoneNumberId: account.phoneNumberId });
  });

  it('never puts the token into an outcome', async () => {
    const server = createServer();
    const url = await listen(server);
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const dead = createUpstreamClient({ baseUrl: `${url}/v21.0`, timeoutMs: 500 });
    try {
      const outcomes = [
        await dead.sendTemplate(account, { to: uniquePhone(), templateName, language: 'en_US', components: body() }),
        await client.sendTemplate(account, { to: uniquePhone(), templateName: 'nope', language: 'en_US', components: [] }),
      ];
      expect(JSON.stringify(outcomes)).not.toContain(account.accessToken);
    } finally {
      await dead.close();
    }
  });
});
