import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Metrics } from '../src/metrics.ts';
import { adminHeaders, call, createTenant, uniquePhone } from './helpers/app.ts';
import { expectError } from './helpers/expect.ts';
import { startReceiver, type Receiver } from './helpers/https-receiver.ts';
import { parsePrometheus as parse, valueOf, type Sample } from './helpers/prometheus.ts';
import { createApprovedTemplate, createConnectedTenant, startUpstreamApp, type UpstreamTestApp } from './helpers/upstream.ts';

describe('the webhook backlog gauges', () => {
  it('report one read per scrape, and NaN (unknown, not a healthy 0) when the database does not answer', async () => {
    let reads = 0;
    let failing = false;
    const metrics = new Metrics();
    metrics.watchWebhookBacklog(async () => {
      reads += 1;
      if (failing) throw new Error('database unreachable');
      return { due: 7, oldestDueSeconds: 12.5 };
    });
    let samples = parse((await metrics.render()).body);
    expect(valueOf(samples, 'webhook_deliveries_due')).toBe(7);
    expect(valueOf(samples, 'webhook_oldest_due_seconds')).toBe(12.5);
    expect(reads).toBe(1);
    failing = true;
    samples = parse((await metrics.render()).body);
    expect(valueOf(samples, 'webhook_deliveries_due')).toBeNaN();
    expect(valueOf(samples, 'webhook_oldest_due_seconds')).toBeNaN();
    expect(reads).toBe(2);
  });
});

describe('Prometheus metrics (GET /admin/v1/metrics)', () => {
  let t: UpstreamTestApp;
  let receiver: Receiver;
  beforeAll(async () => {
    receiver = await startReceiver();
    t = await startUpstreamApp({ WEBHOOK_EXTRA_CA_FILE: receiver.caFile, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' });
  });
  afterAll(async () => {
    await t?.close();
    await receiver?.close();
  });

  async function scrape(): Promise<{ text: string; samples: Sample[] }> {
    const res = await t.app.inject({ method: 'GET', url: '/admin/v1/metrics', headers: adminHeaders });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
    return { text: res.body, samples: parse(res.body) };
  }

  it('needs the admin token', async () => {
    expectError(await t.app.inject({ method: 'GET', url: '/admin/v1/metrics' }), 401, 'AUTHENTICATION_REQUIRED');
    expectError(await t.app.inject({ method: 'GET', url: '/admin/v1/metrics', headers: { authorization: 'Bearer wrong' } }), 401, 'AUTHENTICATION_REQUIRED');
  });

  it('serves process metrics and counts requests by route pattern, never by raw path or tenant', async () => {
    const tenant = await createTenant(t.app);
    const missing = randomUUID();
    expect((await call(t.app, tenant, 'GET', `/contacts/${missing}`)).statusCode).toBe(404);
    expect((await call(t.app, tenant, 'GET', `/contacts/${randomUUID()}`)).statusCode).toBe(404);
    expect((await t.app.inject({ method: 'GET', url: '/no/such/route' })).statusCode).toBe(404);

    const { text, samples } = await scrape();
    expect(valueOf(samples, 'process_cpu_user_seconds_total')).toBeGreaterThan(0);
    expect(valueOf(samples, 'http_request_duration_seconds_count', { method: 'GET', route: '/api/v1/public/contacts/:id', status_code: '404' })).toBe(2);
    expect(valueOf(samples, 'http_request_duration_seconds_count', { method: 'GET', route: 'unmatched', status_code: '404' })).toBe(1);
    expect(text).not.toContain(missing);
    expect(text).not.toContain(tenant.id);
  });

  it('times upstream calls by operation and result', async () => {
    const tenant = await createConnectedTenant(t.app, { plan: 'business' });
    const template = await createApprovedTemplate(t.app, tenant);
    const sent = await call(t.app, tenant, 'POST', '/messages/template', {
      to: uniquePhone(), template_name: template.template_name, language: template.language,
      components: [{ type: 'body', parameters: [{ type: 'text', text: 'Ada' }, { type: 'text', text: 'A-1' }] }],
    });
    expect(sent.statusCode).toBe(200);

    const { text, samples } = await scrape();
    expect(valueOf(samples, 'upstream_request_duration_seconds_count', { operation: 'create_template', result: 'http_2xx' })).toBeGreaterThanOrEqual(1);
    expect(valueOf(samples, 'upstream_request_duration_seconds_count', { operation: 'send_template', result: 'http_2xx' })).toBe(1);
    expect(text).not.toContain('sandbox-token');
  });

  it('times webhook attempts by result', async () => {
    const tenant = await createTenant(t.app, { plan: 'growth' });
    receiver.behave('/metrics-fail', 500);
    for (const path of ['/metrics-ok', '/metrics-fail']) {
      const created = await call(t.app, tenant, 'POST', '/webhooks', { url: receiver.url(path), events: ['contact.created'] });
      expect(created.statusCode).toBe(201);
      expect((await call(t.app, tenant, 'POST', `/webhooks/${created.json().data.id}/test`)).statusCode).toBe(200);
    }
    const { samples } = await scrape();
    expect(valueOf(samples, 'webhook_attempt_duration_seconds_count', { result: 'success' })).toBe(1);
    expect(valueOf(samples, 'webhook_attempt_duration_seconds_count', { result: 'http_status' })).toBe(1);
    // Read from the shared database at scrape time (other test files add to it, so only its presence is checked here).
    expect(valueOf(samples, 'webhook_deliveries_due')).toEqual(expect.any(Number));
  });
});
