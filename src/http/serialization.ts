import { SerializerSelector, type SerializerFactory } from '@fastify/fast-json-stringify-compiler';

/**
 * Fastify's own response serializers (fast-json-stringify), each built when its route first answers
 * with that status rather than at start: building them for every route and status was 0.2-0.4 s of
 * CPU of each start, and the first response of each pays its own few milliseconds instead.
 */
export function serializersBuiltAtFirstUse(): SerializerFactory {
  const buildFactory = SerializerSelector();
  return (externalSchemas, options) => {
    const compile = buildFactory(externalSchemas, options);
    return (route) => {
      let serialize: ((doc: unknown) => string) | undefined;
      return (doc) => (serialize ??= compile(route))(doc);
    };
  };
}
