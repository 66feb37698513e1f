import type { CallbackDeliverer } from './callbacks.ts';

/** What happens to a send to one recipient (how `POST /__sandbox/recipients` rules resolve per send). */
export type RecipientOutcome = 'ok' | 'fail' | 'no_read';
type Stage = 'sent' | 'delivered' | 'read' | 'failed';

export interface AcceptedMessage {
  id: string;
  phoneNumberId: string;
  wabaId: string;
  recipientId: string;
  callbackData: string | null;
  category: string | null;
  /** A utility template sent inside the user's customer-service window: Meta does not charge it. */
  freeInWindow?: boolean;
  outcome: RecipientOutcome;
  /** The failed status's `errors[0]` (outcome `fail`). */
  error?: { code: number; title: string; details: string };
  /** Held this long before the first status (sent, or failed) is queued. */
  delayMs?: number;
}

export interface PendingStatus {
  message: AcceptedMessage;
  stage: Stage;
}

/** Statuses not yet handed to the deliverer, as a restarted sandbox takes them back. */
export interface StatusPipelineSnapshot {
  due: PendingStatus[];
  delayed: { message: AcceptedMessage; dueAt: number }[];
}

/** What a status callback says about its recipient: Meta's `contacts[]` entry. */
export interface StatusContact {
  profile: { name: string };
  wa_id: string;
  /** The user's business-scoped user id, when they wrote with one. */
  user_id?: string;
}

export interface StatusPipelineOptions {
  flushMs: number;
  batchSize: number;
  displayPhoneNumber: (phoneNumberId: string) => string;
  /** The `contacts[]` entry of a recipient of this phone number. */
  contactOf?: (phoneNumberId: string, recipientId: string) => StatusContact;
  /** Told when a send was taken (to persist what is owed). */
  onChange?: () => void;
  /** While true, statuses wait for `release` instead of going out on their own. */
  hold?: () => boolean;
}

const ERROR_HREF = '/documentation/business-messaging/whatsapp/support/error-codes';

/**
 * Turns accepted sends into sent → delivered → read (or failed) status callbacks, batched like
 * Meta's: statuses collect for `flushMs` (or until `batchSize` are waiting) and go out together,
 * grouped per phone number. A message's next status is queued only once the POST carrying the
 * previous one was taken (or given up on), so each message's statuses arrive in order; a slow
 * receiver slows the progression instead of seeing delivered before sent. The next statuses ride
 * with the POST as its follow-up (`advance` takes them back), so that they survive a restart with it.
 */
export class StatusPipeline {
  private fresh: PendingStatus[] = [];
  private advanced: PendingStatus[] = [];
  private timer: NodeJS.Timeout | null = null;
  private readonly delayed = new Map<NodeJS.Timeout, { message: AcceptedMessage; dueAt: number }>();
  private closed = false;

  constructor(private readonly deliverer: CallbackDeliverer, private readonly options: StatusPipelineOptions) {}

  accepted(message: AcceptedMessage): void {
    if (message.delayMs && message.delayMs > 0) {
      this.delay({ ...message, delayMs: 0 }, Date.now() + message.delayMs);
      this.options.onChange?.();
      return;
    }
    this.fresh.push({ message, stage: message.outcome === 'fail' ? 'failed' : 'sent' });
    this.options.onChange?.();
    if (this.fresh.length >= this.options.batchSize && !this.holding()) this.post(this.takeFresh());
    else this.arm();
  }

  private delay(message: AcceptedMessage, dueAt: number): void {
    const timer = setTimeout(() => {
      this.delayed.delete(timer);
      if (!this.closed) this.accepted(message);
    }, Math.max(0, dueAt - Date.now()));
    timer.unref();
    this.delayed.set(timer, { message, dueAt });
  }

  /** The next statuses of messages whose previous status was taken (a POST's follow-up). */
  advance(items: PendingStatus[]): void {
    if (this.closed) return;
    for (const item of items) this.advanced.push(item);
    this.arm();
  }

  snapshot(): StatusPipelineSnapshot {
    return { due: [...this.advanced, ...this.fresh], delayed: [...this.delayed.values()] };
  }

  restore(snapshot: StatusPipelineSnapshot): void {
    for (const { message, dueAt } of snapshot.delayed) this.delay(message, dueAt);
    if (snapshot.due.length === 0) return;
    this.advanced.push(...snapshot.due);
    this.arm();
  }

