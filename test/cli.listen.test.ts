import { readFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { createSecureContext, rootCertificates } from 'node:tls';
import pino from 'pino';
import { Agent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { devCaFiles } from '../src/crypto/dev-ca.ts';
import { verifyWebhookSignature } from '../src/index.ts';
import { WebhookSender } from '../src/modules/webhooks/webhooks.sender.ts';
import { createWebhookDeliverer } from '../src/worker.ts';
import { startLoops, type RunningLoops } from '../src/workers/loop.ts';
import { call, createTenant, eventually, startTestApp, uniquePhone, type TestApp } from './helpers/app.ts';
import { listenOnLoopback, spawnCli } from './helpers/cli.ts';
import { createOwnDatabase } from './helpers/own-database.ts';

interface Forwarded { path: string; headers: IncomingHttpHeaders; body: string }

/** The app `msvc listen` forwards to: plain HTTP on loopback, recording every request. */
async function startForwardTarget() {
  const received: Forwarded[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({ path: req.url ?? '/', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      res.writeHead(200).end('thanks');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    received,
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const jsonLines = (text: string) => text.split('\n').filter(Boolean).map((l) => JSON.parse(l));

// Each msvc is a process of its own (node, tsx, the CLI): seconds to start on a loaded machine.
describe('msvc listen and deliveries tail against a real service and its real deliverer', { timeout: 120_000 }, () => {
  let t: TestApp;
  let url: string;
  let loops: RunningLoops;
  let target: Awaited<ReturnType<typeof startForwardTarget>>;
  let database: Awaited<ReturnType<typeof createOwnDatabase>>;
  beforeAll(async () => {
    // A deliverer serves every tenant of its database: this file's runs on a database of its own.
    database = await createOwnDatabase('msvc_cli_listen');
    t = await startTestApp({
      DATABASE_URL: database.url,
      WEBHOOK_DEV_CA: 'true', WEBHOOK_DELIVERY_ENABLED: 'true', WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', WEBHOOK_POLL_MS: '20', WEBHOOK_TIMEOUT_MS: '5000',
    });
    url = await listenOnLoopback(t.app);
    loops = startLoops([createWebhookDeliverer(t.deps).loop()], 20, pino({ level: 'silent' }));
    target = await startForwardTarget();
  });
  afterAll(async () => {
    await loops?.stop();
    await target?.close();
    await t?.close();
    await database?.drop();
  });

  it('receives a real event over HTTPS the service trusts, verifies it, prints it, forwards it as received, tails it, and deletes its endpoint on Ctrl-C', async () => {
    const tenant = await createTenant(t.app);
    const env = { MSVC_URL: url, MSVC_API_KEY: tenant.key };
    const listen = spawnCli(['listen', '--forward-to', target.url, '--events', 'contact.created,contact.updated', '--data-dir', t.config.dataDir, '--json'], env);
    try {
      const { ready } = JSON.parse((await listen.waitFor(/\{"ready".*\}/, 'stderr'))[0]);
      expect(ready).toMatchObject({ url: expect.stringMatching(/^https:\/\/127\.0\.0\.1:\d+\/$/), events: ['contact.created', 'contact.updated'], signing_secret: expect.any(String) });
      const endpoint = await call(t.app, tenant, 'GET', `/webhooks/${ready.endpoint_id}`);
      expect(endpoint.json()).toMatchObject({ url: ready.url, is_active: true, events: ['contact.created', 'contact.updated'] });

      const phone = uniquePhone();
      expect((await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Listen', phone })).statusCode).toBe(201);
      const forwarded = await eventually(async () => target.received[0], 30_000);
      // The raw body and the service's headers arrive untouched: the signature still verifies.
      expect(verifyWebhookSignature({ secret: ready.signing_secret, headers: forwarded.headers, rawBody: forwarded.body })).toBe(true);
      expect(forwarded.headers).toMatchObject({ 'x-service-event': 'contact.created', 'x-service-webhook-id': ready.endpoint_id, 'user-agent': 'Service-Webhook/1.0', 'content-type': 'application/json' });
      const event = JSON.parse(forwarded.body);
      expect(event).toMatchObject({ type: 'contact.created', data: { phone, first_name: 'Listen' } });
      const line = (await listen.waitFor(/\{"received_at".*"verified":true.*\}/))[0];
      expect(JSON.parse(line)).toMatchObject({ verified: true, type: 'contact.created', event_id: event.id, delivery_id: forwarded.headers['x-service-delivery-id'], forward_status: 200 });

      // A request the service did not sign is refused and not forwarded.
      const ca = readFileSync(devCaFiles(t.config.dataDir).caFile, 'utf8');
      const agent = new Agent({ connect: { secureContext: createSecureContext({ ca: [...rootCertificates, ca] }) } });
      const forged = await request(ready.url, {
        method: 'POST', dispatcher: agent, body: forwarded.body,
        headers: {
          'content-type': 'application/json', 'x-service-event': 'contact.created', 'x-service-delivery-id': 'forged',
          'x-service-timestamp': String(forwarded.headers['x-service-timestamp']), 'x-service-signature': `sha256=${'0'.repeat(64)}`,
        },
      });
      expect(forged.statusCode).toBe(400);
      await forged.body.dump();
      await agent.close();
      await listen.waitFor(/"verified":false/);
      expect(target.received).toHaveLength(1);

      // The delivery log, followed: the earlier delivery, then the next one as it happens.
      const tail = spawnCli(['deliveries', 'tail', '--endpoint', ready.endpoint_id, '--interval', '200', '--json'], env);
      try {
        await tail.waitFor(/"status":"success"/);
        expect(jsonLines(tail.stdout())[0]).toMatchObject({ webhook_endpoint_id: ready.endpoint_id, event_type: 'contact.created', status: 'success', response_status_code: 200 });
        const contact = (await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Second', phone: uniquePhone() })).json();
        expect((await call(t.app, tenant, 'PATCH', `/contacts/${contact.id}`, { last_name: 'Tail' })).statusCode).toBe(200);
        await eventually(async () => jsonLines(tail.stdout()).filter((d) => d.status === 'success').length >= 3, 30_000);
        const rows = jsonLines(tail.stdout()).filter((d) => d.status === 'success');
        expect(rows.map((d) => d.event_type)).toEqual(['contact.created', 'contact.created', 'contact.updated']);
        expect(new Set(rows.map((d) => d.id)).size).toBe(3);
        tail.child.kill('SIGINT');
        expect(await tail.exited).toBe(0);
      } finally {
        tail.child.kill('SIGKILL');
      }
      expect(target.received.map((r) => JSON.parse(r.body).type)).toEqual(['contact.created', 'contact.created', 'contact.updated']);

      listen.child.kill('SIGINT');
      expect(await listen.exited).toBe(0);
      expect(listen.stderr()).toContain(`Deleted endpoint ${ready.endpoint_id}`);
      expect((await call(t.app, tenant, 'GET', `/webhooks/${ready.endpoint_id}`)).statusCode).toBe(404);
    } finally {
      listen.child.kill('SIGKILL');
    }
  });

  it('is reachable only through the development CA: a sender without it fails on TLS', async () => {
    const tenant = await createTenant(t.app);
    const listen = spawnCli(['listen', '--data-dir', t.config.dataDir, '--json'], { MSVC_URL: url, MSVC_API_KEY: tenant.key });
    try {
      const { ready } = JSON.parse((await listen.waitFor(/\{"ready".*\}/, 'stderr'))[0]);
      const attempt = { url: ready.url, endpointId: ready.endpoint_id, eventType: 'webhook.test', payload: '{}', secret: ready.signing_secret };
      const withoutCa = new WebhookSender({ timeoutMs: 5000, allowPrivateNetworks: true });
      const withCa = new WebhookSender({ timeoutMs: 5000, allowPrivateNetworks: true, devCaFile: devCaFiles(t.config.dataDir).caFile });
      try {
        expect(await withoutCa.attempt(attempt)).toMatchObject({ ok: false, errorClass: 'tls' });
        expect(await withCa.attempt(attempt)).toMatchObject({ ok: true, statusCode: 200 });
      } finally {
        await withoutCa.close();
        await withCa.close();
      }
      // The service's own test event goes through the deliverer's sender, which trusts it.
      const test = await call(t.app, tenant, 'POST', `/webhooks/${ready.endpoint_id}/test`);
      expect(test.json()).toMatchObject({ delivered: true, status_code: 200 });
      await listen.waitFor(/"type":"webhook.test"/);
    } finally {
      listen.child.kill('SIGINT');
      await listen.exited;
    }
  });

  it('says where the development certificate is missing (exit 2)', async () => {
    const tenant = await createTenant(t.app);
    const listen = spawnCli(['listen', '--data-dir', '/nonexistent/data'], { MSVC_URL: url, MSVC_API_KEY: tenant.key });
    expect(await listen.exited).toBe(2);
    expect(listen.stderr()).toContain('no development certificate in /nonexistent/data/dev-ca');
  });
});
