import { randomBytes, randomInt } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API, call, eventually, uniquePhone, type TestTenant } from './helpers/app.ts';
import { expectError } from './helpers/expect.ts';
import { multipart } from './helpers/multipart.ts';
import { createApprovedTemplate, createConnectedTenant, eventsOf, startUpstreamApp, uniqueTemplateName, type UpstreamTestApp } from './helpers/upstream.ts';

/**
 * Tenant B aims every route of the public API at tenant A's resources. Each request must answer
 * 404, show none of A's data, and change no row of A (nor of B). Writes are sent twice: with a
 * body that would change the resource and with one that repeats its current values (a no-op
 * PATCH/PUT must not become a way to read another tenant's row).
 *
 * To cover a new route, add one entry to ROUTES (or LISTS); a new resource also needs an owner's
 * instance in `Owned` and its table in TENANT_TABLES.
 */

/** Every table holding tenant data: none of these rows may change while another tenant probes. */
const TENANT_TABLES = [
  'contacts', 'contact_notes', 'contact_followups', 'contact_communications', 'templates', 'media', 'messages', 'inbound_messages',
  'webhook_endpoints', 'webhook_deliveries', 'webhook_payloads', 'events', 'business_accounts', 'api_keys', 'campaigns', 'campaign_recipients',
] as const;

/** Tenant A's resources (as A's own API returned them), and B's own contact and image template. */
interface Owned {
  contact: Record<string, any>;
  note: Record<string, any>;
  followup: Record<string, any>;
  communication: Record<string, any>;
  template: Record<string, any>;
  draft: Record<string, any>;
  media: Record<string, any>;
  endpoint: Record<string, any>;
  delivery: Record<string, any>;
  campaign: Record<string, any>;
  mine: { contact: Record<string, any>; imageTemplate: string; campaign: Record<string, any> };
}

