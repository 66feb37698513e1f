/**
 * Contract of the WhatsApp Cloud API client (src/upstream/client.ts implements it). Every call
 * resolves to an outcome value; only programming errors throw.
 */

/** How the caller should react to an upstream error code (reference §4). */
export type ErrorClass =
  | 'recipient'   // RCPT: this recipient failed; carry on with others
  | 'fatal'       // STOP: account, token, template or configuration problem; stop sending
  | 'retryable'   // RETRY: transient or throttling; retry the same request later
  | 'bad_request'; // REQ: malformed request or bad row data; do not retry unchanged

export interface UpstreamError {
  httpStatus: number | null;
  code: number;
  subcode: number | null;
  title: string;
  details: string | null;
  fbtraceId: string | null;
  errorClass: ErrorClass;
}

export type UpstreamOutcome<T> =
  | { kind: 'accepted'; value: T }
  | { kind: 'rejected'; error: UpstreamError }
  | { kind: 'retryable'; error: UpstreamError | null; retryAfterMs: number; reason: string }
  | { kind: 'timeout' };

export interface MediaDownload {
  gone?: false;
  body: import('node:stream').Readable;
  mimeType: string;
  size: number | null;
}

/** A tenant's connected business account, token already decrypted (only when a call needs it). */
export interface UpstreamAccount {
  wabaId: string;
  phoneNumberId: string;
  accessToken: string;
}

/** Send-time component, in the upstream's lower-case format. */
export interface SendComponent {
  type: 'header' | 'body' | 'button';
  sub_type?: string;
  index?: string;
  parameters: Record<string, unknown>[];
}

export interface SendTemplateRequest {
  to: string;
  templateName: string;
  language: string;
  components: SendComponent[];
  /** Echoed by the upstream in every status callback of this message (max 512 characters). */
  callbackData?: string;
  /** Earlier attempts of this same message (0 or absent for the first); scales the suggested retry delay. */
  attempt?: number;
}

export interface SendTemplateResult {
  messageId: string;
  waId: string | null;
  messageStatus: string | null;
}

export interface UpstreamTemplate {
  id: string;
  name: string;
  language: string;
  status: string;        // APPROVED, PENDING, REJECTED, PAUSED, DISABLED, ...
  category: string;
  components: unknown[];
  rejectedReason: string | null;
}

export interface UpstreamPhoneNumber {
  displayPhoneNumber: string | null;
  /** `whatsapp_business_manager_messaging_limit` (reference §8), e.g. TIER_2K; null when not given. */
  messagingLimitTier: string | null;
}

export interface CreateTemplateRequest {
  name: string;
  language: string;
  category: string;
  components: unknown[];  // forwarded verbatim
}

export interface UpstreamClient {
  sendTemplate(account: UpstreamAccount, request: SendTemplateRequest): Promise<UpstreamOutcome<SendTemplateResult>>;
  createTemplate(account: UpstreamAccount, request: CreateTemplateRequest): Promise<UpstreamOutcome<{ id: string; status: string; category: string }>>;
  getTemplate(account: UpstreamAccount, templateId: string): Promise<UpstreamOutcome<UpstreamTemplate>>;
  listTemplates(account: UpstreamAccount, filter?: { name?: string; status?: string }): Promise<UpstreamOutcome<UpstreamTemplate[]>>;
  uploadMedia(account: UpstreamAccount, file: { bytes: Buffer; mimeType: string; filename: string }): Promise<UpstreamOutcome<{ id: string }>>;
  /** The phone number's display number and its portfolio's messaging limit (`TIER_250`... `TIER_UNLIMITED`), as far as the upstream tells. */
  getPhoneNumber(account: UpstreamAccount): Promise<UpstreamOutcome<UpstreamPhoneNumber>>;
  /**
   * The bytes of a media id the upstream gave us (an inbound message's), streamed. A media id the
   * upstream no longer knows is `gone` (inbound media is kept for a limited time).
   */
  downloadMedia(account: UpstreamAccount, mediaId: string): Promise<UpstreamOutcome<MediaDownload | { gone: true }>>;
  close(): Promise<void>;
}
