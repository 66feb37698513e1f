import type { Tx } from '../../db/database.ts';
import type { FailureOutcome } from '../../upstream/outcomes.ts';
import { campaignsRepository, type CampaignRow } from './campaigns.repository.ts';
import { recordTransition } from './campaigns.service.ts';
import type { CampaignAction } from './campaigns.states.ts';

/**
 * What the upstream stopping a template or an account does to the service's state, whichever answer
 * said so (a send's answer, a status callback, a template status callback or poll): the template or
 * account takes its new status and the campaigns sending with it pause, resume or fail. Every
 * move runs in the caller's transaction with its events.
 */

const TEMPLATE_PAUSED = 'template_paused';
const NUMBER_RESTRICTED = 'number_restricted';

/** A template's new status, as it affects the campaigns sending it (`reason`: why a disabled template fails them). */
export async function applyTemplateStatus(tx: Tx, templates: { id: string; status: string }[], reason = 'The template was disabled by WhatsApp'): Promise<CampaignRow[]> {
  const failed: CampaignRow[] = [];
  for (const t of templates) {
    if (t.status === 'paused') await moveCampaigns(tx, t.id, 'RUNNING', 'pause', { paused_reason: TEMPLATE_PAUSED }, { reason: TEMPLATE_PAUSED });
    // Only the campaigns the pause stopped: a pause by the user stays.
    else if (t.status === 'approved') await moveCampaigns(tx, t.id, 'PAUSED', 'resume', { paused_reason: null }, { reason: 'template_approved' }, TEMPLATE_PAUSED);
    else if (t.status === 'disabled') failed.push(...await failTemplateCampaigns(tx, t.id, reason, 132016));
  }
  return failed;
}

/** A RUNNING campaign paused by the service, with why (paused_reason, and campaign.paused's reason and code). */
export async function pauseCampaign(tx: Tx, tenantId: string, id: string, reason: string, code: number): Promise<void> {
  const row = await campaignsRepository.transition(tx, tenantId, id, 'pause', { paused_reason: reason });
  if (row) await recordTransition(tx, row, 'pause', { reason, error_code: code });
}

async function moveCampaigns(tx: Tx, templateId: string, from: string, action: CampaignAction, set: { paused_reason: string | null }, data: Record<string, unknown>, pausedReason?: string): Promise<void> {
  let query = tx.selectFrom('campaigns').select(['id', 'tenant_id']).where('template_id', '=', templateId).where('status', '=', from);
  if (pausedReason) query = query.where('paused_reason', '=', pausedReason);
  for (const c of await query.orderBy('id').execute()) {
    const row = await campaignsRepository.transition(tx, c.tenant_id, c.id, action, set);
    if (row) await recordTransition(tx, row, action, data);
  }
}

/** Running campaigns of the template, and those its pause stopped, fail with the reason. */
async function failTemplateCampaigns(tx: Tx, templateId: string, reason: string, code: number): Promise<CampaignRow[]> {
  const campaigns = await tx.selectFrom('campaigns').select(['id', 'tenant_id']).where('template_id', '=', templateId)
    .where((eb) => eb.or([eb('status', '=', 'RUNNING'), eb.and([eb('status', '=', 'PAUSED'), eb('paused_reason', '=', TEMPLATE_PAUSED)])]))
    .orderBy('id').execute();
  return failCampaigns(tx, campaigns, reason, code);
}

async function failCampaigns(tx: Tx, campaigns: { id: string; tenant_id: string }[], reason: string, code: number | null): Promise<CampaignRow[]> {
  const failed: CampaignRow[] = [];
  for (const c of campaigns) {
    const row = await campaignsRepository.transition(tx, c.tenant_id, c.id, 'fail', { failure_reason: reason.slice(0, 500), completed_at: new Date() });
    if (row) {
      await recordTransition(tx, row, 'fail', { reason, error_code: code });
      failed.push(row);
    }
  }
  return failed;
}

/**
 * An answer that stops a template, a number or an account (template_stopped, number_restricted,
 * account_stopped), applied once: the template paused or disabled (and its campaigns moved); the
 * tenant's running campaigns paused while its number is restricted for spam; or the business
 * account marked token_invalid or restricted (sends answer 404 until an operator connects it again)
 * with the tenant's running campaigns failed. A template stop without a status (missing, rejected
 * content) fails the campaigns sending it. Other outcomes change nothing here. Returns the campaigns it failed.
 */
export async function applyStop(tx: Tx, tenantId: string, outcome: FailureOutcome, templateId: string | null): Promise<CampaignRow[]> {
  const reason = `Upstream error ${outcome.error?.code}: ${outcome.error?.title}`;
  if (outcome.kind === 'template_stopped' && templateId) {
    if (!outcome.templateStatus) return failTemplateCampaigns(tx, templateId, reason, outcome.error.code);
    await tx.updateTable('templates').set({ status: outcome.templateStatus, updated_at: new Date() })
      .where('id', '=', templateId).where('tenant_id', '=', tenantId).where('status', '=', 'approved').execute();
    // Also when a callback said so first: the campaigns still sending with it move now.
    return applyTemplateStatus(tx, [{ id: templateId, status: outcome.templateStatus }], reason);
  }
  if (outcome.kind === 'number_restricted') {
    // Reference §4: pause and resume hours later. The tenant resumes them (campaign.paused says why).
    const running = await tx.selectFrom('campaigns').select(['id', 'tenant_id']).where('tenant_id', '=', tenantId).where('status', '=', 'RUNNING').orderBy('id').execute();
    for (const c of running) await pauseCampaign(tx, c.tenant_id, c.id, NUMBER_RESTRICTED, outcome.error.code);
    return [];
  }
  if (outcome.kind === 'account_stopped') {
    if (outcome.accountStatus) {
      await tx.updateTable('business_accounts').set({ status: outcome.accountStatus, status_reason: reason.slice(0, 500), updated_at: new Date() })
        .where('tenant_id', '=', tenantId).where('status', '=', 'active').execute();
    }
    const running = await tx.selectFrom('campaigns').select(['id', 'tenant_id']).where('tenant_id', '=', tenantId).where('status', '=', 'RUNNING').orderBy('id').execute();
    return failCampaigns(tx, running, reason, outcome.error.code);
  }
  return [];
}