type Body = Record<string, unknown>;
/** A request aimed at A's resources (or at B's own lists); `body` may read A's current values. */
interface Route { method: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE'; path: (o: Owned) => string; body?: Body | ((o: Owned) => Body) }

const contactValues = (c: Record<string, any>) => ({
  first_name: c.first_name, last_name: c.last_name, phone: c.phone, email: c.email, company: c.company,
  job_title: c.job_title, status: c.status, tags: c.tags, custom_fields: c.custom_fields,
});
const followupValues = (f: Record<string, any>) => ({ title: f.title, due_at: f.due_at, done: f.done, notes: f.notes });
const endpointValues = (e: Record<string, any>) => ({ url: e.url, events: e.events, description: e.description, active: e.is_active });
const bodyParams = (...values: string[]) => [{ type: 'body', parameters: values.map((text) => ({ type: 'text', text })) }];
const DUE = '2031-05-01T09:00:00.000Z';

/** Routes aimed at one of A's resources: each answers 404 to B. */
const ROUTES: Route[] = [
  // Contacts
  { method: 'GET', path: (o) => `/contacts/${o.contact.id}` },
  { method: 'PATCH', path: (o) => `/contacts/${o.contact.id}`, body: { first_name: 'Hacked' } },
  { method: 'PATCH', path: (o) => `/contacts/${o.contact.id}`, body: (o) => ({ first_name: o.contact.first_name }) },
  { method: 'PATCH', path: (o) => `/contacts/${o.contact.id}`, body: (o) => contactValues(o.contact) },
  { method: 'PATCH', path: (o) => `/contacts/${o.contact.id}`, body: {} },
  { method: 'DELETE', path: (o) => `/contacts/${o.contact.id}` },
  // Notes and communications
  { method: 'GET', path: (o) => `/contacts/${o.contact.id}/notes` },
  { method: 'POST', path: (o) => `/contacts/${o.contact.id}/notes`, body: { content: 'Planted note' } },
  { method: 'POST', path: (o) => `/contacts/${o.contact.id}/notes`, body: (o) => ({ content: o.note.content }) },
  { method: 'GET', path: (o) => `/contacts/${o.contact.id}/communications` },
  // Follow-ups, through A's contact and through B's own contact
  { method: 'GET', path: (o) => `/contacts/${o.contact.id}/followups` },
  { method: 'POST', path: (o) => `/contacts/${o.contact.id}/followups`, body: { title: 'Planted', due_at: DUE } },
  { method: 'POST', path: (o) => `/contacts/${o.contact.id}/followups`, body: (o) => followupValues(o.followup) },
  { method: 'PATCH', path: (o) => `/contacts/${o.contact.id}/followups/${o.followup.id}`, body: { title: 'Hacked', done: true } },
  { method: 'PATCH', path: (o) => `/contacts/${o.contact.id}/followups/${o.followup.id}`, body: (o) => followupValues(o.followup) },
  { method: 'PATCH', path: (o) => `/contacts/${o.contact.id}/followups/${o.followup.id}`, body: {} },
  { method: 'PATCH', path: (o) => `/contacts/${o.mine.contact.id}/followups/${o.followup.id}`, body: { title: 'Hacked', done: true } },
  { method: 'PATCH', path: (o) => `/contacts/${o.mine.contact.id}/followups/${o.followup.id}`, body: (o) => followupValues(o.followup) },
  { method: 'DELETE', path: (o) => `/contacts/${o.contact.id}/followups/${o.followup.id}` },
  { method: 'DELETE', path: (o) => `/contacts/${o.mine.contact.id}/followups/${o.followup.id}` },
  // Templates: submitting A's draft would change it; re-submitting A's approved one would not
  { method: 'GET', path: (o) => `/templates/${o.template.id}` },
  { method: 'POST', path: (o) => `/templates/${o.draft.id}/submit` },
  { method: 'POST', path: (o) => `/templates/${o.template.id}/submit` },
  // Media
  { method: 'GET', path: (o) => `/media/${o.media.id}` },
  { method: 'DELETE', path: (o) => `/media/${o.media.id}` },
  // Webhook endpoints
  { method: 'GET', path: (o) => `/webhooks/${o.endpoint.id}` },
  { method: 'PUT', path: (o) => `/webhooks/${o.endpoint.id}`, body: { description: 'hijack', active: true } },
  { method: 'PUT', path: (o) => `/webhooks/${o.endpoint.id}`, body: (o) => endpointValues(o.endpoint) },
  { method: 'PUT', path: (o) => `/webhooks/${o.endpoint.id}`, body: (o) => ({ description: o.endpoint.description }) },
  { method: 'PUT', path: (o) => `/webhooks/${o.endpoint.id}`, body: {} },
  { method: 'DELETE', path: (o) => `/webhooks/${o.endpoint.id}` },
  { method: 'POST', path: (o) => `/webhooks/${o.endpoint.id}/rotate-secret` },
  { method: 'POST', path: (o) => `/webhooks/${o.endpoint.id}/test` },
  { method: 'GET', path: (o) => `/webhooks/${o.endpoint.id}/deliveries` },
  // Deliveries
  { method: 'POST', path: (o) => `/webhooks/deliveries/${o.delivery.id}/retry` },
  // Campaigns: A's draft (whose audience is A's contact's tag), every route, changing and no-op bodies
  { method: 'GET', path: (o) => `/campaigns/${o.campaign.id}` },
  { method: 'PUT', path: (o) => `/campaigns/${o.campaign.id}/audience`, body: { groups: ['hijack'], sources: [] } },
  { method: 'PUT', path: (o) => `/campaigns/${o.campaign.id}/audience`, body: (o) => ({ groups: o.campaign.audiences.map((a: any) => a.value), sources: [] }) },
  { method: 'GET', path: (o) => `/campaigns/${o.campaign.id}/audience/preview` },
  { method: 'POST', path: (o) => `/campaigns/${o.campaign.id}/audience/field-coverage`, body: { fields: ['first_name', 'custom_fields.code'] } },
  { method: 'POST', path: (o) => `/campaigns/${o.campaign.id}/preview`, body: {} },
  { method: 'POST', path: (o) => `/campaigns/${o.mine.campaign.id}/preview`, body: (o) => ({ sample_contact_id: o.contact.id }) },
  { method: 'POST', path: (o) => `/campaigns/${o.campaign.id}/send` },
  { method: 'POST', path: (o) => `/campaigns/${o.campaign.id}/schedule`, body: { scheduled_at: DUE } },
  { method: 'POST', path: (o) => `/campaigns/${o.campaign.id}/pause` },
  { method: 'POST', path: (o) => `/campaigns/${o.campaign.id}/resume` },
  { method: 'POST', path: (o) => `/campaigns/${o.campaign.id}/stop` },
  { method: 'POST', path: (o) => `/campaigns/${o.campaign.id}/refresh-metrics` },
  { method: 'GET', path: (o) => `/campaigns/${o.campaign.id}/errors` },
  { method: 'GET', path: (o) => `/campaigns/${o.campaign.id}/errors/131026` },
  { method: 'GET', path: (o) => `/campaigns/${o.campaign.id}/recipients` },
  { method: 'POST', path: (o) => `/campaigns/${o.campaign.id}/retarget`, body: {} },
  { method: 'POST', path: () => '/campaigns', body: (o) => ({ name: 'Stolen', template_id: o.template.id, audience: { groups: ['x'] },
    variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'static', value: 'a' }, { kind: 'static', value: 'b' }] }] } }) },
  // Messages: A's template by name, and A's media in B's own image template
  { method: 'POST', path: () => '/messages/template', body: (o) => ({ to: uniquePhone(), template_name: o.template.template_name, components: bodyParams('a', 'b') }) },
  { method: 'POST', path: () => '/messages/template', body: (o) => ({ to: o.contact.phone, template_name: o.template.template_name, language: o.template.language, components: bodyParams('a', 'b') }) },
  { method: 'POST', path: () => '/messages/template', body: (o) => ({ to: uniquePhone(), template_name: o.mine.imageTemplate,
    components: [{ type: 'header', parameters: [{ type: 'image', image: { media_id: o.media.id } }] }] }) },
];

