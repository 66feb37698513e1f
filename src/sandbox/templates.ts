import { TEMPLATE_SUBCODES } from '../upstream/error-codes.ts';
import type { HeldFate } from './recipients.ts';
import { expectedParams, type ExpectedParams } from './template-params.ts';
import { authenticationComponents, checkTemplateComponents } from './template-rules.ts';

export type ReviewStatus = 'APPROVED' | 'REJECTED' | 'PAUSED' | 'DISABLED';
export const REVIEW_STATUSES: readonly ReviewStatus[] = ['APPROVED', 'REJECTED', 'PAUSED', 'DISABLED'];

export interface SandboxTemplate {
  id: string;
  wabaId: string;
  name: string;
  language: string;
  category: string;
  parameterFormat: string;
  components: unknown[];
  status: string;
  rejectedReason: string;
  createdAt: number;
  expected: ExpectedParams;
  /** When a pause set through the control API ends by itself (epoch ms). */
  unpauseAt?: number;
  /** Template pacing switched on through the control API: every send is held, then released or dropped. */
  pacing?: { then: HeldFate; holdMs: number };
  /** Quality set through the control API (message_template_quality_update); UNKNOWN until then. */
  qualityScore?: string;
}

export interface TemplateStatusChange {
  template: SandboxTemplate;
  event: string;
  reason: string;
  /** `other_info.title` of the callback: FIRST_PAUSE (and the like) on a pause, UNPAUSE when a pause ends. */
  title?: string;
}

/** How a pause is named in `other_info.title` (reference §7). */
export const PAUSE_TITLES = ['FIRST_PAUSE', 'SECOND_PAUSE', 'RATE_LIMITING_PAUSE'] as const;
export type PauseTitle = typeof PAUSE_TITLES[number];

/** What a restarted sandbox needs to answer as before: templates, review outcomes, phone bindings. */
export interface TemplateStoreSnapshot {
  nextId: number;
  templates: Omit<SandboxTemplate, 'expected'>[];
  phoneToWaba: [string, string][];
  reviewRules: [string, { status: ReviewStatus; reason: string }][];
}

export type CreateResult =
  | { ok: true; template: SandboxTemplate }
  | { ok: false; code: number; subcode?: number; details: string; userTitle?: string; userMessage?: string };

const CATEGORIES = new Set(['MARKETING', 'UTILITY', 'AUTHENTICATION']);
const NAME = /^[a-z0-9_]{1,512}$/;
const LANGUAGE = /^[A-Za-z]{2,3}([_-][A-Za-z0-9]{2,8})?$/;

const keyOf = (name: string, language: string) => `${name}\u0000${language}`;
/** Review decisions apply to every WABA unless scoped to one. */
const ruleKey = (name: string, language: string, wabaId?: string) => `${keyOf(name, language)}\u0000${wabaId ?? '*'}`;
type Obj = Record<string, unknown>;
const isObject = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Templates per WABA, with review. Sends name a phone-number id, not a WABA: the sandbox learns
 * which WABA a phone number belongs to the first time a send finds its template in exactly one
 * WABA not yet bound to another number (or from `POST /__sandbox/phone_numbers`). Until then a
 * send may use a template of any WABA, since the sandbox accepts any ids.
 */
export class TemplateStore {
  private readonly byId = new Map<string, SandboxTemplate>();
  private readonly byWaba = new Map<string, Map<string, SandboxTemplate>>();
  private readonly byKey = new Map<string, SandboxTemplate[]>();
  private readonly phoneToWaba = new Map<string, string>();
  private readonly boundWabas = new Set<string>();
  /** Outcomes decided through the control API, applied when a matching template is reviewed. */
  private readonly reviewRules = new Map<string, { status: ReviewStatus; reason: string }>();
  /** Pending reviews and pauses that end by themselves. */
  private readonly timers = new Set<NodeJS.Timeout>();
  private nextId = 100_000_000_000_000 + Math.floor(Math.random() * 1_000_000_000) * 1000;

  /** `onChange` is told after anything a snapshot holds has changed (to persist it). */
  constructor(private readonly onStatusChange: (change: TemplateStatusChange) => void, private readonly onChange: () => void = () => {}) {}

  snapshot(): TemplateStoreSnapshot {
    return {
      nextId: this.nextId,
      templates: this.all().map(({ expected: _derived, ...template }) => template),
      phoneToWaba: [...this.phoneToWaba],
      reviewRules: [...this.reviewRules],
    };
  }

