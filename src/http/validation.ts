import { Ajv } from 'ajv';
import addFormats from 'ajv-formats';
import type { FastifyInstance } from 'fastify';

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
  const ajv = new Ajv({ coerceTypes, useDefaults: true, removeAdditional: true, addUsedSchema: false, allErrors: false, strict: false });
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
  app.setValidatorCompiler(({ schema, httpPart }) => (httpPart === 'body' ? bodies : textParts).compile(schema));
}
