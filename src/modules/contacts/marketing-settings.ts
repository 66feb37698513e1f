import type { Queryable } from '../../db/database.ts';

/** A tenant's marketing rules (operator API: /admin/v1/tenants/{id}/marketing-settings). */
export interface MarketingSettings {
  opt_out_keywords: string[];
  opt_in_keywords: string[];
  block_us_marketing: boolean;
  frequency_cap: { max_messages: number; days: number } | null;
}

export const DEFAULT_MARKETING_SETTINGS: MarketingSettings = Object.freeze({
  opt_out_keywords: ['STOP', 'UNSUBSCRIBE'],
  opt_in_keywords: ['START'],
  block_us_marketing: true,
  frequency_cap: null,
}) as MarketingSettings;

/**
 * How a keyword and an inbound text are compared: case- and space-insensitive ("stop", " Stop ",
 * "S TOP" are STOP). NFKC folds full-width and other compatibility forms first.
 */
export function normaliseKeyword(text: string): string {
  return text.normalize('NFKC').replace(/\s+/gu, '').toUpperCase();
}

export const marketingSettingsRepository = {
  async get(db: Queryable, tenantId: string): Promise<MarketingSettings> {
    const row = await db.selectFrom('tenant_marketing_settings').selectAll().where('tenant_id', '=', tenantId).executeTakeFirst();
    if (!row) return DEFAULT_MARKETING_SETTINGS;
    return {
      opt_out_keywords: row.opt_out_keywords,
      opt_in_keywords: row.opt_in_keywords,
      block_us_marketing: row.block_us_marketing,
      frequency_cap: row.frequency_cap_max !== null && row.frequency_cap_days !== null ? { max_messages: row.frequency_cap_max, days: row.frequency_cap_days } : null,
    };
  },

  async put(db: Queryable, tenantId: string, settings: MarketingSettings): Promise<void> {
    const values = {
      opt_out_keywords: settings.opt_out_keywords, opt_in_keywords: settings.opt_in_keywords, block_us_marketing: settings.block_us_marketing,
      frequency_cap_max: settings.frequency_cap?.max_messages ?? null, frequency_cap_days: settings.frequency_cap?.days ?? null, updated_at: new Date(),
    };
    await db.insertInto('tenant_marketing_settings').values({ tenant_id: tenantId, ...values })
      .onConflict((oc) => oc.column('tenant_id').doUpdateSet(values)).execute();
  },
};
