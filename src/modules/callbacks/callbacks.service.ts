import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { Db, Tx } from '../../db/database.ts';
import { recordEvents, type NewEvent } from '../../events/events.ts';
import { nestsDeeperThan, storable } from '../../http/storable-text.ts';
import { findTenantByPhoneNumberId } from '../business-accounts/business-accounts.repository.ts';
import { addCommunication } from '../contacts/communications.repository.ts';
import { applyMessageStatuses, type AppliedStatus, type DeliveryStatus, type StatusUpdate } from '../messages/messages.statuses.ts';
import { RateCards, type Pricing } from '../pricing/rate-card.ts';
import type { TemplateStatusSync, TemplateStatusUpdate } from '../templates/templates.status-sync.ts';

/** Shapes of the upstream's callback envelope (reference §7), as far as we read them. */
interface Envelope {
  object?: string;
  entry?: { id?: string; changes?: { field?: string; value?: ChangeValue }[] }[];
}
interface ChangeValue extends TemplateStatusUpdate {
  metadata?: { phone_number_id?: string };
  statuses?: RawStatus[];
  messages?: RawInbound[];
  contacts?: RawContact[];
}
/** A sender as `value.contacts[]` names it: phone (`wa_id`) and/or business-scoped user id. */
interface RawContact { wa_id?: string; user_id?: string }
interface RawStatus {
  id?: string; status?: string; timestamp?: string; recipient_id?: string; biz_opaque_callback_data?: string;
  errors?: { code?: number; title?: string; message?: string }[];
  pricing?: { category?: string; type?: string; billable?: boolean; pricing_model?: string };
}
interface RawInbound {
  id?: string; from?: string; from_user_id?: string; timestamp?: string; type?: string;
  text?: { body?: string };
  button?: { text?: string; payload?: string };
  interactive?: { type?: string; button_reply?: { title?: string }; list_reply?: { title?: string }; nfm_reply?: { name?: string; body?: string; response_json?: string } };
  image?: { caption?: string }; video?: { caption?: string }; document?: { caption?: string; filename?: string };
}

interface InboundMessage {
  upstreamMessageId: string;
  from: string | null;
  /** Business-scoped user id (BSUID): users with a username may write without a phone number. */
  fromUserId: string | null;
  type: string;
  text: string | null;
  timestamp: Date;
  flow: { flowToken: string | null; response: Record<string, unknown> } | null;
  raw: RawInbound;
}

/** Work for one tenant out of one callback POST. */
interface TenantBatch {
  statuses: StatusUpdate[];
  inbound: InboundMessage[];
}

const DELIVERY_STATUSES = new Set(['sent', 'delivered', 'read', 'failed']);

function toDate(unixSeconds: string | undefined): Date {
  const date = new Date(Number(unixSeconds) * 1000);
  // Absent, zero or out of the representable range: the time it reached us.
  return date.getTime() > 0 ? date : new Date();
}

// The envelope is signed, but its shape is still the sender's: anything not of the expected type
// reads as absent, so a malformed callback is skipped instead of failing (a 500 is retried forever).
const list = <T>(value: T[] | undefined): T[] => (Array.isArray(value) ? value : []);
const text = (value: unknown): string | undefined => (typeof value === 'string' ? value : typeof value === 'number' ? String(value) : undefined);
const record = <T extends object>(value: T | undefined): Partial<T> => (typeof value === 'object' && value !== null ? value : {});

/** Meta's codes are small integers; anything else (a fraction, out of the column's range) reads as 0, unknown. */
function errorCode(value: unknown): number {
  const code = Number(value);
  return Number.isInteger(code) && Math.abs(code) <= 2_147_483_647 ? code : 0;
}

/** Upstream ids are short (a wamid is about 60 characters); a longer one is not a message of ours. */
const MAX_UPSTREAM_ID = 512;

