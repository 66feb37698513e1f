import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENT_TYPES } from '../src/events/events.ts';
import { ERROR_CODES } from '../src/http/errors.ts';
import { ADMIN_OPERATIONS, PUBLIC_OPERATIONS } from '../src/http/openapi.operations.ts';
import { adminHeaders, startTestApp, type TestApp } from './helpers/app.ts';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const METHODS = ['get', 'put', 'post', 'patch', 'delete'];

/** Every route the app serves, from Fastify's own route tree (`METHOD /full/path`, HEAD left out). */
function servedRoutes(app: FastifyInstance): { method: string; path: string }[] {
  const routes: { method: string; path: string }[] = [];
  const stack: string[] = [];
  for (const line of app.printRoutes({ commonPrefix: false }).split('\n')) {
    const match = /^([│ ]*)[├└]── (\S+)(?: \(([^)]+)\))?/.exec(line);
    if (!match) continue;
    const depth = match[1].length / 4;
    stack.length = depth;
    stack.push(match[2]);
    const path = stack.join('').replace(/:([a-z_]+)/g, '{$1}');
    for (const method of (match[3] ?? '').split(', ').filter((m) => m && m !== 'HEAD')) routes.push({ method: method.toLowerCase(), path });
  }
  return routes;
}

function operations(document: Json): { path: string; method: string; op: Json }[] {
  return Object.entries(document.paths as Json).flatMap(([path, item]) =>
    Object.entries(item as Json).filter(([method]) => METHODS.includes(method)).map(([method, op]) => ({ path, method, op: op as Json })));
}

