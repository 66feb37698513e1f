import { createHash, createHmac, randomBytes, randomInt } from 'node:crypto';
import { PHONE_NUMBER_FIELDS, phoneNumberJson } from './account-callbacks.ts';
import { graphError, statusErrorText, type GraphErrorReply } from './graph-errors.ts';
import { parseMultipart } from './multipart.ts';
import { digitsOf } from './sends-log.ts';
import { SERVICE_WINDOW_MS } from './service-windows.ts';
import { MEDIA_DOWNLOAD_PATH, type Reply, type SandboxState } from './state.ts';
import type { AcceptedMessage } from './statuses.ts';
import { checkSendComponents } from './template-params.ts';
import { templateJson, type SandboxTemplate } from './templates.ts';

type Obj = Record<string, unknown>;
const isObject = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

const MAX_CALLBACK_DATA = 512;
const RATE_LIMIT_SUBCODE = 2494055;
const REENGAGEMENT_ERROR = 131047;
const MAX_MEDIA_RECORDS = 10_000;
const MEDIA_ERROR = 131053;

const KB = 1024;
const MB = 1024 * KB;
/** Supported upload types and their limits (reference §6). */
const MEDIA_KINDS: { kind: string; maxBytes: number; types: string[] }[] = [
  { kind: 'audio', maxBytes: 16 * MB, types: ['audio/aac', 'audio/amr', 'audio/mpeg', 'audio/mp4', 'audio/ogg'] },
  { kind: 'document', maxBytes: 100 * MB, types: [
    'text/plain', 'application/pdf', 'application/msword', 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
    'application/vnd.ms-excel', 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
    'application/vnd.ms-powerpoint', 'application/vnd.openxmlformats-officedocument.presentationml.presentation',
  ] },
  { kind: 'image', maxBytes: 5 * MB, types: ['image/jpeg', 'image/png'] },
  { kind: 'sticker', maxBytes: 100 * KB, types: ['image/webp'] },
  { kind: 'video', maxBytes: 16 * MB, types: ['video/mp4', 'video/3gpp'] },
];
const SUPPORTED_MEDIA = MEDIA_KINDS.flatMap((k) => k.types);
const ANIMATED_STICKER_MAX = 500 * KB;

const bareMime = (type: string) => type.split(';')[0].trim().toLowerCase();

/** The kind and size limit of an upload's type, or undefined for a type Meta does not take. */
function uploadRule(mimeType: string, data: Buffer): { kind: string; maxBytes: number } | undefined {
  const kind = MEDIA_KINDS.find((k) => k.types.includes(mimeType));
  if (!kind) return undefined;
  // A sticker may be larger when animated (a WebP with an ANIM chunk).
  if (kind.kind === 'sticker' && data.subarray(0, 64).includes('ANIM')) return { kind: 'animated sticker', maxBytes: ANIMATED_STICKER_MAX };
  return kind;
}

interface HeaderMedia { type: 'image' | 'video' | 'document'; id?: string; link?: string }

/** The media parameter of a send's header (already checked against the template), if any. */
function headerMedia(components: unknown): HeaderMedia | null {
  if (!Array.isArray(components)) return null;
  const header = components.find((c) => isObject(c) && String(c.type).toLowerCase() === 'header') as Obj | undefined;
  const param = Array.isArray(header?.parameters) ? header.parameters[0] : undefined;
  if (!isObject(param) || (param.type !== 'image' && param.type !== 'video' && param.type !== 'document')) return null;
  const value = param[param.type] as Obj;
  return { type: param.type, id: typeof value.id === 'string' ? value.id : undefined, link: typeof value.id === 'string' ? undefined : value.link as string };
}

/** Fields a template read may ask for; Graph refuses others. Those the sandbox does not keep are left out of answers. */
const TEMPLATE_FIELDS = new Set([
  'id', 'name', 'language', 'status', 'category', 'components', 'parameter_format', 'rejected_reason', 'quality_score',
  'previous_category', 'sub_category', 'message_send_ttl_seconds', 'correct_category', 'library_template_name',
]);

/** The `fields` of a read (id always included), null for the default set, or the first unknown field's name. */
function requestedFields(query: URLSearchParams): string[] | null | string {
  const raw = query.get('fields');
  if (raw === null || raw.trim() === '') return null;
  const fields = raw.split(',').map((f) => f.trim()).filter((f) => f !== '');
  const unknown = fields.find((f) => !TEMPLATE_FIELDS.has(f));
  return unknown ?? ['id', ...fields.filter((f) => f !== 'id')];
}

