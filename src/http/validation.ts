import { Ajv } from 'ajv';
import addFormats from 'ajv-formats';
import type { FastifyInstance } from 'fastify';

function createAjv(coerceTypes: false | 'array') {
  const ajv = new Ajv({ coerceTypes, useDefaults: true, removeAdditional: true, addUsedSchema: false, allErrors: false, strict: false });
  addFormats.default(ajv);
  return ajv;
}

/**
 * Query strings and path parameters arrive as text, so they are coerced to the schema's types;
 * JSON bodies are not: `"first_name": 123` or `"tags": "vip"` is a 400, never silently converted.
 */
export function installValidators(app: FastifyInstance) {
  const bodies = createAjv(false);
  const textParts = createAjv('array');
  app.setValidatorCompiler(({ schema, httpPart }) => (httpPart === 'body' ? bodies : textParts).compile(schema));
}
