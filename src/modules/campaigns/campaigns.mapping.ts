import type { ValidationDetail } from '../../http/errors.ts';
import type { SendComponent } from '../../upstream/types.ts';
import type { PlaceholderPlan } from '../templates/templates.grammar.ts';

/**
 * Spec 2.2: the variable mapping, a recipe that fills a template's placeholders per contact.
 * Pure: normalisation, the check against the template, and resolution against one contact.
 */

export type MappingParameter =
  | { kind: 'static'; value: string }
  | { kind: 'contact_field'; field: string; fallback?: string }
  | { kind: 'media'; media_id: string };

export interface MappingComponent {
  type: 'header' | 'body' | 'button';
  format?: 'IMAGE' | 'VIDEO' | 'DOCUMENT' | 'TEXT';
  sub_type?: string;
  index?: number;
  parameters: MappingParameter[];
}

export interface VariableMapping {
  components: MappingComponent[];
}

/** Contact columns a contact_field may name (besides custom_fields.<key>). */
export const CONTACT_FIELDS = ['first_name', 'last_name', 'phone', 'email', 'company', 'job_title', 'status', 'source'] as const;
const HEADER_FORMATS = ['IMAGE', 'VIDEO', 'DOCUMENT', 'TEXT'] as const;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const MAX_PARAMETERS = 100;
/** A parameter's text can never exceed a body's 1,024 characters (the upstream would refuse every send). */
const MAX_PARAMETER_TEXT = 1024;

type Loc = (string | number)[];
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const issue = (loc: Loc, msg: string, input: unknown, type = 'value_error'): ValidationDetail => ({ type, loc, msg, input: input ?? null });

/** A contact column or custom_fields.<key>. */
export function isContactField(field: string): boolean {
  if ((CONTACT_FIELDS as readonly string[]).includes(field)) return true;
  return /^custom_fields\.[^.\s]{1,100}$/.test(field);
}

function normaliseParameter(raw: unknown, loc: Loc, issues: ValidationDetail[]): MappingParameter | null {
  if (!isObject(raw)) { issues.push(issue(loc, 'each parameter must be an object with a kind', raw, 'object_type')); return null; }
  const kind = typeof raw.kind === 'string' ? raw.kind.toLowerCase() : raw.kind;
  switch (kind) {
    case 'static':
      if (typeof raw.value !== 'string' || raw.value.length > MAX_PARAMETER_TEXT) { issues.push(issue([...loc, 'value'], `a static parameter needs a string value of at most ${MAX_PARAMETER_TEXT} characters`, raw.value)); return null; }
      return { kind, value: raw.value };
    case 'contact_field': {
      if (typeof raw.field !== 'string' || !isContactField(raw.field)) {
        issues.push(issue([...loc, 'field'], `field must be a contact column (${CONTACT_FIELDS.join(', ')}) or custom_fields.<key>`, raw.field));
        return null;
      }
      if (raw.fallback !== undefined && raw.fallback !== null && (typeof raw.fallback !== 'string' || raw.fallback.length > MAX_PARAMETER_TEXT)) {
        issues.push(issue([...loc, 'fallback'], `fallback must be a string of at most ${MAX_PARAMETER_TEXT} characters`, raw.fallback));
        return null;
      }
      return typeof raw.fallback === 'string' ? { kind, field: raw.field, fallback: raw.fallback } : { kind, field: raw.field };
    }
    case 'media':
      if (typeof raw.media_id !== 'string' || !UUID.test(raw.media_id)) { issues.push(issue([...loc, 'media_id'], 'media_id must be the UUID of a media asset', raw.media_id)); return null; }
      return { kind, media_id: raw.media_id.toLowerCase() };
    default:
      issues.push(issue([...loc, 'kind'], 'kind must be static, contact_field or media', raw.kind, 'enum'));
      return null;
  }
}