function unknownField(field: string): GraphErrorReply {
  return graphError(100, { title: `Tried accessing nonexisting field (${field}) on node type (WhatsAppBusinessHSM)` });
}

function pick(json: Obj, fields: string[] | null, qualityScore = 'UNKNOWN'): Obj {
  if (!fields) return json;
  const withQuality: Obj = { ...json, quality_score: { score: qualityScore } };
  return Object.fromEntries(fields.filter((f) => withQuality[f] !== undefined).map((f) => [f, withQuality[f]]));
}

/** The lower-cased text of a template's components, for the content filters. */
function contentOf(components: unknown[]): string {
  const texts: string[] = [];
  for (const component of components) {
    if (!isObject(component)) continue;
    if (typeof component.text === 'string') texts.push(component.text);
    if (Array.isArray(component.buttons)) for (const b of component.buttons) if (isObject(b) && typeof b.text === 'string') texts.push(b.text);
  }
  return texts.join('\n').toLowerCase();
}

function isWebUrl(link: string): boolean {
  try {
    const url = new URL(link);
    return (url.protocol === 'https:' || url.protocol === 'http:') && url.hostname !== '';
  } catch {
    return false;
  }
}

/** Message ids: a per-instance random prefix and a counter, so the hot path allocates little. */
const wamidPrefix = 'wamid.HBgL' + randomBytes(9).toString('base64url');
let wamidCounter = 0;
export const newWamid = () => wamidPrefix + (wamidCounter++).toString(36).padStart(8, '0');

/**
 * Media ids carry their kind and a check digest of (phone number, kind, serial) keyed by the app
 * secret, so a sandbox started again still knows the ids it gave out (Meta keeps them 30 days,
 * and the service keeps using them), while an id it never gave this phone number is unknown.
 */
const MEDIA_KIND_DIGIT: Record<string, string> = { image: '1', video: '2', document: '3', audio: '4', sticker: '5' };
const MEDIA_ID = /^([1-5])(\d{9})(\d{6})$/;

const fromError = (e: GraphErrorReply): Reply => e;

function parseJson(raw: Buffer): unknown {
  try { return JSON.parse(raw.toString('utf8')); } catch { return undefined; }
}

/** A failed status's error: Meta's words for the code, or what went wrong with the media. */
function statusError(code: number, mediaFailure: string | null): AcceptedMessage['error'] {
  const { title, details } = statusErrorText(code);
  return { code, title, details: mediaFailure ?? details };
}

/** Mark-as-read (`{messaging_product, status: "read", message_id}`): Meta answers `{success: true}`. */
function markAsRead(body: Obj): Reply {
  if (typeof body.message_id !== 'string' || body.message_id === '') {
    return fromError(graphError(131008, { details: 'The parameter message_id is required.' }));
  }
  return { status: 200, body: { success: true } };
}

export class GraphHandlers {
  private readonly mpsWindows = new Map<string, { second: number; count: number }>();

  constructor(private readonly state: SandboxState, private readonly mediaKey: string) {}

  private mediaCheck(phoneNumberId: string, kindDigit: string, serial: string): string {
    const digest = createHmac('sha256', this.mediaKey).update(`${phoneNumberId}:${kindDigit}${serial}`).digest();
    return String(digest.readUInt32BE(0) % 1_000_000).padStart(6, '0');
  }

  private newMediaId(phoneNumberId: string, kind: string): string {
    const digit = MEDIA_KIND_DIGIT[kind.split(' ').pop()!];
    const serial = String(randomInt(0, 1_000_000_000)).padStart(9, '0');
    return digit + serial + this.mediaCheck(phoneNumberId, digit, serial);
  }

  /** The kind of a media id this sandbox gave this phone number, or null. */
  private mediaKindOf(id: string, phoneNumberId: string): string | null {
    const match = MEDIA_ID.exec(id);
    if (!match || this.mediaCheck(phoneNumberId, match[1], match[2]) !== match[3]) return null;
    return Object.keys(MEDIA_KIND_DIGIT).find((k) => MEDIA_KIND_DIGIT[k] === match[1]) ?? null;
  }

  resetRateWindows(): void {
    this.mpsWindows.clear();
  }

  /** Counts this send against the phone number's per-second budget; true when over it. */
  private overThroughput(phoneNumberId: string): boolean {
    const limit = this.state.config.mps_limit;
    if (!limit) return false;
    const second = Math.floor(Date.now() / 1000);
    let window = this.mpsWindows.get(phoneNumberId);
    if (!window || window.second !== second) {
      window = { second, count: 0 };
      this.mpsWindows.set(phoneNumberId, window);
    }
    window.count++;
    return window.count > limit;
  }

