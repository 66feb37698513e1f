import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Sandbox } from '../../src/sandbox/sandbox.ts';
import { eventually } from '../helpers/app.ts';
import {
  approvedTemplate, http, PDF_BYTES, PNG_BYTES, startReceiver, startTestSandbox, uniqueId, uniqueName, uniquePhone, uploadMedia, type CallbackReceiver,
} from './helpers.ts';

/**
 * The sandbox against the request shapes standard WhatsApp Cloud API clients form (the reference's
 * examples, whatsapp-api-js, pywa, the official Node SDK): what Meta takes must be taken, what Meta
 * refuses must be refused with Meta's code.
 */
describe('sandbox conformance: media uploads as clients send them', () => {
  let sandbox: Sandbox;
  const phoneId = uniqueId();

  beforeAll(async () => { sandbox = await startTestSandbox({ callbacks: false }); });
  afterAll(async () => { await sandbox.close(); });

  it('takes the reference\'s form (messaging_product, type and file in the form)', async () => {
    const res = await uploadMedia(sandbox, phoneId, PNG_BYTES, { fields: { messaging_product: 'whatsapp', type: 'image/png' } });
    expect(res.status).toBe(200);
    expect((await http('GET', `${sandbox.baseUrl}/${res.body.id}`)).body).toMatchObject({ mime_type: 'image/png', file_size: String(PNG_BYTES.length) });
  });

  it('takes messaging_product in the query string with only the file in the form (whatsapp-api-js)', async () => {
    const res = await uploadMedia(sandbox, phoneId, PDF_BYTES, { contentType: 'application/pdf', filename: 'terms.pdf', fields: {}, query: { messaging_product: 'whatsapp' } });
    expect(res.status).toBe(200);
    expect((await http('GET', `${sandbox.baseUrl}/${res.body.id}`)).body.mime_type).toBe('application/pdf');
    // Both in the query string.
    const both = await uploadMedia(sandbox, phoneId, PNG_BYTES, { fields: {}, query: { messaging_product: 'whatsapp', type: 'image/png' } });
    expect(both.status).toBe(200);
  });

  it('still refuses an upload that names messaging_product nowhere', async () => {
    const res = await uploadMedia(sandbox, phoneId, PNG_BYTES, { fields: { type: 'image/png' } });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ code: 100, message: '(#100) The parameter messaging_product is required.' });
  });

  it('refuses types outside Meta\'s list and files over its size limits with error 100', async () => {
    const refused = async (bytes: Buffer, options: Parameters<typeof uploadMedia>[3]) => {
      const res = await uploadMedia(sandbox, phoneId, bytes, options);
      expect(res.status, JSON.stringify(options)).toBe(400);
      expect(res.body.error.code, JSON.stringify(options)).toBe(100);
      return res.body.error.error_data.details as string;
    };
    const zip = Buffer.from([0x50, 0x4b, 0x03, 0x04, 0, 0, 0, 0]);
    expect(await refused(zip, { contentType: 'application/zip', filename: 'a.zip', fields: { messaging_product: 'whatsapp', type: 'application/zip' } })).toContain('application/zip');
    // An octet-stream part only labelled as an image is not an image.
    expect(await refused(PNG_BYTES, { contentType: 'application/octet-stream', fields: { messaging_product: 'whatsapp', type: 'image/png' } })).toMatch(/does not match/);
    expect(await refused(PNG_BYTES, { contentType: 'image/gif', filename: 'a.gif' })).toContain("'image/gif'");
    expect(await refused(Buffer.alloc(5 * 1024 * 1024 + 1, 1), { contentType: 'image/png' })).toMatch(/at most 5242880 bytes/);
    expect(await refused(Buffer.alloc(100 * 1024 + 1, 1), { contentType: 'image/webp', filename: 's.webp' })).toMatch(/at most 102400 bytes/);
    // Within the limits they are taken: an animated sticker may be larger than a static one.
    const animated = Buffer.concat([Buffer.from('RIFF\u0000\u0000\u0000\u0000WEBPVP8X\u0000\u0000\u0000\u0000ANIM'), Buffer.alloc(200 * 1024, 1)]);
    expect((await uploadMedia(sandbox, phoneId, animated, { contentType: 'image/webp', filename: 'a.webp' })).status).toBe(200);
    expect((await uploadMedia(sandbox, phoneId, Buffer.alloc(1024, 1), { contentType: 'audio/ogg', filename: 'v.ogg' })).status).toBe(200);
    expect((await uploadMedia(sandbox, phoneId, Buffer.alloc(5 * 1024 * 1024, 1), { contentType: 'image/jpeg', filename: 'big.jpg' })).status).toBe(200);
  });
});

