import { Ajv, type ValidateFunction } from 'ajv';
import { describe, expect, it } from 'vitest';
import { compiledAtFirstUse } from './validation.ts';

describe('compiledAtFirstUse', () => {
  const ajv = new Ajv({ coerceTypes: 'array', allErrors: false, strict: false });
  const counting = (schema: object) => {
    const compiles: ValidateFunction[] = [];
    const validate = compiledAtFirstUse(() => { const fn = ajv.compile(schema); compiles.push(fn); return fn; });
    return { validate, compiles };
  };

  it('compiles at the first validation, once', () => {
    const { validate, compiles } = counting({ type: 'object', properties: { n: { type: 'integer' } } });
    expect(compiles).toHaveLength(0);
    expect(validate({ n: 1 })).toBe(true);
    expect(validate({ n: 2 })).toBe(true);
    expect(compiles).toHaveLength(1);
  });

  it('shows the errors of the last validation and the compiled schema environment, as Fastify reads them', () => {
    const { validate, compiles } = counting({ type: 'object', required: ['n'], properties: { n: { type: 'integer' } } });
    // Fastify reads schemaEnv before the first call: reading it compiles.
    expect(validate.schemaEnv).toBeDefined();
    expect(validate.schemaEnv).toBe(compiles[0].schemaEnv);
    expect(validate({})).toBe(false);
    expect(validate.errors).toEqual([expect.objectContaining({ keyword: 'required', params: { missingProperty: 'n' } })]);
    expect(validate({ n: 1 })).toBe(true);
    expect(validate.errors).toBeNull();
  });

  it('passes the parent data on, so a coerced root value replaces the original', () => {
    const { validate } = counting({ type: 'integer' });
    const parent: Record<string, unknown> = { id: '42' };
    expect(validate(parent.id, { parentData: parent, parentDataProperty: 'id', rootData: parent, instancePath: '', dynamicAnchors: {} })).toBe(true);
    expect(parent.id).toBe(42);
  });
});
