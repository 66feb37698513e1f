import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';
import { EVENT_TYPES } from '../events/events.ts';
import { assertAdminToken } from '../modules/admin/admin.service.ts';
import * as admin from '../modules/admin/admin.schemas.ts';
import * as campaigns from '../modules/campaigns/campaigns.schemas.ts';
import * as activity from '../modules/contacts/activity.schemas.ts';
import * as contacts from '../modules/contacts/contacts.schemas.ts';
import * as media from '../modules/media/media.schemas.ts';
import { MEDIA_RULES } from '../modules/media/media.types.ts';
import * as messages from '../modules/messages/messages.schemas.ts';
import * as templates from '../modules/templates/templates.schemas.ts';
import { upgradeMessage, type Feature } from '../modules/tenants/plans.ts';
import * as webhooks from '../modules/webhooks/webhooks.schemas.ts';
import { safeEqual } from '../crypto/safe-equal.ts';
import { ERROR_CODES, type ErrorCode, type ErrorExtras } from './errors.ts';
import { DELIVERY_HEADERS, EVENT_DATA_SCHEMAS, eventSchemas, webhookOperations } from './openapi.events.ts';
import { ADMIN_OPERATIONS, ADMIN_TAGS, PUBLIC_OPERATIONS, PUBLIC_TAGS, type OperationDoc } from './openapi.operations.ts';
import { Pagination } from './pagination.ts';
import { optionalDefaults } from './validation.ts';

/**
 * The API descriptions: `/openapi.json` (the public API, also shown by the explorer at `/docs`)
 * and `/admin/v1/openapi.json` (the operator API, behind the admin token). Both are cut from the
 * one document @fastify/swagger builds from the routes' own schemas; this file adds what the
 * routes do not say: operation names and tags (openapi.operations.ts), every error response with
 * the envelope, headers, named schemas, and the webhook events.
 */
export const PUBLIC_DOCUMENT_URL = '/openapi.json';
export const ADMIN_DOCUMENT_URL = '/admin/v1/openapi.json';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const schemaRef = (name: string) => ({ $ref: `#/components/schemas/${name}` });

/**
 * Route schemas given a name in the documents: wherever one appears (after the same conversion the
 * plugin applies to the routes), it becomes a reference to its component.
 */
const NAMED_SCHEMAS: Record<string, unknown> = {
  Pagination,
  Confirmation: contacts.MessageResult,
  Contact: contacts.Contact,
  ContactCreate: contacts.ContactCreate,
  ContactUpdate: contacts.ContactPatch,
  ContactPage: contacts.ContactPage,
  ContactSearch: contacts.SearchBody,
  ContactBulkCreate: contacts.BulkCreate,
  ContactBulkResult: contacts.BulkResult,
  Note: activity.Note,
  NoteCreate: activity.NoteCreate,
  NotePage: activity.NotePage,
  Followup: activity.Followup,
  FollowupCreate: activity.FollowupCreate,
  FollowupUpdate: activity.FollowupPatch,
  FollowupPage: activity.FollowupPage,
  Communication: activity.Communication,
  CommunicationPage: activity.CommunicationPage,
  Template: templates.Template,
  TemplateCreate: templates.TemplateCreate,
  TemplatePage: templates.TemplatePage,
  SendTemplateMessage: messages.SendTemplateMessage,
  SendComponent: messages.SendComponentInput,
  SendResult: messages.SendResult,
  Message: messages.Message,
  MessagePage: messages.MessagePage,
  Media: media.Media,
  MediaPage: media.MediaPage,
  Campaign: campaigns.Campaign,
  CampaignDetail: campaigns.CampaignDetail,
  CampaignList: campaigns.CampaignList,
  CampaignCreate: campaigns.CampaignCreate,
  CampaignStats: campaigns.CampaignStats,
  CampaignPreflight: campaigns.Preflight,
  CampaignAudience: campaigns.AudienceRow,
  CampaignAudienceInput: campaigns.AudienceBody,
  CampaignSchedule: campaigns.ScheduleBody,
  AudiencePreview: campaigns.AudiencePreview,
  FieldCoverageRequest: campaigns.FieldCoverageBody,
  FieldCoverage: campaigns.FieldCoverage,
  RenderPreviewRequest: campaigns.RenderBody,
  RenderPreview: campaigns.RenderPreview,
  CampaignErrorsSummary: campaigns.ErrorsSummary,
  CampaignErrorRecipients: campaigns.ErrorDrillDown,
  CampaignRecipient: campaigns.Recipient,
  CampaignRecipientPage: campaigns.RecipientPage,
  RetargetRequest: campaigns.RetargetBody,
  WebhookEndpoint: webhooks.Endpoint,
  WebhookEndpointCreate: webhooks.EndpointCreate,
  WebhookEndpointUpdate: webhooks.EndpointUpdate,
  WebhookEndpointCreated: webhooks.EndpointCreated,
  WebhookEndpointList: webhooks.EndpointList,
  WebhookSecretRotated: webhooks.SecretRotated,
  WebhookTestResult: webhooks.TestResult,
  Delivery: webhooks.Delivery,
  DeliveryPage: webhooks.DeliveryPage,
  DeliveryMetrics: webhooks.DeliveryMetrics,
  DeliveryRetry: webhooks.RetryResult,
  DeliveryRecoverRequest: webhooks.RecoverBody,
  DeliveryRecoverResult: webhooks.RecoverResult,
  Tenant: admin.Tenant,
  TenantPage: admin.TenantPage,
  TenantCreate: admin.TenantCreate,
  TenantUpdate: admin.TenantPatch,
  ApiKey: admin.ApiKey,
  ApiKeyCreate: admin.ApiKeyCreate,
  ApiKeyCreated: admin.CreatedApiKey,
  BusinessAccount: admin.BusinessAccount,
  BusinessAccountConnect: admin.BusinessAccountConnect,
  BusinessAccountUpdate: admin.BusinessAccountPatch,
  ScopeVocabulary: admin.ScopeVocabulary,
};