  /** Statuses waiting to be posted, delayed first statuses included. */
  pending(): number {
    return this.fresh.length + this.advanced.length + this.delayed.size;
  }

  /**
   * Posts every status waiting now (not those a recipient's `delay_ms` still holds back), in POSTs
   * of `batchSize`, one after the other, each once the one before was taken (or given up on).
   * Their next statuses wait again while the pipeline holds.
   */
  async release(batchSize = this.options.batchSize): Promise<{ statuses: number; posts: number }> {
    const due = this.advanced.concat(this.takeFresh());
    this.advanced = [];
    let posts = 0;
    for (let start = 0; start < due.length; start += batchSize, posts++) await this.postBatch(due.slice(start, start + batchSize));
    return { statuses: due.length, posts };
  }

  /** What waited while the pipeline held goes out as usual. */
  resume(): void {
    if (this.fresh.length + this.advanced.length > 0) this.arm();
  }

  private holding(): boolean {
    return this.options.hold?.() ?? false;
  }

  private arm(): void {
    if (this.timer || this.holding()) return;
    this.timer = setTimeout(() => this.tick(), this.options.flushMs);
    this.timer.unref();
  }

  private tick(): void {
    this.timer = null;
    if (this.holding()) return;
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
    for (let start = 0; start < items.length; start += this.options.batchSize) void this.postBatch(items.slice(start, start + this.options.batchSize));
  }

  /** One POST of these statuses, grouped per phone number; settles once it was taken or given up on. */
  private postBatch(items: PendingStatus[]): Promise<void> {
    const timestamp = String(Math.floor(Date.now() / 1000));
    const byPhone = new Map<string, { wabaId: string; statuses: unknown[]; contacts: Map<string, StatusContact> }>();
    const next: PendingStatus[] = [];
    for (const item of items) {
      const { message } = item;
      let group = byPhone.get(message.phoneNumberId);
      if (!group) {
        group = { wabaId: message.wabaId, statuses: [], contacts: new Map() };
        byPhone.set(message.phoneNumberId, group);
      }
      group.statuses.push(statusJson(item, timestamp));
      // Meta's failed statuses may come without contacts; the sandbox leaves them out there.
      if (item.stage !== 'failed' && !group.contacts.has(message.recipientId)) {
        group.contacts.set(message.recipientId, this.options.contactOf?.(message.phoneNumberId, message.recipientId) ?? { profile: { name: 'Sandbox User' }, wa_id: message.recipientId });
      }
      const stage = nextStage(item);
      if (stage) next.push({ message, stage });
    }
    return this.deliverer.post({
      object: 'whatsapp_business_account',
      entry: [...byPhone].map(([phoneNumberId, group]) => ({
        id: group.wabaId,
        changes: [{
          field: 'messages',
          value: {
            messaging_product: 'whatsapp',
            metadata: { display_phone_number: this.options.displayPhoneNumber(phoneNumberId), phone_number_id: phoneNumberId },
            ...(group.contacts.size > 0 ? { contacts: [...group.contacts.values()] } : {}),
            statuses: group.statuses,
          },
        }],
      })),
    }, next.length > 0 ? next : undefined);
  }

  /** Stops the timers; what is still owed stays readable through `snapshot`. */
  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    for (const timer of this.delayed.keys()) clearTimeout(timer);
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
    const error = message.error ?? { code: 131000, title: 'Something went wrong', details: 'Something went wrong' };
    status.errors = [{ code: error.code, title: error.title, message: error.title, error_data: { details: error.details }, href: ERROR_HREF }];
  }
  return status;
}

/**
 * Per-message pricing (Meta's shape, reference §7): a template is billed in its category; a
 * free-form reply is a free service message, and so is a utility template inside the window.
 */
function pricingOf(message: AcceptedMessage): Record<string, unknown> {
  if (message.category === null) return { billable: false, pricing_model: 'PMP', type: 'free_customer_service', category: 'service' };
  if (message.freeInWindow) return { billable: false, pricing_model: 'PMP', type: 'free_customer_service', category: 'utility' };
  return { billable: true, pricing_model: 'PMP', type: 'regular', category: message.category.toLowerCase() };
}
