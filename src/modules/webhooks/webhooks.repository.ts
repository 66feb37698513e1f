import { randomUUID } from 'node:crypto';
import { sql, type Selectable } from 'kysely';
import type { Queryable, Tx } from '../../db/database.ts';
import type { WebhookDeliveriesTable, WebhookEndpointsTable } from '../../db/schema.ts';
import { isUuid } from '../contacts/contacts.repository.ts';
import type { DeliveryStatus } from './webhooks.schemas.ts';
import type { LoggedOutcome } from './webhooks.sender.ts';
import { pageWithTotal } from '../../db/page.ts';

export type EndpointRow = Selectable<WebhookEndpointsTable>;
export type DeliveryRow = Selectable<WebhookDeliveriesTable>;

export interface EndpointValues {
  url: string;
  events: string[];
  description: string | null;
  is_active: boolean;
  signing_secret_enc: string;
}

export interface TestAttemptRecord extends LoggedOutcome {
  id: string;
  endpointId: string;
  eventId: string;
  url: string;
  /** The envelope bytes that were sent (stored once, under the test's own event id). */
  payload: Buffer;
}

export const webhooksRepository = {
  async insertEndpoint(db: Queryable, tenantId: string, values: EndpointValues): Promise<EndpointRow> {
    return db.insertInto('webhook_endpoints').values({ id: randomUUID(), tenant_id: tenantId, ...values })
      .returningAll().executeTakeFirstOrThrow();
  },

  async findEndpoint(db: Queryable, tenantId: string, id: string): Promise<EndpointRow | undefined> {
    if (!isUuid(id)) return undefined;
    return db.selectFrom('webhook_endpoints').selectAll()
      .where('tenant_id', '=', tenantId).where('id', '=', id).where('deleted_at', 'is', null)
      .executeTakeFirst();
  },

  async listEndpoints(db: Queryable, tenantId: string): Promise<EndpointRow[]> {
    return db.selectFrom('webhook_endpoints').selectAll()
      .where('tenant_id', '=', tenantId).where('deleted_at', 'is', null)
      .orderBy('created_at', 'desc').orderBy('id', 'desc')
      .execute();
  },

  async updateEndpoint(db: Queryable, tenantId: string, id: string, changes: Partial<EndpointValues> & { consecutive_failures?: number }): Promise<EndpointRow | undefined> {
    if (!isUuid(id)) return undefined;
    return db.updateTable('webhook_endpoints').set({ ...changes, updated_at: new Date() })
      .where('tenant_id', '=', tenantId).where('id', '=', id).where('deleted_at', 'is', null)
      .returningAll().executeTakeFirst();
  },

  /**
   * Soft delete; its open deliveries are closed as failed so nothing more is sent to it. Locks in
   * the deliverer's order (webhook_record_attempts: the batch's deliveries by ctid, then
   * their endpoints): the endpoint's queued deliveries first, in ctid order, then the endpoint.
   * Endpoint first, a delete and a deliverer recording this endpoint's attempts deadlocked (a 500).
   */
  async softDeleteEndpoint(tx: Tx, tenantId: string, id: string): Promise<boolean> {
    if (!isUuid(id)) return false;
    await sql`
      SELECT id FROM webhook_deliveries WHERE tenant_id = ${tenantId} AND endpoint_id = ${id} AND status IN ('pending', 'retrying')
      ORDER BY ctid FOR UPDATE`.execute(tx);
    const row = await tx.updateTable('webhook_endpoints').set({ deleted_at: new Date(), updated_at: new Date(), is_active: false })
      .where('tenant_id', '=', tenantId).where('id', '=', id).where('deleted_at', 'is', null)
      .returning('id').executeTakeFirst();
    if (!row) return false;
    await tx.updateTable('webhook_deliveries')
      .set({ status: 'failed', error_class: 'endpoint_deleted', error_message: 'Endpoint deleted before the delivery completed', next_attempt_at: null, completed_at: new Date() })
      .where('tenant_id', '=', tenantId).where('endpoint_id', '=', id).where('status', 'in', ['pending', 'retrying'])
      .execute();
    return true;
  },

  async listDeliveries(db: Queryable, tenantId: string, filter: { endpointId?: string; status?: DeliveryStatus }, limit: number, offset: number) {
    let query = db.selectFrom('webhook_deliveries').where('tenant_id', '=', tenantId);
    if (filter.endpointId) query = query.where('endpoint_id', '=', filter.endpointId);
    if (filter.status) query = query.where('status', '=', filter.status);
    return pageWithTotal(query, (q) => q.selectAll()
      .select(sql<string | null>`convert_from((SELECT p.payload FROM webhook_payloads p WHERE p.event_id = webhook_deliveries.event_id AND p.tenant_id = webhook_deliveries.tenant_id), 'UTF8')`.as('request_body'))
      .orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).offset(offset));
  },

  async findDelivery(db: Queryable, tenantId: string, id: string): Promise<DeliveryRow | undefined> {
    if (!isUuid(id)) return undefined;
    return db.selectFrom('webhook_deliveries').selectAll()
      .where('tenant_id', '=', tenantId).where('id', '=', id)
      .executeTakeFirst();
  },

  /** A new pending row for the original event (so the same stored bytes); the original is untouched. */
  async insertReplay(db: Queryable, tenantId: string, original: DeliveryRow, url: string): Promise<string> {
    const id = randomUUID();
    await db.insertInto('webhook_deliveries').values({
      id, tenant_id: tenantId, endpoint_id: original.endpoint_id, event_id: original.event_id, event_type: original.event_type,
      request_url: url, status: 'pending', attempt_number: 0, next_attempt_at: new Date(), replay_of: original.id,
    }).execute();
    return id;
  },

  /**
   * One INSERT ... SELECT: a new pending row per failed or abandoned delivery of the endpoint created
   * within [since, until] that has no replay yet. Recoveries of one endpoint are serialised by a
   * transaction-level advisory lock (not the endpoint row's lock, which the deliverer takes to record
   * attempts), so two concurrent calls cannot both replay a delivery. Returns how many were queued.
   */
  async insertRecoveries(tx: Tx, tenantId: string, endpointId: string, since: string, until: string | null): Promise<number> {
    await sql`SELECT pg_advisory_xact_lock(hashtextextended(${`webhook-recover:${endpointId}`}, 0))`.execute(tx);
    const result = await sql`
      INSERT INTO webhook_deliveries (id, tenant_id, endpoint_id, event_id, event_type, request_url, status, attempt_number, next_attempt_at, replay_of)
      SELECT gen_random_uuid(), d.tenant_id, d.endpoint_id, d.event_id, d.event_type, e.url, 'pending', 0, now(), d.id
      FROM webhook_deliveries d
      JOIN webhook_endpoints e ON e.id = d.endpoint_id AND e.tenant_id = d.tenant_id AND e.deleted_at IS NULL
      WHERE d.tenant_id = ${tenantId} AND d.endpoint_id = ${endpointId}
        AND d.created_at >= ${since}::timestamptz AND d.created_at <= coalesce(${until}::timestamptz, 'infinity')
        AND d.status IN ('failed', 'abandoned') AND NOT d.is_test
        AND NOT EXISTS (SELECT 1 FROM webhook_deliveries r WHERE r.replay_of = d.id)
    `.execute(tx);
    return Number(result.numAffectedRows ?? 0);
  },

  /** One index-only aggregate over (tenant_id, status). */
  async deliveryCounts(db: Queryable, tenantId: string) {
    return db.selectFrom('webhook_deliveries').where('tenant_id', '=', tenantId)
      .select((eb) => [
        eb.fn.countAll<number>().as('total'),
        sql<number>`count(*) FILTER (WHERE status = 'success')`.as('success'),
        sql<number>`count(*) FILTER (WHERE status = 'retrying')`.as('retrying'),
        sql<number>`count(*) FILTER (WHERE status = 'abandoned')`.as('abandoned'),
        sql<number>`count(*) FILTER (WHERE status = 'pending')`.as('pending'),
        sql<number>`count(*) FILTER (WHERE status = 'failed')`.as('failed'),
      ])
      .executeTakeFirstOrThrow();
  },

  /**
   * Records a test attempt in the log. A success clears the failure count (and stamps
   * last_success_at); a failure leaves the endpoint untouched: it never counts toward the threshold.
   */
  async recordTestAttempt(tx: Tx, tenantId: string, r: TestAttemptRecord): Promise<EndpointRow | undefined> {
    await tx.insertInto('webhook_payloads').values({ event_id: r.eventId, tenant_id: tenantId, payload: r.payload }).execute();
    await tx.insertInto('webhook_deliveries').values({
      id: r.id, tenant_id: tenantId, endpoint_id: r.endpointId, event_id: r.eventId, event_type: 'webhook.test', request_url: r.url,
      status: r.ok ? 'success' : 'failed', attempt_number: 1, response_status_code: r.statusCode,
      response_time_ms: r.responseTimeMs, response_body: r.responseBody, error_class: r.errorClass, error_message: r.errorMessage,
      is_test: true, completed_at: new Date(),
    }).execute();
    if (!r.ok) return undefined;
    return tx.updateTable('webhook_endpoints').set({ consecutive_failures: 0, last_success_at: new Date() })
      .where('tenant_id', '=', tenantId).where('id', '=', r.endpointId)
      .returningAll().executeTakeFirst();
  },
};