const nullable = (schema: Json) => ({ anyOf: [{ type: 'null' }, schema] });

/** Schemas only the documents have (the routes' own are in NAMED_SCHEMAS). */
const DOCUMENT_SCHEMAS: Json = {
  Error: {
    type: 'object',
    description: 'The envelope of every error response (spec section 7). Branch on `error.code`; `error.message` is for people and may change.',
    required: ['success', 'error', 'meta'],
    properties: {
      success: { type: 'boolean', enum: [false] },
      error: {
        type: 'object',
        required: ['code', 'message'],
        properties: {
          code: { type: 'string', enum: [...ERROR_CODES] },
          message: { type: 'string' },
          details: { type: 'array', items: schemaRef('ValidationIssue'), description: 'Validation errors only.' },
          required_permissions: { type: 'array', items: { type: 'string' }, description: 'Missing-scope 403 only: the scopes the operation needs.' },
          current_permissions: { type: 'array', items: { type: 'string' }, description: 'Missing-scope 403 only: the scopes of the key.' },
          upgrade_required: { type: 'boolean', description: 'Plan-gate 403 (UPGRADE_REQUIRED) only.' },
          feature_key: { type: 'string', description: 'Plan-gate 403 only: the feature the plan lacks.' },
          upstream_error: {
            type: 'object', required: ['code', 'title', 'details'], description: 'A refusal by the messaging platform (send only): its numeric error code, title and details.',
            properties: { code: { type: 'integer' }, title: { type: 'string' }, details: nullable({ type: 'string' }) },
          },
        },
      },
      meta: {
        type: 'object',
        required: ['request_id', 'timestamp'],
        properties: {
          request_id: { type: 'string', description: 'Equals the X-Request-Id header.' },
          timestamp: { type: 'string', format: 'date-time' },
        },
      },
    },
  },
  ValidationIssue: {
    type: 'object',
    required: ['type', 'loc', 'msg', 'input'],
    properties: {
      type: { type: 'string', description: 'What failed, e.g. missing, maxLength, value_error.' },
      loc: { type: 'array', items: { anyOf: [{ type: 'string' }, { type: 'integer' }] }, description: 'Where: body, query, path or header, then the field path.' },
      msg: { type: 'string' },
      input: { description: 'The value refused (null when missing).' },
    },
  },
  EventType: { type: 'string', enum: [...EVENT_TYPES], description: 'Spec 6.1: the 24 event types.' },
  VariableMapping: {
    type: 'object',
    description: 'Spec 2.2: resolved against each contact at send time into the template parameters. Unknown keys are dropped.',
    required: ['components'],
    properties: {
      components: {
        type: 'array',
        items: {
          type: 'object',
          required: ['type', 'parameters'],
          properties: {
            type: { type: 'string', enum: ['header', 'body', 'button'] },
            format: { type: 'string', enum: ['IMAGE', 'VIDEO', 'DOCUMENT', 'TEXT'], description: 'Header only.' },
            sub_type: { type: 'string', description: 'Button only, e.g. url.' },
            index: { type: 'integer', description: 'Button only: its position.' },
            track_clicks: { type: 'boolean', readOnly: true, description: 'Set by the service (never taken from input) on the URL button a `track_clicks` campaign sends its click-tracking link in; its parameter is the destination.' },
            parameters: {
              type: 'array',
              items: {
                type: 'object',
                required: ['kind'],
                properties: {
                  kind: { type: 'string', enum: ['static', 'contact_field', 'media'] },
                  value: { type: 'string', description: 'kind static: the same for every recipient.' },
                  field: { type: 'string', description: 'kind contact_field: a contact column or `custom_fields.<key>`.' },
                  fallback: { type: 'string', description: 'kind contact_field: used when the contact has no value.' },
                  media_id: { type: 'string', format: 'uuid', description: 'kind media: an id from POST /media.' },
                },
              },
            },
          },
        },
      },
    },
  },
  MediaUpload: {
    type: 'object',
    required: ['type', 'file'],
    properties: {
      type: { type: 'string', enum: ['image', 'video', 'document'] },
      file: { type: 'string', format: 'binary', contentMediaType: 'application/octet-stream', description: 'The file, with its own Content-Type (e.g. image/png) and filename.' },
    },
  },
  Readiness: {
    type: 'object',
    required: ['status', 'database', 'redis'],
    properties: {
      status: { type: 'string', enum: ['ready', 'not_ready'] },
      database: { type: 'string', enum: ['ok', 'unavailable'] },
      redis: { type: 'string', enum: ['ok', 'degraded', 'unavailable', 'not_configured'] },
    },
  },
};

