import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AppError, conflict, ERROR_CODES, errorEnvelope, notFound, validationError } from '../src/http/errors.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { expectError } from './helpers/expect.ts';

/**
 * How every kind of failure becomes the spec's envelope (section 7): the status of each error code,
 * the framework's client errors with their status and message, validation issues as details, bodies
 * the parser refuses, a database outage (503, retryable) and bugs (500). Routes under /__test throw
 * exactly what Fastify, its plugins and the database driver throw.
 */
const CLIENT_ERRORS: [code: string, status: number, message: string][] = [
  ['FST_ERR_CTP_INVALID_JSON_BODY', 400, 'Malformed JSON body'],
  ['FST_ERR_CTP_EMPTY_JSON_BODY', 400, 'Request body is empty but Content-Type is application/json'],
  ['FST_ERR_CTP_INVALID_MEDIA_TYPE', 415, 'Unsupported Content-Type'],
  ['FST_ERR_CTP_BODY_TOO_LARGE', 413, 'Request body is too large'],
  ['FST_ERR_CTP_INVALID_CONTENT_LENGTH', 400, 'Invalid Content-Length'],
  ['FST_ERR_CTP_INVALID_TYPE', 400, 'Invalid Content-Type'],
  ['FST_INVALID_MULTIPART_CONTENT_TYPE', 400, 'Request is not multipart'],
  ['FST_REQ_FILE_TOO_LARGE', 413, 'File is too large'],
  ['FST_PARTS_LIMIT', 413, 'Too many parts'],
  ['FST_FILES_LIMIT', 413, 'Too many files'],
  ['FST_FIELDS_LIMIT', 413, 'Too many fields'],
];

describe('errors.ts: codes, statuses and the envelope', () => {
  it('the closed list of codes and the status each one answers with', () => {
    const statuses = {
      AUTHENTICATION_REQUIRED: 401, FORBIDDEN: 403, NOT_FOUND: 404, VALIDATION_ERROR: 400, RATE_LIMIT_EXCEEDED: 429,
      UPGRADE_REQUIRED: 403, CONFLICT: 409, INTERNAL_ERROR: 500, UPSTREAM_ERROR: 502, UPSTREAM_TIMEOUT: 504,
    };
    expect([...ERROR_CODES]).toEqual(Object.keys(statuses));
    for (const [code, status] of Object.entries(statuses)) {
      const err = new AppError(code as keyof typeof statuses, 'm');
      expect([err.status, err.code, err.message, err.extras], code).toEqual([status, code, 'm', {}]);
    }
    expect(new AppError('INTERNAL_ERROR', 'm', {}, 503).status).toBe(503);
  });

  it('the helpers build the documented errors', () => {
    expect(notFound('Contact')).toMatchObject({ status: 404, code: 'NOT_FOUND', message: 'Contact not found' });
    expect(conflict('taken')).toMatchObject({ status: 409, code: 'CONFLICT', message: 'taken' });
    expect(validationError('bad phone', ['body', 'phone'], '+1', 'phone_invalid')).toMatchObject({
      status: 400, code: 'VALIDATION_ERROR', message: 'bad phone', extras: { details: [{ type: 'phone_invalid', loc: ['body', 'phone'], msg: 'bad phone', input: '+1' }] },
    });
    expect(validationError('bad').extras).toEqual({ details: [{ type: 'value_error', loc: [], msg: 'bad', input: null }] });
    const before = Date.now();
    const envelope = errorEnvelope('req_1', 'CONFLICT', 'taken', { feature_key: 'x' });
    expect(envelope).toEqual({ success: false, error: { code: 'CONFLICT', message: 'taken', feature_key: 'x' }, meta: { request_id: 'req_1', timestamp: expect.any(String) } });
    expect(Date.parse(envelope.meta.timestamp)).toBeGreaterThanOrEqual(before);
    expect(new Date(envelope.meta.timestamp).toISOString()).toBe(envelope.meta.timestamp);
    expect(errorEnvelope('req_2', 'NOT_FOUND', 'x').error).toEqual({ code: 'NOT_FOUND', message: 'x' });
  });
});

