import createFetchClient, { type Client, type Middleware } from 'openapi-fetch';
import { ApiError } from './errors.ts';
import { idempotentPosts } from './generated/idempotent.ts';
import type { components, operations, paths } from './generated/schema.ts';
import { mediaForm, type MediaUploadInput } from './media.ts';
import { paginate } from './pagination.ts';
import { defaultRetryOptions, retryingFetch, type RetryOptions } from './retry.ts';

export type Schemas = components['schemas'];
/** The query parameters of an operation, by its operationId. */
export type Query<Op extends keyof operations> = NonNullable<operations[Op]['parameters']['query']>;
/** The JSON body of an operation, by its operationId. */
export type Body<Op extends keyof operations> = operations[Op] extends { requestBody?: { content: { 'application/json': infer B } } } ? B : never;

export interface ClientOptions {
  /** The API's base URL, ending in /api/v1/public (e.g. https://api.example.com/api/v1/public). */
  baseUrl: string;
  /** A tenant API key, `svc_sk_live_...` or `svc_sk_test_...`. */
  apiKey: string;
  retry?: Partial<RetryOptions>;
  /** Headers sent with every request. */
  headers?: Record<string, string>;
  /** The fetch to send with (default: the global one). */
  fetch?: (request: Request) => Promise<Response>;
}

export interface CallOptions {
  /** For creating and sending POSTs; one is generated (and kept across retries) when omitted. */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

/** Adds an Idempotency-Key to the POSTs that take one, unless the caller gave one. */
const idempotencyKeys: Middleware = {
  onRequest({ request, schemaPath }) {
    if (request.method === 'POST' && idempotentPosts.has(schemaPath) && !request.headers.has('idempotency-key')) {
      request.headers.set('idempotency-key', crypto.randomUUID());
    }
    return request;
  },
};

/** Responses are read as JSON (an endpoint's CSV alternative is left to `raw`). */
type JsonMedia = `${string}/json`;
type Http = Client<paths, JsonMedia>;

type Answer<T> = { data?: T; error?: unknown; response: Response };

/** The data of a 2xx answer; an ApiError for any other. */
async function unwrap<T>(call: Promise<Answer<T>>): Promise<T> {
  const { data, error, response } = await call;
  if (!response.ok) throw ApiError.from(response, error);
  return data as T;
}

function init(options: CallOptions = {}) {
  return { signal: options.signal, headers: options.idempotencyKey ? { 'idempotency-key': options.idempotencyKey } : undefined };
}

const path = <P extends Record<string, string>>(params: P) => ({ path: params });

/**
 * The public API, one method per endpoint, grouped by resource. Every method resolves to the
 * response body or throws an ApiError. `raw` is the underlying openapi-fetch client, for calls the
 * methods do not cover.
 */
export class MessagingClient {
  readonly raw: Http;
  readonly contacts: ReturnType<typeof contactsApi>;
  readonly templates: ReturnType<typeof templatesApi>;
  readonly messages: ReturnType<typeof messagesApi>;
  readonly media: ReturnType<typeof mediaApi>;
  readonly campaigns: ReturnType<typeof campaignsApi>;
  readonly webhooks: ReturnType<typeof webhooksApi>;