const header = (description: string, schema: Json = { type: 'integer' }) => ({ description, schema });
/** Response headers (spec 7), named as sent. */
const HEADERS: Json = {
  'X-Request-Id': header('`req_<12 hex>`, or the value the caller sent; equals meta.request_id of an error.', { type: 'string' }),
  'X-RateLimit-Limit-Minute': header('Requests allowed per minute (fixed window).'),
  'X-RateLimit-Remaining-Minute': header('Requests left in this minute.'),
  'X-RateLimit-Limit-Day': header("Requests allowed per UTC day (the plan's quota)."),
  'X-RateLimit-Remaining-Day': header('Requests left today.'),
  'X-RateLimit-Reset': header('Unix epoch seconds when the tighter window resets.'),
  'Retry-After': header('Seconds to wait before retrying.'),
  'Idempotent-Replayed': header('`true` on a response replayed for a repeated Idempotency-Key.', { type: 'string', enum: ['true'] }),
};
const RATE_LIMIT_HEADERS = Object.keys(HEADERS).filter((name) => name.startsWith('X-RateLimit-'));
const headerRefs = (names: string[]) => Object.fromEntries(names.map((name) => [name, { $ref: `#/components/headers/${name}` }]));

const PARAMETERS: Json = {
  IdempotencyKey: {
    name: 'Idempotency-Key', in: 'header', required: false,
    description: 'Makes the request safe to retry: a repeat within 24 h gets the first response again (with Idempotent-Replayed: true); the same key with a different request is 409; a repeat while the first request is still running is 409 with Retry-After (retry then to get its answer). A UUID v4 is recommended.',
    schema: { type: 'string', minLength: 1, maxLength: 255 },
  },
  ...DELIVERY_HEADERS,
};

interface ErrorCase { status: number; code: ErrorCode; name?: string; summary: string; message: string; extras?: ErrorExtras }

const STATUS_TEXT: Record<number, string> = {
  400: 'Invalid request: a field, the query, the body or a state rule (VALIDATION_ERROR, naming the field).',
  401: 'Missing, malformed, expired or revoked credentials.',
  403: 'The key lacks a scope, the caller IP is not allowed, or the plan lacks the feature.',
  404: 'Not found, or it belongs to another tenant.',
  409: 'Conflict with the current state, or an Idempotency-Key reused for another request or whose first request is still running (then with Retry-After).',
  413: 'The body is too large.',
  415: 'Unsupported Content-Type.',
  429: 'Rate limit exceeded: retry after Retry-After seconds.',
  500: 'Unexpected error: retry with backoff.',
  502: 'The upstream (WhatsApp Cloud API) failed: safe to retry with backoff.',
  503: 'The service is shutting down or its database is unavailable: retry with backoff.',
  504: 'The upstream did not answer in time: safe to retry with backoff.',
};

interface RouteFacts { scopes: string[]; feature?: Feature; idempotent: boolean }

