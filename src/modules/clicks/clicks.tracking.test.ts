import { randomBytes, randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { VariableMapping } from '../campaigns/campaigns.mapping.ts';
import { clickToken, destinationFor, isHttpsDestination, markTrackedButton, recipientOfToken, TOKEN_LENGTH, withClickToken } from './clicks.tracking.ts';

const key = randomBytes(32);
const BASE = 'https://links.example';
const TEMPLATE = [{ type: 'BODY', text: 'Hi' }, { type: 'BUTTONS', buttons: [{ type: 'QUICK_REPLY', text: 'No' }, { type: 'URL', text: 'Go', url: `${BASE}/r/{{1}}` }] }];
const contact = { first_name: 'A', last_name: null, phone: '+14155550100', email: null, company: null, job_title: null, status: null, source: 'api', custom_fields: { url: 'https://shop.example/a' } };
const mapping = (parameter: Record<string, unknown>): VariableMapping => ({ components: [{ type: 'button', index: 1, parameters: [parameter as never] }] });

describe('click tokens', () => {
  it('name their recipient under the key only: altered, foreign-key and malformed tokens name nobody', () => {
    const id = randomUUID();
    const token = clickToken(key, id);
    expect(token).toHaveLength(TOKEN_LENGTH);
    expect(recipientOfToken(key, token)).toBe(id);
    expect(recipientOfToken(randomBytes(32), token)).toBeNull();
    for (let i = 0; i < TOKEN_LENGTH; i += 5) {
      const altered = token.slice(0, i) + (token[i] === 'A' ? 'B' : 'A') + token.slice(i + 1);
      expect(recipientOfToken(key, altered), altered).toBeNull();
    }
    for (const bad of ['', 'x', token + 'A', token.slice(1), `${token.slice(0, 31)}=`, '../../etc/passwd']) expect(recipientOfToken(key, bad)).toBeNull();
  });

  it('accept only absolute https destinations', () => {
    for (const ok of ['https://shop.example', 'https://shop.example/a?b=c#d']) expect(isHttpsDestination(ok), ok).toBe(true);
    for (const bad of ['http://shop.example', 'javascript:alert(1)', '//shop.example', 'shop.example', 'https://user:pw@shop.example', '', `https://x.example/${'a'.repeat(2100)}`]) {
      expect(isHttpsDestination(bad), bad).toBe(false);
    }
  });

  it('mark the redirect button of the template and replace its parameter with the token when sending', () => {
    const marked = markTrackedButton(mapping({ kind: 'contact_field', field: 'custom_fields.url', fallback: 'https://shop.example/default' }), TEMPLATE, BASE);
    expect(marked.issues).toEqual([]);
    const id = randomUUID();
    const sent = withClickToken([{ type: 'button', sub_type: 'url', index: '1', parameters: [{ type: 'text', text: 'https://shop.example/a' }] }], marked.mapping, id, key);
    expect(sent[0].parameters).toEqual([{ type: 'text', text: clickToken(key, id) }]);
    expect(destinationFor(marked.mapping, contact)).toBe('https://shop.example/a');
    expect(destinationFor(marked.mapping, { ...contact, custom_fields: { url: 'http://x.example' } })).toBe('https://shop.example/default');
    expect(destinationFor(mapping({ kind: 'static', value: 'https://shop.example' }), contact)).toBeNull(); // not marked: not tracked
    expect(markTrackedButton(mapping({ kind: 'static', value: 'https://shop.example' }), TEMPLATE, 'https://other.example').issues[0].loc).toEqual(['body', 'track_clicks']);
    expect(markTrackedButton(mapping({ kind: 'static', value: 'http://shop.example' }), TEMPLATE, BASE).issues[0].loc).toEqual(['body', 'variable_mapping', 'components', 0, 'parameters', 0, 'value']);
  });
});
