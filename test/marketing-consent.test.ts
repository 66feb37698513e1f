import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, call, eventually } from './helpers/app.ts';
import { CAMPAIGN_ENV, createContacts, runCampaignWorkers, uniqueTag } from './helpers/campaigns.ts';
import { createApprovedTemplate, createConnectedTenant, eventsOf, sandboxControl, startUpstreamApp, type UpstreamTenant, type UpstreamTestApp } from './helpers/upstream.ts';

/**
 * Marketing consent (issue 23 §1) on the real database, the dispatcher and the sandbox over HTTP:
 * every way a contact opts out (Meta's signed user_preferences callback, a keyword, 131050 in the
 * send's answer or by callback, PATCH) makes MARKETING campaigns skip it and leaves UTILITY ones
 * alone; the US rule and the frequency cap skip too; previews, coverage and the pre-flight count them.
 */
const OPT_OUT_WAIT_MS = 30_000;
const WAITS = { timeout: OPT_OUT_WAIT_MS + 30_000 };

describe('marketing consent', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp({ ...CAMPAIGN_ENV, RATE_LIMIT_PER_MINUTE: '100000' }); });
  afterAll(async () => { await t?.close(); });

  let seq = Math.floor(Math.random() * 900_000);
  /** A UK mobile number (not +1: the US rule would skip it). */
  const ukPhone = () => `+447400${String(100_000 + (seq++ % 900_000))}`;
  const mapping = { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'X' }] }] };
  const sendsTo = async (to: string) => (await sandboxControl(t.sandbox!, 'GET', `/__sandbox/sends?to=${encodeURIComponent(to)}`)).json.data as unknown[];
  const contactOf = async (tenant: UpstreamTenant, id: string) => (await call(t.app, tenant, 'GET', `/contacts/${id}`)).json();
  const settings = (tenantId: string, payload: unknown) => t.app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${tenantId}/marketing-settings`, headers: adminHeaders, payload: payload as object });
  const updatedEvents = async (tenant: UpstreamTenant, contactId: string) => (await eventsOf(t.deps, tenant.id, 'contact.updated')).filter((e) => (e.data as { id: string }).id === contactId);
  const preferences = (tenant: UpstreamTenant, from: string, value: 'stop' | 'resume', extra: Record<string, unknown> = {}) =>
    sandboxControl(t.sandbox!, 'POST', '/__sandbox/user_preferences', { to_phone_number_id: tenant.phoneNumberId, from, value, ...extra });
  const inbound = (tenant: UpstreamTenant, from: string, text: string, extra: Record<string, unknown> = {}) =>
    sandboxControl(t.sandbox!, 'POST', '/__sandbox/inbound', { to_phone_number_id: tenant.phoneNumberId, from, text, ...extra });
  // Inbound callbacks come from the sandbox over HTTP: with the multi-node drill running beside this
  // file on two cores, 10 s was not always enough. A wait that ends says what it saw (the tests that
  // wait give it time to: OPT_OUT_WAIT_MS is below their timeout).
  const optedOut = async (tenant: UpstreamTenant, id: string, value: boolean) => {
    try {
      return await eventually(async () => {
        const c = await contactOf(tenant, id);
        return c.marketing_opt_out === value ? c : null;
      }, OPT_OUT_WAIT_MS);
    } catch {
      const contact = await contactOf(tenant, id);
      const inbound = await t.deps.db.selectFrom('inbound_messages').select(['from_phone', 'text', 'received_at']).where('tenant_id', '=', tenant.id).execute();
      const { delivered, dropped } = t.sandbox!.state.deliverer;
      throw new Error(`contact ${id}: marketing_opt_out ${contact.marketing_opt_out}, not ${value}, after ${OPT_OUT_WAIT_MS} ms; the tenant's inbound messages ${JSON.stringify(inbound)}; `
        + `sandbox callbacks delivered ${delivered}, dropped ${dropped}, all settled ${t.sandbox!.state.deliverer.idle()}`);
    }
  };

  /** Runs a campaign of `category` to `tag` to its end; returns it with its recipients. */
  async function runCampaign(tenant: UpstreamTenant, templateId: string, tag: string) {
    const created = await call(t.app, tenant, 'POST', '/campaigns', { name: 'Consent', template_id: templateId, audience: { groups: [tag] }, variable_mapping: mapping });
    expect(created.statusCode, created.body).toBe(201);
    const id = created.json().id as string;
    const before = (await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json();
    expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/send`)).statusCode).toBe(200);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const done = await eventually(async () => {
        const c = (await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json();
        return c.status === 'COMPLETED' ? c : null;
      }, 30_000);
      const recipients = (await call(t.app, tenant, 'GET', `/campaigns/${id}/recipients?limit=100`)).json().data as { phone_number: string; status: string; skip_reason: string | null }[];
      return { id, before, done, recipients, byPhone: new Map(recipients.map((r) => [r.phone_number, r])) };
    } finally {
      await workers.stop();
    }
  }

  it('PATCH opts a contact out (source api) and back in, on every read, with one contact.updated per change', async () => {
    const tenant = await createConnectedTenant(t.app);
    const phone = ukPhone();
    const created = await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Ana', phone });
    expect(created.json()).toMatchObject({ marketing_opt_out: false, marketing_opt_out_at: null, marketing_opt_out_source: null });
    const id = created.json().id;
    const patched = await call(t.app, tenant, 'PATCH', `/contacts/${id}`, { marketing_opt_out: true });
    expect(patched.statusCode, patched.body).toBe(200);
    expect(patched.json()).toMatchObject({ marketing_opt_out: true, marketing_opt_out_source: 'api' });
    expect(Date.parse(patched.json().marketing_opt_out_at)).toBeGreaterThan(Date.now() - 60_000);
    // The same value again is no change: no event.
    expect((await call(t.app, tenant, 'PATCH', `/contacts/${id}`, { marketing_opt_out: true })).statusCode).toBe(200);
    expect(await updatedEvents(tenant, id)).toHaveLength(1);
    expect((await updatedEvents(tenant, id))[0].data).toMatchObject({ id, marketing_opt_out: true, marketing_opt_out_source: 'api' });
    // List and search show it.
    const listed = (await call(t.app, tenant, 'GET', '/contacts')).json().data.find((c: { id: string }) => c.id === id);
    expect(listed).toMatchObject({ marketing_opt_out: true, marketing_opt_out_source: 'api' });
    const searched = (await call(t.app, tenant, 'POST', '/contacts/search', { search_term: 'ana' })).json().data[0];
    expect(searched).toMatchObject({ id, marketing_opt_out: true });
    // With another field in the same PATCH: one event.
    const back = await call(t.app, tenant, 'PATCH', `/contacts/${id}`, { marketing_opt_out: false, company: 'Acme' });
    expect(back.json()).toMatchObject({ marketing_opt_out: false, marketing_opt_out_at: null, marketing_opt_out_source: null, company: 'Acme' });
    expect(await updatedEvents(tenant, id)).toHaveLength(2);
    // Not a boolean: 400, nothing written.
    const bad = await call(t.app, tenant, 'PATCH', `/contacts/${id}`, { marketing_opt_out: 'yes' });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error.code).toBe('VALIDATION_ERROR');
  });

  it('an opted-out contact (PATCH, user_preferences, keyword, 131050 in a single send\'s or a campaign send\'s answer and by callback) is skipped by a MARKETING campaign and sent by a UTILITY or AUTHENTICATION one', { timeout: 90_000 }, async () => {
    const tenant = await createConnectedTenant(t.app);
    const marketing = await createApprovedTemplate(t.app, tenant, { category: 'MARKETING' });
    const utility = await createApprovedTemplate(t.app, tenant, { category: 'UTILITY' });
    const tag = uniqueTag();
    const phones = { patch: ukPhone(), prefs: ukPhone(), keyword: ukPhone(), sync: ukPhone(), campaignSync: ukPhone(), callback: ukPhone(), ok: ukPhone() };
    const contacts = await createContacts(t, tenant, Object.entries(phones).map(([name, phone]) => ({ first_name: name, phone, tags: [tag] })));
    const idOf = new Map(contacts.map((c) => [c.phone, c.id]));

    expect((await call(t.app, tenant, 'PATCH', `/contacts/${idOf.get(phones.patch)}`, { marketing_opt_out: true })).statusCode).toBe(200);
    expect((await preferences(tenant, phones.prefs, 'stop')).status).toBe(200);
    expect((await optedOut(tenant, idOf.get(phones.prefs)!, true))).toMatchObject({ marketing_opt_out_source: 'user_preferences' });
    expect((await inbound(tenant, phones.keyword, '  Stop ')).status).toBe(200);
    expect((await optedOut(tenant, idOf.get(phones.keyword)!, true))).toMatchObject({ marketing_opt_out_source: 'keyword' });
    // 131050 in the send's answer (a single send) and by a failed status callback (a campaign send).
    await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: phones.sync, outcome: 'reject', error_code: 131050 });
    const refused = await call(t.app, tenant, 'POST', '/messages/template', {
      to: phones.sync, template_name: marketing.template_name, language: 'en', components: [{ type: 'body', parameters: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }],
    });
    expect(refused.statusCode, refused.body).toBe(400);
    expect(await contactOf(tenant, idOf.get(phones.sync)!)).toMatchObject({ marketing_opt_out: true, marketing_opt_out_source: 'error_131050' });
    await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: phones.campaignSync, outcome: 'reject', error_code: 131050 });
    await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: phones.callback, outcome: 'fail', error_code: 131050 });
    const refusedTag = uniqueTag();
    for (const name of ['campaignSync', 'callback'] as const) await call(t.app, tenant, 'PATCH', `/contacts/${idOf.get(phones[name])}`, { tags: [tag, refusedTag] });
    const first = await runCampaign(tenant, marketing.id, refusedTag);
    expect(first.done.stats).toMatchObject({ total: 2, failed: 2 });
    for (const name of ['campaignSync', 'callback'] as const) {
      expect((await optedOut(tenant, idOf.get(phones[name])!, true)), name).toMatchObject({ marketing_opt_out_source: 'error_131050' });
    }
    for (const phone of [phones.sync, phones.campaignSync, phones.callback]) await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: phone, outcome: 'ok' });
    // Each source's change reached the tenant as one contact.updated carrying it (the tags PATCH above emits its own, opted in).
    for (const [name, source] of [['patch', 'api'], ['prefs', 'user_preferences'], ['keyword', 'keyword'], ['sync', 'error_131050'], ['campaignSync', 'error_131050'], ['callback', 'error_131050']] as const) {
      const optOuts = (await updatedEvents(tenant, idOf.get(phones[name])!)).map((e) => e.data as { marketing_opt_out: boolean }).filter((d) => d.marketing_opt_out);
      expect(optOuts, name).toEqual([expect.objectContaining({ marketing_opt_out_source: source })]);
    }
    const sentBefore = new Map(await Promise.all(Object.values(phones).map(async (p) => [p, (await sendsTo(p)).length] as const)));

    const m = await runCampaign(tenant, marketing.id, tag);
    // Counted before the send: pre-flight, preview and coverage.
    expect(m.before.preflight.excluded).toEqual({ opted_out: 6, marketing_blocked_country: 0, frequency_cap: 0 });
    expect(m.before.preflight.audience_size).toBe(7);
    expect(m.before.preflight.warnings.join(' ')).toMatch(/6 of 7 recipients will be skipped/);
    expect(m.done.stats).toMatchObject({ total: 7, skipped: 6, failed: 0, pending: 0, sent: 1 });
    for (const [name, phone] of Object.entries(phones)) {
      expect(m.byPhone.get(phone), name).toMatchObject(name === 'ok' ? { status: expect.stringMatching(/sent|delivered|read/), skip_reason: null } : { status: 'skipped', skip_reason: 'opted_out' });
      expect((await sendsTo(phone)).length - sentBefore.get(phone)!, name).toBe(name === 'ok' ? 1 : 0);
    }
    expect((await eventsOf(t.deps, tenant.id, 'message.failed')).filter((e) => (e.data as { campaign_id: string }).campaign_id === m.id)).toEqual([]);
    const preview = (await call(t.app, tenant, 'GET', `/campaigns/${m.id}/audience/preview`)).json();
    expect(preview).toMatchObject({ total: 7, excluded: { opted_out: 6, marketing_blocked_country: 0, frequency_cap: 0 } });
    const csv = await call(t.app, tenant, 'GET', `/campaigns/${m.id}/recipients`, undefined, { accept: 'text/csv' });
    const lines = csv.body.trimEnd().split('\n');
    const skipReason = lines[0].split(',').indexOf('skip_reason');
    expect(skipReason).toBeGreaterThan(0);
    expect(lines.filter((l) => l.split(',')[skipReason] === 'opted_out')).toHaveLength(6);

    const u = await runCampaign(tenant, utility.id, tag);
    expect(u.before.preflight.excluded).toEqual({ opted_out: 0, marketing_blocked_country: 0, frequency_cap: 0 });
    expect(u.done.stats).toMatchObject({ total: 7, skipped: 0, failed: 0 });
    for (const phone of Object.values(phones)) expect(u.byPhone.get(phone)!.skip_reason).toBeNull();
    // Nor AUTHENTICATION (here the same template, recategorised by Meta).
    expect((await sandboxControl(t.sandbox!, 'POST', '/__sandbox/templates/category', { name: utility.template_name, language: 'en', waba_id: tenant.wabaId, new_category: 'AUTHENTICATION' })).status).toBe(200);
    await eventually(async () => (await call(t.app, tenant, 'GET', `/templates/${utility.id}`)).json().category === 'AUTHENTICATION');
    const a = await runCampaign(tenant, utility.id, tag);
    expect(a.before.preflight.excluded).toEqual({ opted_out: 0, marketing_blocked_country: 0, frequency_cap: 0 });
    expect(a.done.stats).toMatchObject({ total: 7, skipped: 0, failed: 0 });
  });

  it('resume and START clear the opt-out; an older stop redelivered after a newer resume changes nothing; contact.updated once per change', WAITS, async () => {
    const tenant = await createConnectedTenant(t.app);
    const [prefs, keyword] = [ukPhone(), ukPhone()];
    const [a, b] = await createContacts(t, tenant, [{ first_name: 'P', phone: prefs }, { first_name: 'K', phone: keyword }]);
    const now = Math.floor(Date.now() / 1000);
    await preferences(tenant, prefs, 'stop', { timestamp: now - 100 });
    await optedOut(tenant, a.id, true);
    await preferences(tenant, prefs, 'stop', { timestamp: now - 90 }); // the same state: no event
    await preferences(tenant, prefs, 'resume', { timestamp: now - 50 });
    const resumed = await optedOut(tenant, a.id, false);
    expect(resumed).toMatchObject({ marketing_opt_out_at: null, marketing_opt_out_source: null });
    // Meta redelivers the first stop (older than the resume): stale.
    await preferences(tenant, prefs, 'stop', { timestamp: now - 100 });
    // A later callback in the same order shows the stale one was handled (callbacks of one number arrive in order here).
    await preferences(tenant, prefs, 'resume', { timestamp: now - 40 });
    await eventually(async () => (await t.deps.db.selectFrom('contacts').select('marketing_consent_changed_at').where('id', '=', a.id).executeTakeFirstOrThrow())
      .marketing_consent_changed_at!.getTime() === (now - 40) * 1000);
    expect(await contactOf(tenant, a.id)).toMatchObject({ marketing_opt_out: false });
    expect((await updatedEvents(tenant, a.id)).map((e) => (e.data as { marketing_opt_out: boolean }).marketing_opt_out)).toEqual([true, false]);

    await inbound(tenant, keyword, 'UNSUBSCRIBE');
    await optedOut(tenant, b.id, true);
    await inbound(tenant, keyword, 'stop please'); // not exactly a keyword
    await inbound(tenant, keyword, 's t a r t');
    await optedOut(tenant, b.id, false);
    expect((await updatedEvents(tenant, b.id)).map((e) => (e.data as { marketing_opt_out_source: string | null }).marketing_opt_out_source)).toEqual(['keyword', null]);
  });

  it('a user_preferences callback naming only the business-scoped user id finds the contact by an earlier message of that user', WAITS, async () => {
    const tenant = await createConnectedTenant(t.app);
    const phone = ukPhone();
    const [contact] = await createContacts(t, tenant, [{ first_name: 'U', phone }]);
    const userId = `GB.${Date.now()}${seq++}`;
    await inbound(tenant, phone, 'hello', { from_user_id: userId });
    await eventually(async () => (await t.deps.db.selectFrom('inbound_messages').select('id').where('tenant_id', '=', tenant.id).where('from_user_id', '=', userId).executeTakeFirst()) ?? null);
    expect((await sandboxControl(t.sandbox!, 'POST', '/__sandbox/user_preferences', { to_phone_number_id: tenant.phoneNumberId, from_user_id: userId, value: 'stop' })).status).toBe(200);
    expect(await optedOut(tenant, contact.id, true)).toMatchObject({ marketing_opt_out_source: 'user_preferences' });
  });

  it('tenant isolation: a user_preferences callback or keyword to one tenant\'s number leaves another tenant\'s contact with the same phone alone', WAITS, async () => {
    const [mine, other] = [await createConnectedTenant(t.app), await createConnectedTenant(t.app)];
    const phone = ukPhone();
    const [a] = await createContacts(t, mine, [{ first_name: 'A', phone }]);
    const [b] = await createContacts(t, other, [{ first_name: 'B', phone }]);
    await preferences(mine, phone, 'stop');
    await optedOut(mine, a.id, true);
    await inbound(other, phone, 'hello'); // a later callback to the other tenant, handled after the first
    await eventually(async () => (await eventsOf(t.deps, other.id, 'message.received')).length === 1);
    expect(await contactOf(other, b.id)).toMatchObject({ marketing_opt_out: false });
    expect(await updatedEvents(other, b.id)).toEqual([]);
    // Another tenant's contact is a 404 for PATCH, and stays as it was.
    expect((await call(t.app, other, 'PATCH', `/contacts/${a.id}`, { marketing_opt_out: false })).statusCode).toBe(404);
    expect(await contactOf(mine, a.id)).toMatchObject({ marketing_opt_out: true });
  });

  it('US numbers are skipped from MARKETING campaigns (marketing_blocked_country) unless the operator switches the rule off; Canadian +1 numbers are not', { timeout: 60_000 }, async () => {
    const tenant = await createConnectedTenant(t.app);
    const marketing = await createApprovedTemplate(t.app, tenant, { category: 'MARKETING' });
    const tag = uniqueTag();
    const [us, ca, uk] = ['+14155550123', '+16042112345', ukPhone()];
    await createContacts(t, tenant, [{ first_name: 'US', phone: us, tags: [tag] }, { first_name: 'CA', phone: ca, tags: [tag] }, { first_name: 'UK', phone: uk, tags: [tag] }]);
    // Before sending, the audience preview and the field coverage count whom it will skip, and why.
    const draft = (await call(t.app, tenant, 'POST', '/campaigns', { name: 'Draft', template_id: marketing.id, audience: { groups: [tag] }, variable_mapping: mapping })).json().id;
    expect((await call(t.app, tenant, 'GET', `/campaigns/${draft}/audience/preview`)).json()).toMatchObject({ total: 3, excluded: { opted_out: 0, marketing_blocked_country: 1, frequency_cap: 0 } });
    expect((await call(t.app, tenant, 'POST', `/campaigns/${draft}/audience/field-coverage`, { fields: ['first_name'] })).json())
      .toMatchObject({ total_recipients: 3, excluded: { opted_out: 0, marketing_blocked_country: 1, frequency_cap: 0 } });
    const blocked = await runCampaign(tenant, marketing.id, tag);
    expect(blocked.before.preflight.excluded).toEqual({ opted_out: 0, marketing_blocked_country: 1, frequency_cap: 0 });
    expect(blocked.done.stats).toMatchObject({ total: 3, skipped: 1 });
    expect(blocked.byPhone.get(us)).toMatchObject({ status: 'skipped', skip_reason: 'marketing_blocked_country' });
    expect(blocked.byPhone.get(ca)!.skip_reason).toBeNull();
    expect(await sendsTo(us)).toHaveLength(0);

    const off = await settings(tenant.id, { block_us_marketing: false });
    expect(off.statusCode, off.body).toBe(200);
    expect(off.json()).toEqual({ opt_out_keywords: ['STOP', 'UNSUBSCRIBE'], opt_in_keywords: ['START'], block_us_marketing: false, frequency_cap: null });
    const allowed = await runCampaign(tenant, marketing.id, tag);
    expect(allowed.done.stats).toMatchObject({ total: 3, skipped: 0 });
    expect(await sendsTo(us)).toHaveLength(1);
  });

  it('the frequency cap skips contacts sent at least max_messages marketing templates in the window (single sends and campaigns), not UTILITY campaigns', { timeout: 60_000 }, async () => {
    const tenant = await createConnectedTenant(t.app);
    const marketing = await createApprovedTemplate(t.app, tenant, { category: 'MARKETING' });
    const utility = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    const [single, fresh] = [ukPhone(), ukPhone()];
    await createContacts(t, tenant, [{ first_name: 'S', phone: single, tags: [tag] }, { first_name: 'F', phone: fresh, tags: [tag] }]);
    expect((await settings(tenant.id, { frequency_cap: { max_messages: 1, days: 7 } })).json().frequency_cap).toEqual({ max_messages: 1, days: 7 });
    // A utility single send does not count; a marketing one does.
    const body = (name: string) => ({ to: single, template_name: name, language: 'en', components: [{ type: 'body', parameters: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }] });
    expect((await call(t.app, tenant, 'POST', '/messages/template', body(utility.template_name))).statusCode).toBe(200);
    const pre = (await call(t.app, tenant, 'GET', `/campaigns/${(await call(t.app, tenant, 'POST', '/campaigns', { name: 'x', template_id: marketing.id, audience: { groups: [tag] }, variable_mapping: mapping })).json().id}`)).json();
    expect(pre.preflight.excluded.frequency_cap).toBe(0);
    expect((await call(t.app, tenant, 'POST', '/messages/template', body(marketing.template_name))).statusCode).toBe(200);

    const capped = await runCampaign(tenant, marketing.id, tag);
    expect(capped.before.preflight.excluded).toEqual({ opted_out: 0, marketing_blocked_country: 0, frequency_cap: 1 });
    expect(capped.byPhone.get(single)).toMatchObject({ status: 'skipped', skip_reason: 'frequency_cap' });
    expect(capped.byPhone.get(fresh)!.skip_reason).toBeNull();
    // The campaign's own send to `fresh` counts now: the next MARKETING campaign skips both.
    const next = await runCampaign(tenant, marketing.id, tag);
    expect(next.done.stats).toMatchObject({ total: 2, skipped: 2 });
    const coverage = (await call(t.app, tenant, 'POST', `/campaigns/${next.id}/audience/field-coverage`, { fields: ['first_name'] })).json();
    expect(coverage).toMatchObject({ total_recipients: 2, excluded: { frequency_cap: 2 } });
    const u = await runCampaign(tenant, utility.id, tag);
    expect(u.done.stats).toMatchObject({ total: 2, skipped: 0 });
    // Switched off: nobody is capped.
    expect((await settings(tenant.id, { frequency_cap: null })).json().frequency_cap).toBeNull();
    expect((await runCampaign(tenant, marketing.id, tag)).done.stats).toMatchObject({ total: 2, skipped: 0 });
  });

  it('a recipient who opts out after materialisation is skipped when claimed (MARKETING)', { timeout: 60_000 }, async () => {
    const tenant = await createConnectedTenant(t.app);
    const marketing = await createApprovedTemplate(t.app, tenant, { category: 'MARKETING' });
    const tag = uniqueTag();
    const [late, ok] = [ukPhone(), ukPhone()];
    const contacts = await createContacts(t, tenant, [{ first_name: 'L', phone: late, tags: [tag] }, { first_name: 'O', phone: ok, tags: [tag] }]);
    const created = await call(t.app, tenant, 'POST', '/campaigns', { name: 'Late', template_id: marketing.id, audience: { groups: [tag] }, variable_mapping: mapping });
    const id = created.json().id;
    // Sent (materialised) with no dispatcher running yet, then the contact opts out.
    expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/send`)).json().stats).toMatchObject({ total: 2, pending: 2, skipped: 0 });
    await call(t.app, tenant, 'PATCH', `/contacts/${contacts.find((c) => c.phone === late)!.id}`, { marketing_opt_out: true });
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const done = await eventually(async () => {
        const c = (await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json();
        return c.status === 'COMPLETED' ? c : null;
      }, 30_000);
      expect(done.stats).toMatchObject({ total: 2, skipped: 1, pending: 0 });
      expect(done.preflight.excluded).toEqual({ opted_out: 1, marketing_blocked_country: 0, frequency_cap: 0 });
      expect(await sendsTo(late)).toHaveLength(0);
      expect(await sendsTo(ok)).toHaveLength(1);
      expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/refresh-metrics`)).json().stats).toMatchObject({ total: 2, skipped: 1, pending: 0 });
    } finally {
      await workers.stop();
    }
  });

  it('operator marketing-settings: defaults, partial PATCH, normalised keywords, custom keywords, 400s, 404, 401', WAITS, async () => {
    const tenant = await createConnectedTenant(t.app);
    const url = `/admin/v1/tenants/${tenant.id}/marketing-settings`;
    const got = await t.app.inject({ method: 'GET', url, headers: adminHeaders });
    expect(got.json()).toEqual({ opt_out_keywords: ['STOP', 'UNSUBSCRIBE'], opt_in_keywords: ['START'], block_us_marketing: true, frequency_cap: null });
    const patched = await settings(tenant.id, { opt_out_keywords: ['baja', ' Stop ', 'STOP'] });
    expect(patched.json()).toEqual({ opt_out_keywords: ['BAJA', 'STOP'], opt_in_keywords: ['START'], block_us_marketing: true, frequency_cap: null });
    expect((await t.app.inject({ method: 'GET', url, headers: adminHeaders })).json()).toEqual(patched.json());

    const expect400 = async (payload: unknown, loc: (string | number)[]) => {
      const res = await settings(tenant.id, payload);
      expect(res.statusCode, res.body).toBe(400);
      expect(res.json()).toMatchObject({ success: false, error: { code: 'VALIDATION_ERROR' } });
      expect(res.json().error.details[0].loc).toEqual(loc);
    };
    await expect400({ opt_in_keywords: ['baja'] }, ['body', 'opt_in_keywords']);
    await expect400({ opt_out_keywords: ['   '] }, ['body', 'opt_out_keywords', 0]);
    await expect400({ frequency_cap: { max_messages: 0, days: 7 } }, ['body', 'frequency_cap']);
    await expect400({ frequency_cap: { max_messages: 2 } }, ['body', 'frequency_cap']);
    await expect400({ frequency_cap: { max_messages: 2, days: 366 } }, ['body', 'frequency_cap']);
    await expect400({ block_us_marketing: 'no' }, ['body', 'block_us_marketing']);
    expect((await t.app.inject({ method: 'GET', url, headers: adminHeaders })).json()).toEqual(patched.json());
    expect((await t.app.inject({ method: 'GET', url: '/admin/v1/tenants/00000000-0000-4000-8000-000000000000/marketing-settings', headers: adminHeaders })).statusCode).toBe(404);
    expect((await t.app.inject({ method: 'PATCH', url, payload: { block_us_marketing: false } })).statusCode).toBe(401);

    // The custom keyword opts out; the old default UNSUBSCRIBE no longer does.
    const [a, b] = [ukPhone(), ukPhone()];
    const [ca, cb] = await createContacts(t, tenant, [{ first_name: 'A', phone: a }, { first_name: 'B', phone: b }]);
    await inbound(tenant, b, 'unsubscribe');
    await inbound(tenant, a, 'Baja');
    await optedOut(tenant, ca.id, true);
    expect(await contactOf(tenant, cb.id)).toMatchObject({ marketing_opt_out: false });
  });
});
