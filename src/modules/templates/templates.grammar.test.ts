import { describe, expect, it } from 'vitest';
import { LANGUAGE, TEMPLATE_NAME, placeholderPlan, validateComponents } from './templates.grammar.ts';

const body = (text: string, ...samples: string[]) => (samples.length > 0 ? { type: 'BODY', text, example: { body_text: [samples] } } : { type: 'BODY', text });
const msgs = (components: unknown) => validateComponents(components).issues.map((i) => i.msg);

describe('template grammar', () => {
  it('accepts a full template and derives what a send must fill', () => {
    const components = [
      { type: 'HEADER', format: 'TEXT', text: 'Order {{1}}', example: { header_text: ['A-1'] } },
      body('Hi {{1}}, your order {{2}} ships {{1}} today.', 'Ana', 'A-1'),
      { type: 'FOOTER', text: 'Reply STOP to opt out' },
      { type: 'BUTTONS', buttons: [
        { type: 'URL', text: 'Track', url: 'https://shop.example/track/{{1}}', example: ['https://shop.example/track/A1'] },
        { type: 'PHONE_NUMBER', text: 'Call us', phone_number: '+15551234567' },
        { type: 'QUICK_REPLY', text: 'Stop' },
      ] },
    ];
    const { issues, plan } = validateComponents(components);
    expect(issues).toEqual([]);
    expect(plan).toEqual({
      header: { format: 'TEXT', variables: 1 },
      body: 2,
      buttons: [{ index: 0, type: 'url', variables: 1 }, { index: 1, type: 'phone_number', variables: 0 }, { index: 2, type: 'quick_reply', variables: 0 }],
    });
    expect(placeholderPlan(components)).toEqual(plan);
  });

  it('requires exactly one BODY', () => {
    expect(msgs([{ type: 'FOOTER', text: 'x' }])).toEqual(['a BODY component is required']);
    expect(msgs([body('a'), body('b')])[0]).toMatch(/only one BODY/);
    expect(msgs([])[0]).toMatch(/non-empty array/);
    expect(msgs(null)[0]).toMatch(/non-empty array/);
  });

  it('rejects unknown component types and header formats', () => {
    expect(msgs([{ type: 'body', text: 'x' }])[0]).toMatch(/HEADER, BODY, FOOTER, BUTTONS/);
    expect(msgs([{ type: 'HEADER', format: 'GIF' }, body('x')])[0]).toMatch(/TEXT, IMAGE, VIDEO, DOCUMENT, LOCATION/);
    expect(validateComponents([{ type: 'HEADER', format: 'IMAGE', example: { header_handle: ['4::aW1n:h'] } }, body('x')]).plan?.header).toEqual({ format: 'IMAGE', variables: 0 });
    expect(msgs([{ type: 'HEADER', format: 'IMAGE', text: 'x', example: { header_handle: ['h'] } }, body('x')])[0]).toMatch(/only allowed on a TEXT header/);
  });

  it('enforces placeholder numbering without gaps', () => {
    expect(msgs([body('Hi {{1}} {{3}}')])[0]).toMatch(/\{\{2\}\} is missing/);
    expect(msgs([body('Hi {{2}}')])[0]).toMatch(/\{\{1\}\} is missing/);
    expect(msgs([body('Hi {{name}}')])[0]).toMatch(/Invalid placeholder/);
    expect(msgs([body('Hi {{0}}')])[0]).toMatch(/Invalid placeholder/);
    expect(msgs([body('Hi {{ 1 }}')])[0]).toMatch(/Invalid placeholder/);
    expect(msgs([body('Say {{1}} and {{2}} now', 'a', 'b')])).toEqual([]);
  });

  it('applies the upstream\'s creation rules: sample values, a media header\'s handle, no variable at an edge of the body or beside another', () => {
    const { issues } = validateComponents([
      { type: 'HEADER', format: 'TEXT', text: 'Order {{1}}' },
      body('Hi {{1}} and {{2}} today.'),
      { type: 'BUTTONS', buttons: [{ type: 'URL', text: 'Track', url: 'https://x.example/t/{{1}}' }] },
    ]);
    expect(issues.map((i) => [i.loc, i.msg.split(':')[0]])).toEqual([
      [['body', 'components', 0, 'example'], 'HEADER'],
      [['body', 'components', 1, 'example'], 'BODY'],
      [['body', 'components', 2, 'buttons', 0, 'example'], 'BUTTONS'],
    ]);
    expect(msgs([body('Hi {{1}} and {{2}} today.', 'a')])[0]).toMatch(/2 values/);
    expect(msgs([body('{{1}} is your code.', 'a')])[0]).toMatch(/cannot start or end/);
    expect(msgs([body('Your code is {{1}}', 'a')])[0]).toMatch(/cannot start or end/);
    expect(msgs([body('Codes {{1}} {{2}} here.', 'a', 'b')])[0]).toMatch(/side by side/);
    for (const format of ['IMAGE', 'VIDEO', 'DOCUMENT']) expect(msgs([{ type: 'HEADER', format }, body('x')])[0]).toMatch(/header_handle/);
    expect(msgs([{ type: 'HEADER', format: 'LOCATION' }, body('x')])).toEqual([]);
    expect(msgs([body('Hi {{1}}, welcome.', 'Ana'), { type: 'BUTTONS', buttons: [{ type: 'URL', text: 'Go', url: 'https://x.example/{{1}}', example: ['https://x.example/a'] }] }])).toEqual([]);
  });

  it('enforces header and footer text rules', () => {
    expect(msgs([{ type: 'HEADER', format: 'TEXT', text: 'x'.repeat(61) }, body('b')])[0]).toMatch(/at most 60/);
    expect(msgs([{ type: 'HEADER', format: 'TEXT', text: '{{1}} {{2}}' }, body('b')])[0]).toMatch(/at most one variable/);
    expect(msgs([{ type: 'HEADER', format: 'TEXT' }, body('b')])[0]).toMatch(/text is required/);
    expect(msgs([body('b'), { type: 'FOOTER', text: 'Bye {{1}}' }])[0]).toMatch(/FOOTER text cannot contain variables/);
    expect(msgs([body('b'), { type: 'FOOTER', text: 'x'.repeat(61) }])[0]).toMatch(/at most 60/);
    expect(msgs([body('x'.repeat(1025))])[0]).toMatch(/at most 1024/);
  });

  it('enforces button rules', () => {
    const buttons = (...b: unknown[]) => [body('b'), { type: 'BUTTONS', buttons: b }];
    expect(msgs(buttons({ type: 'URL', text: 'Go' }))[0]).toMatch(/needs url/);
    expect(msgs(buttons({ type: 'URL', text: 'Go', url: 'ftp://x' }))[0]).toMatch(/needs url/);
    expect(msgs(buttons({ type: 'URL', text: 'Go', url: 'https://x.example/{{1}}/a' }))[0]).toMatch(/at the end/);
    expect(msgs(buttons({ type: 'PHONE_NUMBER', text: 'Call' }))[0]).toMatch(/phone_number/);
    expect(msgs(buttons({ type: 'CALL', text: 'Call' }))[0]).toMatch(/URL, PHONE_NUMBER, QUICK_REPLY/);
    expect(msgs(buttons({ type: 'QUICK_REPLY', text: 'x'.repeat(26) }))[0]).toMatch(/1-25/);
    expect(msgs(buttons(...[1, 2, 3].map(() => ({ type: 'URL', text: 'Go', url: 'https://x.example' }))))[0]).toMatch(/at most 2 URL/);
    expect(msgs([body('b'), { type: 'BUTTONS', buttons: [] }])[0]).toMatch(/non-empty buttons/);
  });

  it('reports locations and inputs', () => {
    const { issues } = validateComponents([body('ok'), { type: 'FOOTER', text: 'Hi {{1}}' }]);
    expect(issues[0]).toMatchObject({ type: 'placeholder', loc: ['body', 'components', 1, 'text'], input: 'Hi {{1}}' });
  });

  it('takes AUTHENTICATION templates in the upstream\'s copy-code shape and plans the code for the body and the OTP button', () => {
    const auth = [
      { type: 'BODY', add_security_recommendation: true },
      { type: 'FOOTER', code_expiration_minutes: 10 },
      { type: 'BUTTONS', buttons: [{ type: 'OTP', otp_type: 'copy_code', text: 'Copy code' }] },
    ];
    const { issues, plan } = validateComponents(auth, ['body', 'components'], 'AUTHENTICATION');
    expect(issues).toEqual([]);
    const expected = { header: null, body: 1, buttons: [{ index: 0, type: 'url', variables: 1, otp: true }] };
    expect(plan).toEqual(expected);
    expect(placeholderPlan(auth)).toEqual(expected);
    expect(placeholderPlan(auth.filter((c) => c.type !== 'FOOTER'))).toEqual(expected);

    const authMsgs = (components: unknown) => validateComponents(components, ['body', 'components'], 'AUTHENTICATION').issues.map((i) => i.msg);
    expect(authMsgs([{ type: 'BODY', text: 'Your code is {{1}}.' }, auth[2]])[0]).toMatch(/preset text/);
    expect(authMsgs([{ type: 'HEADER', format: 'TEXT', text: 'Code' }, ...auth])[0]).toMatch(/no HEADER/);
    expect(authMsgs([auth[0]])[0]).toMatch(/one OTP button/);
    expect(authMsgs([auth[0], { type: 'BUTTONS', buttons: [{ type: 'QUICK_REPLY', text: 'x' }] }])[0]).toMatch(/exactly one button, of type OTP/);
    expect(authMsgs([auth[0], { type: 'BUTTONS', buttons: [{ type: 'OTP', otp_type: 'SMOKE_SIGNAL' }] }])[0]).toMatch(/otp_type/);
    expect(authMsgs([auth[0], { type: 'BUTTONS', buttons: [{ type: 'OTP', otp_type: 'ONE_TAP' }] }])[0]).toMatch(/package_name and signature_hash/);
    expect(authMsgs([auth[0], { type: 'BUTTONS', buttons: [{ type: 'OTP', otp_type: 'ONE_TAP', package_name: 'com.example.app', signature_hash: 'K8a/AINcGX7' }] }])).toEqual([]);
    expect(authMsgs([auth[0], { type: 'FOOTER', code_expiration_minutes: 91 }, auth[2]])[0]).toMatch(/1 to 90/);
    expect(authMsgs([{ type: 'BODY', add_security_recommendation: 'yes' }, auth[2]])[0]).toMatch(/true or false/);
    // An OTP button is no button of other categories.
    expect(msgs([body('Hi'), auth[2]])[0]).toMatch(/OTP buttons belong to AUTHENTICATION templates/);
  });

  it('name and language patterns', () => {
    expect(TEMPLATE_NAME.test('order_shipped_v2')).toBe(true);
    expect(TEMPLATE_NAME.test('Order-Shipped')).toBe(false);
    for (const ok of ['en', 'en_US', 'pt_BR', 'zh_Hant_HK', 'fil']) expect(LANGUAGE.test(ok)).toBe(true);
    for (const bad of ['e', 'EN', 'en-US', 'en_', 'english_language']) expect(LANGUAGE.test(bad)).toBe(false);
  });
});
