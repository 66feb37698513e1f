import { randomUUID } from 'node:crypto';
import pino from 'pino';
import { startLoops, type RunningLoops } from '../../src/workers/loop.ts';
import { CampaignDispatcher, startDueCampaigns } from '../../src/workers/campaign-dispatcher.ts';
import { NumberOwnership } from '../../src/workers/number-ownership.ts';
import { call, uniquePhone, type TestTenant } from './app.ts';
import type { UpstreamTestApp } from './upstream.ts';

/** Short worker intervals for campaign tests (every interval is configuration). */
export const CAMPAIGN_ENV = { CAMPAIGN_POLL_MS: '20', WORKER_POLL_MS: '50', SEND_RECONCILE_MS: '1500', PACING_HORIZON_MS: '200' };

/**
 * This test's own scheduler and dispatcher, limited to its tenants: test files share one database,
 * and a dispatcher would otherwise claim every file's running campaigns.
 */
export function runCampaignWorkers(t: UpstreamTestApp, tenantIds: string[], overrides: DispatcherOverrides = {}): RunningLoops & { dispatcher: CampaignDispatcher } {
  const c = t.deps.config;
  const dispatcher = campaignDispatcher(t, tenantIds, overrides);
  const loops = startLoops([
    { name: 'campaign-scheduler', runOnce: () => startDueCampaigns(t.deps.db, tenantIds), intervalMs: 50 },
    { ...dispatcher.loop(), intervalMs: c.campaignPollMs },
  ], c.workerPollMs, pino({ level: 'silent' }));
  return { ...loops, dispatcher };
}

type DispatcherOverrides = Partial<ConstructorParameters<typeof CampaignDispatcher>[4]>;

/** A dispatcher of these tenants' campaigns with the app's configuration, run by the caller (no loop). */
export function campaignDispatcher(t: UpstreamTestApp, tenantIds: string[], overrides: DispatcherOverrides = {}): CampaignDispatcher {
  const c = t.deps.config;
  return new CampaignDispatcher(t.deps.db, t.deps.upstream, t.deps.media, t.deps.pacer, {
    secretsKey: c.secretsKey, leaseMs: c.campaignLeaseMs, issueWithinMs: c.campaignIssueWithinMs, reconcileMs: c.sendReconcileMs, maxBatches: c.campaignMaxBatches, maxAttempts: c.campaignMaxAttempts,
    deferMs: c.campaignDeferMs, deferAttempts: c.campaignDeferAttempts, holdMs: c.campaignHoldMs, messagingLimitWindowMs: c.messagingLimitWindowMs, onlyTenants: tenantIds,
    numbers: new NumberOwnership(t.deps.db, t.deps.liveness), ...overrides,
  }, pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }));
}

export interface SeedContact { first_name: string; phone: string; tags?: string[]; source?: string; custom_fields?: Record<string, unknown>; company?: string | null }

/** Contacts created through the bulk API (100 per request). */
export async function createContacts(t: UpstreamTestApp, tenant: TestTenant, contacts: SeedContact[]): Promise<{ id: string; phone: string }[]> {
  const created: { id: string; phone: string }[] = [];
  for (let i = 0; i < contacts.length; i += 100) {
    const res = await call(t.app, tenant, 'POST', '/contacts/bulk', { contacts: contacts.slice(i, i + 100) });
    if (res.statusCode !== 201 || res.json().failed > 0) throw new Error(`bulk create failed: ${res.body}`);
  }
  const rows = await t.deps.db.selectFrom('contacts').select(['id', 'phone']).where('tenant_id', '=', tenant.id).where('phone', 'in', contacts.map((c) => c.phone)).execute();
  created.push(...rows);
  return created;
}

export function someContacts(n: number, extra: Partial<SeedContact> = {}): SeedContact[] {
  return Array.from({ length: n }, (_, i) => ({ first_name: `Name${i}`, phone: uniquePhone(), ...extra }));
}

export const uniqueTag = () => `tag_${randomUUID().slice(0, 8)}`;
