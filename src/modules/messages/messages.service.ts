import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { Logger } from 'pino';
import type { Db } from '../../db/database.ts';
import { StatementBatcher } from '../../db/statement-batcher.ts';
import { AppError, notFound, validationError } from '../../http/errors.ts';
import { faultPoint } from '../../faults.ts';
import { completeIdempotencyKey, idempotencyScope, type IdempotencyScope } from '../../http/idempotency.ts';
import type { SendComponent, UpstreamAccount, UpstreamClient } from '../../upstream/types.ts';
import type { SendPacer } from './send-pacer.ts';
import { countMessagedUsers } from '../business-accounts/messaging-limit.ts';
import { findAccountsAndApprovedTemplates, findActiveAccount, noActiveAccount, toUpstreamAccount } from '../business-accounts/business-accounts.repository.ts';
import { NO_ACTIVE_ACCOUNT } from '../business-accounts/business-accounts.repository.ts';
import { upstreamFailure } from '../business-accounts/upstream-failures.ts';
import { applyStop } from '../campaigns/upstream-stops.ts';
import { recordEvents } from '../../events/events.ts';
import { isThrottle, outcomeOfCallbackFailure, outcomeOfSend, type FailureOutcome } from '../../upstream/outcomes.ts';
import { refusedEvent } from './messages.statuses.ts';
import { addCommunication } from '../contacts/communications.repository.ts';
import { optOutOnMarketingRefusals } from '../contacts/marketing-consent.ts';
import { e164Problem } from '../contacts/phone.ts';
import type { MediaService } from '../media/media.service.ts';
import { placeholderPlan } from '../templates/templates.grammar.ts';
import { buildSendComponents } from './messages.components.ts';
import { messageQueries } from './messages.queries.ts';
import { messagesRepository as repo, type NewMessage } from './messages.repository.ts';
import type { Message, MessageListQuery, SendResult, SendTemplateMessage } from './messages.schemas.ts';
import { offsetOf, paginationFor, type Pagination } from '../../http/pagination.ts';

export class MessagesService {
  // Concurrent sends share their prerequisite read and their two writes (before and after the
  // upstream call): one statement per event-loop turn for each.
  private lookups = new StatementBatcher((keys: { tenantId: string; templateName: string; language: string }[]) => findAccountsAndApprovedTemplates(this.db, keys));
  private inserts = new StatementBatcher((items: { tenantId: string; values: NewMessage }[]) => repo.insertAcceptedMany(this.db, items));
  private records = new StatementBatcher((items: { tenantId: string; values: NewMessage; upstreamMessageId: string }[]) => repo.recordAcceptedMany(this.db, items));

  constructor(private db: Db, private upstream: UpstreamClient, private media: MediaService, private secretsKey: Buffer, private logger?: Logger,
    /** How long a taken-over send waits for a callback of the attempt that may have happened (SEND_RECONCILE_MS). */
    private reconcileMs = 120_000,
    /** The phone numbers' throughput, shared with campaigns, so a running campaign leaves room for single sends. */
    private pacer?: SendPacer,
    private pacingWaitMs = 5000) {}

  /** A stored message by our id or the upstream message id; another tenant's is a 404 like a missing one. */
  async get(tenantId: string, id: string): Promise<Message> {
    const message = await messageQueries.find(this.db, tenantId, id);
    if (!message) throw notFound('Message');
    return message;
  }

  /**
   * The bytes of an inbound message's media, streamed from the upstream while it keeps them. A
   * message without media, or media the upstream no longer has, is a 404.
   */
  async inboundMedia(tenantId: string, id: string): Promise<{ body: Readable; mimeType: string; size: number | null; filename: string | null }> {
    const message = await messageQueries.findInbound(this.db, tenantId, id);
    if (!message) throw notFound('Message');
    const media = (message.details as { media?: { id?: string | null; filename?: string | null } } | null)?.media;
    if (!media?.id || message.deleted_at) throw new AppError('NOT_FOUND', 'This message has no media');
    const account = await findActiveAccount(this.db, tenantId);
    if (!account) throw noActiveAccount();
    const outcome = await this.upstream.downloadMedia(toUpstreamAccount(account, this.secretsKey), media.id);
    if (outcome.kind !== 'accepted') throw upstreamFailure(outcome, 'downloading the media');
    if (outcome.value.gone) throw new AppError('NOT_FOUND', 'The media is no longer available from the messaging platform');
    return { ...outcome.value, filename: media.filename ?? null };
  }

  async list(tenantId: string, query: MessageListQuery): Promise<{ data: Message[]; pagination: Pagination }> {
    const { rows, total } = await messageQueries.list(this.db, tenantId, query, offsetOf(query));
    return { data: rows, pagination: paginationFor(query.page, query.limit, total) };
  }

