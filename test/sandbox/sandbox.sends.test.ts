import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { eventually } from '../helpers/app.ts';
import type { Sandbox } from '../../src/sandbox/sandbox.ts';
import {
  approvedTemplate, http, PDF_BYTES, PNG_BYTES, startReceiver, startTestSandbox, templateSend, uniqueId, uniquePhone, uploadMedia, type CallbackReceiver,
} from './helpers.ts';

describe('sandbox: sends and status callbacks', () => {
  let sandbox: Sandbox;
  let receiver: CallbackReceiver;
  const wabaId = uniqueId();
  const phoneId = uniqueId();
  let template: { id: string; name: string };

  beforeAll(async () => {
    receiver = await startReceiver();
    sandbox = await startTestSandbox({ callbackUrl: receiver.url });
    await http('POST', `${sandbox.url}/__sandbox/phone_numbers`, { phone_number_id: phoneId, waba_id: wabaId });
    template = await approvedTemplate(sandbox, wabaId);
  });
  afterAll(async () => {
    await sandbox.close();
    await receiver.close();
  });
  beforeEach(async () => {
    await http('POST', `${sandbox.url}/__sandbox/reset`);
  });

  const send = (body: unknown, headers?: Record<string, string>) => http('POST', `${sandbox.baseUrl}/${phoneId}/messages`, body, headers);
  const statusesOf = (messageId: string) => receiver.statuses().filter((s) => s.id === messageId);

  it('answers health', async () => {
    expect((await http('GET', `${sandbox.url}/__sandbox/health`)).status).toBe(200);
  });

  it('accepts a template send with a wamid, then posts signed sent, delivered and read callbacks carrying the callback data', async () => {
    const to = uniquePhone();
    const res = await send(templateSend(to, template.name, ['Ada', 'A-1'], { biz_opaque_callback_data: 'row=17' }));
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ messaging_product: 'whatsapp', contacts: [{ input: to, wa_id: to.slice(1) }], messages: [{ id: expect.stringMatching(/^wamid\./) }] });
    const messageId = res.body.messages[0].id;

    const statuses = await eventually(async () => { const s = statusesOf(messageId); return s.length === 3 ? s : null; });
    expect(statuses.map((s) => s.status)).toEqual(['sent', 'delivered', 'read']);
    for (const status of statuses) {
      expect(status).toMatchObject({ id: messageId, recipient_id: to.slice(1), biz_opaque_callback_data: 'row=17', timestamp: expect.stringMatching(/^\d{10}$/) });
    }
    expect(statuses[0].pricing).toMatchObject({ pricing_model: 'PMP', category: 'utility' });

    const posts = receiver.received.filter((r) => r.raw.includes(messageId));
    expect(posts.every((p) => p.signatureValid)).toBe(true);
    const envelope = posts[0].body;
    expect(envelope.object).toBe('whatsapp_business_account');
    expect(envelope.entry[0].id).toBe(wabaId);
    expect(envelope.entry[0].changes[0].field).toBe('messages');
    expect(envelope.entry[0].changes[0].value).toMatchObject({ messaging_product: 'whatsapp', metadata: { phone_number_id: phoneId, display_phone_number: expect.any(String) } });
  });

  it('escapes non-ASCII and slashes in callback bodies as Meta does, and signs the raw bytes', async () => {
    const res = await send(templateSend(uniquePhone(), template.name, ['Zoë', 'A/1'], { biz_opaque_callback_data: 'café/1' }));
    const messageId = res.body.messages[0].id;
    const post = await eventually(async () => receiver.received.find((r) => r.raw.includes(messageId)));
    expect(post.raw).toContain('caf\\u00e9\\/1');
    expect(post.signatureValid).toBe(true);
    expect(post.body.entry[0].changes[0].value.statuses[0].biz_opaque_callback_data).toBe('café/1');
  });

  it('batches many statuses into few callback POSTs', async () => {
    const before = receiver.received.length;
    const replies = await Promise.all(Array.from({ length: 150 }, () => send(templateSend(uniquePhone(), template.name))));
    const ids = new Set(replies.map((r) => r.body.messages[0].id));
    await eventually(async () => receiver.statuses().filter((s) => ids.has(s.id) && s.status === 'read').length === 150);
    const posts = receiver.received.length - before;
    expect(posts).toBeLessThan(150 * 3 / 5);
    const sizes = receiver.received.slice(before).map((r) => r.body.entry.reduce((n: number, e: any) => n + e.changes[0].value.statuses.length, 0));
    expect(Math.max(...sizes)).toBeLessThanOrEqual(100);
  });

  it('refuses a send without a bearer token with code 190 and HTTP 401', async () => {
    const res = await send(templateSend(uniquePhone(), template.name), {});
    expect(res.status).toBe(401);
    expect(res.body.error).toMatchObject({ code: 190, type: 'OAuthException', fbtrace_id: expect.any(String) });
  });

  it('validates payloads with Meta codes: 100, 131008, 131009', async () => {
    const to = uniquePhone();
    const noProduct = await send({ to, type: 'template', template: { name: template.name, language: { code: 'en_US' } } });
    expect(noProduct.body.error.code).toBe(100);
    const noTo = await send({ messaging_product: 'whatsapp', type: 'template', template: { name: template.name, language: { code: 'en_US' } } });
    expect(noTo.status).toBe(400);
    expect(noTo.body.error).toMatchObject({ code: 131008, message: '(#131008) Required parameter is missing', error_data: { messaging_product: 'whatsapp', details: expect.any(String) } });
    const badTo = await send(templateSend('+12', template.name));
    expect(badTo.body.error.code).toBe(131009);
    const noLanguage = await send({ messaging_product: 'whatsapp', to, type: 'template', template: { name: template.name } });
    expect(noLanguage.body.error.code).toBe(131008);
    const longData = await send(templateSend(to, template.name, ['a', 'b'], { biz_opaque_callback_data: 'x'.repeat(513) }));
    expect(longData.body.error.code).toBe(100);
  });

  it('answers 132001 for an unknown template, a language it is not approved in, and a pending template', async () => {
    expect((await send(templateSend(uniquePhone(), 'no_such_template'))).body.error.code).toBe(132001);
    const otherLanguage = templateSend(uniquePhone(), template.name);
    otherLanguage.template.language.code = 'es';
    expect((await send(otherLanguage)).body.error.code).toBe(132001);

    await http('PUT', `${sandbox.url}/__sandbox/config`, { review_ms: 60_000 });
    const pending = `pending_${Date.now()}`;
    await http('POST', `${sandbox.baseUrl}/${wabaId}/message_templates`, { name: pending, language: 'en_US', category: 'UTILITY', components: [{ type: 'BODY', text: 'Hi' }] });
    const res = await send({ messaging_product: 'whatsapp', to: uniquePhone(), type: 'template', template: { name: pending, language: { code: 'en_US' } } });
    expect(res.body.error).toMatchObject({ code: 132001, message: '(#132001) Template name does not exist in the translation' });
  });

  it('answers 132000 when the parameter count does not match the placeholders, per component', async () => {
    const one = await send(templateSend(uniquePhone(), template.name, ['Ada']));
    expect(one.status).toBe(400);
    expect(one.body.error.code).toBe(132000);
    expect(one.body.error.error_data.details).toContain('body');
    expect((await send(templateSend(uniquePhone(), template.name, ['a', 'b', 'c']))).body.error.code).toBe(132000);

    const withButton = await approvedTemplate(sandbox, wabaId, [
      { type: 'HEADER', format: 'TEXT', text: 'Order {{1}}' },
      { type: 'BODY', text: 'Hi {{1}}, welcome.' },
      { type: 'BUTTONS', buttons: [{ type: 'QUICK_REPLY', text: 'Stop' }, { type: 'URL', text: 'Track', url: 'https://x.example/t/{{1}}' }] },
    ]);
    const base = { messaging_product: 'whatsapp', to: uniquePhone(), type: 'template' };
    const header = { type: 'header', parameters: [{ type: 'text', text: 'A-1' }] };
    const body = { type: 'body', parameters: [{ type: 'text', text: 'Ada' }] };
    const button = { type: 'button', sub_type: 'url', index: '1', parameters: [{ type: 'text', text: 'A-1' }] };
    const tpl = (components: unknown[]) => ({ ...base, template: { name: withButton.name, language: { code: 'en_US' }, components } });
    expect((await send(tpl([header, body, button]))).status).toBe(200);
    expect((await send(tpl([body, button]))).body.error.code).toBe(132000);
    expect((await send(tpl([header, body]))).body.error.code).toBe(132000);
  });

  it('answers 132012 when a parameter type does not match the template', async () => {
    const image = await approvedTemplate(sandbox, wabaId, [{ type: 'HEADER', format: 'IMAGE' }, { type: 'BODY', text: 'Hi {{1}}, welcome.' }]);
    const send1 = (headerParam: unknown) => send({
      messaging_product: 'whatsapp', to: uniquePhone(), type: 'template',
      template: { name: image.name, language: { code: 'en_US' }, components: [{ type: 'header', parameters: [headerParam] }, { type: 'body', parameters: [{ type: 'text', text: 'Ada' }] }] },
    });
    expect((await send1({ type: 'text', text: 'not an image' })).body.error.code).toBe(132012);
    expect((await send1({ type: 'image', image: { id: '123' } })).status).toBe(200);
  });

  it('applies recipient outcomes: reject answers the error, fail sends a failed callback, no_read stops at delivered', async () => {
    const [rejected, failed, unread, ok] = [uniquePhone(), uniquePhone(), uniquePhone(), uniquePhone()];
    await http('POST', `${sandbox.url}/__sandbox/recipients`, { to: rejected, outcome: 'reject', error_code: 131026 });
    await http('POST', `${sandbox.url}/__sandbox/recipients`, { to: failed, outcome: 'fail', error_code: 131049 });
    await http('POST', `${sandbox.url}/__sandbox/recipients`, { to: unread, outcome: 'no_read' });

    const rejectReply = await send(templateSend(rejected, template.name));
    expect(rejectReply.status).toBe(400);
    expect(rejectReply.body.error).toMatchObject({ code: 131026, message: '(#131026) Message undeliverable' });

    const failedId = (await send(templateSend(failed, template.name, ['a', 'b'], { biz_opaque_callback_data: 'f1' }))).body.messages[0].id;
    const unreadId = (await send(templateSend(unread, template.name))).body.messages[0].id;
    const okId = (await send(templateSend(ok, template.name))).body.messages[0].id;

    await eventually(async () => statusesOf(okId).some((s) => s.status === 'read'));
    const failure = await eventually(async () => statusesOf(failedId).find((s) => s.status === 'failed'));
    expect(failure).toMatchObject({ biz_opaque_callback_data: 'f1', errors: [{ code: 131049, title: expect.any(String), message: expect.any(String), error_data: { details: expect.any(String) }, href: expect.any(String) }] });
    expect(statusesOf(failedId).map((s) => s.status)).toEqual(['failed']);
    // The ok message was sent after the no_read one and is already read: no_read's read would have come by now.
    expect(statusesOf(unreadId).map((s) => s.status)).toEqual(['sent', 'delivered']);

    const log = await http('GET', `${sandbox.url}/__sandbox/sends?to=${encodeURIComponent(rejected)}`);
    expect(log.body.data).toEqual([]);
  });

  it('reject with a count refuses only the next N sends to the recipient, then the rule is gone', async () => {
    const to = uniquePhone();
    const rule = await http('POST', `${sandbox.url}/__sandbox/recipients`, { to, outcome: 'reject', error_code: 130429, count: 2 });
    expect(rule.body).toEqual({ to, outcome: 'reject', error_code: 130429, delay_ms: 0, remaining: 2 });
    expect((await send(templateSend(to, template.name))).body.error.code).toBe(130429);
    expect((await http('GET', `${sandbox.url}/__sandbox/recipients`)).body.data).toContainEqual({ to: to.slice(1), outcome: 'reject', error_code: 130429, delay_ms: 0, remaining: 1 });
    expect((await send(templateSend(to, template.name))).body.error.code).toBe(130429);
    expect((await http('GET', `${sandbox.url}/__sandbox/recipients`)).body.data.find((r: any) => r.to === to.slice(1))).toBeUndefined();
    expect((await send(templateSend(to, template.name))).status).toBe(200);
    expect((await http('POST', `${sandbox.url}/__sandbox/recipients`, { to, outcome: 'reject', count: 0 })).status).toBe(400);
  });

  it('accepts header media it cannot fetch, then fails the message with 131053 by callback (an undownloadable link, an unknown or foreign id, the wrong kind)', async () => {
    const image = await approvedTemplate(sandbox, wabaId, [{ type: 'HEADER', format: 'IMAGE', example: { header_handle: ['4::aW1hZ2U=:h'] } }, { type: 'BODY', text: 'Hi there' }]);
    const withHeader = (param: unknown, extra: Record<string, unknown> = {}) => send({
      messaging_product: 'whatsapp', to: uniquePhone(), type: 'template', ...extra,
      template: { name: image.name, language: { code: 'en_US' }, components: [{ type: 'header', parameters: [param] }] },
    });
    const own = (await uploadMedia(sandbox, phoneId, PNG_BYTES)).body.id;
    const pdf = (await uploadMedia(sandbox, phoneId, PDF_BYTES, { contentType: 'application/pdf', filename: 'a.pdf' })).body.id;
    const foreign = (await uploadMedia(sandbox, uniqueId(), PNG_BYTES)).body.id;
    const cases = {
      brokenLink: { type: 'image', image: { link: 'https://cdn.sandbox.invalid/missing.png' } },
      unknownId: { type: 'image', image: { id: '999000111222' } },
      foreignId: { type: 'image', image: { id: foreign } },
      wrongKind: { type: 'image', image: { id: pdf } },
      goodLink: { type: 'image', image: { link: 'https://cdn.example.com/logo.png' } },
      goodId: { type: 'image', image: { id: own } },
    };
    const ids: Record<string, string> = {};
    for (const [name, param] of Object.entries(cases)) {
      const res = await withHeader(param, { biz_opaque_callback_data: name });
      expect(res.status, name).toBe(200);
      ids[name] = res.body.messages[0].id;
    }
    for (const name of ['brokenLink', 'unknownId', 'foreignId', 'wrongKind']) {
      const failure = await eventually(async () => statusesOf(ids[name]).find((s) => s.status === 'failed'));
      expect(failure, name).toMatchObject({ biz_opaque_callback_data: name, errors: [{ code: 131053, title: 'Media upload error', error_data: { details: expect.any(String) } }] });
      expect(failure.pricing).toBeUndefined();
    }
    expect(statusesOf(ids.brokenLink)[0].errors[0].error_data.details).toContain('cdn.sandbox.invalid');
    for (const name of ['goodLink', 'goodId']) {
      await eventually(async () => statusesOf(ids[name]).some((s) => s.status === 'read'));
      expect(statusesOf(ids[name]).map((s) => s.status), name).toEqual(['sent', 'delivered', 'read']);
    }
    for (const name of ['brokenLink', 'unknownId', 'foreignId', 'wrongKind']) expect(statusesOf(ids[name]).map((s) => s.status), name).toEqual(['failed']);
    // A link that is not a URL at all is refused at once.
    const notUrl = await withHeader({ type: 'image', image: { link: 'not a url' } });
    expect(notUrl.status).toBe(400);
    expect(notUrl.body.error.code).toBe(131009);
  });

  it('knows the media ids it gave out after it is started again (Meta keeps them 30 days), and only for their phone number', async () => {
    const own = (await uploadMedia(sandbox, phoneId, PNG_BYTES)).body.id;
    const again = await startTestSandbox({ callbackUrl: receiver.url });
    try {
      await http('POST', `${again.url}/__sandbox/phone_numbers`, { phone_number_id: phoneId, waba_id: wabaId });
      const image = await approvedTemplate(again, wabaId, [{ type: 'HEADER', format: 'IMAGE' }, { type: 'BODY', text: 'Hi there' }]);
      const sendVia = (phone: string) => http('POST', `${again.baseUrl}/${phone}/messages`, { messaging_product: 'whatsapp', to: uniquePhone(), type: 'template',
        template: { name: image.name, language: { code: 'en_US' }, components: [{ type: 'header', parameters: [{ type: 'image', image: { id: own } }] }] } });
      const ok = (await sendVia(phoneId)).body.messages[0].id;
      const other = (await sendVia(uniqueId())).body.messages[0].id;
      await eventually(async () => statusesOf(ok).some((s) => s.status === 'read'));
      expect((await eventually(async () => statusesOf(other).find((s) => s.status === 'failed'))).errors[0].code).toBe(131053);
    } finally {
      await again.close();
    }
  });

  it('prices a message on sent and delivered, not on read or failed; a free-form reply is a free service message', async () => {
    const templateId = (await send(templateSend(uniquePhone(), template.name))).body.messages[0].id;
    const user = uniquePhone();
    await http('POST', `${sandbox.url}/__sandbox/inbound`, { to_phone_number_id: phoneId, from: user, text: 'Hello?' });
    const textId = (await send({ messaging_product: 'whatsapp', to: user, type: 'text', text: { body: 'hi' } })).body.messages[0].id;
    const statuses = await eventually(async () => { const s = statusesOf(templateId); return s.length === 3 ? s : null; });
    const utility = { billable: true, pricing_model: 'PMP', type: 'regular', category: 'utility' };
    expect(statuses.map((s) => [s.status, s.pricing])).toEqual([['sent', utility], ['delivered', utility], ['read', undefined]]);
    const text = await eventually(async () => statusesOf(textId).find((s) => s.status === 'sent'));
    expect(text.pricing).toEqual({ billable: false, pricing_model: 'PMP', type: 'free_customer_service', category: 'service' });
    // A utility template inside the user's open service window is free too (Meta's rule since 2025-07-01).
    const inWindow = (await send(templateSend(user, template.name))).body.messages[0].id;
    const free = await eventually(async () => statusesOf(inWindow).find((s) => s.status === 'sent'));
    expect(free.pricing).toEqual({ billable: false, pricing_model: 'PMP', type: 'free_customer_service', category: 'utility' });
  });

  it('holds a recipient\'s first status for delay_ms before its outcome (failed or sent)', async () => {
    const [slowFail, slowOk] = [uniquePhone(), uniquePhone()];
    const rule = await http('POST', `${sandbox.url}/__sandbox/recipients`, { to: slowFail, outcome: 'fail', error_code: 131049, delay_ms: 400 });
    expect(rule.body).toEqual({ to: slowFail, outcome: 'fail', error_code: 131049, delay_ms: 400 });
    await http('POST', `${sandbox.url}/__sandbox/recipients`, { to: slowOk, outcome: 'ok', delay_ms: 400 });
    const started = Date.now();
    const failId = (await send(templateSend(slowFail, template.name))).body.messages[0].id;
    const okId = (await send(templateSend(slowOk, template.name))).body.messages[0].id;
    const quickId = (await send(templateSend(uniquePhone(), template.name))).body.messages[0].id;
    const firstSeen = (id: string) => eventually(async () => (statusesOf(id).length > 0 ? Date.now() - started : null));
    const [failAfter, okAfter, quickAfter] = await Promise.all([firstSeen(failId), firstSeen(okId), firstSeen(quickId)]);
    expect(failAfter).toBeGreaterThanOrEqual(400);
    expect(okAfter).toBeGreaterThanOrEqual(400);
    expect(quickAfter).toBeLessThan(failAfter);
    expect(statusesOf(failId).map((s) => [s.status, s.errors?.[0].code])).toEqual([['failed', 131049]]);
    await eventually(async () => statusesOf(okId).some((s) => s.status === 'read'));
    expect(statusesOf(okId).map((s) => s.status)).toEqual(['sent', 'delivered', 'read']);
    expect((await http('POST', `${sandbox.url}/__sandbox/recipients`, { to: slowOk, outcome: 'ok', delay_ms: -1 })).status).toBe(400);
  });

  it('logs every accepted send, filterable by recipient, to count duplicates', async () => {
    const to = uniquePhone();
    await send(templateSend(to, template.name, ['Ada', 'A-1'], { biz_opaque_callback_data: 'dup' }));
    await send(templateSend(to, template.name, ['Ada', 'A-1'], { biz_opaque_callback_data: 'dup' }));
    await send(templateSend(uniquePhone(), template.name));
    const log = await http('GET', `${sandbox.url}/__sandbox/sends?to=${encodeURIComponent(to)}`);
    expect(log.body.data).toHaveLength(2);
    expect(log.body.data[0]).toEqual({
      message_id: expect.stringMatching(/^wamid\./), to, template: template.name, language: 'en_US',
      components: [{ type: 'body', parameters: [{ type: 'text', text: 'Ada' }, { type: 'text', text: 'A-1' }] }],
      biz_opaque_callback_data: 'dup', at: expect.any(String), phone_number_id: phoneId, from: expect.stringMatching(/127\.0\.0\.1$/),
    });
    expect((await http('GET', `${sandbox.url}/__sandbox/sends`)).body.data).toHaveLength(3);
  });

  it('fails sends above mps_limit per phone number with 130429', async () => {
    await http('PUT', `${sandbox.url}/__sandbox/config`, { mps_limit: 5 });
    const replies = [];
    for (let i = 0; i < 12; i++) replies.push(await send(templateSend(uniquePhone(), template.name)));
    const limited = replies.filter((r) => r.body.error?.code === 130429);
    expect(limited.length).toBeGreaterThan(0);
    expect(replies.filter((r) => r.status === 200).length).toBeLessThanOrEqual(10); // at most two one-second windows
    expect(limited[0].body.error).toMatchObject({ message: '(#130429) Rate limit hit', error_subcode: 2494055 });
    // Another phone number has its own budget.
    const [otherPhoneId, user] = [uniqueId(), uniquePhone()];
    await http('POST', `${sandbox.url}/__sandbox/inbound`, { to_phone_number_id: otherPhoneId, from: user, text: 'Hello?' });
    expect((await http('POST', `${sandbox.baseUrl}/${otherPhoneId}/messages`, { messaging_product: 'whatsapp', to: user, type: 'text', text: { body: 'hi' } })).status).toBe(200);
  });

  it('delays every Graph response by latency_ms, taking the send only then (so its callbacks follow the response)', async () => {
    await http('PUT', `${sandbox.url}/__sandbox/config`, { latency_ms: 150 });
    const started = Date.now();
    const to = uniquePhone();
    const res = await send(templateSend(to, template.name));
    expect(res.status).toBe(200);
    expect(Date.now() - started).toBeGreaterThanOrEqual(145);
    const [logged] = (await http('GET', `${sandbox.url}/__sandbox/sends?to=${encodeURIComponent(to)}`)).body.data;
    expect(new Date(logged.at).getTime() - started).toBeGreaterThanOrEqual(140);
  });

  it('answers a value of an unexpected type with a Meta request error (100), not an internal one', async () => {
    const res = await send({ ...templateSend(uniquePhone(), template.name), type: { toString: 1 } });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ code: 100, type: 'OAuthException' });
  });

  it('refuses a control body over the size limit with 413', async () => {
    const res = await http('PUT', `${sandbox.url}/__sandbox/config`, { review_ms: 10, padding: 'x'.repeat(2 * 1024 * 1024) });
    expect(res.status).toBe(413);
  });

  it('sends no status callbacks while callbacks are off', async () => {
    await http('PUT', `${sandbox.url}/__sandbox/config`, { callbacks: false });
    const silentId = (await send(templateSend(uniquePhone(), template.name))).body.messages[0].id;
    await http('PUT', `${sandbox.url}/__sandbox/config`, { callbacks: true });
    const loudId = (await send(templateSend(uniquePhone(), template.name))).body.messages[0].id;
    await eventually(async () => statusesOf(loudId).some((s) => s.status === 'read'));
    expect(statusesOf(silentId)).toEqual([]);
  });

  it('retries a callback the receiver refused, holding the message\'s later statuses until it is taken', async () => {
    receiver.failNext(2, 503);
    const messageId = (await send(templateSend(uniquePhone(), template.name))).body.messages[0].id;
    await eventually(async () => statusesOf(messageId).length === 3);
    expect(statusesOf(messageId).map((s) => s.status)).toEqual(['sent', 'delivered', 'read']);
  });

  it('reset forgets recipient rules, the sends log and config changes', async () => {
    const to = uniquePhone();
    await http('POST', `${sandbox.url}/__sandbox/recipients`, { to, outcome: 'reject', error_code: 131050 });
    await http('PUT', `${sandbox.url}/__sandbox/config`, { latency_ms: 5, mps_limit: 1000, callback_url: receiver.url });
    await send(templateSend(uniquePhone(), template.name));
    expect((await send(templateSend(to, template.name))).body.error.code).toBe(131050);

    expect((await http('POST', `${sandbox.url}/__sandbox/reset`)).status).toBe(200);
    expect((await send(templateSend(to, template.name))).status).toBe(200);
    expect((await http('GET', `${sandbox.url}/__sandbox/sends`)).body.data).toHaveLength(1);
    const config = await http('GET', `${sandbox.url}/__sandbox/config`);
    expect(config.body).toMatchObject({ latency_ms: 0, mps_limit: null, callbacks: true, callback_url: receiver.url });
  });

  it('hold_statuses keeps status callbacks until released, in POSTs of the batch size asked, each stage once the one before was taken', async () => {
    // A sandbox of its own: the shared one may still owe statuses of earlier tests.
    const own = await startTestSandbox({ callbackUrl: receiver.url });
    try {
      const [ownWaba, ownPhone] = [uniqueId(), uniqueId()];
      await http('POST', `${own.url}/__sandbox/phone_numbers`, { phone_number_id: ownPhone, waba_id: ownWaba });
      const ownTemplate = await approvedTemplate(own, ownWaba);
      expect((await http('PUT', `${own.url}/__sandbox/config`, { hold_statuses: true })).body.hold_statuses).toBe(true);
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) ids.push((await http('POST', `${own.baseUrl}/${ownPhone}/messages`, templateSend(uniquePhone(), ownTemplate.name))).body.messages[0].id);
      const mine = () => receiver.statuses().filter((s) => ids.includes(s.id));
      const myPosts = () => receiver.received.filter((r) => r.body.entry.some((e: any) => e.changes.some((c: any) => c.value.statuses?.some((x: any) => ids.includes(x.id)))));
      await new Promise((resolve) => setTimeout(resolve, 150));
      expect(mine()).toEqual([]);

      // Answered once the receiver took every POST: the statuses are there, their next stage waits.
      expect((await http('POST', `${own.url}/__sandbox/statuses/release`, { batch_size: 2 })).body).toEqual({ statuses: 3, posts: 2 });
      expect(mine().map((s) => s.status)).toEqual(['sent', 'sent', 'sent']);
      expect(myPosts()).toHaveLength(2);
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(mine()).toHaveLength(3);
      expect((await http('POST', `${own.url}/__sandbox/statuses/release`, {})).body).toEqual({ statuses: 3, posts: 1 });
      expect(mine().filter((s) => s.status === 'delivered')).toHaveLength(3);

      // Held no more: what waits goes out by itself.
      await http('PUT', `${own.url}/__sandbox/config`, { hold_statuses: false });
      await eventually(async () => mine().filter((s) => s.status === 'read').length === 3);
      expect((await http('POST', `${own.url}/__sandbox/statuses/release`, { batch_size: 0 })).status).toBe(400);
      expect((await http('PUT', `${own.url}/__sandbox/config`, { hold_statuses: 'yes' })).status).toBe(400);
    } finally {
      await own.close();
    }
  });

  it('rejects invalid control input with 400', async () => {
    expect((await http('PUT', `${sandbox.url}/__sandbox/config`, { latency_ms: -1 })).status).toBe(400);
    expect((await http('POST', `${sandbox.url}/__sandbox/recipients`, { to: uniquePhone(), outcome: 'explode' })).status).toBe(400);
    expect((await http('POST', `${sandbox.url}/__sandbox/templates/review`, { name: 'x', language: 'en', status: 'MAYBE' })).status).toBe(400);
  });
});
