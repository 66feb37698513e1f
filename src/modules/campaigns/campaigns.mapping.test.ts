import { describe, expect, it } from 'vitest';
import { placeholderPlan } from '../templates/templates.grammar.ts';
import {
  checkMappingAgainstTemplate, contactValue, fillPlaceholders, isContactField, mediaIdsOf, normaliseMapping, parameterText, renderComponents,
  resolveSendComponents, templateNeedsParameters, type MappedContact, type MediaForSend, type VariableMapping,
} from './campaigns.mapping.ts';

const MEDIA_ID = '0b7c6a5e-2f4d-4c1b-9a8e-3d2f1e0c9b8a';

const FULL_TEMPLATE = [
  { type: 'HEADER', format: 'TEXT', text: 'Order for {{1}} ready' },
  { type: 'BODY', text: 'Hello {{1}}, your order {{2}} has shipped.' },
  { type: 'FOOTER', text: 'Reply STOP to opt out' },
  { type: 'BUTTONS', buttons: [
    { type: 'URL', text: 'Track', url: 'https://shop.example/track/{{1}}' },
    { type: 'PHONE_NUMBER', text: 'Call us', phone_number: '+15551234567' },
    { type: 'QUICK_REPLY', text: 'Stop' },
  ] },
];
const IMAGE_TEMPLATE = [{ type: 'HEADER', format: 'IMAGE' }, { type: 'BODY', text: 'Our new catalogue is out.' }];
const PLAIN_TEMPLATE = [{ type: 'BODY', text: 'Our store opens today.' }];

const contact = (over: Partial<MappedContact> = {}): MappedContact => ({
  first_name: 'Ana', last_name: null, phone: '+14155550100', email: 'ana@example.com', company: null, job_title: '',
  status: 'active', source: 'website', custom_fields: { order: 'A-7', points: 42, vip: true, address: { city: 'Lima' }, empty: '', nothing: null }, ...over,
});

const fullMapping = (): VariableMapping => ({
  components: [
    { type: 'header', parameters: [{ kind: 'contact_field', field: 'company', fallback: 'friend' }] },
    { type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'contact_field', field: 'custom_fields.order', fallback: 'none' }] },
    { type: 'button', sub_type: 'url', index: 0, parameters: [{ kind: 'static', value: 'A7' }] },
  ],
});

const locs = (issues: { loc: (string | number)[] }[]) => issues.map((i) => i.loc);

