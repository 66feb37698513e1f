import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createTenant, eventually, uniquePhone } from './helpers/app.ts';
import {
  createApprovedTemplate, createConnectedTenant, eventsOf, postCallback, sandboxControl, startUpstreamApp,
  type UpstreamTenant, type UpstreamTestApp,
} from './helpers/upstream.ts';

/**
 * The whole inbound message (issue 25 §1): every type's fields in message.received, replies mapped
 * to our messages, reactions/edits/deletions annotating the message they name, inbound media
 * through the API, and inbound messages in GET /messages. Inbound messages arrive as the sandbox's
 * signed callbacks over HTTP (or as signed public-shaped callbacks posted directly).
 */
describe('inbound messages: message.received, annotations, media, GET /messages', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp(); });
  afterAll(async () => { await t?.close(); });

  /** A user writes through the sandbox; resolves once our message.received for it is recorded. */
  async function userSends(tenant: UpstreamTenant, from: string, body: Record<string, unknown>) {
    const r = await sandboxControl(t.sandbox!, 'POST', '/__sandbox/inbound', { to_phone_number_id: tenant.phoneNumberId, from, ...body });
    expect(r.status).toBe(200);
    const event = await eventually(async () => (await eventsOf(t.deps, tenant.id, 'message.received')).find((e) => (e.data as { message_id: string }).message_id === r.json.message_id));
    return { wamid: r.json.message_id as string, mediaId: r.json.media_id as string | undefined, data: event.data as Record<string, any> };
  }

  /** One of our template messages to `to`, accepted by the sandbox: its row id and wamid. */
  async function sendOurs(tenant: UpstreamTenant, to: string) {
    const template = await createApprovedTemplate(t.app, tenant);
    const sent = await call(t.app, tenant, 'POST', '/messages/template', {
      to, template_name: template.template_name, components: [{ type: 'body', parameters: [{ type: 'text', text: 'Ana' }, { type: 'text', text: 'A-1' }] }],
    });
    expect(sent.statusCode).toBe(200);
    const got = await call(t.app, tenant, 'GET', `/messages/${sent.json().message_id}`);
    return { id: got.json().id as string, wamid: sent.json().message_id as string };
  }

  it('each inbound type reaches message.received with its fields; type and text keep their meaning', async () => {
    const tenant = await createConnectedTenant(t.app);
    const phone = uniquePhone();
    const contact = (await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Ana', phone })).json();

    const text = await userSends(tenant, phone, { text: 'hello' });
    expect(text.data).toEqual({ message_id: text.wamid, from: phone, from_user_id: null, contact_id: contact.id, type: 'text', text: 'hello', timestamp: expect.any(String) });

    const button = await userSends(tenant, phone, { message: { type: 'button', button: { text: 'Stop offers', payload: 'STOP:981' } } });
    expect(button.data).toMatchObject({ type: 'button', text: 'Stop offers', button: { payload: 'STOP:981', text: 'Stop offers' } });

    const reply = await userSends(tenant, phone, { message: { type: 'interactive', interactive: { type: 'button_reply', button_reply: { id: 'yes-1', title: 'Yes' } } } });
    expect(reply.data).toMatchObject({ type: 'interactive', text: 'Yes', interactive: { type: 'button_reply', id: 'yes-1', title: 'Yes', description: null } });

    const listReply = await userSends(tenant, phone, { message: { type: 'interactive', interactive: { type: 'list_reply', list_reply: { id: 'row-2', title: 'Tuesday', description: 'after 5 pm' } } } });
    expect(listReply.data).toMatchObject({ type: 'interactive', text: 'Tuesday', interactive: { type: 'list_reply', id: 'row-2', title: 'Tuesday', description: 'after 5 pm' } });

    const bytes = Buffer.from('%PDF-1.4 sandbox invoice');
    const document = await userSends(tenant, phone, { media: { type: 'document', data: bytes.toString('base64'), mime_type: 'application/pdf', filename: 'invoice.pdf', caption: 'my invoice' } });
    expect(document.data).toMatchObject({
      type: 'document', text: 'my invoice',
      media: { id: document.mediaId, mime_type: 'application/pdf', sha256: createHash('sha256').update(bytes).digest('hex'), caption: 'my invoice', filename: 'invoice.pdf' },
    });
    for (const kind of ['image', 'video', 'audio', 'sticker']) {
      const media = await userSends(tenant, phone, { media: { type: kind, data: 'AAEC', mime_type: `${kind === 'sticker' ? 'image/webp' : `${kind}/x-test`}` } });
      expect(media.data).toMatchObject({ type: kind, media: { id: media.mediaId, caption: null, filename: null } });
    }

    const location = await userSends(tenant, phone, { message: { type: 'location', location: { latitude: 38.72, longitude: -9.14, name: 'Office', address: 'Rua A 1' } } });
    expect(location.data).toMatchObject({ type: 'location', text: null, location: { latitude: 38.72, longitude: -9.14, name: 'Office', address: 'Rua A 1', url: null } });

    const card = { name: { formatted_name: 'Ben Costa', first_name: 'Ben' }, phones: [{ phone: '+351 912 345 678', type: 'CELL', wa_id: '351912345678' }] };
    const contacts = await userSends(tenant, phone, { message: { type: 'contacts', contacts: [card] } });
    expect(contacts.data).toMatchObject({ type: 'contacts', contacts: [card] });

    const items = [{ product_retailer_id: 'SKU-1', quantity: 2, item_price: 9.5, currency: 'EUR' }];
    const order = await userSends(tenant, phone, { message: { type: 'order', order: { catalog_id: 'cat-1', text: 'for Friday', product_items: items } } });
    expect(order.data).toMatchObject({ type: 'order', text: 'for Friday', order: { catalog_id: 'cat-1', text: 'for Friday', product_items: items } });

    const referral = { source_url: 'https://fb.me/ad', source_id: 'ad-7', source_type: 'ad', headline: 'Sale', body: 'Half price', media_type: 'image', ctwa_clid: 'ARAkLkA8rmlFeiCktEJQ' };
    const fromAd = await userSends(tenant, phone, { message: { type: 'text', text: { body: 'I saw your ad' }, referral } });
    expect(fromAd.data).toMatchObject({ type: 'text', text: 'I saw your ad', referral });

    // A Flow reply keeps its flow.submission_received beside message.received.
    const flow = await userSends(tenant, phone, { flow_response: { flow_token: 'FT-9', size: 'M' } });
    expect(flow.data).toMatchObject({ type: 'interactive', interactive: { type: 'nfm_reply' } });
    expect((await eventsOf(t.deps, tenant.id, 'flow.submission_received')).map((e) => e.data)).toEqual([expect.objectContaining({ flow_token: 'FT-9', response: { size: 'M' } })]);

    // Every one of them is an inbound message of its own, with the same fields.
    const listed = await call(t.app, tenant, 'GET', '/messages?direction=inbound&limit=100');
    expect(listed.json().pagination.total_items).toBe(14);
    const byWamid = new Map(listed.json().data.map((m: { message_id: string }) => [m.message_id, m]));
    expect(byWamid.get(button.wamid)).toMatchObject({ direction: 'inbound', type: 'button', button: { payload: 'STOP:981' }, reactions: [], edited_at: null, deleted_at: null });
    expect(byWamid.get(fromAd.wamid)).toMatchObject({ referral: { ctwa_clid: 'ARAkLkA8rmlFeiCktEJQ' } });
    expect(byWamid.get(order.wamid)).toMatchObject({ order: { product_items: items } });
  });

  it('a reply or a button tap maps context to our message id; a message we do not know is null with its upstream id', async () => {
    const tenant = await createConnectedTenant(t.app);
    const phone = uniquePhone();
    const ours = await sendOurs(tenant, phone);
    const tap = await userSends(tenant, phone, { context_message_id: ours.wamid, message: { type: 'button', button: { text: 'Track', payload: 'TRACK' } } });
    expect(tap.data.context).toEqual({ message_id: ours.id, upstream_message_id: ours.wamid });
    const stranger = await userSends(tenant, phone, { context_message_id: 'wamid.NOT_OURS', text: 'about that' });
    expect(stranger.data.context).toEqual({ message_id: null, upstream_message_id: 'wamid.NOT_OURS' });
    // The same in GET /messages/{id}.
    const got = await call(t.app, tenant, 'GET', `/messages/${tap.wamid}`);
    expect(got.json()).toMatchObject({ direction: 'inbound', context: { message_id: ours.id, upstream_message_id: ours.wamid } });
  });

  it('a reaction annotates our message (taken back with an empty emoji), never a new received message', async () => {
    const tenant = await createConnectedTenant(t.app);
    const phone = uniquePhone();
    await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Ana', phone });
    const ours = await sendOurs(tenant, phone);
    const reacted = await userSends(tenant, phone, { message: { type: 'reaction', reaction: { message_id: ours.wamid, emoji: '👍' } } });
    expect(reacted.data).toMatchObject({ type: 'reaction', text: null, reaction: { message_id: ours.id, upstream_message_id: ours.wamid, emoji: '👍' } });
    const after = (await call(t.app, tenant, 'GET', `/messages/${ours.id}`)).json();
    expect(after).toMatchObject({ direction: 'outbound', status: expect.any(String), reactions: [{ emoji: '👍', from: phone, reacted_at: expect.any(String) }] });

    // Changed to another emoji, then taken back (Meta leaves the emoji out).
    await userSends(tenant, phone, { message: { type: 'reaction', reaction: { message_id: ours.wamid, emoji: '❤️' } } });
    expect((await call(t.app, tenant, 'GET', `/messages/${ours.id}`)).json().reactions).toEqual([expect.objectContaining({ emoji: '❤️' })]);
    const unreacted = await userSends(tenant, phone, { message: { type: 'reaction', reaction: { message_id: ours.wamid } } });
    expect(unreacted.data.reaction).toEqual({ message_id: ours.id, upstream_message_id: ours.wamid, emoji: '' });
    expect((await call(t.app, tenant, 'GET', `/messages/${ours.id}`)).json().reactions).toEqual([]);

    // No inbound message and no communication row came of them.
    expect((await call(t.app, tenant, 'GET', '/messages?direction=inbound')).json().pagination.total_items).toBe(0);
    const comms = (await eventsOf(t.deps, tenant.id, 'contact.communication_added')).filter((e) => (e.data as { direction: string }).direction === 'inbound');
    expect(comms).toEqual([]);
  });

  it('an edit changes the text of the message it names and a deletion clears it; a redelivered edit changes nothing again', async () => {
    const tenant = await createConnectedTenant(t.app);
    const phone = uniquePhone();
    const original = await userSends(tenant, phone, { text: 'see you at 5' });
    const reaction = await userSends(tenant, phone, { message: { type: 'reaction', reaction: { message_id: original.wamid, emoji: '🙂' } } });
    expect(reaction.data.reaction).toMatchObject({ message_id: expect.any(String), upstream_message_id: original.wamid });

    const edit = { type: 'edit', edit: { original_message_id: original.wamid, message: { type: 'text', text: { body: 'see you at 6' } } } };
    const edited = await userSends(tenant, phone, { message: edit });
    expect(edited.data).toMatchObject({ type: 'edit', text: 'see you at 6', edit: { upstream_message_id: original.wamid } });
    const got = (await call(t.app, tenant, 'GET', `/messages/${original.wamid}`)).json();
    expect(got).toMatchObject({ text: 'see you at 6', edited_at: expect.any(String), deleted_at: null, reactions: [expect.objectContaining({ emoji: '🙂', from: phone })] });
    expect(edited.data.edit.message_id).toBe(got.id);

    // The platform redelivers the edit: no second event.
    const redelivered = { object: 'whatsapp_business_account', entry: [{ id: tenant.wabaId, changes: [{ field: 'messages', value: {
      metadata: { phone_number_id: tenant.phoneNumberId }, messages: [{ from: phone.slice(1), id: edited.wamid, timestamp: '1700000000', ...edit }] } }] }] };
    expect((await postCallback(t.app, redelivered)).statusCode).toBe(200);
    expect((await eventsOf(t.deps, tenant.id, 'message.received')).filter((e) => (e.data as { type: string }).type === 'edit')).toHaveLength(1);

    const revoked = await userSends(tenant, phone, { message: { type: 'revoke', revoke: { original_message_id: original.wamid } } });
    expect(revoked.data).toMatchObject({ type: 'revoke', text: null, revoke: { message_id: got.id, upstream_message_id: original.wamid } });
    const deleted = (await call(t.app, tenant, 'GET', `/messages/${original.wamid}`)).json();
    expect(deleted).toMatchObject({ text: null, deleted_at: expect.any(String) });

    // Still the one inbound message.
    const listed = (await call(t.app, tenant, 'GET', '/messages?direction=inbound')).json();
    expect(listed.data.map((m: { message_id: string }) => m.message_id)).toEqual([original.wamid]);
  });

  it('GET /messages/{id}/media streams the bytes while the upstream keeps them, then 404; other tenants and other scopes cannot', async () => {
    const tenant = await createConnectedTenant(t.app);
    const phone = uniquePhone();
    const bytes = Buffer.from([0xff, 0xd8, 0xff, 0xe0, 1, 2, 3, 4, 5]);
    const image = await userSends(tenant, phone, { media: { type: 'image', data: bytes.toString('base64'), mime_type: 'image/jpeg', caption: 'the crack' } });
    const got = (await call(t.app, tenant, 'GET', `/messages/${image.wamid}`)).json();

    for (const id of [got.id, image.wamid]) {
      const res = await call(t.app, tenant, 'GET', `/messages/${id}/media`);
      expect(res.statusCode).toBe(200);
      expect(res.headers['content-type']).toBe('image/jpeg');
      expect(res.rawPayload.equals(bytes)).toBe(true);
    }
    const document = await userSends(tenant, phone, { media: { type: 'document', data: 'JVBERi0=', mime_type: 'application/pdf', filename: 'naïve "quote".pdf' } });
    const doc = await call(t.app, tenant, 'GET', `/messages/${document.wamid}/media`);
    expect(doc.statusCode).toBe(200);
    expect(doc.headers['content-disposition']).toBe(`attachment; filename="na_ve _quote_.pdf"; filename*=UTF-8''${encodeURIComponent('naïve "quote".pdf')}`);

    // Another tenant, a key without contacts:read, a message without media.
    const other = await createConnectedTenant(t.app);
    expect((await call(t.app, other, 'GET', `/messages/${got.id}/media`)).statusCode).toBe(404);
    expect((await call(t.app, other, 'GET', `/messages/${got.id}`)).statusCode).toBe(404);
    const sender = await createTenant(t.app, { scopes: ['messages:send'] });
    expect((await call(t.app, sender, 'GET', `/messages/${got.id}/media`)).statusCode).toBe(403);
    const text = await userSends(tenant, phone, { text: 'no file' });
    const none = await call(t.app, tenant, 'GET', `/messages/${text.wamid}/media`);
    expect(none.statusCode).toBe(404);
    expect(none.json().error.message).toBe('This message has no media');

    // The platform lets the media go: 404, not a 5xx.
    expect((await sandboxControl(t.sandbox!, 'POST', '/__sandbox/media/expire', { id: image.mediaId })).status).toBe(200);
    const gone = await call(t.app, tenant, 'GET', `/messages/${got.id}/media`);
    expect(gone.statusCode).toBe(404);
    expect(gone.json()).toMatchObject({ success: false, error: { code: 'NOT_FOUND', message: 'The media is no longer available from the messaging platform' } });
  });

  it('GET /messages lists both directions with direction; filters of one direction leave the other out; another tenant sees none', async () => {
    const tenant = await createConnectedTenant(t.app);
    const phone = uniquePhone();
    const contact = (await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Ana', phone })).json();
    const ours = await sendOurs(tenant, phone);
    const theirs = await userSends(tenant, phone, { text: 'thanks' });
    const otherPhone = uniquePhone();
    await userSends(tenant, otherPhone, { text: 'who is this?' });

    const list = async (query: string) => (await call(t.app, tenant, 'GET', `/messages${query}`)).json();
    const all = await list('');
    expect(all.pagination.total_items).toBe(3);
    expect(all.data.map((m: { direction: string }) => m.direction).sort()).toEqual(['inbound', 'inbound', 'outbound']);
    // Outbound answers keep their meaning (and gain direction and reactions).
    expect(all.data.find((m: { direction: string }) => m.direction === 'outbound')).toMatchObject({
      id: ours.id, message_id: ours.wamid, to: phone, contact_id: contact.id, template_name: expect.any(String), reactions: [],
    });

    expect((await list('?direction=outbound')).data.map((m: { id: string }) => m.id)).toEqual([ours.id]);
    const inbound = await list('?direction=inbound');
    expect(inbound.pagination.total_items).toBe(2);
    expect((await list(`?from=${encodeURIComponent(phone)}`)).data.map((m: { message_id: string }) => m.message_id)).toEqual([theirs.wamid]);
    expect((await list(`?to=${encodeURIComponent(phone)}`)).data.map((m: { id: string }) => m.id)).toEqual([ours.id]);
    expect((await list('?status=accepted')).data.every((m: { direction: string }) => m.direction === 'outbound')).toBe(true);
    const byContact = await list(`?contact_id=${contact.id}`);
    expect(byContact.data.map((m: { direction: string }) => m.direction).sort()).toEqual(['inbound', 'outbound']);
    expect((await list(`?direction=inbound&to=${encodeURIComponent(phone)}`)).pagination.total_items).toBe(0);
    // Paging across both tables: one at a time, newest first, each once.
    const pages = [];
    for (let page = 1; page <= 3; page++) pages.push(...(await list(`?limit=1&page=${page}`)).data.map((m: { id: string }) => m.id));
    expect(pages).toEqual(all.data.map((m: { id: string }) => m.id));
    expect((await call(t.app, tenant, 'GET', '/messages?direction=sideways')).statusCode).toBe(400);

    const other = await createConnectedTenant(t.app);
    expect((await call(t.app, other, 'GET', '/messages')).json().pagination.total_items).toBe(0);
    expect((await call(t.app, other, 'GET', `/messages/${theirs.wamid}`)).statusCode).toBe(404);
  });
});
