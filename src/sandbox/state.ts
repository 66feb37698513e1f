import type { Logger } from 'pino';
import type { CallbackDeliverer } from './callbacks.ts';
import type { HeldMessages } from './held.ts';
import type { RecipientRules } from './recipients.ts';
import type { SendsLog } from './sends-log.ts';
import type { ServiceWindows } from './service-windows.ts';
import type { StatusPipeline } from './statuses.ts';
import type { TemplateStore } from './templates.ts';

/** Runtime behaviour, as `PUT /__sandbox/config` reads and writes it. */
export interface SandboxConfig {
  review_ms: number;
  latency_ms: number;
  /** Sends per second per phone number above which sends fail with 130429; null: unlimited. */
  mps_limit: number | null;
  callbacks: boolean;
  /** Status callbacks wait for `POST /__sandbox/statuses/release` instead of going out on their own. */
  hold_statuses: boolean;
  callback_url: string | null;
}

export interface MediaRecord {
  id: string;
  phoneNumberId: string;
  mimeType: string;
  filename: string | null;
  size: number;
  sha256: string;
  /** Kept for media users sent (inbound), which the service downloads; uploads keep only their digest. */
  bytes?: Buffer;
}

export interface SandboxState {
  config: SandboxConfig;
  readonly defaults: Readonly<SandboxConfig>;
  templates: TemplateStore;
  sends: SendsLog;
  recipients: RecipientRules;
  /** Customer-service windows opened by inbound messages. */
  windows: ServiceWindows;
  held: HeldMessages;
  media: Map<string, MediaRecord>;
  /** Business portfolio messaging limits by WABA id (null: unlimited); a WABA not here is unlimited. */
  messagingLimits: Map<string, number | null>;
  deliverer: CallbackDeliverer;
  statuses: StatusPipeline;
  logger: Logger;
}

export interface Reply {
  status: number;
  body: unknown;
}

export const displayPhoneNumber = (phoneNumberId: string) => '1555' + phoneNumberId.replace(/\D/g, '').slice(-7).padStart(7, '0');

/**
 * Posts Meta's callback of a phone number's `field` (messages, user_preferences): one entry under
 * the number's WABA, its `metadata`, and `value`'s own keys beside them.
 */
export function postNumberChange(state: SandboxState, phoneNumberId: string, field: string, value: Record<string, unknown>): void {
  void state.deliverer.post({
    object: 'whatsapp_business_account',
    entry: [{
      id: state.templates.wabaOf(phoneNumberId) ?? phoneNumberId,
      changes: [{
        field,
        value: {
          messaging_product: 'whatsapp',
          metadata: { display_phone_number: displayPhoneNumber(phoneNumberId), phone_number_id: phoneNumberId },
          ...value,
        },
      }],
    }],
  });
}

/**
 * Where a media object's `url` points, like Meta's lookaside host: the bytes, with the same Bearer
 * token, or 404 once the media is gone.
 */
export const MEDIA_DOWNLOAD_PATH = '/whatsapp_business/attachments/';