  send(phoneNumberId: string, raw: Buffer, from: string | null = null): Reply {
    const { state } = this;
    const body = parseJson(raw);
    if (!isObject(body)) return fromError(graphError(100, { details: 'The request body must be a JSON object.' }));
    if (body.messaging_product !== 'whatsapp') {
      return fromError(graphError(100, { title: 'The parameter messaging_product is required.', details: 'messaging_product must be "whatsapp".' }));
    }
    if (body.status === 'read') return markAsRead(body);
    if (this.overThroughput(phoneNumberId)) {
      return fromError(graphError(130429, { subcode: RATE_LIMIT_SUBCODE, details: 'Cloud API message throughput has been reached.' }));
    }
    const to = body.to;
    if (typeof to !== 'string' || to.length === 0) return fromError(graphError(131008, { details: 'The parameter to is required.' }));
    const recipientId = digitsOf(to);
    if (!/^\+?[\d\s().-]+$/.test(to) || recipientId.length < 7 || recipientId.length > 15) {
      return fromError(graphError(131009, { details: `Invalid phone number: ${to}` }));
    }
    const callbackData = body.biz_opaque_callback_data;
    if (callbackData !== undefined && (typeof callbackData !== 'string' || callbackData.length > MAX_CALLBACK_DATA)) {
      return fromError(graphError(100, { details: `biz_opaque_callback_data must be a string of at most ${MAX_CALLBACK_DATA} characters.` }));
    }

    const type = body.type ?? 'text';
    let template: SandboxTemplate | null = null;
    let components: unknown = null;
    let mediaFailure: string | null = null;
    if (type === 'template') {
      const sent = body.template;
      if (!isObject(sent) || typeof sent.name !== 'string' || sent.name === '') {
        return fromError(graphError(131008, { details: 'The parameter template.name is required.' }));
      }
      const code = isObject(sent.language) ? sent.language.code : undefined;
      if (typeof code !== 'string' || code === '') return fromError(graphError(131008, { details: 'The parameter template.language.code is required.' }));
      const found = state.templates.resolveForSend(phoneNumberId, sent.name, code);
      if (!found || (found.status !== 'APPROVED' && found.status !== 'PAUSED' && found.status !== 'DISABLED')) {
        return fromError(graphError(132001, { details: `template name (${sent.name}) does not exist in ${code}` }));
      }
      if (found.status === 'PAUSED') return fromError(graphError(132015, { details: `Template ${sent.name} is paused.` }));
      if (found.status === 'DISABLED') return fromError(graphError(132016, { details: `Template ${sent.name} is disabled.` }));
      const problem = checkSendComponents(found.expected, sent.components);
      if (problem) return fromError(graphError(problem.code, { details: problem.details }));
      const media = headerMedia(sent.components);
      if (media?.link !== undefined && !isWebUrl(media.link)) {
        return fromError(graphError(131009, { details: `header: ${media.type}.link is not a valid http(s) URL` }));
      }
      mediaFailure = media ? this.mediaFailure(phoneNumberId, media) : null;
      template = found;
      components = sent.components ?? [];
    } else if (type === 'text') {
      if (!isObject(body.text) || typeof body.text.body !== 'string' || body.text.body === '') {
        return fromError(graphError(131008, { details: 'The parameter text.body is required.' }));
      }
    } else if (typeof type !== 'string' || !isObject(body[type])) {
      return fromError(graphError(131008, { details: `The parameter ${String(type)} is required.` }));
    }
    // Free-form messages only within the user's customer-service window (reference §8); templates any time.
    if (!template && !state.windows.isOpen(phoneNumberId, recipientId, SERVICE_WINDOW_MS)) {
      return fromError(graphError(REENGAGEMENT_ERROR, {
        details: 'Message failed to send because more than 24 hours have passed since the customer last replied to this number.',
      }));
    }

    const fate = state.recipients.fateOf(recipientId, template?.category ?? null);
    if (fate.kind === 'reject') {
      return fromError(graphError(fate.errorCode, { details: `Sandbox recipient ${to} is configured to reject sends.` }));
    }
    // Template pacing switched on for the template decides over a recipient's `held` rule.
    const held = template?.pacing ?? (fate.kind === 'held' ? fate : null);

    const messageId = newWamid();
    state.sends.add({
      message_id: messageId, to, template: template?.name ?? null, language: template?.language ?? null, components,
      biz_opaque_callback_data: (callbackData as string | undefined) ?? null, at: new Date().toISOString(), phone_number_id: phoneNumberId, from,
    });
    const accepted = fate.kind === 'accept' ? fate : { outcome: 'ok' as const, errorCode: null, delayMs: 0 };
    // Header media is fetched after the 200, as Meta does: a bad one fails the message by callback.
    const errorCode = mediaFailure ? MEDIA_ERROR : accepted.errorCode;
    const message: AcceptedMessage = {
      id: messageId, phoneNumberId, wabaId: state.templates.wabaOf(phoneNumberId) ?? phoneNumberId, recipientId,
      callbackData: (callbackData as string | undefined) ?? null, category: template?.category ?? null,
      freeInWindow: template?.category === 'UTILITY' && state.windows.isOpen(phoneNumberId, recipientId, SERVICE_WINDOW_MS),
      outcome: mediaFailure ? 'fail' : accepted.outcome, delayMs: accepted.delayMs,
      error: errorCode === null ? undefined : statusError(errorCode, mediaFailure),
    };
    if (held && template) {
      state.held.hold({ message, templateId: template.id, then: held.then, dueAt: Date.now() + held.holdMs });
    } else if (state.config.callbacks && state.config.callback_url) {
      state.statuses.accepted(message);
    }
    return {
      status: 200,
      body: {
        messaging_product: 'whatsapp', contacts: [{ input: to, wa_id: recipientId }],
        messages: [held ? { id: messageId, message_status: 'held_for_quality_assessment' } : { id: messageId }],
      },
    };
  }

