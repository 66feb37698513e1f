import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { marketCandidates } from '../src/modules/pricing/markets.ts';
import { parseCardCsv, RateCard } from '../src/modules/pricing/rate-card.ts';
import { adminHeaders } from './helpers/app.ts';
import { startUpstreamApp, type UpstreamTestApp } from './helpers/upstream.ts';

// The card is one for the whole service (test files share the database): every card written here
// keeps the shipped version of 2026-10-01 as the one in effect, and the shipped card is put back.
const SHIPPED_CSV = readFileSync(join(import.meta.dirname, '../docs/rate-cards/meta-usd-2026-10-01.csv'), 'utf8');
const SHIPPED_SOURCE = 'Meta, Cost per message in USD on the WhatsApp Business Platform, effective 2026-10-01 (https://developers.facebook.com/docs/whatsapp/pricing)';
const OLD_LINE = '2020-01-01,Brazil,EUR,0.05,0.01,,,\n2020-01-01,Other,EUR,0.04,0.005,0.005,,\n';

describe('rate card: PUT and GET /admin/v1/rate-card', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp(); });
  afterAll(async () => {
    if (t) await put({ versions: parseCardCsv(SHIPPED_CSV).map((v) => ({ ...v, source: SHIPPED_SOURCE })) });
    await t?.close();
  });

  const put = (payload: unknown, contentType = 'application/json') => t.app.inject({
    method: 'PUT', url: '/admin/v1/rate-card', headers: { ...adminHeaders, 'content-type': contentType }, payload: typeof payload === 'string' ? payload : JSON.stringify(payload),
  });
  const get = (accept = 'application/json') => t.app.inject({ method: 'GET', url: '/admin/v1/rate-card', headers: { ...adminHeaders, accept } });
  const shipped = () => parseCardCsv(SHIPPED_CSV);

  it('ships Meta\'s USD card effective 2026-10-01 (the migration\'s rows are the CSV in docs/)', async () => {
    const res = await get();
    expect(res.statusCode).toBe(200);
    const { versions } = res.json();
    const current = versions.find((v: { effective_from: string }) => v.effective_from === '2026-10-01');
    expect(current.currency).toBe('USD');
    expect(current.source).toBe(SHIPPED_SOURCE);
    expect(current.rates).toHaveLength(47);
    expect(current.rates.find((r: { market: string }) => r.market === 'Brazil')).toEqual({
      market: 'Brazil', marketing: 0.0625, utility: 0.0068, authentication: 0.0068, authentication_international: null, service: 0.0068,
    });
    const byMarket = (rates: { market: string }[]) => [...rates].sort((a, b) => a.market.localeCompare(b.market));
    expect(byMarket(current.rates)).toEqual(byMarket(shipped()[0].rates));
  });

  it('replaces the card from JSON and from CSV; GET answers it as JSON and as CSV', async () => {
    const withOld = [...parseCardCsv(`${SHIPPED_CSV}${OLD_LINE}`)];
    const json = await put({ versions: withOld.map((v) => ({ ...v, source: v.effective_from === '2020-01-01' ? 'test' : v.source })) });
    expect(json.statusCode, json.body).toBe(200);
    expect(json.json().versions.map((v: { effective_from: string; currency: string }) => [v.effective_from, v.currency])).toEqual([['2020-01-01', 'EUR'], ['2026-10-01', 'USD']]);
    expect((await get()).json().versions[0]).toEqual({
      effective_from: '2020-01-01', currency: 'EUR', source: 'test', rates: [
        { market: 'Brazil', marketing: 0.05, utility: 0.01, authentication: null, authentication_international: null, service: null },
        { market: 'Other', marketing: 0.04, utility: 0.005, authentication: 0.005, authentication_international: null, service: null },
      ],
    });

    const csv = await put(`${SHIPPED_CSV}${OLD_LINE}`, 'text/csv');
    expect(csv.statusCode, csv.body).toBe(200);
    const asCsv = await get('text/csv');
    expect(asCsv.headers['content-type']).toMatch(/^text\/csv/);
    // The CSV answer reads back as the card it describes (rows in the database's order of markets).
    const sorted = (versions: ReturnType<typeof parseCardCsv>) => versions.map((v) => ({ ...v, source: null, rates: [...v.rates].sort((a, b) => a.market.localeCompare(b.market)) }));
    expect(sorted(parseCardCsv(asCsv.body))).toEqual(sorted(parseCardCsv(`${SHIPPED_CSV}${OLD_LINE}`)));

    // Prices follow the version in effect when a message was sent.
    const card = new RateCard(parseCardCsv(`${SHIPPED_CSV}${OLD_LINE}`));
    const marketing = { category: 'marketing', type: 'regular', billable: true, pricing_model: 'PMP' };
    expect(card.price('+5511987650001', marketing, new Date('2021-06-01T00:00:00Z'))).toEqual({ amount: 0.05, currency: 'EUR', market: 'Brazil' });
    expect(card.price('+5511987650001', marketing, new Date('2026-10-01T00:00:00Z'))).toEqual({ amount: 0.0625, currency: 'USD', market: 'Brazil' });
    // India is not on the 2020 version: Other.
    expect(card.price('+919812345601', marketing, new Date('2021-06-01T00:00:00Z'))).toEqual({ amount: 0.04, currency: 'EUR', market: 'Other' });
    expect(card.price('+919812345601', { ...marketing, type: 'free_entry_point' }, new Date('2026-11-01T00:00:00Z'))).toEqual({ amount: 0, currency: 'USD', market: 'India' });
    expect(card.price('+5511987650001', marketing, new Date('2019-01-01T00:00:00Z'))).toBeNull();
    expect(card.price('+5511987650001', { ...marketing, category: 'authentication_international' }, new Date('2026-11-01T00:00:00Z'))).toBeNull();
  });

  it('refuses a bad card with a 400 naming the version, row and field, and writes nothing', async () => {
    expect((await put(SHIPPED_CSV, 'text/csv')).statusCode).toBe(200);
    const before = (await get()).json();
    const base = shipped()[0];
    const cases: [unknown, string, (string | number)[]][] = [
      [{ versions: [] }, 'application/json', ['body', 'versions']],
      [{ versions: [{ ...base, effective_from: '2026-02-30' }] }, 'application/json', ['body', 'versions', 0, 'effective_from']],
      [{ versions: [{ ...base, currency: 'usd' }] }, 'application/json', ['body', 'versions', 0, 'currency']],
      [{ versions: [{ ...base, rates: [...base.rates.slice(0, 3), { ...base.rates[3], market: 'Atlantis' }] }] }, 'application/json', ['body', 'versions', 0, 'rates', 3, 'market']],
      [{ versions: [{ ...base, rates: [...base.rates, { ...base.rates[0] }] }] }, 'application/json', ['body', 'versions', 0, 'rates', 47, 'market']],
      [{ versions: [{ ...base, rates: base.rates.filter((r) => r.market !== 'Other') }] }, 'application/json', ['body', 'versions', 0, 'rates']],
      [{ versions: [{ ...base, rates: [{ ...base.rates[0], marketing: -1 }, ...base.rates.slice(1)] }] }, 'application/json', ['body', 'versions', 0, 'rates', 0, 'marketing']],
      [{ versions: [base, { ...base }] }, 'application/json', ['body', 'versions', 1, 'effective_from']],
      [SHIPPED_CSV.replace('Brazil,USD,0.0625', 'Brazil,USD,abc'), 'text/csv', ['body', 'line', 4, 'marketing']],
      [SHIPPED_CSV.replace('2026-10-01,Chile', '2026-10-01,Chilee'), 'text/csv', ['body', 'line', 5, 'market']],
      [SHIPPED_CSV.replace('2026-10-01,Colombia,USD', '2026-10-01,Colombia,EUR'), 'text/csv', ['body', 'line', 6, 'currency']],
      [SHIPPED_CSV.replace('authentication_international,', ''), 'text/csv', ['body', 'line', 1]],
    ];
    for (const [payload, type, loc] of cases) {
      const res = await put(payload, type);
      expect(res.statusCode, `${JSON.stringify(loc)} ${res.body}`).toBe(400);
      const error = res.json().error;
      expect(error.code).toBe('VALIDATION_ERROR');
      expect(error.details[0].loc, res.body).toEqual(loc);
    }
    expect((await get()).json()).toEqual(before);
  });

  it('needs the admin token', async () => {
    expect((await t.app.inject({ method: 'GET', url: '/admin/v1/rate-card' })).statusCode).toBe(401);
    expect((await t.app.inject({ method: 'PUT', url: '/admin/v1/rate-card', headers: { 'content-type': 'text/csv' }, payload: SHIPPED_CSV })).statusCode).toBe(401);
  });
});