/** B's own lists and searches: 200, and none of A's data in them. */
const LISTS: (Route & { check?: (json: any) => void })[] = [
  { method: 'GET', path: () => '/contacts' },
  { method: 'GET', path: (o) => `/contacts?search=${encodeURIComponent(o.contact.first_name)}` },
  { method: 'GET', path: () => '/contacts?status=lead' },
  { method: 'POST', path: () => '/contacts/search', body: (o) => ({ search_term: o.contact.first_name }) },
  { method: 'POST', path: () => '/contacts/search', body: (o) => ({ tag: o.contact.tags[0] }) },
  { method: 'GET', path: (o) => `/contacts/${o.mine.contact.id}/notes` },
  { method: 'GET', path: (o) => `/contacts/${o.mine.contact.id}/followups` },
  { method: 'GET', path: (o) => `/contacts/${o.mine.contact.id}/communications` },
  { method: 'GET', path: () => '/templates' },
  { method: 'GET', path: () => '/media' },
  { method: 'GET', path: () => '/webhooks' },
  { method: 'GET', path: () => '/webhooks/deliveries' },
  { method: 'GET', path: () => '/webhooks/deliveries?status=pending' },
  { method: 'GET', path: () => '/webhooks/deliveries/metrics', check: (json) => expect(json.total).toBe(0) },
  { method: 'GET', path: () => '/campaigns', check: (json) => expect(json.data.map((c: any) => c.name)).toEqual(['Mine']) },
  { method: 'GET', path: (o) => `/campaigns/${o.mine.campaign.id}/audience/preview`, check: (json) => expect(json.total).toBe(0) },
];

