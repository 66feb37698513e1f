import { AsyncLocalStorage } from 'node:async_hooks';
import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import type { Db, Tx } from '../db/database.ts';
import type { ProcessLiveness } from '../db/process-liveness.ts';
import { decryptSecret, encryptSecret } from '../crypto/secrets.ts';
import { AppError } from './errors.ts';

export type IdempotencyClaim =
  /** `resourceId`: taken over from a request that died after recording this resource (a message row). */
  | { kind: 'claimed'; resourceId: string | null }
  | { kind: 'replay'; status: number; headers: Record<string, string>; body: string };

export interface IdempotencyRequest {
  tenantId: string;
  key: string;
  method: string;
  path: string;
  body: unknown;
}

const KEY_FORMAT = /^[\x21-\x7e]{1,255}$/;

/** How soon a caller refused because the key's first request is still running should ask again. */
export const STILL_RUNNING_RETRY_AFTER_S = 1;

/** The 409 for a key whose request is still running; Retry-After tells the caller it is worth retrying. */
export function stillBeingProcessed(): AppError {
  const error = new AppError('CONFLICT', 'A request with this Idempotency-Key is still being processed');
  error.retryAfterSeconds = STILL_RUNNING_RETRY_AFTER_S;
  return error;
}

/**
 * Idempotency-Key store in PostgreSQL (survives restarts). The first request claims the key; its
 * 2xx or non-429 4xx response is kept for the TTL and replayed byte for byte; a 5xx or 429
 * releases the key so a retry runs again. A running key records the process running its request:
 * a retry takes it over as soon as that process is gone (see takeOver).
 * Kept responses are encrypted at rest: some carry secrets (a new webhook's signing secret).
 */
export class IdempotencyStore {
  constructor(private db: Db, private liveness: ProcessLiveness, private ttlMs: number, private lockMs: number, private secretsKey: Buffer) {}

  static validKey(key: string): boolean {
    return KEY_FORMAT.test(key);
  }

  async claim(req: IdempotencyRequest): Promise<IdempotencyClaim> {
    const requestHash = createHash('sha256').update(JSON.stringify(req.body ?? null)).digest('hex');
    for (let attempt = 0; attempt < 3; attempt++) {
      const inserted = await this.db
        .insertInto('idempotency_keys')
        .values({
          tenant_id: req.tenantId, key: req.key, method: req.method, path: req.path, request_hash: requestHash,
          state: 'running', locked_until: new Date(Date.now() + this.lockMs), owner_process_id: this.liveness.processId,
        })
        .onConflict((oc) => oc.doNothing())
        .returning('key')
        .executeTakeFirst();
      if (inserted) return { kind: 'claimed', resourceId: null };

      const row = await this.db.selectFrom('idempotency_keys').selectAll()
        .where('tenant_id', '=', req.tenantId).where('key', '=', req.key).executeTakeFirst();
      if (!row) continue; // released between our insert and select: try again
      if (row.created_at.getTime() < Date.now() - this.ttlMs) {
        await this.release(req.tenantId, req.key);
        continue;
      }
      if (row.method !== req.method || row.path !== req.path || row.request_hash !== requestHash) {
        throw new AppError('CONFLICT', 'Idempotency-Key was already used with a different request');
      }
      if (row.state === 'done') {
        return { kind: 'replay', status: row.response_status!, headers: row.response_headers ?? {}, body: row.response_body ? decryptSecret(this.secretsKey, row.response_body) : '' };
      }
      if (row.state === 'unknown') {
        // The earlier request's upstream outcome is unknown: one retry at a time takes the key and
        // its resource, and decides from what the upstream has said of it since.
        const taken = await this.db.updateTable('idempotency_keys')
          .set({ state: 'running', locked_until: new Date(Date.now() + this.lockMs), owner_process_id: this.liveness.processId })
          .where('tenant_id', '=', req.tenantId).where('key', '=', req.key).where('state', '=', 'unknown')
          .executeTakeFirst();
        if (Number(taken.numUpdatedRows) === 1) return { kind: 'claimed', resourceId: row.resource_id };
        continue;
      }
      if (await this.takeOver(req, row.owner_process_id, row.locked_until)) return { kind: 'claimed', resourceId: row.resource_id };
      throw stillBeingProcessed();
    }
    throw stillBeingProcessed();
  }

