import { randomUUID } from 'node:crypto';
import { decryptSecret, encryptSecret } from '../../crypto/secrets.ts';
import type { Db } from '../../db/database.ts';
import { envelopeJson, isEventType } from '../../events/events.ts';
import { AppError, notFound, validationError } from '../../http/errors.ts';
import { isoOrNull } from '../../http/nullable.ts';
import { offsetOf, paginationFor } from '../../http/pagination.ts';
import { webhooksRepository as repo, type DeliveryRow, type EndpointRow, type EndpointValues } from './webhooks.repository.ts';
import type { Delivery, DeliveryMetrics, DeliveryQuery, Endpoint, EndpointCreate, EndpointUpdate, RecoverBody, TestResult } from './webhooks.schemas.ts';
import { toLoggedOutcome, type WebhookSender } from './webhooks.sender.ts';
import { newSigningSecret } from './webhooks.signer.ts';
import { validateEndpointUrl } from './webhooks.url.ts';


export function toEndpoint(row: EndpointRow): Endpoint {
  return {
    id: row.id,
    url: row.url,
    events: row.events,
    description: row.description,
    is_active: row.is_active,
    last_success_at: isoOrNull(row.last_success_at),
    last_failure_at: isoOrNull(row.last_failure_at),
    consecutive_failures: row.consecutive_failures,
    created_at: row.created_at.toISOString(),
    updated_at: isoOrNull(row.updated_at),
  };
}

export function toDelivery(row: DeliveryRow & { request_body: string | null }): Delivery {
  return {
    id: row.id,
    webhook_endpoint_id: row.endpoint_id,
    event_id: row.event_id,
    event_type: row.event_type,
    request_url: row.request_url,
    status: row.status,
    attempt_number: row.attempt_number,
    response_status_code: row.response_status_code,
    response_time_ms: row.response_time_ms,
    error_message: row.error_message,
    // Only a scheduled retry has a "next retry"; a pending row is due now, a finished one never.
    next_retry_at: row.status === 'retrying' ? isoOrNull(row.next_attempt_at) : null,
    created_at: row.created_at.toISOString(),
    completed_at: isoOrNull(row.completed_at),
    request_body: row.request_body,
    response_body: row.response_body,
  };
}

/** Known, de-duplicated event types; unknown ones are a 400 that names them. */
function checkedEvents(events: string[]): string[] {
  const unknown = events.map((type, index) => ({ type, index })).filter((e) => !isEventType(e.type));
  if (unknown.length > 0) {
    throw new AppError('VALIDATION_ERROR', `Unknown event type(s): ${unknown.map((e) => e.type).join(', ')}`, {
      details: unknown.map((e) => ({ type: 'value_error', loc: ['body', 'events', e.index], msg: `Unknown event type: ${e.type}`, input: e.type })),
    });
  }
  return [...new Set(events)];
}

export interface WebhooksServiceOptions {
  secretsKey: Buffer;
  allowPrivateNetworks: boolean;
}

export class WebhooksService {
  constructor(private db: Db, private options: WebhooksServiceOptions, private sender: WebhookSender) {}

  async create(tenantId: string, input: EndpointCreate): Promise<{ data: Endpoint; signing_secret: string }> {
    const events = checkedEvents(input.events);
    const url = await validateEndpointUrl(input.url, this.options.allowPrivateNetworks);
    const secret = newSigningSecret();
    const row = await repo.insertEndpoint(this.db, tenantId, {
      url, events, description: input.description ?? null, is_active: input.active ?? true,
      signing_secret_enc: encryptSecret(this.options.secretsKey, secret),
    });
    return { data: toEndpoint(row), signing_secret: secret };
  }

  async list(tenantId: string): Promise<{ data: Endpoint[] }> {
    return { data: (await repo.listEndpoints(this.db, tenantId)).map(toEndpoint) };
  }

  async get(tenantId: string, id: string): Promise<Endpoint> {
    return toEndpoint(await this.endpointOrThrow(tenantId, id));
  }

  /**
   * Any subset of url, events, description, active. `active: true` re-enables an endpoint and
   * resets its failure count: re-enabling is the tenant saying "fixed", so the endpoint gets a fresh
   * budget of 20 failures instead of being disabled again by the very next one.
   */
  async update(tenantId: string, id: string, input: EndpointUpdate): Promise<Endpoint> {
    const changes: Partial<EndpointValues> & { consecutive_failures?: number } = {};
    if (input.events !== undefined) changes.events = checkedEvents(input.events);
    if (input.url !== undefined) changes.url = await validateEndpointUrl(input.url, this.options.allowPrivateNetworks);
    if (input.description !== undefined) changes.description = input.description;
    if (input.active !== undefined) {
      changes.is_active = input.active;
      if (input.active) changes.consecutive_failures = 0;
    }
    if (Object.keys(changes).length === 0) return this.get(tenantId, id);
    const row = await repo.updateEndpoint(this.db, tenantId, id, changes);
    if (!row) throw notFound('Webhook endpoint');
    return toEndpoint(row);
  }

  async remove(tenantId: string, id: string): Promise<{ message: string }> {
    const deleted = await this.db.transaction().execute((tx) => repo.softDeleteEndpoint(tx, tenantId, id));
    if (!deleted) throw notFound('Webhook endpoint');
    return { message: 'Webhook endpoint deleted' };
  }