describe('normaliseMapping', () => {
  it('keeps the known keys only, at every level, lower-cases type, kind and sub_type and upper-cases format', () => {
    const { mapping, issues } = normaliseMapping({
      components: [
        { type: 'HEADER', format: 'text', extra: 1, index: 3, sub_type: 'url', parameters: [{ kind: 'Static', value: 'x', field: 'first_name', other: true }] },
        { type: 'Body', format: 'IMAGE', parameters: [{ kind: 'contact_field', field: 'custom_fields.order', fallback: 'none', value: 'dropped' }, { kind: 'contact_field', field: 'email', fallback: null }] },
        { type: 'BUTTON', sub_type: 'URL', index: '1', parameters: [{ kind: 'media', media_id: MEDIA_ID.toUpperCase(), value: 'x' }] },
      ],
      name: 'dropped',
    });
    expect(issues).toEqual([]);
    expect(mapping).toEqual({
      components: [
        { type: 'header', format: 'TEXT', parameters: [{ kind: 'static', value: 'x' }] },
        { type: 'body', parameters: [{ kind: 'contact_field', field: 'custom_fields.order', fallback: 'none' }, { kind: 'contact_field', field: 'email' }] },
        { type: 'button', sub_type: 'url', index: 1, parameters: [{ kind: 'media', media_id: MEDIA_ID }] },
      ],
    });
    // Exactly these keys (toEqual ignores undefined-valued keys).
    expect(Object.keys(mapping!)).toEqual(['components']);
    expect(mapping!.components.map((c) => Object.keys(c).sort())).toEqual([['format', 'parameters', 'type'], ['parameters', 'type'], ['index', 'parameters', 'sub_type', 'type']]);
    expect(mapping!.components.flatMap((c) => c.parameters.map((p) => Object.keys(p).sort()))).toEqual([
      ['kind', 'value'], ['fallback', 'field', 'kind'], ['field', 'kind'], ['kind', 'media_id'],
    ]);
  });

  it('accepts an empty components list', () => {
    expect(normaliseMapping({ components: [] })).toEqual({ mapping: { components: [] }, issues: [] });
  });

  it('refuses what cannot be normalised, naming the path', () => {
    const cases: [unknown, (string | number)[]][] = [
      [null, ['body', 'variable_mapping']],
      ['{}', ['body', 'variable_mapping']],
      [[], ['body', 'variable_mapping']],
      [{}, ['body', 'variable_mapping', 'components']],
      [{ components: {} }, ['body', 'variable_mapping', 'components']],
      [{ components: Array.from({ length: 21 }, () => ({ type: 'body', parameters: [] })) }, ['body', 'variable_mapping', 'components']],
      [{ components: ['body'] }, ['body', 'variable_mapping', 'components', 0]],
      [{ components: [{ type: 'footer', parameters: [] }] }, ['body', 'variable_mapping', 'components', 0, 'type']],
      [{ components: [{ parameters: [] }] }, ['body', 'variable_mapping', 'components', 0, 'type']],
      [{ components: [{ type: 'body' }] }, ['body', 'variable_mapping', 'components', 0, 'parameters']],
      [{ components: [{ type: 'body', parameters: Array.from({ length: 101 }, () => ({ kind: 'static', value: 'x' })) }] }, ['body', 'variable_mapping', 'components', 0, 'parameters']],
      [{ components: [{ type: 'body', parameters: ['x'] }] }, ['body', 'variable_mapping', 'components', 0, 'parameters', 0]],
      [{ components: [{ type: 'body', parameters: [{ kind: 'template' }] }] }, ['body', 'variable_mapping', 'components', 0, 'parameters', 0, 'kind']],
      [{ components: [{ type: 'body', parameters: [{ value: 'x' }] }] }, ['body', 'variable_mapping', 'components', 0, 'parameters', 0, 'kind']],
      [{ components: [{ type: 'body', parameters: [{ kind: 'static', value: 5 }] }] }, ['body', 'variable_mapping', 'components', 0, 'parameters', 0, 'value']],
      [{ components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'password' }] }] }, ['body', 'variable_mapping', 'components', 0, 'parameters', 0, 'field']],
      [{ components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'tags' }] }] }, ['body', 'variable_mapping', 'components', 0, 'parameters', 0, 'field']],
      [{ components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'custom_fields.' }] }] }, ['body', 'variable_mapping', 'components', 0, 'parameters', 0, 'field']],
      [{ components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'custom_fields.a.b' }] }] }, ['body', 'variable_mapping', 'components', 0, 'parameters', 0, 'field']],
      [{ components: [{ type: 'body', parameters: [{ kind: 'contact_field' }] }] }, ['body', 'variable_mapping', 'components', 0, 'parameters', 0, 'field']],
      [{ components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'email', fallback: 3 }] }] }, ['body', 'variable_mapping', 'components', 0, 'parameters', 0, 'fallback']],
      [{ components: [{ type: 'header', parameters: [{ kind: 'media', media_id: 'logo.png' }] }] }, ['body', 'variable_mapping', 'components', 0, 'parameters', 0, 'media_id']],
      [{ components: [{ type: 'header', format: 'GIF', parameters: [] }] }, ['body', 'variable_mapping', 'components', 0, 'format']],
      [{ components: [{ type: 'button', parameters: [] }] }, ['body', 'variable_mapping', 'components', 0, 'index']],
      [{ components: [{ type: 'button', index: 10, parameters: [] }] }, ['body', 'variable_mapping', 'components', 0, 'index']],
      [{ components: [{ type: 'button', index: 1.5, parameters: [] }] }, ['body', 'variable_mapping', 'components', 0, 'index']],
      [{ components: [{ type: 'button', index: 0, sub_type: 7, parameters: [] }] }, ['body', 'variable_mapping', 'components', 0, 'sub_type']],
      [{ components: [{ type: 'body', parameters: [] }, { type: 'button', index: -1, parameters: [] }] }, ['body', 'variable_mapping', 'components', 1, 'index']],
    ];
    for (const [raw, loc] of cases) {
      const { mapping, issues } = normaliseMapping(raw);
      expect(mapping, JSON.stringify(raw)).toBeNull();
      expect(locs(issues), JSON.stringify(raw)).toContainEqual(loc);
      for (const i of issues) expect(Object.keys(i).sort()).toEqual(['input', 'loc', 'msg', 'type']);
    }
  });

  it('accepts every contact column and custom_fields.<key> as a field, nothing else', () => {
    for (const f of ['first_name', 'last_name', 'phone', 'email', 'company', 'job_title', 'status', 'source', 'custom_fields.order', 'custom_fields.Loyalty-Tier']) {
      expect(isContactField(f), f).toBe(true);
    }
    for (const f of ['id', 'tenant_id', 'tags', 'custom_fields', 'custom_fields.', 'custom_fields.a b', 'First_Name', 'first_name ', `custom_fields.${'k'.repeat(101)}`]) {
      expect(isContactField(f), f).toBe(false);
    }
  });
});

