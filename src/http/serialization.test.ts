import { describe, expect, it } from 'vitest';
import { serializersBuiltAtFirstUse } from './serialization.ts';

describe('serializersBuiltAtFirstUse', () => {
  // Fastify's serializerOpts reach fast-json-stringify (integers rounded up instead of truncated).
  const compiler = serializersBuiltAtFirstUse()(undefined, { rounding: 'ceil' });
  const route = (schema: unknown) => ({ method: 'GET', url: '/x', httpStatus: '200', schema });

  it('serializes as fast-json-stringify does, with the options given: only the declared properties, in their types', () => {
    const serialize = compiler(route({ type: 'object', properties: { n: { type: 'integer' }, s: { type: 'string' } } }));
    expect(serialize({ n: 1.6, s: 'a', secret: 'x' })).toBe('{"n":2,"s":"a"}');
    expect(serialize({ n: 3 })).toBe('{"n":3}');
  });

  it('builds the serializer at the first response, not when the route is registered', () => {
    // A schema fast-json-stringify refuses: registering it is fine, the first response fails.
    const serialize = compiler(route({ type: 'object', properties: { a: { $ref: '#/definitions/missing' } } }));
    expect(() => serialize({ a: 1 })).toThrow();
  });
});
