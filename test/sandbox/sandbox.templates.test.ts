import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { eventually } from '../helpers/app.ts';
import type { Sandbox } from '../../src/sandbox/sandbox.ts';
import { http, startReceiver, startTestSandbox, templateSend, TOKEN, uniqueId, uniqueName, uniquePhone, type CallbackReceiver } from './helpers.ts';

const HI_BODY = { type: 'BODY', text: 'Hi {{1}}, welcome.', example: { body_text: [['Ana']] } };

describe('sandbox: templates, review and status callbacks', () => {
  let sandbox: Sandbox;
  let receiver: CallbackReceiver;
  const wabaId = uniqueId();
  const phoneId = uniqueId();

  beforeAll(async () => {
    receiver = await startReceiver();
    sandbox = await startTestSandbox({ callbackUrl: receiver.url, reviewMs: 30 });
    await http('POST', `${sandbox.url}/__sandbox/phone_numbers`, { phone_number_id: phoneId, waba_id: wabaId });
  });
  afterAll(async () => {
    await sandbox.close();
    await receiver.close();
  });

  const create = (name: string, extra: Record<string, unknown> = {}, waba = wabaId) => http('POST', `${sandbox.baseUrl}/${waba}/message_templates`, {
    name, language: 'en_US', category: 'MARKETING', components: [HI_BODY], ...extra,
  });
  const templateEvents = (id: string) => receiver.received
    .flatMap((r) => r.body.entry.flatMap((e: any) => e.changes.filter((c: any) => c.field === 'message_template_status_update').map((c: any) => ({ ...c.value, waba: e.id }))))
    .filter((v: any) => String(v.message_template_id) === id);
  const review = (name: string, status: string, reason?: string) => http('POST', `${sandbox.url}/__sandbox/templates/review`, { name, language: 'en_US', status, reason });

  it('creates a PENDING template that is approved after review_ms, with a status callback', async () => {
    const name = uniqueName();
    const created = await create(name);
    expect(created.status).toBe(200);
    expect(created.body).toEqual({ id: expect.stringMatching(/^\d+$/), status: 'PENDING', category: 'MARKETING' });
    const id = created.body.id;
    const [event] = await eventually(async () => { const e = templateEvents(id); return e.length > 0 ? e : null; });
    expect(event).toMatchObject({
      event: 'APPROVED', message_template_id: Number(id), message_template_name: name, message_template_language: 'en_US',
      message_template_category: 'MARKETING', reason: 'NONE', waba: wabaId,
    });
    expect(typeof event.message_template_id).toBe('number');
    const got = await http('GET', `${sandbox.baseUrl}/${id}`);
    expect(got.body).toMatchObject({ id, name, language: 'en_US', status: 'APPROVED', category: 'MARKETING', components: [HI_BODY] });
  });

  it('applies a REJECTED outcome set before creation when the review completes', async () => {
    const name = uniqueName();
    await review(name, 'REJECTED', 'PROMOTIONAL');
    const id = (await create(name)).body.id;
    const [event] = await eventually(async () => { const e = templateEvents(id); return e.length > 0 ? e : null; });
    expect(event).toMatchObject({ event: 'REJECTED', reason: 'PROMOTIONAL' });
    expect((await http('GET', `${sandbox.baseUrl}/${id}`)).body).toMatchObject({ status: 'REJECTED', rejected_reason: 'PROMOTIONAL' });
    expect((await http('POST', `${sandbox.baseUrl}/${phoneId}/messages`, { ...templateSend(uniquePhone(), name, ['a']), template: { name, language: { code: 'en_US' }, components: [{ type: 'body', parameters: [{ type: 'text', text: 'a' }] }] } })).body.error.code).toBe(132001);
  });

  it('pauses and disables an approved template later, with callbacks, and sends then fail with 132015 and 132016', async () => {
    const name = uniqueName();
    const id = (await create(name)).body.id;
    await eventually(async () => templateEvents(id).length === 1);
    const sendIt = () => http('POST', `${sandbox.baseUrl}/${phoneId}/messages`, {
      messaging_product: 'whatsapp', to: uniquePhone(), type: 'template',
      template: { name, language: { code: 'en_US' }, components: [{ type: 'body', parameters: [{ type: 'text', text: 'Ada' }] }] },
    });
    expect((await sendIt()).status).toBe(200);

    expect((await review(name, 'PAUSED')).body.templates).toEqual([id]);
    const paused = await eventually(async () => templateEvents(id).find((e: any) => e.event === 'PAUSED'));
    expect(paused).toMatchObject({ reason: 'NONE', other_info: { title: 'FIRST_PAUSE' } });
    expect((await sendIt()).body.error.code).toBe(132015);

    await review(name, 'DISABLED');
    const disabled = await eventually(async () => templateEvents(id).find((e: any) => e.event === 'DISABLED'));
    expect(disabled.disable_info).toBeDefined();
    expect((await sendIt()).body.error.code).toBe(132016);
    expect((await http('GET', `${sandbox.baseUrl}/${id}`)).body.status).toBe('DISABLED');
  });

  it('approves a pending template at once when the reviewer decides through the control API', async () => {
    await http('PUT', `${sandbox.url}/__sandbox/config`, { review_ms: 60_000 });
    try {
      const name = uniqueName();
      const id = (await create(name)).body.id;
      await review(name, 'APPROVED');
      expect((await http('GET', `${sandbox.baseUrl}/${id}`)).body.status).toBe('APPROVED');
    } finally {
      await http('PUT', `${sandbox.url}/__sandbox/config`, { review_ms: 30 });
    }
  });

  it('refuses a duplicate name and language on a WABA with 100 / 2388024, but not on another WABA or language', async () => {
    const name = uniqueName();
    expect((await create(name)).status).toBe(200);
    const duplicate = await create(name);
    expect(duplicate.status).toBe(400);
    expect(duplicate.body.error).toMatchObject({ code: 100, error_subcode: 2388024, error_user_title: 'Content in this language already exists' });
    expect((await create(name, {}, uniqueId())).status).toBe(200);
    expect((await create(name, { language: 'pt_BR' })).status).toBe(200);
  });

  it('validates template creation with code 100', async () => {
    expect((await create('Bad Name')).body.error.code).toBe(100);
    expect((await create(uniqueName(), { category: 'SHIPPING_UPDATE' })).body.error.code).toBe(100);
    expect((await create(uniqueName(), { components: [{ type: 'FOOTER', text: 'x' }] })).body.error.code).toBe(100);
  });

  it('refuses at creation, with Meta\'s error 100 and subcode, what Meta refuses before review', async () => {
    const body = (text: string, samples?: string[]) => ({ type: 'BODY', text, ...(samples ? { example: { body_text: [samples] } } : {}) });
    const cases: [string, unknown[], number | undefined, Record<string, unknown>?][] = [
      ['variable without example', [body('Hi {{1}}, welcome.')], undefined],
      ['too few example values', [body('Hi {{1}}, order {{2}} shipped.', ['Ana'])], undefined],
      ['body starting with a variable', [body('{{1}} is here.', ['Ana'])], 2388299],
      ['body ending with a variable', [body('Welcome {{1}}', ['Ana'])], 2388299],
      ['adjacent variables', [body('Hi {{1}} {{2}} there.', ['a', 'b'])], 2388293],
      ['variables out of sequence', [body('Hi {{1}} and {{3}} there.', ['a', 'b'])], 2388072],
      ['body over 1,024 characters', [body('x'.repeat(1025))], 2388040],
      ['media header without header_handle', [{ type: 'HEADER', format: 'IMAGE' }, body('Hi')], 2388047],
      ['text header variable without example', [{ type: 'HEADER', format: 'TEXT', text: 'Order {{1}}' }, body('Hi')], undefined],
      ['text header with two variables', [{ type: 'HEADER', format: 'TEXT', text: '{{1}} {{2}}', example: { header_text: ['a', 'b'] } }, body('Hi')], 2388047],
      ['header over 60 characters', [{ type: 'HEADER', format: 'TEXT', text: 'x'.repeat(61) }, body('Hi')], 2388040],
      ['variable in the footer', [body('Hi'), { type: 'FOOTER', text: 'Bye {{1}}' }], 2388073],
      ['footer over 60 characters', [body('Hi'), { type: 'FOOTER', text: 'x'.repeat(61) }], 2388040],
      ['URL button variable without example', [body('Hi'), { type: 'BUTTONS', buttons: [{ type: 'URL', text: 'Go', url: 'https://x.example/{{1}}' }] }], undefined],
      ['URL variable not at the end', [body('Hi'), { type: 'BUTTONS', buttons: [{ type: 'URL', text: 'Go', url: 'https://x.example/{{1}}/a', example: ['https://x.example/1/a'] }] }], undefined],
      ['eleven buttons', [body('Hi'), { type: 'BUTTONS', buttons: Array.from({ length: 11 }, (_, i) => ({ type: 'QUICK_REPLY', text: `B${i}` })) }], undefined],
      ['three URL buttons', [body('Hi'), { type: 'BUTTONS', buttons: [1, 2, 3].map((i) => ({ type: 'URL', text: `U${i}`, url: 'https://x.example' })) }], undefined],
      ['button text over 25 characters', [body('Hi'), { type: 'BUTTONS', buttons: [{ type: 'QUICK_REPLY', text: 'x'.repeat(26) }] }], undefined],
      ['OTP button outside AUTHENTICATION', [body('Hi'), { type: 'BUTTONS', buttons: [{ type: 'OTP', otp_type: 'COPY_CODE' }] }], undefined],
      ['named variable without example', [body('Hi {{first_name}}, welcome.')], undefined, { parameter_format: 'NAMED' }],
      ['positional variable in a NAMED template', [body('Hi {{1}}, welcome.', ['Ana'])], 2388072, { parameter_format: 'NAMED' }],
      ['two BODY components', [body('Hi'), body('Again')], undefined],
      ['unknown component', [body('Hi'), { type: 'CAROUSEL_X' }], undefined],
    ];
    const stored = sandbox.state.templates.list(wabaId).length;
    for (const [what, components, subcode, extra] of cases) {
      const res = await create(uniqueName(), { components, ...extra });
      expect(res.status, what).toBe(400);
      expect(res.body.error, what).toMatchObject({ code: 100, type: 'OAuthException', error_data: { details: expect.any(String) }, error_user_msg: expect.any(String) });
      expect(res.body.error.error_subcode, what).toBe(subcode);
    }
    expect(sandbox.state.templates.list(wabaId)).toHaveLength(stored); // nothing refused went to review

    // The same shapes written as Meta wants them are taken.
    const good = await create(uniqueName(), { components: [
      { type: 'HEADER', format: 'IMAGE', example: { header_handle: ['4::aW1hZ2UvanBlZw==:ARZ'] } },
      body('Olá {{1}}, seu pedido {{2}} saiu para entrega.', ['Ana', 'A-1001']),
      { type: 'FOOTER', text: 'Responda PARAR para não receber avisos' },
      { type: 'BUTTONS', buttons: [{ type: 'URL', text: 'Rastrear', url: 'https://loja.example/rastreio/{{1}}', example: ['https://loja.example/rastreio/A-1001'] }, { type: 'QUICK_REPLY', text: 'Parar avisos' }] },
    ] });
    expect(good.status).toBe(200);
    const named = await create(uniqueName(), { parameter_format: 'NAMED', components: [
      { type: 'BODY', text: 'Hi {{first_name}}, order {{order_id}} shipped.', example: { body_text_named_params: [{ param_name: 'first_name', example: 'Ana' }, { param_name: 'order_id', example: 'A-1' }] } },
    ] });
    expect(named.status).toBe(200);
  });

  it('models copy-code AUTHENTICATION templates as Meta does: preset text, the OTP button stored as a URL button, sent with the code in body and button', async () => {
    const name = uniqueName('otp');
    // Meta's documented creation request, lower-case types and all.
    const created = await create(name, { category: 'authentication', components: [
      { type: 'body', add_security_recommendation: true },
      { type: 'footer', code_expiration_minutes: 5 },
      { type: 'buttons', buttons: [{ type: 'otp', otp_type: 'copy_code', text: 'Copy Code' }] },
    ] });
    expect(created.status).toBe(200);
    expect(created.body.category).toBe('AUTHENTICATION');
    await review(name, 'APPROVED');
    const got = await http('GET', `${sandbox.baseUrl}/${created.body.id}`);
    expect(got.body.components).toEqual([
      { type: 'BODY', text: '*{{1}}* is your verification code. For your security, do not share this code.', add_security_recommendation: true },
      { type: 'FOOTER', text: 'This code expires in 5 minutes.', code_expiration_minutes: 5 },
      { type: 'BUTTONS', buttons: [{ type: 'URL', text: 'Copy Code', url: 'https://www.whatsapp.com/otp/code/?otp_type=COPY_CODE&code=otp{{1}}' }] },
    ]);
    const sendOtp = (components: unknown[]) => http('POST', `${sandbox.baseUrl}/${phoneId}/messages`, {
      messaging_product: 'whatsapp', to: uniquePhone(), type: 'template', template: { name, language: { code: 'en_US' }, components },
    });
    const body = { type: 'body', parameters: [{ type: 'text', text: '482913' }] };
    const button = { type: 'button', sub_type: 'url', index: '0', parameters: [{ type: 'text', text: '482913' }] };
    expect((await sendOtp([body, button])).status).toBe(200);
    expect((await sendOtp([body])).body.error.code).toBe(132000);
    expect((await sendOtp([button])).body.error.code).toBe(132000);

    const refused = async (components: unknown[]) => (await create(uniqueName('otp'), { category: 'AUTHENTICATION', components })).body.error;
    expect(await refused([{ type: 'BODY', text: 'Your code is {{1}} today.', example: { body_text: [['1']] } }, { type: 'BUTTONS', buttons: [{ type: 'OTP', otp_type: 'COPY_CODE' }] }])).toMatchObject({ code: 100 });
    expect(await refused([{ type: 'BODY' }])).toMatchObject({ code: 100 });
    expect(await refused([{ type: 'HEADER', format: 'TEXT', text: 'x' }, { type: 'BODY' }, { type: 'BUTTONS', buttons: [{ type: 'OTP', otp_type: 'COPY_CODE' }] }])).toMatchObject({ code: 100 });
    expect(await refused([{ type: 'BODY' }, { type: 'FOOTER', code_expiration_minutes: 120 }, { type: 'BUTTONS', buttons: [{ type: 'OTP', otp_type: 'COPY_CODE' }] }])).toMatchObject({ code: 100 });
    expect(await refused([{ type: 'BODY' }, { type: 'BUTTONS', buttons: [{ type: 'OTP', otp_type: 'ONE_TAP' }] }])).toMatchObject({ code: 100 });
  });

  it('lists a WABA\'s templates with name and status filters and cursor paging', async () => {
    const waba = uniqueId();
    const names = [uniqueName('list'), uniqueName('list'), uniqueName('list')];
    for (const name of names) await create(name, {}, waba);
    await create(uniqueName('other'), {}, uniqueId());
    const first = await http('GET', `${sandbox.baseUrl}/${waba}/message_templates?limit=2`);
    expect(first.body.data).toHaveLength(2);
    expect(first.body.paging.next).toContain('after=');
    const second = await http('GET', `${sandbox.baseUrl}/${waba}/message_templates?limit=2&after=${first.body.paging.cursors.after}`);
    expect(second.body.data).toHaveLength(1);
    expect(second.body.paging.next).toBeUndefined();
    expect([...first.body.data, ...second.body.data].map((t: any) => t.name)).toEqual(names);
    const byName = await http('GET', `${sandbox.baseUrl}/${waba}/message_templates?name=${names[1]}`);
    expect(byName.body.data.map((t: any) => t.name)).toEqual([names[1]]);
    await eventually(async () => (await http('GET', `${sandbox.baseUrl}/${waba}/message_templates?status=APPROVED`)).body.data.length === 3);
  });

  it('template reads honour fields, content and name_or_content', async () => {
    const waba = uniqueId();
    const shipped = uniqueName('shipped');
    const promo = uniqueName('promo');
    await create(shipped, { components: [{ type: 'BODY', text: 'Your parcel {{1}} is on its way.', example: { body_text: [['A-1']] } }] }, waba);
    const promoId = (await create(promo, { components: [{ type: 'BODY', text: 'Summer sale: everything half price.' }] }, waba)).body.id;
    const list = (q: string) => http('GET', `${sandbox.baseUrl}/${waba}/message_templates?${q}`);

    const picked = await list('fields=name,status');
    expect(picked.body.data).toEqual([{ id: expect.any(String), name: shipped, status: expect.any(String) }, { id: promoId, name: promo, status: expect.any(String) }]);
    expect((await list('fields=name,quality_score&name=' + promo)).body.data).toEqual([{ id: promoId, name: promo, quality_score: { score: 'UNKNOWN' } }]);
    const unknown = await list('fields=name,favourite_colour');
    expect(unknown.status).toBe(400);
    expect(unknown.body.error).toMatchObject({ code: 100, message: '(#100) Tried accessing nonexisting field (favourite_colour) on node type (WhatsAppBusinessHSM)' });

    expect((await list('name_or_content=PARCEL')).body.data.map((t: any) => t.name)).toEqual([shipped]);
    expect((await list(`name_or_content=${promo.slice(0, 8)}`)).body.data.map((t: any) => t.name)).toEqual([promo]);
    expect((await list('content=half price')).body.data.map((t: any) => t.name)).toEqual([promo]);
    expect((await list('content=' + promo)).body.data).toEqual([]); // content is the text, not the name

    expect((await http('GET', `${sandbox.baseUrl}/${promoId}?fields=category,components`)).body).toEqual({
      id: promoId, category: 'MARKETING', components: [{ type: 'BODY', text: 'Summer sale: everything half price.' }],
    });
  });

  it('serves Graph paths without a version, as Graph serves its oldest supported one', async () => {
    const name = uniqueName('unversioned');
    const created = await http('POST', `${sandbox.url}/${wabaId}/message_templates`, { name, language: 'en_US', category: 'UTILITY', components: [HI_BODY] });
    expect(created.status).toBe(200);
    expect((await http('GET', `${sandbox.url}/${created.body.id}`)).body.name).toBe(name);
    expect((await http('GET', `${sandbox.url}/${wabaId}/message_templates?name=${name}`)).body.data).toHaveLength(1);
    await review(name, 'APPROVED');
    const sent = await http('POST', `${sandbox.url}/${phoneId}/messages`, {
      messaging_product: 'whatsapp', to: uniquePhone(), type: 'template',
      template: { name, language: { code: 'en_US' }, components: [{ type: 'body', parameters: [{ type: 'text', text: 'Ada' }] }] },
    });
    expect(sent.status).toBe(200);
    expect((await http('GET', `${sandbox.url}/${wabaId}/unknown_edge`)).body.error.code).toBe(2500);
    expect((await http('GET', `${sandbox.url}/`)).body.error.code).toBe(2500);
  });

  it('learns which WABA a phone number sends for, even when tenants share template names', async () => {
    const name = uniqueName('shared');
    const [wabaA, wabaB, phoneA, phoneB] = [uniqueId(), uniqueId(), uniqueId(), uniqueId()];
    const idA = (await create(name, {}, wabaA)).body.id;
    const idB = (await create(name, {}, wabaB)).body.id;
    await review(name, 'APPROVED');
    const sendVia = (phone: string) => http('POST', `${sandbox.baseUrl}/${phone}/messages`, {
      messaging_product: 'whatsapp', to: uniquePhone(), type: 'template',
      template: { name, language: { code: 'en_US' }, components: [{ type: 'body', parameters: [{ type: 'text', text: 'Ada' }] }] },
    });
    await http('POST', `${sandbox.url}/__sandbox/phone_numbers`, { phone_number_id: phoneA, waba_id: wabaA });
    expect((await sendVia(phoneB)).status).toBe(200); // wabaA is phoneA's, so phoneB must be wabaB's
    expect(sandbox.state.templates.wabaOf(phoneB)).toBe(wabaB);
    // A decision scoped to B's WABA pauses only B's copy.
    const paused = await http('POST', `${sandbox.url}/__sandbox/templates/review`, { name, language: 'en_US', status: 'PAUSED', waba_id: wabaB });
    expect(paused.body.templates).toEqual([idB]);
    expect((await sendVia(phoneB)).body.error.code).toBe(132015);
    expect((await sendVia(phoneA)).status).toBe(200);
    expect(sandbox.state.templates.get(idA)!.status).toBe('APPROVED');
  });

  it('answers Graph\'s error for an unknown object id', async () => {
    const res = await http('GET', `${sandbox.baseUrl}/999`);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe(100);
  });

  it('delivers inbound text and Flow nfm_reply messages as signed callbacks', async () => {
    const from = uniquePhone();
    const text = await http('POST', `${sandbox.url}/__sandbox/inbound`, { to_phone_number_id: phoneId, from, text: 'Olá' });
    expect(text.status).toBe(200);
    const flow = await http('POST', `${sandbox.url}/__sandbox/inbound`, { to_phone_number_id: phoneId, from, flow_response: { flow_token: 'FT-1', cpf: '123', consent: true } });
    const messages = await eventually(async () => {
      const found = receiver.received.filter((r) => r.raw.includes(text.body.message_id) || r.raw.includes(flow.body.message_id));
      return found.length === 2 ? found : null;
    });
    for (const post of messages) {
      expect(post.signatureValid).toBe(true);
      expect(post.body.entry[0]).toMatchObject({ id: wabaId, changes: [{ field: 'messages', value: { metadata: { phone_number_id: phoneId }, contacts: [{ wa_id: from.slice(1) }] } }] });
    }
    const all = messages.map((m) => m.body.entry[0].changes[0].value.messages[0]);
    const textMessage = all.find((m) => m.type === 'text');
    expect(textMessage).toMatchObject({ from: from.slice(1), id: text.body.message_id, type: 'text', text: { body: 'Olá' }, timestamp: expect.stringMatching(/^\d+$/) });
    const flowMessage = all.find((m) => m.type === 'interactive');
    expect(flowMessage.interactive.type).toBe('nfm_reply');
    expect(JSON.parse(flowMessage.interactive.nfm_reply.response_json)).toEqual({ flow_token: 'FT-1', cpf: '123', consent: true });
  });

  it('folds a top-level flow_token into the Flow response, and refuses an inbound without text or flow_response', async () => {
    const res = await http('POST', `${sandbox.url}/__sandbox/inbound`, { to_phone_number_id: phoneId, from: uniquePhone(), flow_token: 'FT-9', flow_response: { rating: 5 } });
    const post = await eventually(async () => receiver.received.find((r) => r.raw.includes(res.body.message_id)));
    const message = post.body.entry[0].changes[0].value.messages[0];
    expect(JSON.parse(message.interactive.nfm_reply.response_json)).toEqual({ flow_token: 'FT-9', rating: 5 });
    expect((await http('POST', `${sandbox.url}/__sandbox/inbound`, { to_phone_number_id: phoneId, from: uniquePhone() })).status).toBe(400);
  });

  it('accepts a multipart media upload and returns an id that GET resolves', async () => {
    const boundary = 'xyzBOUNDARY';
    const body = Buffer.concat([
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="messaging_product"\r\n\r\nwhatsapp\r\n`),
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="type"\r\n\r\nimage/png\r\n`),
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\nContent-Type: image/png\r\n\r\n`),
      Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a]),
      Buffer.from(`\r\n--${boundary}--\r\n`),
    ]);
    const res = await request(`${sandbox.baseUrl}/${phoneId}/media`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': `multipart/form-data; boundary=${boundary}` }, body });
    const json = await res.body.json() as any;
    expect(res.statusCode).toBe(200);
    expect(json.id).toMatch(/^\d+$/);
    const media = await http('GET', `${sandbox.baseUrl}/${json.id}`);
    expect(media.body).toMatchObject({ id: json.id, mime_type: 'image/png', file_size: '6' });
    const notMultipart = await http('POST', `${sandbox.baseUrl}/${phoneId}/media`, { file: 'x' });
    expect(notMultipart.body.error.code).toBe(100);
  });
});