/** Every error the operation can answer, from what the route declares and the table adds. */
function errorCases(api: 'public' | 'admin', op: Json, doc: OperationDoc, route: RouteFacts, path: string, schemas: Json): ErrorCase[] {
  const hasBody = op.requestBody !== undefined;
  const cases: ErrorCase[] = [invalidRequest(op, schemas)];
  if (api === 'admin') {
    cases.push({ status: 401, code: 'AUTHENTICATION_REQUIRED', summary: 'No or a wrong admin token', message: 'Invalid or missing admin token' });
  } else {
    const feature = route.feature ?? 'access_api';
    cases.push(
      { status: 401, code: 'AUTHENTICATION_REQUIRED', summary: 'No, a malformed, an expired or a revoked API key', message: 'Invalid or revoked API key' },
      {
        status: 403, code: 'FORBIDDEN', summary: 'The key lacks a scope', message: `Missing required scope(s): ${route.scopes.join(', ')}`,
        extras: { required_permissions: route.scopes, current_permissions: [['templates:read', 'contacts:read'].find((scope) => !route.scopes.includes(scope))!] },
      },
      { status: 403, code: 'UPGRADE_REQUIRED', summary: 'The plan lacks the feature', message: upgradeMessage(feature), extras: { upgrade_required: true, feature_key: feature } },
    );
  }
  if (doc.notFound || path.includes('{')) cases.push({ status: 404, code: 'NOT_FOUND', summary: 'Not found', message: doc.notFound ?? 'Resource not found' });
  if (doc.conflict) cases.push({ status: 409, code: 'CONFLICT', summary: 'Conflict', message: doc.conflict });
  if (route.idempotent) {
    cases.push(
      { status: 409, code: 'CONFLICT', name: 'IDEMPOTENCY_KEY_REUSED', summary: 'Idempotency-Key already used for another request', message: 'Idempotency-Key was already used with a different request' },
      { status: 409, code: 'CONFLICT', name: 'IDEMPOTENCY_KEY_IN_PROGRESS', summary: 'The first request with this Idempotency-Key is still running: retry after Retry-After', message: 'A request with this Idempotency-Key is still being processed' },
    );
  }
  if (hasBody) {
    cases.push(
      { status: 413, code: 'VALIDATION_ERROR', summary: 'Body too large', message: 'Request body is too large' },
      { status: 415, code: 'VALIDATION_ERROR', summary: 'Unsupported Content-Type', message: 'Unsupported Content-Type' },
    );
  }
  if (api === 'public') cases.push({ status: 429, code: 'RATE_LIMIT_EXCEEDED', summary: 'Rate limit exceeded', message: 'Rate limit exceeded. Please slow down.' });
  cases.push({ status: 500, code: 'INTERNAL_ERROR', summary: 'Unexpected error', message: 'An unexpected error occurred. Retry with backoff.' });
  if (doc.upstream) {
    cases.push(
      { status: 502, code: 'UPSTREAM_ERROR', summary: 'The upstream failed', message: `The messaging platform is temporarily unavailable while ${doc.upstream}; retry with backoff` },
      { status: 504, code: 'UPSTREAM_TIMEOUT', summary: 'The upstream timed out', message: `The messaging platform did not answer in time while ${doc.upstream}; retry with backoff` },
    );
  }
  cases.push({ status: 503, code: 'INTERNAL_ERROR', summary: 'Shutting down or database unavailable', message: 'The service is temporarily unavailable. Retry with backoff.' });
  return cases;
}

/** The 400 example: a missing body field, a query value out of range, or (nothing else to get wrong) a malformed URL. */
function invalidRequest(op: Json, schemas: Json): ErrorCase {
  const bodyRef: string | undefined = op.requestBody?.content?.['application/json']?.schema?.$ref;
  const field = bodyRef ? schemas[bodyRef.split('/').pop()!]?.required?.[0] : undefined;
  const query = (op.parameters ?? []).find((p: Json) => p.in === 'query' && p.schema?.maximum !== undefined);
  const base = { status: 400, code: 'VALIDATION_ERROR' as const };
  if (field) {
    return { ...base, summary: 'A field is missing or invalid', message: 'Field required', extras: { details: [{ type: 'missing', loc: ['body', field], msg: 'Field required', input: null }] } };
  }
  if (query) {
    const message = `${query.name} must be <= ${query.schema.maximum}`;
    return { ...base, summary: 'A query parameter is out of range', message, extras: { details: [{ type: 'maximum', loc: ['query', query.name], msg: message, input: query.schema.maximum + 1 }] } };
  }
  return { ...base, summary: 'The URL cannot be parsed', message: 'Malformed URL' };
}