describe('checkMappingAgainstTemplate', () => {
  const plan = placeholderPlan(FULL_TEMPLATE);
  const check = (mapping: VariableMapping | null, p = plan) => checkMappingAgainstTemplate(mapping, p);

  it('accepts a mapping with one entry per component that has parameters, each with as many parameters as placeholders', () => {
    expect(check(fullMapping())).toEqual([]);
    expect(check({ components: [] }, placeholderPlan(PLAIN_TEMPLATE))).toEqual([]);
    expect(check(null, placeholderPlan(PLAIN_TEMPLATE))).toEqual([]);
    expect(check({ components: [{ type: 'header', format: 'IMAGE', parameters: [{ kind: 'media', media_id: MEDIA_ID }] }] }, placeholderPlan(IMAGE_TEMPLATE))).toEqual([]);
  });

  it('knows which templates need a mapping', () => {
    expect(templateNeedsParameters(plan)).toBe(true);
    expect(templateNeedsParameters(placeholderPlan(IMAGE_TEMPLATE))).toBe(true);
    expect(templateNeedsParameters(placeholderPlan(PLAIN_TEMPLATE))).toBe(false);
    expect(templateNeedsParameters(placeholderPlan([{ type: 'BODY', text: 'x' }, { type: 'BUTTONS', buttons: [{ type: 'URL', text: 'Go', url: 'https://a.example/{{1}}' }] }]))).toBe(true);
  });

  it('requires the parameter count of each component to equal its placeholders', () => {
    const m = fullMapping();
    m.components[1].parameters.pop();
    expect(locs(check(m))).toEqual([['body', 'variable_mapping', 'components', 1, 'parameters']]);
    const more = fullMapping();
    more.components[0].parameters.push({ kind: 'static', value: 'x' });
    expect(locs(check(more))).toEqual([['body', 'variable_mapping', 'components', 0, 'parameters']]);
    const button = fullMapping();
    button.components[2].parameters = [];
    expect(locs(check(button))).toEqual([['body', 'variable_mapping', 'components', 2, 'parameters']]);
    expect(check(m)[0].msg).toMatch(/2 placeholders.*gives 1/);
    // A body of a template without body variables takes no parameters.
    expect(locs(check({ components: [{ type: 'body', parameters: [{ kind: 'static', value: 'x' }] }] }, placeholderPlan(PLAIN_TEMPLATE))))
      .toEqual([['body', 'variable_mapping', 'components', 0, 'parameters']]);
  });

  it('requires every component with placeholders to be mapped', () => {
    const missingBody = fullMapping();
    missingBody.components.splice(1, 1);
    const issues = check(missingBody);
    expect(issues).toHaveLength(1);
    expect(issues[0]).toMatchObject({ loc: ['body', 'variable_mapping', 'components'], type: 'missing' });
    expect(issues[0].msg).toMatch(/body/);
    const all = check({ components: [] });
    expect(all.map((i) => i.msg).join(' ')).toMatch(/body.*header.*button 0/);
    expect(check(null).length).toBe(3);
    expect(check(null, placeholderPlan(IMAGE_TEMPLATE))).toHaveLength(1);
  });

  it('requires a button entry to name a button that takes parameters', () => {
    for (const index of [1, 2, 5]) {
      const m = fullMapping();
      m.components.push({ type: 'button', index, parameters: [{ kind: 'static', value: 'x' }] });
      expect(locs(check(m)), String(index)).toEqual([['body', 'variable_mapping', 'components', 3, 'index']]);
    }
    const wrongSubType = fullMapping();
    wrongSubType.components[2].sub_type = 'quick_reply';
    expect(locs(check(wrongSubType))).toEqual([['body', 'variable_mapping', 'components', 2, 'sub_type']]);
  });

  it('refuses a component mapped twice, a header the template lacks, a wrong header format and misplaced media', () => {
    const twice = fullMapping();
    twice.components.push({ type: 'body', parameters: [{ kind: 'static', value: 'a' }, { kind: 'static', value: 'b' }] });
    expect(locs(check(twice))).toEqual([['body', 'variable_mapping', 'components', 3]]);
    expect(locs(check({ components: [{ type: 'header', parameters: [] }] }, placeholderPlan(PLAIN_TEMPLATE)))).toEqual([['body', 'variable_mapping', 'components', 0]]);
    const wrongFormat = fullMapping();
    wrongFormat.components[0].format = 'IMAGE';
    expect(locs(check(wrongFormat))).toEqual([['body', 'variable_mapping', 'components', 0, 'format']]);
    const mediaInBody = fullMapping();
    mediaInBody.components[1].parameters[0] = { kind: 'media', media_id: MEDIA_ID };
    expect(locs(check(mediaInBody))).toEqual([['body', 'variable_mapping', 'components', 1, 'parameters', 0, 'kind']]);
    const mediaInTextHeader = fullMapping();
    mediaInTextHeader.components[0].parameters[0] = { kind: 'media', media_id: MEDIA_ID };
    expect(locs(check(mediaInTextHeader))).toEqual([['body', 'variable_mapping', 'components', 0, 'parameters', 0, 'kind']]);
    const textInImageHeader = { components: [{ type: 'header' as const, parameters: [{ kind: 'static' as const, value: 'x' }] }] };
    expect(locs(check(textInImageHeader, placeholderPlan(IMAGE_TEMPLATE)))).toEqual([['body', 'variable_mapping', 'components', 0, 'parameters', 0, 'kind']]);
  });

  it('lists every media id once', () => {
    const other = '1b7c6a5e-2f4d-4c1b-9a8e-3d2f1e0c9b8a';
    expect(mediaIdsOf({ components: [
      { type: 'header', parameters: [{ kind: 'media', media_id: MEDIA_ID }] },
      { type: 'body', parameters: [{ kind: 'media', media_id: MEDIA_ID }, { kind: 'media', media_id: other }, { kind: 'static', value: 'x' }] },
    ] })).toEqual([MEDIA_ID, other]);
    expect(mediaIdsOf(null)).toEqual([]);
  });
});