  /** Loads a snapshot into an empty store; templates still pending are reviewed `reviewMs` from now. */
  restore(snapshot: TemplateStoreSnapshot, reviewMs: number): void {
    this.nextId = Math.max(this.nextId, snapshot.nextId);
    for (const saved of snapshot.templates) {
      const template: SandboxTemplate = { ...saved, expected: expectedParams(saved.components, saved.parameterFormat) };
      this.add(template);
      if (template.status === 'PENDING') this.scheduleReview(template, reviewMs);
      if (template.status === 'PAUSED' && template.unpauseAt !== undefined) this.scheduleUnpause(template, template.unpauseAt);
    }
    for (const [phoneNumberId, wabaId] of snapshot.phoneToWaba) {
      this.phoneToWaba.set(phoneNumberId, wabaId);
      this.boundWabas.add(wabaId);
    }
    for (const [key, rule] of snapshot.reviewRules) this.reviewRules.set(key, rule);
  }

  create(wabaId: string, body: unknown, reviewMs: number): CreateResult {
    if (!isObject(body)) return { ok: false, code: 100, details: 'The request body must be a JSON object.' };
    const { name, language, category } = body;
    if (typeof name !== 'string' || !NAME.test(name)) {
      return { ok: false, code: 100, details: 'name: lowercase letters, digits and underscores, 1 to 512 characters.', userTitle: 'Invalid template name', userMessage: 'Template names may only contain lowercase letters, digits and underscores.' };
    }
    if (typeof language !== 'string' || !LANGUAGE.test(language)) return { ok: false, code: 100, details: 'language: a supported locale code such as en or en_US is required.' };
    if (typeof category !== 'string' || !CATEGORIES.has(category.toUpperCase())) return { ok: false, code: 100, details: 'category: one of MARKETING, UTILITY, AUTHENTICATION.' };
    const parameterFormat = String(body.parameter_format ?? 'POSITIONAL').toUpperCase();
    let components = body.components;
    if (category.toUpperCase() === 'AUTHENTICATION') {
      // Meta stores its fixed authentication shape: preset body text and the OTP button as a URL button.
      const shaped = authenticationComponents(components);
      if ('code' in shaped) return { ok: false, ...shaped };
      components = shaped.components;
    } else {
      const refused = checkTemplateComponents(components, category.toUpperCase(), parameterFormat);
      if (refused) return { ok: false, ...refused };
    }
    const waba = this.wabaTemplates(wabaId);
    if (waba.has(keyOf(name, language))) {
      return {
        ok: false, code: 100, subcode: TEMPLATE_SUBCODES.duplicateNameLanguage, details: `Content in this language already exists: ${name} (${language}).`,
        userTitle: 'Content in this language already exists', userMessage: `There is already ${language} content for this template. You can create a new template and try again.`,
      };
    }
    const template: SandboxTemplate = {
      id: String(this.nextId++), wabaId, name, language, category: category.toUpperCase(), parameterFormat, components: components as unknown[],
      status: 'PENDING', rejectedReason: 'NONE', createdAt: Date.now(), expected: expectedParams(components as unknown[], parameterFormat),
    };
    this.add(template);
    this.scheduleReview(template, reviewMs);
    this.onChange();
    return { ok: true, template };
  }

  private add(template: SandboxTemplate): void {
    const key = keyOf(template.name, template.language);
    this.byId.set(template.id, template);
    this.wabaTemplates(template.wabaId).set(key, template);
    const same = this.byKey.get(key);
    if (same) same.push(template); else this.byKey.set(key, [template]);
  }

  private scheduleReview(template: SandboxTemplate, reviewMs: number): void {
    this.later(reviewMs, () => {
      if (template.status !== 'PENDING') return;
      const rule = this.reviewRules.get(ruleKey(template.name, template.language, template.wabaId))
        ?? this.reviewRules.get(ruleKey(template.name, template.language));
      this.setStatus(template, rule?.status ?? 'APPROVED', rule?.reason ?? 'NONE');
    });
  }

  private scheduleUnpause(template: SandboxTemplate, at: number): void {
    // Only the latest pause's end counts: a later pause with another end supersedes it.
    this.later(at - Date.now(), () => { if (template.unpauseAt === at) this.unpause(template); });
  }