describe('OpenAPI documents', () => {
  let t: TestApp;
  let publicDoc: Json;
  let adminDoc: Json;
  let routes: { method: string; path: string }[];

  beforeAll(async () => {
    t = await startTestApp({ OPENAPI_ENABLED: 'true' });
    routes = servedRoutes(t.app);
    const pub = await t.app.inject({ method: 'GET', url: '/openapi.json' });
    expect(pub.statusCode).toBe(200);
    publicDoc = pub.json();
    const adm = await t.app.inject({ method: 'GET', url: '/admin/v1/openapi.json', headers: adminHeaders });
    expect(adm.statusCode).toBe(200);
    adminDoc = adm.json();
  });
  afterAll(async () => { await t?.close(); });

  it('describes every public route, with an operationId, a summary and a declared tag, and nothing else of the API', () => {
    const publicRoutes = routes.filter((r) => r.path.startsWith('/api/v1/public/'));
    expect(publicRoutes.length).toBeGreaterThan(50);
    expect(publicDoc.openapi).toBe('3.1.0');
    expect(publicDoc.servers).toEqual([expect.objectContaining({ url: '/api/v1/public' })]);
    for (const route of publicRoutes) {
      const op = publicDoc.paths[route.path.slice('/api/v1/public'.length)]?.[route.method];
      expect(op, `${route.method} ${route.path}`).toBeDefined();
    }
    const declared = new Map((publicDoc.tags as Json[]).map((tag) => [tag.name, tag.description]));
    const ids = new Set<string>();
    for (const { path, method, op } of operations(publicDoc)) {
      expect(op.operationId, `${method} ${path}`).toMatch(/^[a-z][A-Za-z]+$/);
      expect(ids.has(op.operationId), `duplicate ${op.operationId}`).toBe(false);
      ids.add(op.operationId);
      expect(op.summary, `${method} ${path}`).toEqual(expect.any(String));
      expect(op.tags).toHaveLength(1);
      expect(declared.get(op.tags[0]), `tag ${op.tags[0]}`).toEqual(expect.any(String));
    }
    // Routes without an entry in openapi.operations.ts are listed here (and get a stand-in name).
    expect(publicDoc['x-undocumented-operations']).toBeUndefined();
    expect(adminDoc['x-undocumented-operations']).toBeUndefined();
    expect(operations(publicDoc).length).toBe(publicRoutes.length + 3); // and the two health routes and the click redirect
    // ...and no entry there outlives its route.
    for (const [table, document] of [[PUBLIC_OPERATIONS, publicDoc], [ADMIN_OPERATIONS, adminDoc]] as const) {
      for (const key of Object.keys(table)) {
        const [method, path] = key.split(' ');
        expect(document.paths[path]?.[method.toLowerCase()]?.operationId, key).toBe(table[key].operationId);
      }
    }
  });

  it('marks no optional query parameter required (page and limit have defaults)', () => {
    let paged = 0;
    for (const { path, method, op } of operations(publicDoc)) {
      for (const parameter of op.parameters ?? []) {
        if (parameter.in !== 'query') continue;
        expect(parameter.required, `${method} ${path} ${parameter.name}`).not.toBe(true);
        if (parameter.name === 'page') {
          paged += 1;
          expect(parameter.schema.default).toBe(1);
        }
      }
    }
    expect(paged).toBeGreaterThanOrEqual(9);
    expect(publicDoc.components.schemas.SendTemplateMessage.required).not.toContain('language');
  });

  it('documents every error response with the envelope schema and an example per code', () => {
    const seen = new Set<string>();
    const all = [publicDoc, adminDoc].flatMap((document) => operations(document).map((operation) => ({ ...operation, document })));
    for (const { path, method, op, document } of all) {
      const statuses = Object.keys(op.responses);
      // The click redirect answers 302 (or its 404 page), never 2xx.
      expect(statuses.some((s) => (path === '/r/{token}' ? /^302$/ : /^2/).test(s)), `${method} ${path}`).toBe(true);
      expect(statuses.some((s) => /^4/.test(s)), `${method} ${path}`).toBe(true);
      for (const [status, answer] of Object.entries(op.responses as Json)) {
        const response = answer.$ref ? document.components.responses[answer.$ref.split('/').pop()] : answer;
        expect(response.headers?.['X-Request-Id'], `${method} ${path} ${status}`).toBeDefined();
        if (Number(status) < 400) continue;
        if (path === '/r/{token}' && status === '404') {
          expect(response.content['text/html']).toBeDefined();
          continue;
        }
        const media = response.content['application/json'];
        const error = { $ref: '#/components/schemas/Error' };
        // A not-ready /readyz answers its own body; shutting down, the envelope.
        if (path === '/readyz' && status === '503') expect(media.schema.anyOf).toContainEqual(error);
        else expect(media.schema, `${method} ${path} ${status}`).toEqual(error);
        const examples = Object.values(media.examples as Json).filter((example) => example.value.success === false);
        expect(examples.length).toBeGreaterThan(0);
        for (const example of examples) {
          expect(example.value).toMatchObject({ success: false, error: { code: expect.any(String), message: expect.any(String) }, meta: { request_id: expect.any(String) } });
          seen.add(example.value.error.code);
        }
      }
    }
    expect([...seen].sort()).toEqual([...ERROR_CODES].sort());
    expect(publicDoc.components.schemas.Error.properties.error.properties.code.enum).toEqual([...ERROR_CODES]);

    const send = publicDoc.paths['/messages/template'].post;
    expect(Object.keys(send.responses)).toEqual(expect.arrayContaining(['200', '400', '401', '403', '404', '409', '429', '500', '502', '503', '504']));
    expect(Object.keys(send.responses[403].content['application/json'].examples)).toEqual(['FORBIDDEN', 'UPGRADE_REQUIRED']);
    expect(send.responses[429].headers['Retry-After']).toBeDefined();
    // Retry-After on 409 only where an Idempotency-Key can be still running.
    expect(Object.keys(send.responses[409].content['application/json'].examples)).toEqual(expect.arrayContaining(['IDEMPOTENCY_KEY_REUSED', 'IDEMPOTENCY_KEY_IN_PROGRESS']));
    expect(send.responses[409].headers['Retry-After']).toBeDefined();
    expect(publicDoc.paths['/contacts/{id}'].patch.responses[409].headers['Retry-After']).toBeUndefined();
    expect(send.parameters).toContainEqual({ $ref: '#/components/parameters/IdempotencyKey' });
    const webhooksUpgrade = publicDoc.paths['/webhooks'].get.responses[403].content['application/json'].examples.UPGRADE_REQUIRED.value.error;
    expect(webhooksUpgrade.feature_key).toBe('webhooks');
  });

  it('names the resources as reusable schemas and gives request examples', () => {
    const schemas = publicDoc.components.schemas;
    for (const name of ['Contact', 'Template', 'Campaign', 'CampaignDetail', 'WebhookEndpoint', 'Delivery', 'Media', 'Note', 'Followup', 'Error', 'Pagination', 'ContactPage']) {
      expect(schemas[name], name).toBeDefined();
    }
    const json = (op: Json, status: string) => op.responses[status].content['application/json'].schema;
    expect(json(publicDoc.paths['/contacts'].get, '200')).toEqual({ $ref: '#/components/schemas/ContactPage' });
    expect(schemas.ContactPage.properties.data.items).toEqual({ $ref: '#/components/schemas/Contact' });
    expect(schemas.ContactPage.properties.pagination).toEqual({ $ref: '#/components/schemas/Pagination' });
    expect(json(publicDoc.paths['/webhooks/{id}'].get, '200')).toEqual({ $ref: '#/components/schemas/WebhookEndpoint' });
    expect(schemas.Campaign.properties.status.enum).toEqual(['DRAFT', 'SCHEDULED', 'RUNNING', 'PAUSED', 'COMPLETED', 'STOPPED', 'FAILED']);

    for (const { path, method, op } of operations(publicDoc)) {
      const body = op.requestBody?.content?.['application/json'];
      if (body) expect(body.example, `${method} ${path}`).toBeDefined();
    }
    const upload = publicDoc.paths['/media'].post.requestBody.content['multipart/form-data'].schema;
    expect(schemas[upload.$ref.split('/').pop()]).toMatchObject({
      required: ['type', 'file'],
      properties: { type: { enum: ['image', 'video', 'document'] }, file: { type: 'string', format: 'binary' } },
    });
  });

  it('describes the 24 webhook events, their types as an enum, and their payloads', () => {
    const schemas = publicDoc.components.schemas;
    expect(schemas.EventType.enum).toEqual([...EVENT_TYPES]);
    expect(schemas.WebhookEndpointCreate.properties.events.items).toEqual({ $ref: '#/components/schemas/EventType' });
    expect(Object.keys(publicDoc.webhooks).sort()).toEqual([...EVENT_TYPES].sort());
    for (const type of EVENT_TYPES) {
      const post = publicDoc.webhooks[type].post;
      const ref: string = post.requestBody.content['application/json'].schema.$ref;
      const envelope = schemas[ref.split('/').pop()!];
      expect(envelope.required).toEqual(['id', 'type', 'created_at', 'data']);
      expect(envelope.properties.type.enum).toEqual([type]);
      expect(envelope.properties.data.$ref, type).toMatch(/^#\/components\/schemas\/\w+$/);
      expect(schemas[envelope.properties.data.$ref.split('/').pop()], type).toBeDefined();
      expect(post.parameters).toContainEqual({ $ref: '#/components/parameters/XServiceSignature' });
    }
    expect(schemas.MessageFailedEventData.required).toContain('error');
  });

  it('keeps the operator API in its own document, behind the admin token', async () => {
    expect(Object.keys(publicDoc.paths).some((p) => p.includes('admin') || p.includes('tenants'))).toBe(false);
    expect(publicDoc.components.schemas.Tenant).toBeUndefined();
    const adminRoutes = routes.filter((r) => r.path.startsWith('/admin/v1/') && r.path !== '/admin/v1/openapi.json');
    expect(adminRoutes.length).toBeGreaterThan(10);
    for (const route of adminRoutes) expect(adminDoc.paths[route.path.slice('/admin/v1'.length)]?.[route.method], `${route.method} ${route.path}`).toBeDefined();
    expect(operations(adminDoc).length).toBe(adminRoutes.length);
    expect(adminDoc.servers).toEqual([expect.objectContaining({ url: '/admin/v1' })]);
    expect(adminDoc.components.schemas.Contact).toBeUndefined();
    expect(adminDoc.webhooks).toBeUndefined();

    const anonymous = await t.app.inject({ method: 'GET', url: '/admin/v1/openapi.json' });
    expect(anonymous.statusCode).toBe(401);
    expect(anonymous.json().error.code).toBe('AUTHENTICATION_REQUIRED');
  });

  it('asks no credentials of the health routes and the click redirect, and a bearer key of every other operation', () => {
    expect(publicDoc.security).toEqual([{ bearer: [] }]);
    for (const path of ['/healthz', '/readyz', '/r/{token}']) {
      const op = publicDoc.paths[path].get;
      expect(op.security).toEqual([]);
      expect(op.servers).toEqual([expect.objectContaining({ url: '/' })]);
    }
    for (const { path, op } of operations(publicDoc)) if (!['/healthz', '/readyz', '/r/{token}'].includes(path)) expect(op.security).toBeUndefined();
  });

  it('serves the public document to the explorer at /docs', async () => {
    const page = await t.app.inject({ method: 'GET', url: '/docs/' });
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toMatch(/text\/html/);
    const explorer = await t.app.inject({ method: 'GET', url: '/docs/json' });
    expect(explorer.json()).toEqual(publicDoc);
  });
});

describe('OpenAPI documents when OPENAPI_ENABLED is false', () => {
  it('are not served', async () => {
    const t = await startTestApp({ OPENAPI_ENABLED: 'false' });
    try {
      expect((await t.app.inject({ method: 'GET', url: '/openapi.json' })).statusCode).toBe(404);
      expect((await t.app.inject({ method: 'GET', url: '/docs/' })).statusCode).toBe(404);
    } finally {
      await t.close();
    }
  });
});