const EXAMPLE_META = { request_id: 'req_5f2a9c1e7b3d', timestamp: '2030-05-01T09:00:00.000Z' };

function errorResponses(cases: ErrorCase[], headers: (status: number) => Json): Json {
  const responses: Json = {};
  for (const c of cases) {
    const response = responses[c.status] ??= {
      description: STATUS_TEXT[c.status],
      headers: headers(c.status),
      content: { 'application/json': { schema: schemaRef('Error'), examples: {} } },
    };
    response.content['application/json'].examples[c.name ?? c.code] = {
      summary: c.summary,
      value: { success: false, error: { code: c.code, message: c.message, ...c.extras }, meta: EXAMPLE_META },
    };
  }
  return responses;
}

/**
 * What the HTTP parser answers before any route runs (client-error.ts), whatever the operation: a
 * request whose headers take too long or are too large.
 */
const parserError = (summary: string, message: string) => ({
  description: summary,
  headers: headerRefs(['X-Request-Id']),
  content: {
    'application/json': {
      schema: schemaRef('Error'),
      examples: { VALIDATION_ERROR: { summary, value: { success: false, error: { code: 'VALIDATION_ERROR', message }, meta: EXAMPLE_META } } },
    },
  },
});
const RESPONSES: Json = {
  RequestTimeout: parserError('The request was not received within the server timeouts.', 'The request was not received in time'),
  HeadersTooLarge: parserError('The request headers are too large.', 'The request headers are too large'),
};
const PARSER_RESPONSES = { 408: { $ref: '#/components/responses/RequestTimeout' }, 431: { $ref: '#/components/responses/HeadersTooLarge' } };

interface ApiDocument {
  api: 'public' | 'admin';
  prefix: string;
  operations: Record<string, OperationDoc>;
  tags: Record<string, string>;
  info: Json;
}

const PUBLIC_API: ApiDocument = {
  api: 'public',
  prefix: '/api/v1/public',
  operations: PUBLIC_OPERATIONS,
  tags: PUBLIC_TAGS,
  info: {
    title: 'Messaging Service Public API',
    version: '1.0.0',
    // The package has no licence (private): all rights reserved, in SPDX's words for that.
    license: { name: 'Proprietary (all rights reserved)', identifier: 'LicenseRef-Proprietary' },
    description: [
      'Multi-tenant business messaging over the WhatsApp Business Cloud API: contacts, templates, template messages, media, campaigns and signed webhooks.',
      '',
      '**Authentication**: `Authorization: Bearer <API key>` (`svc_sk_live_...` or `svc_sk_test_...`); each operation names the scope it needs.',
      '',
      '**Errors** use one envelope (`Error`): branch on `error.code`. Retry only 429 and 5xx.',
      '',
      '**Limits**: 120 requests per minute per tenant and the plan\'s daily quota, in fixed windows; every response carries the X-RateLimit headers, a 429 Retry-After.',
      '',
      '**Idempotency**: creating and sending POSTs accept `Idempotency-Key`; a repeat within 24 h gets the first response again.',
      '',
      '**Pagination**: `page` (from 1) and `limit` (1-100, default 20); lists answer `{ data, pagination }`.',
      '',
      '**Events** reach your webhook endpoints as signed POSTs: see the webhooks section.',
    ].join('\n'),
  },
};

const ADMIN_API: ApiDocument = {
  api: 'admin',
  prefix: '/admin/v1',
  operations: ADMIN_OPERATIONS,
  tags: ADMIN_TAGS,
  info: {
    title: 'Messaging Service Operator API',
    version: '1.0.0',
    license: PUBLIC_API.info.license,
    description: 'Provisioning for the operator of the service: tenants, their API keys and business accounts. Authenticated by the ADMIN_TOKEN as a bearer credential. Not for integrators: see /openapi.json for the public API.',
  },
};

/** Routes outside the API's base path that the public document describes (no authentication). */
const HEALTH_PATHS = new Set(['/healthz', '/readyz', '/r/{token}']);
/** Of those, routes whose documented responses are all the table's (a redirect, an HTML page). */
const DOC_RESPONSES_ONLY = new Set(['/r/{token}']);

