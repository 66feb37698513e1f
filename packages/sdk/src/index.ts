export { MessagingClient, type Body, type CallOptions, type ClientOptions, type Query, type Schemas } from './client.ts';
export { ApiError, type ErrorCode, type ValidationIssue } from './errors.ts';
export type { MediaSource, MediaUploadInput } from './media.ts';
export { paginate, type Page } from './pagination.ts';
export { defaultRetryOptions, type RetryOptions } from './retry.ts';
export { constructEvent, verifyWebhookSignature, WebhookSignatureError, type EventOf, type EventType, type VerifyOptions, type WebhookEvent, type WebhookHeaders } from './webhooks.ts';
export type { components, operations, paths } from './generated/schema.ts';