function normaliseComponent(raw: unknown, loc: Loc, issues: ValidationDetail[]): MappingComponent | null {
  if (!isObject(raw)) { issues.push(issue(loc, 'each component must be an object', raw, 'object_type')); return null; }
  const type = typeof raw.type === 'string' ? raw.type.toLowerCase() : raw.type;
  if (type !== 'header' && type !== 'body' && type !== 'button') { issues.push(issue([...loc, 'type'], 'type must be header, body or button', raw.type, 'enum')); return null; }
  if (!Array.isArray(raw.parameters) || raw.parameters.length > MAX_PARAMETERS) {
    issues.push(issue([...loc, 'parameters'], `parameters must be an array of at most ${MAX_PARAMETERS} entries`, raw.parameters, 'array_type'));
    return null;
  }
  const before = issues.length;
  const parameters = raw.parameters.map((p, i) => normaliseParameter(p, [...loc, 'parameters', i], issues));
  const component: MappingComponent = { type, parameters: parameters.filter((p): p is MappingParameter => p !== null) };
  if (type === 'header' && raw.format !== undefined && raw.format !== null) {
    const format = typeof raw.format === 'string' ? raw.format.toUpperCase() : raw.format;
    if (!(HEADER_FORMATS as readonly unknown[]).includes(format)) issues.push(issue([...loc, 'format'], `format must be ${HEADER_FORMATS.join(', ')}`, raw.format, 'enum'));
    else component.format = format as MappingComponent['format'];
  }
  if (type === 'button') {
    if (raw.sub_type !== undefined && raw.sub_type !== null) {
      if (typeof raw.sub_type !== 'string' || raw.sub_type.length === 0 || raw.sub_type.length > 32) issues.push(issue([...loc, 'sub_type'], 'sub_type must be a short string such as url', raw.sub_type));
      else component.sub_type = raw.sub_type.toLowerCase();
    }
    const index = typeof raw.index === 'string' && /^\d{1,2}$/.test(raw.index) ? Number(raw.index) : raw.index;
    if (!Number.isInteger(index) || (index as number) < 0 || (index as number) > 9) issues.push(issue([...loc, 'index'], 'a button component needs the index (0-9) of its button', raw.index));
    else component.index = index as number;
  }
  return issues.length === before ? component : null;
}

/** Spec 2.2 rules 1-2: unknown keys are dropped at every level; what cannot be normalised is a list of issues. */
export function normaliseMapping(raw: unknown, loc: Loc = ['body', 'variable_mapping']): { mapping: VariableMapping | null; issues: ValidationDetail[] } {
  const issues: ValidationDetail[] = [];
  if (!isObject(raw)) return { mapping: null, issues: [issue(loc, 'variable_mapping must be an object with a components array', raw, 'object_type')] };
  if (!Array.isArray(raw.components) || raw.components.length > 20) {
    return { mapping: null, issues: [issue([...loc, 'components'], 'components must be an array of at most 20 entries', raw.components, 'array_type')] };
  }
  const components = raw.components.map((c, i) => normaliseComponent(c, [...loc, 'components', i], issues));
  if (issues.length > 0) return { mapping: null, issues };
  return { mapping: { components: components as MappingComponent[] }, issues };
}

/** Whether the template has any placeholder a send must fill (a media header counts). */
export function templateNeedsParameters(plan: PlaceholderPlan): boolean {
  return plan.body > 0 || headerParameters(plan) > 0 || plan.buttons.some((b) => b.variables > 0);
}

function headerParameters(plan: PlaceholderPlan): number {
  if (!plan.header) return 0;
  if (plan.header.format === 'TEXT') return plan.header.variables;
  return plan.header.format === 'LOCATION' ? 0 : 1;
}

