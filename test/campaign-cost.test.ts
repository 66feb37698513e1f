import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { foldCostMoves } from '../src/modules/campaigns/campaigns.cost.ts';
import { adminHeaders, call, eventually } from './helpers/app.ts';
import { CAMPAIGN_ENV, createContacts, runCampaignWorkers, uniqueTag } from './helpers/campaigns.ts';
import {
  createApprovedTemplate, createConnectedTenant, postCallback, sandboxControl, startUpstreamApp, statusCallback, type UpstreamTenant, type UpstreamTestApp,
} from './helpers/upstream.ts';

// Rates of Meta's USD card effective 2026-10-01 (migration 0018, docs/rate-cards/meta-usd-2026-10-01.csv).
const MARKETING = { Brazil: 0.0625, India: 0.0118, 'United Kingdom': 0.0635, 'North America': 0.025 };
const UTILITY_INDIA = 0.0014;

const AUDIENCE = [
  { first_name: 'Ana', phone: '+5511987650001' },
  { first_name: 'Bia', phone: '+5511987650002' },
  { first_name: 'Ravi', phone: '+919812345601' },
  { first_name: 'Tom', phone: '+447400123401' },
  { first_name: 'Joe', phone: '+12025550123' },
];
// By hand: 2 × Brazil + India + United Kingdom + North America, at the marketing rate.
const ESTIMATE = 2 * 0.0625 + 0.0118 + 0.0635 + 0.025; // 0.2253

const pricing = (category: string, type = 'regular', billable = true) => ({ billable, pricing_model: 'PMP', type, category });
const ts = () => String(Math.floor(Date.now() / 1000));