/** `GET /contacts/{id}` with the table's entry, or a stand-in a test reports. */
function operationDoc(api: ApiDocument, key: string): OperationDoc & { missing?: true } {
  const doc = api.operations[key];
  if (doc) return doc;
  const words = key.toLowerCase().replace(/[{}]/g, '').split(/[^a-z0-9]+/).filter(Boolean);
  return { operationId: words.map((w, i) => (i === 0 ? w : w[0].toUpperCase() + w.slice(1))).join(''), summary: key, tag: 'Other', missing: true };
}

function buildDocument(raw: Json, api: ApiDocument): Json {
  const paths: Json = {};
  const usedTags = new Set<string>();
  const missing: string[] = [];
  for (const [fullPath, item] of Object.entries(raw.paths as Json)) {
    const health = api.api === 'public' && HEALTH_PATHS.has(fullPath);
    if (!health && !fullPath.startsWith(api.prefix + '/')) continue;
    const path = health ? fullPath : fullPath.slice(api.prefix.length);
    for (const [method, rawOp] of Object.entries(item as Json)) {
      const key = `${method.toUpperCase()} ${path}`;
      const doc = operationDoc(api, key);
      if (doc.missing) missing.push(key);
      const { 'x-route': route, ...op } = structuredClone(rawOp) as Json;
      usedTags.add(doc.tag);
      const facts: RouteFacts = { scopes: route?.scopes ?? [], feature: route?.feature, idempotent: route?.idempotent === true };
      const notes = [
        doc.description,
        facts.scopes.length > 0 ? `Scope: ${facts.scopes.join(', ')}.` : undefined,
        facts.feature ? `The plan must include ${facts.feature}.` : undefined,
      ].filter(Boolean);
      Object.assign(op, { operationId: doc.operationId, summary: doc.summary, tags: [doc.tag] });
      if (notes.length > 0) op.description = notes.join('\n\n');

      if (path === '/media' && method === 'post') {
        const accepted = [...new Set(Object.values(MEDIA_RULES).flatMap((rule) => rule.mimeTypes))].join(', ');
        op.requestBody = { required: true, content: { 'multipart/form-data': { schema: schemaRef('MediaUpload'), encoding: { file: { contentType: accepted } } } } };
      }
      if (doc.example !== undefined && op.requestBody?.content?.['application/json']) op.requestBody.content['application/json'].example = doc.example;
      if (facts.idempotent) op.parameters = [...(op.parameters ?? []), { $ref: '#/components/parameters/IdempotencyKey' }];

      const headers = (status: number) => headerRefs([
        'X-Request-Id',
        ...(api.api === 'public' && !health && status !== 401 ? RATE_LIMIT_HEADERS : []),
        ...(status === 429 || status === 503 || (status === 409 && facts.idempotent) ? ['Retry-After'] : []),
        ...(facts.idempotent && status < 300 ? ['Idempotent-Replayed'] : []),
      ]);
      const responses: Json = {};
      for (const [status, response] of Object.entries({ ...(DOC_RESPONSES_ONLY.has(path) ? {} : op.responses), ...doc.responses } as Json)) {
        const description = response.description === 'Default Response' ? successText(method, Number(status)) : response.description;
        responses[status] = { ...response, description, headers: headers(Number(status)) };
      }
      if (api.api === 'admin' && path === '/rate-card') {
        const csv = { schema: { type: 'string', description: 'The card as CSV (docs/cost.md).' } };
        if (method === 'put') op.requestBody.content['text/csv'] = csv;
        else responses[200].content['text/csv'] = csv;
      }
      if (path === '/campaigns/{id}/recipients') {
        responses[200].content['text/csv'] = { schema: { type: 'string', description: 'With Accept: text/csv: every recipient as one CSV file.' } };
      }
      if (health) {
        // No credentials, no validation: only a shutting-down 503 (and the parser's errors, below).
        Object.assign(op, { security: [], servers: [{ url: '/', description: 'The service root: health routes are outside the API base path' }] });
        op.responses = { ...responses, ...errorResponses([
          { status: 503, code: 'INTERNAL_ERROR', summary: 'Shutting down', message: 'The service is shutting down; retry the request' },
        ].filter((c) => !(String(c.status) in responses)) as ErrorCase[], headers) };
      } else {
        op.responses = { ...responses, ...errorResponses(errorCases(api.api, op, doc, facts, path, raw.components.schemas), headers) };
      }
      Object.assign(op.responses, PARSER_RESPONSES);
      op.responses = Object.fromEntries(Object.entries(op.responses).sort(([a], [b]) => Number(a) - Number(b)));
      (paths[path] ??= {})[method] = op;
    }
  }

  // Paths in the order of their tags (then as routed), as the explorer lists them.
  const tagOrder = Object.keys(api.tags);
  const rank = (item: Json) => Math.min(...Object.values(item).map((op: Json) => tagOrder.indexOf(op.tags[0]) >>> 0)); // unknown tags (-1) last
  const sortedPaths = Object.fromEntries(Object.entries(paths).sort(([, a], [, b]) => rank(a) - rank(b)));

  const document: Json = {
    openapi: '3.1.0',
    info: api.info,
    servers: [{ url: api.prefix, description: 'This service (paths below are relative to it)' }],
    security: [{ bearer: [] }],
    tags: Object.entries(api.tags).filter(([name]) => usedTags.has(name)).map(([name, description]) => ({ name, description })),
    paths: sortedPaths,
    ...(api.api === 'public' ? { webhooks: webhookOperations() } : {}),
    components: {
      securitySchemes: {
        bearer: api.api === 'public'
          ? { type: 'http', scheme: 'bearer', description: 'An API key of the tenant: `svc_sk_{live|test}_<40 hex>`.' }
          : { type: 'http', scheme: 'bearer', description: 'The operator token (ADMIN_TOKEN).' },
      },
      schemas: { ...structuredClone(raw.components.schemas), ...DOCUMENT_SCHEMAS, ...EVENT_DATA_SCHEMAS, ...eventSchemas() },
      headers: HEADERS,
      parameters: PARAMETERS,
      responses: RESPONSES,
    },
  };
  if (missing.length > 0) document['x-undocumented-operations'] = missing;
  if (usedTags.has('Other')) document.tags.push({ name: 'Other', description: 'Operations not described yet.' });
  refine(document.components.schemas);
  return pruneComponents(document);
}

