import { newWamid } from './graph.ts';
import type { HeldMessage } from './held.ts';
import { HELD_FATES, RULE_OUTCOMES, ruleJson, type HeldFate, type RecipientRule, type RuleOutcome } from './recipients.ts';
import { digitsOf } from './sends-log.ts';
import { createHash, randomInt } from 'node:crypto';
import { displayPhoneNumber, postNumberChange, type MediaRecord, type Reply, type SandboxConfig, type SandboxState } from './state.ts';
import { PAUSE_TITLES, REVIEW_STATUSES, type PauseTitle, type ReviewStatus, type SandboxTemplate } from './templates.ts';

type Obj = Record<string, unknown>;
const isObject = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const bad = (message: string): Reply => ({ status: 400, body: { error: { message } } });
const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;

const DEFAULT_REJECT_CODE = 131026;
const MAX_DELAY_MS = 3_600_000;
const DEFAULT_HOLD_MS = 1000;
const isDelay = (v: unknown): v is number => isCount(v) && v <= MAX_DELAY_MS;

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
  if (body.hold_statuses !== undefined) {
    if (typeof body.hold_statuses !== 'boolean') return bad('hold_statuses must be true or false');
    next.hold_statuses = body.hold_statuses;
  }
  if (body.callback_url !== undefined) {
    if (body.callback_url !== null && (typeof body.callback_url !== 'string' || !/^https?:\/\/./.test(body.callback_url))) {
      return bad('callback_url must be an http(s) URL or null');
    }
    next.callback_url = body.callback_url;
  }
  state.config = next;
  if (!next.hold_statuses) state.statuses.resume();
  return { status: 200, body: state.config };
}

/**
 * `POST /__sandbox/statuses/release {batch_size?}`: posts the status callbacks waiting now, in
 * POSTs of `batch_size` statuses (default the sandbox's batch, 100), one after the other; answers
 * once the receiver took the last one.
 */
export async function releaseStatuses(state: SandboxState, body: unknown): Promise<Reply> {
  if (!isObject(body)) return bad('body must be a JSON object');
  if (body.batch_size !== undefined && (!isCount(body.batch_size) || body.batch_size < 1)) return bad('batch_size must be a positive integer');
  return { status: 200, body: await state.statuses.release(body.batch_size as number | undefined) };
}

/**
 * `POST /__sandbox/recipients {to, outcome, error_code?, delay_ms?, count?, then?, hold_ms?}`:
 * `reject` refuses sends with `error_code` (the next `count` only, when given); `defer` fails the next `count` (default 1) MARKETING sends with 131049 by callback; `held`
 * answers template sends `held_for_quality_assessment` and settles them `hold_ms` later by `then`.
 */
export function setRecipientRule(state: SandboxState, body: unknown): Reply {
  if (!isObject(body) || typeof body.to !== 'string' || digitsOf(body.to).length === 0) return bad('to is required');
  if (!RULE_OUTCOMES.includes(body.outcome as RuleOutcome)) return bad(`outcome must be one of ${RULE_OUTCOMES.join(', ')}`);
  if (body.error_code !== undefined && !isCount(body.error_code)) return bad('error_code must be a non-negative integer');
  if (body.delay_ms !== undefined && !isDelay(body.delay_ms)) return bad(`delay_ms must be an integer from 0 to ${MAX_DELAY_MS}`);
  const outcome = body.outcome as RuleOutcome;
  const rule: RecipientRule = { outcome, errorCode: (body.error_code as number | undefined) ?? DEFAULT_REJECT_CODE, delayMs: (body.delay_ms as number | undefined) ?? 0 };
  if (body.count !== undefined && (!isCount(body.count) || body.count < 1)) return bad('count must be a positive integer');
  if (outcome === 'defer') rule.remaining = (body.count as number | undefined) ?? 1;
  if (outcome === 'reject' && body.count !== undefined) rule.remaining = body.count as number;
  if (outcome === 'held') {
    const held = heldSwitch(body);
    if (typeof held === 'string') return bad(held);
    Object.assign(rule, held);
  }
  state.recipients.set(digitsOf(body.to), rule);
  return { status: 200, body: { ...ruleJson(digitsOf(body.to), rule), to: body.to } };
}

/** `then` (default release) and `hold_ms` (default 1000) of a held rule or of template pacing, or what is wrong with them. */
function heldSwitch(body: Obj): { then: HeldFate; holdMs: number } | string {
  if (body.then !== undefined && !HELD_FATES.includes(body.then as HeldFate)) return `then must be one of ${HELD_FATES.join(', ')}`;
  if (body.hold_ms !== undefined && !isDelay(body.hold_ms)) return `hold_ms must be an integer from 0 to ${MAX_DELAY_MS}`;
  return { then: (body.then as HeldFate | undefined) ?? 'release', holdMs: (body.hold_ms as number | undefined) ?? DEFAULT_HOLD_MS };
}

