import type { CallbackDeliverer } from './callbacks.ts';

export type RecipientOutcome = 'ok' | 'fail' | 'no_read' | 'reject';
type Stage = 'sent' | 'delivered' | 'read' | 'failed';

export interface AcceptedMessage {
  id: string;
  phoneNumberId: string;
  wabaId: string;
  recipientId: string;
  callbackData: string | null;
  category: string | null;
  outcome: RecipientOutcome;
  errorCode: number;
  errorTitle: string;
  /** What went wrong in the failed status's `error_data.details`; the title when absent. */
  errorDetails?: string;
  /** Held this long before the first status (sent, or failed) is queued. */
  delayMs?: number;
}

interface PendingStatus {
  message: AcceptedMessage;
  stage: Stage;
}

export interface StatusPipelineOptions {
  flushMs: number;
  batchSize: number;
  displayPhoneNumber: (phoneNumberId: string) => string;
}

const ERROR_HREF = '/documentation/business-messaging/whatsapp/support/error-codes';

/**
 * Turns accepted sends into sent → delivered → read (or failed) status callbacks, batched like
 * Meta's: statuses collect for `flushMs` (or until `batchSize` are waiting) and go out together,
 * grouped per phone number. A message's next status is queued only once the POST carrying the
 * previous one was taken (or given up on), so each message's statuses arrive in order; a slow
 * receiver slows the progression instead of seeing delivered before sent.
 */
export class StatusPipeline {
  private fresh: PendingStatus[] = [];
  private advanced: PendingStatus[] = [];
  private timer: NodeJS.Timeout | null = null;
  private readonly delayed = new Set<NodeJS.Timeout>();
  private closed = false;

  constructor(private readonly deliverer: CallbackDeliverer, private readonly options: StatusPipelineOptions) {}

  accepted(message: AcceptedMessage): void {
    if (message.delayMs && message.delayMs > 0) {
      const timer = setTimeout(() => {
        this.delayed.delete(timer);
        if (!this.closed) this.accepted({ ...message, delayMs: 0 });
      }, message.delayMs);
      timer.unref();
      this.delayed.add(timer);
      return;
    }
    this.fresh.push({ message, stage: message.outcome === 'fail' ? 'failed' : 'sent' });
    if (this.fresh.length >= this.options.batchSize) this.post(this.takeFresh());
    else this.arm();
  }

  /** Statuses waiting to be posted, delayed first statuses included. */
  pending(): number {
    return this.fresh.length + this.advanced.length + this.delayed.size;
  }

  private arm(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => this.tick(), this.options.flushMs);
    this.timer.unref();
  }

  private tick(): void {
    this.timer = null;
    const due = this.advanced.concat(this.takeFresh());
    this.advanced = [];
    this.post(due);
    if (this.fresh.length + this.advanced.length > 0) this.arm();
  }

  private takeFresh(): PendingStatus[] {
    const taken = this.fresh;
    this.fresh = [];
    return taken;
  }

  private post(items: PendingStatus[]): void {
    if (items.length === 0) return;
    const timestamp = String(Math.floor(Date.now() / 1000));
    for (let start = 0; start < items.length; start += this.options.batchSize) {
      const byPhone = new Map<string, { wabaId: string; statuses: unknown[] }>();
      const next: PendingStatus[] = [];
      for (const item of items.slice(start, start + this.options.batchSize)) {
        const { message } = item;
        let group = byPhone.get(message.phoneNumberId);
        if (!group) {
          group = { wabaId: message.wabaId, statuses: [] };
          byPhone.set(message.phoneNumberId, group);
        }
        group.statuses.push(statusJson(item, timestamp));
        const stage = nextStage(item);
        if (stage) next.push({ message, stage });
      }
      const delivered = this.deliverer.post({
        object: 'whatsapp_business_account',
        entry: [...byPhone].map(([phoneNumberId, group]) => ({
          id: group.wabaId,
          changes: [{
            field: 'messages',
            value: {
              messaging_product: 'whatsapp',
              metadata: { display_phone_number: this.options.displayPhoneNumber(phoneNumberId), phone_number_id: phoneNumberId },
              statuses: group.statuses,
            },
          }],
        })),
      });
      if (next.length > 0) {
        void delivered.then(() => {
          if (this.closed) return;
          for (const item of next) this.advanced.push(item);
          this.arm();
        });
      }
    }
  }

  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    for (const timer of this.delayed) clearTimeout(timer);
    this.delayed.clear();
    this.fresh = [];
    this.advanced = [];
  }
}

function nextStage({ message, stage }: PendingStatus): Stage | null {
  if (stage === 'sent') return 'delivered';
  if (stage === 'delivered' && message.outcome !== 'no_read') return 'read';
  return null;
}

function statusJson({ message, stage }: PendingStatus, timestamp: string): Record<string, unknown> {
  const status: Record<string, unknown> = { id: message.id, status: stage, timestamp, recipient_id: message.recipientId };
  if (message.callbackData !== null) status.biz_opaque_callback_data = message.callbackData;
  // Meta prices a message on `sent` and again on one of delivered/read (reference §7); never on failed.
  if (stage === 'sent' || stage === 'delivered') status.pricing = pricingOf(message);
  if (stage === 'failed') {
    status.errors = [{
      code: message.errorCode, title: message.errorTitle, message: message.errorTitle,
      error_data: { details: message.errorDetails ?? message.errorTitle }, href: ERROR_HREF,
    }];
  }
  return status;
}

/** Per-message pricing: a template is billed in its category; a free-form reply is a free service message. */
function pricingOf(message: AcceptedMessage): Record<string, unknown> {
  if (message.category === null) return { billable: false, pricing_model: 'PMP', type: 'free_customer_service', category: 'service' };
  return { billable: true, pricing_model: 'PMP', type: 'regular', category: message.category.toLowerCase() };
}
