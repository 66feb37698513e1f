import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Logger } from 'pino';
import type { Db, Tx } from '../../db/database.ts';
import { recordEvents, type NewEvent } from '../../events/events.ts';
import { storable } from '../../http/storable-text.ts';
import { ACCOUNT_FIELDS, applyAccountChange } from '../business-accounts/account-callbacks.ts';
import { findTenantByPhoneNumberId } from '../business-accounts/business-accounts.repository.ts';
import { addCommunication } from '../contacts/communications.repository.ts';
import { applyConsentKeywords, applyUserPreferences } from '../contacts/marketing-consent.ts';
import { recordCampaignReplies } from '../campaigns/campaigns.engagement.ts';
import { applyMessageStatuses, type AppliedStatus, type DeliveryStatus, type StatusUpdate } from '../messages/messages.statuses.ts';
import { RateCards, type Pricing } from '../pricing/rate-card.ts';
import type { TemplateStatusSync, TemplateStatusUpdate } from '../templates/templates.status-sync.ts';
import { applyAnnotation, ourMessageIds } from './inbound.annotations.ts';
import { list, MAX_UPSTREAM_ID, record, text, toDate, toInbound, type InboundMessage, type RawContact, type RawInbound } from './inbound.parse.ts';

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
  user_preferences?: RawPreference[];
}
/** A `user_preferences` item (Meta's webhook reference): a user stopped or resumed marketing messages. */
interface RawPreference { wa_id?: string; user_id?: string; category?: string; value?: string; timestamp?: string | number }
interface RawStatus {
  id?: string; status?: string; timestamp?: string; recipient_id?: string; biz_opaque_callback_data?: string;
  errors?: { code?: number; title?: string; message?: string }[];
  pricing?: { category?: string; type?: string; billable?: boolean; pricing_model?: string };
}

/** Work for one tenant out of one callback POST. */
interface TenantBatch {
  statuses: StatusUpdate[];
  inbound: InboundMessage[];
  preferences: PreferenceChange[];
}

interface PreferenceChange { phone: string | null; userId: string | null; optOut: boolean; at: Date }

const DELIVERY_STATUSES = new Set(['sent', 'delivered', 'read', 'failed']);

/** Meta's codes are small integers; anything else (a fraction, out of the column's range) reads as 0, unknown. */
function errorCode(value: unknown): number {
  const code = Number(value);
  return Number.isInteger(code) && Math.abs(code) <= 2_147_483_647 ? code : 0;
}

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

/** Which message of ours (or null) an upstream id names, as message.received shows it. */
const reference = (ours: Map<string, string>, upstreamId: string) => ({ message_id: ours.get(upstreamId) ?? null, upstream_message_id: upstreamId });