describe('contactValue and parameterText', () => {
  it('reads columns and custom fields as text, empty when missing', () => {
    const c = contact();
    expect(contactValue(c, 'first_name')).toBe('Ana');
    expect(contactValue(c, 'company')).toBe('');
    expect(contactValue(c, 'job_title')).toBe('');
    expect(contactValue(c, 'source')).toBe('website');
    expect(contactValue(c, 'custom_fields.order')).toBe('A-7');
    expect(contactValue(c, 'custom_fields.points')).toBe('42');
    expect(contactValue(c, 'custom_fields.vip')).toBe('true');
    expect(contactValue(c, 'custom_fields.address')).toBe('{"city":"Lima"}');
    expect(contactValue(c, 'custom_fields.nothing')).toBe('');
    expect(contactValue(c, 'custom_fields.absent')).toBe('');
    expect(contactValue(contact({ custom_fields: null as never }), 'custom_fields.order')).toBe('');
  });

  it('never reads inherited properties as custom fields', () => {
    const c = contact();
    for (const key of ['__proto__', 'constructor', 'toString', 'hasOwnProperty']) {
      expect(contactValue(c, `custom_fields.${key}`), key).toBe('');
      expect(parameterText({ kind: 'contact_field', field: `custom_fields.${key}`, fallback: 'fb' }, c), key).toBe('fb');
    }
    expect(contactValue(contact({ custom_fields: { constructor: 'own' } }), 'custom_fields.constructor')).toBe('own');
  });

  it('uses the fallback for an empty value, else empty', () => {
    const c = contact();
    expect(parameterText({ kind: 'static', value: 'Hi' }, c)).toBe('Hi');
    expect(parameterText({ kind: 'contact_field', field: 'first_name', fallback: 'friend' }, c)).toBe('Ana');
    expect(parameterText({ kind: 'contact_field', field: 'company', fallback: 'friend' }, c)).toBe('friend');
    expect(parameterText({ kind: 'contact_field', field: 'custom_fields.empty', fallback: 'friend' }, c)).toBe('friend');
    expect(parameterText({ kind: 'contact_field', field: 'custom_fields.empty' }, c)).toBe('');
    expect(parameterText({ kind: 'contact_field', field: 'custom_fields.points', fallback: '0' }, contact({ custom_fields: { points: 0 } }))).toBe('0');
  });
});