  constructor(options: ClientOptions) {
    this.raw = createFetchClient<paths, JsonMedia>({
      baseUrl: options.baseUrl,
      headers: { ...options.headers, authorization: `Bearer ${options.apiKey}` },
      fetch: retryingFetch({ ...defaultRetryOptions, ...options.retry }, options.fetch),
    });
    this.raw.use(idempotencyKeys);
    this.contacts = contactsApi(this.raw);
    this.templates = templatesApi(this.raw);
    this.messages = messagesApi(this.raw);
    this.media = mediaApi(this.raw);
    this.campaigns = campaignsApi(this.raw);
    this.webhooks = webhooksApi(this.raw);
  }
}

function contactsApi(http: Http) {
  const api = {
    list: (query: Query<'listContacts'> = {}, o?: CallOptions) => unwrap(http.GET('/contacts', { params: { query }, ...init(o) })),
    /** Every contact matching `query`, across pages. */
    iterate: (query: Query<'listContacts'> = {}) => paginate((page) => api.list({ ...query, page })),
    search: (body: Body<'searchContacts'>, query: Query<'searchContacts'> = {}, o?: CallOptions) =>
      unwrap(http.POST('/contacts/search', { params: { query }, body, ...init(o) })),
    iterateSearch: (body: Body<'searchContacts'>, query: Query<'searchContacts'> = {}) =>
      paginate((page) => api.search(body, { ...query, page })),
    create: (body: Body<'createContact'>, o?: CallOptions) => unwrap(http.POST('/contacts', { body, ...init(o) })),
    /** At most 100 contacts; a failing item never aborts the batch (see `errors` of the result). */
    bulkCreate: (contacts: Body<'createContact'>[], o?: CallOptions) => unwrap(http.POST('/contacts/bulk', { body: { contacts }, ...init(o) })),
    get: (id: string, o?: CallOptions) => unwrap(http.GET('/contacts/{id}', { params: path({ id }), ...init(o) })),
    update: (id: string, body: Body<'updateContact'>, o?: CallOptions) => unwrap(http.PATCH('/contacts/{id}', { params: path({ id }), body, ...init(o) })),
    delete: (id: string, o?: CallOptions) => unwrap(http.DELETE('/contacts/{id}', { params: path({ id }), ...init(o) })),
    notes: {
      create: (id: string, body: Body<'addContactNote'>, o?: CallOptions) => unwrap(http.POST('/contacts/{id}/notes', { params: path({ id }), body, ...init(o) })),
      list: (id: string, query: Query<'listContactNotes'> = {}, o?: CallOptions) =>
        unwrap(http.GET('/contacts/{id}/notes', { params: { path: { id }, query }, ...init(o) })),
      iterate: (id: string, query: Query<'listContactNotes'> = {}) => paginate((page) => api.notes.list(id, { ...query, page })),
    },
    followups: {
      create: (id: string, body: Body<'createFollowup'>, o?: CallOptions) => unwrap(http.POST('/contacts/{id}/followups', { params: path({ id }), body, ...init(o) })),
      list: (id: string, query: Query<'listFollowups'> = {}, o?: CallOptions) =>
        unwrap(http.GET('/contacts/{id}/followups', { params: { path: { id }, query }, ...init(o) })),
      iterate: (id: string, query: Query<'listFollowups'> = {}) => paginate((page) => api.followups.list(id, { ...query, page })),
      update: (id: string, followupId: string, body: Body<'updateFollowup'>, o?: CallOptions) =>
        unwrap(http.PATCH('/contacts/{id}/followups/{followup_id}', { params: path({ id, followup_id: followupId }), body, ...init(o) })),
      delete: (id: string, followupId: string, o?: CallOptions) =>
        unwrap(http.DELETE('/contacts/{id}/followups/{followup_id}', { params: path({ id, followup_id: followupId }), ...init(o) })),
    },
    communications: {
      list: (id: string, query: Query<'listContactCommunications'> = {}, o?: CallOptions) =>
        unwrap(http.GET('/contacts/{id}/communications', { params: { path: { id }, query }, ...init(o) })),
      iterate: (id: string, query: Query<'listContactCommunications'> = {}) => paginate((page) => api.communications.list(id, { ...query, page })),
    },
  };
  return api;
}

function templatesApi(http: Http) {
  const api = {
    /** Approved templates only, newest first. */
    list: (query: Query<'listTemplates'> = {}, o?: CallOptions) => unwrap(http.GET('/templates', { params: { query }, ...init(o) })),
    iterate: (query: Query<'listTemplates'> = {}) => paginate((page) => api.list({ ...query, page })),
    get: (id: string, o?: CallOptions) => unwrap(http.GET('/templates/{id}', { params: path({ id }), ...init(o) })),
    create: (body: Body<'createTemplate'>, o?: CallOptions) => unwrap(http.POST('/templates', { body, ...init(o) })),
    submit: (id: string, o?: CallOptions) => unwrap(http.POST('/templates/{id}/submit', { params: path({ id }), ...init(o) })),
  };
  return api;
}

function messagesApi(http: Http) {
  const api = {
    /** `status: "accepted"` is not delivery: follow the message.* events. */
    sendTemplate: (body: Body<'sendTemplateMessage'>, o?: CallOptions) => unwrap(http.POST('/messages/template', { body, ...init(o) })),
    list: (query: Query<'listMessages'> = {}, o?: CallOptions) => unwrap(http.GET('/messages', { params: { query }, ...init(o) })),
    iterate: (query: Query<'listMessages'> = {}) => paginate((page) => api.list({ ...query, page })),
    get: (id: string, o?: CallOptions) => unwrap(http.GET('/messages/{id}', { params: path({ id }), ...init(o) })),
    /** A received message's media file, while the upstream keeps it (404 afterwards). */
    media: (id: string, o?: CallOptions) => unwrap(http.GET('/messages/{id}/media', { params: path({ id }), parseAs: 'arrayBuffer', ...init(o) })),
  };
  return api;
}

function mediaApi(http: Http) {
  const api = {
    /** Uploads from a path, a Buffer, a Blob or a stream (see MediaUploadInput). */
    upload: async (input: MediaUploadInput, o?: CallOptions) => {
      const form = await mediaForm(input);
      return unwrap(http.POST('/media', { body: form as never, bodySerializer: (body) => body, ...init(o) }));
    },
    list: (query: Query<'listMedia'> = {}, o?: CallOptions) => unwrap(http.GET('/media', { params: { query }, ...init(o) })),
    iterate: (query: Query<'listMedia'> = {}) => paginate((page) => api.list({ ...query, page })),
    get: (id: string, o?: CallOptions) => unwrap(http.GET('/media/{id}', { params: path({ id }), ...init(o) })),
    delete: (id: string, o?: CallOptions) => unwrap(http.DELETE('/media/{id}', { params: path({ id }), ...init(o) })),
  };
  return api;
}

function campaignsApi(http: Http) {
  const post = (route: '/campaigns/{id}/send' | '/campaigns/{id}/pause' | '/campaigns/{id}/resume' | '/campaigns/{id}/stop' | '/campaigns/{id}/refresh-metrics') =>
    (id: string, o?: CallOptions) => unwrap(http.POST(route, { params: path({ id }), ...init(o) }));
  const api = {
    /** All campaigns, newest first (not paginated). */
    list: (o?: CallOptions) => unwrap(http.GET('/campaigns', init(o))),
    create: (body: Body<'createCampaign'>, o?: CallOptions) => unwrap(http.POST('/campaigns', { body, ...init(o) })),
    get: (id: string, o?: CallOptions) => unwrap(http.GET('/campaigns/{id}', { params: path({ id }), ...init(o) })),
    setAudience: (id: string, body: Body<'setCampaignAudience'>, o?: CallOptions) =>
      unwrap(http.PUT('/campaigns/{id}/audience', { params: path({ id }), body, ...init(o) })),
    previewAudience: (id: string, o?: CallOptions) => unwrap(http.GET('/campaigns/{id}/audience/preview', { params: path({ id }), ...init(o) })),
    fieldCoverage: (id: string, body: Body<'getCampaignFieldCoverage'>, o?: CallOptions) =>
      unwrap(http.POST('/campaigns/{id}/audience/field-coverage', { params: path({ id }), body, ...init(o) })),
    preview: (id: string, body: Body<'previewCampaignMessage'> = {}, o?: CallOptions) =>
      unwrap(http.POST('/campaigns/{id}/preview', { params: path({ id }), body, ...init(o) })),
    send: post('/campaigns/{id}/send'),
    pause: post('/campaigns/{id}/pause'),
    resume: post('/campaigns/{id}/resume'),
    stop: post('/campaigns/{id}/stop'),
    refreshMetrics: post('/campaigns/{id}/refresh-metrics'),
    schedule: (id: string, body: Body<'scheduleCampaign'>, o?: CallOptions) =>
      unwrap(http.POST('/campaigns/{id}/schedule', { params: path({ id }), body, ...init(o) })),
    errors: (id: string, o?: CallOptions) => unwrap(http.GET('/campaigns/{id}/errors', { params: path({ id }), ...init(o) })),
    errorRecipients: (id: string, errorCode: string, query: Query<'listCampaignErrorRecipients'> = {}, o?: CallOptions) =>
      unwrap(http.GET('/campaigns/{id}/errors/{error_code}', { params: { path: { id, error_code: errorCode }, query }, ...init(o) })),
    recipients: (id: string, query: Query<'listCampaignRecipients'> = {}, o?: CallOptions) =>
      unwrap(http.GET('/campaigns/{id}/recipients', { params: { path: { id }, query }, ...init(o) })),
    iterateRecipients: (id: string, query: Query<'listCampaignRecipients'> = {}) => paginate((page) => api.recipients(id, { ...query, page })),
    retarget: (id: string, body: Body<'retargetCampaign'>, o?: CallOptions) =>
      unwrap(http.POST('/campaigns/{id}/retarget', { params: path({ id }), body, ...init(o) })),
  };
  return api;
}

function webhooksApi(http: Http) {
  const api = {
    /** The signing secret is in the answer only this once. */
    create: (body: Body<'createWebhook'>, o?: CallOptions) => unwrap(http.POST('/webhooks', { body, ...init(o) })),
    list: (o?: CallOptions) => unwrap(http.GET('/webhooks', init(o))),
    get: (id: string, o?: CallOptions) => unwrap(http.GET('/webhooks/{id}', { params: path({ id }), ...init(o) })),
    update: (id: string, body: Body<'updateWebhook'>, o?: CallOptions) => unwrap(http.PUT('/webhooks/{id}', { params: path({ id }), body, ...init(o) })),
    delete: (id: string, o?: CallOptions) => unwrap(http.DELETE('/webhooks/{id}', { params: path({ id }), ...init(o) })),
    rotateSecret: (id: string, o?: CallOptions) => unwrap(http.POST('/webhooks/{id}/rotate-secret', { params: path({ id }), ...init(o) })),
    /** Sends a signed webhook.test now; branch on `delivered`. */
    test: (id: string, o?: CallOptions) => unwrap(http.POST('/webhooks/{id}/test', { params: path({ id }), ...init(o) })),
    recover: (id: string, body: Body<'recoverWebhookDeliveries'>, o?: CallOptions) =>
      unwrap(http.POST('/webhooks/{id}/recover', { params: path({ id }), body, ...init(o) })),
    deliveries: {
      /** Across all endpoints, or one endpoint's with `endpointId`. */
      list: (query: Query<'listDeliveries'> & { endpointId?: string } = {}, o?: CallOptions) => {
        const { endpointId, ...rest } = query;
        return endpointId === undefined
          ? unwrap(http.GET('/webhooks/deliveries', { params: { query: rest }, ...init(o) }))
          : unwrap(http.GET('/webhooks/{id}/deliveries', { params: { path: { id: endpointId }, query: rest }, ...init(o) }));
      },
      iterate: (query: Query<'listDeliveries'> & { endpointId?: string } = {}) => paginate((page) => api.deliveries.list({ ...query, page })),
      metrics: (o?: CallOptions) => unwrap(http.GET('/webhooks/deliveries/metrics', init(o))),
      /** Replays the original payload as a new delivery. */
      retry: (id: string, o?: CallOptions) => unwrap(http.POST('/webhooks/deliveries/{id}/retry', { params: path({ id }), ...init(o) })),
    },
  };
  return api;
}
