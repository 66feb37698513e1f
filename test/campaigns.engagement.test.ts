import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { call, eventually, uniquePhone } from './helpers/app.ts';
import { expectInvalid, stopLeftovers } from './helpers/campaigns-api.ts';
import { CAMPAIGN_ENV, createContacts, runCampaignWorkers, uniqueTag, type SeedContact } from './helpers/campaigns.ts';
import {
  BODY_TWO_VARS, createApprovedTemplate, createConnectedTenant, postCallback, sandboxControl, startUpstreamApp, type UpstreamTenant, type UpstreamTestApp,
} from './helpers/upstream.ts';
import { clickToken } from '../src/modules/clicks/clicks.tracking.ts';

/**
 * What recipients do after a campaign (issue 25 §2-3): replies and quick-reply taps by signed
 * public-shaped callbacks, link clicks through GET /r/{token} over HTTP, and retargeting by
 * engagement. Real database, the dispatcher and the sandbox over HTTP.
 */
const PUBLIC_BASE_URL = 'https://links.test.example';
const BODY_MAPPING = { type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'A-1' }] };
const QUICK_REPLY_TEMPLATE = [...BODY_TWO_VARS, { type: 'BUTTONS', buttons: [{ type: 'QUICK_REPLY', text: 'Interested' }, { type: 'QUICK_REPLY', text: 'Stop' }] }];
const LINK_TEMPLATE = [...BODY_TWO_VARS, { type: 'BUTTONS', buttons: [{ type: 'URL', text: 'Shop', url: `${PUBLIC_BASE_URL}/r/{{1}}` }] }];
const linkMapping = (destination: Record<string, unknown>) => ({ components: [BODY_MAPPING, { type: 'button', sub_type: 'url', index: 0, parameters: [destination] }] });

