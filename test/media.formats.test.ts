import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API, createTenant, startTestApp, type TestApp, type TestTenant } from './helpers/app.ts';
import { multipart } from './helpers/multipart.ts';

const PNG = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), Buffer.alloc(64, 7)]);
const PDF = Buffer.from('%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n');
const OLE = Buffer.concat([Buffer.from([0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1]), Buffer.alloc(64, 0)]);
const ZIP = Buffer.concat([Buffer.from([0x50, 0x4b, 0x03, 0x04]), Buffer.alloc(64, 1)]);
const DOCX = 'application/vnd.openxmlformats-officedocument.wordprocessingml.document';

/**
 * POST /media refuses what the upstream would only refuse at send time (reference §6: supported
 * types, sizes, and a MIME type that must fit the file's content and its name's extension).
 */
describe('media: formats the upstream takes', () => {
  let t: TestApp;
  let tenant: TestTenant;
  beforeAll(async () => {
    t = await startTestApp();
    tenant = await createTenant(t.app);
  });
  afterAll(async () => { await t?.close(); });

  const upload = (type: string, file: { name: string; type: string; bytes: Buffer }) => {
    const body = multipart({ type }, file);
    return t.app.inject({ method: 'POST', url: `${API}/media`, headers: { ...tenant.headers, ...body.headers }, payload: body.payload });
  };

  it('refuses a file whose name\'s extension does not fit its MIME type', async () => {
    const res = await upload('image', { name: 'logo.pdf', type: 'image/png', bytes: PNG });
    expect(res.statusCode).toBe(400);
    expect(res.json().error.details).toEqual([expect.objectContaining({ loc: ['body', 'file'], msg: expect.stringMatching(/extension \.pdf does not fit image\/png \(expected \.png\)/) })]);
    expect((await upload('document', { name: 'terms.docx', type: 'application/pdf', bytes: PDF })).statusCode).toBe(400);
    expect((await upload('image', { name: 'photo.JPEG', type: 'image/jpeg', bytes: Buffer.from([0xff, 0xd8, 0xff, 0xe0, 1, 2, 3]) })).statusCode).toBe(201);
    expect((await upload('image', { name: 'logo', type: 'image/png', bytes: PNG })).statusCode).toBe(201); // no extension: the MIME type says it
  });

  it('checks the content of Office documents and plain text against their MIME type', async () => {
    expect((await upload('document', { name: 'a.docx', type: DOCX, bytes: ZIP })).statusCode).toBe(201);
    expect((await upload('document', { name: 'a.docx', type: DOCX, bytes: PDF })).statusCode).toBe(400);
    expect((await upload('document', { name: 'a.doc', type: 'application/msword', bytes: OLE })).statusCode).toBe(201);
    expect((await upload('document', { name: 'a.xls', type: 'application/vnd.ms-excel', bytes: ZIP })).statusCode).toBe(400);
    expect((await upload('document', { name: 'notes.txt', type: 'text/plain', bytes: Buffer.from('plain words\n') })).statusCode).toBe(201);
    expect((await upload('document', { name: 'notes.txt', type: 'text/plain', bytes: Buffer.from([0x68, 0x00, 0x01, 0x02]) })).statusCode).toBe(400);
  });

  it('refuses types outside the upstream\'s list (a zip, an unlabelled octet-stream) and sizes over its limits', async () => {
    expect((await upload('document', { name: 'a.zip', type: 'application/zip', bytes: ZIP })).statusCode).toBe(400);
    expect((await upload('image', { name: 'a.png', type: 'application/octet-stream', bytes: PNG })).statusCode).toBe(400);
    expect((await upload('video', { name: 'a.mp4', type: 'video/mp4', bytes: Buffer.concat([Buffer.from([0, 0, 0, 0x18]), Buffer.from('ftypmp42'), Buffer.alloc(16 * 1024 * 1024)]) })).statusCode).toBe(400);
  });
});