function successText(method: string, status: number): string {
  if (status === 201) return 'Created';
  if (status === 202) return 'Accepted';
  return method === 'delete' ? 'Deleted' : 'OK';
}

/** What the route schemas leave loose (checked in the services) but the API does promise. */
function refine(schemas: Json): void {
  const set = (name: string, path: string[], value: Json) => {
    let node = schemas[name];
    for (const key of path.slice(0, -1)) node = node?.[key];
    if (node) node[path[path.length - 1]] = value;
  };
  const eventList = (description: string) => ({ type: 'array', items: schemaRef('EventType'), minItems: 1, maxItems: 100, description });
  set('WebhookEndpoint', ['properties', 'events'], { type: 'array', items: schemaRef('EventType') });
  set('WebhookEndpointCreate', ['properties', 'events'], eventList('Known event types only (400 names the unknown ones).'));
  set('WebhookEndpointUpdate', ['properties', 'events'], eventList('Replaces the subscription.'));
  set('Delivery', ['properties', 'event_type'], schemaRef('EventType'));
  set('ContactBulkCreate', ['properties', 'contacts', 'items'], schemaRef('ContactCreate'));
  set('CampaignAudienceInput', ['properties', 'groups', 'items'], { type: 'string', description: 'A contact tag.' });
  set('CampaignAudienceInput', ['properties', 'sources', 'items'], { type: 'string', description: 'A contact source, e.g. website.' });
  set('CampaignCreate', ['properties', 'variable_mapping'], schemaRef('VariableMapping'));
  set('Campaign', ['properties', 'variable_mapping'], nullable(schemaRef('VariableMapping')));
  set('CampaignDetail', ['properties', 'variable_mapping'], nullable(schemaRef('VariableMapping')));
  set('TemplateCreate', ['properties', 'components', 'items'], {
    type: 'object', additionalProperties: true, required: ['type'],
    properties: { type: { type: 'string', enum: ['HEADER', 'BODY', 'FOOTER', 'BUTTONS'] } },
    description: 'A component as the upstream defines it (HEADER, BODY, FOOTER, BUTTONS); variables need sample values under `example`.',
  });
}

/** Drops the components the document does not reference (each document keeps only its own). */
function pruneComponents(document: Json): Json {
  const { components } = document;
  const used = new Set<string>();
  const visit = (node: unknown) => {
    if (Array.isArray(node)) return node.forEach(visit);
    if (node === null || typeof node !== 'object') return;
    for (const [key, value] of Object.entries(node)) {
      if (key === '$ref' && typeof value === 'string' && !used.has(value)) {
        used.add(value);
        const [, , section, name] = value.split('/');
        visit(components[section]?.[name]);
      } else {
        visit(value);
      }
    }
  };
  visit(document.paths);
  visit(document.webhooks);
  for (const section of ['schemas', 'headers', 'parameters', 'responses']) {
    components[section] = Object.fromEntries(Object.entries(components[section]).filter(([name]) => used.has(`#/components/${section}/${name}`)));
  }
  return document;
}

