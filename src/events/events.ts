import { randomUUID } from 'node:crypto';
import { sql, type RawBuilder } from 'kysely';
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

const KNOWN_TYPES: ReadonlySet<string> = new Set(EVENT_TYPES);
export const isEventType = (value: string): value is EventType => KNOWN_TYPES.has(value);

export interface NewEvent {
  type: EventType;
  data: unknown;
}

/**
 * The webhook envelope, serialised once. Built as text (not through jsonb, which reorders keys) so
 * the bytes stored in every delivery row are exactly what receivers get on every attempt and replay.
 * eventCtes builds the same bytes in SQL; test/events.record.test.ts holds the two together.
 */
export function envelopeJson(id: string, type: string, createdAt: string, dataJson: string): string {
  return `{"id":${JSON.stringify(id)},"type":${JSON.stringify(type)},"created_at":${JSON.stringify(createdAt)},"data":${dataJson}}`;
}

/**
 * Records events inside the caller's transaction, so they commit (or roll back) with the change
 * that caused them, and fans them out to the tenant's webhook endpoints in the same transaction
 * (transactional outbox). One statement however many events (eventCtes).
 */
export async function recordEvents(tx: Tx, tenantId: string, events: NewEvent[]): Promise<void> {
  if (events.length === 0) return;
  await sql`WITH ${eventCtes(tenantId, events)} SELECT 1`.execute(tx);
}

/**
 * The CTEs (named ev_*) that record `events`, for a statement that makes the change causing them:
 * they insert the `events` rows, store the envelope of each event that has a subscriber and create
 * a delivery row per (event, active subscribed endpoint). The data travel as one JSON array whose
 * elements `json_array_elements` gives back verbatim, so the envelope is built around the exact
 * bytes of JSON.stringify (as envelopeJson builds it) and nothing is escaped element by element;
 * the parameters are arrays, so a batch is never limited by the 65,535-parameter cap.
 */
export function eventCtes(tenantId: string, events: NewEvent[]): RawBuilder<unknown> {
  const createdAt = new Date().toISOString();
  const ids = events.map(() => randomUUID());
  const types = events.map((e) => e.type);
  const data = `[${events.map((e) => JSON.stringify(e.data ?? null)).join(',')}]`;
  // Inactive (auto-disabled or paused) and deleted endpoints get nothing. The join is driven by
  // the tenant's few active endpoints (partial index webhook_endpoints_fanout). The envelope is
  // stored once per event that has a subscriber, and its deliveries point at it.
  return sql`
    ev AS MATERIALIZED (
      SELECT x.id, x.type, d.data
      FROM unnest(${ids}::uuid[], ${types}::text[]) WITH ORDINALITY AS x(id, type, n)
      JOIN json_array_elements(${data}::json) WITH ORDINALITY AS d(data, n) ON d.n = x.n),
    ev_rows AS (
      INSERT INTO events (id, tenant_id, type, data, created_at)
      SELECT ev.id, ${tenantId}::uuid, ev.type, ev.data::jsonb, ${createdAt}::timestamptz FROM ev),
    ev_fan AS MATERIALIZED (
      SELECT ev.id AS event_id, ev.type, ev.data, w.id AS endpoint_id, w.url
      FROM ev JOIN webhook_endpoints w
        ON w.tenant_id = ${tenantId}::uuid AND w.is_active AND w.deleted_at IS NULL AND ev.type = ANY (w.events)),
    ev_payloads AS (
      INSERT INTO webhook_payloads (event_id, tenant_id, payload)
      SELECT DISTINCT ON (event_id) event_id, ${tenantId}::uuid,
        convert_to('{"id":"' || event_id || '","type":' || to_json(type)::text || ',"created_at":"' || ${createdAt}::text || '","data":' || data::text || '}', 'UTF8')
      FROM ev_fan),
    ev_deliveries AS (
      INSERT INTO webhook_deliveries (id, tenant_id, endpoint_id, event_id, event_type, request_url, status, attempt_number, next_attempt_at)
      SELECT gen_random_uuid(), ${tenantId}::uuid, f.endpoint_id, f.event_id, f.type, f.url, 'pending', 0, now()
      FROM ev_fan f)`;
}