describe('campaign cost: pricing from callbacks, the estimate, the spend', () => {
  let t: UpstreamTestApp;
  let tenant: UpstreamTenant;
  let campaignId: string;
  const mapping = { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'X-1' }] }] };

  beforeAll(async () => {
    t = await startUpstreamApp({ ...CAMPAIGN_ENV, RATE_LIMIT_PER_MINUTE: '100000' });
    tenant = await createConnectedTenant(t.app);
    // The hand computation prices a US number (North America): the US rule would skip it from a MARKETING campaign.
    await allowUsMarketing(tenant);
  });
  afterAll(async () => { await t?.close(); });

  const allowUsMarketing = async (of: UpstreamTenant) => {
    const res = await t.app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${of.id}/marketing-settings`, headers: adminHeaders, payload: { block_us_marketing: false } });
    expect(res.statusCode, res.body).toBe(200);
  };

  const getCampaign = async () => {
    const res = await call(t.app, tenant, 'GET', `/campaigns/${campaignId}`);
    expect(res.statusCode, res.body).toBe(200);
    return res.json();
  };

  it('estimates a mixed-market audience before sending as the hand computation does, in the pre-flight and the cost', async () => {
    const template = await createApprovedTemplate(t.app, tenant, { category: 'MARKETING' });
    const tag = uniqueTag();
    await createContacts(t, tenant, AUDIENCE.map((c) => ({ ...c, tags: [tag] })));
    const created = await call(t.app, tenant, 'POST', '/campaigns', { name: 'Cost', template_id: template.id, audience: { groups: [tag] }, variable_mapping: mapping });
    expect(created.statusCode, created.body).toBe(201);
    campaignId = created.json().id;

    const draft = await getCampaign();
    expect(draft.cost).toEqual({ currency: 'USD', estimated: ESTIMATE, spent: 0, by_category: {} });
    expect(draft.preflight.estimated_cost.amount).toBe(ESTIMATE);
    expect(draft.preflight.estimated_cost.category).toBe('marketing');
    expect(draft.preflight.estimated_cost.by_market).toEqual([
      { market: 'Brazil', recipients: 2, rate: MARKETING.Brazil, amount: 0.125 },
      { market: 'United Kingdom', recipients: 1, rate: MARKETING['United Kingdom'], amount: 0.0635 },
      { market: 'North America', recipients: 1, rate: MARKETING['North America'], amount: 0.025 },
      { market: 'India', recipients: 1, rate: MARKETING.India, amount: 0.0118 },
    ]);
  });

  it('stores each message\'s pricing and price once (Meta prices `sent` and `delivered`), sums them per campaign, keeps the estimate', async () => {
    const sent = await call(t.app, tenant, 'POST', `/campaigns/${campaignId}/send`);
    expect(sent.statusCode, sent.body).toBe(200);
    // Materialised: the estimate now reads the recipients' prefix counts (not the audience).
    expect(sent.json().cost.estimated).toBe(ESTIMATE);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      await eventually(async () => {
        const c = await getCampaign();
        return c.status === 'COMPLETED' && c.stats.read === 5 ? c : null;
      }, 20_000);
    } finally {
      await workers.stop();
    }
    // Every message was priced by its `sent` and again by its `delivered`: counted once.
    const done = await eventually(async () => { const c = await getCampaign(); return c.cost.by_category.marketing?.messages === 5 ? c : null; });
    expect(done.cost).toEqual({ currency: 'USD', estimated: ESTIMATE, spent: ESTIMATE, by_category: { marketing: { messages: 5, amount: ESTIMATE } } });

    const recipients = (await call(t.app, tenant, 'GET', `/campaigns/${campaignId}/recipients?limit=100`)).json().data;
    const brazil = recipients.find((r: { phone_number: string }) => r.phone_number === '+5511987650001');
    expect(brazil.pricing).toEqual(pricing('marketing'));
    expect(brazil.price).toEqual({ amount: MARKETING.Brazil, currency: 'USD' });

    const message = await call(t.app, tenant, 'GET', `/messages/${brazil.message_id}`);
    expect(message.statusCode).toBe(200);
    expect(message.json()).toMatchObject({ pricing: pricing('marketing'), price: { amount: MARKETING.Brazil, currency: 'USD' } });
    const listed = (await call(t.app, tenant, 'GET', `/messages?campaign_id=${campaignId}`)).json().data;
    expect(listed.map((m: { price: { amount: number } }) => m.price.amount).sort()).toEqual(Object.values({ ...MARKETING, b2: MARKETING.Brazil }).sort());

    const csv = await call(t.app, tenant, 'GET', `/campaigns/${campaignId}/recipients`, undefined, { accept: 'text/csv' });
    const lines = csv.body.trimEnd().split('\n');
    expect(lines[0]).toBe('id,phone_number,contact_id,status,message_id,error_code,error,attempts,updated_at,skip_reason,pricing_category,pricing_type,price,currency,replied_at,button_payload,clicked_at,click_count,next_attempt_at,time_zone');
    const indiaLine = lines.find((l) => l.includes('+919812345601'))!.split(',');
    expect(indiaLine.slice(10, 14)).toEqual(['marketing', 'regular', String(MARKETING.India), 'USD']);

    // A redelivered pricing (Meta retries for days) changes nothing.
    await postCallback(t.app, statusCallback(tenant.phoneNumberId, [
      { id: brazil.message_id, status: 'delivered', timestamp: ts(), recipient_id: '5511987650001', pricing: pricing('marketing') },
      { id: brazil.message_id, status: 'sent', timestamp: ts(), recipient_id: '5511987650001', pricing: pricing('utility') },
    ]));
    expect((await getCampaign()).cost.spent).toBe(ESTIMATE);
    expect((await call(t.app, tenant, 'GET', `/messages/${brazil.message_id}`)).json().pricing.category).toBe('marketing');

    // The fold moves the sums into campaign_costs; the answer does not change.
    await t.deps.db.transaction().execute((tx) => foldCostMoves(tx));
    expect(await t.deps.db.selectFrom('campaign_cost_moves').select('campaign_id').where('campaign_id', '=', campaignId).execute()).toEqual([]);
    const folded = await t.deps.db.selectFrom('campaign_costs').select(['category', 'currency', 'messages', 'amount']).where('campaign_id', '=', campaignId).execute();
    expect(folded.map((r) => ({ ...r, amount: Number(r.amount) }))).toEqual([{ category: 'marketing', currency: 'USD', messages: 5, amount: ESTIMATE }]);
    expect((await getCampaign()).cost).toEqual(done.cost);
  });

  it('prices a single send from the first pricing its callbacks carry, whatever their order; free types cost 0; a failure after a priced `sent` costs nothing', async () => {
    const template = await createApprovedTemplate(t.app, tenant, { category: 'UTILITY' });
    const to = ['+919812345602', '+919812345603', '+919812345604'];
    // The sandbox holds these recipients' own statuses: the test writes them.
    for (const phone of to) expect((await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: phone, outcome: 'ok', delay_ms: 600_000 })).status).toBe(200);
    const send = async (phone: string) => {
      const res = await call(t.app, tenant, 'POST', '/messages/template', {
        to: phone, template_name: template.template_name, language: template.language,
        components: [{ type: 'body', parameters: [{ type: 'text', text: 'Ravi' }, { type: 'text', text: 'A-1' }] }],
      });
      expect(res.statusCode, res.body).toBe(200);
      return res.json().message_id as string;
    };
    const [outOfOrder, free, failing] = [await send(to[0]), await send(to[1]), await send(to[2])];
    const message = async (id: string) => (await call(t.app, tenant, 'GET', `/messages/${id}`)).json();
    expect((await message(outOfOrder)).pricing).toBeNull();

    // `read` first (no pricing), then `delivered` with pricing, then a late `sent` with another.
    await postCallback(t.app, statusCallback(tenant.phoneNumberId, [{ id: outOfOrder, status: 'read', timestamp: ts(), recipient_id: to[0].slice(1) }]));
    expect((await message(outOfOrder))).toMatchObject({ status: 'read', pricing: null, price: null });
    await postCallback(t.app, statusCallback(tenant.phoneNumberId, [{ id: outOfOrder, status: 'delivered', timestamp: ts(), recipient_id: to[0].slice(1), pricing: pricing('utility') }]));
    await postCallback(t.app, statusCallback(tenant.phoneNumberId, [{ id: outOfOrder, status: 'sent', timestamp: ts(), recipient_id: to[0].slice(1), pricing: pricing('marketing') }]));
    expect(await message(outOfOrder)).toMatchObject({ status: 'read', pricing: pricing('utility'), price: { amount: UTILITY_INDIA, currency: 'USD' } });

    // Inside a customer-service window Meta does not charge a utility template.
    await postCallback(t.app, statusCallback(tenant.phoneNumberId, [{ id: free, status: 'sent', timestamp: ts(), recipient_id: to[1].slice(1), pricing: pricing('utility', 'free_customer_service', false) }]));
    expect(await message(free)).toMatchObject({ pricing: pricing('utility', 'free_customer_service', false), price: { amount: 0, currency: 'USD' } });

    await postCallback(t.app, statusCallback(tenant.phoneNumberId, [{ id: failing, status: 'sent', timestamp: ts(), recipient_id: to[2].slice(1), pricing: pricing('utility') }]));
    expect((await message(failing)).price).toEqual({ amount: UTILITY_INDIA, currency: 'USD' });
    await postCallback(t.app, statusCallback(tenant.phoneNumberId, [{ id: failing, status: 'failed', timestamp: ts(), recipient_id: to[2].slice(1), errors: [{ code: 131026, title: 'Message undeliverable' }] }]));
    expect(await message(failing)).toMatchObject({ status: 'failed', pricing: pricing('utility'), price: { amount: 0, currency: 'USD' } });
  });

  it('a campaign message that fails after its `sent` was priced leaves the spend', async () => {
    const template = await createApprovedTemplate(t.app, tenant, { category: 'UTILITY' });
    const tag = uniqueTag();
    const phone = '+447400123402';
    await createContacts(t, tenant, [{ first_name: 'Sue', phone, tags: [tag] }]);
    expect((await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: phone, outcome: 'ok', delay_ms: 600_000 })).status).toBe(200);
    const created = await call(t.app, tenant, 'POST', '/campaigns', { name: 'Fails', template_id: template.id, audience: { groups: [tag] }, variable_mapping: mapping });
    const id = created.json().id as string;
    expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/send`)).statusCode).toBe(200);
    const workers = runCampaignWorkers(t, [tenant.id]);
    let wamid: string;
    try {
      wamid = await eventually(async () => (await t.deps.db.selectFrom('messages').select('upstream_message_id').where('campaign_id', '=', id).executeTakeFirst())?.upstream_message_id);
    } finally {
      await workers.stop();
    }
    const cost = async () => (await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json().cost;
    expect((await cost()).estimated).toBe(0.022);
    await postCallback(t.app, statusCallback(tenant.phoneNumberId, [{ id: wamid, status: 'sent', timestamp: ts(), recipient_id: phone.slice(1), pricing: pricing('utility') }]));
    expect(await cost()).toEqual({ currency: 'USD', estimated: 0.022, spent: 0.022, by_category: { utility: { messages: 1, amount: 0.022 } } });
    await postCallback(t.app, statusCallback(tenant.phoneNumberId, [{ id: wamid, status: 'failed', timestamp: ts(), recipient_id: phone.slice(1), errors: [{ code: 131026, title: 'Message undeliverable' }] }]));
    expect(await cost()).toEqual({ currency: 'USD', estimated: 0.022, spent: 0, by_category: { utility: { messages: 0, amount: 0 } } });
  });

  it('the sandbox prices as Meta does: a utility template is billed, inside the user\'s service window it is free', async () => {
    const template = await createApprovedTemplate(t.app, tenant, { category: 'UTILITY' });
    const send = async (phone: string) => {
      const res = await call(t.app, tenant, 'POST', '/messages/template', {
        to: phone, template_name: template.template_name, language: template.language,
        components: [{ type: 'body', parameters: [{ type: 'text', text: 'Ravi' }, { type: 'text', text: 'A-1' }] }],
      });
      expect(res.statusCode, res.body).toBe(200);
      return res.json().message_id as string;
    };
    const inWindow = '+919812345605';
    expect((await sandboxControl(t.sandbox!, 'POST', '/__sandbox/inbound', { to_phone_number_id: tenant.phoneNumberId, from: inWindow, text: 'Hi' })).status).toBe(200);
    const [billed, free] = [await send('+919812345606'), await send(inWindow)];
    const priced = (id: string) => eventually(async () => { const m = (await call(t.app, tenant, 'GET', `/messages/${id}`)).json(); return m.status === 'read' && m.pricing ? m : null; });
    expect(await priced(billed)).toMatchObject({ pricing: pricing('utility'), price: { amount: UTILITY_INDIA, currency: 'USD' } });
    expect(await priced(free)).toMatchObject({ pricing: pricing('utility', 'free_customer_service', false), price: { amount: 0, currency: 'USD' } });
  });

  it('a MARKETING campaign\'s estimate leaves out whom it skips: opted out, US numbers (before sending), opted out after materialisation (at claim)', async () => {
    const mine = await createConnectedTenant(t.app); // the US rule on, as by default
    const template = await createApprovedTemplate(t.app, mine, { category: 'MARKETING' });
    const tag = uniqueTag();
    const phones = { brazil1: '+5511987650011', brazil2: '+5511987650012', india: '+919812345611', uk: '+447400123411', us: '+12025550111', canada: '+14165550111' };
    const contacts = await createContacts(t, mine, Object.entries(phones).map(([name, phone]) => ({ first_name: name, phone, tags: [tag] })));
    const idOf = (phone: string) => contacts.find((c) => c.phone === phone)!.id;
    expect((await call(t.app, mine, 'PATCH', `/contacts/${idOf(phones.uk)}`, { marketing_opt_out: true })).statusCode).toBe(200);
    const created = await call(t.app, mine, 'POST', '/campaigns', { name: 'Skips', template_id: template.id, audience: { groups: [tag] }, variable_mapping: mapping });
    expect(created.statusCode, created.body).toBe(201);
    const id = created.json().id as string;
    const get = async () => (await call(t.app, mine, 'GET', `/campaigns/${id}`)).json();

    // By hand: 2 × Brazil + India + Canada (North America); the opted-out UK and the US number are skipped.
    const before = 0.1618; // 2 × 0.0625 + 0.0118 + 0.025
    expect(before).toBeCloseTo(2 * MARKETING.Brazil + MARKETING.India + MARKETING['North America'], 10);
    const draft = await get();
    expect(draft.preflight.excluded).toEqual({ opted_out: 1, marketing_blocked_country: 1, frequency_cap: 0 });
    expect(draft.cost.estimated).toBe(before);
    expect(draft.preflight.estimated_cost.by_market).toEqual([
      { market: 'Brazil', recipients: 2, rate: MARKETING.Brazil, amount: 0.125 },
      { market: 'North America', recipients: 1, rate: MARKETING['North America'], amount: 0.025 },
      { market: 'India', recipients: 1, rate: MARKETING.India, amount: 0.0118 },
    ]);

    // Materialised: the same estimate, from the recipients not skipped.
    const sent = await call(t.app, mine, 'POST', `/campaigns/${id}/send`);
    expect(sent.statusCode, sent.body).toBe(200);
    expect(sent.json().cost.estimated).toBe(before);
    // India opts out after materialisation: skipped when claimed, and out of the estimate.
    expect((await call(t.app, mine, 'PATCH', `/contacts/${idOf(phones.india)}`, { marketing_opt_out: true })).statusCode).toBe(200);
    const workers = runCampaignWorkers(t, [mine.id]);
    try {
      await eventually(async () => { const c = await get(); return c.status === 'COMPLETED' && c.stats.read === 3 ? c : null; }, 20_000);
    } finally {
      await workers.stop();
    }
    const after = 0.15; // 2 × 0.0625 + 0.025
    const done = await eventually(async () => { const c = await get(); return c.cost.by_category.marketing?.messages === 3 ? c : null; });
    expect(done.stats).toMatchObject({ total: 6, skipped: 3, failed: 0 });
    expect(done.cost).toEqual({ currency: 'USD', estimated: after, spent: after, by_category: { marketing: { messages: 3, amount: after } } });
    const skipped = (await call(t.app, mine, 'GET', `/campaigns/${id}/recipients?status=skipped`)).json().data.map((r: { phone_number: string; skip_reason: string; price: unknown }) => [r.phone_number, r.skip_reason, r.price]);
    expect(skipped.sort()).toEqual([[phones.india, 'opted_out', null], [phones.uk, 'opted_out', null], [phones.us, 'marketing_blocked_country', null]].sort());
  });

  it('another tenant\'s campaign is 404, and its cost is not shown', async () => {
    const other = await createConnectedTenant(t.app);
    expect((await call(t.app, other, 'GET', `/campaigns/${campaignId}`)).statusCode).toBe(404);
  });
});
