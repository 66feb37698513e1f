import { randomUUID } from 'node:crypto';
import type { Tx } from '../db/database.ts';

export const EVENT_TYPES = [
  'contact.created', 'contact.updated', 'contact.deleted', 'contact.note_added', 'contact.communication_added',
  'followup.created', 'followup.updated', 'followup.deleted',
  'message.sent', 'message.delivered', 'message.read', 'message.failed', 'message.received',
  'campaign.created', 'campaign.updated', 'campaign.scheduled', 'campaign.started', 'campaign.paused',
  'campaign.resumed', 'campaign.stopped', 'campaign.completed', 'campaign.failed',
  'flow.submission_received',
  'webhook.test',
] as const;

export type EventType = (typeof EVENT_TYPES)[number];

export interface NewEvent {
  type: EventType;
  data: unknown;
}

/**
 * Records events inside the caller's transaction, so they commit (or roll back) with the change
 * that caused them. Set-based: one statement however many events.
 */
export async function recordEvents(tx: Tx, tenantId: string, events: NewEvent[]): Promise<void> {
  if (events.length === 0) return;
  await tx.insertInto('events')
    .values(events.map((e) => ({ id: randomUUID(), tenant_id: tenantId, type: e.type, data: JSON.stringify(e.data) })))
    .execute();
}