function toStatusUpdate(raw: RawStatus): StatusUpdate | null {
  const s = storable(raw);
  const id = text(s.id);
  const status = text(s.status);
  if (!id || id.length > MAX_UPSTREAM_ID || !status || !DELIVERY_STATUSES.has(status)) return null; // e.g. `played` (voice) is not tracked
  const error = record(list(s.errors)[0]);
  return {
    upstreamMessageId: id,
    status: status as DeliveryStatus,
    timestamp: toDate(text(s.timestamp)),
    callbackData: text(s.biz_opaque_callback_data) ?? null,
    error: status === 'failed' ? { code: errorCode(error.code), title: text(error.title) ?? text(error.message) ?? 'Unknown failure' } : null,
    pricing: pricingOf(s.pricing),
  };
}

/** A status's `pricing` (reference §7), when it names a category; fields of another type read as absent. */
function pricingOf(raw: RawStatus['pricing']): Pricing | null {
  const p = record(raw);
  const category = text(p.category);
  if (!category || category.length > 64) return null;
  const short = (value: unknown) => { const t = text(value); return t && t.length <= 64 ? t : null; };
  return { category, type: short(p.type), billable: typeof p.billable === 'boolean' ? p.billable : null, pricing_model: short(p.pricing_model) };
}

function parseFlowResponse(json: string | undefined): { flowToken: string | null; response: Record<string, unknown> } {
  let parsed: unknown = {};
  try { parsed = JSON.parse(json ?? '{}'); } catch { parsed = { raw: json ?? null }; }
  // The submitted fields become event data: what the database cannot hold is cleaned, an absurd nesting kept as text.
  parsed = nestsDeeperThan(parsed) ? { raw: json ?? null } : storable(parsed);
  const fields = (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) ? parsed : { value: parsed }) as Record<string, unknown>;
  const { flow_token: token, ...response } = fields;
  return { flowToken: typeof token === 'string' ? token : null, response };
}

/**
 * The message's sender as the upstream names them. `from` (phone) may be absent for users with a
 * username; `from_user_id` (or the matching `contacts[].user_id`) then names them.
 */
function toInbound(raw: RawInbound, contacts: Partial<RawContact>[]): InboundMessage | null {
  const m = storable(raw);
  const id = text(m.id);
  if (!id || id.length > MAX_UPSTREAM_ID) return null;
  const type = text(m.type) ?? 'unknown';
  const interactive = record(m.interactive);
  const nfm = type === 'interactive' && interactive.type === 'nfm_reply' ? record(interactive.nfm_reply) : undefined;
  const body = text(record(m.text).body) ?? text(record(m.button).text) ?? text(record(interactive.button_reply).title) ?? text(record(interactive.list_reply).title)
    ?? text(nfm?.body) ?? text(record(m.image).caption) ?? text(record(m.video).caption) ?? text(record(m.document).caption) ?? null;
  const from = text(m.from);
  const contact = contacts.find((c) => from !== undefined && text(c.wa_id) === from.replace(/^\+/, '')) ?? (contacts.length === 1 ? contacts[0] : undefined);
  const userId = text(m.from_user_id) ?? text(contact?.user_id);
  return {
    upstreamMessageId: id,
    from: from ? (from.startsWith('+') ? from : `+${from}`) : null,
    fromUserId: userId && userId.length <= MAX_UPSTREAM_ID ? userId : null,
    type,
    text: body,
    timestamp: toDate(text(m.timestamp)),
    flow: nfm ? parseFlowResponse(text(nfm.response_json)) : null,
    raw: m,
  };
}

/**
 * Processes one verified callback POST. Statuses and inbound messages are grouped per tenant
 * (routed by metadata.phone_number_id to the tenant with that active account) and applied in one
 * transaction per tenant, set-based; processing is idempotent because the upstream retries and
 * duplicates. Template status changes are routed by the WABA id (entry.id).
 */
export class CallbacksService {
  /** Called with a tenant's statuses before they are applied, in the same transaction; returns those still to apply. */
  private settleHooks: ((tx: Tx, tenantId: string, updates: StatusUpdate[]) => Promise<StatusUpdate[]>)[] = [];
  /** Called with every status a message moved to, inside the same transaction (campaign hook). */
  private statusHooks: ((tx: Tx, tenantId: string, applied: AppliedStatus[]) => Promise<void>)[] = [];

