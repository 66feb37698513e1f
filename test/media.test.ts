import { createHash, randomUUID } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API, call, createTenant, eventually, uniquePhone, type TestTenant } from './helpers/app.ts';
import { multipart } from './helpers/multipart.ts';
import { createApprovedTemplate, createConnectedTenant, sandboxControl, startUpstreamApp, type UpstreamTestApp } from './helpers/upstream.ts';

const PNG = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), Buffer.alloc(200, 7)]);
const PDF = Buffer.from('%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n');

describe('media', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp(); });
  afterAll(async () => { await t?.close(); });

  const upload = (tenant: TestTenant, fields: Record<string, string>, file?: { name: string; type: string; bytes: Buffer }) => {
    const body = multipart(fields, file);
    return t.app.inject({ method: 'POST', url: `${API}/media`, headers: { ...tenant.headers, ...body.headers }, payload: body.payload });
  };

  it('uploads, lists, reads and soft-deletes media', async () => {
    const tenant = await createTenant(t.app);
    const res = await upload(tenant, { type: 'image' }, { name: 'logo.png', type: 'image/png', bytes: PNG });
    expect(res.statusCode).toBe(201);
    const media = res.json();
    expect(media).toEqual({ id: expect.any(String), filename: 'logo.png', mime_type: 'image/png', size_bytes: PNG.length,
      sha256: createHash('sha256').update(PNG).digest('hex'), created_at: expect.any(String) });
    // `type` may come after the file part.
    const doc = await upload(tenant, {}, { name: 'terms.pdf', type: 'application/pdf', bytes: PDF });
    expect(doc.statusCode).toBe(400); // no type
    const body = multipart({}, { name: 'terms.pdf', type: 'application/pdf', bytes: PDF });
    const withTypeAfter = Buffer.concat([body.payload.subarray(0, body.payload.length - `--${body.headers['content-type'].split('boundary=')[1]}--\r\n`.length),
      Buffer.from(`--${body.headers['content-type'].split('boundary=')[1]}\r\nContent-Disposition: form-data; name="type"\r\n\r\ndocument\r\n--${body.headers['content-type'].split('boundary=')[1]}--\r\n`)]);
    const doc2 = await t.app.inject({ method: 'POST', url: `${API}/media`, headers: { ...tenant.headers, ...body.headers }, payload: withTypeAfter });
    expect(doc2.statusCode).toBe(201);

    const list = (await call(t.app, tenant, 'GET', '/media')).json();
    expect(list.data.map((m: { id: string }) => m.id)).toEqual([doc2.json().id, media.id]);
    expect(list.pagination.total_items).toBe(2);
    expect((await call(t.app, tenant, 'GET', `/media/${media.id}`)).json()).toEqual(media);
    expect((await call(t.app, tenant, 'DELETE', `/media/${media.id}`)).statusCode).toBe(200);
    expect((await call(t.app, tenant, 'GET', `/media/${media.id}`)).statusCode).toBe(404);
    expect((await call(t.app, tenant, 'DELETE', `/media/${media.id}`)).statusCode).toBe(404);
  });

  it('enforces type, MIME type, content and size limits with 400', async () => {
    const tenant = await createTenant(t.app);
    const cases = [
      { fields: { type: 'audio' }, file: { name: 'a.png', type: 'image/png', bytes: PNG } },
      { fields: { type: 'image' }, file: { name: 'a.gif', type: 'image/gif', bytes: PNG } },
      { fields: { type: 'image' }, file: { name: 'a.pdf', type: 'application/pdf', bytes: PDF } },
      { fields: { type: 'image' }, file: { name: 'a.png', type: 'image/png', bytes: PDF } }, // content is not a PNG
      { fields: { type: 'image' }, file: { name: 'big.png', type: 'image/png', bytes: Buffer.concat([PNG, Buffer.alloc(5 * 1024 * 1024)]) } },
      { fields: { type: 'image' } },
    ];
    for (const c of cases) {
      const res = await upload(tenant, c.fields, c.file);
      expect(res.statusCode, JSON.stringify(c.fields) + c.file?.name).toBe(400);
      expect(res.json().error.code).toBe('VALIDATION_ERROR');
    }
    // Not multipart at all.
    const json = await call(t.app, tenant, 'POST', '/media', { type: 'image' });
    expect(json.statusCode).toBe(400);
    expect((await call(t.app, tenant, 'GET', '/media')).json().data).toEqual([]);
  });

  it('Idempotency-Key covers the uploaded file: the same file replays, a different one is 409, and neither leaves bytes behind', async () => {
    const tenant = await createTenant(t.app);
    const storedFiles = () => readdirSync(join(t.config.dataDir, 'media'), { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).length;
    const key = { 'idempotency-key': randomUUID() };
    const send = (bytes: Buffer) => {
      const body = multipart({ type: 'image' }, { name: 'logo.png', type: 'image/png', bytes });
      return t.app.inject({ method: 'POST', url: `${API}/media`, headers: { ...tenant.headers, ...body.headers, ...key }, payload: body.payload });
    };
    const first = await send(PNG);
    expect(first.statusCode).toBe(201);
    const files = storedFiles();

    const replay = await send(PNG);
    expect(replay.statusCode).toBe(201);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.json().id).toBe(first.json().id);

    const other = Buffer.concat([PNG, Buffer.from('different')]);
    const conflict = await send(other);
    expect(conflict.statusCode).toBe(409);
    expect(conflict.json().error.code).toBe('CONFLICT');

    // Left-over staged bytes are removed once each response has gone out.
    await eventually(async () => storedFiles() === files, 2_000);
    expect((await call(t.app, tenant, 'GET', '/media')).json().data).toHaveLength(1);
  });

  it('a multipart body the parser cannot read is a 400, not a server error', async () => {
    const tenant = await createTenant(t.app);
    const post = (contentType: string, payload: Buffer | string) =>
      t.app.inject({ method: 'POST', url: `${API}/media`, headers: { ...tenant.headers, 'content-type': contentType }, payload });
    expect((await post('multipart/form-data', 'no boundary at all')).statusCode).toBe(400);
    const whole = multipart({ type: 'image' }, { name: 'logo.png', type: 'image/png', bytes: PNG });
    const cut = whole.payload.subarray(0, whole.payload.length - 40); // no closing boundary
    expect((await post(whole.headers['content-type'], cut)).statusCode).toBe(400);
    const boundary = 'XyZ';
    const jsonField = `--${boundary}
Content-Disposition: form-data; name="type"
Content-Type: application/json

{bad
--${boundary}--
`;
    const bad = await post(`multipart/form-data; boundary=${boundary}`, jsonField);
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error.code).toBe('VALIDATION_ERROR');
  });

  it('scopes: media:read cannot upload', async () => {
    const tenant = await createTenant(t.app, { scopes: ['media:read'] });
    expect((await upload(tenant, { type: 'image' }, { name: 'a.png', type: 'image/png', bytes: PNG })).statusCode).toBe(403);
  });

  it('cross-tenant: another tenant\'s media is 404 and cannot be used in a send', async () => {
    const a = await createConnectedTenant(t.app);
    const b = await createConnectedTenant(t.app);
    const media = (await upload(a, { type: 'image' }, { name: 'a.png', type: 'image/png', bytes: PNG })).json();
    expect((await call(t.app, b, 'GET', `/media/${media.id}`)).statusCode).toBe(404);
    expect((await call(t.app, b, 'DELETE', `/media/${media.id}`)).statusCode).toBe(404);
    const template = await createApprovedTemplate(t.app, b, { components: [{ type: 'HEADER', format: 'IMAGE' }, { type: 'BODY', text: 'Hi' }] });
    const res = await call(t.app, b, 'POST', '/messages/template', { to: uniquePhone(), template_name: template.template_name,
      components: [{ type: 'header', parameters: [{ type: 'image', image: { media_id: media.id } }] }] });
    expect(res.statusCode).toBe(404);
  });

  it('uploads to the upstream on first use in a send and reuses the upstream id after', async () => {
    const tenant = await createConnectedTenant(t.app);
    const media = (await upload(tenant, { type: 'image' }, { name: 'a.png', type: 'image/png', bytes: PNG })).json();
    const template = await createApprovedTemplate(t.app, tenant, { components: [{ type: 'HEADER', format: 'IMAGE' }, { type: 'BODY', text: 'Hi {{1}}, welcome.' }] });
    const to = uniquePhone();
    const send = () => call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, components: [
      { type: 'header', parameters: [{ type: 'image', image: { media_id: media.id } }] },
      { type: 'body', parameters: [{ type: 'text', text: 'Ana' }] },
    ] });
    expect((await send()).statusCode).toBe(200);
    expect((await send()).statusCode).toBe(200);
    const row = await t.deps.db.selectFrom('media').selectAll().where('id', '=', media.id).executeTakeFirstOrThrow();
    expect(row.upstream_media_id).toBeTruthy();
    const sends = (await sandboxControl(t.sandbox!, 'GET', `/__sandbox/sends?to=${encodeURIComponent(to)}`)).json.data;
    expect(sends).toHaveLength(2);
    for (const s of sends) expect(s.components[0]).toEqual({ type: 'header', parameters: [{ type: 'image', image: { id: row.upstream_media_id } }] });
    // A media header without its parameter is refused before the upstream.
    const missing = await call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, components: [{ type: 'body', parameters: [{ type: 'text', text: 'Ana' }] }] });
    expect(missing.statusCode).toBe(400);
    // A document uploaded as media cannot fill an image header.
    const pdf = (await upload(tenant, { type: 'document' }, { name: 'a.pdf', type: 'application/pdf', bytes: PDF })).json();
    const wrong = await call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, components: [
      { type: 'header', parameters: [{ type: 'image', image: { media_id: pdf.id } }] }, { type: 'body', parameters: [{ type: 'text', text: 'Ana' }] }] });
    expect(wrong.statusCode).toBe(400);
    // ...and is refused before any upload to the upstream.
    const pdfRow = await t.deps.db.selectFrom('media').selectAll().where('id', '=', pdf.id).executeTakeFirstOrThrow();
    expect(pdfRow.upstream_media_id).toBeNull();
  });
});
