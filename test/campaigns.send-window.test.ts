import { randomInt } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, eventually, uniquePhone } from './helpers/app.ts';
import { createApprovedTemplate, createConnectedTenant, eventsOf, sandboxControl, startUpstreamApp, type UpstreamTestApp } from './helpers/upstream.ts';
import { CAMPAIGN_ENV, createContacts, runCampaignWorkers, uniqueTag } from './helpers/campaigns.ts';
import regionTimeZones from '../src/modules/campaigns/region-time-zones.json' with { type: 'json' };
import { zoneOfPhone } from '../src/modules/campaigns/send-window.ts';

/*
 * Windows are placed around the current time (never a wait for a real one): a window of two hours
 * around Tokyo's local time now is open in Tokyo and closed in New York and London (9 to 14 hours
 * behind), so Tokyo's recipients go and the others wait for their next opening, which the test
 * works out on its own with Intl.
 */

const DAYS = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];
function localParts(zone: string, at: number) {
  const parts = Object.fromEntries(new Intl.DateTimeFormat('en-US', { timeZone: zone, hourCycle: 'h23', year: 'numeric', month: 'numeric', day: 'numeric', hour: 'numeric', minute: 'numeric', second: 'numeric' })
    .formatToParts(at).map((p) => [p.type, Number(p.value)]));
  return { y: parts.year, m: parts.month, d: parts.day, hh: parts.hour, mm: parts.minute, ss: parts.second };
}
/** The instant a zone's wall clock shows y-m-d hh:mm. */
function zonedInstant(zone: string, y: number, m: number, d: number, hh: number, mm: number): number {
  const wall = Date.UTC(y, m - 1, d, hh, mm);
  const offset = (at: number) => { const p = localParts(zone, at); return Date.UTC(p.y, p.m - 1, p.d, p.hh, p.mm, p.ss) - Math.floor(at / 1000) * 1000; };
  const first = wall - offset(wall);
  return wall - offset(first);
}
const hhmm = (minutes: number) => { const m = ((minutes % 1440) + 1440) % 1440; return `${String(Math.floor(m / 60)).padStart(2, '0')}:${String(m % 60).padStart(2, '0')}`; };
/** The zone's local day `k` days from today: its y, m, d and day name. */
function localDay(zone: string, k: number) {
  const p = localParts(zone, Date.now());
  const date = new Date(Date.UTC(p.y, p.m - 1, p.d + k));
  return { y: date.getUTCFullYear(), m: date.getUTCMonth() + 1, d: date.getUTCDate(), name: DAYS[date.getUTCDay()] };
}
/** The window's next opening in `zone` after now, on `days` (all when absent). */
function nextOpening(zone: string, start: string, days?: string[]): string {
  const [hh, mm] = start.split(':').map(Number);
  for (let k = -1; k <= 8; k++) {
    const day = localDay(zone, k);
    if (days && !days.includes(day.name)) continue;
    const at = zonedInstant(zone, day.y, day.m, day.d, hh, mm);
    if (at > Date.now()) return new Date(at).toISOString();
  }
  throw new Error('no opening');
}
/** A two-hour window around Tokyo's time now: open in Tokyo, closed in New York and London. */
function tokyoWindow() {
  const p = localParts('Asia/Tokyo', Date.now());
  const now = p.hh * 60 + p.mm;
  return { start: hhmm(now - 60), end: hhmm(now + 60) };
}
const japanesePhone = () => `+8190${String(randomInt(10_000_000, 99_999_999))}`;