  /**
   * Sends one approved template message. Every rule that can fail without the upstream is checked
   * first (400/404 before any call). The message row is written before the call, as accepted
   * with our row id as biz_opaque_callback_data, so a status callback that overtakes the send
   * response still finds its message.
   */
  async sendTemplate(tenantId: string, input: SendTemplateMessage): Promise<SendResult> {
    const problem = e164Problem(input.to, 'to');
    if (problem) throw validationError(problem, ['body', 'to'], input.to);
    const to = input.to;
    const language = input.language ?? 'en';
    const { account, template } = await this.lookups.submit({ tenantId, templateName: input.template_name, language });
    if (!account) throw noActiveAccount();
    if (!template) throw new AppError('NOT_FOUND', `Template "${input.template_name}" not found or not approved in language "${language}"`);

    const built = buildSendComponents(placeholderPlan(template.components), input.components);
    if (built.issues.length > 0) {
      throw new AppError('VALIDATION_ERROR', built.issues.length === 1 ? built.issues[0].msg : 'Message components do not match the template', { details: built.issues });
    }
    const upstreamAccount = toUpstreamAccount(account, this.secretsKey);
    const pace = account.messagesPerSecond;
    // Single sends count towards a limited portfolio's messaging limit (they are never refused for it).
    const limited = account.messagingLimit !== null;
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
    const keyed = idempotencyScope.getStore();
    if (keyed) return this.sendKeyed(tenantId, keyed, record, upstreamAccount, components, pace, limited);
    const row = await this.inserts.submit({ tenantId, values: record });
    const wamid = await this.callUpstream(tenantId, record, upstreamAccount, components, pace, limited);
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

  /**
   * A send under an Idempotency-Key (issue: a crash between the upstream's answer and the key's
   * completion must not send twice). The message row is recorded with the key before the call, and
   * the upstream id with the key's response after it, each in one transaction. A retry that takes
   * over the key of a request that died reconciles that message: its upstream id, set by the send
   * or by a status callback carrying our row id, is the answer; with no word from the upstream
   * within the reconciliation window the same row is sent again.
   */
  private async sendKeyed(tenantId: string, key: IdempotencyScope, record: NewMessage, account: UpstreamAccount, components: SendComponent[], pace: number, limited: boolean): Promise<SendResult> {
    const previous = key.takenOverResource ? await repo.findById(this.db, tenantId, key.takenOverResource) : undefined;
    if (previous) {
      const earlier = { ...record, id: previous.id, to: previous.to_phone };
      // The upstream took it (its answer, or a callback since): the original answer, never a second send.
      if (previous.upstream_message_id) return this.completeKeyed(tenantId, earlier, previous.upstream_message_id);
      // Refused in its answer (the request died before its key kept the refusal): the same refusal.
      if (previous.status === 'failed') throw this.refusalError(earlier, outcomeOfCallbackFailure(previous.error_code ?? 0, previous.error_title ?? 'Unknown failure') /* no code: a recipient failure */);
      const until = (previous.attempted_at ?? previous.created_at).getTime() + this.reconcileMs;
      if (Date.now() < until) {
        const pending = new AppError('CONFLICT', 'The earlier request with this Idempotency-Key may have reached the messaging platform and its outcome is not known yet; retry after Retry-After (nothing is sent twice)');
        pending.retryAfterSeconds = Math.min(5, (until - Date.now()) / 1000);
        pending.outcomeUnknown = true;
        throw pending;
      }
      // No word from the upstream within the reconciliation window: the same row is sent again.
      await this.db.updateTable('messages').set({ attempted_at: new Date() }).where('tenant_id', '=', tenantId).where('id', '=', previous.id).execute();
      record = { ...earlier, components: previous.components };
      components = previous.components as SendComponent[];
    } else {
      await this.db.transaction().execute(async (tx) => {
        await repo.insertAccepted(tx, tenantId, record);
        await key.attach(tx, record.id);
      });
    }
    const wamid = await this.callUpstream(tenantId, record, account, components, pace, limited);
    await faultPoint('send:after-upstream');
    return this.completeKeyed(tenantId, record, wamid);
  }

  /** Records the upstream id (and the key's response, in the same transaction). */
  private async completeKeyed(tenantId: string, record: NewMessage, wamid: string): Promise<SendResult> {
    const result: SendResult = { message_id: wamid, status: 'accepted', to: record.to };
    await this.db.transaction().execute(async (tx) => {
      await repo.recordAccepted(tx, tenantId, record, wamid);
      const row = await repo.findById(tx, tenantId, record.id);
      if (row?.contact_id) await addCommunication(tx, tenantId, { contactId: row.contact_id, direction: 'outbound', messageId: wamid, summary: `Template ${record.templateName} (${record.language})` });
      await completeIdempotencyKey(tx, result);
    });
    return result;
  }

  /**
   * Waits for this send's slot in the number's throughput (messages per second, shared with every
   * campaign and worker). A number that stays saturated for PACING_WAIT_MS answers 429.
   */
  private async awaitSendSlot(phoneNumberId: string, messagesPerSecond: number): Promise<void> {
    if (!this.pacer) return;
    const deadline = Date.now() + this.pacingWaitMs;
    for (;;) {
      const slot = await this.pacer.reserve(phoneNumberId, 1, messagesPerSecond);
      if (slot.granted > 0) {
        if (slot.startAt > Date.now()) await new Promise((r) => setTimeout(r, slot.startAt - Date.now()));
        return;
      }
      if (Date.now() >= deadline) throw new AppError('RATE_LIMIT_EXCEEDED', `The sending phone number is at its throughput (${messagesPerSecond} messages per second). Please slow down.`);
      await new Promise((r) => setTimeout(r, Math.max(5, slot.intervalMs)));
    }
  }

  /** The upstream call, its answer acted on through the outcome model: the upstream id, or the error the API answers. */
  private async callUpstream(tenantId: string, record: NewMessage, account: UpstreamAccount, components: SendComponent[], pace: number, limited: boolean): Promise<string> {
    await this.awaitSendSlot(account.phoneNumberId, pace);
    const result = await this.upstream.sendTemplate(account, { to: record.to, templateName: record.templateName, language: record.language, components, callbackData: record.id });
    const outcome = outcomeOfSend(result);
    if (outcome.kind === 'accepted' || outcome.kind === 'held') {
      if (limited) await countMessagedUsers(this.db, tenantId, [record.to]);
      return outcome.messageId;
    }
    this.logger?.warn({ tenant_id: tenantId, message_row_id: record.id, outcome: outcome.kind, code: 'error' in outcome ? outcome.error?.code : undefined }, 'template send not accepted upstream');
    switch (outcome.kind) {
      case 'unknown': {
        // The row stays, as unknown: a callback carrying its id tells what became of it.
        await repo.markUnknown(this.db, tenantId, record.id, `Outcome unknown: ${outcome.reason}`);
        const error = new AppError('UPSTREAM_TIMEOUT', `The messaging platform did not answer while sending the message (${outcome.reason}); its outcome is not known yet. A retry with the same Idempotency-Key never sends it twice`);
        error.outcomeUnknown = true;
        throw error;
      }
      case 'retry_later':
        // The upstream did not take it: nothing was sent, nothing is kept.
        await repo.discard(this.db, tenantId, record.id);
        if (isThrottle(outcome)) {
          if (outcome.error?.code === 130429) await this.pacer?.penalise(account.phoneNumberId);
          const error = new AppError('RATE_LIMIT_EXCEEDED', 'Rate limit exceeded. Please slow down.', { upstream_error: upstreamError(outcome.error!) });
          error.retryAfterSeconds = outcome.retryAfterMs / 1000;
          throw error;
        }
        throw upstreamFailure({ kind: 'retryable', error: outcome.error, retryAfterMs: outcome.retryAfterMs, reason: outcome.reason }, 'sending the message');
      case 'number_restricted': {
        // Nothing was sent: the number is restricted for hours (reference §4), so its campaigns pause too.
        await this.db.transaction().execute(async (tx) => {
          await repo.discard(tx, tenantId, record.id);
          await applyStop(tx, tenantId, outcome, record.templateId);
        });
        const error = new AppError('RATE_LIMIT_EXCEEDED', 'Rate limit exceeded. Please slow down.', { upstream_error: upstreamError(outcome.error) });
        error.retryAfterSeconds = outcome.retryAfterMs / 1000;
        throw error;
      }
      case 'account_stopped':
        // No Graph error at all (a proxy, a wrong UPSTREAM_BASE_URL): the account is not known to be at fault.
        if (!outcome.accountStatus) {
          await repo.discard(this.db, tenantId, record.id);
          throw upstreamFailure({ kind: 'rejected', error: outcome.error }, 'sending the message');
        }
        break;
    }
    throw await this.recordRefusal(tenantId, record, outcome);
  }

  /** A refusal for good: the failed row, its message.failed and what it stops, in one transaction. */
  private async recordRefusal(tenantId: string, record: NewMessage, outcome: FailureOutcome): Promise<AppError> {
    const error = outcome.error!;
    await this.db.transaction().execute(async (tx) => {
      const row = await repo.recordFailed(tx, tenantId, record.id, { code: error.code, title: error.title });
      if (row) await recordEvents(tx, tenantId, [refusedEvent(row, { code: error.code, title: error.title }, row.failed_at ?? new Date())]);
      await applyStop(tx, tenantId, outcome, record.templateId);
      await optOutOnMarketingRefusals(tx, tenantId, [{ phone: record.to, code: error.code, at: row?.failed_at ?? new Date() }]);
    });
    return this.refusalError(record, outcome);
  }

  /** How the API answers a refusal: a 4xx (a retry cannot change it) naming the upstream code. */
  private refusalError(record: NewMessage, outcome: FailureOutcome): AppError {
    const error = outcome.error!;
    const extras = { upstream_error: upstreamError(error) };
    const why = `${error.title} (upstream code ${error.code})`;
    if (outcome.kind === 'template_stopped') return new AppError('NOT_FOUND', `Template "${record.templateName}" cannot be sent in language "${record.language}": ${why}`, extras);
    if (outcome.kind === 'account_stopped') return new AppError('NOT_FOUND', `${NO_ACTIVE_ACCOUNT}: the messaging platform stopped it: ${why}`, extras);
    return new AppError('VALIDATION_ERROR', `The messaging platform refused the message to ${record.to}: ${why}`, extras);
  }
}

function upstreamError(error: { code: number; title: string; details: string | null }) {
  return { code: error.code, title: error.title, details: error.details };
}