describe('sandbox conformance: sends as standard clients form them', () => {
  let sandbox: Sandbox;
  let receiver: CallbackReceiver;
  const wabaId = uniqueId();
  const phoneId = uniqueId();
  let order: string;

  beforeAll(async () => {
    receiver = await startReceiver();
    sandbox = await startTestSandbox({ callbackUrl: receiver.url });
    await http('POST', `${sandbox.url}/__sandbox/phone_numbers`, { phone_number_id: phoneId, waba_id: wabaId });
    // The reference's order_shipped_v2 (§5), created as Meta wants it.
    order = (await approvedTemplate(sandbox, wabaId, [
      { type: 'HEADER', format: 'IMAGE', example: { header_handle: ['4::aW1hZ2UvanBlZw==:ARZ'] } },
      { type: 'BODY', text: 'Olá {{1}}, seu pedido de {{2}} chega em {{3}}.', example: { body_text: [['Ana', 'R$ 59,90', '3 de março']] } },
      { type: 'BUTTONS', buttons: [
        { type: 'URL', text: 'Rastrear', url: 'https://loja.example/rastreio/{{1}}', example: ['https://loja.example/rastreio/A-1001'] },
        { type: 'QUICK_REPLY', text: 'Parar avisos' },
      ] },
    ])).name;
  });
  afterAll(async () => {
    await sandbox.close();
    await receiver.close();
  });

  const send = (body: unknown) => http('POST', `${sandbox.baseUrl}/${phoneId}/messages`, body);
  const outcome = (id: string) => eventually(async () => receiver.statuses().find((s) => s.id === id && (s.status === 'read' || s.status === 'failed')));
  const orderSend = (to: string, header: unknown, indexes: [unknown, unknown] = ['0', '1']) => ({
    messaging_product: 'whatsapp', recipient_type: 'individual', to, type: 'template',
    biz_opaque_callback_data: 'tenant=42;campaign=981;row=17',
    template: {
      name: order, language: { code: 'en_US', policy: 'deterministic' },
      components: [
        { type: 'header', parameters: [header] },
        { type: 'body', parameters: [
          { type: 'text', text: 'Ana' },
          { type: 'currency', currency: { fallback_value: 'R$ 59,90', code: 'BRL', amount_1000: 59900 } },
          { type: 'date_time', date_time: { fallback_value: '3 de março de 2026' } },
        ] },
        { type: 'button', sub_type: 'url', index: indexes[0], parameters: [{ type: 'text', text: 'A-1001' }] },
        { type: 'button', sub_type: 'quick_reply', index: indexes[1], parameters: [{ type: 'payload', payload: 'STOP_ORDER_UPDATES:981:17' }] },
      ],
    },
  });

  it('the reference\'s template send: image header by uploaded id, text, currency and date_time body parameters, URL and quick-reply buttons', async () => {
    const mediaId = (await uploadMedia(sandbox, phoneId, PNG_BYTES, { fields: {}, query: { messaging_product: 'whatsapp' } })).body.id;
    const to = '+5511987654321';
    const res = await send(orderSend(to, { type: 'image', image: { id: mediaId } }));
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ messaging_product: 'whatsapp', contacts: [{ input: to, wa_id: '5511987654321' }], messages: [{ id: expect.stringMatching(/^wamid\./) }] });
    expect(await outcome(res.body.messages[0].id)).toMatchObject({ status: 'read', biz_opaque_callback_data: 'tenant=42;campaign=981;row=17' });
  });

  it('media by link, and button indexes as numbers (integrators report both work)', async () => {
    const res = await send(orderSend(uniquePhone(), { type: 'image', image: { link: 'https://cdn.example.com/order.jpg' } }, [0, 1]));
    expect(res.status).toBe(200);
    expect((await outcome(res.body.messages[0].id)).status).toBe('read');
  });

  it('document and video headers by link and id, a document with a filename', async () => {
    const doc = await approvedTemplate(sandbox, wabaId, [{ type: 'HEADER', format: 'DOCUMENT' }, { type: 'BODY', text: 'Your invoice is attached.' }]);
    const video = await approvedTemplate(sandbox, wabaId, [{ type: 'HEADER', format: 'VIDEO' }, { type: 'BODY', text: 'Watch how it works.' }]);
    const videoId = (await uploadMedia(sandbox, phoneId, Buffer.concat([Buffer.from([0, 0, 0, 0x18]), Buffer.from('ftypmp42'), Buffer.alloc(64)]), { contentType: 'video/mp4', filename: 'a.mp4' })).body.id;
    const withHeader = (name: string, param: unknown) => send({ messaging_product: 'whatsapp', to: uniquePhone(), type: 'template',
      template: { name, language: { code: 'en_US' }, components: [{ type: 'header', parameters: [param] }] } });
    const sends = [
      await withHeader(doc.name, { type: 'document', document: { link: 'https://cdn.example.com/invoice.pdf', filename: 'invoice-A-1001.pdf' } }),
      await withHeader(video.name, { type: 'video', video: { id: videoId } }),
    ];
    for (const res of sends) {
      expect(res.status).toBe(200);
      expect((await outcome(res.body.messages[0].id)).status).toBe('read');
    }
  });

  it('a copy-code authentication send: the code as the body parameter and as the url button parameter', async () => {
    const name = uniqueName('otp');
    const created = await http('POST', `${sandbox.baseUrl}/${wabaId}/message_templates`, { name, language: 'en_US', category: 'authentication', message_send_ttl_seconds: 60, components: [
      { type: 'body', add_security_recommendation: true }, { type: 'footer', code_expiration_minutes: 5 }, { type: 'buttons', buttons: [{ type: 'otp', otp_type: 'copy_code', text: 'Copy Code' }] },
    ] });
    expect(created.status).toBe(200);
    await http('POST', `${sandbox.url}/__sandbox/templates/review`, { name, language: 'en_US', status: 'APPROVED' });
    const res = await send({ messaging_product: 'whatsapp', recipient_type: 'individual', to: uniquePhone(), type: 'template', template: { name, language: { code: 'en_US' }, components: [
      { type: 'body', parameters: [{ type: 'text', text: '482913' }] },
      { type: 'button', sub_type: 'url', index: '0', parameters: [{ type: 'text', text: '482913' }] },
    ] } });
    expect(res.status).toBe(200);
    const status = await eventually(async () => receiver.statuses().find((s) => s.id === res.body.messages[0].id && s.status === 'sent'));
    expect(status.pricing).toMatchObject({ category: 'authentication' });
  });

  it('named parameters: every parameter carries its parameter_name', async () => {
    const name = uniqueName('named');
    expect((await http('POST', `${sandbox.baseUrl}/${wabaId}/message_templates`, { name, language: 'en_US', category: 'UTILITY', parameter_format: 'NAMED', components: [
      { type: 'BODY', text: 'Hi {{first_name}}, order {{order_id}} shipped.', example: { body_text_named_params: [{ param_name: 'first_name', example: 'Ana' }, { param_name: 'order_id', example: 'A-1' }] } },
    ] })).status).toBe(200);
    await http('POST', `${sandbox.url}/__sandbox/templates/review`, { name, language: 'en_US', status: 'APPROVED' });
    const named = (params: unknown[]) => send({ messaging_product: 'whatsapp', to: uniquePhone(), type: 'template', template: { name, language: { code: 'en_US' }, components: [{ type: 'body', parameters: params }] } });
    expect((await named([{ type: 'text', parameter_name: 'order_id', text: 'A-1' }, { type: 'text', parameter_name: 'first_name', text: 'Ana' }])).status).toBe(200);
    expect((await named([{ type: 'text', text: 'Ana' }, { type: 'text', text: 'A-1' }])).body.error.code).toBe(132000);
  });

  it('a free-form text message as the SDKs write it (a reply: the user wrote first)', async () => {
    const to = uniquePhone();
    await http('POST', `${sandbox.url}/__sandbox/inbound`, { to_phone_number_id: phoneId, from: to, text: 'Hi' });
    const res = await send({ messaging_product: 'whatsapp', recipient_type: 'individual', to, type: 'text', text: { preview_url: false, body: 'Olá!' } });
    expect(res.status).toBe(200);
    expect((await outcome(res.body.messages[0].id)).status).toBe('read');
  });
});
