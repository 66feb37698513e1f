import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createTenant, eventually, uniquePhone } from './helpers/app.ts';
import { expectError } from './helpers/expect.ts';
import { createApprovedTemplate, createConnectedTenant, sandboxControl, startUpstreamApp, type UpstreamTestApp } from './helpers/upstream.ts';

const bodyParams = (...values: string[]) => [{ type: 'body', parameters: values.map((text) => ({ type: 'text', text })) }];

describe('messages: GET /messages and GET /messages/{id}', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp(); });
  afterAll(async () => { await t?.close(); });

  it('a sent message is read back by its upstream id or our id, and follows its statuses; another tenant gets 404', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const phone = uniquePhone();
    const contact = (await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Ada', phone })).json();
    const sent = (await call(t.app, tenant, 'POST', '/messages/template', { to: phone, template_name: template.template_name, components: bodyParams('Ada', 'A-1') })).json();

    const read = await eventually(async () => {
      const got = (await call(t.app, tenant, 'GET', `/messages/${sent.message_id}`)).json();
      return got.status === 'read' ? got : null;
    });
    expect(read).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/), direction: 'outbound', message_id: sent.message_id, to: phone, contact_id: contact.id, campaign_id: null,
      template_name: template.template_name, language: 'en', status: 'read',
      sent_at: expect.any(String), delivered_at: expect.any(String), read_at: expect.any(String), failed_at: null, error: null, reactions: [],
      pricing: { category: 'utility', type: 'regular', billable: true, pricing_model: 'PMP' }, price: { amount: expect.any(Number), currency: 'USD' },
      created_at: expect.any(String), updated_at: expect.any(String),
    });
    expect(Date.parse(read.read_at)).toBeGreaterThanOrEqual(Date.parse(read.sent_at));
    expect((await call(t.app, tenant, 'GET', `/messages/${read.id}`)).json()).toEqual(read);

    const other = await createConnectedTenant(t.app);
    for (const id of [sent.message_id, read.id, randomUUID(), 'wamid.unknown']) {
      expectError(await call(t.app, other, 'GET', `/messages/${encodeURIComponent(id)}`), 404, 'NOT_FOUND');
    }
    expect((await call(t.app, other, 'GET', '/messages')).json().pagination.total_items).toBe(0);
  });

  it('a failure carries the upstream code and title: failed after the 200 (callback) and refused at the send (400)', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const [late, refused] = [uniquePhone(), uniquePhone()];
    await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: late, outcome: 'fail', error_code: 131026 });
    await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: refused, outcome: 'reject', error_code: 131030 });
    const sent = (await call(t.app, tenant, 'POST', '/messages/template', { to: late, template_name: template.template_name, components: bodyParams('a', 'b') })).json();
    const failed = await eventually(async () => {
      const got = (await call(t.app, tenant, 'GET', `/messages/${sent.message_id}`)).json();
      return got.status === 'failed' ? got : null;
    });
    expect(failed).toMatchObject({ to: late, failed_at: expect.any(String), error: { code: 131026, title: expect.any(String) } });
    expect(failed.error.title.length).toBeGreaterThan(0);

    expect((await call(t.app, tenant, 'POST', '/messages/template', { to: refused, template_name: template.template_name, components: bodyParams('a', 'b') })).statusCode).toBe(400);
    const listed = (await call(t.app, tenant, 'GET', `/messages?to=${encodeURIComponent(refused)}`)).json();
    expect(listed.data).toHaveLength(1);
    expect(listed.data[0]).toMatchObject({ message_id: null, status: 'failed', failed_at: expect.any(String), error: { code: 131030, title: expect.any(String) } });
  });

  it('lists newest first with pagination and filters: to, status, contact_id, campaign_id, template_name, created range', async () => {
    const tenant = await createConnectedTenant(t.app);
    const [first, second] = [await createApprovedTemplate(t.app, tenant), await createApprovedTemplate(t.app, tenant)];
    const phones = [uniquePhone(), uniquePhone(), uniquePhone()];
    const contact = (await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Bo', phone: phones[1] })).json();
    await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: phones[2], outcome: 'fail' });
    const ids: string[] = [];
    const stamps: string[] = [];
    for (const [i, template] of [first, first, second].entries()) {
      const res = await call(t.app, tenant, 'POST', '/messages/template', { to: phones[i], template_name: template.template_name, components: bodyParams('a', 'b') });
      expect(res.statusCode).toBe(200);
      ids.push(res.json().message_id);
      stamps.push((await call(t.app, tenant, 'GET', `/messages/${res.json().message_id}`)).json().created_at);
    }
    await eventually(async () => (await call(t.app, tenant, 'GET', `/messages/${ids[2]}`)).json().status === 'failed');
    const campaignId = randomUUID();
    await t.deps.db.updateTable('messages').set({ campaign_id: campaignId }).where('upstream_message_id', '=', ids[0]).execute();

    const list = async (query: string) => {
      const res = await call(t.app, tenant, 'GET', `/messages${query}`);
      expect(res.statusCode, res.body).toBe(200);
      return res.json();
    };
    const all = await list('');
    expect(all.data.map((m: { message_id: string }) => m.message_id)).toEqual([ids[2], ids[1], ids[0]]);
    expect(all.pagination).toEqual({ page: 1, limit: 20, total_items: 3, total_pages: 1, has_next: false, has_prev: false });
    const page2 = await list('?limit=2&page=2');
    expect(page2.data.map((m: { message_id: string }) => m.message_id)).toEqual([ids[0]]);
    expect(page2.pagination).toMatchObject({ total_items: 3, total_pages: 2, has_next: false, has_prev: true });

    const only = async (query: string) => (await list(query)).data.map((m: { message_id: string }) => m.message_id);
    expect(await only(`?to=${encodeURIComponent(phones[1])}`)).toEqual([ids[1]]);
    expect(await only('?status=failed')).toEqual([ids[2]]);
    expect(await only(`?contact_id=${contact.id}`)).toEqual([ids[1]]);
    expect(await only(`?campaign_id=${campaignId}`)).toEqual([ids[0]]);
    expect(await only(`?campaign_id=${randomUUID()}`)).toEqual([]);
    expect(await only(`?template_name=${first.template_name}`)).toEqual([ids[1], ids[0]]);
    expect(await only(`?template_name=${first.template_name}&to=${encodeURIComponent(phones[0])}`)).toEqual([ids[0]]);
    // created_after is inclusive, created_before exclusive: consecutive windows never overlap.
    expect(await only(`?created_after=${encodeURIComponent(stamps[1])}`)).toEqual([ids[2], ids[1]]);
    expect(await only(`?created_before=${encodeURIComponent(stamps[1])}`)).toEqual([ids[0]]);
    expect(await only(`?created_after=${encodeURIComponent(stamps[0])}&created_before=${encodeURIComponent(stamps[2])}`)).toEqual([ids[1], ids[0]]);

    for (const query of ['?status=queued', '?to=14155550123', `?to=${encodeURIComponent('+1 415 555 0123')}`, '?contact_id=abc', '?campaign_id=1',
      '?created_after=yesterday', '?created_before=2026-13-01T00:00:00Z', '?limit=101', '?page=0', '?template_name=%00']) {
      expectError(await call(t.app, tenant, 'GET', `/messages${query}`), 400, 'VALIDATION_ERROR');
    }
  });

  it('reading needs contacts:read (the read_only, messaging and campaigns presets have it); messages:send alone is 403', async () => {
    const tenant = await createTenant(t.app, { scopes: ['messages:send'] });
    expectError(await call(t.app, tenant, 'GET', '/messages'), 403, 'FORBIDDEN');
    expectError(await call(t.app, tenant, 'GET', `/messages/${randomUUID()}`), 403, 'FORBIDDEN');
    for (const preset of ['read_only', 'messaging', 'campaigns']) {
      const reader = await createTenant(t.app, { preset });
      expect((await call(t.app, reader, 'GET', '/messages')).statusCode).toBe(200);
      expectError(await call(t.app, reader, 'GET', `/messages/${randomUUID()}`), 404, 'NOT_FOUND');
    }
  });

  it('the recipient, contact and campaign filters have indexes', async () => {
    const tenantId = randomUUID();
    const plan = async (where: ReturnType<typeof sql>) => {
      return t.deps.db.transaction().execute(async (tx) => {
        // Forbid the planner's fallbacks, so the plan shows which index serves the filter at all.
        await sql`SET LOCAL enable_seqscan = off`.execute(tx);
        await sql`SET LOCAL enable_bitmapscan = off`.execute(tx);
        const { rows } = await sql<{ 'QUERY PLAN': string }>`EXPLAIN SELECT * FROM messages WHERE tenant_id = ${tenantId} AND ${where} ORDER BY created_at DESC, id DESC LIMIT 20`.execute(tx);
        return rows.map((r) => r['QUERY PLAN']).join('\n');
      });
    };
    expect(await plan(sql`to_phone = '+14155550100'`)).toMatch(/Index Scan using messages_tenant_to on messages/);
    expect(await plan(sql`contact_id = ${randomUUID()}`)).toMatch(/Index Scan using messages_tenant_contact on messages/);
    expect(await plan(sql`campaign_id = ${randomUUID()}`)).toMatch(/Index Scan using messages_campaign_created on messages/);
  });
});
