import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { envelopeJson, recordEvents } from '../src/events/events.ts';
import { call, createTenant, startTestApp, type TestApp, type TestTenant } from './helpers/app.ts';

/**
 * recordEvents builds each webhook envelope in SQL around the data's JSON text: the stored payload
 * must be byte for byte what envelopeJson makes of JSON.stringify(data), key order included (jsonb
 * would sort the keys), and only subscribed endpoints get a payload and a delivery.
 */
describe('recording events (the events rows, their envelopes and deliveries in one statement)', () => {
  let t: TestApp;
  let tenant: TestTenant;
  let endpointId: string;

  beforeAll(async () => {
    t = await startTestApp({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' });
    tenant = await createTenant(t.app);
    const created = await call(t.app, tenant, 'POST', '/webhooks', { url: 'https://127.0.0.1:9/events', events: ['contact.created'] });
    expect(created.statusCode).toBe(201);
    endpointId = created.json().data.id;
  });
  afterAll(async () => {
    await t?.close();
  });

  it('stores the envelope of each subscribed event exactly as envelopeJson writes it, and nothing for the others', async () => {
    const marker = `rec-${Date.now()}-${Math.random()}`;
    const subscribed = [
      { type: 'contact.created' as const, data: { zeta: 1, n: 1, alpha: 'é "quoted" \\ back\nline \u2028 😀', marker, nested: { b: [1, { y: null, x: true }], a: 2.5 } } },
      { type: 'contact.created' as const, data: { marker, n: 2, second: [] } },
    ];
    const unsubscribed = { type: 'contact.deleted' as const, data: { marker, gone: true } };
    await t.deps.db.transaction().execute((tx) => recordEvents(tx, tenant.id, [subscribed[0], unsubscribed, subscribed[1]]));

    const events = await t.deps.db.selectFrom('events').select(['id', 'type', 'data', 'created_at'])
      .where('tenant_id', '=', tenant.id).execute();
    const ours = events.filter((e) => (e.data as { marker?: string }).marker === marker);
    expect(ours.map((e) => e.type).sort()).toEqual(['contact.created', 'contact.created', 'contact.deleted']);

    const payloads = await t.deps.db.selectFrom('webhook_payloads').select(['event_id', 'payload'])
      .where('event_id', 'in', ours.map((e) => e.id)).execute();
    expect(payloads).toHaveLength(2);
    for (const sent of subscribed) {
      const row = ours.find((e) => (e.data as { n?: number }).n === sent.data.n)!;
      const stored = payloads.find((p) => p.event_id === row.id)!;
      expect(Buffer.from(stored.payload).toString('utf8'))
        .toBe(envelopeJson(row.id, sent.type, new Date(row.created_at).toISOString(), JSON.stringify(sent.data)));
    }

    const deliveries = await t.deps.db.selectFrom('webhook_deliveries').select(['event_id', 'endpoint_id', 'event_type', 'status'])
      .where('event_id', 'in', ours.map((e) => e.id)).execute();
    expect(deliveries).toHaveLength(2);
    expect(deliveries.every((d) => d.endpoint_id === endpointId && d.event_type === 'contact.created' && d.status === 'pending')).toBe(true);
  });
});