/** JSON text with keys in order, so equal schemas compare equal. */
function canonical(node: unknown): string {
  if (Array.isArray(node)) return `[${node.map(canonical).join(',')}]`;
  if (node === null || typeof node !== 'object') return JSON.stringify(node);
  return `{${Object.keys(node).sort().map((k) => `${JSON.stringify(k)}:${canonical((node as Json)[k])}`).join(',')}}`;
}

/** A union of single values (TypeBox literals) as one enum, which is what client generators read. */
function mergeLiteralUnions(node: unknown): void {
  if (node === null || typeof node !== 'object') return;
  Object.values(node).forEach(mergeLiteralUnions);
  const union = (node as Json).anyOf;
  if (!Array.isArray(union) || union.length < 2) return;
  const type = union[0]?.type;
  const single = (m: Json) => m.type === type && Array.isArray(m.enum) && m.enum.length === 1 && Object.keys(m).length === 2;
  if (typeof type !== 'string' || !union.every(single)) return;
  delete (node as Json).anyOf;
  Object.assign(node, { type, enum: union.map((m: Json) => m.enum[0]) });
}

/** Replaces every inline copy of a named schema (outside its own definition) with a reference to it. */
function referenceNamedSchemas(document: Json): void {
  const schemas = document.components.schemas as Json;
  const names = new Map<string, string>();
  for (const [name, schema] of Object.entries(schemas)) {
    const text = canonical(schema);
    if (names.has(text)) throw new Error(`OpenAPI: ${name} and ${names.get(text)} are the same schema; name it once`);
    names.set(text, name);
  }
  const replace = (node: unknown): unknown => {
    if (node === null || typeof node !== 'object') return node;
    const name = Array.isArray(node) ? undefined : names.get(canonical(node));
    if (name) return schemaRef(name);
    for (const [key, value] of Object.entries(node)) (node as Json)[key] = replace(value);
    return node;
  };
  for (const schema of Object.values(schemas)) {
    for (const [key, value] of Object.entries(schema as Json)) (schema as Json)[key] = replace(value);
  }
  for (const item of Object.values(document.paths as Json)) {
    for (const op of Object.values(item as Json)) {
      for (const response of Object.values((op as Json).responses ?? {})) {
        for (const media of Object.values((response as Json).content ?? {})) replace(media);
      }
      for (const media of Object.values((op as Json).requestBody?.content ?? {})) replace(media);
    }
  }
}

/** The raw document: the routes as @fastify/swagger sees them, named schemas referenced. */
function prepare(raw: Json): Json {
  const document = structuredClone(raw);
  mergeLiteralUnions(document);
  referenceNamedSchemas(document);
  return document;
}

export interface OpenApiDocuments {
  public: Json;
  admin: Json;
}

/** Registers the document builder, the explorer at /docs and the two document routes. */
export async function installOpenApi(app: FastifyInstance, options: { adminToken: string }): Promise<void> {
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: PUBLIC_API.info as never,
      components: { schemas: Object.fromEntries(Object.entries(NAMED_SCHEMAS).map(([name, schema]) => [name, optionalDefaults(schema)])) as never },
    },
    // Carries what the document needs from the route's config (scopes, plan feature, Idempotency-Key).
    transform: ({ schema, url, route }) => {
      const config = (route.config ?? {}) as Json;
      return { schema: { ...schema, 'x-route': { scopes: config.scopes, feature: config.feature, idempotent: config.idempotent } } as never, url };
    },
  });
  let documents: OpenApiDocuments | undefined;
  const build = () => {
    if (!documents) {
      const raw = prepare(app.swagger() as Json);
      documents = { public: buildDocument(raw, PUBLIC_API), admin: buildDocument(raw, ADMIN_API) };
    }
    return documents;
  };

  await app.register(swaggerUi, {
    routePrefix: '/docs',
    transformSpecification: () => build().public,
    transformSpecificationClone: false,
    uiConfig: { docExpansion: 'list', deepLinking: true },
  });

  app.get(PUBLIC_DOCUMENT_URL, { schema: { hide: true } }, async () => build().public);
  app.get(ADMIN_DOCUMENT_URL, {
    schema: { hide: true },
    onRequest: async (request) => assertAdminToken(request.headers.authorization, options.adminToken, safeEqual),
  }, async () => build().admin);
}