export function listRecipientRules(state: SandboxState): Reply {
  return { status: 200, body: { data: state.recipients.list().map(([recipientId, rule]) => ruleJson(recipientId, rule)) } };
}

/** The templates a control call names (`name`, `language`, optional `waba_id`), or the reply refusing it. */
function namedTemplates(state: SandboxState, body: unknown): { body: Obj; templates: SandboxTemplate[] } | Reply {
  if (!isObject(body) || typeof body.name !== 'string' || typeof body.language !== 'string') return bad('name and language are required');
  if (body.waba_id !== undefined && typeof body.waba_id !== 'string') return bad('waba_id must be a string');
  const templates = state.templates.find(body.name, body.language, body.waba_id as string | undefined);
  if (templates.length === 0) return { status: 404, body: { error: { message: `no template ${body.name} (${body.language})${body.waba_id ? ` in WABA ${body.waba_id}` : ''}` } } };
  return { body, templates };
}

/**
 * `POST /__sandbox/templates/pause {name, language, waba_id?, title?, unpause_after_ms?}`: Meta's
 * quality pause of the APPROVED templates named (PAUSED callback; sends fail with 132015), ending
 * by itself after `unpause_after_ms` when given, else at `POST /__sandbox/templates/unpause`.
 */
export function pauseTemplate(state: SandboxState, request: unknown): Reply {
  const named = namedTemplates(state, request);
  if ('status' in named) return named;
  const { body, templates } = named;
  if (body.title !== undefined && !PAUSE_TITLES.includes(body.title as PauseTitle)) return bad(`title must be one of ${PAUSE_TITLES.join(', ')}`);
  if (body.unpause_after_ms !== undefined && !isDelay(body.unpause_after_ms)) return bad(`unpause_after_ms must be an integer from 0 to ${MAX_DELAY_MS}`);
  const paused = templates.filter((t) => state.templates.pause(t, body.title as PauseTitle | undefined, body.unpause_after_ms as number | undefined));
  if (paused.length === 0) return { status: 409, body: { error: { message: 'no APPROVED template to pause', statuses: templates.map((t) => t.status) } } };
  return { status: 200, body: { templates: paused.map((t) => t.id), status: 'PAUSED', unpause_at: paused[0].unpauseAt === undefined ? null : new Date(paused[0].unpauseAt).toISOString() } };
}

/** `POST /__sandbox/templates/unpause {name, language, waba_id?}`: ends a pause (APPROVED callback, other_info UNPAUSE). */
export function unpauseTemplate(state: SandboxState, request: unknown): Reply {
  const named = namedTemplates(state, request);
  if ('status' in named) return named;
  const unpaused = named.templates.filter((t) => state.templates.unpause(t));
  if (unpaused.length === 0) return { status: 409, body: { error: { message: 'no PAUSED template to unpause', statuses: named.templates.map((t) => t.status) } } };
  return { status: 200, body: { templates: unpaused.map((t) => t.id), status: 'APPROVED' } };
}

/**
 * `POST /__sandbox/templates/pacing {name, language, waba_id?, then, hold_ms?}`: template pacing.
 * With `then` release or drop every send of the template is answered `held_for_quality_assessment`
 * and settled `hold_ms` later; `then: null` switches it off.
 */
export function setTemplatePacing(state: SandboxState, request: unknown): Reply {
  const named = namedTemplates(state, request);
  if ('status' in named) return named;
  const { body, templates } = named;
  const pacing = body.then === null ? undefined : heldSwitch(body);
  if (typeof pacing === 'string') return bad(`${pacing}, or null to switch pacing off`);
  for (const template of templates) state.templates.setPacing(template, pacing);
  return { status: 200, body: { templates: templates.map((t) => t.id), then: pacing?.then ?? null, hold_ms: pacing?.holdMs ?? null } };
}

function heldJson(entry: HeldMessage): Obj {
  return { message_id: entry.message.id, to: entry.message.recipientId, template_id: entry.templateId, then: entry.then, due_at: new Date(entry.dueAt).toISOString() };
}

export function listHeld(state: SandboxState): Reply {
  return { status: 200, body: { data: state.held.list().map(heldJson) } };
}