describe('campaigns: replies, taps, clicks and retargeting by engagement', () => {
  let t: UpstreamTestApp;
  const tenants: string[] = [];
  beforeAll(async () => {
    t = await startUpstreamApp({ ...CAMPAIGN_ENV, RATE_LIMIT_PER_MINUTE: '100000', PUBLIC_BASE_URL });
  });
  afterAll(async () => {
    if (t) await stopLeftovers(t, tenants);
    await t?.close();
  });

  const connected = async () => {
    const tenant = await createConnectedTenant(t.app);
    tenants.push(tenant.id);
    return tenant;
  };
  const rule = (to: string, outcome: string, extra: Record<string, unknown> = {}) => sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to, outcome, ...extra });
  const getCampaign = async (tenant: UpstreamTenant, id: string) => (await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json();
  const recipients = (id: string) => t.deps.db.selectFrom('campaign_recipients').selectAll().where('campaign_id', '=', id).execute();
  const recipientOf = async (id: string, phone: string) => (await recipients(id)).find((r) => r.phone === phone)!;

  /** Creates and sends a campaign to `contacts`, and waits until it completed with every status final. */
  async function runCampaign(tenant: UpstreamTenant, templateId: string, contacts: SeedContact[], body: Record<string, unknown>, settled: (r: { status: string }[]) => boolean) {
    const tag = uniqueTag();
    await createContacts(t, tenant, contacts.map((c) => ({ ...c, tags: [tag] })));
    const created = await call(t.app, tenant, 'POST', '/campaigns', { name: 'Engagement', template_id: templateId, audience: { groups: [tag] }, ...body });
    expect(created.statusCode, created.body).toBe(201);
    const id = created.json().id as string;
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/send`)).statusCode).toBe(200);
      await eventually(async () => (await getCampaign(tenant, id)).status === 'COMPLETED', 40_000);
      await eventually(async () => settled(await recipients(id)), 20_000);
    } finally {
      await workers.stop();
    }
    return { id, created: created.json() };
  }
  const allRead = (rows: { status: string }[]) => rows.every((r) => r.status === 'read');

  /** One signed callback carrying the users' messages (a batch, as the upstream sends them). */
  const inbound = (tenant: UpstreamTenant, messages: Record<string, unknown>[]) => postCallback(t.app, {
    object: 'whatsapp_business_account',
    entry: [{ id: tenant.wabaId, changes: [{ field: 'messages', value: {
      messaging_product: 'whatsapp', metadata: { display_phone_number: '15550000000', phone_number_id: tenant.phoneNumberId }, messages,
    } }] }],
  });
  const seconds = (date: Date) => String(Math.floor(date.getTime() / 1000));
  const wamid = () => `wamid.${randomBytes(12).toString('hex')}`;

  it('a reply to a campaign message and a quick-reply tap mark the recipient; without context only the first message within 72 h counts', { timeout: 90_000 }, async () => {
    const tenant = await connected();
    const template = await createApprovedTemplate(t.app, tenant, { components: QUICK_REPLY_TEMPLATE });
    const [replies, taps, inside, outside, twice] = Array.from({ length: 5 }, (_, i) => ({ first_name: `P${i}`, phone: uniquePhone() }));
    const { id } = await runCampaign(tenant, template.id, [replies, taps, inside, outside, twice], { variable_mapping: { components: [BODY_MAPPING] } }, allRead);
    const sentAt = new Date(Math.max(...(await t.deps.db.selectFrom('messages').select(['sent_at', 'created_at']).where('campaign_id', '=', id).execute())
      .map((m) => (m.sent_at ?? m.created_at).getTime())));
    const ours = async (phone: string) => (await recipientOf(id, phone)).message_id!;
    const inAnHour = new Date(sentAt.getTime() + 3_600_000);

    // One batch: a text reply and a tap by context, a message without context 1 h after the send,
    // one 73 h after it, and two messages without context of the same contact (only the first counts).
    const batch = [
      { from: replies.phone.slice(1), id: wamid(), timestamp: seconds(inAnHour), type: 'text', text: { body: 'yes please' }, context: { from: '15550000000', id: await ours(replies.phone) } },
      { from: taps.phone.slice(1), id: wamid(), timestamp: seconds(inAnHour), type: 'button', button: { text: 'Interested', payload: 'INTERESTED' }, context: { from: '15550000000', id: await ours(taps.phone) } },
      { from: inside.phone.slice(1), id: wamid(), timestamp: seconds(inAnHour), type: 'text', text: { body: 'hi' } },
      { from: outside.phone.slice(1), id: wamid(), timestamp: seconds(new Date(sentAt.getTime() + 73 * 3_600_000)), type: 'text', text: { body: 'late' } },
      { from: twice.phone.slice(1), id: wamid(), timestamp: seconds(new Date(sentAt.getTime() + 7_200_000)), type: 'text', text: { body: 'second' } },
      { from: twice.phone.slice(1), id: wamid(), timestamp: seconds(new Date(sentAt.getTime() + 600_000)), type: 'text', text: { body: 'first' } },
    ];
    expect((await inbound(tenant, batch)).statusCode).toBe(200);

    const at = (message: { timestamp: string }) => new Date(Number(message.timestamp) * 1000).toISOString();
    expect((await recipientOf(id, replies.phone))).toMatchObject({ replied_at: new Date(at(batch[0])), button_payload: null });
    expect((await recipientOf(id, taps.phone))).toMatchObject({ replied_at: new Date(at(batch[1])), button_payload: 'INTERESTED' });
    expect((await recipientOf(id, inside.phone)).replied_at).toEqual(new Date(at(batch[2])));
    expect((await recipientOf(id, outside.phone)).replied_at).toBeNull();
    expect((await recipientOf(id, twice.phone)).replied_at).toEqual(new Date(at(batch[5])));

    // A redelivered reply and a later message change nothing, and count once.
    expect((await inbound(tenant, [batch[0], { from: inside.phone.slice(1), id: wamid(), timestamp: seconds(new Date(inAnHour.getTime() + 60_000)), type: 'text', text: { body: 'again' } }])).statusCode).toBe(200);
    expect((await recipientOf(id, inside.phone)).replied_at).toEqual(new Date(at(batch[2])));

    const campaign = await getCampaign(tenant, id);
    expect(campaign.stats).toMatchObject({ sent: 5, read: 5, replied: 4, clicked: 0 });
    expect(campaign.funnel).toEqual({ sent: 5, delivered: 5, read: 5, replied: 4, clicked: 0, delivered_rate: 1, read_rate: 1, replied_rate: 0.8, clicked_rate: 0 });
    // The counters agree with a recount from the rows.
    expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/refresh-metrics`)).json().stats).toMatchObject({ replied: 4, clicked: 0 });

    // The recipients list and the CSV carry them (CSV: appended columns).
    const listed = (await call(t.app, tenant, 'GET', `/campaigns/${id}/recipients?limit=10`)).json().data as Record<string, unknown>[];
    expect(listed.find((r) => r.phone_number === taps.phone)).toMatchObject({ replied_at: at(batch[1]), button_payload: 'INTERESTED', clicked_at: null, click_count: 0 });
    const csv = (await call(t.app, tenant, 'GET', `/campaigns/${id}/recipients`, undefined, { accept: 'text/csv' })).body.trim().split('\n');
    expect(csv[0]).toMatch(/,currency,replied_at,button_payload,clicked_at,click_count,next_attempt_at,time_zone$/);
    expect(csv.find((line) => line.includes(taps.phone))).toMatch(new RegExp(`,${at(batch[1]).replace(/[.]/g, '\\.')},INTERESTED,,0,,[^,]*$`));
  });

  it('a reply in one tenant never marks the campaign of another, and a message before the send is not a reply', { timeout: 90_000 }, async () => {
    const [a, b] = [await connected(), await connected()];
    const phone = uniquePhone();
    const templateA = await createApprovedTemplate(t.app, a);
    const { id } = await runCampaign(a, templateA.id, [{ first_name: 'Ana', phone }], { variable_mapping: { components: [BODY_MAPPING] } }, allRead);
    const message = await recipientOf(id, phone);
    // Tenant B receives a reply naming A's message, and a message of the same phone: not A's replies.
    expect((await inbound(b, [{ from: phone.slice(1), id: wamid(), timestamp: seconds(new Date()), type: 'text', text: { body: 'x' }, context: { id: message.message_id } }])).statusCode).toBe(200);
    // Tenant A: a message dated an hour before the send.
    expect((await inbound(a, [{ from: phone.slice(1), id: wamid(), timestamp: seconds(new Date(Date.now() - 3_600_000)), type: 'text', text: { body: 'earlier' } }])).statusCode).toBe(200);
    expect((await recipientOf(id, phone)).replied_at).toBeNull();
    expect((await getCampaign(a, id)).stats.replied).toBe(0);
  });

  it('track_clicks is refused without a redirect button or with a destination that is not https', async () => {
    const tenant = await connected();
    const plain = await createApprovedTemplate(t.app, tenant);
    const link = await createApprovedTemplate(t.app, tenant, { components: LINK_TEMPLATE });
    const other = await createApprovedTemplate(t.app, tenant, { components: [...BODY_TWO_VARS, { type: 'BUTTONS', buttons: [{ type: 'URL', text: 'Go', url: 'https://elsewhere.example/r/{{1}}' }] }] });
    const create = (templateId: string, mapping: unknown) => call(t.app, tenant, 'POST', '/campaigns', { name: 'Links', template_id: templateId, track_clicks: true, variable_mapping: mapping });
    expectInvalid(await create(plain.id, { components: [BODY_MAPPING] }), ['body', 'track_clicks']);
    expectInvalid(await create(other.id, { components: [BODY_MAPPING, { type: 'button', index: 0, parameters: [{ kind: 'static', value: 'https://shop.example' }] }] }), ['body', 'track_clicks']);
    for (const value of ['http://shop.example/x', 'javascript:alert(1)', '//shop.example/x', 'shop.example']) {
      expectInvalid(await create(link.id, linkMapping({ kind: 'static', value })), ['body', 'variable_mapping', 'components', 1, 'parameters', 0, 'value'], value);
    }
    expectInvalid(await create(link.id, linkMapping({ kind: 'contact_field', field: 'custom_fields.url', fallback: 'ftp://x.example' })), ['body', 'variable_mapping', 'components', 1, 'parameters', 0, 'fallback']);
    // Input cannot mark a button as tracked itself: the key is dropped.
    const untracked = await call(t.app, tenant, 'POST', '/campaigns', { name: 'Links', template_id: link.id, variable_mapping: { components: [BODY_MAPPING, { type: 'button', index: 0, track_clicks: true, parameters: [{ kind: 'static', value: 'https://shop.example' }] }] } });
    expect(untracked.statusCode, untracked.body).toBe(201);
    expect(untracked.json().track_clicks).toBe(false);
  });

  it('clicks through /r/{token}: each recipient has its own token and destination, repeated clicks count once, unknown and foreign tokens are a 404 page', { timeout: 120_000 }, async () => {
    const [tenant, otherTenant] = [await connected(), await connected()];
    const link = await createApprovedTemplate(t.app, tenant, { components: LINK_TEMPLATE });
    const own = { first_name: 'Own', phone: uniquePhone(), custom_fields: { url: 'https://shop.example/own?ref=wa' } };
    const fallback = { first_name: 'Fallback', phone: uniquePhone() };
    const notHttps = { first_name: 'Plain', phone: uniquePhone(), custom_fields: { url: 'http://shop.example/plain' } };
    const { id, created } = await runCampaign(tenant, link.id, [own, fallback, notHttps],
      { track_clicks: true, variable_mapping: linkMapping({ kind: 'contact_field', field: 'custom_fields.url', fallback: 'https://shop.example/default' }) }, allRead);
    expect(created.track_clicks).toBe(true);

    // What was sent: a token per recipient as the button's parameter, never the destination.
    const tokenSentTo = async (phone: string) => {
      const sends = (await sandboxControl(t.sandbox!, 'GET', `/__sandbox/sends?to=${encodeURIComponent(phone)}`)).json.data as { components: { type: string; parameters: { text: string }[] }[] }[];
      return sends[0].components.find((c) => c.type === 'button')!.parameters[0].text;
    };
    const tokens = { own: await tokenSentTo(own.phone), fallback: await tokenSentTo(fallback.phone), notHttps: await tokenSentTo(notHttps.phone) };
    expect(new Set(Object.values(tokens)).size).toBe(3);
    for (const token of Object.values(tokens)) expect(token).toMatch(/^[A-Za-z0-9_-]{32}$/);

    const follow = (path: string) => request(`${t.url}${path}`, { method: 'GET' });
    const first = await follow(`/r/${tokens.own}`);
    expect(first.statusCode).toBe(302);
    expect(first.headers.location).toBe('https://shop.example/own?ref=wa');
    await first.body.dump();
    const clickedAt = (await recipientOf(id, own.phone)).clicked_at;
    expect(clickedAt).toBeInstanceOf(Date);
    const again = await follow(`/r/${tokens.own}`);
    expect(again.statusCode).toBe(302);
    await again.body.dump();
    expect(await recipientOf(id, own.phone)).toMatchObject({ click_count: 2, clicked_at: clickedAt });

    // A contact field that is no https URL falls back.
    for (const token of [tokens.fallback, tokens.notHttps]) {
      const res = await follow(`/r/${token}`);
      expect(res.statusCode).toBe(302);
      expect(res.headers.location).toBe('https://shop.example/default');
      await res.body.dump();
    }

    // Unknown, tampered and hostile tokens: a 404 page, no Location, nothing counted.
    const tampered = tokens.own.slice(0, 31) + (tokens.own[31] === 'A' ? 'B' : 'A');
    for (const path of [`/r/${randomBytes(24).toString('base64url')}`, `/r/${tampered}`, '/r/https:%2F%2Fevil.example', '/r/x']) {
      const res = await follow(path);
      expect(res.statusCode, path).toBe(404);
      expect(res.headers.location, path).toBeUndefined();
      expect(res.headers['content-type']).toMatch(/^text\/html/);
      expect(await res.body.text()).toMatch(/Link not found/);
    }

    // Another tenant's campaign with its own tracked link: its token leads to its own destination and counts there only.
    const otherLink = await createApprovedTemplate(t.app, otherTenant, { components: LINK_TEMPLATE });
    const stranger = { first_name: 'Other', phone: own.phone };
    const other = await runCampaign(otherTenant, otherLink.id, [stranger], { track_clicks: true, variable_mapping: linkMapping({ kind: 'static', value: 'https://other.example/' }) }, allRead);
    const otherToken = clickToken(t.config.secretsKey, (await recipientOf(other.id, own.phone)).id);
    const res = await follow(`/r/${otherToken}`);
    expect(res.headers.location).toBe('https://other.example/');
    await res.body.dump();
    expect(await recipientOf(other.id, own.phone)).toMatchObject({ click_count: 1 });
    expect(await recipientOf(id, own.phone)).toMatchObject({ click_count: 2 });

    // A valid token of a recipient whose campaign does not track clicks leads nowhere.
    const plain = await createApprovedTemplate(t.app, tenant);
    const untracked = await runCampaign(tenant, plain.id, [{ first_name: 'U', phone: uniquePhone() }], { variable_mapping: { components: [BODY_MAPPING] } }, allRead);
    const untrackedToken = clickToken(t.config.secretsKey, (await recipients(untracked.id))[0].id);
    const none = await follow(`/r/${untrackedToken}`);
    expect(none.statusCode).toBe(404);
    await none.body.dump();

    const campaign = await getCampaign(tenant, id);
    expect(campaign.stats).toMatchObject({ sent: 3, clicked: 3, replied: 0 });
    expect(campaign.funnel).toMatchObject({ clicked: 3, clicked_rate: 1 });
    expect((await getCampaign(otherTenant, other.id)).stats.clicked).toBe(1);
    expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/refresh-metrics`)).json().stats.clicked).toBe(3);
    const listed = (await call(t.app, tenant, 'GET', `/campaigns/${id}/recipients`)).json().data as Record<string, unknown>[];
    expect(listed.find((r) => r.phone_number === own.phone)).toMatchObject({ clicked_at: clickedAt!.toISOString(), click_count: 2 });
  });

  it('retargets each segment, refuses error_codes outside failed, click segments without tracking, and an empty segment', { timeout: 120_000 }, async () => {
    const tenant = await connected();
    const link = await createApprovedTemplate(t.app, tenant, { components: LINK_TEMPLATE });
    const [failed, delivered, replied, clicked, readOnly, stuck] = Array.from({ length: 6 }, (_, i) => ({ first_name: `S${i}`, phone: uniquePhone() }));
    await rule(failed.phone, 'reject', { error_code: 131026 });
    await rule(delivered.phone, 'no_read');
    // Accepted, its status callbacks held back for an hour: sent, never delivered.
    await rule(stuck.phone, 'ok', { delay_ms: 3_600_000 });
    const { id } = await runCampaign(tenant, link.id, [failed, delivered, replied, clicked, readOnly, stuck],
      { track_clicks: true, variable_mapping: linkMapping({ kind: 'static', value: 'https://shop.example/sale' }) },
      (rows) => rows.filter((r) => r.status === 'read').length === 3 && rows.some((r) => r.status === 'delivered'));
    const message = (await recipientOf(id, replied.phone)).message_id;
    expect((await inbound(tenant, [{ from: replied.phone.slice(1), id: wamid(), timestamp: seconds(new Date()), type: 'text', text: { body: 'yes' }, context: { id: message } }])).statusCode).toBe(200);
    const click = await request(`${t.url}/r/${clickToken(t.config.secretsKey, (await recipientOf(id, clicked.phone)).id)}`, { method: 'GET' });
    expect(click.statusCode).toBe(302);
    await click.body.dump();

    const retarget = (body: Record<string, unknown>) => call(t.app, tenant, 'POST', `/campaigns/${id}/retarget`, body);
    const phonesOf = async (body: Record<string, unknown>) => {
      const res = await retarget(body);
      expect(res.statusCode, `${JSON.stringify(body)} ${res.body}`).toBe(201);
      expect(res.json()).toMatchObject({ status: 'DRAFT', track_clicks: true });
      return (await recipients(res.json().id)).map((r) => r.phone).sort();
    };
    const sorted = (...contacts: { phone: string }[]) => contacts.map((c) => c.phone).sort();
    expect(await phonesOf({})).toEqual(sorted(failed));
    expect(await phonesOf({ segment: 'failed', error_codes: ['131026'] })).toEqual(sorted(failed));
    expect(await phonesOf({ segment: 'not_delivered' })).toEqual(sorted(failed, stuck));
    expect(await phonesOf({ segment: 'delivered_not_read' })).toEqual(sorted(delivered));
    expect(await phonesOf({ segment: 'read_not_replied' })).toEqual(sorted(clicked, readOnly));
    expect(await phonesOf({ segment: 'replied' })).toEqual(sorted(replied));
    expect(await phonesOf({ segment: 'clicked' })).toEqual(sorted(clicked));
    expect(await phonesOf({ segment: 'not_clicked' })).toEqual(sorted(delivered, replied, readOnly, stuck));

    expectInvalid(await retarget({ segment: 'replied', error_codes: ['131026'] }), ['body', 'error_codes']);
    expectInvalid(await retarget({ segment: 'everyone' }), ['body', 'segment']);
    expectInvalid(await retarget({ segment: 'failed', error_codes: ['131049'] }), ['body', 'error_codes']);

    // A campaign where everyone read and nobody replied: its empty segments are a 400, and no campaign is made.
    const plain = await createApprovedTemplate(t.app, tenant);
    const quiet = await runCampaign(tenant, plain.id, [{ first_name: 'Q', phone: uniquePhone() }], { variable_mapping: { components: [BODY_MAPPING] } }, allRead);
    const before = (await call(t.app, tenant, 'GET', '/campaigns')).json().data.length;
    const empty = await call(t.app, tenant, 'POST', `/campaigns/${quiet.id}/retarget`, { segment: 'replied' });
    expect(expectInvalid(empty, ['body', 'segment']).message).toMatch(/no recipients who replied/);
    expectInvalid(await call(t.app, tenant, 'POST', `/campaigns/${quiet.id}/retarget`, {}), ['path', 'id']);
    expectInvalid(await call(t.app, tenant, 'POST', `/campaigns/${quiet.id}/retarget`, { segment: 'clicked' }), ['body', 'segment']);
    expect((await call(t.app, tenant, 'GET', '/campaigns')).json().data.length).toBe(before);
  });
});
