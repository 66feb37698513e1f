/**
 * The built-in WhatsApp Cloud API stand-in (ARCHITECTURE §6): a plain node:http server, because
 * the send path must stay far faster than the service it measures (~10k sends/s measured on the
 * 2-core dev machine with client and sandbox in one process, ~4.8k/s with status callbacks flowing).
 *
 * Behaviour worth knowing when writing tests against it:
 * - Any WABA id, phone-number id and non-empty bearer token is accepted.
 * - Templates live per WABA. A phone number is bound to a WABA through
 *   `POST /__sandbox/phone_numbers {phone_number_id, waba_id}`, or learned on its first send whose
 *   template exists in exactly one WABA (see TemplateStore). Callbacks carry that WABA as entry id.
 * - `POST /__sandbox/templates/review` is the reviewer's decision: applied at once to existing
 *   templates of that name and language (pending or not, with a callback) and at review time to
 *   ones created later; an optional `waba_id` in the body limits it to that WABA.
 * - `callbacks: false` silences status and template callbacks; `/__sandbox/inbound` still posts.
 *   `hold_statuses: true` keeps status callbacks until `POST /__sandbox/statuses/release`, which
 *   posts what waits in fixed batches (a test that counts the service's work per callback).
 * - Header media is checked after the 200, as Meta fetches it then: a `link` on a host under the
 *   reserved `.invalid` domain (e.g. https://cdn.sandbox.invalid/x.png) stands for one that cannot
 *   be downloaded, and an `id` must be one this phone number uploaded, of the header's kind;
 *   otherwise the message gets a `failed` status with 131053 instead of sent/delivered/read.
 * - `POST /__sandbox/recipients {to, outcome, error_code?, delay_ms?}`: `delay_ms` holds that
 *   recipient's first status (sent or failed) back, for campaigns whose outcomes arrive late.
 *   `defer` (with `count`) fails the next MARKETING sends with 131049 by callback; `held` (with
 *   `then`, `hold_ms`) answers template sends `held_for_quality_assessment`, then releases or drops them.
 * - `POST /__sandbox/templates/pause|unpause|pacing`: Meta's quality pause (132015 meanwhile) and
 *   its end (APPROVED with other_info UNPAUSE); template pacing holds every send of a template.
 * - Free-form (non-template) messages need an inbound message from that user to that phone number
 *   within 24 h (`POST /__sandbox/inbound`), else 131047; mark-as-read answers `{success: true}`.
 * - Statuses carry `pricing` on sent and delivered (a template in its category; a free-form
 *   message as a free service message), never on read or failed, and `contacts[]` beside them
 *   (not for failed ones).
 * - `POST /__sandbox/user_preferences {to_phone_number_id, from, value: stop|resume}` posts Meta's
 *   `user_preferences` callback (a user stopped or resumed marketing messages).
 * - `POST /__sandbox/inbound` sends any message type (`message`) or a user's file (`media`), whose
 *   bytes `GET /{media_id}`'s `url` serves (on this server, Bearer token required) until
 *   `POST /__sandbox/media/expire` lets it go.
 * - `POST /__sandbox/reset` forgets recipient rules, review rules, template pacing, service
 *   windows, the sends log and throughput windows, and restores the configuration defaults except
 *   `callback_url`; templates stay, and so does what is owed (held messages, queued callbacks).
 * - With `stateFile` (the service's DATA_DIR), templates, review outcomes, phone bindings, rules,
 *   service windows, held messages, statuses not yet posted and callbacks queued or waiting for a
 *   retry are written there (coalesced, see StateFile) and on close, and read back at start.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import pino, { type Logger } from 'pino';
import { businessCapability, phoneNumberQuality, templateCategory, templateQuality } from './account-callbacks.ts';
import { CallbackDeliverer, type SavedCallback } from './callbacks.ts';
import {
  bindPhoneNumber, expireMedia, inbound, listHeld, listRecipientRules, pauseTemplate, releaseStatuses, reviewTemplate, setRecipientRule, setTemplatePacing,
  settleHeld, unpauseTemplate, updateConfig,
} from './control.ts';
import { graphError, missingTokenError, statusErrorText } from './graph-errors.ts';
import { GraphHandlers } from './graph.ts';
import { HeldMessages, type HeldMessage } from './held.ts';
import { RecipientRules, type HeldFate, type RecipientRule } from './recipients.ts';
import { SendsLog } from './sends-log.ts';
import { ServiceWindows } from './service-windows.ts';
import { StateFile } from './state-file.ts';
import { userPreferences } from './user-preferences.ts';
import { displayPhoneNumber, MEDIA_DOWNLOAD_PATH, type Reply, type SandboxConfig, type SandboxState } from './state.ts';
import { StatusPipeline, type PendingStatus, type StatusPipelineSnapshot } from './statuses.ts';
import { TemplateStore, templateJson, type SandboxTemplate, type TemplateStatusChange, type TemplateStoreSnapshot } from './templates.ts';

export interface SandboxOptions {
  port: number;
  host?: string;
  reviewMs?: number;
  appSecret: string;
  callbackUrl?: string | null;
  logger?: Logger;
  latencyMs?: number;
  mpsLimit?: number | null;
  callbacks?: boolean;
  /** How long status callbacks collect before they are posted together. */
  statusFlushMs?: number;
  statusBatchSize?: number;
  /** Delays before re-posting a callback the receiver did not take. */
  callbackRetryDelaysMs?: number[];
  sendsLogCapacity?: number;
  graphVersion?: string;
  /** JSON file keeping templates, rules and the callbacks still owed across restarts; none: memory only. */
  stateFile?: string;
}