  /**
   * Takes a running key over from a request that can no longer finish: its process is gone (it
   * released its liveness lock by dying), or, as a backstop, it outlived `lockMs` in a live process.
   * No request of a live process legitimately runs that long (the longest, a send, is bounded by
   * the pacing horizon and the upstream timeout), so such a request is stuck, and without the
   * backstop its key would refuse every retry for the whole TTL. One conditional UPDATE: of
   * retries racing for the key, one wins.
   */
  private async takeOver(req: IdempotencyRequest, owner: string | null, lockedUntil: Date | null): Promise<boolean> {
    const now = new Date();
    const lockExpired = lockedUntil !== null && lockedUntil < now;
    const ownerGone = !lockExpired && owner !== null && !(await this.liveness.isAlive(owner));
    if (!lockExpired && !ownerGone) return false;
    const takenOver = await this.db.updateTable('idempotency_keys')
      .set({ locked_until: new Date(Date.now() + this.lockMs), owner_process_id: this.liveness.processId })
      .where('tenant_id', '=', req.tenantId).where('key', '=', req.key).where('state', '=', 'running')
      .where((eb) => ownerGone ? eb('owner_process_id', '=', owner) : eb('locked_until', '<', now))
      .executeTakeFirst();
    return Number(takenOver.numUpdatedRows) === 1;
  }

  async complete(tenantId: string, key: string, status: number, headers: Record<string, string>, body: string, db: Db | Tx = this.db): Promise<void> {
    await db.updateTable('idempotency_keys')
      .set({ state: 'done', response_status: status, response_headers: JSON.stringify(headers), response_body: encryptSecret(this.secretsKey, body), locked_until: null })
      .where('tenant_id', '=', tenantId).where('key', '=', key)
      .execute();
  }

  /** Names the resource (a message row) the key's request recorded, in the transaction that records it. */
  async attachResource(tx: Tx, tenantId: string, key: string, resourceId: string): Promise<void> {
    await tx.updateTable('idempotency_keys').set({ resource_id: resourceId })
      .where('tenant_id', '=', tenantId).where('key', '=', key).execute();
  }

  /** Keeps the key, with its resource, for a request whose upstream outcome is not known yet. */
  async markUnknown(tenantId: string, key: string): Promise<void> {
    await this.db.updateTable('idempotency_keys').set({ state: 'unknown', locked_until: null })
      .where('tenant_id', '=', tenantId).where('key', '=', key).execute();
  }

  async release(tenantId: string, key: string): Promise<void> {
    await this.db.deleteFrom('idempotency_keys').where('tenant_id', '=', tenantId).where('key', '=', key).execute();
  }

  /** Deletes expired keys in bounded batches; returns how many were removed. */
  async sweepExpired(batchSize = 5000): Promise<number> {
    const cutoff = new Date(Date.now() - this.ttlMs);
    const result = await sql`
      DELETE FROM idempotency_keys WHERE ctid IN (
        SELECT ctid FROM idempotency_keys WHERE created_at < ${cutoff} LIMIT ${batchSize})`.execute(this.db);
    return Number(result.numAffectedRows ?? 0);
  }
}

export function shouldKeepResponse(status: number): boolean {
  return (status >= 200 && status < 300) || (status >= 400 && status < 500 && status !== 429);
}

/**
 * The Idempotency-Key of the request being handled, seen by the services it calls. A write
 * completes the key inside its own transaction (completeIdempotencyKey), so a crash between the
 * write's commit and the response cannot leave the key open for a retry to run the write again.
 */
export interface IdempotencyScope {
  /** Set when this request took the key over from one that died after recording this resource. */
  takenOverResource: string | null;
  /** Stores `result`, serialised as the route's success response, as the key's response, in `tx`. */
  complete(tx: Tx, result: unknown): Promise<void>;
  /** Records the resource this request created (a message row) with the key, in `tx`. */
  attach(tx: Tx, resourceId: string): Promise<void>;
  /** True once complete() ran in a transaction. */
  completed: boolean;
}

export const idempotencyScope = new AsyncLocalStorage<IdempotencyScope>();

/** Completes the current request's Idempotency-Key with `result` inside `tx` (no-op without a key). */
export async function completeIdempotencyKey(tx: Tx, result: unknown): Promise<void> {
  await idempotencyScope.getStore()?.complete(tx, result);
}
