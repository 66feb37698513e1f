import { newWamid } from './graph.ts';
import { digitsOf } from './sends-log.ts';
import { displayPhoneNumber, type Reply, type SandboxConfig, type SandboxState } from './state.ts';
import type { RecipientOutcome } from './statuses.ts';
import { REVIEW_STATUSES, type ReviewStatus } from './templates.ts';

type Obj = Record<string, unknown>;
const isObject = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const bad = (message: string): Reply => ({ status: 400, body: { error: { message } } });
const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;

const OUTCOMES: readonly RecipientOutcome[] = ['reject', 'fail', 'no_read', 'ok'];
const DEFAULT_REJECT_CODE = 131026;
const MAX_DELAY_MS = 3_600_000;

/** `PUT /__sandbox/config`: every field optional; the whole new configuration is returned. */
export function updateConfig(state: SandboxState, body: unknown): Reply {
  if (!isObject(body)) return bad('body must be a JSON object');
  const next: SandboxConfig = { ...state.config };
  if (body.review_ms !== undefined) {
    if (!isCount(body.review_ms)) return bad('review_ms must be a non-negative integer');
    next.review_ms = body.review_ms;
  }
  if (body.latency_ms !== undefined) {
    if (!isCount(body.latency_ms)) return bad('latency_ms must be a non-negative integer');
    next.latency_ms = body.latency_ms;
  }
  if (body.mps_limit !== undefined) {
    if (body.mps_limit !== null && !isCount(body.mps_limit)) return bad('mps_limit must be a positive integer, or null or 0 for unlimited');
    next.mps_limit = body.mps_limit || null;
  }
  if (body.callbacks !== undefined) {
    if (typeof body.callbacks !== 'boolean') return bad('callbacks must be true or false');
    next.callbacks = body.callbacks;
  }
  if (body.callback_url !== undefined) {
    if (body.callback_url !== null && (typeof body.callback_url !== 'string' || !/^https?:\/\/./.test(body.callback_url))) {
      return bad('callback_url must be an http(s) URL or null');
    }
    next.callback_url = body.callback_url;
  }
  state.config = next;
  return { status: 200, body: state.config };
}

export function setRecipientRule(state: SandboxState, body: unknown): Reply {
  if (!isObject(body) || typeof body.to !== 'string' || digitsOf(body.to).length === 0) return bad('to is required');
  if (!OUTCOMES.includes(body.outcome as RecipientOutcome)) return bad(`outcome must be one of ${OUTCOMES.join(', ')}`);
  if (body.error_code !== undefined && !isCount(body.error_code)) return bad('error_code must be a non-negative integer');
  if (body.delay_ms !== undefined && (!isCount(body.delay_ms) || body.delay_ms > MAX_DELAY_MS)) return bad(`delay_ms must be an integer from 0 to ${MAX_DELAY_MS}`);
  const outcome = body.outcome as RecipientOutcome;
  const errorCode = (body.error_code as number | undefined) ?? DEFAULT_REJECT_CODE;
  const delayMs = (body.delay_ms as number | undefined) ?? 0;
  if (outcome === 'ok' && delayMs === 0) state.recipients.delete(digitsOf(body.to));
  else state.recipients.set(digitsOf(body.to), { outcome, errorCode, delayMs });
  return { status: 200, body: { to: body.to, outcome, error_code: outcome === 'reject' || outcome === 'fail' ? errorCode : null, delay_ms: delayMs } };
}

export function reviewTemplate(state: SandboxState, body: unknown): Reply {
  if (!isObject(body) || typeof body.name !== 'string' || typeof body.language !== 'string') return bad('name and language are required');
  if (!REVIEW_STATUSES.includes(body.status as ReviewStatus)) return bad(`status must be one of ${REVIEW_STATUSES.join(', ')}`);
  if (body.reason !== undefined && typeof body.reason !== 'string') return bad('reason must be a string');
  if (body.waba_id !== undefined && typeof body.waba_id !== 'string') return bad('waba_id must be a string');
  const changed = state.templates.decide(body.name, body.language, body.status as ReviewStatus, body.reason as string | undefined, body.waba_id as string | undefined);
  return { status: 200, body: { name: body.name, language: body.language, status: body.status, reason: body.reason ?? null, templates: changed.map((t) => t.id) } };
}

export function bindPhoneNumber(state: SandboxState, body: unknown): Reply {
  if (!isObject(body) || typeof body.phone_number_id !== 'string' || typeof body.waba_id !== 'string') return bad('phone_number_id and waba_id are required');
  state.templates.bindPhoneNumber(body.phone_number_id, body.waba_id);
  return { status: 200, body: { phone_number_id: body.phone_number_id, waba_id: body.waba_id } };
}

/**
 * `POST /__sandbox/inbound`: a user writes to the business. Sent even when status callbacks are
 * switched off, since a test asked for it explicitly. A user with a WhatsApp username may write
 * without a phone number: give `from_user_id` (a business-scoped user id such as
 * `US.13491208655302741918`, optionally with `username`) and leave `from` out.
 */
export function inbound(state: SandboxState, body: unknown): Reply {
  if (!isObject(body) || typeof body.to_phone_number_id !== 'string') return bad('to_phone_number_id is required');
  if (typeof body.from !== 'string' && typeof body.from_user_id !== 'string') return bad('from or from_user_id is required');
  if (body.username !== undefined && typeof body.username !== 'string') return bad('username must be a string');
  const hasText = typeof body.text === 'string';
  if (!hasText && !isObject(body.flow_response)) return bad('text or flow_response is required');
  if (!state.config.callback_url) return { status: 409, body: { error: { message: 'no callback_url is configured' } } };
  const from = typeof body.from === 'string' ? digitsOf(body.from) : undefined;
  const userId = typeof body.from_user_id === 'string' ? body.from_user_id : undefined;
  const messageId = newWamid();
  const message: Obj = { from, from_user_id: userId, id: messageId, timestamp: String(Math.floor(Date.now() / 1000)) };
  const contact: Obj = { profile: { name: typeof body.name === 'string' ? body.name : 'Sandbox User' }, wa_id: from, user_id: userId, username: body.username };
  if (typeof body.context_message_id === 'string') message.context = { from: displayPhoneNumber(body.to_phone_number_id), id: body.context_message_id };
  if (hasText) {
    message.type = 'text';
    message.text = { body: body.text };
  } else {
    message.type = 'interactive';
    // A top-level flow_token is folded into the response, where WhatsApp puts it.
    const response = typeof body.flow_token === 'string' ? { flow_token: body.flow_token, ...(body.flow_response as Obj) } : body.flow_response;
    message.interactive = { type: 'nfm_reply', nfm_reply: { name: 'flow', body: 'Sent', response_json: JSON.stringify(response) } };
  }
  state.deliverer.post({
    object: 'whatsapp_business_account',
    entry: [{
      id: state.templates.wabaOf(body.to_phone_number_id) ?? body.to_phone_number_id,
      changes: [{
        field: 'messages',
        value: {
          messaging_product: 'whatsapp',
          metadata: { display_phone_number: displayPhoneNumber(body.to_phone_number_id), phone_number_id: body.to_phone_number_id },
          contacts: [contact],
          messages: [message],
        },
      }],
    }],
  });
  return { status: 200, body: { message_id: messageId } };
}
