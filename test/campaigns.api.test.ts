import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, call, createTenant, itOnPostgresServer, uniquePhone } from './helpers/app.ts';
import { createKey, expectError } from './helpers/expect.ts';
import { CAMPAIGN_ENV, createContacts, someContacts, uniqueTag } from './helpers/campaigns.ts';
import {
  bodyMapping, createCampaign, expectInvalid, future, lockCampaign, RICH_TEMPLATE, richMapping, uploadMedia, stopLeftovers,
} from './helpers/campaigns-api.ts';
import { startDueCampaigns } from '../src/workers/campaign-dispatcher.ts';
import { createApprovedTemplate, createConnectedTenant, eventsOf, startUpstreamApp, type UpstreamTestApp } from './helpers/upstream.ts';

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const CAMPAIGN_KEYS = [
  'id', 'name', 'description', 'status', 'template_id', 'template_name', 'template_category', 'template_language', 'variable_mapping',
  'scheduled_at', 'started_at', 'completed_at', 'total_recipients', 'stats', 'created_at', 'updated_at',
];

/** Every campaign route with how it is called, the scope it needs and whether the plan gates it. */
const ROUTES: { method: string; path: (id: string) => string; body?: unknown; scope: string; gated?: boolean }[] = [
  { method: 'GET', path: (id) => `/campaigns/${id}`, scope: 'campaigns:read' },
  { method: 'PUT', path: (id) => `/campaigns/${id}/audience`, body: { groups: ['x'] }, scope: 'campaigns:write' },
  { method: 'GET', path: (id) => `/campaigns/${id}/audience/preview`, scope: 'campaigns:read' },
  { method: 'POST', path: (id) => `/campaigns/${id}/audience/field-coverage`, body: { fields: ['first_name'] }, scope: 'campaigns:read' },
  { method: 'POST', path: (id) => `/campaigns/${id}/preview`, body: {}, scope: 'campaigns:write' },
  { method: 'POST', path: (id) => `/campaigns/${id}/send`, scope: 'campaigns:send', gated: true },
  { method: 'POST', path: (id) => `/campaigns/${id}/schedule`, body: { scheduled_at: future() }, scope: 'campaigns:send', gated: true },
  { method: 'POST', path: (id) => `/campaigns/${id}/pause`, scope: 'campaigns:send', gated: true },
  { method: 'POST', path: (id) => `/campaigns/${id}/resume`, scope: 'campaigns:send', gated: true },
  { method: 'POST', path: (id) => `/campaigns/${id}/stop`, scope: 'campaigns:send', gated: true },
  { method: 'POST', path: (id) => `/campaigns/${id}/refresh-metrics`, scope: 'campaigns:write' },
  { method: 'GET', path: (id) => `/campaigns/${id}/errors`, scope: 'campaigns:read' },
  { method: 'GET', path: (id) => `/campaigns/${id}/errors/131026`, scope: 'campaigns:read' },
  { method: 'GET', path: (id) => `/campaigns/${id}/recipients`, scope: 'campaigns:read' },
  { method: 'POST', path: (id) => `/campaigns/${id}/retarget`, body: {}, scope: 'campaigns:write' },
];