describe('error handler: every failure in the envelope', () => {
  let t: TestApp;
  const logs: { level: number; msg: string }[] = [];
  let toThrow: unknown;
  beforeAll(async () => {
    t = await startTestApp({}, {
      logStream: { write: (line: string) => { logs.push(JSON.parse(line)); } },
      logLevel: 'warn',
      routes: (app) => {
        app.get('/__test/throw', async () => { throw toThrow; });
        app.post('/__test/throw', async () => { throw toThrow; });
        app.get('/__test/two-methods', async () => ({}));
        app.put('/__test/two-methods', async () => ({}));
        app.post('/__test/echo', async (request) => ({ got: request.body }));
        app.post('/__test/validated', { schema: { body: { type: 'object', required: ['tags'], properties: { tags: { type: 'array', items: { type: 'string' } } } } } }, async () => ({}));
        app.get('/__test/retry-after', async (_request, reply) => {
          reply.header('retry-after', '7');
          throw new AppError('RATE_LIMIT_EXCEEDED', 'slow down');
        });
      },
    });
  });
  afterAll(async () => { await t?.close(); });
  const thrown = (err: unknown) => { toThrow = err; return t.app.inject({ method: 'GET', url: '/__test/throw' }); };
  const framework = (fields: Record<string, unknown>) => Object.assign(new Error('framework detail'), fields);

  it('the framework\'s client errors answer their status and message, code VALIDATION_ERROR', async () => {
    for (const [code, status, message] of CLIENT_ERRORS) {
      const body = expectError(await thrown(framework({ code, statusCode: status })), status, 'VALIDATION_ERROR', message);
      expect(Object.keys(body).sort(), code).toEqual(['code', 'message']);
    }
  });

  it('bodies the JSON parser refuses, sent for real', async () => {
    const post = (payload: string, contentType?: string) =>
      t.app.inject({ method: 'POST', url: '/__test/echo', payload, headers: contentType ? { 'content-type': contentType } : {} });
    expectError(await post('{"a":', 'application/json'), 400, 'VALIDATION_ERROR', 'Malformed JSON body');
    expectError(await post('', 'application/json'), 400, 'VALIDATION_ERROR', 'Request body is empty but Content-Type is application/json');
    expectError(await post('<a/>', 'application/xml'), 415, 'VALIDATION_ERROR', 'Unsupported Content-Type');
    expectError(await post(JSON.stringify({ a: 'x'.repeat(1024 * 1024) }), 'application/json'), 413, 'VALIDATION_ERROR', 'Request body is too large');
    expect((await post('{"a":1}', 'application/json')).json()).toEqual({ got: { a: 1 } });
  });

  it('a SyntaxError, or a 400 that is not the framework\'s, is a malformed body; an unknown framework code is a bug', async () => {
    expectError(await thrown(new SyntaxError('Unexpected token')), 400, 'VALIDATION_ERROR', 'Malformed request body');
    expectError(await thrown(framework({ statusCode: 400, code: 'BAD_THING' })), 400, 'VALIDATION_ERROR', 'Malformed request body');
    expectError(await thrown(framework({ statusCode: 400 })), 400, 'VALIDATION_ERROR', 'Malformed request body');
    expectError(await thrown(framework({ statusCode: 400, code: 'FST_ERR_SOMETHING_NEW' })), 500, 'INTERNAL_ERROR', 'An unexpected error occurred. Retry with backoff.');
    expectError(await thrown(framework({ statusCode: 404 })), 500, 'INTERNAL_ERROR', 'An unexpected error occurred. Retry with backoff.');
  });

  it('an AppError keeps its code, status, message and extras', async () => {
    const res = await thrown(new AppError('FORBIDDEN', 'Missing required scope(s): contacts:write', { required_permissions: ['contacts:write'], current_permissions: [] }));
    expect(expectError(res, 403, 'FORBIDDEN', 'Missing required scope(s): contacts:write')).toEqual({
      code: 'FORBIDDEN', message: 'Missing required scope(s): contacts:write', required_permissions: ['contacts:write'], current_permissions: [],
    });
    expect(res.headers['retry-after']).toBeUndefined();
  });

  it('every 429 carries Retry-After: 1 unless the route set a more precise one', async () => {
    const res = await thrown(new AppError('RATE_LIMIT_EXCEEDED', 'slow down'));
    expectError(res, 429, 'RATE_LIMIT_EXCEEDED', 'slow down');
    expect(res.headers['retry-after']).toBe('1');
    const own = await t.app.inject({ method: 'GET', url: '/__test/retry-after' });
    expectError(own, 429, 'RATE_LIMIT_EXCEEDED');
    expect(own.headers['retry-after']).toBe('7');
  });

  it('a database outage is a retryable 503 with Retry-After, logged once per burst; a bug is a 500 logged every time', async () => {
    logs.length = 0;
    for (let i = 0; i < 3; i++) {
      const res = await thrown(framework({ code: '57P01' })); // admin_shutdown: the server went away
      expectError(res, 503, 'INTERNAL_ERROR', 'The service is temporarily unavailable. Retry with backoff.');
      expect(res.headers['retry-after']).toBe('1');
    }
    expect(logs.filter((l) => l.msg.startsWith('database unavailable'))).toEqual([expect.objectContaining({ level: 40 })]);
    for (let i = 0; i < 2; i++) {
      const res = await thrown(new TypeError('x is undefined'));
      expectError(res, 500, 'INTERNAL_ERROR', 'An unexpected error occurred. Retry with backoff.');
      expect(res.headers['retry-after']).toBeUndefined();
    }
    expect(logs.filter((l) => l.msg === 'unhandled error')).toHaveLength(2);
  });

  it('validation issues become details: location, field path, message and the offending input', async () => {
    const issue = (keyword: string, instancePath: string, message?: string, params?: Record<string, unknown>) => ({ keyword, instancePath, message, params });
    // As Fastify raises them; the inputs are read from the request (its query string here, no body).
    const validation = (issues: unknown[], context: string | undefined) => {
      toThrow = framework({ validation: issues, validationContext: context, statusCode: 400 });
      return t.app.inject({ method: 'GET', url: '/__test/throw?limit=abc&deep=1' });
    };

    const one = await validation([issue('type', '/limit', 'must be integer')], 'querystring');
    expect(expectError(one, 400, 'VALIDATION_ERROR', 'limit must be integer').details).toEqual([{ type: 'type', loc: ['query', 'limit'], msg: 'limit must be integer', input: 'abc' }]);

    const required = await validation([issue('required', '', 'must have required property \'name\'', { missingProperty: 'name' })], 'querystring');
    expect(expectError(required, 400, 'VALIDATION_ERROR', 'Field required').details).toEqual([{ type: 'missing', loc: ['query', 'name'], msg: 'Field required', input: null }]);

    const several = await validation([
      issue('additionalProperties', '', 'must NOT have additional properties', { additionalProperty: 'deep' }),
      issue('type', '/a~1b~0c/2', undefined),
      issue('type', '', 'must be object'),
      issue('required', '', 'x', { missingProperty: 7 }),
      issue('additionalProperties', '/limit', 'y', { additionalProperty: 7 }),
    ], undefined);
    expect(expectError(several, 400, 'VALIDATION_ERROR', 'Request validation failed').details).toEqual([
      { type: 'additionalProperties', loc: ['body', 'deep'], msg: 'deep must NOT have additional properties', input: null },
      { type: 'type', loc: ['body', 'a/b~c', 2], msg: 'a/b~c.2 is invalid', input: null },
      { type: 'type', loc: ['body'], msg: 'body must be object', input: null },
      { type: 'missing', loc: ['body'], msg: 'Field required', input: null },
      { type: 'additionalProperties', loc: ['body', 'limit'], msg: 'limit y', input: null },
    ]);

    const digits = await validation([issue('type', '/a1/12/3b', 'must be string')], 'body');
    expect(expectError(digits, 400, 'VALIDATION_ERROR', 'a1.12.3b must be string').details).toEqual([{ type: 'type', loc: ['body', 'a1', 12, '3b'], msg: 'a1.12.3b must be string', input: null }]);

    // Through a null in the body there is nothing to point at either.
    toThrow = framework({ validation: [issue('type', '/a/b', 'must be string'), issue('type', '/c', 'must be string')], validationContext: 'body', statusCode: 400 });
    const throughNull = await t.app.inject({ method: 'POST', url: '/__test/throw', payload: { a: null, c: 5 } });
    expect(expectError(throughNull, 400, 'VALIDATION_ERROR', 'Request validation failed').details).toEqual([
      { type: 'type', loc: ['body', 'a', 'b'], msg: 'a.b must be string', input: null },
      { type: 'type', loc: ['body', 'c'], msg: 'c must be string', input: 5 },
    ]);

    const deep = await validation([issue('minimum', '/deep', 'must be >= 2'), issue('type', '/limit/x', 'must be string')], 'querystring');
    expect(expectError(deep, 400, 'VALIDATION_ERROR', 'Request validation failed').details).toEqual([
      { type: 'minimum', loc: ['query', 'deep'], msg: 'deep must be >= 2', input: '1' },
      // Below a string there is nothing to point at.
      { type: 'type', loc: ['query', 'limit', 'x'], msg: 'limit.x must be string', input: null },
    ]);
  });

  it('a real body validation: the offending value at its path, array positions as numbers', async () => {
    const bad = await t.app.inject({ method: 'POST', url: '/__test/validated', payload: { tags: ['a', 5] } });
    expect(expectError(bad, 400, 'VALIDATION_ERROR', 'tags.1 must be string').details).toEqual([{ type: 'type', loc: ['body', 'tags', 1], msg: 'tags.1 must be string', input: 5 }]);
    const missing = await t.app.inject({ method: 'POST', url: '/__test/validated', payload: {} });
    expect(expectError(missing, 400, 'VALIDATION_ERROR', 'Field required').details).toEqual([{ type: 'missing', loc: ['body', 'tags'], msg: 'Field required', input: null }]);
  });

  it('unknown routes are 404 naming the route; a known path with another method is 405 with Allow', async () => {
    expectError(await t.app.inject({ method: 'GET', url: '/nowhere?x=1' }), 404, 'NOT_FOUND', 'Route GET /nowhere not found');
    const res = await t.app.inject({ method: 'DELETE', url: '/__test/echo?x=1' });
    expectError(res, 405, 'NOT_FOUND', 'Method DELETE is not allowed on /__test/echo');
    expect(res.headers.allow).toBe('POST');
    const two = await t.app.inject({ method: 'DELETE', url: '/__test/two-methods' });
    expectError(two, 405, 'NOT_FOUND', 'Method DELETE is not allowed on /__test/two-methods');
    expect(two.headers.allow).toBe('GET, HEAD, PUT');
  });
});
