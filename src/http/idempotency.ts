import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import type { Db } from '../db/database.ts';
import { decryptSecret, encryptSecret } from '../crypto/secrets.ts';
import { AppError } from './errors.ts';

export type IdempotencyClaim =
  | { kind: 'claimed' }
  | { kind: 'replay'; status: number; headers: Record<string, string>; body: string };

export interface IdempotencyRequest {
  tenantId: string;
  key: string;
  method: string;
  path: string;
  body: unknown;
}

const KEY_FORMAT = /^[\x21-\x7e]{1,255}$/;

/**
 * Idempotency-Key store in PostgreSQL (survives restarts). The first request claims the key; its
 * 2xx or non-429 4xx response is kept for the TTL and replayed byte for byte; a 5xx or 429
 * releases the key so a retry runs again. A claim whose request died is taken over after the lock.
 * Kept responses are encrypted at rest: some carry secrets (a new webhook's signing secret).
 */
export class IdempotencyStore {
  constructor(private db: Db, private ttlMs: number, private lockMs: number, private secretsKey: Buffer) {}

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
          state: 'running', locked_until: new Date(Date.now() + this.lockMs),
        })
        .onConflict((oc) => oc.doNothing())
        .returning('key')
        .executeTakeFirst();
      if (inserted) return { kind: 'claimed' };

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
      const takenOver = await this.db.updateTable('idempotency_keys')
        .set({ locked_until: new Date(Date.now() + this.lockMs) })
        .where('tenant_id', '=', req.tenantId).where('key', '=', req.key)
        .where('state', '=', 'running').where('locked_until', '<', new Date())
        .executeTakeFirst();
      if (Number(takenOver.numUpdatedRows) === 1) return { kind: 'claimed' };
      throw new AppError('CONFLICT', 'A request with this Idempotency-Key is still being processed');
    }
    throw new AppError('CONFLICT', 'A request with this Idempotency-Key is still being processed');
  }

  async complete(tenantId: string, key: string, status: number, headers: Record<string, string>, body: string): Promise<void> {
    await this.db.updateTable('idempotency_keys')
      .set({ state: 'done', response_status: status, response_headers: JSON.stringify(headers), response_body: encryptSecret(this.secretsKey, body), locked_until: null })
      .where('tenant_id', '=', tenantId).where('key', '=', key)
      .execute();
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