describe('campaigns API: resource, validation, access', () => {
  let t: UpstreamTestApp;
  // Each test makes many calls on its tenant; the per-minute budget is not what these tests are about.
  beforeAll(async () => { t = await startUpstreamApp({ ...CAMPAIGN_ENV, RATE_LIMIT_PER_MINUTE: '100000' }); });
  const tenants: string[] = [];
  afterAll(async () => {
    if (t) await stopLeftovers(t, tenants);
    await t?.close();
  });
  const connected = async (options: Parameters<typeof createConnectedTenant>[1] = {}) => {
    const tenant = await createConnectedTenant(t.app, options);
    tenants.push(tenant.id);
    return tenant;
  };

  async function setup(options: Parameters<typeof createConnectedTenant>[1] = {}) {
    const tenant = await connected(options);
    const template = await createApprovedTemplate(t.app, tenant, { category: 'MARKETING' });
    // Test contacts have US numbers, which MARKETING campaigns skip by default (marketing-consent.test.ts).
    await t.app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${tenant.id}/marketing-settings`, headers: adminHeaders, payload: { block_us_marketing: false } });
    return { tenant, template };
  }

  it('create answers every field of 2.1, copies the template, and emits campaign.created with the campaign', async () => {
    const { tenant, template } = await setup();
    const res = await call(t.app, tenant, 'POST', '/campaigns', {
      name: 'Spring sale', description: 'Tell everyone', template_id: template.id, batch_size: 25,
      variable_mapping: bodyMapping(), audience: { groups: ['vip', 'vip', 'new'], sources: ['website'] },
    });
    expect(res.statusCode, res.body).toBe(201);
    const c = res.json();
    expect(Object.keys(c)).toEqual(expect.arrayContaining(CAMPAIGN_KEYS));
    expect(c).toMatchObject({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/), name: 'Spring sale', description: 'Tell everyone', status: 'DRAFT', template_id: template.id,
      template_name: template.template_name, template_category: 'MARKETING', template_language: 'en', variable_mapping: bodyMapping(),
      batch_size: 25, scheduled_at: null, started_at: null, completed_at: null, total_recipients: 0,
      stats: { total: 0, sent: 0, delivered: 0, read: 0, failed: 0, pending: 0, held: 0, deferred: 0, skipped: 0 },
    });
    // The spec's six keys, and the additive held, deferred, skipped, replied and clicked.
    expect(Object.keys(c.stats).sort()).toEqual(['clicked', 'deferred', 'delivered', 'failed', 'held', 'pending', 'read', 'replied', 'sent', 'skipped', 'total']);
    expect(c.created_at).toMatch(ISO);
    expect(c.updated_at === null || ISO.test(c.updated_at)).toBe(true);

    const got = (await call(t.app, tenant, 'GET', `/campaigns/${c.id}`)).json();
    expect(got).toMatchObject({ ...c, audiences: [{ type: 'group', value: 'vip' }, { type: 'group', value: 'new' }, { type: 'source', value: 'website' }] });

    const events = (await eventsOf(t.deps, tenant.id)).filter((e) => e.type.startsWith('campaign.'));
    expect(events.map((e) => e.type)).toEqual(['campaign.created']);
    expect(events[0].data).toMatchObject({ ...c, audiences: got.audiences });

    // Optional fields take their defaults; a template without variables needs no mapping.
    const plain = await createApprovedTemplate(t.app, tenant, { components: [{ type: 'BODY', text: 'Our store opens today.' }] });
    const minimal = await call(t.app, tenant, 'POST', '/campaigns', { name: 'x', template_id: plain.id });
    expect(minimal.statusCode, minimal.body).toBe(201);
    expect(minimal.json()).toMatchObject({ description: null, batch_size: 50, variable_mapping: null, status: 'DRAFT', template_category: 'UTILITY' });
  });

  it('create with scheduled_at starts in SCHEDULED and emits campaign.created and campaign.scheduled', async () => {
    const { tenant, template } = await setup();
    const at = new Date(Date.now() + 86_400_000);
    at.setMilliseconds(0);
    const res = await call(t.app, tenant, 'POST', '/campaigns', { name: 'Later', template_id: template.id, variable_mapping: bodyMapping(), audience: { groups: ['later'] }, scheduled_at: at.toISOString() });
    expect(res.statusCode, res.body).toBe(201);
    expect(res.json()).toMatchObject({ status: 'SCHEDULED', scheduled_at: at.toISOString(), started_at: null });
    const events = (await eventsOf(t.deps, tenant.id)).filter((e) => e.type.startsWith('campaign.'));
    // Both in the create's transaction, with one timestamp (their order is not defined).
    expect(events.map((e) => e.type).sort()).toEqual(['campaign.created', 'campaign.scheduled']);
    for (const e of events) expect(e.data).toMatchObject({ id: res.json().id, status: 'SCHEDULED', scheduled_at: at.toISOString() });

    // Another offset is the same instant, answered in UTC.
    const offset = await call(t.app, tenant, 'POST', '/campaigns', { name: 'Offset', template_id: template.id, variable_mapping: bodyMapping(), audience: { groups: ['later'] }, scheduled_at: '2999-01-01T12:00:00+02:00' });
    expect(offset.json().scheduled_at).toBe('2999-01-01T10:00:00.000Z');
  });

  it('finds the template by internal UUID or upstream id; unknown, foreign or unapproved templates are 404', async () => {
    const { tenant, template } = await setup();
    const row = await t.deps.db.selectFrom('templates').select('upstream_id').where('id', '=', template.id).executeTakeFirstOrThrow();
    expect(row.upstream_id).toBeTruthy();
    const byUpstream = await call(t.app, tenant, 'POST', '/campaigns', { name: 'u', template_id: row.upstream_id, variable_mapping: bodyMapping() });
    expect(byUpstream.statusCode, byUpstream.body).toBe(201);
    expect(byUpstream.json()).toMatchObject({ template_id: template.id, template_name: template.template_name });

    const other = await setup();
    const draft = await call(t.app, tenant, 'POST', '/templates', { template_name: `draft_${randomUUID().slice(0, 8)}`, language: 'en', category: 'UTILITY', components: [{ type: 'BODY', text: 'Draft only.' }] });
    expect(draft.statusCode).toBe(201);
    for (const id of [randomUUID(), '123456789', 'no-such-template', other.template.id, draft.json().id]) {
      expectError(await call(t.app, tenant, 'POST', '/campaigns', { name: 'x', template_id: id, variable_mapping: bodyMapping() }), 404, 'NOT_FOUND');
    }
    expect(await t.deps.db.selectFrom('campaigns').select('id').where('tenant_id', '=', tenant.id).execute()).toHaveLength(1);
  });

  it('each create rule is a 400 VALIDATION_ERROR naming the field; limits are inclusive; unknown fields are ignored', async () => {
    const { tenant, template } = await setup();
    const base = { name: 'Campaign', template_id: template.id, variable_mapping: bodyMapping() };
    const bad: [Record<string, unknown>, (string | number)[]][] = [
      [{ name: undefined }, ['body', 'name']],
      [{ name: '' }, ['body', 'name']],
      [{ name: 'n'.repeat(121) }, ['body', 'name']],
      [{ name: 5 }, ['body', 'name']],
      [{ description: 'd'.repeat(501) }, ['body', 'description']],
      [{ description: 5 }, ['body', 'description']],
      [{ template_id: undefined }, ['body', 'template_id']],
      [{ template_id: '' }, ['body', 'template_id']],
      [{ batch_size: 0 }, ['body', 'batch_size']],
      [{ batch_size: 1001 }, ['body', 'batch_size']],
      [{ batch_size: 2.5 }, ['body', 'batch_size']],
      [{ batch_size: '50' }, ['body', 'batch_size']],
      [{ scheduled_at: 'tomorrow' }, ['body', 'scheduled_at']],
      [{ scheduled_at: '2020-01-01T00:00:00Z' }, ['body', 'scheduled_at']],
      [{ scheduled_at: new Date(Date.now() - 1000).toISOString() }, ['body', 'scheduled_at']],
      [{ audience: { groups: 'vip' } }, ['body', 'audience', 'groups']],
      [{ audience: { groups: [5] } }, ['body', 'audience', 'groups', 0]],
      [{ audience: { sources: [''] } }, ['body', 'audience', 'sources', 0]],
      [{ audience: { groups: Array.from({ length: 101 }, (_, i) => `g${i}`) } }, ['body', 'audience', 'groups']],
    ];
    for (const [patch, loc] of bad) expectInvalid(await call(t.app, tenant, 'POST', '/campaigns', { ...base, ...patch }), loc, JSON.stringify(patch).slice(0, 80));
    expect(await t.deps.db.selectFrom('campaigns').select('id').where('tenant_id', '=', tenant.id).execute()).toHaveLength(0);
    expect((await eventsOf(t.deps, tenant.id)).filter((e) => e.type.startsWith('campaign.'))).toHaveLength(0);

    for (const patch of [{ name: 'n'.repeat(120) }, { name: 'n' }, { description: 'd'.repeat(500) }, { batch_size: 1 }, { batch_size: 1000 }, { audience: { groups: Array.from({ length: 100 }, (_, i) => `g${i}`) } }]) {
      const ok = await call(t.app, tenant, 'POST', '/campaigns', { ...base, ...patch });
      expect(ok.statusCode, JSON.stringify(patch).slice(0, 80) + ok.body).toBe(201);
    }
    const extra = await call(t.app, tenant, 'POST', '/campaigns', { ...base, status: 'RUNNING', total_recipients: 5, tenant_id: randomUUID(), id: randomUUID(), stats: { sent: 9 } });
    expect(extra.statusCode, extra.body).toBe(201);
    expect(extra.json()).toMatchObject({ status: 'DRAFT', total_recipients: 0, stats: { sent: 0 } });
    expect((await call(t.app, tenant, 'GET', `/campaigns/${extra.json().id}`)).statusCode).toBe(200);
  });

  it('normalises variable_mapping: unknown keys dropped at every level, type and kind lower-cased', async () => {
    const { tenant } = await setup();
    const template = await createApprovedTemplate(t.app, tenant, { components: RICH_TEMPLATE });
    const res = await call(t.app, tenant, 'POST', '/campaigns', {
      name: 'Rich', template_id: template.id,
      variable_mapping: {
        version: 2,
        components: [
          { type: 'HEADER', format: 'text', note: 'x', parameters: [{ kind: 'CONTACT_FIELD', field: 'company', fallback: 'friend', value: 'dropped', extra: 1 }] },
          { type: 'Body', index: 4, sub_type: 'url', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'A-1', field: 'dropped' }] },
          { type: 'BUTTON', sub_type: 'URL', index: 0, format: 'TEXT', parameters: [{ kind: 'static', value: 'T-1', media_id: randomUUID() }] },
        ],
      },
    });
    expect(res.statusCode, res.body).toBe(201);
    const expected = {
      components: [
        { type: 'header', format: 'TEXT', parameters: [{ kind: 'contact_field', field: 'company', fallback: 'friend' }] },
        { type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'A-1' }] },
        { type: 'button', sub_type: 'url', index: 0, parameters: [{ kind: 'static', value: 'T-1' }] },
      ],
    };
    expect(res.json().variable_mapping).toStrictEqual(expected);
    const stored = await t.deps.db.selectFrom('campaigns').select('variable_mapping').where('id', '=', res.json().id).executeTakeFirstOrThrow();
    expect(stored.variable_mapping).toStrictEqual(expected);
  });

  it('refuses a variable_mapping that cannot be normalised or does not fit the template, naming the path', async () => {
    const { tenant } = await setup();
    const template = await createApprovedTemplate(t.app, tenant, { components: RICH_TEMPLATE });
    const post = (variable_mapping: unknown) => call(t.app, tenant, 'POST', '/campaigns', { name: 'x', template_id: template.id, variable_mapping });
    const m = (edit: (mapping: any) => void) => { const mapping = richMapping(); edit(mapping); return mapping; };
    const vm = ['body', 'variable_mapping'];
    const cases: [unknown, (string | number)[]][] = [
      ['components', vm],
      [[richMapping()], vm],
      [42, vm],
      [{}, [...vm, 'components']],
      [{ components: { type: 'body' } }, [...vm, 'components']],
      [m((x) => { x.components[1].type = 'footer'; }), [...vm, 'components', 1, 'type']],
      [m((x) => { x.components[1].parameters[0].kind = 'formula'; }), [...vm, 'components', 1, 'parameters', 0, 'kind']],
      [m((x) => { x.components[1].parameters[0].field = 'password'; }), [...vm, 'components', 1, 'parameters', 0, 'field']],
      [m((x) => { x.components[1].parameters[0].field = 'custom_fields.'; }), [...vm, 'components', 1, 'parameters', 0, 'field']],
      [m((x) => { x.components[1].parameters[0] = { kind: 'media', media_id: 'logo' }; }), [...vm, 'components', 1, 'parameters', 0, 'media_id']],
      // Parameter count must equal the placeholders.
      [m((x) => { x.components[1].parameters.pop(); }), [...vm, 'components', 1, 'parameters']],
      [m((x) => { x.components[1].parameters.push({ kind: 'static', value: 'z' }); }), [...vm, 'components', 1, 'parameters']],
      [m((x) => { x.components[0].parameters = []; }), [...vm, 'components', 0, 'parameters']],
      // Every component with placeholders must be mapped.
      [m((x) => { x.components.splice(2, 1); }), [...vm, 'components']],
      [m((x) => { x.components.splice(0, 1); }), [...vm, 'components']],
      // A button entry must name a button that takes parameters (button 1 is a quick reply; there is no button 3).
      [m((x) => { x.components.push({ type: 'button', index: 1, parameters: [{ kind: 'static', value: 'q' }] }); }), [...vm, 'components', 3, 'index']],
      [m((x) => { x.components[2].index = 3; }), [...vm, 'components', 2, 'index']],
      [m((x) => { x.components[2].sub_type = 'quick_reply'; }), [...vm, 'components', 2, 'sub_type']],
      [m((x) => { x.components[0].format = 'IMAGE'; }), [...vm, 'components', 0, 'format']],
    ];
    for (const [mapping, loc] of cases) expectInvalid(await post(mapping), loc, JSON.stringify(mapping).slice(0, 120));
    // Required when the template has variables.
    for (const body of [{ name: 'x', template_id: template.id }, { name: 'x', template_id: template.id, variable_mapping: null }]) {
      expectInvalid(await call(t.app, tenant, 'POST', '/campaigns', body), vm);
    }
    expect(await t.deps.db.selectFrom('campaigns').select('id').where('tenant_id', '=', tenant.id).execute()).toHaveLength(0);
    expect((await post(richMapping())).statusCode).toBe(201);
  });

  it('PATCH changes a draft\'s variable_mapping and batch_size (checked as on create; the render preview follows), and only in DRAFT', async () => {
    const { tenant, template } = await setup();
    const tag = uniqueTag();
    await createContacts(t, tenant, [{ first_name: 'Ana', phone: uniquePhone(), tags: [tag], custom_fields: { city: 'Porto' } }]);
    const campaign = await createCampaign(t, tenant, template.id, { audience: { groups: [tag] } });
    const remapped = { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'custom_fields.city' }, { kind: 'static', value: 'B-2' }] }] };
    const patched = await call(t.app, tenant, 'PATCH', `/campaigns/${campaign.id}`, { variable_mapping: remapped, batch_size: 7, name: 'Renamed' });
    expect(patched.statusCode, patched.body).toBe(200);
    expect(patched.json()).toMatchObject({ name: 'Renamed', variable_mapping: remapped, send_window: null });
    const rendered = (await call(t.app, tenant, 'POST', `/campaigns/${campaign.id}/preview`, {})).json().resolved_components;
    expect(JSON.stringify(rendered)).toContain('Porto');
    expect(JSON.stringify(rendered)).toContain('B-2');
    expect((await t.deps.db.selectFrom('campaigns').select('batch_size').where('id', '=', campaign.id).executeTakeFirstOrThrow()).batch_size).toBe(7);
    expectInvalid(await call(t.app, tenant, 'PATCH', `/campaigns/${campaign.id}`, { variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'static', value: 'a' }] }] } }),
      ['body', 'variable_mapping', 'components', 0, 'parameters']);
    expect((await call(t.app, tenant, 'PATCH', `/campaigns/${campaign.id}`, {})).statusCode).toBe(400);
    expect((await call(t.app, tenant, 'PATCH', `/campaigns/${campaign.id}`, { batch_size: 0 })).statusCode).toBe(400);
    expect((await call(t.app, tenant, 'POST', `/campaigns/${campaign.id}/schedule`, { scheduled_at: future() })).statusCode).toBe(200);
    const scheduled = await call(t.app, tenant, 'PATCH', `/campaigns/${campaign.id}`, { variable_mapping: bodyMapping() });
    expectInvalid(scheduled, ['path', 'id']);
    expect((await call(t.app, tenant, 'PATCH', `/campaigns/${campaign.id}`, { send_window: null })).statusCode).toBe(200);
  });

  it('a media parameter must name an uploaded, live media asset of this tenant of the header kind', async () => {
    const { tenant } = await setup();
    const template = await createApprovedTemplate(t.app, tenant, { components: [{ type: 'HEADER', format: 'IMAGE' }, { type: 'BODY', text: 'Our new catalogue is out.' }] });
    const image = await uploadMedia(t, tenant, 'image');
    const pdf = await uploadMedia(t, tenant, 'document');
    const deleted = await uploadMedia(t, tenant, 'image');
    expect((await call(t.app, tenant, 'DELETE', `/media/${deleted}`)).statusCode).toBe(200);
    const other = await createTenant(t.app);
    const foreign = await uploadMedia(t, other, 'image');
    const mapping = (media_id: string) => ({ components: [{ type: 'header', parameters: [{ kind: 'media', media_id }] }] });
    for (const id of [foreign, deleted, randomUUID(), pdf]) {
      const res = await call(t.app, tenant, 'POST', '/campaigns', { name: 'img', template_id: template.id, variable_mapping: mapping(id) });
      const error = expectInvalid(res, ['body', 'variable_mapping'], id);
      expect(error.message).toContain(id);
    }
    const ok = await call(t.app, tenant, 'POST', '/campaigns', { name: 'img', template_id: template.id, variable_mapping: mapping(image.toUpperCase()) });
    expect(ok.statusCode, ok.body).toBe(201);
    expect(ok.json().variable_mapping).toEqual(mapping(image));
    // The image header needs its media parameter.
    expectInvalid(await call(t.app, tenant, 'POST', '/campaigns', { name: 'img', template_id: template.id }), ['body', 'variable_mapping']);
  });

  it('honours Idempotency-Key on create: the replay returns the same body, one campaign, one event', async () => {
    const { tenant, template } = await setup();
    const key = randomUUID();
    const body = { name: 'Once', template_id: template.id, variable_mapping: bodyMapping(), audience: { groups: ['once'] }, scheduled_at: future() };
    const first = await call(t.app, tenant, 'POST', '/campaigns', body, { 'idempotency-key': key });
    expect(first.statusCode, first.body).toBe(201);
    const replay = await call(t.app, tenant, 'POST', '/campaigns', body, { 'idempotency-key': key });
    expect(replay.statusCode).toBe(201);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.body).toBe(first.body);
    expectError(await call(t.app, tenant, 'POST', '/campaigns', { ...body, name: 'Other' }, { 'idempotency-key': key }), 409, 'CONFLICT');
    expect(await t.deps.db.selectFrom('campaigns').select('id').where('tenant_id', '=', tenant.id).execute()).toEqual([{ id: first.json().id }]);
    expect((await eventsOf(t.deps, tenant.id)).map((e) => e.type).filter((x) => x.startsWith('campaign.')).sort()).toEqual(['campaign.created', 'campaign.scheduled']);
    // A new key is a new campaign.
    expect((await call(t.app, tenant, 'POST', '/campaigns', body, { 'idempotency-key': randomUUID() })).json().id).not.toBe(first.json().id);
  });

  it('lists { data } newest first with every field; GET one adds audiences and preflight', async () => {
    const { tenant, template } = await setup();
    const ids: string[] = [];
    for (const name of ['first', 'second', 'third']) ids.push((await createCampaign(t, tenant, template.id, { name })).id);
    const list = await call(t.app, tenant, 'GET', '/campaigns');
    expect(list.statusCode).toBe(200);
    expect(Object.keys(list.json())).toEqual(['data']);
    expect(list.json().data.map((c: { id: string }) => c.id)).toEqual(ids.reverse());
    for (const c of list.json().data) {
      expect(Object.keys(c)).toEqual(expect.arrayContaining(CAMPAIGN_KEYS));
      expect(Object.keys(c)).not.toContain('audiences');
    }
    expect((await call(t.app, (await createTenant(t.app)), 'GET', '/campaigns')).json()).toEqual({ data: [] });

    const tag = uniqueTag();
    const source = `src_${randomUUID().slice(0, 6)}`;
    await createContacts(t, tenant, [...someContacts(3, { tags: [tag] }), ...someContacts(2, { source })]);
    const c = await createCampaign(t, tenant, template.id, { audience: { groups: [tag], sources: [source] } });
    const got = await call(t.app, tenant, 'GET', `/campaigns/${c.id}`);
    expect(got.statusCode).toBe(200);
    expect(got.json().audiences).toEqual([{ type: 'group', value: tag }, { type: 'source', value: source }]);
    expect(got.json().preflight).toEqual({
      audience_size: 5, excluded: { opted_out: 0, marketing_blocked_country: 0, frequency_cap: 0 }, messaging_tier: '1K', tier_limit: null, within_tier: true, messaging_limit_used: null, messaging_limit_available: null, messaging_limit_wait_until: null,
      template_quality_score: 'UNKNOWN', messages_per_second: 80, estimated_duration_seconds: 1, warnings: [],
      estimated_cost: expect.objectContaining({ currency: 'USD', amount: expect.any(Number) }),
    });
    const empty = (await call(t.app, tenant, 'GET', `/campaigns/${ids[0]}`)).json();
    expect(empty.audiences).toEqual([]);
    expect(empty.preflight).toMatchObject({ audience_size: 0, within_tier: true });
    expect(empty.preflight.warnings.join(' ')).toMatch(/no audience: it has no recipients and will send nothing/);
  });

  it('preflight reads the business account: pace, the portfolio\'s messaging limit, and a warning past the limit or without an account', async () => {
    const { tenant, template } = await setup();
    const tag = uniqueTag();
    await createContacts(t, tenant, someContacts(251, { tags: [tag] }));
    const c = await createCampaign(t, tenant, template.id, { audience: { groups: [tag] } });
    const patch = await t.app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${tenant.id}/business-account`, headers: adminHeaders, payload: { messages_per_second: 10, messaging_tier: '250', messaging_limit: 250 } });
    expect(patch.statusCode, patch.body).toBe(200);
    const pre = (await call(t.app, tenant, 'GET', `/campaigns/${c.id}`)).json().preflight;
    expect(pre).toMatchObject({ audience_size: 251, messaging_tier: '250', tier_limit: 250, within_tier: false, messaging_limit_used: 0, messaging_limit_available: 250, messages_per_second: 10, estimated_duration_seconds: 26 });
    expect(Date.parse(pre.messaging_limit_wait_until)).toBeGreaterThan(Date.now() + 23 * 3_600_000);
    expect(pre.warnings).toHaveLength(1);
    expect(pre.warnings[0]).toMatch(/251.*250.*wait/);
    await t.app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${tenant.id}/business-account`, headers: adminHeaders, payload: { messaging_limit: null } });
    expect((await call(t.app, tenant, 'GET', `/campaigns/${c.id}`)).json().preflight).toMatchObject({ tier_limit: null, within_tier: true, messages_per_second: 10, warnings: [] });
    await t.app.inject({ method: 'DELETE', url: `/admin/v1/tenants/${tenant.id}/business-account`, headers: adminHeaders });
    const none = (await call(t.app, tenant, 'GET', `/campaigns/${c.id}`)).json().preflight;
    expect(none).toMatchObject({ messaging_tier: null, within_tier: false, messages_per_second: null, estimated_duration_seconds: null });
    expect(none.warnings.join(' ')).toMatch(/business account/);
  });

  it('business account: messages_per_second 1-1000 and messaging_tier are set by PATCH; other values are 400', async () => {
    const tenant = await connected();
    const patch = (payload: unknown, id = tenant.id) => t.app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${id}/business-account`, headers: adminHeaders, payload: payload as object });
    const initial = (await patch({})).json();
    expect(initial).toMatchObject({ messages_per_second: 80, messaging_tier: '1K', status: 'active' });
    for (const [body, field] of [
      [{ messages_per_second: 0 }, 'messages_per_second'], [{ messages_per_second: 1001 }, 'messages_per_second'], [{ messages_per_second: 2.5 }, 'messages_per_second'],
      [{ messages_per_second: '80' }, 'messages_per_second'], [{ messaging_tier: '2K' }, 'messaging_tier'], [{ messaging_tier: 'UNLIMITED' }, 'messaging_tier'], [{ messaging_tier: 1000 }, 'messaging_tier'],
    ] as const) {
      expectInvalid(await patch(body), ['body', field], JSON.stringify(body));
    }
    expect((await patch({})).json()).toMatchObject({ messages_per_second: 80, messaging_tier: '1K' });
    for (const [mps, tier] of [[1, '250'], [1000, '100K'], [500, 'unlimited'], [80, '10K']] as const) {
      const res = await patch({ messages_per_second: mps, messaging_tier: tier });
      expect(res.statusCode, res.body).toBe(200);
      expect(res.json()).toMatchObject({ messages_per_second: mps, messaging_tier: tier });
    }
    // One field alone leaves the other as it was.
    expect((await patch({ messages_per_second: 7 })).json()).toMatchObject({ messages_per_second: 7, messaging_tier: '10K' });
    expect((await patch({ messaging_tier: '1K' })).json()).toMatchObject({ messages_per_second: 7, messaging_tier: '1K' });
    // A tenant without an account: 404.
    expectError(await patch({ messages_per_second: 5 }, (await createTenant(t.app)).id), 404, 'NOT_FOUND');
    // Connect takes them too, with the same limits.
    const connect = (payload: Record<string, unknown>) => t.app.inject({ method: 'PUT', url: `/admin/v1/tenants/${tenant.id}/business-account`, headers: adminHeaders,
      payload: { waba_id: `w${Date.now()}`, phone_number_id: `p${Date.now()}${Math.floor(Math.random() * 1e6)}`, access_token: 'sandbox-token', ...payload } });
    expectInvalid(await connect({ messages_per_second: 1001 }), ['body', 'messages_per_second']);
    expect((await connect({ messages_per_second: 300, messaging_tier: '100K' })).json()).toMatchObject({ messages_per_second: 300, messaging_tier: '100K' });
  });

  it('scopes exactly as spec 4.1: read, write and send each open their own routes only', async () => {
    const { tenant, template } = await setup();
    const campaign = await createCampaign(t, tenant, template.id);
    const keys = {
      'campaigns:read': await createKey(t.app, tenant.id, { scopes: ['campaigns:read'] }),
      'campaigns:write': await createKey(t.app, tenant.id, { scopes: ['campaigns:write'] }),
      'campaigns:send': await createKey(t.app, tenant.id, { scopes: ['campaigns:send'] }),
    };
    const allRoutes = [
      { method: 'GET', path: () => '/campaigns', scope: 'campaigns:read' },
      { method: 'POST', path: () => '/campaigns', body: { name: 'k', template_id: template.id, variable_mapping: bodyMapping() }, scope: 'campaigns:write' },
      ...ROUTES,
    ];
    for (const route of allRoutes) {
      for (const [scope, key] of Object.entries(keys)) {
        const res = await call(t.app, key, route.method, route.path(campaign.id), route.body);
        const what = `${route.method} ${route.path(':id')} with ${scope}`;
        if (scope === route.scope) {
          expect(res.statusCode, `${what}: ${res.body}`).not.toBe(403);
          expect(res.statusCode, `${what}: ${res.body}`).toBeLessThan(500);
        } else {
          const error = expectError(res, 403, 'FORBIDDEN', `Missing required scope(s): ${route.scope}`);
          expect(error).toMatchObject({ required_permissions: [route.scope], current_permissions: [scope] });
        }
      }
    }
    // Only the write key created a campaign named k.
    expect((await call(t.app, keys['campaigns:read'], 'GET', '/campaigns')).json().data.filter((c: { name: string }) => c.name === 'k')).toHaveLength(1);
  });

  it('a plan without campaign sending may create and read campaigns but not send, schedule, pause, resume or stop them', async () => {
    const { tenant, template } = await setup({ plan: 'starter' });
    const tag = uniqueTag();
    await createContacts(t, tenant, someContacts(2, { tags: [tag] }));
    const campaign = await createCampaign(t, tenant, template.id, { audience: { groups: [tag] } });
    expect((await call(t.app, tenant, 'GET', '/campaigns')).json().data).toHaveLength(1);
    for (const route of ROUTES) {
      const res = await call(t.app, tenant, route.method, route.path(campaign.id), route.body);
      if (route.gated) {
        const error = expectError(res, 403, 'UPGRADE_REQUIRED', 'Your plan does not include campaign sending. Upgrade your plan to use this feature.');
        expect(error).toMatchObject({ upgrade_required: true, feature_key: 'campaigns' });
      } else {
        expect(res.statusCode, `${route.method} ${route.path(':id')}: ${res.body}`).toBeLessThan(403);
      }
    }
    const after = (await call(t.app, tenant, 'GET', `/campaigns/${campaign.id}`)).json();
    expect(after.status).toBe('DRAFT');
    expect(await t.deps.db.selectFrom('campaign_recipients').select('id').where('campaign_id', '=', campaign.id).execute()).toHaveLength(0);
    // The same campaign on a plan with campaigns can be sent (the loop above replaced its audience).
    expect((await call(t.app, tenant, 'PUT', `/campaigns/${campaign.id}/audience`, { groups: [tag] })).statusCode).toBe(200);
    await t.app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${tenant.id}`, headers: adminHeaders, payload: { plan: 'growth' } });
    const sent = await call(t.app, tenant, 'POST', `/campaigns/${campaign.id}/send`);
    expect(sent.statusCode, sent.body).toBe(200);
    expect(sent.json()).toMatchObject({ status: 'RUNNING', total_recipients: 2 });
  });

  it('a plan without campaign sending cannot create a campaign SCHEDULED, and a campaign whose tenant lost the feature waits SCHEDULED', async () => {
    const { tenant, template } = await setup({ plan: 'starter' });
    const tag = uniqueTag();
    await createContacts(t, tenant, someContacts(2, { tags: [tag] }));
    const scheduledAt = new Date(Date.now() + 60_000).toISOString();
    const body = { name: 's', template_id: template.id, variable_mapping: bodyMapping(), audience: { groups: [tag] } };
    const refused = await call(t.app, tenant, 'POST', '/campaigns', { ...body, scheduled_at: scheduledAt });
    expect(expectError(refused, 403, 'UPGRADE_REQUIRED', 'Your plan does not include campaign sending. Upgrade your plan to use this feature.'))
      .toMatchObject({ upgrade_required: true, feature_key: 'campaigns' });
    expect((await call(t.app, tenant, 'GET', '/campaigns')).json().data).toHaveLength(0);
    // Without scheduled_at it is a DRAFT, which the plan may keep.
    await createCampaign(t, tenant, template.id, { scheduled_at: null });

    // Scheduled on a plan with campaigns, then the plan is changed: the scheduler leaves it until the plan has them again.
    const setPlan = (plan: string) => t.app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${tenant.id}`, headers: adminHeaders, payload: { plan } });
    await setPlan('growth');
    const created = await call(t.app, tenant, 'POST', '/campaigns', { ...body, scheduled_at: scheduledAt });
    expect(created.statusCode, created.body).toBe(201);
    await setPlan('starter');
    await t.deps.db.updateTable('campaigns').set({ scheduled_at: new Date(Date.now() - 1000) }).where('id', '=', created.json().id).execute();
    expect(await startDueCampaigns(t.deps.db, [tenant.id])).toBe(0);
    expect((await call(t.app, tenant, 'GET', `/campaigns/${created.json().id}`)).json().status).toBe('SCHEDULED');
    await setPlan('growth');
    expect(await startDueCampaigns(t.deps.db, [tenant.id])).toBe(1);
    expect((await call(t.app, tenant, 'GET', `/campaigns/${created.json().id}`)).json()).toMatchObject({ status: 'RUNNING', total_recipients: 2 });
  });

  it('another tenant\'s campaign, or a malformed id, is 404 on every campaign route and stays untouched', async () => {
    const { tenant, template } = await setup();
    const tag = uniqueTag();
    await createContacts(t, tenant, someContacts(2, { tags: [tag] }));
    const campaign = await createCampaign(t, tenant, template.id, { audience: { groups: [tag] } });
    const before = (await call(t.app, tenant, 'GET', `/campaigns/${campaign.id}`)).json();
    const intruder = await setup();
    for (const id of [campaign.id, 'not-a-uuid', randomUUID(), `${campaign.id}x`]) {
      for (const route of ROUTES) {
        const res = await call(t.app, intruder.tenant, route.method, route.path(id), route.body);
        expectError(res, 404, 'NOT_FOUND');
      }
      const csv = await call(t.app, intruder.tenant, 'GET', `/campaigns/${id}/recipients`, undefined, { accept: 'text/csv' });
      expectError(csv, 404, 'NOT_FOUND');
    }
    expect((await call(t.app, intruder.tenant, 'GET', '/campaigns')).json()).toEqual({ data: [] });
    const after = (await call(t.app, tenant, 'GET', `/campaigns/${campaign.id}`)).json();
    expect(after).toEqual(before);
    expect((await eventsOf(t.deps, tenant.id)).filter((e) => e.type.startsWith('campaign.')).map((e) => e.type)).toEqual(['campaign.created']);
    expect(await t.deps.db.selectFrom('campaigns').select('id').where('tenant_id', '=', intruder.tenant.id).execute()).toHaveLength(0);
  });

  itOnPostgresServer('a row lock held from a second connection')('two concurrent pauses: exactly one 200, the other 409 (lost the race), one campaign.paused', async () => {
    const { tenant, template } = await setup();
    const tag = uniqueTag();
    await createContacts(t, tenant, someContacts(1, { tags: [tag] }));
    for (let round = 0; round < 3; round++) {
      const c = await createCampaign(t, tenant, template.id, { audience: { groups: [tag] } });
      expect((await call(t.app, tenant, 'POST', `/campaigns/${c.id}/send`)).statusCode).toBe(200);
      const lock = await lockCampaign(c.id);
      let results;
      try {
        const both = Promise.all([call(t.app, tenant, 'POST', `/campaigns/${c.id}/pause`), call(t.app, tenant, 'POST', `/campaigns/${c.id}/pause`)]);
        await lock.blocked(2);
        await lock.release();
        results = await both;
      } catch (err) {
        await lock.release().catch(() => {});
        throw err;
      }
      const statuses = results.map((r) => r.statusCode).sort();
      expect(statuses, results.map((r) => r.body).join('\n')).toEqual([200, 409]);
      const loser = results.find((r) => r.statusCode === 409)!;
      expectError(loser, 409, 'CONFLICT');
      expect(results.find((r) => r.statusCode === 200)!.json().status).toBe('PAUSED');
      const paused = (await eventsOf(t.deps, tenant.id, 'campaign.paused')).filter((e) => (e.data as { id: string }).id === c.id);
      expect(paused).toHaveLength(1);
      // Once settled, the same move is not allowed any more: 400 naming the status.
      const again = expectError(await call(t.app, tenant, 'POST', `/campaigns/${c.id}/pause`), 400, 'VALIDATION_ERROR');
      expect(again.message).toContain('PAUSED');
    }
  });

  itOnPostgresServer('a row lock held from a second connection')('two concurrent sends: one 200 that materialises the audience once, the other 409', async () => {
    const { tenant, template } = await setup();
    const tag = uniqueTag();
    await createContacts(t, tenant, someContacts(4, { tags: [tag] }));
    const c = await createCampaign(t, tenant, template.id, { audience: { groups: [tag] } });
    const lock = await lockCampaign(c.id);
    let results;
    try {
      const both = Promise.all([call(t.app, tenant, 'POST', `/campaigns/${c.id}/send`), call(t.app, tenant, 'POST', `/campaigns/${c.id}/send`)]);
      await lock.blocked(2);
      await lock.release();
      results = await both;
    } catch (err) {
      await lock.release().catch(() => {});
      throw err;
    }
    expect(results.map((r) => r.statusCode).sort(), results.map((r) => r.body).join('\n')).toEqual([200, 409]);
    expect(results.find((r) => r.statusCode === 200)!.json()).toMatchObject({ status: 'RUNNING', total_recipients: 4 });
    expect(await t.deps.db.selectFrom('campaign_recipients').select('id').where('campaign_id', '=', c.id).execute()).toHaveLength(4);
    expect((await eventsOf(t.deps, tenant.id, 'campaign.started'))).toHaveLength(1);
  });

  it('a scheduled campaign may have no audience yet (spec 3.1, 4.1: set later), at create and at schedule; its preflight says it will send nothing', async () => {
    const { tenant, template } = await setup();
    const noRecipients = 'The campaign has no audience: it has no recipients and will send nothing. Set groups or sources (a SCHEDULED campaign: pause it, set the audience, resume it).';
    const at = future();
    const created = await call(t.app, tenant, 'POST', '/campaigns', { name: 'S', template_id: template.id, variable_mapping: bodyMapping(), scheduled_at: at });
    expect(created.statusCode, created.body).toBe(201);
    expect(created.json()).toMatchObject({ status: 'SCHEDULED', scheduled_at: at, total_recipients: 0 });
    const got = (await call(t.app, tenant, 'GET', `/campaigns/${created.json().id}`)).json();
    expect(got.audiences).toEqual([]);
    expect(got.preflight).toMatchObject({ audience_size: 0, warnings: [noRecipients] });
    const events = (await eventsOf(t.deps, tenant.id)).filter((e) => (e.data as { id: string }).id === created.json().id).map((e) => e.type);
    expect(events.sort()).toEqual(['campaign.created', 'campaign.scheduled']);

    const draft = await createCampaign(t, tenant, template.id);
    const scheduled = await call(t.app, tenant, 'POST', `/campaigns/${draft.id}/schedule`, { scheduled_at: future() });
    expect(scheduled.statusCode, scheduled.body).toBe(200);
    expect(scheduled.json()).toMatchObject({ status: 'SCHEDULED', preflight: { audience_size: 0, warnings: [noRecipients] } });
    // Sending one now still needs an audience.
    expectInvalid(await call(t.app, tenant, 'POST', `/campaigns/${draft.id}/send`), ['body', 'audience']);

    // An audience resolving to nobody says so too.
    const nobody = await createCampaign(t, tenant, template.id, { audience: { groups: [uniqueTag()] }, scheduled_at: future() });
    expect((await call(t.app, tenant, 'GET', `/campaigns/${nobody.id}`)).json().preflight.warnings)
      .toEqual(['The audience resolves to no contacts: the campaign has no recipients and will send nothing.']);
    // scheduled_at: null is simply "not scheduled".
    const unscheduled = await call(t.app, tenant, 'POST', '/campaigns', { name: 'N', template_id: template.id, variable_mapping: bodyMapping(), scheduled_at: null });
    expect(unscheduled.statusCode).toBe(201);
    expect(unscheduled.json().status).toBe('DRAFT');
  });

  it('a static value or fallback longer than a body (1,024 characters) is refused at create', async () => {
    const { tenant, template } = await setup();
    const long = 'x'.repeat(1025);
    expectInvalid(await call(t.app, tenant, 'POST', '/campaigns', { name: 'L', template_id: template.id,
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'static', value: long }, { kind: 'static', value: 'ok' }] }] } }), ['body', 'variable_mapping', 'components', 0, 'parameters', 0, 'value']);
    expectInvalid(await call(t.app, tenant, 'POST', '/campaigns', { name: 'L', template_id: template.id,
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name', fallback: long }, { kind: 'static', value: 'ok' }] }] } }), ['body', 'variable_mapping', 'components', 0, 'parameters', 0, 'fallback']);
    expect((await call(t.app, tenant, 'POST', '/campaigns', { name: 'L', template_id: template.id,
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'static', value: 'x'.repeat(1024) }, { kind: 'static', value: 'ok' }] }] } })).statusCode).toBe(201);
  });

  it('lifecycle actions honour Idempotency-Key: a retried send replays its 200 instead of a 400 for a running campaign', async () => {
    const { tenant, template } = await setup();
    const tag = `g_${randomUUID().slice(0, 8)}`;
    await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Ida', phone: uniquePhone(), tags: [tag] });
    const c = await createCampaign(t, tenant, template.id, { audience: { groups: [tag] } });
    const key = { 'idempotency-key': randomUUID() };
    const first = await call(t.app, tenant, 'POST', `/campaigns/${c.id}/send`, undefined, key);
    expect(first.statusCode, first.body).toBe(200);
    const again = await call(t.app, tenant, 'POST', `/campaigns/${c.id}/send`, undefined, key);
    expect(again.statusCode).toBe(200);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toBe(first.body);
    expect(await eventsOf(t.deps, tenant.id, 'campaign.started')).toHaveLength(1);
    // Without the key the same action is judged on the current status.
    expectError(await call(t.app, tenant, 'POST', `/campaigns/${c.id}/send`), 400, 'VALIDATION_ERROR');
    await call(t.app, tenant, 'POST', `/campaigns/${c.id}/stop`);
  });
});
