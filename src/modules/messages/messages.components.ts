import type { ValidationDetail } from '../../http/errors.ts';
import type { SendComponent } from '../../upstream/types.ts';
import type { PlaceholderPlan } from '../templates/templates.grammar.ts';

/**
 * Translates the send request's components into the upstream's send format, checked against the
 * stored template's placeholders so a mismatch is a 400 before any upstream call (the upstream
 * would answer 132000/132012). Pure: media references are returned, resolved by the caller.
 *
 * Media parameters accept `{ "type": "image", "image": { "media_id": "<our media uuid>" } }` (the
 * file is uploaded to the upstream on first use), `{ "link": "https://..." }`, or `{ "id": "<an
 * upstream media id>" }`; documents may add `filename`.
 *
 * An authentication template's OTP button takes the same code as the body: when the request gives
 * the body's code and no component for that button, the button is filled with it.
 */

export interface RequestComponent {
  type: string;
  sub_type?: string;
  index?: string | number;
  parameters?: Record<string, unknown>[];
}

export interface MediaRef {
  component: number;
  parameter: number;
  mediaId: string;
  type: 'image' | 'video' | 'document';
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const MEDIA_PARAM_TYPES = ['image', 'video', 'document'] as const;
const BODY_TYPES = ['text', 'currency', 'date_time'];

type Loc = (string | number)[];

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const nonEmptyString = (v: unknown): v is string => typeof v === 'string' && v.trim().length > 0;
const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;

function checkParameter(param: unknown, allowed: string[], loc: Loc, issues: ValidationDetail[], maxText: number, refs: MediaRef[], ci: number, pi: number): void {
  if (!isObject(param)) {
    issues.push({ type: 'object_type', loc, msg: 'each parameter must be an object with a type', input: param ?? null });
    return;
  }
  const type = param.type;
  if (typeof type !== 'string' || !allowed.includes(type)) {
    issues.push({ type: 'enum', loc: [...loc, 'type'], msg: `parameter type must be ${allowed.join(' or ')} here`, input: type ?? null });
    return;
  }
  const value = param[type];
  const bad = (msg: string) => issues.push({ type: 'value_error', loc: [...loc, type], msg, input: value ?? null });
  switch (type) {
    case 'text':
      if (!nonEmptyString(value)) bad('text must be a non-empty string');
      else if (value.length > maxText) bad(`text must be at most ${maxText} characters`);
      return;
    case 'payload':
      if (!nonEmptyString(value) || value.length > 1000) bad('payload must be a non-empty string of at most 1000 characters');
      return;
    case 'currency':
      if (!isObject(value) || !nonEmptyString(value.fallback_value) || typeof value.code !== 'string' || !/^[A-Z]{3}$/.test(value.code) || !Number.isInteger(value.amount_1000)) {
        bad('currency needs fallback_value, an ISO-4217 code (e.g. USD) and an integer amount_1000');
      }
      return;
    case 'date_time':
      if (!isObject(value) || !nonEmptyString(value.fallback_value)) bad('date_time needs fallback_value');
      return;
    case 'location':
      if (!isObject(value) || typeof value.latitude !== 'number' || typeof value.longitude !== 'number') bad('location needs numeric latitude and longitude');
      return;
    default: {
      // image, video, document
      if (!isObject(value)) return void bad(`${type} must be an object with media_id, link or id`);
      const given = ['media_id', 'link', 'id'].filter((k) => value[k] !== undefined);
      if (given.length !== 1) return void bad(`${type} needs exactly one of media_id (an uploaded media id), link (an https URL) or id`);
      if (value.media_id !== undefined) {
        if (typeof value.media_id !== 'string' || !UUID.test(value.media_id)) return void bad('media_id must be the id of an uploaded media asset');
        refs.push({ component: ci, parameter: pi, mediaId: value.media_id, type: type as MediaRef['type'] });
      } else if (value.link !== undefined) {
        if (typeof value.link !== 'string' || !/^https:\/\/\S+$/i.test(value.link)) bad('link must be an https URL');
      } else if (!nonEmptyString(value.id)) bad('id must be a non-empty string');
      if (value.filename !== undefined && (type !== 'document' || typeof value.filename !== 'string')) bad('filename is allowed on documents only, as a string');
    }
  }
}

export function buildSendComponents(plan: PlaceholderPlan, requested: RequestComponent[] | undefined, locPrefix: Loc = ['body', 'components']):
  { issues: ValidationDetail[]; components: SendComponent[]; mediaRefs: MediaRef[] } {
  const issues: ValidationDetail[] = [];
  const components: SendComponent[] = [];
  const mediaRefs: MediaRef[] = [];
  const seen = new Set<string>();
  let header = false;
  let body = false;
  let bodyParams: unknown[] = [];
  const filledButtons = new Set<number>();

  (requested ?? []).forEach((component, ci) => {
    const loc = [...locPrefix, ci];
    const type = String(component.type ?? '').toLowerCase();
    const params = component.parameters ?? [];
    if (!Array.isArray(params)) {
      issues.push({ type: 'array_type', loc: [...loc, 'parameters'], msg: 'parameters must be an array', input: params });
      return;
    }
    const checkAll = (allowed: string[], maxText: number) => {
      params.forEach((p, pi) => checkParameter(p, allowed, [...loc, 'parameters', pi], issues, maxText, mediaRefs, components.length, pi));
    };
    const countMismatch = (what: string, expected: number) => issues.push({
      type: 'parameter_count', loc: [...loc, 'parameters'], input: params.length,
      msg: `The template ${what} has ${plural(expected, 'placeholder')} but ${plural(params.length, 'parameter')} ${params.length === 1 ? 'was' : 'were'} given`,
    });

    if (type === 'header' || type === 'body') {
      if (seen.has(type)) return void issues.push({ type: 'duplicate', loc: [...loc, 'type'], msg: `only one ${type} component may be sent`, input: type });
      seen.add(type);
    }
    if (type === 'header') {
      header = true;
      if (!plan.header) return void issues.push({ type: 'value_error', loc: [...loc, 'type'], msg: 'the template has no header', input: type });
      if (plan.header.format === 'TEXT') {
        if (params.length !== plan.header.variables) return void countMismatch('header', plan.header.variables);
        checkAll(['text'], 60);
      } else {
        const expected = plan.header.format.toLowerCase();
        if (params.length !== 1) return void issues.push({ type: 'parameter_count', loc: [...loc, 'parameters'], msg: `the template has a ${plan.header.format} header: send exactly one ${expected} parameter`, input: params.length });
        checkAll([expected], 60);
      }
      components.push({ type: 'header', parameters: params });
    } else if (type === 'body') {
      body = true;
      bodyParams = params;
      if (params.length !== plan.body) return void countMismatch('body', plan.body);
      checkAll(BODY_TYPES, 1024);
      components.push({ type: 'body', parameters: params });
    } else if (type === 'button') {
      let index: number;
      if (component.index === undefined) {
        // `index` is optional (spec 4.4): it can be left out when one button is the only one this can fill.
        const wanted = component.sub_type === undefined ? null : String(component.sub_type).toLowerCase();
        const candidates = plan.buttons.filter((b) => (b.type === 'url' ? b.variables > 0 : b.type === 'quick_reply')
          && (wanted === null || b.type === wanted) && !filledButtons.has(b.index));
        if (candidates.length !== 1) {
          return void issues.push({ type: 'missing', loc: [...loc, 'index'], input: null, msg: candidates.length === 0
            ? 'no template button takes these parameters'
            : `index is required: ${plural(candidates.length, 'template button')} could take these parameters` });
        }
        index = candidates[0].index;
      } else {
        index = typeof component.index === 'number' ? component.index : /^\d+$/.test(String(component.index)) ? Number(component.index) : NaN;
      }
      const button = plan.buttons.find((b) => b.index === index);
      if (!button) return void issues.push({ type: 'value_error', loc: [...loc, 'index'], msg: `index must be the 0-based position of a template button (the template has ${plural(plan.buttons.length, 'button')})`, input: component.index ?? null });
      if (filledButtons.has(index)) return void issues.push({ type: 'duplicate', loc: [...loc, 'index'], msg: `button ${index} is targeted twice`, input: index });
      filledButtons.add(index);
      const subType = component.sub_type === undefined ? button.type : String(component.sub_type).toLowerCase();
      if (subType !== button.type) return void issues.push({ type: 'value_error', loc: [...loc, 'sub_type'], msg: `button ${index} is a ${button.type} button`, input: component.sub_type ?? null });
      if (button.type === 'url') {
        if (params.length !== button.variables) return void countMismatch(`URL button ${index}`, button.variables);
        checkAll(['text'], 2000);
      } else if (button.type === 'quick_reply') {
        if (params.length > 1) return void issues.push({ type: 'parameter_count', loc: [...loc, 'parameters'], msg: 'a quick-reply button takes at most one payload parameter', input: params.length });
        checkAll(['payload'], 1000);
      } else {
        return void issues.push({ type: 'value_error', loc: [...loc, 'index'], msg: `button ${index} (${button.type}) takes no parameters`, input: index });
      }
      components.push({ type: 'button', sub_type: button.type, index: String(index), parameters: params });
    } else {
      issues.push({ type: 'enum', loc: [...loc, 'type'], msg: 'component type must be header, body or button', input: component.type ?? null });
    }
  });

  const code = bodyParams.length === 1 && isObject(bodyParams[0]) && bodyParams[0].type === 'text' && nonEmptyString(bodyParams[0].text) ? bodyParams[0].text : null;
  for (const button of plan.buttons) {
    if (!button.otp || filledButtons.has(button.index) || code === null) continue;
    components.push({ type: 'button', sub_type: 'url', index: String(button.index), parameters: [{ type: 'text', text: code }] });
    filledButtons.add(button.index);
  }

  // Placeholders the request did not fill at all.
  if (!body && plan.body > 0) {
    issues.push({ type: 'parameter_count', loc: locPrefix, input: null, msg: `The template body has ${plural(plan.body, 'placeholder')} but no body parameters were given` });
  }
  if (!header && plan.header && (plan.header.variables > 0 || ['IMAGE', 'VIDEO', 'DOCUMENT', 'LOCATION'].includes(plan.header.format))) {
    issues.push({ type: 'parameter_count', loc: locPrefix, input: null, msg: plan.header.format === 'TEXT'
      ? 'The template header has 1 placeholder but no header parameter was given'
      : `The template has a ${plan.header.format} header: send a header component with one ${plan.header.format.toLowerCase()} parameter` });
  }
  for (const button of plan.buttons) {
    if (button.variables > 0 && !filledButtons.has(button.index)) {
      issues.push({ type: 'parameter_count', loc: locPrefix, input: null, msg: `The template's URL button ${button.index} has a placeholder but no button component with index ${button.index} was given` });
    }
  }
  return { issues, components, mediaRefs };
}