describe('markets: a phone number\'s market candidates, as Meta maps calling codes', () => {
  it.each([
    ['+5511987650001', ['Brazil', 'Other']],
    ['+919812345601', ['India', 'Other']],
    ['+447400123401', ['United Kingdom', 'Other']],
    ['+12025550123', ['United States', 'North America', 'Other']],
    ['+14165550123', ['Canada', 'North America', 'Other']],
    ['+18095550123', ['Dominican Republic', 'Rest of Latin America', 'Other']],
    ['+12425550123', ['Bahamas', 'Other']],
    ['+77011234567', ['Kazakhstan', 'Other']],
    ['+79161234567', ['Russia', 'Other']],
    ['+96891234567', ['Oman', 'Rest of Middle East', 'Other']],
    ['+4312345678', ['Austria', 'Rest of Western Europe', 'Other']],
    ['+61412345678', ['Australia', 'Rest of Asia Pacific', 'Other']],
  ])('%s', (phone, candidates) => {
    expect(marketCandidates(phone)).toEqual(candidates);
  });

  it('picks the most specific market the card in effect lists', () => {
    const card = new RateCard(parseCardCsv(SHIPPED_CSV));
    const version = card.versions[0];
    expect(card.marketOf(version, '+12025550123')?.market).toBe('North America');
    expect(card.marketOf(version, '+18095550123')?.market).toBe('Rest of Latin America');
    expect(card.marketOf(version, '+12425550123')?.market).toBe('Other');
    expect(card.marketOf(version, '+96891234567')?.market).toBe('Oman');
    expect(card.marketOf(version, '+4312345678')?.market).toBe('Rest of Western Europe');
  });
});
