import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { Db } from '../../db/database.ts';
import { StatementBatcher } from '../../db/statement-batcher.ts';
import { AppError, validationError } from '../../http/errors.ts';
import type { UpstreamClient } from '../../upstream/types.ts';
import { findAccountsAndApprovedTemplates, noActiveAccount, toUpstreamAccount } from '../business-accounts/business-accounts.repository.ts';
import { upstreamFailure } from '../business-accounts/upstream-failures.ts';
import { addCommunication } from '../contacts/communications.repository.ts';
import { toE164 } from '../contacts/phone.ts';
import type { MediaService } from '../media/media.service.ts';
import { placeholderPlan } from '../templates/templates.grammar.ts';
import { buildSendComponents } from './messages.components.ts';
import { messagesRepository as repo, type NewMessage } from './messages.repository.ts';
import type { SendResult, SendTemplateMessage } from './messages.schemas.ts';

export class MessagesService {
  // Concurrent sends share their prerequisite read and their two writes (before and after the
  // upstream call): one statement per event-loop turn for each.
  private lookups = new StatementBatcher((keys: { tenantId: string; templateName: string; language: string }[]) => findAccountsAndApprovedTemplates(this.db, keys));
  private inserts = new StatementBatcher((items: { tenantId: string; values: NewMessage }[]) => repo.insertAcceptedMany(this.db, items));
  private records = new StatementBatcher((items: { tenantId: string; values: NewMessage; upstreamMessageId: string }[]) => repo.recordAcceptedMany(this.db, items));

  constructor(private db: Db, private upstream: UpstreamClient, private media: MediaService, private secretsKey: Buffer, private logger?: Logger) {}

  /**
   * Sends one approved template message. Every rule that can fail without the upstream is checked
   * first (400/404 before any call). The message row is written before the call, as accepted
   * with our row id as biz_opaque_callback_data, so a status callback that overtakes the send
   * response still finds its message.
   */
  async sendTemplate(tenantId: string, input: SendTemplateMessage): Promise<SendResult> {
    const to = toE164(input.to);
    if (!to) throw validationError('to must be a valid phone number in E.164 format (+<country code><number>)', ['body', 'to'], input.to);
    const language = input.language ?? 'en';
    const { account, template } = await this.lookups.submit({ tenantId, templateName: input.template_name, language });
    if (!account) throw noActiveAccount();
    if (!template) throw new AppError('NOT_FOUND', `Template "${input.template_name}" not found or not approved in language "${language}"`);

    const built = buildSendComponents(placeholderPlan(template.components), input.components);
    if (built.issues.length > 0) {
      throw new AppError('VALIDATION_ERROR', built.issues.length === 1 ? built.issues[0].msg : 'Message components do not match the template', { details: built.issues });
    }
    const upstreamAccount = toUpstreamAccount(account, this.secretsKey);
    // Our media ids become upstream media ids (uploaded on first use).
    const components = built.components.map((c) => ({ ...c, parameters: [...c.parameters] }));
    for (const ref of built.mediaRefs) {
      const param = components[ref.component].parameters[ref.parameter] as Record<string, Record<string, unknown>>;
      const media = await this.media.upstreamIdFor(tenantId, ref.mediaId, upstreamAccount, ref.type);
      const { media_id: _ours, ...rest } = param[ref.type];
      components[ref.component].parameters[ref.parameter] = { type: ref.type, [ref.type]: { ...rest, id: media.upstreamId, ...(ref.type === 'document' && !rest.filename ? { filename: media.filename } : {}) } };
    }

    const id = randomUUID();
    const record = { id, templateId: template.id, templateName: template.template_name, language, to, components: input.components ?? [] };
    const row = await this.inserts.submit({ tenantId, values: record });
    const outcome = await this.upstream.sendTemplate(upstreamAccount, { to, templateName: template.template_name, language, components, callbackData: id });
    if (outcome.kind !== 'accepted') {
      // A timeout leaves the outcome unknown: the row stays accepted so late callbacks still apply.
      const error = outcome.kind === 'timeout' ? null : outcome.error;
      await repo.recordSendFailure(this.db, tenantId, id, {
        final: outcome.kind !== 'timeout',
        code: error?.code ?? null,
        title: outcome.kind === 'timeout' ? 'Upstream timeout: outcome unknown' : error?.title ?? (outcome.kind === 'retryable' ? outcome.reason : 'rejected'),
      });
      this.logger?.warn({ tenant_id: tenantId, message_row_id: id, outcome: outcome.kind, code: error?.code }, 'template send failed upstream');
      throw upstreamFailure(outcome, 'sending the message');
    }
    const wamid = outcome.value.messageId;
    if (row.contact_id) {
      const contactId = row.contact_id;
      await this.db.transaction().execute(async (tx) => {
        await repo.recordAccepted(tx, tenantId, record, wamid);
        await addCommunication(tx, tenantId, { contactId, direction: 'outbound', messageId: wamid, summary: `Template ${template.template_name} (${language})` });
      });
    } else {
      await this.records.submit({ tenantId, values: record, upstreamMessageId: wamid });
    }
    return { message_id: wamid, status: 'accepted', to };
  }
}