/** `POST /__sandbox/held/settle {to?, then?}`: settles held messages now (all, or those to `to`), each by its own fate unless `then` says. */
export function settleHeld(state: SandboxState, body: unknown): Reply {
  if (!isObject(body)) return bad('body must be a JSON object');
  if (body.to !== undefined && typeof body.to !== 'string') return bad('to must be a string');
  if (body.then !== undefined && !HELD_FATES.includes(body.then as HeldFate)) return bad(`then must be one of ${HELD_FATES.join(', ')}`);
  const to = typeof body.to === 'string' ? digitsOf(body.to) : undefined;
  const settled = state.held.settleWhere((e) => to === undefined || e.message.recipientId === to, body.then as HeldFate | undefined);
  return { status: 200, body: { data: settled.map((e) => ({ ...heldJson(e), then: body.then ?? e.then })) } };
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
  if (body.message !== undefined && (!isObject(body.message) || typeof body.message.type !== 'string')) return bad('message must be an object with a type');
  if (body.media !== undefined && !isObject(body.media)) return bad('media must be an object');
  if (!hasText && !isObject(body.flow_response) && !isObject(body.message) && !isObject(body.media)) return bad('text, flow_response, message or media is required');
  if (!state.config.callback_url) return { status: 409, body: { error: { message: 'no callback_url is configured' } } };
  let media: MediaRecord | null = null;
  if (isObject(body.media)) {
    const made = inboundMedia(state, body.to_phone_number_id, body.media);
    if (typeof made === 'string') return bad(made);
    media = made;
  }
  const from = typeof body.from === 'string' ? digitsOf(body.from) : undefined;
  const userId = typeof body.from_user_id === 'string' ? body.from_user_id : undefined;
  const name = typeof body.name === 'string' ? body.name : undefined;
  if (from) state.windows.opened(body.to_phone_number_id, from, name, userId);
  const messageId = newWamid();
  const message: Obj = { from, from_user_id: userId, id: messageId, timestamp: String(Math.floor(Date.now() / 1000)) };
  const contact: Obj = { profile: { name: name ?? 'Sandbox User' }, wa_id: from, user_id: userId, username: body.username };
  if (typeof body.context_message_id === 'string') message.context = { from: displayPhoneNumber(body.to_phone_number_id), id: body.context_message_id };
  if (media) {
    const kind = (body.media as Obj).type as string;
    message.type = kind;
    message[kind] = {
      id: media.id, mime_type: media.mimeType, sha256: media.sha256,
      ...(typeof (body.media as Obj).caption === 'string' ? { caption: (body.media as Obj).caption } : {}),
      ...(media.filename ? { filename: media.filename } : {}),
    };
  } else if (isObject(body.message)) {
    // Any message type, as the upstream shapes it (button, interactive, reaction, location, edit, ...).
    Object.assign(message, body.message);
  } else if (hasText) {
    message.type = 'text';
    message.text = { body: body.text };
  } else {
    message.type = 'interactive';
    // A top-level flow_token is folded into the response, where WhatsApp puts it.
    const response = typeof body.flow_token === 'string' ? { flow_token: body.flow_token, ...(body.flow_response as Obj) } : body.flow_response;
    message.interactive = { type: 'nfm_reply', nfm_reply: { name: 'flow', body: 'Sent', response_json: JSON.stringify(response) } };
  }
  postNumberChange(state, body.to_phone_number_id, 'messages', { contacts: [contact], messages: [message] });
  return { status: 200, body: { message_id: messageId, ...(media ? { media_id: media.id } : {}) } };
}

const INBOUND_MEDIA_TYPES = ['image', 'video', 'audio', 'document', 'sticker'];
/** Inbound media bytes the sandbox keeps at most (the oldest go first), like Meta's limited retention. */
const MAX_INBOUND_MEDIA = 500;

/** Stores the bytes of a user's media (`{ type, data: base64, mime_type, filename? }`) for download. */
function inboundMedia(state: SandboxState, phoneNumberId: string, spec: Obj): MediaRecord | string {
  if (typeof spec.type !== 'string' || !INBOUND_MEDIA_TYPES.includes(spec.type)) return `media.type must be one of ${INBOUND_MEDIA_TYPES.join(', ')}`;
  if (typeof spec.data !== 'string') return 'media.data (base64) is required';
  if (typeof spec.mime_type !== 'string') return 'media.mime_type is required';
  const bytes = Buffer.from(spec.data, 'base64');
  const id = `9${String(randomInt(0, 1_000_000_000)).padStart(9, '0')}${String(randomInt(0, 1_000_000)).padStart(6, '0')}`;
  const kept = [...state.media.values()].filter((m) => m.bytes);
  if (kept.length >= MAX_INBOUND_MEDIA) state.media.delete(kept[0].id);
  const record: MediaRecord = {
    id, phoneNumberId, mimeType: spec.mime_type, filename: typeof spec.filename === 'string' ? spec.filename : null,
    size: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex'), bytes,
  };
  state.media.set(id, record);
  return record;
}

/** `POST /__sandbox/media/expire`: the platform no longer keeps this media (its id answers 100/33, its URL 404). */
export function expireMedia(state: SandboxState, body: unknown): Reply {
  if (!isObject(body) || typeof body.id !== 'string') return bad('id is required');
  if (!state.media.delete(body.id)) return { status: 404, body: { error: { message: `no media ${body.id}` } } };
  return { status: 200, body: { ok: true } };
}
