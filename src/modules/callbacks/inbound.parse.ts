import { nestsDeeperThan, storable } from '../../http/storable-text.ts';

/**
 * Reading one inbound message of the upstream's callback (reference §7) into what we store and
 * emit. Pure: no database, so every type's shape has a fast unit test.
 */

/** An inbound message as the upstream sends it, as far as we read it. */
export interface RawInbound {
  id?: string; from?: string; from_user_id?: string; timestamp?: string; type?: string;
  context?: { from?: string; id?: string };
  text?: { body?: string };
  button?: { text?: string; payload?: string };
  interactive?: { type?: string; button_reply?: RawReply; list_reply?: RawReply; nfm_reply?: { name?: string; body?: string; response_json?: string } };
  reaction?: { message_id?: string; emoji?: string };
  location?: { latitude?: number; longitude?: number; name?: string; address?: string; url?: string };
  contacts?: unknown[];
  order?: { catalog_id?: string; text?: string; product_items?: unknown[] };
  referral?: Record<string, unknown>;
  edit?: { original_message_id?: string; message?: RawInbound };
  revoke?: { original_message_id?: string };
  [media: string]: unknown;
}
interface RawReply { id?: string; title?: string; description?: string }
/** A sender as `value.contacts[]` names it: phone (`wa_id`) and/or business-scoped user id. */
export interface RawContact { wa_id?: string; user_id?: string }

export const MEDIA_TYPES = ['image', 'video', 'audio', 'document', 'sticker'] as const;

/**
 * The per-type fields of a message (additive keys of message.received and of an inbound message
 * in GET /messages), present only for the types that have them.
 */
export interface InboundDetails {
  button?: { payload: string | null; text: string | null };
  interactive?: { type: string; id: string | null; title: string | null; description: string | null };
  media?: { id: string | null; mime_type: string | null; sha256: string | null; caption: string | null; filename: string | null };
  location?: { latitude: number | null; longitude: number | null; name: string | null; address: string | null; url: string | null };
  contacts?: unknown[];
  order?: { catalog_id: string | null; text: string | null; product_items: unknown[] };
  referral?: Record<string, string | number | boolean | null>;
}

/**
 * What an inbound callback does to a message already known (by its upstream id) instead of being
 * a new message: a reaction (empty emoji: taken back), an edit (the new text) or a revoke (deletion).
 */
export type Annotation =
  | { kind: 'reaction'; targetUpstreamId: string; emoji: string }
  | { kind: 'edit'; targetUpstreamId: string; text: string | null; details: InboundDetails }
  | { kind: 'revoke'; targetUpstreamId: string };

export interface InboundMessage {
  upstreamMessageId: string;
  from: string | null;
  /** Business-scoped user id (BSUID): users with a username may write without a phone number. */
  fromUserId: string | null;
  type: string;
  text: string | null;
  timestamp: Date;
  /** The upstream id of the message this one replies to or whose button it taps. */
  contextUpstreamId: string | null;
  details: InboundDetails;
  flow: { flowToken: string | null; response: Record<string, unknown> } | null;
  /** Set for reactions, edits and revokes: they change the message they name instead of being new ones. */
  annotation: Annotation | null;
  raw: RawInbound;
}

/** Upstream ids are short (a wamid is about 60 characters); a longer one is not a message of ours. */
export const MAX_UPSTREAM_ID = 512;

// The envelope is signed, but its shape is still the sender's: anything not of the expected type
// reads as absent, so a malformed callback is skipped instead of failing (a 500 is retried forever).
export const list = <T>(value: T[] | undefined): T[] => (Array.isArray(value) ? value : []);
export const text = (value: unknown): string | undefined => (typeof value === 'string' ? value : typeof value === 'number' ? String(value) : undefined);
export const record = <T extends object>(value: T | undefined): Partial<T> => (typeof value === 'object' && value !== null && !Array.isArray(value) ? value : {});
const orNull = (value: unknown): string | null => text(value) ?? null;
const numberOrNull = (value: unknown): number | null => {
  const n = typeof value === 'string' ? Number(value) : value;
  return typeof n === 'number' && Number.isFinite(n) ? n : null;
};
const upstreamId = (value: unknown): string | null => {
  const id = text(value);
  return id && id.length <= MAX_UPSTREAM_ID ? id : null;
};

export function toDate(unixSeconds: string | undefined): Date {
  const date = new Date(Number(unixSeconds) * 1000);
  // Absent, zero or out of the representable range: the time it reached us.
  return date.getTime() > 0 ? date : new Date();
}

function parseFlowResponse(json: string | undefined): { flowToken: string | null; response: Record<string, unknown> } {
  let parsed: unknown = {};
  try { parsed = JSON.parse(json ?? '{}'); } catch { parsed = { raw: json ?? null }; }
  // The submitted fields become event data: what the database cannot hold is cleaned, an absurd nesting kept as text.
  parsed = nestsDeeperThan(parsed) ? { raw: json ?? null } : storable(parsed);
  const fields = (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) ? parsed : { value: parsed }) as Record<string, unknown>;
  const { flow_token: token, ...response } = fields;
  return { flowToken: typeof token === 'string' ? token : null, response };
}

