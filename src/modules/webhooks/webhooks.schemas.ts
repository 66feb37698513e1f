import { Type, type Static } from 'typebox';
import { Nullable } from '../../http/nullable.ts';
import { PageOf, PageQuery } from '../../http/pagination.ts';


export const DELIVERY_STATUSES = ['pending', 'success', 'failed', 'retrying', 'abandoned'] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

/** Spec 2.5: exactly these fields; the signing secret is never part of it. */
export const Endpoint = Type.Object({
  id: Type.String(),
  url: Type.String(),
  events: Type.Array(Type.String()),
  description: Nullable(Type.String()),
  is_active: Type.Boolean(),
  last_success_at: Nullable(Type.String()),
  last_failure_at: Nullable(Type.String()),
  consecutive_failures: Type.Integer(),
  created_at: Type.String(),
  updated_at: Nullable(Type.String()),
});
export type Endpoint = Static<typeof Endpoint>;

// Event names are checked against the catalog in the service, to name the unknown ones in the error.
const Events = Type.Array(Type.String({ minLength: 1, maxLength: 100 }), { minItems: 1, maxItems: 100 });
const Url = Type.String({ minLength: 1, maxLength: 2048 });
const Description = Nullable(Type.String({ maxLength: 500 }));

export const EndpointCreate = Type.Object({
  url: Url,
  events: Events,
  description: Type.Optional(Description),
  active: Type.Optional(Type.Boolean()),
});
export type EndpointCreate = Static<typeof EndpointCreate>;

export const EndpointUpdate = Type.Object({
  url: Type.Optional(Url),
  events: Type.Optional(Events),
  description: Type.Optional(Description),
  active: Type.Optional(Type.Boolean()),
});
export type EndpointUpdate = Static<typeof EndpointUpdate>;

export const EndpointCreated = Type.Object({ data: Endpoint, signing_secret: Type.String() });
export const EndpointList = Type.Object({ data: Type.Array(Endpoint) });
export const SecretRotated = Type.Object({ message: Type.String(), signing_secret: Type.String() });
export const MessageResult = Type.Object({ message: Type.String() });

/** Spec 2.6. */
export const Delivery = Type.Object({
  id: Type.String(),
  webhook_endpoint_id: Type.String(),
  event_id: Type.String(),
  event_type: Type.String(),
  request_url: Type.String(),
  status: Type.String(),
  attempt_number: Type.Integer(),
  response_status_code: Nullable(Type.Integer()),
  response_time_ms: Nullable(Type.Integer()),
  error_message: Nullable(Type.String()),
  next_retry_at: Nullable(Type.String()),
  created_at: Type.String(),
  completed_at: Nullable(Type.String()),
  // Additive (spec 9.2): what was sent and what came back, for the delivery log.
  request_body: Nullable(Type.String({ description: 'the signed event envelope as sent (JSON text): the same bytes for every attempt and replay' })),
  response_body: Nullable(Type.String({ description: 'first 500 characters of the endpoint\'s last reply; null before an attempt or without a reply' })),
});
export type Delivery = Static<typeof Delivery>;
export const DeliveryPage = PageOf(Delivery);

export const DeliveryQuery = Type.Object({
  status: Type.Optional(Type.Union(DELIVERY_STATUSES.map((s) => Type.Literal(s)))),
  ...PageQuery.properties,
});
export type DeliveryQuery = Static<typeof DeliveryQuery>;

export const DeliveryMetrics = Type.Object({
  total: Type.Integer(),
  success: Type.Integer(),
  retrying: Type.Integer(),
  abandoned: Type.Integer(),
  pending: Type.Integer(),
  success_rate: Type.Number({ minimum: 0, maximum: 1 }),
});
export type DeliveryMetrics = Static<typeof DeliveryMetrics>;

export const RetryResult = Type.Object({ message: Type.String(), delivery_id: Type.String() });

/** A window of delivery creation times, both ends included; `until` defaults to now. */
export const RecoverBody = Type.Object({
  since: Type.String({ format: 'date-time' }),
  until: Type.Optional(Type.String({ format: 'date-time' })),
});
export type RecoverBody = Static<typeof RecoverBody>;
export const RecoverResult = Type.Object({ message: Type.String(), queued: Type.Integer() });

/** Spec 4.5, test event response table. */
export const TestResult = Type.Object({
  delivered: Type.Boolean(),
  delivery_id: Type.String(),
  message: Type.String(),
  status_code: Nullable(Type.Integer()),
  response_time_ms: Type.Integer(),
  response_body: Nullable(Type.String()),
  error: Nullable(Type.String()),
  endpoint_disabled: Type.Boolean(),
});
export type TestResult = Static<typeof TestResult>;

export const IdParams = Type.Object({ id: Type.String() });
