import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createTenant, eventually, uniquePhone } from './helpers/app.ts';
import pino from 'pino';
import { templatesRepository } from '../src/modules/templates/templates.repository.ts';
import { workerLoops } from '../src/worker.ts';
import { startLoops } from '../src/workers/loop.ts';
import {
  BODY_TWO_VARS, createApprovedTemplate, createConnectedTenant, postCallback, sandboxControl, startUpstreamApp, uniqueTemplateName, type UpstreamTestApp,
} from './helpers/upstream.ts';

describe('templates', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp({ TEMPLATE_POLL_INTERVAL_MS: '0' }); });
  afterAll(async () => { await t?.close(); });

  const draft = (overrides: Record<string, unknown> = {}) => ({
    template_name: uniqueTemplateName(), language: 'en_US', category: 'MARKETING', components: BODY_TWO_VARS, ...overrides,
  });

  it('creates a draft (not readable until approved), submits it, and follows the approval callback', async () => {
    const tenant = await createConnectedTenant(t.app);
    const created = await call(t.app, tenant, 'POST', '/templates', draft());
    expect(created.statusCode).toBe(201);
    const template = created.json();
    expect(template).toMatchObject({ status: 'draft', language: 'en_US', category: 'MARKETING', components: BODY_TWO_VARS, updated_at: null });
    expect((await call(t.app, tenant, 'GET', `/templates/${template.id}`)).statusCode).toBe(404);
    expect((await call(t.app, tenant, 'GET', '/templates')).json().data).toEqual([]);

    const submitted = await call(t.app, tenant, 'POST', `/templates/${template.id}/submit`);
    expect(submitted.statusCode).toBe(200);
    expect(submitted.json().status).toBe('pending');

    const approved = await eventually(async () => {
      const got = await call(t.app, tenant, 'GET', `/templates/${template.id}`);
      return got.statusCode === 200 ? got.json() : null;
    });
    expect(approved).toMatchObject({ id: template.id, status: 'approved', template_name: template.template_name });
    const list = (await call(t.app, tenant, 'GET', '/templates?limit=10')).json();
    expect(list.data.map((x: { id: string }) => x.id)).toEqual([template.id]);
    expect(list.pagination).toEqual({ page: 1, limit: 10, total_items: 1, total_pages: 1, has_next: false, has_prev: false });
    // No tenant event for template lifecycle changes.
    const events = await t.deps.db.selectFrom('events').select('type').where('tenant_id', '=', tenant.id).execute();
    expect(events).toEqual([]);
    // A second submit of a non-draft is refused.
    const again = await call(t.app, tenant, 'POST', `/templates/${template.id}/submit`);
    expect(again.statusCode).toBe(400);
  });

  it('submit honours Idempotency-Key: a retried submit replays the pending answer instead of a 400', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = (await call(t.app, tenant, 'POST', '/templates', draft())).json();
    const key = { 'idempotency-key': crypto.randomUUID() };
    const first = await call(t.app, tenant, 'POST', `/templates/${template.id}/submit`, undefined, key);
    expect(first.statusCode).toBe(200);
    const retry = await call(t.app, tenant, 'POST', `/templates/${template.id}/submit`, undefined, key);
    expect(retry.statusCode).toBe(200);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(retry.body).toBe(first.body);
  });

  it('submit answers 409 when the business account already has this name and language upstream, keeping the draft', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = (await call(t.app, tenant, 'POST', '/templates', draft())).json();
    // Someone created the same name and language in the business account outside this service.
    const direct = await fetch(`${t.sandbox!.baseUrl}/${tenant.wabaId}/message_templates`, {
      method: 'POST', headers: { authorization: 'Bearer sandbox-token', 'content-type': 'application/json' },
      body: JSON.stringify({ name: template.template_name, language: template.language, category: 'MARKETING', components: BODY_TWO_VARS }),
    });
    expect(direct.status).toBe(200);
    const res = await call(t.app, tenant, 'POST', `/templates/${template.id}/submit`);
    expect(res.statusCode).toBe(409);
    expect(res.json().error.code).toBe('CONFLICT');
    const stored = await templatesRepository.findById(t.deps.db, tenant.id, template.id);
    expect(stored?.status).toBe('draft');
  });

  it('lists approved templates newest first with pagination', async () => {
    const tenant = await createConnectedTenant(t.app);
    const a = await createApprovedTemplate(t.app, tenant);
    const b = await createApprovedTemplate(t.app, tenant);
    const page1 = (await call(t.app, tenant, 'GET', '/templates?limit=1')).json();
    expect(page1.data[0].id).toBe(b.id);
    expect(page1.pagination).toMatchObject({ total_items: 2, total_pages: 2, has_next: true, has_prev: false });
    const page2 = (await call(t.app, tenant, 'GET', '/templates?limit=1&page=2')).json();
    expect(page2.data[0].id).toBe(a.id);
  });

  it('a rejected template cannot be submitted again', async () => {
    const tenant = await createConnectedTenant(t.app);
    const body = draft();
    await sandboxControl(t.sandbox!, 'POST', '/__sandbox/templates/review', { name: body.template_name, language: body.language, status: 'REJECTED', reason: 'INVALID_FORMAT' });
    const template = (await call(t.app, tenant, 'POST', '/templates', body)).json();
    expect((await call(t.app, tenant, 'POST', `/templates/${template.id}/submit`)).statusCode).toBe(200);
    await eventually(async () => {
      const row = await t.deps.db.selectFrom('templates').selectAll().where('id', '=', template.id).executeTakeFirst();
      return row?.status === 'rejected' ? row : null;
    }).then((row) => expect(row.rejected_reason).toBe('INVALID_FORMAT'));
    const again = await call(t.app, tenant, 'POST', `/templates/${template.id}/submit`);
    expect(again.statusCode).toBe(400);
    expect(again.json().error.message).toMatch(/rejected template cannot be re-submitted/);
    expect((await call(t.app, tenant, 'GET', `/templates/${template.id}`)).statusCode).toBe(404);
  });

  it('an approved template later disabled (and paused) by the upstream disappears from reads', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    await sandboxControl(t.sandbox!, 'POST', '/__sandbox/templates/review', { name: template.template_name, language: 'en', status: 'PAUSED' });
    await eventually(async () => (await call(t.app, tenant, 'GET', `/templates/${template.id}`)).statusCode === 404);
    const paused = await t.deps.db.selectFrom('templates').select('status').where('id', '=', template.id).executeTakeFirstOrThrow();
    expect(paused.status).toBe('paused');
    await sandboxControl(t.sandbox!, 'POST', '/__sandbox/templates/review', { name: template.template_name, language: 'en', status: 'DISABLED' });
    await eventually(async () => (await t.deps.db.selectFrom('templates').select('status').where('id', '=', template.id).executeTakeFirstOrThrow()).status === 'disabled');
  });

  it('validates names, languages, categories and components with details, writing nothing', async () => {
    const tenant = await createConnectedTenant(t.app);
    const bad = await call(t.app, tenant, 'POST', '/templates', draft({ template_name: 'Bad-Name', language: 'english', components: [{ type: 'BODY', text: 'Hi {{2}}' }] }));
    expect(bad.statusCode).toBe(400);
    const error = bad.json().error;
    expect(error.code).toBe('VALIDATION_ERROR');
    expect(error.details.map((d: { loc: unknown[] }) => d.loc)).toEqual([['body', 'template_name'], ['body', 'language'], ['body', 'components', 0, 'text']]);
    for (const d of error.details) expect(Object.keys(d).sort()).toEqual(['input', 'loc', 'msg', 'type']);
    expect((await call(t.app, tenant, 'POST', '/templates', draft({ category: 'PROMO' }))).statusCode).toBe(400);
    expect((await call(t.app, tenant, 'POST', '/templates', draft({ template_name: 'x'.repeat(256) }))).statusCode).toBe(400);
    expect((await call(t.app, tenant, 'POST', '/templates', draft({ components: [{ type: 'HEADER', format: 'TEXT', text: 'Hi' }] }))).statusCode).toBe(400);
    expect((await call(t.app, tenant, 'POST', '/templates', draft({ components: [{ type: 'BODY', text: 'x' }, { type: 'FOOTER', text: '{{1}}' }] }))).statusCode).toBe(400);
    const rows = await t.deps.db.selectFrom('templates').select('id').where('tenant_id', '=', tenant.id).execute();
    expect(rows).toEqual([]);
  });

  it('checks the upstream\'s creation rules at draft creation: a 400 naming the component, nothing written', async () => {
    const tenant = await createConnectedTenant(t.app);
    const cases: [unknown[], (string | number)[], RegExp][] = [
      [[{ type: 'BODY', text: 'Hello {{1}}, welcome.' }], ['body', 'components', 0, 'example'], /^BODY: every variable needs a sample value/],
      [[{ type: 'BODY', text: '{{1}} is your order.', example: { body_text: [['A-1']] } }], ['body', 'components', 0, 'text'], /^BODY: a variable cannot start or end/],
      [[{ type: 'BODY', text: 'Codes {{1}} {{2}} here.', example: { body_text: [['a', 'b']] } }], ['body', 'components', 0, 'text'], /^BODY: two variables cannot stand side by side/],
      [[{ type: 'HEADER', format: 'IMAGE' }, { type: 'BODY', text: 'Hi' }], ['body', 'components', 0, 'example'], /^HEADER: a IMAGE header needs a sample/],
      [[{ type: 'HEADER', format: 'TEXT', text: 'Order {{1}}' }, { type: 'BODY', text: 'Hi' }], ['body', 'components', 0, 'example'], /^HEADER: every variable needs a sample/],
      [[{ type: 'BODY', text: 'Hi' }, { type: 'BUTTONS', buttons: [{ type: 'URL', text: 'Go', url: 'https://x.example/{{1}}' }] }], ['body', 'components', 1, 'buttons', 0, 'example'], /^BUTTONS: a URL button with a variable/],
    ];
    for (const [components, loc, msg] of cases) {
      const res = await call(t.app, tenant, 'POST', '/templates', draft({ components }));
      expect(res.statusCode, JSON.stringify(components)).toBe(400);
      expect(res.json().error.details, JSON.stringify(components)).toEqual([expect.objectContaining({ loc, msg: expect.stringMatching(msg) })]);
    }
    expect(await t.deps.db.selectFrom('templates').select('id').where('tenant_id', '=', tenant.id).execute()).toEqual([]);
  });

  it('a template the upstream refuses at creation is rejected with the upstream\'s reason, and the submit answer says so', async () => {
    const tenant = await createConnectedTenant(t.app);
    // A draft stored before these rules were checked at creation: the upstream is the one to refuse it.
    const stored = await templatesRepository.insertDraft(t.deps.db, tenant.id, {
      template_name: uniqueTemplateName(), language: 'en', category: 'UTILITY', components: [{ type: 'BODY', text: '{{1}} is your order.', example: { body_text: [['A-1']] } }],
    });
    const res = await call(t.app, tenant, 'POST', `/templates/${stored.id}/submit`);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ id: stored.id, status: 'rejected', rejected_reason: expect.stringMatching(/start or end/) });
    const row = await templatesRepository.findById(t.deps.db, tenant.id, stored.id);
    expect(row).toMatchObject({ status: 'rejected', upstream_id: null, waba_id: tenant.wabaId, rejected_reason: res.json().rejected_reason });
    expect((await call(t.app, tenant, 'GET', `/templates/${stored.id}`)).statusCode).toBe(404);
    expect((await call(t.app, tenant, 'POST', `/templates/${stored.id}/submit`)).json().error.message).toMatch(/rejected template cannot be re-submitted/);
    // A draft that passes the checks is still just pending, with no reason.
    const fine = (await call(t.app, tenant, 'POST', '/templates', draft())).json();
    expect(fine.rejected_reason).toBeNull();
    expect((await call(t.app, tenant, 'POST', `/templates/${fine.id}/submit`)).json()).toMatchObject({ status: 'pending', rejected_reason: null });
  });

  it('AUTHENTICATION: a copy-code template is created in the upstream\'s shape, approved, and sent with its code in the body and the OTP button', async () => {
    const tenant = await createConnectedTenant(t.app);
    const components = [
      { type: 'BODY', add_security_recommendation: true },
      { type: 'FOOTER', code_expiration_minutes: 10 },
      { type: 'BUTTONS', buttons: [{ type: 'OTP', otp_type: 'COPY_CODE', text: 'Copy code' }] },
    ];
    const template = await createApprovedTemplate(t.app, tenant, { category: 'AUTHENTICATION', components });
    expect(template).toMatchObject({ category: 'AUTHENTICATION', components });
    const to = uniquePhone();
    // The body's code alone: the OTP button is filled with the same code.
    const res = await call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, components: [{ type: 'body', parameters: [{ type: 'text', text: '482913' }] }] });
    expect(res.statusCode).toBe(200);
    // As a standard client writes it, with the button given.
    const explicit = await call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, components: [
      { type: 'body', parameters: [{ type: 'text', text: '551200' }] }, { type: 'button', sub_type: 'url', index: '0', parameters: [{ type: 'text', text: '551200' }] }] });
    expect(explicit.statusCode).toBe(200);
    const sends = (await sandboxControl(t.sandbox!, 'GET', `/__sandbox/sends?to=${encodeURIComponent(to)}`)).json.data;
    expect(sends.map((s: { components: unknown }) => s.components)).toEqual([
      [{ type: 'body', parameters: [{ type: 'text', text: '482913' }] }, { type: 'button', sub_type: 'url', index: '0', parameters: [{ type: 'text', text: '482913' }] }],
      [{ type: 'body', parameters: [{ type: 'text', text: '551200' }] }, { type: 'button', sub_type: 'url', index: '0', parameters: [{ type: 'text', text: '551200' }] }],
    ]);
    // Free text is not an authentication template.
    const bad = await call(t.app, tenant, 'POST', '/templates', draft({ category: 'AUTHENTICATION', components: BODY_TWO_VARS }));
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error.details.map((d: { msg: string }) => d.msg).join(' ')).toMatch(/preset text/);
  });

  it('answers 409 for a duplicate name and language, and allows another language', async () => {
    const tenant = await createConnectedTenant(t.app);
    const body = draft();
    expect((await call(t.app, tenant, 'POST', '/templates', body)).statusCode).toBe(201);
    const dup = await call(t.app, tenant, 'POST', '/templates', body);
    expect(dup.statusCode).toBe(409);
    expect(dup.json().error.code).toBe('CONFLICT');
    expect((await call(t.app, tenant, 'POST', '/templates', { ...body, language: 'pt_BR' })).statusCode).toBe(201);
  });

  it('submit without an active business account answers 404 and keeps the draft', async () => {
    const tenant = await createTenant(t.app);
    const template = (await call(t.app, tenant, 'POST', '/templates', draft())).json();
    const res = await call(t.app, tenant, 'POST', `/templates/${template.id}/submit`);
    expect(res.statusCode).toBe(404);
    expect(res.json().error.message).toBe('No active WABA account for this tenant');
    const row = await t.deps.db.selectFrom('templates').select('status').where('id', '=', template.id).executeTakeFirstOrThrow();
    expect(row.status).toBe('draft');
  });

  it('scopes: templates:read cannot create', async () => {
    const tenant = await createTenant(t.app, { scopes: ['templates:read'] });
    expect((await call(t.app, tenant, 'POST', '/templates', draft())).statusCode).toBe(403);
    expect((await call(t.app, tenant, 'GET', '/templates')).statusCode).toBe(200);
  });

  it('cross-tenant: another tenant\'s template is 404 for read and submit', async () => {
    const a = await createConnectedTenant(t.app);
    const b = await createConnectedTenant(t.app);
    const approved = await createApprovedTemplate(t.app, a);
    const draftA = (await call(t.app, a, 'POST', '/templates', draft())).json();
    expect((await call(t.app, b, 'GET', `/templates/${approved.id}`)).statusCode).toBe(404);
    expect((await call(t.app, b, 'POST', `/templates/${draftA.id}/submit`)).statusCode).toBe(404);
    expect((await call(t.app, b, 'GET', '/templates')).json().data).toEqual([]);
  });

  it('the fallback poller picks up an approval whose callback never came', async () => {
    await sandboxControl(t.sandbox!, 'PUT', '/__sandbox/config', { callbacks: false });
    try {
      const tenant = await createConnectedTenant(t.app);
      const created = await call(t.app, tenant, 'POST', '/templates', draft());
      expect(created.statusCode).toBe(201);
      const template = created.json();
      const submitted = await call(t.app, tenant, 'POST', `/templates/${template.id}/submit`);
      expect(submitted.statusCode).toBe(200);
      expect(submitted.json().status).toBe('pending');
      const row = () => t.deps.db.selectFrom('templates').selectAll().where('id', '=', template.id).executeTakeFirstOrThrow();
      const { upstream_id: upstreamId } = await row();
      expect(upstreamId).toBeTruthy();
      // The upstream has approved it, and no callback told us: still pending here.
      await eventually(async () => t.sandbox!.state.templates.get(upstreamId!)?.status === 'APPROVED');
      expect((await row()).status).toBe('pending');
      expect((await call(t.app, tenant, 'GET', `/templates/${template.id}`)).statusCode).toBe(404);
      // The worker role's own loop, idle-polling every WORKER_POLL_MS.
      const poller = startLoops(workerLoops(t.deps).filter((l) => l.name === 'template-status-poller'), 50, pino({ level: 'silent' }));
      try {
        const approved = await eventually(async () => {
          const got = await call(t.app, tenant, 'GET', `/templates/${template.id}`);
          return got.statusCode === 200 && got.json();
        }, 5_000);
        expect(approved).toMatchObject({ id: template.id, status: 'approved' });
        expect((await row()).status).toBe('approved');
      } finally {
        await poller.stop();
      }
    } finally {
      await sandboxControl(t.sandbox!, 'PUT', '/__sandbox/config', { callbacks: true });
    }
  });

  it('the poller paces itself: a template is not polled again within the interval', async () => {
    await sandboxControl(t.sandbox!, 'PUT', '/__sandbox/config', { callbacks: false, review_ms: 60_000 });
    try {
      const tenant = await createConnectedTenant(t.app);
      const template = (await call(t.app, tenant, 'POST', '/templates', draft())).json();
      await call(t.app, tenant, 'POST', `/templates/${template.id}/submit`);
      // Just submitted: not due under a one-minute interval.
      const early = await templatesRepository.claimDueForPoll(t.deps.db, 60_000, 1000);
      expect(early.map((r) => r.id)).not.toContain(template.id);
      // Due under a zero interval, then stamped, so an immediate second claim with a real interval skips it.
      await eventually(async () => (await templatesRepository.claimDueForPoll(t.deps.db, 0, 1000)).some((r) => r.id === template.id));
      const again = await templatesRepository.claimDueForPoll(t.deps.db, 60_000, 1000);
      expect(again.map((r) => r.id)).not.toContain(template.id);
    } finally {
      await sandboxControl(t.sandbox!, 'PUT', '/__sandbox/config', { callbacks: true, review_ms: 50 });
    }
  });

  it('a template status callback applies to the WABA\'s template and is idempotent', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const row = await t.deps.db.selectFrom('templates').selectAll().where('id', '=', template.id).executeTakeFirstOrThrow();
    const payload = { object: 'whatsapp_business_account', entry: [{ id: tenant.wabaId, time: 1, changes: [{ field: 'message_template_status_update', value: {
      event: 'DISABLED', message_template_id: /^\d+$/.test(row.upstream_id!) ? Number(row.upstream_id) : row.upstream_id, message_template_name: row.template_name, message_template_language: 'en', reason: 'NONE' } }] }] };
    expect((await postCallback(t.app, payload)).statusCode).toBe(200);
    expect((await postCallback(t.app, payload)).statusCode).toBe(200);
    const after = await t.deps.db.selectFrom('templates').select('status').where('id', '=', template.id).executeTakeFirstOrThrow();
    expect(after.status).toBe('disabled');
  });

  it('a review callback that arrives before its submission has committed answers 503, so the upstream sends it again; then it applies', async () => {
    const tenant = await createConnectedTenant(t.app);
    const name = uniqueTemplateName();
    const draft = (await call(t.app, tenant, 'POST', '/templates', { template_name: name, language: 'en', category: 'UTILITY', components: BODY_TWO_VARS })).json();
    const review = (id: string) => ({ object: 'whatsapp_business_account', entry: [{ id: tenant.wabaId, time: 1, changes: [{ field: 'message_template_status_update', value: {
      event: 'APPROVED', message_template_id: id, message_template_name: name, message_template_language: 'en', reason: 'NONE' } }] }] });
    // The draft is still a draft: its submission has not recorded the upstream id yet.
    const early = await postCallback(t.app, review('998877'));
    expect(early.statusCode).toBe(503);
    expect((await t.deps.db.selectFrom('templates').select('status').where('id', '=', draft.id).executeTakeFirstOrThrow()).status).toBe('draft');
    // A template of another name is not held back: nothing of this tenant's waits for it.
    expect((await postCallback(t.app, { ...review('998878'), entry: [{ ...review('998878').entry[0], changes: [{ field: 'message_template_status_update', value: {
      event: 'APPROVED', message_template_id: '998878', message_template_name: `${name}_other`, message_template_language: 'en', reason: 'NONE' } }] }] })).statusCode).toBe(200);
    expect((await call(t.app, tenant, 'POST', `/templates/${draft.id}/submit`)).statusCode).toBe(200);
    const row = await t.deps.db.selectFrom('templates').select(['upstream_id']).where('id', '=', draft.id).executeTakeFirstOrThrow();
    expect((await postCallback(t.app, review(row.upstream_id!))).statusCode).toBe(200);
    expect((await call(t.app, tenant, 'GET', `/templates/${draft.id}`)).statusCode).toBe(200);
  });
});

