import { Ajv } from 'ajv';
import { Type } from 'typebox';
import { describe, expect, it } from 'vitest';
import { collapseEnumIssues } from './error-handler.ts';
import { Nullable } from './nullable.ts';

const issuesOf = (schema: object, value: unknown) => {
  const validate = new Ajv({ allErrors: false, strict: false, verbose: true }).compile(schema);
  expect(validate(value)).toBe(false);
  return validate.errors ?? [];
};
const Tier = Type.Union(['250', '1K'].map((t) => Type.Literal(t)));

describe('collapseEnumIssues', () => {
  it('turns the const and anyOf issues of a union of literals into one issue naming the values', () => {
    expect(collapseEnumIssues(issuesOf(Type.Object({ tier: Tier }), { tier: '2K' }))).toEqual([
      expect.objectContaining({ keyword: 'enum', instancePath: '/tier', message: 'must be one of: 250, 1K', params: { allowedValues: ['250', '1K'] } }),
    ]);
  });

  it('also when the value has another type (each branch then says "must be string")', () => {
    const issues = issuesOf(Type.Object({ tier: Tier }), { tier: 250 });
    expect(issues.some((issue) => issue.keyword === 'type')).toBe(true);
    expect(collapseEnumIssues(issues)).toEqual([expect.objectContaining({ keyword: 'enum', instancePath: '/tier', message: 'must be one of: 250, 1K' })]);
  });

  it('says null is allowed too when the union is Nullable, and reads items of arrays by their own path', () => {
    expect(collapseEnumIssues(issuesOf(Type.Object({ tier: Nullable(Tier) }), { tier: '2K' }))).toEqual([
      expect.objectContaining({ instancePath: '/tier', message: 'must be null or one of: 250, 1K' }),
    ]);
    expect(collapseEnumIssues(issuesOf(Type.Object({ tiers: Type.Array(Tier) }), { tiers: ['1K', 'x'] }))).toEqual([
      expect.objectContaining({ instancePath: '/tiers/1', message: 'must be one of: 250, 1K' }),
    ]);
  });

  it('reads Ajv\'s enum keyword the same way', () => {
    expect(collapseEnumIssues(issuesOf({ type: 'object', properties: { n: { enum: [1, 'two'] } } }, { n: 3 }))).toEqual([
      expect.objectContaining({ instancePath: '/n', message: 'must be one of: 1, two' }),
    ]);
  });

  it('keeps the issues of a union with another kind of branch, and of other fields', () => {
    const mixed = issuesOf(Type.Object({ limit: Type.Union([Type.Literal('all'), Type.Integer({ minimum: 1 })]) }), { limit: 0 });
    expect(collapseEnumIssues(mixed)).toEqual(mixed);
    const plain = issuesOf(Type.Object({ name: Type.String({ maxLength: 2 }) }), { name: 'abc' });
    expect(collapseEnumIssues(plain)).toEqual(plain);
  });
});