describe('tenant isolation of every route', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp(); });
  afterAll(async () => { await t?.close(); });

  /** All of a tenant's rows, table by table, in a stable order. */
  async function snapshot(tenantId: string): Promise<string[]> {
    const parts = TENANT_TABLES.map((table) => sql`SELECT ${table}::text AS t, to_jsonb(x)::text AS row FROM ${sql.table(table)} x WHERE x.tenant_id = ${tenantId}`);
    const { rows } = await sql<{ t: string; row: string }>`${sql.join(parts, sql` UNION ALL `)}`.execute(t.deps.db);
    return rows.map((r) => `${r.t} ${r.row}`).sort();
  }

  async function ok(tenant: TestTenant, method: string, path: string, body?: unknown, status = 201) {
    const res = await call(t.app, tenant, method, path, body);
    expect(res.statusCode, `${method} ${path}: ${res.body}`).toBe(status);
    return res.json();
  }

  /** A has one of everything; each piece is settled (no worker or callback will change it later). */
  async function ownerWithEverything(a: TestTenant): Promise<Omit<Owned, 'mine'>> {
    const tag = String(randomInt(10_000_000, 99_999_999));
    // A closed local port: an attempt, were one ever made, fails at once.
    const { data: endpoint } = await ok(a, 'POST', '/webhooks', { url: `https://127.0.0.1:1/hooks/${tag}`, events: ['contact.created'], description: `Hook ${tag}` });
    const contact = await ok(a, 'POST', '/contacts', {
      first_name: `Secret${tag}`, last_name: 'Agent', phone: uniquePhone(), email: `secret-${tag}@example.com`, company: `Acme ${tag}`,
      job_title: 'Spy', status: 'lead', tags: [`vip${tag}`], custom_fields: { tier: 'gold', code: tag },
    });
    // Disabled so that no deliverer (another test file runs one) claims the queued delivery again.
    await ok(a, 'PUT', `/webhooks/${endpoint.id}`, { active: false }, 200);
    const delivery = await eventually(async () => {
      const row = await t.deps.db.selectFrom('webhook_deliveries').selectAll().where('endpoint_id', '=', endpoint.id).executeTakeFirst();
      return row && row.lease_until === null && row;
    });
    const settled = await ok(a, 'GET', `/webhooks/${endpoint.id}`, undefined, 200);
    const note = await ok(a, 'POST', `/contacts/${contact.id}/notes`, { content: `Note ${tag}` });
    const followup = await ok(a, 'POST', `/contacts/${contact.id}/followups`, { title: `Call ${tag}`, due_at: DUE, notes: `About ${tag}` });
    const template = await createApprovedTemplate(t.app, a);
    const draft = await ok(a, 'POST', '/templates', { template_name: uniqueTemplateName('draft'), language: 'en', category: 'UTILITY', components: [{ type: 'BODY', text: 'Hi' }] });
    const upload = multipart({ type: 'image' }, { name: `logo-${tag}.png`, type: 'image/png', bytes: Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), randomBytes(64)]) });
    const media = (await t.app.inject({ method: 'POST', url: `${API}/media`, headers: { ...a.headers, ...upload.headers }, payload: upload.payload })).json();
    await ok(a, 'POST', '/messages/template', { to: contact.phone, template_name: template.template_name, components: bodyParams('x', 'y') }, 200);
    // The sandbox reports sent, delivered, read: wait for the last, so the rows are final.
    await eventually(async () => (await eventsOf(t.deps, a.id, 'message.read')).length === 1);
    const [communication] = (await ok(a, 'GET', `/contacts/${contact.id}/communications`, undefined, 200)).data;
    expect(communication).toBeDefined();
    const created = await ok(a, 'POST', '/campaigns', { name: `Campaign ${tag}`, template_id: template.id, audience: { groups: contact.tags },
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: tag }] }] } });
    const campaign = await ok(a, 'GET', `/campaigns/${created.id}`, undefined, 200);
    return { contact, note, followup, communication, template, draft, media, endpoint: settled, delivery, campaign };
  }

  it('another tenant gets 404 from every route aimed at A\'s resources, sees none of A\'s data, and changes nothing', async () => {
    const a = await createConnectedTenant(t.app);
    const b = await createConnectedTenant(t.app);
    const ofOwner = await ownerWithEverything(a);
    const owned: Owned = {
      ...ofOwner,
      mine: {
        contact: await ok(b, 'POST', '/contacts', { first_name: 'Mine', phone: uniquePhone() }),
        imageTemplate: (await createApprovedTemplate(t.app, b, { components: [{ type: 'HEADER', format: 'IMAGE' }, { type: 'BODY', text: 'Hi' }] })).template_name,
        // B's own campaign, audience = A's contact's tag: it must resolve to none of A's contacts.
        campaign: await ok(b, 'POST', '/campaigns', { name: 'Mine', template_id: (await createApprovedTemplate(t.app, b)).id, audience: { groups: ofOwner.contact.tags },
          variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'static', value: 'a' }, { kind: 'static', value: 'b' }] }] } }),
      },
    };
    // Anything of A's that B's answers must not contain: ids and distinctive values (not words like
    // "approved" or timestamps, which any answer may contain).
    const { mine: _mine, ...ofA } = owned;
    const secrets = [...new Set(Object.values(ofA).flatMap((r) => Object.values(r)).flat()
      .filter((v): v is string => typeof v === 'string' && v.length >= 8 && /\d/.test(v) && !/^\d{4}-\d\d-\d\dT/.test(v)))];
    expect(secrets).toEqual(expect.arrayContaining([owned.contact.id, owned.contact.email, owned.endpoint.url, owned.template.template_name]));
    const aBefore = await snapshot(a.id);
    const bBefore = await snapshot(b.id);
    const bodyOf = (route: Route) => (typeof route.body === 'function' ? route.body(owned) : route.body);

    for (const route of ROUTES) {
      const path = route.path(owned);
      const body = bodyOf(route);
      const res = await call(t.app, b, route.method, path, body);
      const what = `${route.method} ${path} ${JSON.stringify(body) ?? ''}`;
      expect(res.statusCode, `${what}: ${res.body}`).toBe(404);
      expectError(res, 404, 'NOT_FOUND');
      // B sent A's ids itself; what matters is that nothing of A's comes back beyond them.
      const echoed = secrets.filter((s) => !path.includes(s) && !JSON.stringify(body ?? '').includes(s));
      for (const s of echoed) expect(res.body, what).not.toContain(s);
      expect(await snapshot(a.id), what).toEqual(aBefore);
      expect(await snapshot(b.id), what).toEqual(bBefore);
    }

    for (const route of LISTS) {
      const path = route.path(owned);
      const body = bodyOf(route);
      const res = await call(t.app, b, route.method, path, body);
      const what = `${route.method} ${path}`;
      expect(res.statusCode, `${what}: ${res.body}`).toBe(200);
      for (const s of secrets.filter((x) => !path.includes(x) && !JSON.stringify(body ?? '').includes(x))) expect(res.body, what).not.toContain(s);
      route.check?.(res.json());
    }
    expect(await snapshot(a.id)).toEqual(aBefore);
    expect(await snapshot(b.id)).toEqual(bBefore);

    // The owner still has all of it, unchanged: the probes aimed at live resources.
    expect(await ok(a, 'GET', `/contacts/${owned.contact.id}`, undefined, 200)).toEqual(owned.contact);
    expect(await ok(a, 'GET', `/webhooks/${owned.endpoint.id}`, undefined, 200)).toEqual(owned.endpoint);
    expect(await ok(a, 'GET', `/media/${owned.media.id}`, undefined, 200)).toEqual(owned.media);
    expect(await ok(a, 'GET', `/templates/${owned.template.id}`, undefined, 200)).toEqual(owned.template);
    expect((await ok(a, 'GET', `/contacts/${owned.contact.id}/followups`, undefined, 200)).data).toEqual([owned.followup]);
  });
});