  /**
   * Why the header media of an accepted send cannot be fetched, or null. A link on a host under
   * the reserved `.invalid` top-level domain stands for one that does not download; an id must be
   * one this phone number uploaded, of the header's kind.
   */
  private mediaFailure(phoneNumberId: string, media: HeaderMedia): string | null {
    if (media.link !== undefined) {
      const host = new URL(media.link).hostname;
      return host === 'invalid' || host.endsWith('.invalid') ? `Downloading media from weblink failed: host ${host} could not be resolved.` : null;
    }
    const kind = media.id === undefined ? null : this.mediaKindOf(media.id, phoneNumberId);
    if (!kind) return `Media id ${media.id} was not found for this phone number.`;
    return kind === media.type ? null : `Media id ${media.id} is ${kind === 'image' || kind === 'audio' ? 'an' : 'a'} ${kind}, which cannot be sent as ${media.type === 'image' ? 'an' : 'a'} ${media.type}.`;
  }

  createTemplate(wabaId: string, raw: Buffer): Reply {
    const result = this.state.templates.create(wabaId, parseJson(raw), this.state.config.review_ms);
    if (!result.ok) {
      return fromError(graphError(result.code, { subcode: result.subcode, details: result.details, userTitle: result.userTitle, userMessage: result.userMessage }));
    }
    const { template } = result;
    return { status: 200, body: { id: template.id, status: template.status, category: template.category } };
  }

  /**
   * GET /{waba}/message_templates with Graph's filters: exact `name`, `status`, `language`,
   * `category`; `content` (text of the components) and `name_or_content` as case-insensitive
   * substrings; `fields` picks the fields of each template.
   */
  listTemplates(wabaId: string, query: URLSearchParams, selfUrl: string): Reply {
    const fields = requestedFields(query);
    if (typeof fields === 'string') return fromError(unknownField(fields));
    const filters = ['name', 'status', 'language', 'category'] as const;
    const content = query.get('content')?.toLowerCase();
    const nameOrContent = query.get('name_or_content')?.toLowerCase();
    const all = this.state.templates.list(wabaId).filter((t) => filters.every((f) => {
      const wanted = query.get(f);
      return !wanted || templateJson(t)[f] === (f === 'status' || f === 'category' ? wanted.toUpperCase() : wanted);
    }) && (!content || contentOf(t.components).includes(content))
      && (!nameOrContent || t.name.toLowerCase().includes(nameOrContent) || contentOf(t.components).includes(nameOrContent)));
    const limit = Math.min(Math.max(Number(query.get('limit')) || 25, 1), 1000);
    const after = query.get('after');
    const start = after ? Number(Buffer.from(after, 'base64url').toString()) || 0 : 0;
    const page = all.slice(start, start + limit);
    const body: Obj = { data: page.map((t) => pick(templateJson(t), fields, t.qualityScore)) };
    if (page.length > 0) {
      const cursors = {
        before: Buffer.from(String(start)).toString('base64url'),
        after: Buffer.from(String(start + page.length)).toString('base64url'),
      };
      const paging: Obj = { cursors };
      if (start + page.length < all.length) {
        const next = new URL(selfUrl);
        next.searchParams.set('after', cursors.after);
        paging.next = next.toString();
      }
      body.paging = paging;
    }
    return { status: 200, body };
  }