  /**
   * phone_number_id -> tenant, kept for a moment: a busy number sends a callback batch every few
   * milliseconds. Staleness is harmless here (a disconnected account's last statuses still land
   * on its own messages), and the phone-number id is unique among active accounts.
   */
  private routes = new Map<string, { tenantId: string | undefined; until: number }>();

  constructor(private db: Db, private templateSync: TemplateStatusSync, private logger?: Logger, private routeCacheMs = 2000,
    private rateCards = new RateCards(db)) {}

  private async tenantFor(phoneNumberId: string): Promise<{ tenantId: string | undefined; fresh: boolean }> {
    const now = Date.now();
    const cached = this.routes.get(phoneNumberId);
    if (cached && cached.until > now) return { tenantId: cached.tenantId, fresh: false };
    const tenantId = await findTenantByPhoneNumberId(this.db, phoneNumberId);
    if (this.routes.size > 10_000) this.routes.clear();
    this.routes.set(phoneNumberId, { tenantId, until: now + this.routeCacheMs });
    return { tenantId, fresh: true };
  }

  onStatusesReceived(hook: (tx: Tx, tenantId: string, updates: StatusUpdate[]) => Promise<StatusUpdate[]>): void {
    this.settleHooks.push(hook);
  }

  onStatusesApplied(hook: (tx: Tx, tenantId: string, applied: AppliedStatus[]) => Promise<void>): void {
    this.statusHooks.push(hook);
  }

  async process(envelope: Envelope): Promise<{ statuses: number; inbound: number; templates: number; ignored: number }> {
    const byPhoneNumber = new Map<string, TenantBatch>();
    let templates = 0;
    let ignored = 0;
    for (const entry of list(envelope.entry).map(record)) {
      for (const change of list(entry.changes).map(record)) {
        const value = change.value;
        if (typeof value !== 'object' || value === null) continue;
        if (change.field === 'message_template_status_update') {
          const wabaId = text(entry.id);
          const update = storable(value);
          if (wabaId) {
            templates += await this.templateSync.applyCallback(wabaId, {
              event: text(update.event) ?? '', message_template_id: text(update.message_template_id), message_template_name: text(update.message_template_name),
              message_template_language: text(update.message_template_language), reason: text(update.reason) ?? null,
            });
          }
          continue;
        }
        if (change.field !== 'messages') { ignored++; continue; }
        const phoneNumberId = text(record(value.metadata).phone_number_id);
        if (!phoneNumberId) { ignored++; continue; }
        const batch = byPhoneNumber.get(phoneNumberId) ?? { statuses: [], inbound: [] };
        for (const s of list(value.statuses).map(record)) {
          const update = toStatusUpdate(s);
          if (update) batch.statuses.push(update);
        }
        const contacts = list(value.contacts).map((c) => storable(record(c)));
        for (const m of list(value.messages).map(record)) {
          const inbound = toInbound(m, contacts);
          if (inbound) batch.inbound.push(inbound);
        }
        byPhoneNumber.set(phoneNumberId, batch);
      }
    }

    let statuses = 0;
    let inbound = 0;
    for (const [phoneNumberId, batch] of byPhoneNumber) {
      const { tenantId, fresh } = await this.tenantFor(phoneNumberId);
      if (!tenantId) {
        // Logged once per route-cache period per id, so a misrouted busy number cannot flood the log.
        if (fresh) this.logger?.warn({ phone_number_id: phoneNumberId, statuses: batch.statuses.length, messages: batch.inbound.length }, 'upstream callback for an unknown phone number id; acknowledged, not processed');
        ignored += batch.statuses.length + batch.inbound.length;
        continue;
      }
      // Read before the transaction: the embedded database has one connection, which it holds.
      const card = batch.statuses.some((u) => u.pricing) ? await this.rateCards.current() : undefined;
      await this.db.transaction().execute(async (tx) => {
        if (batch.statuses.length > 0) {
          let updates = batch.statuses;
          for (const settle of this.settleHooks) updates = await settle(tx, tenantId, updates);
          const { applied, unknown } = await applyMessageStatuses(tx, tenantId, updates, card);
          if (unknown.length > 0) this.logger?.info({ tenant_id: tenantId, count: unknown.length }, 'status callbacks for messages this service did not send; ignored');
          for (const hook of this.statusHooks) await hook(tx, tenantId, applied);
          statuses += applied.length;
        }
        if (batch.inbound.length > 0) inbound += await this.recordInbound(tx, tenantId, batch.inbound);
      });
    }
    return { statuses, inbound, templates, ignored };
  }

