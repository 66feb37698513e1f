import { sql } from 'kysely';
import type { Db, Queryable } from '../../db/database.ts';
import { AppError } from '../../http/errors.ts';
import { isMarketName, marketCandidates, OTHER } from './markets.ts';

/** The categories a card prices (Meta's pricing categories of template and service messages). */
export const RATE_CATEGORIES = ['marketing', 'utility', 'authentication', 'authentication_international', 'service'] as const;
export type RateCategory = (typeof RATE_CATEGORIES)[number];

/** Pricing categories billed at another category's rate: Marketing Messages API (MM Lite) sends are marketing messages. */
const BILLED_AS: Record<string, RateCategory> = { marketing_lite: 'marketing' };

/** Pricing types Meta does not charge for (reference §7). */
const FREE_TYPES = new Set(['free_customer_service', 'free_entry_point']);

export interface MarketRates {
  market: string;
  marketing: number | null;
  utility: number | null;
  authentication: number | null;
  authentication_international: number | null;
  service: number | null;
}

export interface RateCardVersion {
  effective_from: string;
  currency: string;
  source: string | null;
  rates: MarketRates[];
}

/** What a status callback's `pricing` says, as stored on the message. */
export interface Pricing {
  category: string;
  type: string | null;
  billable: boolean | null;
  pricing_model: string | null;
}

export interface Price {
  amount: number;
  currency: string;
  market: string;
}

/** Money in answers: decimal numbers in the card's currency, rounded to 4 decimals (Meta's rates have 4). */
export const roundMoney = (amount: number): number => Math.round(amount * 10_000) / 10_000;

const MAX_RATE = 1000;
const DATE = /^\d{4}-\d{2}-\d{2}$/;

const invalid = (message: string, loc: (string | number)[], input: unknown) =>
  new AppError('VALIDATION_ERROR', message, { details: [{ loc, msg: message, type: 'value_error', input }] });

/**
 * The card versions, checked as a whole (a replacement is all or nothing): each version an
 * effective date (YYYY-MM-DD), one currency (ISO 4217), unique markets Meta's names know (a
 * country, a region, Other), Other present (every number not otherwise listed is priced there),
 * rates non-negative numbers or null. `where(i, j)` names the version or the row in the error.
 */
export function checkCard(input: unknown, where: (version: number, row?: number) => (string | number)[]): RateCardVersion[] {
  const versions = (input as { versions?: unknown })?.versions;
  if (!Array.isArray(versions) || versions.length === 0) throw invalid('The rate card needs at least one version', ['body', 'versions'], versions ?? null);
  const dates = new Set<string>();
  return versions.map((raw, i) => {
    const v = (typeof raw === 'object' && raw !== null ? raw : {}) as Record<string, unknown>;
    const date = v.effective_from;
    if (typeof date !== 'string' || !DATE.test(date) || Number.isNaN(Date.parse(`${date}T00:00:00Z`)) || new Date(`${date}T00:00:00Z`).toISOString().slice(0, 10) !== date) {
      throw invalid('effective_from must be a date written YYYY-MM-DD', [...where(i), 'effective_from'], date ?? null);
    }
    if (dates.has(date)) throw invalid(`Two versions take effect on ${date}`, [...where(i), 'effective_from'], date);
    dates.add(date);
    const currency = v.currency;
    if (typeof currency !== 'string' || !/^[A-Z]{3}$/.test(currency)) throw invalid('currency must be an ISO 4217 code (three capital letters)', [...where(i), 'currency'], currency ?? null);
    const source = v.source ?? null;
    if (source !== null && (typeof source !== 'string' || source.length > 1000)) throw invalid('source must be text of at most 1000 characters', [...where(i), 'source'], source);
    if (!Array.isArray(v.rates) || v.rates.length === 0) throw invalid('A version needs rates', [...where(i), 'rates'], v.rates ?? null);
    const markets = new Set<string>();
    const rates = v.rates.map((rawRow, j): MarketRates => {
      const row = (typeof rawRow === 'object' && rawRow !== null ? rawRow : {}) as Record<string, unknown>;
      const market = row.market;
      if (typeof market !== 'string' || !isMarketName(market)) {
        throw invalid('market must be a country by Meta\'s name (e.g. "Brazil"), one of Meta\'s regions (e.g. "Rest of Africa") or "Other"', [...where(i, j), 'market'], market ?? null);
      }
      if (markets.has(market)) throw invalid(`The market ${market} appears twice in the version of ${date}`, [...where(i, j), 'market'], market);
      markets.add(market);
      const out = { market } as MarketRates;
      for (const category of RATE_CATEGORIES) {
        const rate = row[category] ?? null;
        if (rate !== null && (typeof rate !== 'number' || !Number.isFinite(rate) || rate < 0 || rate > MAX_RATE)) {
          throw invalid(`${category} must be a rate per message from 0 to ${MAX_RATE}, or null (no rate)`, [...where(i, j), category], rate);
        }
        out[category] = rate === null ? null : Math.round(rate * 1e6) / 1e6;
      }
      return out;
    });
    if (!markets.has(OTHER)) throw invalid(`The version of ${date} has no rates for Other (every number not otherwise listed is priced there)`, [...where(i), 'rates'], null);
    return { effective_from: date, currency, source: source as string | null, rates };
  }).sort((a, b) => a.effective_from.localeCompare(b.effective_from));
}