describe('resolveSendComponents', () => {
  const plan = placeholderPlan(FULL_TEMPLATE);

  it('builds the upstream components for one contact', () => {
    expect(resolveSendComponents(fullMapping(), plan, contact(), new Map())).toEqual([
      { type: 'header', parameters: [{ type: 'text', text: 'friend' }] },
      { type: 'body', parameters: [{ type: 'text', text: 'Ana' }, { type: 'text', text: 'A-7' }] },
      { type: 'button', sub_type: 'url', index: '0', parameters: [{ type: 'text', text: 'A7' }] },
    ]);
    const other = contact({ first_name: 'Bo', company: 'Acme', custom_fields: {} });
    expect(resolveSendComponents(fullMapping(), plan, other, new Map()).map((c) => c.parameters.map((p) => p.text))).toEqual([['Acme'], ['Bo', 'none'], ['A7']]);
  });

  it('takes a button sub_type from the template when the mapping leaves it out', () => {
    const m = fullMapping();
    delete m.components[2].sub_type;
    expect(resolveSendComponents(m, plan, contact(), new Map())[2]).toEqual({ type: 'button', sub_type: 'url', index: '0', parameters: [{ type: 'text', text: 'A7' }] });
  });

  it('sends media by its upstream id (documents with their filename) and refuses unresolved media', () => {
    const mapping: VariableMapping = { components: [{ type: 'header', parameters: [{ kind: 'media', media_id: MEDIA_ID }] }] };
    const image = new Map<string, MediaForSend>([[MEDIA_ID, { type: 'image', upstreamId: 'up-1', filename: 'a.png' }]]);
    expect(resolveSendComponents(mapping, placeholderPlan(IMAGE_TEMPLATE), contact(), image)).toEqual([{ type: 'header', parameters: [{ type: 'image', image: { id: 'up-1' } }] }]);
    const doc = new Map<string, MediaForSend>([[MEDIA_ID, { type: 'document', upstreamId: 'up-2', filename: 'terms.pdf' }]]);
    expect(resolveSendComponents(mapping, placeholderPlan(IMAGE_TEMPLATE), contact(), doc)[0].parameters).toEqual([{ type: 'document', document: { id: 'up-2', filename: 'terms.pdf' } }]);
    expect(() => resolveSendComponents(mapping, placeholderPlan(IMAGE_TEMPLATE), contact(), new Map())).toThrow(/not resolved/);
  });

  it('sends no components without a mapping', () => {
    expect(resolveSendComponents(null, placeholderPlan(PLAIN_TEMPLATE), contact(), new Map())).toEqual([]);
  });
});

describe('renderComponents', () => {
  it('replaces the placeholders of every text-bearing component as a send fills them', () => {
    expect(renderComponents(FULL_TEMPLATE, fullMapping(), contact())).toEqual([
      { type: 'header', text: 'Order for friend ready' },
      { type: 'body', text: 'Hello Ana, your order A-7 has shipped.' },
      { type: 'footer', text: 'Reply STOP to opt out' },
      { type: 'button', text: 'Track (https://shop.example/track/A7)' },
      { type: 'button', text: 'Call us (+15551234567)' },
      { type: 'button', text: 'Stop' },
    ]);
  });

  it('uses the fallback, or empty, for missing values, and agrees with the send', () => {
    const noFallback = fullMapping();
    noFallback.components[0].parameters = [{ kind: 'contact_field', field: 'company' }];
    const c = contact({ first_name: '', custom_fields: {} });
    const rendered = renderComponents(FULL_TEMPLATE, noFallback, c);
    expect(rendered.slice(0, 2)).toEqual([{ type: 'header', text: 'Order for  ready' }, { type: 'body', text: 'Hello , your order none has shipped.' }]);
    const sent = resolveSendComponents(noFallback, placeholderPlan(FULL_TEMPLATE), c, new Map());
    expect(sent[1].parameters.map((p) => p.text)).toEqual(['', 'none']);
  });

  it('repeats a placeholder used twice and shows media headers by kind', () => {
    const template = [{ type: 'HEADER', format: 'VIDEO' }, { type: 'BODY', text: 'Hi {{1}}, {{1}} again, code {{2}}.' }];
    const mapping: VariableMapping = { components: [{ type: 'body', parameters: [{ kind: 'static', value: 'X' }, { kind: 'static', value: 'Y' }] }] };
    expect(renderComponents(template, mapping, contact())).toEqual([{ type: 'header', text: '[video]' }, { type: 'body', text: 'Hi X, X again, code Y.' }]);
    expect(renderComponents(PLAIN_TEMPLATE, null, contact())).toEqual([{ type: 'body', text: 'Our store opens today.' }]);
    expect(fillPlaceholders('{{1}}-{{3}}', ['a'])).toBe('a-');
  });
});