/** Only the referral's scalar fields (source_url, headline, ctwa_clid, ...): the rest is Meta's to grow. */
function scalars(value: unknown): Record<string, string | number | boolean | null> {
  const out: Record<string, string | number | boolean | null> = {};
  for (const [key, item] of Object.entries(record(value as object))) {
    if (item === null || ['string', 'number', 'boolean'].includes(typeof item)) out[key] = item as string | number | boolean | null;
  }
  return out;
}

/** The message's text and its per-type fields (an edit carries a whole message of this shape). */
function contentOf(m: RawInbound, type: string): { text: string | null; details: InboundDetails } {
  const details: InboundDetails = {};
  const interactive = record(m.interactive);
  let body = text(record(m.text).body);
  if (type === 'button') {
    const button = record(m.button);
    details.button = { payload: orNull(button.payload), text: orNull(button.text) };
    body = text(button.text);
  } else if (type === 'interactive') {
    const kind = text(interactive.type) ?? 'unknown';
    const reply = record((kind === 'button_reply' ? interactive.button_reply : kind === 'list_reply' ? interactive.list_reply : undefined) as RawReply | undefined);
    const nfm = kind === 'nfm_reply' ? record(interactive.nfm_reply) : undefined;
    details.interactive = { type: kind, id: orNull(reply.id), title: orNull(reply.title), description: kind === 'list_reply' ? orNull(reply.description) : null };
    body = text(reply.title) ?? text(nfm?.body);
  } else if ((MEDIA_TYPES as readonly string[]).includes(type)) {
    const media = record(m[type] as Record<string, unknown> | undefined);
    details.media = {
      id: upstreamId(media.id), mime_type: orNull(media.mime_type), sha256: orNull(media.sha256),
      caption: orNull(media.caption), filename: orNull(media.filename),
    };
    body = text(media.caption);
  } else if (type === 'location') {
    const location = record(m.location);
    details.location = {
      latitude: numberOrNull(location.latitude), longitude: numberOrNull(location.longitude),
      name: orNull(location.name), address: orNull(location.address), url: orNull(location.url),
    };
  } else if (type === 'contacts') {
    details.contacts = list(m.contacts).filter((c) => typeof c === 'object' && c !== null);
  } else if (type === 'order') {
    const order = record(m.order);
    details.order = { catalog_id: orNull(order.catalog_id), text: orNull(order.text), product_items: list(order.product_items) };
    body = text(order.text);
  }
  if (m.referral !== undefined) details.referral = scalars(m.referral);
  return { text: body ?? null, details };
}

function annotationOf(m: RawInbound, type: string): Annotation | null {
  if (type === 'reaction') {
    const reaction = record(m.reaction);
    const target = upstreamId(reaction.message_id);
    // Meta leaves the emoji out when the user takes a reaction back.
    return target ? { kind: 'reaction', targetUpstreamId: target, emoji: text(reaction.emoji) ?? '' } : null;
  }
  if (type === 'edit') {
    const edit = record(m.edit);
    const target = upstreamId(edit.original_message_id);
    const inner = record(edit.message);
    const { text: body, details } = contentOf(inner as RawInbound, text(inner.type) ?? 'text');
    return target ? { kind: 'edit', targetUpstreamId: target, text: body, details } : null;
  }
  if (type === 'revoke') {
    const target = upstreamId(record(m.revoke).original_message_id);
    return target ? { kind: 'revoke', targetUpstreamId: target } : null;
  }
  return null;
}

/**
 * The message's sender as the upstream names them. `from` (phone) may be absent for users with a
 * username; `from_user_id` (or the matching `contacts[].user_id`) then names them.
 */
export function toInbound(raw: RawInbound, contacts: Partial<RawContact>[]): InboundMessage | null {
  const m = storable(raw);
  const id = upstreamId(m.id);
  if (!id) return null;
  const type = text(m.type) ?? 'unknown';
  const interactive = record(m.interactive);
  const nfm = type === 'interactive' && interactive.type === 'nfm_reply' ? record(interactive.nfm_reply) : undefined;
  const { text: body, details } = contentOf(m, type);
  const from = text(m.from);
  const contact = contacts.find((c) => from !== undefined && text(c.wa_id) === from.replace(/^\+/, '')) ?? (contacts.length === 1 ? contacts[0] : undefined);
  const userId = text(m.from_user_id) ?? text(contact?.user_id);
  return {
    upstreamMessageId: id,
    from: from ? (from.startsWith('+') ? from : `+${from}`) : null,
    fromUserId: userId && userId.length <= MAX_UPSTREAM_ID ? userId : null,
    type,
    text: body,
    timestamp: toDate(text(m.timestamp)),
    contextUpstreamId: upstreamId(record(m.context).id),
    details,
    flow: nfm ? parseFlowResponse(text(nfm.response_json)) : null,
    annotation: annotationOf(m, type),
    raw: m,
  };
}