  private later(ms: number, run: () => void): void {
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      run();
    }, Math.max(0, ms));
    timer.unref();
    this.timers.add(timer);
  }

  /** Templates of a name and language, in every WABA or in one. */
  find(name: string, language: string, wabaId?: string): SandboxTemplate[] {
    return (this.byKey.get(keyOf(name, language)) ?? []).filter((t) => wabaId === undefined || t.wabaId === wabaId);
  }

  /**
   * Pauses an APPROVED template (Meta's quality pause: sends fail with 132015), optionally ending
   * by itself `unpauseAfterMs` later. False when it was not approved.
   */
  pause(template: SandboxTemplate, title: PauseTitle = 'FIRST_PAUSE', unpauseAfterMs?: number): boolean {
    if (template.status !== 'APPROVED') return false;
    this.setStatus(template, 'PAUSED', 'NONE', title);
    if (unpauseAfterMs !== undefined) {
      template.unpauseAt = Date.now() + unpauseAfterMs;
      this.scheduleUnpause(template, template.unpauseAt);
      this.onChange();
    }
    return true;
  }

  /** Ends a pause: the template is APPROVED again (callback with `other_info.title` UNPAUSE). False when it was not paused. */
  unpause(template: SandboxTemplate): boolean {
    if (template.status !== 'PAUSED') return false;
    this.setStatus(template, 'APPROVED', 'NONE');
    return true;
  }

  /** Switches template pacing on (every send held, then released or dropped) or off (undefined). */
  setPacing(template: SandboxTemplate, pacing: SandboxTemplate['pacing']): void {
    if (pacing) template.pacing = pacing; else delete template.pacing;
    this.onChange();
  }

  /**
   * The reviewer's (or later the platform's) decision for a name and language: applied now to
   * existing templates, pending or not, and at review time to templates created later.
   */
  decide(name: string, language: string, status: ReviewStatus, reason: string | undefined, wabaId?: string): SandboxTemplate[] {
    const finalReason = reason ?? (status === 'REJECTED' ? 'INVALID_FORMAT' : 'NONE');
    this.reviewRules.set(ruleKey(name, language, wabaId), { status, reason: finalReason });
    const changed = this.find(name, language, wabaId);
    for (const template of changed) this.setStatus(template, status, finalReason);
    this.onChange();
    return changed;
  }

  private setStatus(template: SandboxTemplate, status: string, reason: string, title?: string): void {
    if (template.status === status) return;
    const wasPaused = template.status === 'PAUSED';
    template.status = status;
    template.rejectedReason = status === 'REJECTED' ? reason : 'NONE';
    delete template.unpauseAt;
    this.onChange();
    // Meta ends a pause with an APPROVED event titled UNPAUSE (reference §7, §11), however it ends.
    this.onStatusChange({ template, event: status, reason, title: title ?? (wasPaused && status === 'APPROVED' ? 'UNPAUSE' : undefined) });
  }

  get(id: string): SandboxTemplate | undefined {
    return this.byId.get(id);
  }

  list(wabaId: string): SandboxTemplate[] {
    return [...(this.byWaba.get(wabaId)?.values() ?? [])];
  }

  all(): SandboxTemplate[] {
    return [...this.byId.values()];
  }

  bindPhoneNumber(phoneNumberId: string, wabaId: string): void {
    if (this.phoneToWaba.get(phoneNumberId) === wabaId) return;
    this.phoneToWaba.set(phoneNumberId, wabaId);
    this.boundWabas.add(wabaId);
    this.onChange();
  }

  wabaOf(phoneNumberId: string): string | undefined {
    return this.phoneToWaba.get(phoneNumberId);
  }

  /** The template a send through this phone number means, or undefined (Meta's 132001). */
  resolveForSend(phoneNumberId: string, name: string, language: string): SandboxTemplate | undefined {
    const key = keyOf(name, language);
    const waba = this.phoneToWaba.get(phoneNumberId);
    if (waba !== undefined) return this.byWaba.get(waba)?.get(key);
    const candidates = this.byKey.get(key);
    if (!candidates || candidates.length === 0) return undefined;
    // One WABA per tenant, one phone number per WABA: a WABA another number is bound to is not this one's.
    const unclaimed = candidates.length === 1 ? candidates : candidates.filter((t) => !this.boundWabas.has(t.wabaId));
    if (unclaimed.length === 1) {
      this.bindPhoneNumber(phoneNumberId, unclaimed[0].wabaId);
      return unclaimed[0];
    }
    // Ambiguous: the newest approved one, without learning a binding from a guess.
    for (let i = candidates.length - 1; i >= 0; i--) if (candidates[i].status === 'APPROVED') return candidates[i];
    return candidates[candidates.length - 1];
  }

  /** Forgets review rules and template pacing; templates (paused ones too) and phone bindings stay, like the account's content would. */
  forgetRules(): void {
    this.reviewRules.clear();
    for (const template of this.byId.values()) delete template.pacing;
    this.onChange();
  }

  close(): void {
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
  }

  private wabaTemplates(wabaId: string): Map<string, SandboxTemplate> {
    let waba = this.byWaba.get(wabaId);
    if (!waba) {
      waba = new Map();
      this.byWaba.set(wabaId, waba);
    }
    return waba;
  }
}

/** A template as Graph returns it from GET /{template-id} and the list endpoint. */
export function templateJson(template: SandboxTemplate): Record<string, unknown> {
  return {
    id: template.id,
    name: template.name,
    language: template.language,
    status: template.status,
    category: template.category,
    parameter_format: template.parameterFormat,
    components: template.components,
    rejected_reason: template.rejectedReason,
  };
}
