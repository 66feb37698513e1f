import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Sandbox } from '../../src/sandbox/sandbox.ts';
import { approvedTemplate, http, startReceiver, startTestSandbox, templateSend, uniqueId, uniquePhone, type CallbackReceiver } from './helpers.ts';

/** The capacity and quality callbacks the sandbox sends on request, in Meta's webhook shapes. */
describe('sandbox: account and template quality callbacks', () => {
  let sandbox: Sandbox;
  let receiver: CallbackReceiver;
  beforeAll(async () => {
    receiver = await startReceiver();
    sandbox = await startTestSandbox({ callbackUrl: receiver.url });
  });
  afterAll(async () => {
    await sandbox?.close();
    await receiver?.close();
  });

  const changes = (field: string) => receiver.received.flatMap((r) => r.body.entry.flatMap((e: any) => e.changes.filter((c: any) => c.field === field).map((c: any) => ({ entryId: e.id, value: c.value, signed: r.signatureValid }))));
  const waitFor = async <T>(read: () => T[], n: number): Promise<T[]> => {
    const until = Date.now() + 3000;
    while (read().length < n && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
    return read();
  };
  const limitOf = async (phoneNumberId: string) => (await http('GET', `${sandbox.baseUrl}/${phoneNumberId}?fields=whatsapp_business_manager_messaging_limit`)).body;

  it('a phone number\'s messaging limit is unlimited by default and follows business_capability_update', async () => {
    const wabaId = uniqueId();
    const phone = uniqueId();
    expect(await limitOf(phone)).toEqual({ id: phone, whatsapp_business_manager_messaging_limit: 'TIER_UNLIMITED' });
    const res = await http('POST', `${sandbox.url}/__sandbox/business_capability`, { waba_id: wabaId, phone_number_id: phone, max_daily_conversations_per_business: 2000 });
    expect(res.status).toBe(200);
    expect(await limitOf(phone)).toMatchObject({ whatsapp_business_manager_messaging_limit: 'TIER_2K' });
    const [change] = (await waitFor(() => changes('business_capability_update'), 1)).filter((c) => c.entryId === wabaId);
    expect(change).toMatchObject({ signed: true, value: { max_daily_conversations_per_business: 2000 } });
    expect((await http('GET', `${sandbox.baseUrl}/${phone}?fields=display_phone_number,no_such_field`)).status).toBe(400);
  });

  it('phone_number_quality_update names the number by its display number under its WABA', async () => {
    const wabaId = uniqueId();
    const phone = uniqueId();
    expect((await http('POST', `${sandbox.url}/__sandbox/phone_number_quality`, { phone_number_id: phone, waba_id: wabaId, event: 'THROUGHPUT_UPGRADE' })).status).toBe(200);
    const display = (await http('GET', `${sandbox.baseUrl}/${phone}?fields=display_phone_number`)).body.display_phone_number;
    const [change] = (await waitFor(() => changes('phone_number_quality_update'), 1)).filter((c) => c.entryId === wabaId);
    expect(change.value).toEqual({ display_phone_number: display, event: 'THROUGHPUT_UPGRADE', current_limit: 'TIER_UNLIMITED' });
    expect((await http('POST', `${sandbox.url}/__sandbox/phone_number_quality`, { phone_number_id: phone, event: 'UPGRADE', max_daily_conversations_per_business: 'TIER_3K' })).status).toBe(400);
  });

  it('template quality and category callbacks; the category change also changes the pricing of later sends', async () => {
    const wabaId = uniqueId();
    const phone = uniqueId();
    const template = await approvedTemplate(sandbox, wabaId);
    await http('POST', `${sandbox.url}/__sandbox/phone_numbers`, { phone_number_id: phone, waba_id: wabaId });
    expect((await http('POST', `${sandbox.url}/__sandbox/templates/quality`, { name: template.name, language: 'en_US', quality_score: 'RED' })).status).toBe(200);
    const [quality] = (await waitFor(() => changes('message_template_quality_update'), 1)).filter((c) => c.value.message_template_name === template.name);
    expect(quality).toMatchObject({ entryId: wabaId, value: { previous_quality_score: 'UNKNOWN', new_quality_score: 'RED', message_template_id: Number(template.id), message_template_language: 'en_US' } });
    expect((await http('GET', `${sandbox.baseUrl}/${template.id}?fields=quality_score`)).body.quality_score).toEqual({ score: 'RED' });

    expect((await http('POST', `${sandbox.url}/__sandbox/templates/category`, { name: template.name, language: 'en_US', new_category: 'MARKETING', impending: true })).status).toBe(200);
    expect((await http('POST', `${sandbox.url}/__sandbox/templates/category`, { name: template.name, language: 'en_US', new_category: 'MARKETING' })).status).toBe(200);
    const categories = (await waitFor(() => changes('template_category_update').filter((c) => c.value.message_template_name === template.name), 2)).map((c) => c.value);
    expect(categories[0]).toMatchObject({ correct_category: 'MARKETING', new_category: 'UTILITY', category_update_timestamp: expect.any(Number) });
    expect(categories[1]).toMatchObject({ previous_category: 'UTILITY', new_category: 'MARKETING' });

    const to = uniquePhone();
    expect((await http('POST', `${sandbox.baseUrl}/${phone}/messages`, templateSend(to, template.name))).status).toBe(200);
    const sent = (await waitFor(() => receiver.statuses().filter((s) => s.recipient_id === to.slice(1) && s.status === 'sent'), 1))[0];
    expect(sent.pricing).toEqual({ billable: true, pricing_model: 'PMP', type: 'regular', category: 'marketing' });
  });
});