const CSV_HEADER = ['effective_from', 'market', 'currency', ...RATE_CATEGORIES] as const;

/** One CSV line's fields (RFC 4180 quoting). */
function csvFields(line: string): string[] {
  const fields: string[] = [];
  let i = 0;
  for (;;) {
    let field = '';
    if (line[i] === '"') {
      i++;
      for (;;) {
        const q = line.indexOf('"', i);
        if (q < 0) { field += line.slice(i); i = line.length; break; }
        field += line.slice(i, q);
        if (line[q + 1] === '"') { field += '"'; i = q + 2; } else { i = q + 1; break; }
      }
      const comma = line.indexOf(',', i);
      i = comma < 0 ? line.length + 1 : comma + 1;
    } else {
      const comma = line.indexOf(',', i);
      field = comma < 0 ? line.slice(i) : line.slice(i, comma);
      i = comma < 0 ? line.length + 1 : comma + 1;
    }
    fields.push(field.trim());
    if (i > line.length) return fields;
  }
}

/**
 * The CSV form of a card (docs/cost.md): a header `effective_from,market,currency,marketing,utility,
 * authentication,authentication_international,service`, then one line per version and market; an
 * empty rate is no rate. Errors name the line (1 is the header) and the column.
 */
export function parseCardCsv(text: string): RateCardVersion[] {
  const lines = text.replace(/^\uFEFF/, '').split(/\r?\n/);
  const header = csvFields(lines[0] ?? '').map((h) => h.toLowerCase());
  const missing = CSV_HEADER.filter((h) => !header.includes(h));
  if (missing.length > 0) throw invalid(`The CSV header must name the columns ${CSV_HEADER.join(',')}; missing: ${missing.join(', ')}`, ['body', 'line', 1], lines[0] ?? '');
  const byDate = new Map<string, { version: Record<string, unknown>; rows: Record<string, unknown>[]; lines: number[] }>();
  lines.slice(1).forEach((line, k) => {
    if (line.trim() === '') return;
    const lineNo = k + 2;
    const fields = csvFields(line);
    const cell = (name: string) => fields[header.indexOf(name)] ?? '';
    const row: Record<string, unknown> = { market: cell('market') };
    for (const category of RATE_CATEGORIES) {
      const value = cell(category);
      if (value === '') { row[category] = null; continue; }
      const rate = /^\d+(\.\d+)?$/.test(value) ? Number(value) : NaN;
      if (Number.isNaN(rate)) throw invalid(`${category} must be a decimal number (e.g. 0.0625) or empty`, ['body', 'line', lineNo, category], value);
      row[category] = rate;
    }
    const date = cell('effective_from');
    const entry = byDate.get(date) ?? { version: { effective_from: date, currency: cell('currency'), source: null, rates: [] }, rows: [], lines: [] };
    if (entry.version.currency !== cell('currency')) throw invalid(`Every line of the version of ${date} must have the same currency`, ['body', 'line', lineNo, 'currency'], cell('currency'));
    entry.rows.push(row);
    entry.lines.push(lineNo);
    byDate.set(date, entry);
  });
  const entries = [...byDate.values()];
  return checkCard({ versions: entries.map((e) => ({ ...e.version, rates: e.rows })) },
    (v, r) => ['body', 'line', r === undefined ? entries[v].lines[0] : entries[v].lines[r]]);
}

