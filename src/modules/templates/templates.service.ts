import type { Logger } from 'pino';
import type { Db } from '../../db/database.ts';
import { AppError, notFound, type ValidationDetail } from '../../http/errors.ts';
import { isoOrNull } from '../../http/nullable.ts';
import { offsetOf, paginationFor, type PageQuery } from '../../http/pagination.ts';
import { TEMPLATE_SUBCODES } from '../../upstream/error-codes.ts';
import type { UpstreamClient, UpstreamOutcome } from '../../upstream/types.ts';
import { findActiveAccount, noActiveAccount, toUpstreamAccount } from '../business-accounts/business-accounts.repository.ts';
import { upstreamFailure } from '../business-accounts/upstream-failures.ts';
import { LANGUAGE, TEMPLATE_NAME, validateComponents } from './templates.grammar.ts';
import { templatesRepository as repo, type TemplateRow, type TemplateStatus } from './templates.repository.ts';
import type { Template, TemplateCreate } from './templates.schemas.ts';
import { completeIdempotencyKey } from '../../http/idempotency.ts';

export function toTemplate(row: TemplateRow): Template {
  return {
    id: row.id,
    template_name: row.template_name,
    language: row.language,
    category: row.category,
    status: row.status,
    rejected_reason: row.status === 'rejected' ? row.rejected_reason : null,
    quality_score: row.quality_score,
    components: (row.components ?? null) as Template['components'],
    created_at: row.created_at.toISOString(),
    updated_at: isoOrNull(row.updated_at),
  };
}

/**
 * Upstream template statuses mapped to ours. PAUSED is kept as an internal `paused` status
 * (not sendable, hidden like every non-approved template) because the upstream un-pauses
 * templates; REINSTATED/UNPAUSED bring it back to approved. Statuses not listed change nothing.
 */
export function mapUpstreamTemplateStatus(upstream: string): TemplateStatus | null {
  switch (upstream.toUpperCase()) {
    case 'APPROVED': case 'REINSTATED': case 'UNPAUSE': case 'UNPAUSED': return 'approved';
    case 'PENDING': case 'IN_APPEAL': return 'pending';
    case 'REJECTED': return 'rejected';
    case 'PAUSED': return 'paused';
    case 'DISABLED': case 'DELETED': case 'PENDING_DELETION': return 'disabled';
    default: return null;
  }
}

export class TemplatesService {
  constructor(private db: Db, private upstream: UpstreamClient, private secretsKey: Buffer, private logger?: Logger) {}

  async list(tenantId: string, page: PageQuery) {
    const { rows, total } = await repo.listApproved(this.db, tenantId, page.limit, offsetOf(page));
    return { data: rows.map(toTemplate), pagination: paginationFor(page.page, page.limit, total) };
  }

  /** Read endpoints show approved templates only. */
  async get(tenantId: string, id: string): Promise<Template> {
    const row = await repo.findById(this.db, tenantId, id);
    if (!row || row.status !== 'approved') throw notFound('Template');
    return toTemplate(row);
  }

  async create(tenantId: string, input: TemplateCreate): Promise<Template> {
    const details: ValidationDetail[] = [];
    if (!TEMPLATE_NAME.test(input.template_name)) {
      details.push({ type: 'pattern', loc: ['body', 'template_name'], input: input.template_name,
        msg: 'template_name may contain only lowercase letters, digits and underscores (1-255 characters here; the upstream allows up to 512)' });
    }
    if (!LANGUAGE.test(input.language)) {
      details.push({ type: 'pattern', loc: ['body', 'language'], input: input.language,
        msg: 'language must be a locale code such as en or en_US (language, optionally _REGION)' });
    }
    details.push(...validateComponents(input.components, ['body', 'components'], input.category).issues);
    if (details.length > 0) {
      throw new AppError('VALIDATION_ERROR', details.length === 1 ? details[0].msg : 'Template validation failed', { details });
    }
    return this.db.transaction().execute(async (tx) => {
      const template = toTemplate(await repo.insertDraft(tx, tenantId, {
        template_name: input.template_name, language: input.language, category: input.category, components: input.components,
      }));
      await completeIdempotencyKey(tx, template);
      return template;
    });
  }