  /**
   * Inserts inbound messages once (unique upstream id) and emits events only for the new ones. A
   * sender is matched to a contact by phone; a sender known only by user id, by the phone an
   * earlier message of that user id came with.
   */
  private async recordInbound(tx: Tx, tenantId: string, messages: InboundMessage[]): Promise<number> {
    const userIds = [...new Set(messages.flatMap((m) => (!m.from && m.fromUserId ? [m.fromUserId] : [])))];
    const known = userIds.length === 0 ? [] : await tx.selectFrom('inbound_messages').select(['from_user_id', 'from_phone'])
      .distinctOn('from_user_id').where('tenant_id', '=', tenantId).where('from_user_id', 'in', userIds).where('from_phone', 'is not', null)
      .orderBy('from_user_id').orderBy('received_at', 'desc').execute();
    const phoneOfUser = new Map(known.map((k) => [k.from_user_id!, k.from_phone!]));
    for (const m of messages) if (m.from && m.fromUserId) phoneOfUser.set(m.fromUserId, m.from); // the same batch counts too
    const phoneOf = (m: InboundMessage) => m.from ?? (m.fromUserId ? phoneOfUser.get(m.fromUserId) ?? null : null);
    const phones = [...new Set(messages.flatMap((m) => { const phone = phoneOf(m); return phone ? [phone] : []; }))];
    const contacts = phones.length === 0 ? [] : await tx.selectFrom('contacts').select(['id', 'phone'])
      .where('tenant_id', '=', tenantId).where('phone', 'in', phones).where('deleted_at', 'is', null).execute();
    const contactByPhone = new Map(contacts.map((c) => [c.phone, c.id]));
    const contactOf = (m: InboundMessage) => { const phone = phoneOf(m); return phone ? contactByPhone.get(phone) ?? null : null; };
    const unique = [...new Map(messages.map((m) => [m.upstreamMessageId, m])).values()];
    const inserted = await tx.insertInto('inbound_messages')
      .values(unique.map((m) => ({
        id: randomUUID(), tenant_id: tenantId, upstream_message_id: m.upstreamMessageId, from_phone: m.from, from_user_id: m.fromUserId,
        contact_id: contactOf(m), type: m.type, text: m.text, payload: JSON.stringify(m.raw), received_at: m.timestamp,
      })))
      .onConflict((oc) => oc.columns(['tenant_id', 'upstream_message_id']).doNothing())
      .returning('upstream_message_id').execute();
    const fresh = new Set(inserted.map((r) => r.upstream_message_id));
    const events: NewEvent[] = [];
    for (const m of unique) {
      if (!fresh.has(m.upstreamMessageId)) continue;
      const contactId = contactOf(m);
      events.push({ type: 'message.received', data: {
        message_id: m.upstreamMessageId, from: m.from, from_user_id: m.fromUserId, contact_id: contactId, type: m.type, text: m.text, timestamp: m.timestamp.toISOString(),
      } });
      if (m.flow) {
        events.push({ type: 'flow.submission_received', data: {
          message_id: m.upstreamMessageId, from: m.from, from_user_id: m.fromUserId, contact_id: contactId, flow_token: m.flow.flowToken, response: m.flow.response,
        } });
      }
      if (contactId) await addCommunication(tx, tenantId, { contactId, direction: 'inbound', messageId: m.upstreamMessageId, summary: m.text ? m.text.slice(0, 500) : `[${m.type}]`, fromUserId: m.fromUserId });
    }
    await recordEvents(tx, tenantId, events);
    return fresh.size;
  }
}