  /**
   * Immediate, no grace period: every attempt started from now on signs with the new secret, queued
   * ones included. Only a row a worker claimed within the last second (MAX_WAIT_MS in the deliverer)
   * can still start with the old one, like an attempt already in flight.
   */
  async rotateSecret(tenantId: string, id: string): Promise<{ message: string; signing_secret: string }> {
    const secret = newSigningSecret();
    const row = await repo.updateEndpoint(this.db, tenantId, id, { signing_secret_enc: encryptSecret(this.options.secretsKey, secret) });
    if (!row) throw notFound('Webhook endpoint');
    return { message: 'Signing secret rotated; the previous secret no longer verifies', signing_secret: secret };
  }

  /**
   * Sends a signed webhook.test synchronously (no transaction is open during the HTTP call), then
   * records the attempt. Runs on disabled endpoints; never retried; a failure never counts toward
   * the auto-disable threshold; a success clears the failure count.
   */
  async sendTest(tenantId: string, id: string): Promise<TestResult> {
    const endpoint = await this.endpointOrThrow(tenantId, id);
    const deliveryId = randomUUID();
    const eventId = randomUUID();
    const data = { webhook_id: endpoint.id, message: 'This is a test event from the webhook API' };
    const payload = Buffer.from(envelopeJson(eventId, 'webhook.test', new Date().toISOString(), JSON.stringify(data)));
    const outcome = await this.sender.attempt({
      url: endpoint.url, endpointId: endpoint.id, eventType: 'webhook.test', payload, attemptId: deliveryId,
      secret: decryptSecret(this.options.secretsKey, endpoint.signing_secret_enc),
    });
    const logged = toLoggedOutcome(outcome);
    await this.db.transaction().execute((tx) => repo.recordTestAttempt(tx, tenantId, {
      id: deliveryId, endpointId: endpoint.id, eventId, url: endpoint.url, payload, ...logged,
    }));
    return {
      delivered: outcome.ok,
      delivery_id: deliveryId,
      message: outcome.ok ? `Test event delivered (HTTP ${outcome.statusCode})` : `Test event not delivered: ${logged.errorMessage}`,
      status_code: outcome.statusCode,
      response_time_ms: outcome.responseTimeMs,
      response_body: outcome.responseBody,
      error: logged.errorMessage,
      endpoint_disabled: !endpoint.is_active,
    };
  }

  async listDeliveries(tenantId: string, endpointId: string | undefined, query: DeliveryQuery) {
    if (endpointId !== undefined) await this.endpointOrThrow(tenantId, endpointId);
    const { rows, total } = await repo.listDeliveries(this.db, tenantId, { endpointId, status: query.status }, query.limit, offsetOf(query));
    return { data: rows.map(toDelivery), pagination: paginationFor(query.page, query.limit, total) };
  }

  /** success_rate = success / settled (success + failed + abandoned); 0 while nothing has settled. */
  async metrics(tenantId: string): Promise<DeliveryMetrics> {
    const c = await repo.deliveryCounts(this.db, tenantId);
    const settled = Number(c.success) + Number(c.failed) + Number(c.abandoned);
    return {
      total: Number(c.total), success: Number(c.success), retrying: Number(c.retrying), abandoned: Number(c.abandoned), pending: Number(c.pending),
      success_rate: settled === 0 ? 0 : Number(c.success) / settled,
    };
  }

  /** Replays the original bytes (same event id and body) as a new delivery row. */
  async retryDelivery(tenantId: string, deliveryId: string): Promise<{ message: string; delivery_id: string }> {
    const original = await repo.findDelivery(this.db, tenantId, deliveryId);
    if (!original) throw notFound('Webhook delivery');
    if (original.is_test) throw new AppError('VALIDATION_ERROR', 'Test deliveries are never retried; send a new test with POST /webhooks/{id}/test');
    const endpoint = await repo.findEndpoint(this.db, tenantId, original.endpoint_id);
    if (!endpoint) throw notFound('Webhook endpoint');
    const id = await repo.insertReplay(this.db, tenantId, original, endpoint.url);
    return {
      message: endpoint.is_active ? 'Delivery queued for retry' : 'Delivery queued for retry; it is sent once the endpoint is re-enabled',
      delivery_id: id,
    };
  }

  /**
   * Bulk replay after an outage at the receiver: every failed or abandoned delivery of the endpoint
   * created in the window is queued again as a new row with the original bytes, like the single
   * retry. Each delivery is re-queued at most once (one that was already replayed, by this or by
   * the single retry, is skipped), so repeating the call queues only failures that are new since.
   */
  async recover(tenantId: string, id: string, input: RecoverBody): Promise<{ message: string; queued: number }> {
    const since = new Date(input.since);
    const until = input.until === undefined ? null : new Date(input.until);
    if (until && until < since) throw validationError('until must not be before since', ['body', 'until'], input.until);
    const endpoint = await this.endpointOrThrow(tenantId, id);
    const queued = await this.db.transaction().execute((tx) => repo.insertRecoveries(tx, tenantId, endpoint.id, input.since, input.until ?? null));
    const what = `${queued} ${queued === 1 ? 'delivery' : 'deliveries'} queued for redelivery`;
    return { message: endpoint.is_active || queued === 0 ? what : `${what}; they are sent once the endpoint is re-enabled`, queued };
  }

  private async endpointOrThrow(tenantId: string, id: string): Promise<EndpointRow> {
    const row = await repo.findEndpoint(this.db, tenantId, id);
    if (!row) throw notFound('Webhook endpoint');
    return row;
  }
}
