import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { expect } from 'vitest';
import { adminHeaders } from './app.ts';

/** Asserts the spec's error envelope (section 7) with this status, code and (optionally) message. */
export function expectError(res: LightMyRequestResponse, status: number, code: string, message?: string) {
  expect(res.statusCode, res.body).toBe(status);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  const body = res.json();
  expect(body.success).toBe(false);
  expect(body.error.code).toBe(code);
  expect(typeof body.error.message).toBe('string');
  if (message !== undefined) expect(body.error.message).toBe(message);
  expect(body.meta.request_id).toBe(res.headers['x-request-id']);
  expect(new Date(body.meta.timestamp).toISOString()).toBe(body.meta.timestamp);
  return body.error as Record<string, unknown>;
}

/** Fixed windows: waits out the end of the current minute if less than `marginMs` is left, so a burst's counts are exact. */
export async function awayFromMinuteEdge(marginMs = 4000) {
  const into = Date.now() % 60_000;
  if (into > 60_000 - marginMs) await new Promise((r) => setTimeout(r, 60_000 - into + 100));
}

export const RATE_LIMIT_HEADERS = [
  'x-ratelimit-limit-minute', 'x-ratelimit-remaining-minute', 'x-ratelimit-limit-day', 'x-ratelimit-remaining-day', 'x-ratelimit-reset',
] as const;

/** One more key for an existing tenant; returns its id and ready-made headers. */
export async function createKey(app: FastifyInstance, tenantId: string, body: Record<string, unknown> = {}) {
  const res = await app.inject({ method: 'POST', url: `/admin/v1/tenants/${tenantId}/api-keys`, headers: adminHeaders, payload: { name: 'extra key', ...body } });
  if (res.statusCode !== 201) throw new Error(`key create failed: ${res.body}`);
  const key = res.json();
  return { id: tenantId, key: key.key as string, keyId: key.id as string, headers: { authorization: `Bearer ${key.key}` } };
}