describe('campaigns: send windows in the recipient\'s local time', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp({ ...CAMPAIGN_ENV, RATE_LIMIT_PER_MINUTE: '100000' }); });
  afterAll(async () => { await t?.close(); });

  const sendsTo = async (to: string) => (await sandboxControl(t.sandbox!, 'GET', `/__sandbox/sends?to=${encodeURIComponent(to)}`)).json.data as unknown[];
  const recipients = async (tenant: any, id: string) => {
    const res = await call(t.app, tenant, 'GET', `/campaigns/${id}/recipients?limit=100`);
    expect(res.statusCode, res.body).toBe(200);
    return new Map((res.json().data as any[]).map((r) => [r.phone_number, r]));
  };
  const campaignFor = async (tenant: any, templateId: string, tag: string, extra: Record<string, unknown>) => {
    const res = await call(t.app, tenant, 'POST', '/campaigns', {
      name: 'Windowed', template_id: templateId, audience: { groups: [tag] },
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'X' }] }] }, ...extra,
    });
    expect(res.statusCode, res.body).toBe(201);
    return res.json();
  };

  it('the zone table names a zone the database knows for every region libphonenumber knows, and picks the most populous for multi-zone regions', async () => {
    const zones = new Set([...Object.values(regionTimeZones.multi_zone), ...Object.values(regionTimeZones.single_zone)]);
    const { rows } = await sql<{ name: string }>`SELECT name FROM pg_timezone_names WHERE name = ANY(${[...zones]}::text[])`.execute(t.deps.db);
    expect(new Set(rows.map((r) => r.name))).toEqual(zones);
    expect(regionTimeZones.multi_zone).toMatchObject({ US: 'America/New_York', CA: 'America/Toronto', MX: 'America/Mexico_City', BR: 'America/Sao_Paulo', RU: 'Europe/Moscow', AU: 'Australia/Sydney', ID: 'Asia/Jakarta', KZ: 'Asia/Almaty' });
    expect(zoneOfPhone('+14155550123')).toBe('America/New_York');
    expect(zoneOfPhone('+15145551234')).toBe('America/Toronto');
    expect(zoneOfPhone('+77012345678')).toBe('Asia/Almaty');
    expect(zoneOfPhone('+74951234567')).toBe('Europe/Moscow');
    expect(zoneOfPhone('+819012345678')).toBe('Asia/Tokyo');
  });

  it('sends recipients whose window is open now; the others wait pending until its next opening in their zone (contact time_zone over the phone\'s region)', async () => {
    const tenant = await createConnectedTenant(t.app);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      const open = [
        { first_name: 'Jp1', phone: japanesePhone(), tags: [tag] },
        { first_name: 'Jp2', phone: japanesePhone(), tags: [tag] },
        { first_name: 'UsInTokyo', phone: uniquePhone(), tags: [tag], time_zone: 'Asia/Tokyo' },
      ];
      const closed = [
        { first_name: 'Us', phone: uniquePhone(), tags: [tag], zone: 'America/New_York' },
        { first_name: 'JpInLondon', phone: japanesePhone(), tags: [tag], time_zone: 'Europe/London', zone: 'Europe/London' },
      ];
      await createContacts(t, tenant, [...open, ...closed.map(({ zone: _, ...c }) => c)] as never);
      const window = tokyoWindow();
      const campaign = await campaignFor(tenant, template.id, tag, { send_window: window });
      expect(campaign.send_window).toEqual({ ...window, days: null, time_zone: 'recipient' });
      const sent = await call(t.app, tenant, 'POST', `/campaigns/${campaign.id}/send`);
      expect(sent.statusCode, sent.body).toBe(200);

      const done = await eventually(async () => {
        const c = (await call(t.app, tenant, 'GET', `/campaigns/${campaign.id}`)).json();
        return c.stats.read === 3 ? c : null;
      }, 60_000);
      expect(done).toMatchObject({ status: 'RUNNING', stats: { total: 5, sent: 3, pending: 2, failed: 0 } });
      const rows = await recipients(tenant, campaign.id);
      for (const c of open) {
        expect(await sendsTo(c.phone)).toHaveLength(1);
        expect(rows.get(c.phone)).toMatchObject({ status: 'read', next_attempt_at: null, time_zone: 'Asia/Tokyo' });
      }
      for (const c of closed) {
        expect(await sendsTo(c.phone)).toHaveLength(0);
        expect(rows.get(c.phone)).toMatchObject({ status: 'pending', time_zone: c.zone, next_attempt_at: nextOpening(c.zone, window.start) });
      }
      // The CSV ends with the same two columns.
      const csv = await call(t.app, tenant, 'GET', `/campaigns/${campaign.id}/recipients`, undefined, { accept: 'text/csv' });
      const [header, ...lines] = csv.body.trimEnd().split('\n').map((l) => l.split(','));
      expect(header.slice(-2)).toEqual(['next_attempt_at', 'time_zone']);
      expect(lines).toHaveLength(5);
      for (const line of lines) expect(line.slice(-2)).toEqual([rows.get(line[1]).next_attempt_at ?? '', rows.get(line[1]).time_zone]);
    } finally {
      await workers.stop();
    }
  }, 90_000);

  it('an explicit IANA zone applies to everyone; days open the window only on those local days', async () => {
    const tenant = await createConnectedTenant(t.app);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      const people = [{ first_name: 'A', phone: uniquePhone(), tags: [tag] }, { first_name: 'B', phone: uniquePhone(), tags: [tag] }];
      await createContacts(t, tenant, people);
      const window = tokyoWindow();
      // US numbers (New York by region, closed) in Tokyo's time: open.
      const inTokyo = await campaignFor(tenant, template.id, tag, { send_window: { ...window, time_zone: 'Asia/Tokyo' } });
      // Only tomorrow (Tokyo): closed today although the hours are open.
      const tomorrow = localDay('Asia/Tokyo', 1).name;
      const onlyTomorrow = await campaignFor(tenant, template.id, tag, { send_window: { ...window, time_zone: 'Asia/Tokyo', days: [tomorrow] } });
      expect(onlyTomorrow.send_window.days).toEqual([tomorrow]);
      for (const id of [inTokyo.id, onlyTomorrow.id]) expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/send`)).statusCode).toBe(200);

      await eventually(async () => (await call(t.app, tenant, 'GET', `/campaigns/${inTokyo.id}`)).json().status === 'COMPLETED', 60_000);
      const waiting = await recipients(tenant, onlyTomorrow.id);
      for (const p of people) {
        expect(await sendsTo(p.phone)).toHaveLength(1);
        expect(waiting.get(p.phone)).toMatchObject({ status: 'pending', time_zone: 'Asia/Tokyo', next_attempt_at: nextOpening('Asia/Tokyo', window.start, [tomorrow]) });
      }
      expect((await call(t.app, tenant, 'GET', `/campaigns/${onlyTomorrow.id}`)).json()).toMatchObject({ status: 'RUNNING', stats: { pending: 2, sent: 0 } });
    } finally {
      await workers.stop();
    }
 }, 90_000);

  it('the claim checks the window again: a recipient whose window closed while it was pending is put back to its next opening, not sent', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    const people = [{ first_name: 'A', phone: japanesePhone(), tags: [tag] }, { first_name: 'B', phone: japanesePhone(), tags: [tag] }];
    await createContacts(t, tenant, people);
    const campaign = await campaignFor(tenant, template.id, tag, { send_window: tokyoWindow() });
    // Materialised while open (no worker yet): due at once.
    expect((await call(t.app, tenant, 'POST', `/campaigns/${campaign.id}/send`)).statusCode).toBe(200);
    expect([...(await recipients(tenant, campaign.id)).values()].map((r) => r.next_attempt_at)).toEqual([null, null]);
    // The clock moves on twelve hours: the same window is now closed in Tokyo.
    const p = localParts('Asia/Tokyo', Date.now());
    const closed = { start: hhmm(p.hh * 60 + p.mm + 660), end: hhmm(p.hh * 60 + p.mm + 780), days: null, time_zone: 'recipient' };
    await t.deps.db.updateTable('campaigns').set({ send_window: JSON.stringify(closed) }).where('id', '=', campaign.id).execute();
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const rows = await eventually(async () => {
        const r = [...(await recipients(tenant, campaign.id)).values()];
        return r.every((x) => x.next_attempt_at) ? r : null;
      });
      for (const r of rows) expect(r).toMatchObject({ status: 'pending', attempts: 0, next_attempt_at: nextOpening('Asia/Tokyo', closed.start) });
      for (const person of people) expect(await sendsTo(person.phone)).toHaveLength(0);
    } finally {
      await workers.stop();
    }
  });

  it('PATCH sets or removes the window while DRAFT, SCHEDULED or PAUSED; bad windows and zones are 400; another tenant\'s campaign is 404', async () => {
    const tenant = await createConnectedTenant(t.app);
    const other = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    await createContacts(t, tenant, [{ first_name: 'A', phone: japanesePhone(), tags: [tag] }]);
    const campaign = await campaignFor(tenant, template.id, tag, {});
    expect(campaign.send_window).toBeNull();

    const patched = await call(t.app, tenant, 'PATCH', `/campaigns/${campaign.id}`, { send_window: { start: '22:00', end: '06:00', days: ['sat', 'fri', 'fri'], time_zone: 'America/Sao_Paulo' } });
    expect(patched.statusCode, patched.body).toBe(200);
    expect(patched.json().send_window).toEqual({ start: '22:00', end: '06:00', days: ['fri', 'sat'], time_zone: 'America/Sao_Paulo' });
    const updated = (await eventsOf(t.deps, tenant.id)).filter((e) => e.type === 'campaign.updated');
    expect(updated.at(-1)?.data).toMatchObject({ id: campaign.id, send_window: { start: '22:00' } });
    expect((await call(t.app, other, 'PATCH', `/campaigns/${campaign.id}`, { send_window: null })).statusCode).toBe(404);

    const bad: [unknown, string][] = [
      [{ start: '09:00', end: '09:00' }, 'end'],
      [{ start: '24:00', end: '09:00' }, 'start'],
      [{ start: '9:00', end: '17:00' }, 'start'],
      [{ start: '09:00', end: '17:00', days: ['funday'] }, 'days'],
      [{ start: '09:00', end: '17:00', days: [] }, 'days'],
      [{ start: '09:00', end: '17:00', time_zone: 'Mars/Olympus_Mons' }, 'time_zone'],
      [{ start: '09:00', end: '17:00', time_zone: 'america/new_york' }, 'time_zone'],
      [{ start: '09:00', end: '17:00', time_zone: 'EST5EDT' }, 'time_zone'],
    ];
    for (const [send_window, field] of bad) {
      for (const res of [
        await call(t.app, tenant, 'PATCH', `/campaigns/${campaign.id}`, { send_window }),
        await call(t.app, tenant, 'POST', '/campaigns', { name: 'Bad', template_id: template.id, audience: { groups: [tag] }, send_window,
          variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'static', value: 'a' }, { kind: 'static', value: 'b' }] }] } }),
      ]) {
        expect(res.statusCode, `${JSON.stringify(send_window)}: ${res.body}`).toBe(400);
        expect(res.json()).toMatchObject({ success: false, error: { code: 'VALIDATION_ERROR' } });
        expect(JSON.stringify(res.json().error), JSON.stringify(send_window)).toContain(field);
      }
    }

    // Running: not editable. Paused: editable, and its pending recipients wait under the new window.
    expect((await call(t.app, tenant, 'PATCH', `/campaigns/${campaign.id}`, { send_window: null })).statusCode).toBe(200);
    expect((await call(t.app, tenant, 'POST', `/campaigns/${campaign.id}/send`)).statusCode).toBe(200);
    const running = await call(t.app, tenant, 'PATCH', `/campaigns/${campaign.id}`, { send_window: tokyoWindow() });
    expect(running.statusCode).toBe(400);
    expect(running.json().error.code).toBe('VALIDATION_ERROR');
    expect((await call(t.app, tenant, 'POST', `/campaigns/${campaign.id}/pause`)).statusCode).toBe(200);
    const closed = { start: '03:00', end: '04:00', time_zone: 'Pacific/Kiritimati' };
    const localNow = localParts('Pacific/Kiritimati', Date.now());
    const isOpen = localNow.hh === 3;
    expect((await call(t.app, tenant, 'PATCH', `/campaigns/${campaign.id}`, { send_window: closed })).statusCode).toBe(200);
    const [row] = [...(await recipients(tenant, campaign.id)).values()];
    if (row.status === 'pending') expect(row).toMatchObject({ time_zone: 'Pacific/Kiritimati', next_attempt_at: isOpen ? null : nextOpening('Pacific/Kiritimati', '03:00') });
  });

  it('a contact\'s time_zone is set on create, PATCH and bulk, and must be an IANA zone (400, or the bulk item fails)', async () => {
    const tenant = await createConnectedTenant(t.app);
    const created = await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Z', phone: uniquePhone(), time_zone: 'Asia/Kolkata' });
    expect(created.statusCode, created.body).toBe(201);
    expect(created.json().time_zone).toBe('Asia/Kolkata');
    const id = created.json().id;
    expect((await call(t.app, tenant, 'PATCH', `/contacts/${id}`, { time_zone: 'Europe/Berlin' })).json().time_zone).toBe('Europe/Berlin');
    expect((await call(t.app, tenant, 'PATCH', `/contacts/${id}`, { time_zone: null })).json().time_zone).toBeNull();
    for (const bad of ['Mars/Base', 'europe/berlin', '+05:00', '']) {
      const res = await call(t.app, tenant, 'PATCH', `/contacts/${id}`, { time_zone: bad });
      expect(res.statusCode, bad).toBe(400);
      expect(res.json().error.code).toBe('VALIDATION_ERROR');
      expect((await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Q', phone: uniquePhone(), time_zone: bad })).statusCode).toBe(400);
    }
    const bulk = await call(t.app, tenant, 'POST', '/contacts/bulk', { contacts: [
      { first_name: 'Ok', phone: uniquePhone(), time_zone: 'America/Chicago' },
      { first_name: 'Bad', phone: uniquePhone(), time_zone: 'Nowhere/Land' },
    ] });
    expect(bulk.json()).toMatchObject({ created: 1, failed: 1, errors: [{ index: 1, error: expect.stringContaining('time_zone') }] });
  });

  it('the pre-flight\'s duration counts the wait for the windows to open', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    await createContacts(t, tenant, Array.from({ length: 8 }, (_, i) => ({ first_name: `P${i}`, phone: uniquePhone(), tags: [tag] })));
    const window = tokyoWindow();
    const open = await campaignFor(tenant, template.id, tag, { send_window: { ...window, time_zone: 'Asia/Tokyo' } });
    const closed = await campaignFor(tenant, template.id, tag, { send_window: window });
    const preflight = async (id: string) => (await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json().preflight;
    const base = await preflight(open.id);
    expect(base.messages_per_second).toBeGreaterThan(0);
    expect(base.estimated_duration_seconds).toBe(Math.ceil(8 / base.messages_per_second));
    // New York (the numbers' region), closed now: until it opens, then the eight at the rate.
    const expected = (Date.parse(nextOpening('America/New_York', window.start)) - Date.now()) / 1000 + 8 / base.messages_per_second;
    const waited = (await preflight(closed.id)).estimated_duration_seconds;
    expect(Math.abs(waited - expected)).toBeLessThan(5);
    // Materialised, the same from the recipients' zones.
    expect((await call(t.app, tenant, 'POST', `/campaigns/${closed.id}/send`)).statusCode).toBe(200);
    expect(Math.abs((await preflight(closed.id)).estimated_duration_seconds - expected)).toBeLessThan(5);
  });
});