/** The mapping checked against the template's placeholders: one entry per component that has parameters, each with exactly as many parameters. */
export function checkMappingAgainstTemplate(mapping: VariableMapping | null, plan: PlaceholderPlan, loc: Loc = ['body', 'variable_mapping']): ValidationDetail[] {
  const issues: ValidationDetail[] = [];
  const components = mapping?.components ?? [];
  const seen = new Set<string>();
  components.forEach((c, i) => {
    const cLoc = [...loc, 'components', i];
    const key = c.type === 'button' ? `button:${c.index}` : c.type;
    if (seen.has(key)) { issues.push(issue(cLoc, `the template's ${key.replace(':', ' ')} is mapped twice`, c.type)); return; }
    seen.add(key);
    let expected: number;
    if (c.type === 'body') expected = plan.body;
    else if (c.type === 'header') {
      if (!plan.header) { issues.push(issue(cLoc, 'the template has no header', c.type)); return; }
      if (c.format && c.format !== plan.header.format) { issues.push(issue([...cLoc, 'format'], `the template's header is ${plan.header.format}, not ${c.format}`, c.format)); return; }
      expected = headerParameters(plan);
      const mediaHeader = plan.header.format !== 'TEXT';
      c.parameters.forEach((p, pi) => {
        if (mediaHeader && p.kind !== 'media') issues.push(issue([...cLoc, 'parameters', pi, 'kind'], `the ${plan.header!.format} header takes a media parameter`, p.kind));
        if (!mediaHeader && p.kind === 'media') issues.push(issue([...cLoc, 'parameters', pi, 'kind'], 'a text header takes static or contact_field parameters', p.kind));
      });
    } else {
      const button = plan.buttons[c.index!];
      if (!button || button.variables === 0) { issues.push(issue([...cLoc, 'index'], `button ${c.index} of the template does not take parameters`, c.index)); return; }
      if (c.sub_type && c.sub_type !== button.type) { issues.push(issue([...cLoc, 'sub_type'], `button ${c.index} is a ${button.type} button`, c.sub_type)); return; }
      expected = button.variables;
    }
    if (c.type !== 'header') {
      c.parameters.forEach((p, pi) => {
        if (p.kind === 'media') issues.push(issue([...cLoc, 'parameters', pi, 'kind'], `a ${c.type} takes static or contact_field parameters`, p.kind));
      });
    }
    if (c.parameters.length !== expected) {
      issues.push(issue([...cLoc, 'parameters'], `the template's ${c.type === 'button' ? `button ${c.index}` : c.type} has ${expected} placeholder${expected === 1 ? '' : 's'}; the mapping gives ${c.parameters.length}`, c.parameters.length));
    }
  });
  if (plan.body > 0 && !seen.has('body')) issues.push(issue([...loc, 'components'], `the template's body has ${plan.body} placeholder${plan.body === 1 ? '' : 's'}; map them in a body component`, null, 'missing'));
  if (headerParameters(plan) > 0 && !seen.has('header')) issues.push(issue([...loc, 'components'], 'the template\'s header takes parameters; map them in a header component', null, 'missing'));
  for (const b of plan.buttons) {
    if (b.variables > 0 && !seen.has(`button:${b.index}`)) issues.push(issue([...loc, 'components'], `button ${b.index} of the template takes parameters; map them in a button component with index ${b.index}`, null, 'missing'));
  }
  return issues;
}

/** Every media id a mapping references (checked against the tenant's media at create time). */
export function mediaIdsOf(mapping: VariableMapping | null): string[] {
  return [...new Set((mapping?.components ?? []).flatMap((c) => c.parameters.flatMap((p) => (p.kind === 'media' ? [p.media_id] : []))))];
}

/** The contact as the mapping reads it. */
export interface MappedContact {
  first_name: string;
  last_name: string | null;
  phone: string;
  email: string | null;
  company: string | null;
  job_title: string | null;
  status: string | null;
  source: string;
  custom_fields: Record<string, unknown>;
}