/** Marketing stop/resume items; other categories and values are not ours to act on. */
function toPreferences(items: unknown, contacts: Partial<RawContact>[]): PreferenceChange[] {
  return list(items as RawPreference[]).map((i) => storable(record(i))).flatMap((p) => {
    const value = text(p.value);
    if (text(p.category) !== 'marketing_messages' || (value !== 'stop' && value !== 'resume')) return [];
    const waId = text(p.wa_id);
    const userId = text(p.user_id) ?? text(contacts.find((c) => waId !== undefined && text(c.wa_id) === waId)?.user_id ?? (contacts.length === 1 ? contacts[0].user_id : undefined));
    if (!waId && !userId) return [];
    return [{ phone: waId ? (waId.startsWith('+') ? waId : `+${waId}`) : null, userId: userId && userId.length <= MAX_UPSTREAM_ID ? userId : null, optOut: value === 'stop', at: toDate(text(p.timestamp)) }];
  });
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
  /** Per tenant, the statuses_through this process last wrote: a busy number writes it once a second at most. */
  private statusesThrough = new Map<string, number>();

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

  async process(envelope: Envelope): Promise<{ statuses: number; inbound: number; templates: number; accounts: number; preferences: number; ignored: number }> {
    const byPhoneNumber = new Map<string, TenantBatch>();
    let templates = 0;
    let accounts = 0;
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
        if (ACCOUNT_FIELDS.has(change.field ?? '')) {
          // Capacity and template standing (src/modules/business-accounts/account-callbacks.ts), by the WABA id.
          const wabaId = text(entry.id);
          if (wabaId) accounts += await applyAccountChange(this.db, change.field!, wabaId, storable(value as unknown as Record<string, unknown>), this.logger);
          continue;
        }
        if (change.field !== 'messages' && change.field !== 'user_preferences') { ignored++; continue; }
        const phoneNumberId = text(record(value.metadata).phone_number_id);
        if (!phoneNumberId) { ignored++; continue; }
        const batch = byPhoneNumber.get(phoneNumberId) ?? { statuses: [], inbound: [], preferences: [] };
        byPhoneNumber.set(phoneNumberId, batch);
        if (change.field === 'user_preferences') {
          batch.preferences.push(...toPreferences(value.user_preferences, list(value.contacts).map((c) => storable(record(c)))));
          continue;
        }
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
    let preferences = 0;
    for (const [phoneNumberId, batch] of byPhoneNumber) {
      const { tenantId, fresh } = await this.tenantFor(phoneNumberId);
      if (!tenantId) {
        // Logged once per route-cache period per id, so a misrouted busy number cannot flood the log.
        if (fresh) this.logger?.warn({ phone_number_id: phoneNumberId, statuses: batch.statuses.length, messages: batch.inbound.length }, 'upstream callback for an unknown phone number id; acknowledged, not processed');
        ignored += batch.statuses.length + batch.inbound.length + batch.preferences.length;
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
        if (batch.preferences.length > 0) preferences += await applyUserPreferences(tx, tenantId, batch.preferences);
      });
      if (batch.statuses.length > 0) await this.advanceStatusesThrough(tenantId, batch.statuses);
    }
    return { statuses, inbound, templates, accounts, preferences, ignored };
  }

  /**
   * After the statuses are committed (never before: reconciliation reads it as "whatever the
   * upstream said until then is recorded"), the account's statuses_through moves up to the latest
   * status timestamp of the batch. Timestamps are whole seconds, so one write a second at most.
   */
  private async advanceStatusesThrough(tenantId: string, statuses: StatusUpdate[]): Promise<void> {
    const latest = Math.max(...statuses.map((u) => u.timestamp.getTime()));
    if (!Number.isFinite(latest) || latest <= (this.statusesThrough.get(tenantId) ?? -Infinity)) return;
    try {
      await sql`UPDATE business_accounts SET statuses_through = ${new Date(latest)}
        WHERE tenant_id = ${tenantId}::uuid AND (statuses_through IS NULL OR statuses_through < ${new Date(latest)})`.execute(this.db);
    } catch (err) {
      // Behind is the safe side: unknown outcomes wait longer. The next batch moves it on.
      this.logger?.warn({ err, tenant_id: tenantId }, 'statuses_through not advanced');
      return;
    }
    if (this.statusesThrough.size > 10_000) this.statusesThrough.clear();
    this.statusesThrough.set(tenantId, latest);
  }

  /**
   * Inserts inbound messages once (unique upstream id) and emits events only for the new ones. A
   * sender is matched to a contact by phone; a sender known only by user id, by the phone an
   * earlier message of that user id came with. Reactions, edits and revokes are recorded the same
   * way (so a redelivery is caught) but change the message they name instead of being new messages.
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
    const unique = [...new Map(messages.map((m) => [m.upstreamMessageId, m])).values()].map((m) => ({ ...m, id: randomUUID() }));

    // Replies and annotations name messages by upstream id; ours are shown by our id (one of this batch counts too).
    const named = unique.flatMap((m) => [m.contextUpstreamId, m.annotation?.targetUpstreamId].filter((id): id is string => !!id));
    const ours = await ourMessageIds(tx, tenantId, named);
    for (const m of unique) if (!m.annotation && !ours.has(m.upstreamMessageId)) ours.set(m.upstreamMessageId, m.id);
    const detailsOf = (m: InboundMessage) => (m.contextUpstreamId ? { context: reference(ours, m.contextUpstreamId), ...m.details } : m.details);

    const inserted = await tx.insertInto('inbound_messages')
      .values(unique.map((m) => ({
        id: m.id, tenant_id: tenantId, upstream_message_id: m.upstreamMessageId, from_phone: m.from, from_user_id: m.fromUserId,
        contact_id: contactOf(m), type: m.type, text: m.text, payload: JSON.stringify(m.raw), received_at: m.timestamp,
        details: JSON.stringify(detailsOf(m)), annotates_upstream_id: m.annotation?.targetUpstreamId ?? null,
      })))
      .onConflict((oc) => oc.columns(['tenant_id', 'upstream_message_id']).doNothing())
      .returning('upstream_message_id').execute();
    const fresh = new Set(inserted.map((r) => r.upstream_message_id));
    const events: NewEvent[] = [];
    for (const m of unique) {
      if (!fresh.has(m.upstreamMessageId)) continue;
      const contactId = contactOf(m);
      const received = { message_id: m.upstreamMessageId, from: m.from, from_user_id: m.fromUserId, contact_id: contactId, type: m.type, text: m.text, timestamp: m.timestamp.toISOString() };
      const { annotation } = m;
      if (annotation) {
        await applyAnnotation(tx, tenantId, annotation, phoneOf(m) ?? m.fromUserId, m.timestamp);
        const target = reference(ours, annotation.targetUpstreamId);
        events.push({ type: 'message.received', data: annotation.kind === 'reaction'
          ? { ...received, reaction: { ...target, emoji: annotation.emoji } }
          : annotation.kind === 'edit' ? { ...received, text: annotation.text, ...annotation.details, edit: target } : { ...received, revoke: target } });
        continue;
      }
      events.push({ type: 'message.received', data: { ...received, ...detailsOf(m) } });
      if (m.flow) {
        events.push({ type: 'flow.submission_received', data: {
          message_id: m.upstreamMessageId, from: m.from, from_user_id: m.fromUserId, contact_id: contactId, flow_token: m.flow.flowToken, response: m.flow.response,
        } });
      }
      if (contactId) await addCommunication(tx, tenantId, { contactId, direction: 'inbound', messageId: m.upstreamMessageId, summary: m.text ? m.text.slice(0, 500) : `[${m.type}]`, fromUserId: m.fromUserId });
    }
    await recordEvents(tx, tenantId, events);
    // Marketing opt-out and opt-in keywords (STOP, START...) of the new messages.
    await applyConsentKeywords(tx, tenantId, unique.filter((m) => fresh.has(m.upstreamMessageId)).map((m) => ({ phone: phoneOf(m), type: m.type, text: m.text, at: m.timestamp })));
    // Replies and quick-reply taps to campaign messages (reactions, edits and revokes are not replies).
    await recordCampaignReplies(tx, tenantId, unique.filter((m) => fresh.has(m.upstreamMessageId) && !m.annotation && m.type !== 'system').map((m) => ({
      upstreamMessageId: m.upstreamMessageId, phone: phoneOf(m), at: m.timestamp, contextUpstreamId: m.contextUpstreamId, buttonPayload: m.details.button?.payload ?? null,
    })));
    return fresh.size;
  }
}