/**
 * What the state file holds: the template store's snapshot (all the file held before) and, since,
 * recipient rules, customer-service windows and everything still owed to the receiver.
 */
interface SandboxSnapshot extends TemplateStoreSnapshot {
  recipients?: [string, RecipientRule][];
  windows?: ReturnType<ServiceWindows['snapshot']>;
  held?: HeldMessage[];
  statuses?: StatusPipelineSnapshot;
  callbacks?: SavedCallback[];
}

export interface Sandbox {
  /** Listener root, where `/__sandbox/...` lives. */
  url: string;
  /** Graph API base with the version, what UPSTREAM_BASE_URL would be. */
  baseUrl: string;
  state: SandboxState;
  close(): Promise<void>;
}

const VERSION = /^v\d+(\.\d+)?$/;
const CONTROL_ROUTES_WITH_BODY: Record<string, (state: SandboxState, body: unknown) => Reply | Promise<Reply>> = {
  'PUT /__sandbox/config': updateConfig,
  'POST /__sandbox/recipients': setRecipientRule,
  'POST /__sandbox/templates/review': reviewTemplate,
  'POST /__sandbox/templates/pause': pauseTemplate,
  'POST /__sandbox/templates/unpause': unpauseTemplate,
  'POST /__sandbox/templates/pacing': setTemplatePacing,
  'POST /__sandbox/held/settle': settleHeld,
  'POST /__sandbox/statuses/release': releaseStatuses,
  'POST /__sandbox/inbound': inbound,
  'POST /__sandbox/media/expire': expireMedia,
  'POST /__sandbox/phone_numbers': bindPhoneNumber,
  'POST /__sandbox/business_capability': businessCapability,
  'POST /__sandbox/phone_number_quality': phoneNumberQuality,
  'POST /__sandbox/templates/quality': templateQuality,
  'POST /__sandbox/templates/category': templateCategory,
  'POST /__sandbox/user_preferences': userPreferences,
};
const JSON_LIMIT = 1024 * 1024;
const MEDIA_LIMIT = 110 * 1024 * 1024;