/** A contact's value for a field, as text; empty when missing (spec 2.2 rule 3). */
export function contactValue(contact: MappedContact, field: string): string {
  const custom = field.startsWith('custom_fields.');
  const source: object | null | undefined = custom ? contact.custom_fields : contact;
  const key = custom ? field.slice('custom_fields.'.length) : field;
  // Own keys only: custom_fields.__proto__ or .constructor must not read Object.prototype.
  const value = source && Object.hasOwn(source, key) ? (source as Record<string, unknown>)[key] : undefined;
  if (value === null || value === undefined) return '';
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  return JSON.stringify(value);
}

/** The text of one parameter for one contact: the value, else the fallback, else empty. */
export function parameterText(p: MappingParameter, contact: MappedContact): string {
  if (p.kind === 'static') return p.value;
  if (p.kind === 'contact_field') return contactValue(contact, p.field) || (p.fallback ?? '');
  return '';
}

export interface MediaForSend { type: 'image' | 'video' | 'document'; upstreamId: string; filename: string }

/**
 * One contact's send components in the upstream's format. `media` gives the upstream id of each
 * mapped media asset (resolved once per batch, not per recipient).
 */
export function resolveSendComponents(mapping: VariableMapping | null, plan: PlaceholderPlan, contact: MappedContact, media: Map<string, MediaForSend>): SendComponent[] {
  return (mapping?.components ?? []).map((c): SendComponent => {
    const parameters = c.parameters.map((p): Record<string, unknown> => {
      if (p.kind === 'media') {
        const m = media.get(p.media_id);
        if (!m) throw new Error(`media ${p.media_id} was not resolved`);
        return { type: m.type, [m.type]: { id: m.upstreamId, ...(m.type === 'document' ? { filename: m.filename } : {}) } };
      }
      return { type: 'text', text: parameterText(p, contact) };
    });
    if (c.type === 'button') {
      const button = plan.buttons[c.index!];
      return { type: 'button', sub_type: c.sub_type ?? button?.type ?? 'url', index: String(c.index), parameters };
    }
    return { type: c.type, parameters };
  });
}

/** Replaces {{n}} in a text with the n-th parameter's text (missing: empty). */
export function fillPlaceholders(text: string, values: string[]): string {
  return text.replace(/\{\{(\d+)\}\}/g, (_m, n: string) => values[Number(n) - 1] ?? '');
}

/** Spec 4.1 render preview: each text-bearing template component with its placeholders replaced as a send would. */
export function renderComponents(templateComponents: unknown[], mapping: VariableMapping | null, contact: MappedContact): { type: string; text: string }[] {
  const textsFor = (type: string, index?: number) => {
    const c = mapping?.components.find((m) => m.type === type && (type !== 'button' || m.index === index));
    return (c?.parameters ?? []).map((p) => parameterText(p, contact));
  };
  const out: { type: string; text: string }[] = [];
  for (const raw of templateComponents) {
    if (!isObject(raw)) continue;
    const type = String(raw.type ?? '').toUpperCase();
    if (type === 'HEADER') {
      const format = String(raw.format ?? 'TEXT').toUpperCase();
      if (format === 'TEXT' && typeof raw.text === 'string') out.push({ type: 'header', text: fillPlaceholders(raw.text, textsFor('header')) });
      else out.push({ type: 'header', text: `[${format.toLowerCase()}]` });
    } else if ((type === 'BODY' || type === 'FOOTER') && typeof raw.text === 'string') {
      out.push({ type: type.toLowerCase(), text: type === 'BODY' ? fillPlaceholders(raw.text, textsFor('body')) : raw.text });
    } else if (type === 'BUTTONS' && Array.isArray(raw.buttons)) {
      raw.buttons.forEach((b, index) => {
        if (!isObject(b)) return;
        const label = typeof b.text === 'string' ? b.text : '';
        const target = typeof b.url === 'string' ? ` (${fillPlaceholders(b.url, textsFor('button', index))})` : typeof b.phone_number === 'string' ? ` (${b.phone_number})` : '';
        out.push({ type: 'button', text: label + target });
      });
    }
  }
  return out;
}
