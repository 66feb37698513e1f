import { Ajv, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import type { FastifyInstance, FastifySchema } from 'fastify';

/**
 * RFC 3339 allows what PostgreSQL's timestamptz refuses: year 0000 and UTC offsets beyond
 * +-15:59. Such a value is out of range (400) rather than a database error (500).
 */
function storableTimestamp(value: string): boolean {
  if (value.startsWith('0000')) return false;
  const offset = /([+-])(\d{2})(?::?\d{2})?$/.exec(value);
  return !offset || Number(offset[2]) <= 15;
}

function createAjv(coerceTypes: false | 'array') {
  // verbose: an issue carries its schema, so a union of literals' issues can name the allowed values (error-handler.ts).
  const ajv = new Ajv({ coerceTypes, verbose: true, useDefaults: true, removeAdditional: true, addUsedSchema: false, allErrors: false, strict: false });
  addFormats.default(ajv);
  const rfc3339 = ajv.formats['date-time'] as { validate: (value: string) => boolean };
  ajv.addFormat('date-time', { type: 'string', validate: (value: string) => rfc3339.validate(value) && storableTimestamp(value) });
  return ajv;
}

/**
 * Query strings and path parameters arrive as text, so they are coerced to the schema's types;
 * JSON bodies are not: `"first_name": 123` or `"tags": "vip"` is a 400, never silently converted.
 */
export function installValidators(app: FastifyInstance) {
  const bodies = createAjv(false);
  const textParts = createAjv('array');
  app.setValidatorCompiler(({ schema, httpPart }) => compiledAtFirstUse(() => (httpPart === 'body' ? bodies : textParts).compile(schema)));
  app.addHook('onRoute', (route) => {
    const schema = route.schema as FastifySchema | undefined;
    if (schema?.querystring) schema.querystring = optionalDefaults(schema.querystring);
    if (schema?.body) schema.body = optionalDefaults(schema.body);
  });
}

/**
 * An Ajv validator compiled when a request first needs it rather than at start: compiling every
 * route's schemas was a quarter of a second of the service's start, and the first request of a
 * route pays its own few milliseconds instead. It stands in for the Ajv function Fastify expects:
 * Fastify reads `schemaEnv` (so Ajv may replace a root value) and `errors` after a failed call.
 */
export function compiledAtFirstUse(compile: () => ValidateFunction): ValidateFunction {
  let validate: ValidateFunction | undefined;
  const compiled = () => (validate ??= compile());
  const lazy = ((data: unknown, dataCxt?: Parameters<ValidateFunction>[1]) => compiled()(data, dataCxt)) as ValidateFunction;
  Object.defineProperty(lazy, 'schemaEnv', { get: () => compiled().schemaEnv });
  Object.defineProperty(lazy, 'errors', { get: () => compiled().errors, set: (errors) => { compiled().errors = errors; } });
  return lazy;
}

type ObjectSchema = { properties?: Record<string, { default?: unknown }>; required?: string[] };

/**
 * A property with a default (page, limit, a send's language) is optional to the caller: the
 * validator fills it in (useDefaults), so handlers still always see it. TypeBox lists it as required,
 * which API descriptions would then show; the copy returned drops it from `required`.
 */
export function optionalDefaults<T>(schema: T): T {
  const object = schema as ObjectSchema | undefined;
  if (!object?.properties || !object.required) return schema;
  const required = object.required.filter((key) => object.properties?.[key]?.default === undefined);
  return required.length === object.required.length ? schema : { ...object, required } as T;
}