describe('templates: request shapes', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp(); });
  afterAll(async () => { await t?.close(); });

  it('submit accepts an empty JSON body; create still requires one; malformed JSON is 400', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = (await call(t.app, tenant, 'POST', '/templates', { template_name: uniqueTemplateName(), language: 'en', category: 'UTILITY', components: BODY_TWO_VARS })).json();
    const submit = await t.app.inject({ method: 'POST', url: `/api/v1/public/templates/${template.id}/submit`, headers: { ...tenant.headers, 'content-type': 'application/json' }, payload: '' });
    expect(submit.statusCode).toBe(200);
    const empty = await t.app.inject({ method: 'POST', url: '/api/v1/public/templates', headers: { ...tenant.headers, 'content-type': 'application/json' }, payload: '' });
    expect(empty.statusCode).toBe(400);
    const malformed = await t.app.inject({ method: 'POST', url: '/api/v1/public/templates', headers: { ...tenant.headers, 'content-type': 'application/json' }, payload: '{"template_name":' });
    expect(malformed.statusCode).toBe(400);
    expect(malformed.json().error.code).toBe('VALIDATION_ERROR');
  });

  it('submit answers pending even when the upstream decides at once; the decision arrives through the status sync', async () => {
    // An upstream that approves on creation (real Meta does so for some utility templates).
    const server = createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(req.method === 'POST' ? '{"id":"991","status":"APPROVED","category":"UTILITY"}' : '{"id":"991","name":"x","language":"en_US","status":"APPROVED","category":"UTILITY","components":[]}');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const instant = await startUpstreamApp({ UPSTREAM_BASE_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v21.0`, TEMPLATE_POLL_INTERVAL_MS: '0' });
    try {
      const tenant = await createConnectedTenant(instant.app);
      const created = (await call(instant.app, tenant, 'POST', '/templates', { template_name: uniqueTemplateName(), language: 'en_US', category: 'UTILITY', components: BODY_TWO_VARS })).json();
      const submitted = await call(instant.app, tenant, 'POST', `/templates/${created.id}/submit`);
      expect(submitted.statusCode).toBe(200);
      expect(submitted.json().status).toBe('pending');
      await instant.deps.templateSync.pollOnce();
      expect((await call(instant.app, tenant, 'GET', `/templates/${created.id}`)).json().status).toBe('approved');
    } finally {
      await instant.close();
      server.close();
    }
  });
});
