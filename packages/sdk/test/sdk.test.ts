/**
 * The SDK against the real service listening on a port (real PostgreSQL, and Redis when configured),
 * through a recording HTTP proxy that shows what went on the wire.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWebhookDeliverer } from '../../../src/worker.ts';
import { startLoops, type RunningLoops } from '../../../src/workers/loop.ts';
import { API, createTenant, eventually, hasPostgres, makeTempDir, removeTempDir, startTestApp, uniquePhone, type TestApp, type TestTenant } from '../../../test/helpers/app.ts';
import { awayFromMinuteEdge } from '../../../test/helpers/expect.ts';
import { startReceiver, type Receiver } from '../../../test/helpers/https-receiver.ts';
import { createOwnDatabase } from '../../../test/helpers/own-database.ts';
import { createApprovedTemplate, createConnectedTenant, sandboxControl, startUpstreamApp, uniqueTemplateName, type UpstreamTestApp } from '../../../test/helpers/upstream.ts';
import { ApiError, constructEvent, MessagingClient, verifyWebhookSignature, WebhookSignatureError, type ClientOptions, type EventOf, type WebhookEvent } from '../src/index.ts';
import { startRecordingProxy, type RecordingProxy } from './proxy.ts';

const PNG = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), Buffer.alloc(200, 7)]);
const PDF = Buffer.from('%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n');
const bodyParams = (...values: string[]) => [{ type: 'body' as const, parameters: values.map((text) => ({ type: 'text' as const, text })) }];

// Each test makes its own tenant and proxy, so they run side by side: the 429 test waits for a
// minute window to end while the others run.
describe.skipIf(!hasPostgres)('the SDK against the running service', { concurrent: true }, () => {
  let own: Awaited<ReturnType<typeof createOwnDatabase>>;
  let t: UpstreamTestApp;
  let limited: TestApp; // RATE_LIMIT_PER_MINUTE=5
  let limitedUrl: string;
  let receiver: Receiver;
  let deliverer: RunningLoops;
  let dir: string;
  const proxies: RecordingProxy[] = [];

  beforeAll(async () => {
    dir = makeTempDir('sdk-test-');
    receiver = await startReceiver();
    // This file runs a webhook deliverer, which serves every tenant of its database: its own database.
    own = await createOwnDatabase('sdk_test');
    t = await startUpstreamApp({
      DATABASE_URL: own.url,
      WEBHOOK_DELIVERY_ENABLED: 'true', WEBHOOK_EXTRA_CA_FILE: receiver.caFile, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      WEBHOOK_RETRY_DELAYS_MS: '50,50,50,50,50', WEBHOOK_POLL_MS: '20',
    });
    deliverer = startLoops([createWebhookDeliverer(t.deps).loop()], 20, pino({ level: 'silent' }));
    limited = await startTestApp({ RATE_LIMIT_PER_MINUTE: '5' });
    await limited.app.listen({ port: 0, host: '127.0.0.1' });
    limitedUrl = `http://127.0.0.1:${(limited.app.server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await deliverer?.stop();
    await Promise.all(proxies.map((p) => p.close()));
    await t?.close();
    await limited?.close();
    await receiver?.close();
    await own?.drop();
    removeTempDir(dir);
  });

  /** A client for `tenant` whose requests go through a fresh recording proxy to `target`. */
  async function clientFor(tenant: TestTenant, options: Partial<ClientOptions> = {}, target = t.url) {
    const proxy = await startRecordingProxy(target);
    proxies.push(proxy);
    const client = new MessagingClient({ baseUrl: `${proxy.url}${API}`, apiKey: tenant.key, retry: { baseDelayMs: 20 }, ...options });
    return { client, proxy, calls: (method: string, path: string) => proxy.exchanges.filter((e) => e.method === method && e.path.split('?')[0] === `${API}${path}`) };
  }

  it('creates, reads, updates and deletes contacts; the iterator walks every page; sub-resources work', async () => {
    const tenant = await createTenant(t.app);
    const { client, calls } = await clientFor(tenant);
    const contact = await client.contacts.create({ first_name: 'Ada', phone: uniquePhone(), tags: ['sdk'] });
    expect(contact).toMatchObject({ id: expect.any(String), first_name: 'Ada', tags: ['sdk'] });
    expect((await client.contacts.get(contact.id)).first_name).toBe('Ada');
    expect((await client.contacts.update(contact.id, { last_name: 'Lovelace' })).last_name).toBe('Lovelace');

    const bulk = await client.contacts.bulkCreate(Array.from({ length: 24 }, (_, i) => ({ first_name: `Bulk ${i}`, phone: uniquePhone(), tags: i % 2 ? ['odd'] : [] })));
    expect(bulk).toMatchObject({ total: 24, created: 24, failed: 0 });

    const everyone: string[] = [];
    for await (const c of client.contacts.iterate({ limit: 10 })) everyone.push(c.id);
    expect(everyone).toHaveLength(25);
    expect(new Set(everyone).size).toBe(25);
    expect(calls('GET', '/contacts').map((e) => new URL(e.path, 'http://x').searchParams.get('page'))).toEqual(['1', '2', '3']);
    const odd: string[] = [];
    for await (const c of client.contacts.iterateSearch({ tag: 'odd' }, { limit: 5 })) odd.push(c.first_name);
    expect(odd).toHaveLength(12);

    const note = await client.contacts.notes.create(contact.id, { content: 'Met at the fair' });
    expect((await client.contacts.notes.list(contact.id)).data.map((n) => n.id)).toEqual([note.id]);
    const followup = await client.contacts.followups.create(contact.id, { title: 'Call back', due_at: new Date(Date.now() + 86_400_000).toISOString() });
    expect((await client.contacts.followups.update(contact.id, followup.id, { done: true })).done).toBe(true);
    const followups = [];
    for await (const f of client.contacts.followups.iterate(contact.id)) followups.push(f);
    expect(followups.map((f) => f.id)).toEqual([followup.id]);
    await client.contacts.followups.delete(contact.id, followup.id);
    expect((await client.contacts.communications.list(contact.id)).data).toEqual(expect.any(Array));

    expect((await client.contacts.delete(contact.id)).message).toEqual(expect.any(String));
    await expect(client.contacts.get(contact.id)).rejects.toMatchObject({ status: 404, code: 'NOT_FOUND' });
  });

  it('errors are ApiError with status, code, message, details and requestId, and a 4xx is never retried', async () => {
    const tenant = await createTenant(t.app);
    const { client, calls } = await clientFor(tenant, { retry: { maxRetries: 3, baseDelayMs: 1 } });

    const invalid = await client.contacts.create({ first_name: '', phone: 'not a phone' }).catch((e: unknown) => e);
    expect(invalid).toBeInstanceOf(ApiError);
    const error = invalid as ApiError;
    expect(error).toMatchObject({ name: 'ApiError', status: 400, code: 'VALIDATION_ERROR', message: expect.any(String) });
    expect(error.details.length).toBeGreaterThan(0);
    expect(error.details[0]).toMatchObject({ type: expect.any(String), loc: expect.arrayContaining(['body']), msg: expect.any(String) });
    expect(error.requestId).toMatch(/^req_[0-9a-f]{12}$/);

    const phone = uniquePhone();
    await client.contacts.create({ first_name: 'First', phone });
    await expect(client.contacts.create({ first_name: 'Again', phone })).rejects.toMatchObject({ status: 409, code: 'CONFLICT' });
    await expect(client.contacts.get('00000000-0000-4000-8000-000000000000')).rejects.toMatchObject({ status: 404, code: 'NOT_FOUND' });
    // One request each: 400, 201, 409 on POST; 404 on GET.
    expect(calls('POST', '/contacts').map((e) => e.status)).toEqual([400, 201, 409]);
    expect(calls('GET', '/contacts/00000000-0000-4000-8000-000000000000').map((e) => e.status)).toEqual([404]);

    const stranger = new MessagingClient({ baseUrl: `${t.url}${API}`, apiKey: 'svc_sk_test_' + '0'.repeat(40) });
    await expect(stranger.contacts.list()).rejects.toMatchObject({ status: 401, code: 'AUTHENTICATION_REQUIRED', message: 'Invalid or revoked API key' });
    const readOnly = await createTenant(t.app, { scopes: ['contacts:read'] });
    const denied = await new MessagingClient({ baseUrl: `${t.url}${API}`, apiKey: readOnly.key }).webhooks.list().catch((e: ApiError) => e);
    expect(denied).toMatchObject({ status: 403, code: 'FORBIDDEN', extra: { required_permissions: ['webhooks:read'] } });
  });

  it('a 409 with Retry-After (the key\'s first request still running) is retried after it and gets that request\'s answer; within maxDelayMs only', async () => {
    const tenant = await createTenant(t.app);
    const { client, calls } = await clientFor(tenant, { retry: { maxRetries: 3, baseDelayMs: 1 } });
    const { client: impatient } = await clientFor(tenant, { retry: { maxRetries: 3, maxDelayMs: 500 } });
    const key = `sdk-running-${uniquePhone()}`;
    const phone = uniquePhone();
    // Hold the first request inside its INSERT: an uncommitted row with the same phone blocks it on the unique index.
    let release!: () => void;
    const held = new Promise<void>((r) => { release = r; });
    let locked!: () => void;
    const lockTaken = new Promise<void>((r) => { locked = r; });
    const lock = t.deps.db.transaction().execute(async (tx) => {
      await tx.insertInto('contacts').values({ id: crypto.randomUUID(), tenant_id: tenant.id, first_name: 'Lock', phone } as never).execute();
      locked();
      await held;
      throw new Error('roll back the lock');
    }).catch(() => undefined);
    await lockTaken;
    const first = impatient.contacts.create({ first_name: 'Held', phone }, { idempotencyKey: key });
    await eventually(async () => (await t.deps.db.selectFrom('idempotency_keys').select('state').where('tenant_id', '=', tenant.id).where('key', '=', key).executeTakeFirst())?.state === 'running');

    // Retry-After (1 s) is longer than this client's maxDelayMs: the 409 comes back at once.
    await expect(impatient.contacts.create({ first_name: 'Held', phone }, { idempotencyKey: key }))
      .rejects.toMatchObject({ status: 409, code: 'CONFLICT', message: 'A request with this Idempotency-Key is still being processed' });
    const waiting = client.contacts.create({ first_name: 'Held', phone }, { idempotencyKey: key }).catch((e: unknown) => e);
    await eventually(async () => calls('POST', '/contacts').length > 0);
    release();
    await lock;
    const [created, replayed] = await Promise.all([first, waiting]);
    expect(replayed).toEqual(created);
    const posts = calls('POST', '/contacts');
    expect(posts.map((e) => e.status)).toEqual([409, 201]);
    expect(posts[1].at - posts[0].at).toBeGreaterThanOrEqual(950);
    expect(new Set(posts.map((e) => e.headers['idempotency-key']))).toEqual(new Set([key]));
  });

  it('a response lost on the network is retried with the same Idempotency-Key and makes one contact', async () => {
    const tenant = await createTenant(t.app);
    const { client, proxy, calls } = await clientFor(tenant);
    const phone = uniquePhone();
    proxy.loseNextResponses(1);
    const contact = await client.contacts.create({ first_name: 'Once', phone });

    const posts = calls('POST', '/contacts');
    expect(posts.map((e) => [e.status, e.cut])).toEqual([[201, true], [201, false]]);
    const key = posts[0].headers['idempotency-key'];
    expect(key).toMatch(/^[0-9a-f-]{36}$/);
    expect(posts[1].headers['idempotency-key']).toBe(key);
    const found = [];
    for await (const c of client.contacts.iterate({ search: 'Once' })) found.push(c);
    expect(found.map((c) => [c.id, c.phone])).toEqual([[contact.id, phone]]);

    // A key the caller gives is sent as it is; every other creating POST gets a key of its own.
    await client.contacts.create({ first_name: 'Given', phone: uniquePhone() }, { idempotencyKey: 'my-key-1' });
    await client.contacts.create({ first_name: 'Other', phone: uniquePhone() });
    const keys = calls('POST', '/contacts').map((e) => e.headers['idempotency-key']);
    expect(keys[2]).toBe('my-key-1');
    expect(new Set(keys).size).toBe(3);
    // A search (a POST that creates nothing) carries none.
    await client.contacts.search({ search_term: 'Once' });
    expect(calls('POST', '/contacts/search')[0].headers['idempotency-key']).toBeUndefined();
  });

  it('a 5xx is retried with jittered backoff, the same key each time, and gives up after maxRetries', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const { client, calls } = await clientFor(tenant, { retry: { maxRetries: 2, baseDelayMs: 50 } });
    const rejected = uniquePhone();
    await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: rejected, outcome: 'reject', error_code: 131000 });
    const started = Date.now();
    const error = await client.messages.sendTemplate({ to: rejected, template_name: template.template_name, components: bodyParams('a', 'b') }).catch((e: ApiError) => e);
    expect(error).toMatchObject({ status: 502, code: 'UPSTREAM_ERROR' });
    const sends = calls('POST', '/messages/template');
    expect(sends.map((e) => e.status)).toEqual([502, 502, 502]);
    expect(new Set(sends.map((e) => e.headers['idempotency-key'])).size).toBe(1);
    // Backoff: between half and all of 50 ms, then of 100 ms.
    expect(sends[1].at - sends[0].at).toBeGreaterThanOrEqual(20);
    expect(sends[2].at - sends[1].at).toBeGreaterThanOrEqual(45);
    expect(Date.now() - started).toBeLessThan(5_000);

    const sent = await client.messages.sendTemplate({ to: uniquePhone(), template_name: template.template_name, components: bodyParams('Ada', 'A-1') });
    expect(sent).toMatchObject({ message_id: expect.any(String), status: 'accepted' });
    const messages = [];
    for await (const m of client.messages.iterate({ to: sent.to })) messages.push(m);
    expect(messages.map((m) => m.message_id)).toEqual([sent.message_id]);
    const got = await client.messages.get(messages[0].id);
    // Sent and received messages share the endpoint; `direction` tells them apart.
    expect(got.direction === 'outbound' && got.template_name).toBe(template.template_name);
  });

  it('uploads media from a path, a Buffer and a stream', async () => {
    const tenant = await createTenant(t.app);
    const { client } = await clientFor(tenant);
    const file = join(dir, 'logo.png');
    writeFileSync(file, PNG);
    const fromPath = await client.media.upload({ file });
    expect(fromPath).toMatchObject({ filename: 'logo.png', mime_type: 'image/png', size_bytes: PNG.length });
    const fromBuffer = await client.media.upload({ file: PDF, filename: 'terms.pdf' });
    expect(fromBuffer).toMatchObject({ filename: 'terms.pdf', mime_type: 'application/pdf', size_bytes: PDF.length });
    const fromStream = await client.media.upload({ file: Readable.from([PNG.subarray(0, 100), PNG.subarray(100)]), filename: 'streamed.png' });
    expect(fromStream).toMatchObject({ filename: 'streamed.png', size_bytes: PNG.length, sha256: fromPath.sha256 });

    const all = [];
    for await (const m of client.media.iterate({ limit: 2 })) all.push(m.id);
    expect(all.sort()).toEqual([fromPath.id, fromBuffer.id, fromStream.id].sort());
    expect((await client.media.get(fromBuffer.id)).filename).toBe('terms.pdf');
    await client.media.delete(fromBuffer.id);
    await expect(client.media.get(fromBuffer.id)).rejects.toMatchObject({ status: 404 });
    await expect(client.media.upload({ file: PNG })).rejects.toThrow(/filename/);
  });

  it('templates and campaigns', async () => {
    const tenant = await createConnectedTenant(t.app);
    const { client } = await clientFor(tenant);
    const created = await client.templates.create({
      template_name: uniqueTemplateName('sdk'), language: 'en', category: 'UTILITY',
      components: [{ type: 'BODY', text: 'Hello {{1}}, your order {{2}} has shipped.', example: { body_text: [['Ana', 'A-1001']] } }],
    });
    expect(created.status).toBe('draft');
    expect((await client.templates.submit(created.id)).status).toBe('pending');
    const approved = await eventually(() => client.templates.get(created.id).catch(() => null), 20_000);
    const listed = [];
    for await (const tpl of client.templates.iterate()) listed.push(tpl.id);
    expect(listed).toEqual([approved.id]);

    await client.contacts.create({ first_name: 'Vip', phone: uniquePhone(), tags: ['vip'] });
    const campaign = await client.campaigns.create({
      name: 'SDK campaign', template_id: approved.id, audience: { groups: ['vip'] },
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'A-1' }] }] },
    });
    expect(campaign.status).toBe('DRAFT');
    expect((await client.campaigns.list()).data.map((c) => c.id)).toEqual([campaign.id]);
    expect((await client.campaigns.previewAudience(campaign.id)).total).toBe(1);
    expect((await client.campaigns.fieldCoverage(campaign.id, { fields: ['first_name', 'email'] })).coverage).toMatchObject({ first_name: { present: 1 }, email: { missing: 1 } });
    expect((await client.campaigns.preview(campaign.id)).resolved_components[0].text).toBe('Hello Vip, your order A-1 has shipped.');
    expect((await client.campaigns.setAudience(campaign.id, { groups: ['vip', 'new'] })).audiences).toHaveLength(2);
    expect((await client.campaigns.get(campaign.id)).status).toBe('DRAFT');
    expect((await client.campaigns.errors(campaign.id)).total_failed).toBe(0);
    await expect(client.campaigns.pause(campaign.id)).rejects.toMatchObject({ status: 400, code: 'VALIDATION_ERROR' });
  });

  it('a real signed delivery is verified and typed by constructEvent; deliveries are listed', async () => {
    const tenant = await createTenant(t.app);
    const { client } = await clientFor(tenant);
    const path = '/sdk-hook';
    const { data: endpoint, signing_secret } = await client.webhooks.create({ url: receiver.url(path), events: ['contact.created', 'webhook.test'] });
    const contact = await client.contacts.create({ first_name: 'Hooked', phone: uniquePhone() });

    const [delivery] = await eventually(async () => receiver.at(path).length > 0 && receiver.at(path));
    expect(verifyWebhookSignature(delivery.body, delivery.headers, signing_secret)).toBe(true);
    const event: WebhookEvent = constructEvent(delivery.body, delivery.headers, signing_secret);
    expect(event.type).toBe('contact.created');
    if (event.type !== 'contact.created') throw new Error('unexpected event');
    // Narrowed by `type`: data is a Contact.
    const phone: string = event.data.phone;
    expect([event.data.id, phone]).toEqual([contact.id, contact.phone]);
    // @ts-expect-error a contact event has no message_id
    expect(event.data.message_id).toBeUndefined();

    // Tampering, a wrong secret and an old timestamp are refused.
    expect(() => constructEvent(delivery.body.replace('Hooked', 'Hacked'), delivery.headers, signing_secret)).toThrow(WebhookSignatureError);
    expect(verifyWebhookSignature(delivery.body, delivery.headers, `${signing_secret}x`)).toBe(false);
    expect(verifyWebhookSignature(delivery.body, delivery.headers, signing_secret, { now: Date.now() + 301_000 })).toBe(false);
    expect(verifyWebhookSignature(delivery.body, delivery.headers, signing_secret, { now: Date.now() + 301_000, toleranceSeconds: 600 })).toBe(true);

    const test = await client.webhooks.test(endpoint.id);
    expect(test).toMatchObject({ delivered: true, status_code: 200 });
    const testEvent = constructEvent(receiver.at(path)[1].body, new Headers(receiver.at(path)[1].headers as Record<string, string>), signing_secret);
    expect(testEvent.type).toBe('webhook.test');
    const typed: EventOf<'webhook.test'> = testEvent as EventOf<'webhook.test'>;
    expect(typed.data).toEqual(expect.any(Object));

    const deliveries = [];
    for await (const d of client.webhooks.deliveries.iterate({ endpointId: endpoint.id, limit: 1 })) deliveries.push(d);
    expect(deliveries).toHaveLength(2);
    expect((await client.webhooks.deliveries.list({ status: 'success' })).data).toHaveLength(2);
    expect((await client.webhooks.deliveries.metrics()).success).toBe(2);
    const replay = await client.webhooks.deliveries.retry(deliveries.find((d) => d.event_type === 'contact.created')!.id);
    const replayed = await eventually(async () => receiver.at(path).length === 3 && receiver.at(path)[2]);
    expect(constructEvent(replayed.body, replayed.headers, signing_secret)).toMatchObject({ id: event.id, type: 'contact.created' });
    expect(replay.delivery_id).toEqual(expect.any(String));

    const { signing_secret: rotated } = await client.webhooks.rotateSecret(endpoint.id);
    await client.webhooks.test(endpoint.id);
    const afterRotation = receiver.at(path)[3];
    expect(verifyWebhookSignature(afterRotation.body, afterRotation.headers, signing_secret)).toBe(false);
    expect(constructEvent(afterRotation.body, afterRotation.headers, rotated).type).toBe('webhook.test');

    expect((await client.webhooks.update(endpoint.id, { description: 'SDK' })).description).toBe('SDK');
    expect((await client.webhooks.list()).data.map((w) => w.id)).toEqual([endpoint.id]);
    await client.webhooks.delete(endpoint.id);
    await expect(client.webhooks.get(endpoint.id)).rejects.toMatchObject({ status: 404 });
  });

  it('a 429 from the service is retried after Retry-After; a client that saw its budget spent waits for the reset instead', { timeout: 90_000 }, async () => {
    const tenant = await createTenant(limited.app);
    const { client: spender, proxy, calls } = await clientFor(tenant, { headers: { 'x-client': 'spender' }, retry: { maxRetries: 2, maxDelayMs: 65_000 } }, limitedUrl);
    const other = new MessagingClient({ baseUrl: `${proxy.url}${API}`, apiKey: tenant.key, headers: { 'x-client': 'other' }, retry: { maxRetries: 2, maxDelayMs: 65_000 } });
    const impatient = new MessagingClient({ baseUrl: `${proxy.url}${API}`, apiKey: tenant.key, headers: { 'x-client': 'impatient' }, retry: { maxRetries: 2, maxDelayMs: 1_000 } });

    // The budget (5 a minute) spent by one client: the 5th answer says 0 remaining.
    await awayFromMinuteEdge(3_000); // the budget is spent in well under a second
    for (let i = 0; i < 5; i++) await spender.contacts.list();
    const spent = calls('GET', '/contacts');
    expect(spent.map((e) => e.status)).toEqual([200, 200, 200, 200, 200]);

    // A wait longer than maxDelayMs is not taken: the 429 comes back as an ApiError at once.
    await expect(impatient.contacts.list()).rejects.toMatchObject({ status: 429, code: 'RATE_LIMIT_EXCEEDED' });
    const [refusedNow] = calls('GET', '/contacts').filter((e) => e.headers['x-client'] === 'impatient');
    expect(refusedNow.status).toBe(429);

    const windowEnd = Math.ceil(Date.now() / 60_000) * 60_000;
    const [fromOther, fromSpender] = await Promise.all([other.contacts.list(), spender.contacts.list()]);
    expect(fromOther.data).toEqual([]);
    expect(fromSpender.data).toEqual([]);

    const byClient = (name: string) => calls('GET', '/contacts').filter((e) => e.headers['x-client'] === name);
    // The other client was refused once, then waited for Retry-After (the window's end) and got through.
    expect(byClient('other').map((e) => e.status)).toEqual([429, 200]);
    expect(byClient('other')[1].at).toBeGreaterThanOrEqual(windowEnd);
    // The spender knew from X-RateLimit-Remaining-Minute: 0 and X-RateLimit-Reset, and sent nothing before the reset.
    expect(byClient('spender').map((e) => e.status)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(byClient('spender')[5].at).toBeGreaterThanOrEqual(windowEnd);
    expect(byClient('impatient')).toHaveLength(1);
  });
});

