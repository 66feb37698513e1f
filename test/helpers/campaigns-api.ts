import { randomBytes } from 'node:crypto';
import type { LightMyRequestResponse } from 'fastify';
import pg from 'pg';
import { expect } from 'vitest';
import { API, call, type TestTenant } from './app.ts';
import { expectError } from './expect.ts';
import type { UpstreamTestApp } from './upstream.ts';

/** A template with a placeholder in the header, the body and a URL button (and buttons without). */
export const RICH_TEMPLATE = [
  { type: 'HEADER', format: 'TEXT', text: 'Order for {{1}} ready' },
  { type: 'BODY', text: 'Hello {{1}}, your order {{2}} has shipped.' },
  { type: 'FOOTER', text: 'Reply STOP to opt out' },
  { type: 'BUTTONS', buttons: [
    { type: 'URL', text: 'Track', url: 'https://shop.example/track/{{1}}' },
    { type: 'QUICK_REPLY', text: 'Stop' },
  ] },
];

/** A mapping that fits RICH_TEMPLATE. */
export const richMapping = () => ({
  components: [
    { type: 'header', parameters: [{ kind: 'contact_field', field: 'company', fallback: 'friend' }] },
    { type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'contact_field', field: 'custom_fields.order' }] },
    { type: 'button', sub_type: 'url', index: 0, parameters: [{ kind: 'static', value: 'T-1' }] },
  ],
});

/** A mapping that fits BODY_TWO_VARS (the default test template). */
export const bodyMapping = () => ({ components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'A-1' }] }] });

/** Creates a campaign (201 expected) on the default two-variable template. */
export async function createCampaign(t: UpstreamTestApp, tenant: TestTenant, templateId: string, body: Record<string, unknown> = {}) {
  const res = await call(t.app, tenant, 'POST', '/campaigns', { name: 'Campaign', template_id: templateId, variable_mapping: bodyMapping(), ...body });
  expect(res.statusCode, res.body).toBe(201);
  return res.json();
}

/** A 400 VALIDATION_ERROR whose details name `loc` (exactly, as one of the items). */
export function expectInvalid(res: LightMyRequestResponse, loc: (string | number)[], what = '') {
  const error = expectError(res, 400, 'VALIDATION_ERROR');
  const locs = (error.details as { loc: unknown[] }[]).map((d) => d.loc);
  expect(locs, `${what} ${res.body}`).toContainEqual(loc);
  return error;
}

export const future = (ms = 3_600_000) => new Date(Date.now() + ms).toISOString();

/** A multipart body with fields and one file. */
export function multipartBody(fields: Record<string, string>, file: { name: string; type: string; bytes: Buffer }) {
  const boundary = `----b${randomBytes(8).toString('hex')}`;
  const parts: Buffer[] = [];
  for (const [name, value] of Object.entries(fields)) parts.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`));
  parts.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${file.name}"\r\nContent-Type: ${file.type}\r\n\r\n`), file.bytes, Buffer.from(`\r\n--${boundary}--\r\n`));
  return { payload: Buffer.concat(parts), headers: { 'content-type': `multipart/form-data; boundary=${boundary}` } };
}

export const PNG = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), Buffer.alloc(200, 7)]);
export const PDF = Buffer.from('%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n');

export async function uploadMedia(t: UpstreamTestApp, tenant: TestTenant, type: 'image' | 'document'): Promise<string> {
  const body = type === 'image' ? multipartBody({ type }, { name: 'logo.png', type: 'image/png', bytes: PNG }) : multipartBody({ type }, { name: 'terms.pdf', type: 'application/pdf', bytes: PDF });
  const res = await t.app.inject({ method: 'POST', url: `${API}/media`, headers: { ...tenant.headers, ...body.headers }, payload: body.payload });
  expect(res.statusCode, res.body).toBe(201);
  return res.json().id;
}

/**
 * Holds a row lock on a campaign from a connection of its own, so that concurrent requests queue
 * behind it; `blocked(n)` waits until n backends wait on it (pg_blocking_pids), `release()` commits.
 */
export async function lockCampaign(campaignId: string) {
  const locker = new pg.Client({ connectionString: process.env.DATABASE_URL });
  const probe = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await locker.connect();
  await probe.connect();
  const pid = (await locker.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
  await locker.query('BEGIN');
  await locker.query('SELECT 1 FROM campaigns WHERE id = $1 FOR UPDATE', [campaignId]);
  return {
    async blocked(n: number) {
      for (let i = 0; ; i++) {
        // The first waiter waits on our lock; the next ones wait on the first (its tuple lock).
        const { rows } = await probe.query(`
          WITH direct AS (SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)))
          SELECT (SELECT count(*) FROM direct)::int + (SELECT count(*) FROM pg_stat_activity a
            WHERE a.pid NOT IN (SELECT pid FROM direct) AND pg_blocking_pids(a.pid) && ARRAY(SELECT pid FROM direct))::int AS n`, [pid]);
        if (rows[0].n >= n) return;
        if (i > 400) throw new Error(`only ${rows[0].n} of ${n} requests reached the lock`);
        await new Promise((r) => setTimeout(r, 25));
      }
    },
    async release() {
      try { await locker.query('COMMIT'); } finally {
        await locker.end();
        await probe.end();
      }
    },
  };
}

/**
 * Test files share one database, and a worker started without a tenant filter (ROLE=worker in
 * another test, a later run) would dispatch or start whatever these tests left RUNNING, PAUSED or
 * SCHEDULED: a file stops its own tenants' campaigns when it ends.
 */
export async function stopLeftovers(t: UpstreamTestApp, tenantIds: string[]) {
  if (tenantIds.length === 0) return;
  await t.deps.db.updateTable('campaigns').set({ status: 'STOPPED', updated_at: new Date() })
    .where('tenant_id', 'in', tenantIds).where('status', 'in', ['SCHEDULED', 'RUNNING', 'PAUSED']).execute();
}
