import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { metaJson, signatureHeader } from '../../src/sandbox/callbacks.ts';
import { parseMultipart } from '../../src/sandbox/multipart.ts';
import { checkSendComponents, expectedParams } from '../../src/sandbox/template-params.ts';

const text = (t: string) => ({ type: 'text', text: t });

describe('sandbox template parameter rules', () => {
  const full = expectedParams([
    { type: 'HEADER', format: 'TEXT', text: 'Order {{1}}' },
    { type: 'BODY', text: 'Hi {{1}}, total {{2}} due {{3}}; again {{1}}' },
    { type: 'FOOTER', text: 'bye' },
    { type: 'BUTTONS', buttons: [{ type: 'URL', url: 'https://x.example/{{1}}' }, { type: 'QUICK_REPLY', text: 'Stop' }, { type: 'COPY_CODE', example: 'ABC' }, { type: 'URL', url: 'https://static.example' }] },
  ], 'POSITIONAL');
  const ok = [
    { type: 'header', parameters: [text('A-1')] },
    { type: 'body', parameters: [text('Ada'), { type: 'currency', currency: { fallback_value: '$5', code: 'USD', amount_1000: 5000 } }, { type: 'date_time', date_time: { fallback_value: 'today' } }] },
    { type: 'button', sub_type: 'url', index: '0', parameters: [text('A-1')] },
    { type: 'button', sub_type: 'quick_reply', index: 1, parameters: [{ type: 'payload', payload: 'STOP' }] },
    { type: 'button', sub_type: 'copy_code', index: '2', parameters: [{ type: 'coupon_code', coupon_code: 'ABC' }] },
  ];

  it('derives the expected counts from the template (distinct placeholders, buttons that take a value)', () => {
    expect(full.header).toEqual({ kind: 'text', count: 1 });
    expect(full.body.count).toBe(3);
    expect(full.buttons.map((b) => b.required)).toEqual([1, 0, 1, 0]);
  });

  it('accepts a send that gives every parameter, with quick replies optional', () => {
    expect(checkSendComponents(full, ok)).toBeNull();
    expect(checkSendComponents(full, ok.filter((c) => c.sub_type !== 'quick_reply'))).toBeNull();
  });

  it('answers 132000 for missing or extra parameters in any component', () => {
    expect(checkSendComponents(full, ok.slice(1))?.code).toBe(132000);
    expect(checkSendComponents(full, ok.filter((c) => c.sub_type !== 'copy_code'))?.code).toBe(132000);
    const extra = structuredClone(ok);
    extra[1].parameters.push(text('x') as never);
    expect(checkSendComponents(full, extra)).toMatchObject({ code: 132000, details: expect.stringContaining('(4) does not match the expected number of params (3)') });
  });

  it('answers 132012 for a parameter type the template cannot take, 131008 for an incomplete one, 131009 for an unknown button', () => {
    const wrong = structuredClone(ok);
    wrong[1].parameters[0] = { type: 'image', image: { id: '1' } } as never;
    expect(checkSendComponents(full, wrong)?.code).toBe(132012);
    const incomplete = structuredClone(ok);
    incomplete[1].parameters[1] = { type: 'currency', currency: { code: 'USD' } } as never;
    expect(checkSendComponents(full, incomplete)?.code).toBe(131008);
    expect(checkSendComponents(full, [...ok, { type: 'button', sub_type: 'url', index: '9', parameters: [text('x')] }])?.code).toBe(131009);
    expect(checkSendComponents(full, [...ok, { type: 'footer', parameters: [] }])?.code).toBe(100);
    expect(checkSendComponents(full, 'nope')?.code).toBe(100);
  });

  it('checks parameter names of NAMED templates', () => {
    const named = expectedParams([{ type: 'BODY', text: 'Hi {{first_name}}, order {{order_id}}' }], 'NAMED');
    const send = (names: string[]) => [{ type: 'body', parameters: names.map((n) => ({ ...text('v'), parameter_name: n })) }];
    expect(checkSendComponents(named, send(['first_name', 'order_id']))).toBeNull();
    expect(checkSendComponents(named, send(['first_name', 'nope']))?.code).toBe(132000);
  });

  it('expects one media parameter of the header format', () => {
    const video = expectedParams([{ type: 'HEADER', format: 'VIDEO' }, { type: 'BODY', text: 'x' }], 'POSITIONAL');
    expect(checkSendComponents(video, [{ type: 'header', parameters: [{ type: 'video', video: { link: 'https://v.example/a.mp4' } }] }])).toBeNull();
    expect(checkSendComponents(video, [{ type: 'header', parameters: [{ type: 'image', image: { id: '1' } }] }])?.code).toBe(132012);
    expect(checkSendComponents(video, [])?.code).toBe(132000);
  });
});

describe('sandbox callback encoding', () => {
  it('escapes like Meta and signs the exact bytes', () => {
    const body = metaJson({ name: 'Zoë 👋', url: 'a/b' });
    expect(body).toBe('{"name":"Zo\\u00eb \\ud83d\\udc4b","url":"a\\/b"}');
    expect(JSON.parse(body)).toEqual({ name: 'Zoë 👋', url: 'a/b' });
    expect(signatureHeader('k', body)).toBe('sha256=' + createHmac('sha256', 'k').update(body).digest('hex'));
  });
});

describe('sandbox multipart parsing', () => {
  it('reads fields and files, binary-safe', () => {
    const bytes = Buffer.from([0, 13, 10, 45, 45, 255]);
    const body = Buffer.concat([
      Buffer.from('--b\r\nContent-Disposition: form-data; name="messaging_product"\r\n\r\nwhatsapp\r\n'),
      Buffer.from('--b\r\nContent-Disposition: form-data; name="file"; filename="x.bin"\r\nContent-Type: application/octet-stream\r\n\r\n'),
      bytes,
      Buffer.from('\r\n--b--\r\n'),
    ]);
    const parts = parseMultipart('multipart/form-data; boundary=b', body)!;
    expect(parts.map((p) => [p.name, p.filename, p.contentType])).toEqual([['messaging_product', null, null], ['file', 'x.bin', 'application/octet-stream']]);
    expect(parts[1].data.equals(bytes)).toBe(true);
    expect(parseMultipart('application/json', body)).toBeNull();
    expect(parseMultipart('multipart/form-data; boundary=zz', body)).toBeNull();
  });
});