export async function createSandbox(options: SandboxOptions): Promise<Sandbox> {
  const logger = options.logger ?? pino({ level: 'silent' });
  const defaults: SandboxConfig = Object.freeze({
    review_ms: options.reviewMs ?? 1500,
    latency_ms: options.latencyMs ?? 0,
    mps_limit: options.mpsLimit ?? null,
    callbacks: options.callbacks ?? true,
    hold_statuses: false,
    callback_url: options.callbackUrl ?? null,
  });
  const persist = new StateFile<SandboxSnapshot>(options.stateFile, () => ({
    ...state.templates.snapshot(),
    recipients: state.recipients.snapshot(),
    windows: state.windows.snapshot(),
    held: state.held.snapshot(),
    statuses: state.statuses.snapshot(),
    callbacks: state.deliverer.owed(),
  }));
  const changed = () => persist.schedule();
  const deliverer = new CallbackDeliverer({
    appSecret: options.appSecret, callbackUrl: () => state.config.callback_url, logger, retryDelaysMs: options.callbackRetryDelaysMs,
    onSettled: (next) => state.statuses.advance(next as PendingStatus[]), onChange: changed,
  });
  const windows = new ServiceWindows(changed);
  const state: SandboxState = {
    config: { ...defaults },
    defaults,
    templates: new TemplateStore((change) => templateStatusChanged(state, change), changed),
    sends: new SendsLog(options.sendsLogCapacity),
    recipients: new RecipientRules(changed),
    windows,
    held: new HeldMessages((entry, fate) => settleHeldMessage(state, entry, fate), changed),
    media: new Map(),
    messagingLimits: new Map(),
    deliverer,
    statuses: new StatusPipeline(deliverer, {
      flushMs: options.statusFlushMs ?? 20, batchSize: options.statusBatchSize ?? 100, displayPhoneNumber,
      contactOf: (phoneNumberId, recipientId) => windows.contactOf(phoneNumberId, recipientId), onChange: changed,
      hold: () => state.config.hold_statuses,
    }),
    logger,
  };
  const saved = persist.load();
  if (saved) {
    state.templates.restore(saved, defaults.review_ms);
    state.recipients.restore(saved.recipients ?? []);
    state.windows.restore(saved.windows ?? []);
    state.statuses.restore(saved.statuses ?? { due: [], delayed: [] });
    state.held.restore(saved.held ?? []);
    state.deliverer.restore(saved.callbacks ?? []);
  }
  const graph = new GraphHandlers(state, options.appSecret);

  function reset(): Reply {
    state.recipients.clear();
    state.windows.clear();
    state.sends.clear();
    state.templates.forgetRules();
    state.messagingLimits.clear();
    graph.resetRateWindows();
    // The callback URL is wiring, not behaviour: a test that pointed it at its app keeps it.
    state.config = { ...defaults, callback_url: state.config.callback_url };
    state.statuses.resume();
    return { status: 200, body: { ok: true } };
  }

  async function control(req: IncomingMessage, path: string, query: URLSearchParams): Promise<Reply> {
    const route = `${req.method} ${path}`;
    if (route === 'GET /__sandbox/health') return { status: 200, body: { status: 'ok' } };
    if (route === 'GET /__sandbox/config') return { status: 200, body: state.config };
    if (route === 'GET /__sandbox/sends') return { status: 200, body: { data: state.sends.list(query.get('to') ?? undefined) } };
    if (route === 'GET /__sandbox/templates') return { status: 200, body: { data: state.templates.all().map(sandboxTemplateJson) } };
    if (route === 'GET /__sandbox/recipients') return listRecipientRules(state);
    if (route === 'GET /__sandbox/held') return listHeld(state);
    if (route === 'POST /__sandbox/reset') return reset();
    const handler = CONTROL_ROUTES_WITH_BODY[route];
    if (!handler) return { status: 404, body: { error: { message: `no sandbox control route ${route}` } } };
    const raw = await readBody(req, JSON_LIMIT);
    if (!raw) return { status: 413, body: { error: { message: 'body too large' } } };
    let body: unknown;
    try { body = raw && raw.length > 0 ? JSON.parse(raw.toString('utf8')) : {}; } catch { return { status: 400, body: { error: { message: 'body is not valid JSON' } } }; }
    return handler(state, body);
  }

  /** Reads what the Graph route needs from the request; the returned step does the work. */
  async function graphRoute(req: IncomingMessage, path: string, query: URLSearchParams): Promise<() => Reply | Promise<Reply>> {
    // Graph serves a path without a version as the oldest version the app may still call; the
    // sandbox behaves the same under every version, so such a path is simply served.
    const parts = path.split('/');
    if (parts.length > 1 && VERSION.test(parts[1])) parts.splice(1, 1);
    if (parts.length < 2 || parts.length > 3 || parts[1] === '') {
      return () => graphError(2500, { title: `Unknown path components: ${path}` });
    }
    const auth = req.headers.authorization;
    if (!auth || !/^Bearer\s+\S+/i.test(auth)) return missingTokenError;
    let id: string;
    try { id = decodeURIComponent(parts[1]); } catch { return () => graphError(2500, { title: `Unknown path components: ${path}` }); }
    const edge = parts[2];
    const route = `${req.method} ${edge ?? ''}`;
    if (route === 'GET ') return () => graph.getObject(id, query, `http://${req.headers.host ?? '127.0.0.1'}`);
    if (route === 'GET message_templates') return () => graph.listTemplates(id, query, `http://${req.headers.host ?? '127.0.0.1'}${req.url}`);
    if (route === 'POST messages' || route === 'POST message_templates') {
      const raw = await readBody(req, JSON_LIMIT);
      if (!raw) return () => graphError(100, { details: 'Request body too large.' });
      return edge === 'messages' ? () => graph.send(id, raw, req.socket.remoteAddress ?? null) : () => graph.createTemplate(id, raw);
    }
    if (route === 'POST media') {
      const raw = await readBody(req, MEDIA_LIMIT);
      if (!raw) return () => graphError(100, { details: 'The file is larger than any supported media type allows.' });
      return () => graph.uploadMedia(id, req.headers['content-type'], raw, query);
    }
    return () => graphError(2500, { title: `Unknown path components: /${edge ?? ''}` });
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    const query = new URLSearchParams(q < 0 ? '' : url.slice(q + 1));
    if (path.startsWith('/__sandbox/')) {
      write(res, await control(req, path, query));
      return;
    }
    if (path === MEDIA_DOWNLOAD_PATH) {
      downloadMedia(req, res, query.get('mid') ?? '');
      return;
    }
    const work = await graphRoute(req, path, query);
    // A slow upstream is slow before it answers: the request is read at once (a client that gives
    // up still leaves it behind), but taken (its statuses queued) only after the delay, so
    // callbacks still follow the response as on the real platform.
    const latency = state.config.latency_ms;
    if (latency > 0) await new Promise((resolve) => setTimeout(resolve, latency));
    write(res, await work());
  }

  function downloadMedia(req: IncomingMessage, res: ServerResponse, id: string): void {
    const auth = req.headers.authorization;
    if (!auth || !/^Bearer\s+\S+/i.test(auth)) { write(res, { status: 401, body: { error: { message: 'a Bearer token is required' } } }); return; }
    const media = state.media.get(id);
    if (!media?.bytes) { write(res, { status: 404, body: { error: { message: 'media not found' } } }); return; }
    res.writeHead(200, { 'content-type': media.mimeType, 'content-length': media.bytes.length });
    res.end(media.bytes);
  }

  const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
    handle(req, res).catch((err) => {
      logger.error({ err }, 'sandbox request failed');
      // The sandbox has nothing to fail but the request itself (a value of an unexpected type):
      // Meta answers such requests with 100, a request error that retrying does not fix.
      if (!res.headersSent) write(res, graphError(100, { details: 'A parameter has an unexpected type or value.' }));
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host === '0.0.0.0' || host === '[::]' ? '127.0.0.1' : host}:${address.port}`;

  return {
    url,
    baseUrl: `${url}/${options.graphVersion ?? 'v21.0'}`,
    state,
    async close() {
      // Timers stop first, then requests; what is still owed (statuses not yet posted, callbacks
      // queued, in flight or waiting for a retry, held messages) is written before the deliverer
      // lets go of it, and taken back by the next start.
      state.templates.close();
      state.held.close();
      state.statuses.close();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
      persist.schedule();
      persist.flush();
      await deliverer.close();
    },
  };
}

/** A template as the control API lists it: Graph's fields, its WABA, and the control API's pause end and pacing switch. */
function sandboxTemplateJson(template: SandboxTemplate): Record<string, unknown> {
  return {
    ...templateJson(template), waba_id: template.wabaId,
    unpause_at: template.unpauseAt === undefined ? null : new Date(template.unpauseAt).toISOString(),
    pacing: template.pacing ? { then: template.pacing.then, hold_ms: template.pacing.holdMs } : null,
  };
}

/** A held message's hold ended: its statuses follow, or (dropped) it fails with 132015 and its template pauses. */
function settleHeldMessage(state: SandboxState, { message, templateId }: HeldMessage, fate: HeldFate): void {
  if (fate === 'drop') {
    const template = state.templates.get(templateId);
    if (template) state.templates.pause(template);
  }
  if (!state.config.callbacks || !state.config.callback_url) return;
  const paused = { code: 132015, ...statusErrorText(132015) };
  state.statuses.accepted(fate === 'drop' ? { ...message, outcome: 'fail', delayMs: 0, error: paused } : message);
}

function templateStatusChanged(state: SandboxState, change: TemplateStatusChange): void {
  templateStatusCallback(state, change);
  // Reference §2: a pacing that ends in a pause fails every message still held for that template.
  if (change.event === 'PAUSED') state.held.settleWhere((entry) => entry.templateId === change.template.id, 'drop');
}

function write(res: ServerResponse, reply: Reply): void {
  if (res.destroyed) return;
  const text = JSON.stringify(reply.body);
  res.writeHead(reply.status, { 'content-type': 'application/json; charset=UTF-8', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** The request body, or null when it is larger than `limit`. */
function readBody(req: IncomingMessage, limit: number): Promise<Buffer | null> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) tooLarge = true;
      else chunks.push(chunk);
    });
    req.on('end', () => resolve(tooLarge ? null : chunks.length === 1 ? chunks[0] : Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function templateStatusCallback(state: SandboxState, { template, event, reason, title }: TemplateStatusChange): void {
  if (!state.config.callbacks || !state.config.callback_url) return;
  const now = Math.floor(Date.now() / 1000);
  const value: Record<string, unknown> = {
    event,
    // A number in this webhook, a string in REST responses, as Meta does.
    message_template_id: Number(template.id),
    message_template_name: template.name,
    message_template_language: template.language,
    message_template_category: template.category,
    reason: event === 'REJECTED' ? reason : 'NONE',
  };
  if (event === 'PAUSED') value.other_info = { title: title ?? 'FIRST_PAUSE', description: `Your ${template.name} template has been paused because of low quality.` };
  if (title === 'UNPAUSE') value.other_info = { title, description: `Your ${template.name} template is no longer paused and can be sent again.` };
  if (event === 'DISABLED') value.disable_info = { disable_date: now };
  if (event === 'REJECTED' && reason === 'INVALID_FORMAT') value.rejection_info = { reason: 'INVALID_FORMAT', recommendation: 'Check the template\'s variables and formatting.' };
  state.deliverer.post({
    object: 'whatsapp_business_account',
    entry: [{ id: template.wabaId, time: now, changes: [{ field: 'message_template_status_update', value }] }],
  });
}
