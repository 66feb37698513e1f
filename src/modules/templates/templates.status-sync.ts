import type { Logger } from 'pino';
import type { Db } from '../../db/database.ts';
import { AppError } from '../../http/errors.ts';
import type { UpstreamClient } from '../../upstream/types.ts';
import { findActiveAccount, findTenantsByWabaId, toUpstreamAccount } from '../business-accounts/business-accounts.repository.ts';
import { applyTemplateStatus } from '../campaigns/upstream-stops.ts';
import { templatesRepository as repo } from './templates.repository.ts';
import { mapUpstreamTemplateStatus } from './templates.service.ts';

export interface TemplateStatusUpdate {
  event: string;
  message_template_id?: string | number;
  message_template_name?: string;
  message_template_language?: string;
  reason?: string | null;
}

type TemplateMatch = Parameters<typeof repo.applyUpstreamStatus>[2];
type TemplateStatus = Parameters<typeof repo.applyUpstreamStatus>[3];

export interface TemplatePollOptions {
  /** Minimum time between two polls of the same pending template. */
  intervalMs: number;
  /** Pending templates claimed per run. */
  batch: number;
}

/**
 * Keeps template statuses in step with the upstream. The `message_template_status_update`
 * callback is the primary path; the poller is a fallback for lost callbacks. The upstream allows
 * 200 management calls an hour per WABA (5,000 with a registered number), so the poller asks at
 * most once per template per interval (default 5 minutes: 12 calls an hour per pending
 * template) and with one list call per business account per run rather than one call per template.
 * No tenant event is emitted: the spec has no template events.
 */
export class TemplateStatusSync {
  constructor(private db: Db, private upstream: UpstreamClient, private secretsKey: Buffer, private options: TemplatePollOptions, private logger?: Logger) {}

  /** One `message_template_status_update` change for a WABA. Returns how many templates changed. */
  async applyCallback(wabaId: string, update: TemplateStatusUpdate): Promise<number> {
    const status = mapUpstreamTemplateStatus(String(update.event ?? ''));
    if (!status) return 0;
    const tenantIds = await findTenantsByWabaId(this.db, wabaId);
    const match = {
      upstreamId: update.message_template_id !== undefined ? String(update.message_template_id) : null,
      name: update.message_template_name ?? null,
      language: update.message_template_language ?? null,
    };
    const changed = await this.apply(tenantIds, match, status, update.reason && update.reason !== 'NONE' ? update.reason : null);
    // A review faster than the submission's own commit: the upstream sends the callback again later.
    if (changed === 0 && await repo.isBeingSubmitted(this.db, tenantIds, match)) {
      throw new AppError('INTERNAL_ERROR', 'A template named by this callback is still being submitted; send it again', {}, 503);
    }
    return changed;
  }

  /** A template's new status and what it does to the campaigns sending it, in one transaction. */
  private async apply(tenantIds: string[], match: TemplateMatch, status: TemplateStatus, reason: string | null): Promise<number> {
    return this.db.transaction().execute(async (tx) => {
      const changed = await repo.applyUpstreamStatus(tx, tenantIds, match, status, reason);
      await applyTemplateStatus(tx, changed);
      return changed.length;
    });
  }

  /** Worker loop body: polls due pending templates; returns how many were asked about. */
  async pollOnce(): Promise<number> {
    const claimed = await repo.claimDueForPoll(this.db, this.options.intervalMs, this.options.batch);
    const byTenant = new Map<string, typeof claimed>();
    for (const t of claimed) byTenant.set(t.tenant_id, [...(byTenant.get(t.tenant_id) ?? []), t]);
    for (const [tenantId, templates] of byTenant) {
      try {
        await this.pollTenant(tenantId, templates);
      } catch (err) {
        // One tenant's problem (say, a token that no longer decrypts) must not stop the others.
        this.logger?.error({ err, tenant_id: tenantId }, 'template status poll failed for tenant');
      }
    }
    return claimed.length;
  }

  private async pollTenant(tenantId: string, templates: { upstream_id: string | null }[]): Promise<void> {
    const account = await findActiveAccount(this.db, tenantId);
    if (!account) return;
    const upstreamAccount = toUpstreamAccount(account, this.secretsKey);
    // One call for a single template; one list call (paged by the client) for several.
    const outcome = templates.length === 1
      ? await this.upstream.getTemplate(upstreamAccount, templates[0].upstream_id!).then((o) => (o.kind === 'accepted' ? { ...o, value: [o.value] } : o))
      : await this.upstream.listTemplates(upstreamAccount);
    if (outcome.kind !== 'accepted') {
      this.logger?.warn({ tenant_id: tenantId, outcome: outcome.kind }, 'template status poll failed; will retry after the interval');
      return;
    }
    const byId = new Map(outcome.value.map((t) => [t.id, t]));
    for (const template of templates) {
      const remote = byId.get(template.upstream_id!);
      const status = remote ? mapUpstreamTemplateStatus(remote.status) : null;
      if (!remote || !status || status === 'pending') continue;
      await this.apply([tenantId], { upstreamId: template.upstream_id, name: null, language: null }, status, remote.rejectedReason);
    }
  }
}