/** The card as CSV (the format PUT takes). */
export function cardCsv(versions: RateCardVersion[]): string {
  const lines = versions.flatMap((v) => v.rates.map((r) => [v.effective_from, csvCell(r.market), v.currency, ...RATE_CATEGORIES.map((c) => r[c] ?? '')].join(',')));
  return [CSV_HEADER.join(','), ...lines].join('\n') + '\n';
}
const csvCell = (text: string) => (/[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text);

/** A loaded card: the version in effect at an instant, and prices by phone number and category. */
export class RateCard {
  constructor(readonly versions: RateCardVersion[]) {}

  /** The version in effect at `at` (effective dates are UTC days), or undefined before the first. */
  versionAt(at: Date): RateCardVersion | undefined {
    const day = at.toISOString().slice(0, 10);
    let found: RateCardVersion | undefined;
    for (const v of this.versions) if (v.effective_from <= day) found = v;
    return found;
  }

  /** The market a number is priced in under `version`: its country if the card lists it, else its region, else Other. */
  marketOf(version: RateCardVersion, phone: string): MarketRates | undefined {
    for (const market of marketCandidates(phone)) {
      const rates = version.rates.find((r) => r.market === market);
      if (rates) return rates;
    }
    return undefined;
  }

  /** The rate of one message of `category` to `phone` under `version`, with its market; null when the card has none. */
  rate(version: RateCardVersion, phone: string, category: string): { rate: number; market: string } | null {
    const market = this.marketOf(version, phone);
    const rate = market?.[BILLED_AS[category] ?? (category as RateCategory)];
    return market && typeof rate === 'number' ? { rate, market: market.market } : null;
  }

  /**
   * What a message with this pricing costs, sent at `sentAt`: 0 when not billable or of a free type,
   * else its rate on the card in effect then; null when the card has no rate for it.
   */
  price(phone: string, pricing: Pricing, sentAt: Date): Price | null {
    const version = this.versionAt(sentAt);
    if (!version) return null;
    const free = pricing.billable === false || (pricing.type !== null && FREE_TYPES.has(pricing.type));
    const market = this.marketOf(version, phone)?.market ?? OTHER;
    if (free) return { amount: 0, currency: version.currency, market };
    const found = this.rate(version, phone, pricing.category);
    return found ? { amount: found.rate, currency: version.currency, market: found.market } : null;
  }
}

export const rateCardRepository = {
  async load(db: Queryable): Promise<RateCard> {
    const versions = await db.selectFrom('rate_card_versions').select([sql<string>`effective_from::text`.as('effective_from'), 'currency', 'source'])
      .orderBy('effective_from').execute();
    const rates = await db.selectFrom('rate_card_rates').select([sql<string>`effective_from::text`.as('effective_from'), 'market', 'category', 'rate'])
      .orderBy('effective_from').orderBy('market').execute();
    return new RateCard(versions.map((v) => {
      const byMarket = new Map<string, MarketRates>();
      for (const r of rates) {
        if (r.effective_from !== v.effective_from) continue;
        const row = byMarket.get(r.market) ?? { market: r.market, marketing: null, utility: null, authentication: null, authentication_international: null, service: null };
        if ((RATE_CATEGORIES as readonly string[]).includes(r.category)) row[r.category as RateCategory] = Number(r.rate);
        byMarket.set(r.market, row);
      }
      return { ...v, rates: [...byMarket.values()] };
    }));
  },

  /** Replaces the whole card in one transaction. */
  async replace(db: Db, versions: RateCardVersion[]): Promise<void> {
    await db.transaction().execute(async (tx) => {
      // Whole-card replacements queue behind each other (no interleaved deletes and inserts).
      await sql`LOCK TABLE rate_card_versions IN SHARE ROW EXCLUSIVE MODE`.execute(tx);
      await tx.deleteFrom('rate_card_rates').execute();
      await tx.deleteFrom('rate_card_versions').execute();
      await tx.insertInto('rate_card_versions').values(versions.map((v) => ({ effective_from: v.effective_from, currency: v.currency, source: v.source }))).execute();
      const rows = versions.flatMap((v) => v.rates.flatMap((r) => RATE_CATEGORIES.flatMap((category) =>
        r[category] === null ? [] : [{ effective_from: v.effective_from, market: r.market, category, rate: r[category]! }])));
      for (let i = 0; i < rows.length; i += 1000) await tx.insertInto('rate_card_rates').values(rows.slice(i, i + 1000)).execute();
    });
  },
};

/**
 * The card as this process last read it, for at most `ttlMs` (callbacks price every batch with it;
 * a replacement through this process is seen at once, one through another process within `ttlMs`).
 */
export class RateCards {
  private cached: { card: RateCard; until: number } | null = null;

  constructor(private db: Db, private ttlMs = 5000) {}

  /** The card, as cached unless `fresh`. */
  async current(fresh = false): Promise<RateCard> {
    if (!fresh && this.cached && this.cached.until > Date.now()) return this.cached.card;
    const card = await rateCardRepository.load(this.db);
    this.cached = { card, until: Date.now() + this.ttlMs };
    return card;
  }

  async replace(versions: RateCardVersion[]): Promise<RateCard> {
    await rateCardRepository.replace(this.db, versions);
    this.cached = null;
    return this.current();
  }
}
