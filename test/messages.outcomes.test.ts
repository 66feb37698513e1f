import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, call, eventually, uniquePhone } from './helpers/app.ts';
import { createApprovedTemplate, createConnectedTenant, eventsOf, postCallback, sandboxControl, startUpstreamApp, statusCallback, type UpstreamTestApp } from './helpers/upstream.ts';

const bodyParams = (...texts: string[]) => [{ type: 'body', parameters: texts.map((text) => ({ type: 'text', text })) }];

/**
 * Single sends act on the outcome of the upstream's answer (src/upstream/outcomes.ts), on the real
 * database and the sandbox over HTTP: nothing is sent twice for one Idempotency-Key, a refusal is a
 * 4xx stored once, a throttle is a 429, and a stopping answer stops the template or the account.
 */
describe('single sends: every upstream answer through the outcome model', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => {
    t = await startUpstreamApp({ UPSTREAM_TIMEOUT_MS: '300', SEND_RECONCILE_MS: '2000', RATE_LIMIT_PER_MINUTE: '100000' });
  });
  afterAll(async () => { await t?.close(); });

  const sendsTo = async (to: string) => (await sandboxControl(t.sandbox!, 'GET', `/__sandbox/sends?to=${encodeURIComponent(to)}`)).json.data as { message_id: string }[];
  const rule = (to: string, outcome: string, extra: Record<string, unknown> = {}) => sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to, outcome, ...extra });
  const messageRow = (tenantId: string, to: string) => t.deps.db.selectFrom('messages').selectAll().where('tenant_id', '=', tenantId).where('to_phone', '=', to).executeTakeFirst();

  it('a keyed send that timed out is never sent twice: 409 with Retry-After until a callback tells, then the original message id', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const to = uniquePhone();
    const key = crypto.randomUUID();
    const body = { to, template_name: template.template_name, components: bodyParams('a', 'b') };
    // Each of the sandbox's answers takes 1.2 s; ours gives up after 300 ms (outcome unknown).
    await sandboxControl(t.sandbox!, 'PUT', '/__sandbox/config', { latency_ms: 1200 });
    try {
      const first = await call(t.app, tenant, 'POST', '/messages/template', body, { 'idempotency-key': key });
      expect(first.statusCode).toBe(504);
      expect(first.json().error.code).toBe('UPSTREAM_TIMEOUT');
      expect((await messageRow(tenant.id, to))?.status).toBe('unknown');
      // At once: the outcome can still arrive, so the retry is told to wait, and nothing is sent.
      const early = await call(t.app, tenant, 'POST', '/messages/template', body, { 'idempotency-key': key });
      expect(early.statusCode).toBe(409);
      expect(early.json().error.code).toBe('CONFLICT');
      expect(Number(early.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    } finally {
      await sandboxControl(t.sandbox!, 'PUT', '/__sandbox/config', { latency_ms: 0 });
    }
    // The sandbox took the first attempt; its callbacks (matched by our id) tell us so.
    const row = await eventually(async () => { const r = await messageRow(tenant.id, to); return r?.upstream_message_id ? r : null; });
    const later = await call(t.app, tenant, 'POST', '/messages/template', body, { 'idempotency-key': key });
    expect(later.statusCode).toBe(200);
    expect(later.json()).toEqual({ message_id: row.upstream_message_id, status: 'accepted', to });
    const replay = await call(t.app, tenant, 'POST', '/messages/template', body, { 'idempotency-key': key });
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.json()).toEqual(later.json());
    expect(await sendsTo(to)).toHaveLength(1);
  });

  it('a keyed send whose outcome never arrives is sent again only after SEND_RECONCILE_MS', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const to = uniquePhone();
    const key = crypto.randomUUID();
    const body = { to, template_name: template.template_name, components: bodyParams('a', 'b') };
    // The first attempt times out here and is refused there: no callback will ever come.
    await rule(to, 'reject', { error_code: 131026 });
    await sandboxControl(t.sandbox!, 'PUT', '/__sandbox/config', { latency_ms: 800 });
    let firstAt: number;
    try {
      firstAt = Date.now();
      expect((await call(t.app, tenant, 'POST', '/messages/template', body, { 'idempotency-key': key })).statusCode).toBe(504);
    } finally {
      await sandboxControl(t.sandbox!, 'PUT', '/__sandbox/config', { latency_ms: 0 });
    }
    await rule(to, 'ok');
    const waiting = await call(t.app, tenant, 'POST', '/messages/template', body, { 'idempotency-key': key });
    expect(waiting.statusCode).toBe(409);
    expect(await sendsTo(to)).toHaveLength(0);
    // Past the window without a word: the same message row goes out once more.
    await new Promise((r) => setTimeout(r, Math.max(0, firstAt + 2100 - Date.now())));
    const resent = await call(t.app, tenant, 'POST', '/messages/template', body, { 'idempotency-key': key });
    expect(resent.statusCode).toBe(200);
    const sends = await sendsTo(to);
    expect(sends).toHaveLength(1);
    expect(resent.json().message_id).toBe(sends[0].message_id);
    const rows = await t.deps.db.selectFrom('messages').select(['id', 'status']).where('tenant_id', '=', tenant.id).where('to_phone', '=', to).execute();
    expect(rows).toHaveLength(1);
  });

  it('a refusal for good is a 400 naming the upstream code, stored once with one message.failed; its key replays it without a second send', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const to = uniquePhone();
    const key = crypto.randomUUID();
    const body = { to, template_name: template.template_name, components: bodyParams('a', 'b') };
    await rule(to, 'reject', { error_code: 131026 });
    const refused = await call(t.app, tenant, 'POST', '/messages/template', body, { 'idempotency-key': key });
    expect(refused.statusCode).toBe(400);
    expect(refused.json().error).toMatchObject({ code: 'VALIDATION_ERROR', upstream_error: { code: 131026, title: 'Message undeliverable' } });
    expect(refused.json().error.message).toMatch(/131026/);
    // Were the retry sent again, the sandbox would take it now.
    await rule(to, 'ok');
    const again = await call(t.app, tenant, 'POST', '/messages/template', body, { 'idempotency-key': key });
    expect(again.statusCode).toBe(400);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(await sendsTo(to)).toHaveLength(0);
    const row = await messageRow(tenant.id, to);
    expect(row).toMatchObject({ status: 'failed', error_code: 131026 });
    const failed = await eventsOf(t.deps, tenant.id, 'message.failed');
    expect(failed.map((e) => e.data)).toEqual([expect.objectContaining({ message_id: row!.id, to, error: { code: 131026, title: 'Message undeliverable' } })]);
    // GET /messages/{id} finds it by the id the event names.
    expect((await call(t.app, tenant, 'GET', `/messages/${row!.id}`)).json()).toMatchObject({ status: 'failed', error: { code: 131026 } });
  });

  it('a throttle (130429, 131056) is a 429 with Retry-After, and nothing is stored as failed', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    for (const code of [130429, 131056]) {
      const to = uniquePhone();
      await rule(to, 'reject', { error_code: code });
      const res = await call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, components: bodyParams('a', 'b') });
      expect(res.statusCode, String(code)).toBe(429);
      expect(res.json().error).toMatchObject({ code: 'RATE_LIMIT_EXCEEDED', message: 'Rate limit exceeded. Please slow down.', upstream_error: { code } });
      expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(1);
      expect(await messageRow(tenant.id, to)).toBeUndefined();
    }
    expect(await eventsOf(t.deps, tenant.id, 'message.failed')).toEqual([]);
  });

  it('a number restricted for spam (131048) is a 429 with Retry-After of an hour, nothing is stored, the account stays active (reference §4: pause, retry hours later)', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const to = uniquePhone();
    await rule(to, 'reject', { error_code: 131048 });
    const res = await call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, components: bodyParams('a', 'b') });
    expect(res.statusCode).toBe(429);
    expect(res.json().error).toMatchObject({ code: 'RATE_LIMIT_EXCEEDED', upstream_error: { code: 131048 } });
    expect(Number(res.headers['retry-after'])).toBe(3600);
    expect(await messageRow(tenant.id, to)).toBeUndefined();
    const account = await t.deps.db.selectFrom('business_accounts').select('status').where('tenant_id', '=', tenant.id).executeTakeFirstOrThrow();
    expect(account.status).toBe('active');
    // Another recipient is sent as before.
    expect((await call(t.app, tenant, 'POST', '/messages/template', { to: uniquePhone(), template_name: template.template_name, components: bodyParams('a', 'b') })).statusCode).toBe(200);
  });

  it('an expired token (190) stops the account: 404, the operator sees token_invalid, later sends answer 404 until it is connected again', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const to = uniquePhone();
    await rule(to, 'reject', { error_code: 190 });
    const res = await call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, components: bodyParams('a', 'b') });
    expect(res.statusCode).toBe(404);
    expect(res.json().error).toMatchObject({ code: 'NOT_FOUND', upstream_error: { code: 190 } });
    expect(res.json().error.message).toMatch(/^No active WABA account for this tenant/);
    const account = await t.app.inject({ method: 'GET', url: `/admin/v1/tenants/${tenant.id}/business-account`, headers: adminHeaders });
    expect(account.json()).toMatchObject({ status: 'token_invalid' });
    const next = await call(t.app, tenant, 'POST', '/messages/template', { to: uniquePhone(), template_name: template.template_name, components: bodyParams('a', 'b') });
    expect(next.statusCode).toBe(404);
    expect(next.json().error.message).toBe('No active WABA account for this tenant');
    // Connected again by an operator: sends go out.
    const reconnect = await t.app.inject({ method: 'PUT', url: `/admin/v1/tenants/${tenant.id}/business-account`, headers: adminHeaders,
      payload: { waba_id: tenant.wabaId, phone_number_id: tenant.phoneNumberId, access_token: 'sandbox-token-2' } });
    expect(reconnect.statusCode).toBe(200);
    await rule(to, 'ok');
    expect((await call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, components: bodyParams('a', 'b') })).statusCode).toBe(200);
  });

  it('a template WhatsApp paused (132015) is marked paused: 404 naming the code, and later sends find no approved template', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    // Paused at the sandbox: the send's answer (132015) or the PAUSED callback, whichever comes first, says so.
    await sandboxControl(t.sandbox!, 'POST', '/__sandbox/templates/pause', { name: template.template_name, language: 'en', waba_id: tenant.wabaId });
    const res = await call(t.app, tenant, 'POST', '/messages/template', { to: uniquePhone(), template_name: template.template_name, components: bodyParams('a', 'b') });
    expect(res.statusCode).toBe(404);
    expect(res.json().error.code).toBe('NOT_FOUND');
    const row = await t.deps.db.selectFrom('templates').select('status').where('id', '=', template.id).executeTakeFirstOrThrow();
    expect(row.status).toBe('paused');
    await sandboxControl(t.sandbox!, 'POST', '/__sandbox/templates/unpause', { name: template.template_name, language: 'en', waba_id: tenant.wabaId });
    // Approved again by callback: sends go out.
    await eventually(async () => (await t.deps.db.selectFrom('templates').select('status').where('id', '=', template.id).executeTakeFirstOrThrow()).status === 'approved');
    expect((await call(t.app, tenant, 'POST', '/messages/template', { to: uniquePhone(), template_name: template.template_name, components: bodyParams('a', 'b') })).statusCode).toBe(200);
  });

  it('a failed callback without a code fails its message only: it is never read as Meta\'s code 0 (which stops the account)', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const to = uniquePhone();
    await rule(to, 'no_read');
    const sent = (await call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, components: bodyParams('a', 'b') })).json();
    const posted = await postCallback(t.app, statusCallback(tenant.phoneNumberId, [{ id: sent.message_id, status: 'failed', timestamp: String(Math.floor(Date.now() / 1000) + 5), recipient_id: to.slice(1) }]));
    expect(posted.statusCode).toBe(200);
    await eventually(async () => (await messageRow(tenant.id, to))?.status === 'failed');
    const account = await t.app.inject({ method: 'GET', url: `/admin/v1/tenants/${tenant.id}/business-account`, headers: adminHeaders });
    expect(account.json().status).toBe('active');
    expect((await call(t.app, tenant, 'POST', '/messages/template', { to: uniquePhone(), template_name: template.template_name, components: bodyParams('a', 'b') })).statusCode).toBe(200);
  });
});
