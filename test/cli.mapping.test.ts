import { describe, expect, it } from 'vitest';
import { buildMapping, MappingError, parseMapFlag, toContact } from '../packages/cli/src/import/mapping.ts';
import { batchKey } from '../packages/cli/src/import/importer.ts';

describe('msvc contacts import: column mapping', () => {
  it('guesses contact fields from the header and sends the other columns as custom_fields', () => {
    const mapping = buildMapping(['First Name', 'Surname', 'Mobile', 'E-mail', 'Organisation', 'Job title', 'Labels', 'Plan Tier', 'City', 'Name'], {});
    expect(mapping.fields).toEqual({
      first_name: 'First Name', last_name: 'Surname', phone: 'Mobile', email: 'E-mail', company: 'Organisation', job_title: 'Job title', tags: 'Labels',
    });
    // "Name" lost to "First Name" for first_name, so it is a custom field like the others.
    expect(mapping.custom).toEqual(['Plan Tier', 'City', 'Name']);
    const contact = toContact({ 'First Name': ' Ana ', Surname: '', Mobile: '+351912345678', 'E-mail': 'ana@example.com', Organisation: 'ACME', 'Job title': '', Labels: 'vip; early ;', 'Plan Tier': 'gold', City: '', Name: 'x' }, mapping, { tagSeparator: ';' });
    expect(contact).toEqual({
      first_name: 'Ana', phone: '+351912345678', email: 'ana@example.com', company: 'ACME', tags: ['vip', 'early'], custom_fields: { 'Plan Tier': 'gold', Name: 'x' },
    });
  });

  it('takes --map pairs over guesses, adds a source, and still sends an empty first name or phone for the service to refuse', () => {
    expect(parseMapFlag('phone=Tel 2, first_name=Who')).toEqual({ phone: 'Tel 2', first_name: 'Who' });
    const mapping = buildMapping(['Who', 'Phone', 'Tel 2', 'tags'], parseMapFlag('phone=Tel 2,first_name=Who'));
    expect(mapping.fields).toEqual({ phone: 'Tel 2', first_name: 'Who', tags: 'tags' });
    expect(mapping.custom).toEqual(['Phone']);
    expect(toContact({ Who: '', Phone: '1', 'Tel 2': '', tags: 'a|b' }, mapping, { tagSeparator: '|', source: 'fair' }))
      .toEqual({ first_name: '', phone: '', tags: ['a', 'b'], source: 'fair', custom_fields: { Phone: '1' } });
  });

  it('refuses a mapping without phone or first name, an unknown field or a missing column', () => {
    expect(() => buildMapping(['First name', 'Email'], {})).toThrow(/no phone column/);
    expect(() => buildMapping(['Phone', 'Email'], {})).toThrow(/no first-name column/);
    expect(() => parseMapFlag('nickname=Nick')).toThrow(MappingError);
    expect(() => parseMapFlag('phone')).toThrow(/field=Column/);
    expect(() => buildMapping(['Name', 'Phone'], { email: 'Mail' })).toThrow(/no such column/);
  });

  it('gives every batch of an import the same UUID-shaped Idempotency-Key on every run', () => {
    const key = batchKey('import-1', 7);
    expect(key).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(batchKey('import-1', 7)).toBe(key);
    expect(new Set([batchKey('import-1', 8), batchKey('import-2', 7), key]).size).toBe(3);
  });
});