  /** draft -> pending: the components go to the upstream verbatim for review. */
  async submit(tenantId: string, id: string): Promise<Template> {
    const row = await repo.findById(this.db, tenantId, id);
    if (!row) throw notFound('Template');
    if (row.status === 'rejected') {
      throw new AppError('VALIDATION_ERROR', 'A rejected template cannot be re-submitted; create a corrected draft as a new template');
    }
    if (row.status !== 'draft') throw new AppError('VALIDATION_ERROR', `Only draft templates can be submitted; this template is ${row.status}`);
    const account = await findActiveAccount(this.db, tenantId);
    if (!account) throw noActiveAccount();

    const outcome = await this.upstream.createTemplate(toUpstreamAccount(account, this.secretsKey), {
      name: row.template_name, language: row.language, category: row.category, components: row.components,
    });
    if (outcome.kind !== 'accepted') {
      this.logger?.warn({ tenant_id: tenantId, template_id: id, outcome: outcome.kind }, 'template submission failed upstream');
      const reason = refusedContent(outcome);
      if (reason !== null) {
        // The upstream judged the content at creation: that is its review, so the template is rejected (spec 3.2).
        return this.db.transaction().execute(async (tx) => {
          const refused = await repo.markRefused(tx, tenantId, id, account.wabaId, reason);
          if (!refused) throw new AppError('CONFLICT', 'The template was submitted concurrently; re-read it');
          await completeIdempotencyKey(tx, toTemplate(refused));
          return toTemplate(refused);
        });
      }
      throw submissionFailure(outcome);
    }
    // Always pending (spec 3.2: submit moves draft to pending; review decides later). Even when the
    // upstream decides at once, its status callback (or the poller) brings that decision in.
    // The upstream may reassign the category.
    return this.db.transaction().execute(async (tx) => {
      const updated = await repo.markSubmitted(tx, tenantId, id, { upstreamId: outcome.value.id, wabaId: account.wabaId }, 'pending',
        CATEGORY_SET.has(outcome.value.category) ? outcome.value.category : null);
      if (!updated) throw new AppError('CONFLICT', 'The template was submitted concurrently; re-read it');
      await completeIdempotencyKey(tx, toTemplate(updated));
      return toTemplate(updated);
    });
  }
}

const CATEGORY_SET = new Set(['MARKETING', 'UTILITY', 'AUTHENTICATION']);

/** Subcodes of error 100 that are about the business account or the name, not the template's content. */
const NOT_CONTENT = new Set<number>([
  TEMPLATE_SUBCODES.duplicateNameLanguage, TEMPLATE_SUBCODES.templateCountLimit, TEMPLATE_SUBCODES.nameInCooldown, TEMPLATE_SUBCODES.statusCannotChange,
]);

/** The upstream's reason when it refused the template's content at creation (error 100), else null. */
function refusedContent(outcome: Exclude<UpstreamOutcome<unknown>, { kind: 'accepted' }>): string | null {
  if (outcome.kind !== 'rejected' || outcome.error.code !== 100) return null;
  if (outcome.error.subcode !== null && NOT_CONTENT.has(outcome.error.subcode)) return null;
  return (outcome.error.details ?? outcome.error.title).slice(0, 1000);
}

/**
 * A refused submission is the caller's to fix when the upstream says the request itself is wrong:
 * the name and language already exist in the business account (409), or the content breaks the
 * upstream's template rules (400). Anything else is the platform's trouble (502/504, retry-safe).
 */
function submissionFailure(outcome: Exclude<UpstreamOutcome<unknown>, { kind: 'accepted' }>): AppError {
  if (outcome.kind === 'rejected' && outcome.error.subcode === TEMPLATE_SUBCODES.duplicateNameLanguage) {
    return new AppError('CONFLICT', 'A template with this name and language already exists in the business account');
  }
  if (outcome.kind === 'rejected' && outcome.error.errorClass === 'bad_request') {
    const reason = outcome.error.details ?? outcome.error.title;
    return new AppError('VALIDATION_ERROR', `The messaging platform refused the template: ${reason}`, {
      details: [{ type: 'upstream_rejected', loc: ['body', 'components'], msg: reason, input: { code: outcome.error.code, subcode: outcome.error.subcode } }],
    });
  }
  return upstreamFailure(outcome, 'submitting the template');
}
