import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { eventually } from '../helpers/app.ts';
import type { Sandbox } from '../../src/sandbox/sandbox.ts';
import { approvedTemplate, http, startReceiver, startTestSandbox, templateSend, uniqueId, uniquePhone, type CallbackReceiver } from './helpers.ts';

/** How the sandbox fails like Meta: per-user marketing caps, template pacing and pauses, the service window. */
describe('sandbox: Meta\'s deferred, held and paused outcomes', () => {
  let sandbox: Sandbox;
  let receiver: CallbackReceiver;
  const wabaId = uniqueId();
  const phoneId = uniqueId();
  let marketing: { id: string; name: string };
  let utility: { id: string; name: string };

  beforeAll(async () => {
    receiver = await startReceiver();
    sandbox = await startTestSandbox({ callbackUrl: receiver.url });
    await http('POST', `${sandbox.url}/__sandbox/phone_numbers`, { phone_number_id: phoneId, waba_id: wabaId });
    marketing = await approvedTemplate(sandbox, wabaId, undefined, undefined, 'MARKETING');
    utility = await approvedTemplate(sandbox, wabaId);
  });
  afterAll(async () => {
    await sandbox.close();
    await receiver.close();
  });
  beforeEach(async () => {
    await http('POST', `${sandbox.url}/__sandbox/reset`);
  });

  const control = (method: string, path: string, body?: unknown) => http(method, `${sandbox.url}/__sandbox${path}`, body);
  const send = (body: unknown) => http('POST', `${sandbox.baseUrl}/${phoneId}/messages`, body);
  const statusesOf = (messageId: string) => receiver.statuses().filter((s) => s.id === messageId);
  const finalStatus = (messageId: string) => eventually(async () => statusesOf(messageId).find((s) => s.status === 'read' || s.status === 'failed'));
  const templateEvents = (templateId: string) => receiver.received
    .flatMap((r) => r.body.entry.flatMap((e: any) => e.changes.filter((c: any) => c.field === 'message_template_status_update').map((c: any) => c.value)))
    // Pauses and their ends carry other_info; the template's first approval does not.
    .filter((v: any) => String(v.message_template_id) === templateId && v.other_info);
  /** A template of its own, since these tests pause theirs. */
  const ownTemplate = () => approvedTemplate(sandbox, wabaId, undefined, undefined, 'MARKETING');

  describe('defer: Meta\'s per-user marketing cap (131049)', () => {
    it('accepts the next N marketing sends and fails them by callback with Meta\'s error object; utility sends pass; then sends succeed', async () => {
      const to = uniquePhone();
      const rule = await control('POST', '/recipients', { to, outcome: 'defer', count: 2 });
      expect(rule.status).toBe(200);
      expect(rule.body).toEqual({ to, outcome: 'defer', error_code: 131049, delay_ms: 0, remaining: 2 });

      const first = await send(templateSend(to, marketing.name, undefined, { biz_opaque_callback_data: 'row=1' }));
      expect(first.status).toBe(200);
      expect(first.body.messages).toEqual([{ id: expect.stringMatching(/^wamid\./) }]);
      // A utility template is not under the marketing cap, and does not use up the rule.
      const between = await send(templateSend(to, utility.name));
      const second = await send(templateSend(to, marketing.name));
      // Used up: the rule is gone.
      expect((await control('GET', '/recipients')).body.data.find((r: any) => r.to === to.slice(1))).toBeUndefined();
      const third = await send(templateSend(to, marketing.name));

      const failed = await finalStatus(first.body.messages[0].id);
      expect(failed).toEqual({
        id: first.body.messages[0].id, status: 'failed', timestamp: expect.stringMatching(/^\d+$/), recipient_id: to.slice(1), biz_opaque_callback_data: 'row=1',
        errors: [{
          code: 131049,
          title: 'This message was not delivered to maintain healthy ecosystem engagement.',
          message: 'This message was not delivered to maintain healthy ecosystem engagement.',
          error_data: { details: 'In order to maintain a healthy ecosystem engagement, the message failed to be delivered.' },
          href: '/documentation/business-messaging/whatsapp/support/error-codes',
        }],
      });
      expect(statusesOf(first.body.messages[0].id).map((s) => s.status)).toEqual(['failed']);
      expect((await finalStatus(second.body.messages[0].id)).errors[0].code).toBe(131049);
      expect((await finalStatus(between.body.messages[0].id)).status).toBe('read');
      expect((await finalStatus(third.body.messages[0].id)).status).toBe('read');
    });

    it('shows the remaining count, and refuses a count that is not a positive integer', async () => {
      const to = uniquePhone();
      await control('POST', '/recipients', { to, outcome: 'defer', count: 3 });
      await send(templateSend(to, marketing.name));
      expect((await control('GET', '/recipients')).body.data).toContainEqual({ to: to.slice(1), outcome: 'defer', error_code: 131049, delay_ms: 0, remaining: 2 });
      expect((await control('POST', '/recipients', { to, outcome: 'defer', count: 0 })).status).toBe(400);
      expect((await control('POST', '/recipients', { to, outcome: 'maybe' })).body.error.message).toContain('defer, held');
    });
  });

  describe('held: template pacing (held_for_quality_assessment)', () => {
    it('answers held, then releases the message: sent, delivered and read follow', async () => {
      const to = uniquePhone();
      const rule = await control('POST', '/recipients', { to, outcome: 'held', then: 'release', hold_ms: 300 });
      expect(rule.body).toEqual({ to, outcome: 'held', error_code: null, delay_ms: 0, then: 'release', hold_ms: 300 });
      const res = await send(templateSend(to, marketing.name));
      expect(res.status).toBe(200);
      const id = res.body.messages[0].id;
      expect(res.body).toEqual({ messaging_product: 'whatsapp', contacts: [{ input: to, wa_id: to.slice(1) }], messages: [{ id, message_status: 'held_for_quality_assessment' }] });
      expect((await control('GET', '/held')).body.data).toEqual([{ message_id: id, to: to.slice(1), template_id: marketing.id, then: 'release', due_at: expect.any(String) }]);
      await new Promise((resolve) => setTimeout(resolve, 150));
      expect(statusesOf(id)).toEqual([]);
      await eventually(async () => statusesOf(id).length === 3);
      expect(statusesOf(id).map((s) => s.status)).toEqual(['sent', 'delivered', 'read']);
      expect((await control('GET', '/held')).body.data).toEqual([]);
      // Free-form messages are not paced: a reply to that user is not held.
      await control('POST', '/inbound', { to_phone_number_id: phoneId, from: to, text: 'hi' });
      expect((await send({ messaging_product: 'whatsapp', to, type: 'text', text: { body: 'hello' } })).body.messages[0].message_status).toBeUndefined();
    });

    it('answers held, then drops the message: failed with 132015, the template paused by callback, and its sends then refused with 132015', async () => {
      const template = await ownTemplate();
      const [to, other] = [uniquePhone(), uniquePhone()];
      await control('POST', '/recipients', { to, outcome: 'held', then: 'drop', hold_ms: 100_000 });
      // Another user's message held for release is failed too once the template pauses (reference §2).
      await control('POST', '/recipients', { to: other, outcome: 'held', then: 'release', hold_ms: 100_000 });
      const id = (await send(templateSend(to, template.name))).body.messages[0].id;
      const otherId = (await send(templateSend(other, template.name))).body.messages[0].id;
      const settled = await control('POST', '/held/settle', { to });
      expect(settled.body.data).toEqual([expect.objectContaining({ message_id: id, then: 'drop' })]);

      const failed = await finalStatus(id);
      expect(failed.errors).toEqual([{ code: 132015, title: 'Template is paused', message: 'Template is paused', error_data: { details: expect.any(String) }, href: expect.any(String) }]);
      expect((await finalStatus(otherId)).errors[0].code).toBe(132015);
      const [paused] = await eventually(async () => { const e = templateEvents(template.id); return e.length > 0 ? e : null; });
      expect(paused).toMatchObject({ event: 'PAUSED', reason: 'NONE', other_info: { title: 'FIRST_PAUSE' } });
      const refused = await send(templateSend(uniquePhone(), template.name));
      expect(refused.status).toBe(400);
      expect(refused.body.error).toMatchObject({ code: 132015, message: '(#132015) Template is paused', error_data: { messaging_product: 'whatsapp' } });
    });

    it('template pacing holds every send of the template, and its switch decides the fate', async () => {
      const template = await ownTemplate();
      const set = await control('POST', '/templates/pacing', { name: template.name, language: 'en_US', then: 'drop', hold_ms: 200 });
      expect(set.body).toEqual({ templates: [template.id], then: 'drop', hold_ms: 200 });
      const res = await send(templateSend(uniquePhone(), template.name));
      expect(res.body.messages[0].message_status).toBe('held_for_quality_assessment');
      expect((await finalStatus(res.body.messages[0].id)).errors[0].code).toBe(132015);
      expect(sandbox.state.templates.get(template.id)!.status).toBe('PAUSED');
      // Switched off (and the pause ended): sends are plain again.
      expect((await control('POST', '/templates/pacing', { name: template.name, language: 'en_US', then: null })).body).toEqual({ templates: [template.id], then: null, hold_ms: null });
      await control('POST', '/templates/unpause', { name: template.name, language: 'en_US' });
      expect((await send(templateSend(uniquePhone(), template.name))).body.messages[0].message_status).toBeUndefined();
      // A reset switches pacing off too.
      await control('POST', '/templates/pacing', { name: template.name, language: 'en_US', then: 'release' });
      const listed = (await control('GET', '/templates')).body.data.find((t: any) => t.id === template.id);
      expect(listed).toMatchObject({ status: 'APPROVED', pacing: { then: 'release', hold_ms: 1000 }, unpause_at: null });
      await control('POST', '/reset');
      expect((await send(templateSend(uniquePhone(), template.name))).body.messages[0].message_status).toBeUndefined();
    });
  });

  describe('template pause and unpause', () => {
    it('pauses with a PAUSED callback, refuses sends with 132015 meanwhile, and unpauses on the second call with APPROVED / UNPAUSE', async () => {
      const template = await ownTemplate();
      const pause = await control('POST', '/templates/pause', { name: template.name, language: 'en_US', title: 'SECOND_PAUSE' });
      expect(pause.body).toEqual({ templates: [template.id], status: 'PAUSED', unpause_at: null });
      expect((await send(templateSend(uniquePhone(), template.name))).body.error.code).toBe(132015);
      expect((await http('GET', `${sandbox.baseUrl}/${template.id}`)).body.status).toBe('PAUSED');
      expect((await control('POST', '/templates/pause', { name: template.name, language: 'en_US' })).status).toBe(409);

      expect((await control('POST', '/templates/unpause', { name: template.name, language: 'en_US' })).body).toEqual({ templates: [template.id], status: 'APPROVED' });
      expect((await send(templateSend(uniquePhone(), template.name))).status).toBe(200);
      const events = await eventually(async () => { const e = templateEvents(template.id); return e.length === 2 ? e : null; });
      expect(events[0]).toEqual({
        event: 'PAUSED', message_template_id: Number(template.id), message_template_name: template.name, message_template_language: 'en_US',
        message_template_category: 'MARKETING', reason: 'NONE', other_info: { title: 'SECOND_PAUSE', description: expect.any(String) },
      });
      expect(events[1]).toEqual({ ...events[0], event: 'APPROVED', other_info: { title: 'UNPAUSE', description: expect.any(String) } });
      expect((await control('POST', '/templates/unpause', { name: template.name, language: 'en_US' })).status).toBe(409);
    });

    it('unpauses by itself after unpause_after_ms', async () => {
      const template = await ownTemplate();
      const pause = await control('POST', '/templates/pause', { name: template.name, language: 'en_US', unpause_after_ms: 300 });
      expect(Date.parse(pause.body.unpause_at)).toBeGreaterThan(Date.now());
      expect((await control('GET', '/templates')).body.data.find((t: any) => t.id === template.id)).toMatchObject({ status: 'PAUSED', unpause_at: pause.body.unpause_at });
      expect((await send(templateSend(uniquePhone(), template.name))).body.error.code).toBe(132015);
      const events = await eventually(async () => { const e = templateEvents(template.id); return e.length === 2 ? e : null; });
      expect(events.map((e: any) => [e.event, e.other_info.title])).toEqual([['PAUSED', 'FIRST_PAUSE'], ['APPROVED', 'UNPAUSE']]);
      expect((await send(templateSend(uniquePhone(), template.name))).status).toBe(200);
    });

    it('answers 404 for a template it does not have and 400 for a bad title', async () => {
      expect((await control('POST', '/templates/pause', { name: 'no_such_template', language: 'en_US' })).status).toBe(404);
      expect((await control('POST', '/templates/pause', { name: marketing.name, language: 'en_US', title: 'NAP' })).status).toBe(400);
      expect(sandbox.state.templates.get(marketing.id)!.status).toBe('APPROVED');
    });
  });

  describe('free-form messages and the customer-service window; mark as read; contacts[]', () => {
    it('refuses a free-form message to a user who has not written (131047); after an inbound message it is sent', async () => {
      const to = uniquePhone();
      const text = { messaging_product: 'whatsapp', to, type: 'text', text: { body: 'Your order shipped' } };
      const refused = await send(text);
      expect(refused.status).toBe(400);
      expect(refused.body.error).toMatchObject({ code: 131047, type: 'OAuthException', error_data: { messaging_product: 'whatsapp', details: expect.stringContaining('24 hours') } });
      expect((await http('GET', `${sandbox.url}/__sandbox/sends?to=${to}`)).body.data).toEqual([]);
      // Templates need no window.
      expect((await send(templateSend(to, utility.name))).status).toBe(200);
      // The window is the phone number's: writing to another number opens none here.
      await control('POST', '/inbound', { to_phone_number_id: uniqueId(), from: to, text: 'hi' });
      expect((await send(text)).body.error.code).toBe(131047);
      await control('POST', '/inbound', { to_phone_number_id: phoneId, from: to, text: 'Where is my order?' });
      const sent = await send(text);
      expect(sent.status).toBe(200);
      expect((await finalStatus(sent.body.messages[0].id)).status).toBe('read');
    });

    it('answers mark-as-read with {success: true}, sending nothing', async () => {
      const inbound = await control('POST', '/inbound', { to_phone_number_id: phoneId, from: uniquePhone(), text: 'hi' });
      const before = (await http('GET', `${sandbox.url}/__sandbox/sends`)).body.data.length;
      const read = await send({ messaging_product: 'whatsapp', status: 'read', message_id: inbound.body.message_id });
      expect(read).toEqual({ status: 200, body: { success: true } });
      expect((await send({ messaging_product: 'whatsapp', status: 'read', message_id: inbound.body.message_id, typing_indicator: { type: 'text' } })).body).toEqual({ success: true });
      expect((await http('GET', `${sandbox.url}/__sandbox/sends`)).body.data).toHaveLength(before);
      expect((await send({ messaging_product: 'whatsapp', status: 'read' })).body.error.code).toBe(131008);
    });

    it('puts contacts[] (profile name, wa_id) beside statuses, the name the user wrote with; failed statuses come without', async () => {
      const [known, unknown, failing] = [uniquePhone(), uniquePhone(), uniquePhone()];
      await control('POST', '/inbound', { to_phone_number_id: phoneId, from: known, name: 'Ana Souza', from_user_id: 'US.13491208655302741918', text: 'hi' });
      await control('POST', '/recipients', { to: failing, outcome: 'fail', error_code: 131026 });
      const ids = [];
      for (const to of [known, unknown, failing]) ids.push((await send(templateSend(to, utility.name))).body.messages[0].id);
      await Promise.all(ids.map(finalStatus));
      const valueOf = (id: string, status: string) => receiver.received
        .flatMap((r) => r.body.entry.flatMap((e: any) => e.changes.map((c: any) => c.value)))
        .find((v: any) => v.statuses?.some((s: any) => s.id === id && s.status === status));
      const contactOf = (id: string, status: string, wa: string) => valueOf(id, status).contacts?.find((c: any) => c.wa_id === wa);
      expect(contactOf(ids[0], 'sent', known.slice(1))).toEqual({ profile: { name: 'Ana Souza' }, wa_id: known.slice(1), user_id: 'US.13491208655302741918' });
      expect(contactOf(ids[0], 'read', known.slice(1))).toEqual({ profile: { name: 'Ana Souza' }, wa_id: known.slice(1), user_id: 'US.13491208655302741918' });
      expect(contactOf(ids[1], 'delivered', unknown.slice(1))).toEqual({ profile: { name: 'Sandbox User' }, wa_id: unknown.slice(1) });
      expect(contactOf(ids[2], 'failed', failing.slice(1))).toBeUndefined();
    });
  });
});