  /** GET /{id}: a template (its `fields` when asked), or an uploaded media object. */
  getObject(id: string, query: URLSearchParams = new URLSearchParams(), selfOrigin = 'http://127.0.0.1'): Reply {
    const template = this.state.templates.get(id);
    if (template) {
      const fields = requestedFields(query);
      if (typeof fields === 'string') return fromError(unknownField(fields));
      return { status: 200, body: pick(templateJson(template), fields, template.qualityScore) };
    }
    const wanted = query.get('fields')?.split(',').map((f) => f.trim()).filter((f) => f !== '') ?? [];
    // Any id is a phone number in the sandbox: asked for a phone number's fields, it answers as one.
    if (wanted.some((f) => f !== 'id' && PHONE_NUMBER_FIELDS.has(f))) {
      const unknown = wanted.find((f) => !PHONE_NUMBER_FIELDS.has(f));
      if (unknown) return fromError(graphError(100, { title: `Tried accessing nonexisting field (${unknown}) on node type (WhatsAppBusinessPhoneNumber)` }));
      return phoneNumberJson(this.state, id, wanted);
    }
    const media = this.state.media.get(id);
    if (media) {
      return {
        status: 200,
        // Media a user sent can be downloaded from the sandbox itself; an upload's bytes are not kept.
        body: { messaging_product: 'whatsapp', url: media.bytes ? `${selfOrigin}${MEDIA_DOWNLOAD_PATH}?mid=${media.id}` : `https://lookaside.sandbox.invalid/media/${media.id}`, mime_type: media.mimeType, sha256: media.sha256, file_size: String(media.size), id: media.id },
      };
    }
    return fromError(graphError(100, {
      subcode: 33,
      title: `Unsupported get request. Object with ID '${id}' does not exist, cannot be loaded due to missing permissions, or does not support this operation`,
    }));
  }

  /**
   * POST /{phone}/media. Graph reads parameters from the query string as well as the form, so
   * `?messaging_product=whatsapp` with only `file` in the form is an upload too (whatsapp-api-js
   * sends it so). The file part's own type is the media's type; a `type` field must agree with it.
   */
  uploadMedia(phoneNumberId: string, contentType: string | undefined, raw: Buffer, query: URLSearchParams): Reply {
    const parts = parseMultipart(contentType, raw);
    if (!parts) return fromError(graphError(100, { details: 'Expected a multipart/form-data body.' }));
    const field = (name: string) => parts.find((p) => p.name === name && p.filename === null)?.data.toString() ?? query.get(name) ?? undefined;
    if (field('messaging_product')?.toLowerCase() !== 'whatsapp') return fromError(graphError(100, { title: 'The parameter messaging_product is required.' }));
    const file = parts.find((p) => p.name === 'file' && p.filename !== null);
    if (!file) return fromError(graphError(100, { title: 'The parameter file is required.' }));
    if (file.data.length === 0) return fromError(graphError(131053, { details: 'The uploaded file is empty.' }));
    const partType = file.contentType ? bareMime(file.contentType) : undefined;
    const typeField = field('type');
    const declared = partType ?? (typeField ? bareMime(typeField) : 'application/octet-stream');
    if (typeField && bareMime(typeField) !== declared) {
      return fromError(graphError(100, { details: `Param type (${typeField}) does not match the type of the uploaded file (${declared}).` }));
    }
    const rule = uploadRule(declared, file.data);
    if (!rule) return fromError(graphError(100, { details: `Param file must be a file with one of the following types: ${SUPPORTED_MEDIA.join(', ')}. Received file of type '${declared}'.` }));
    if (file.data.length > rule.maxBytes) {
      return fromError(graphError(100, { details: `The ${rule.kind} file is ${file.data.length} bytes; ${declared} files may be at most ${rule.maxBytes} bytes.` }));
    }
    const id = this.newMediaId(phoneNumberId, rule.kind);
    const { media } = this.state;
    if (media.size >= MAX_MEDIA_RECORDS) media.delete(media.keys().next().value as string);
    media.set(id, {
      id, phoneNumberId, mimeType: declared, filename: file.filename, size: file.data.length,
      sha256: createHash('sha256').update(file.data).digest('hex'),
    });
    return { status: 200, body: { id } };
  }
}
