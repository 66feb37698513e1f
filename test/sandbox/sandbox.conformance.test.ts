import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Sandbox } from '../../src/sandbox/sandbox.ts';
import { http, PDF_BYTES, PNG_BYTES, startTestSandbox, uniqueId, uploadMedia } from './helpers.ts';

/**
 * The sandbox against the request shapes standard WhatsApp Cloud API clients form (the reference's
 * examples, whatsapp-api-js, pywa, the official Node SDK): what Meta takes must be taken, what Meta
 * refuses must be refused with Meta's code.
 */
describe('sandbox conformance: media uploads as clients send them', () => {
  let sandbox: Sandbox;
  const phoneId = uniqueId();

  beforeAll(async () => { sandbox = await startTestSandbox({ callbacks: false }); });
  afterAll(async () => { await sandbox.close(); });

  it('takes the reference\'s form (messaging_product, type and file in the form)', async () => {
    const res = await uploadMedia(sandbox, phoneId, PNG_BYTES, { fields: { messaging_product: 'whatsapp', type: 'image/png' } });
    expect(res.status).toBe(200);
    expect((await http('GET', `${sandbox.baseUrl}/${res.body.id}`)).body).toMatchObject({ mime_type: 'image/png', file_size: String(PNG_BYTES.length) });
  });

  it('takes messaging_product in the query string with only the file in the form (whatsapp-api-js)', async () => {
    const res = await uploadMedia(sandbox, phoneId, PDF_BYTES, { contentType: 'application/pdf', filename: 'terms.pdf', fields: {}, query: { messaging_product: 'whatsapp' } });
    expect(res.status).toBe(200);
    expect((await http('GET', `${sandbox.baseUrl}/${res.body.id}`)).body.mime_type).toBe('application/pdf');
    // Both in the query string.
    const both = await uploadMedia(sandbox, phoneId, PNG_BYTES, { fields: {}, query: { messaging_product: 'whatsapp', type: 'image/png' } });
    expect(both.status).toBe(200);
  });

  it('still refuses an upload that names messaging_product nowhere', async () => {
    const res = await uploadMedia(sandbox, phoneId, PNG_BYTES, { fields: { type: 'image/png' } });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ code: 100, message: '(#100) The parameter messaging_product is required.' });
  });

  it('refuses types outside Meta\'s list and files over its size limits with error 100', async () => {
    const refused = async (bytes: Buffer, options: Parameters<typeof uploadMedia>[3]) => {
      const res = await uploadMedia(sandbox, phoneId, bytes, options);
      expect(res.status, JSON.stringify(options)).toBe(400);
      expect(res.body.error.code, JSON.stringify(options)).toBe(100);
      return res.body.error.error_data.details as string;
    };
    const zip = Buffer.from([0x50, 0x4b, 0x03, 0x04, 0, 0, 0, 0]);
    expect(await refused(zip, { contentType: 'application/zip', filename: 'a.zip', fields: { messaging_product: 'whatsapp', type: 'application/zip' } })).toContain('application/zip');
    // An octet-stream part only labelled as an image is not an image.
    expect(await refused(PNG_BYTES, { contentType: 'application/octet-stream', fields: { messaging_product: 'whatsapp', type: 'image/png' } })).toMatch(/does not match/);
    expect(await refused(PNG_BYTES, { contentType: 'image/gif', filename: 'a.gif' })).toContain("'image/gif'");
    expect(await refused(Buffer.alloc(5 * 1024 * 1024 + 1, 1), { contentType: 'image/png' })).toMatch(/at most 5242880 bytes/);
    expect(await refused(Buffer.alloc(100 * 1024 + 1, 1), { contentType: 'image/webp', filename: 's.webp' })).toMatch(/at most 102400 bytes/);
    // Within the limits they are taken: an animated sticker may be larger than a static one.
    const animated = Buffer.concat([Buffer.from('RIFF\u0000\u0000\u0000\u0000WEBPVP8X\u0000\u0000\u0000\u0000ANIM'), Buffer.alloc(200 * 1024, 1)]);
    expect((await uploadMedia(sandbox, phoneId, animated, { contentType: 'image/webp', filename: 'a.webp' })).status).toBe(200);
    expect((await uploadMedia(sandbox, phoneId, Buffer.alloc(1024, 1), { contentType: 'audio/ogg', filename: 'v.ogg' })).status).toBe(200);
    expect((await uploadMedia(sandbox, phoneId, Buffer.alloc(5 * 1024 * 1024, 1), { contentType: 'image/jpeg', filename: 'big.jpg' })).status).toBe(200);
  });
});
