import type { ValidationDetail } from '../../http/errors.ts';

/**
 * The upstream's template component grammar (reference §5), checked before a draft is stored so a
 * draft that the upstream would refuse for its shape never reaches review. Pure: no I/O.
 *
 * Besides the shape, the rules the upstream applies when a template is created (it refuses such a
 * template with error 100 instead of reviewing it) are checked here too: sample values for every
 * variable (`example`), a media header's `example.header_handle`, and no variable at the start or
 * end of the body or right next to another (2388299/2388293). Not checked: the upstream's density
 * rule beyond adjacent variables (it publishes no ratio), and content the reviewer rejects later.
 */

export type ComponentType = 'HEADER' | 'BODY' | 'FOOTER' | 'BUTTONS';
export const HEADER_FORMATS = ['TEXT', 'IMAGE', 'VIDEO', 'DOCUMENT', 'LOCATION'] as const;
export type HeaderFormat = (typeof HEADER_FORMATS)[number];
export const BUTTON_TYPES = ['URL', 'PHONE_NUMBER', 'QUICK_REPLY'] as const;

export const LIMITS = {
  headerText: 60,
  bodyText: 1024,
  footerText: 60,
  buttonText: 25,
  buttons: 10,
  urlButtons: 2,
  phoneButtons: 1,
  url: 2000,
  phoneNumber: 20,
} as const;

export const TEMPLATE_NAME = /^[a-z0-9_]+$/;
/** A language or language_REGION locale code as the upstream writes them: en, en_US, pt_BR, zh_Hant_HK... */
export const LANGUAGE = /^[a-z]{2,3}(_[A-Za-z0-9]{2,4}){0,2}$/;

/** What a send must fill, derived from the stored components. */
export interface PlaceholderPlan {
  header: { format: HeaderFormat; variables: number } | null;
  body: number;
  /**
   * An authentication template's OTP button is sent as a URL button whose one parameter is the
   * code (the same code as the body's {{1}}): `otp` marks it.
   */
  buttons: { index: number; type: string; variables: number; otp?: boolean }[];
}

export const OTP_TYPES = ['COPY_CODE', 'ONE_TAP', 'ZERO_TAP'] as const;
const MAX_CODE_EXPIRATION_MINUTES = 90;

const PLACEHOLDER = /\{\{(\d+)\}\}/g;
// Anything that looks like a placeholder attempt: {{...}} with any content.
const PLACEHOLDER_LIKE = /\{\{([^{}]*)\}\}/g;

type Issue = Omit<ValidationDetail, 'loc'> & { loc: (string | number)[] };

/** Placeholder numbers used in a text, in order of appearance (e.g. [1, 2, 1]). */
export function placeholderNumbers(text: string): number[] {
  return [...text.matchAll(PLACEHOLDER)].map((m) => Number(m[1]));
}

/** The number of distinct variables of a text ({{1}} twice counts once). */
export function variableCount(text: string): number {
  return new Set(placeholderNumbers(text)).size;
}

function checkPlaceholders(text: string, loc: (string | number)[], issues: Issue[]): number {
  for (const m of text.matchAll(PLACEHOLDER_LIKE)) {
    if (!/^[1-9]\d*$/.test(m[1])) {
      issues.push({ type: 'placeholder', loc, msg: `Invalid placeholder "${m[0]}": variables are written {{1}}, {{2}}, ... numbered from 1`, input: text });
      return 0;
    }
  }
  const distinct = [...new Set(placeholderNumbers(text))].sort((a, b) => a - b);
  const gap = distinct.findIndex((n, i) => n !== i + 1);
  if (gap >= 0) {
    const expected = gap + 1;
    issues.push({ type: 'placeholder', loc, msg: `Placeholders must be numbered {{1}} to {{${distinct.length}}} without gaps; {{${expected}}} is missing`, input: text });
  }
  return distinct.length;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

const nonEmptyStrings = (value: unknown, count?: number): boolean =>
  Array.isArray(value) && value.length > 0 && (count === undefined || value.length === count) && value.every((v) => typeof v === 'string' && v.trim().length > 0);

/** The upstream refuses a variable without a sample value: `example.header_text` / `example.body_text`. */
function checkExamples(component: Record<string, unknown>, loc: (string | number)[], variables: number, kind: 'HEADER' | 'BODY', issues: Issue[]): void {
  if (variables === 0) return;
  const example = isObject(component.example) ? component.example : undefined;
  const values = kind === 'HEADER' ? example?.header_text : Array.isArray(example?.body_text) ? example.body_text[0] : undefined;
  if (nonEmptyStrings(values, variables)) return;
  const shape = kind === 'HEADER' ? '{"header_text": ["..."]}' : `{"body_text": [[${Array.from({ length: variables }, () => '"..."').join(', ')}]]}`;
  issues.push({ type: 'example', loc: [...loc, 'example'], input: component.example ?? null,
    msg: `${kind}: every variable needs a sample value for review: example ${shape} with ${variables} value${variables === 1 ? '' : 's'}` });
}

function checkText(component: Record<string, unknown>, loc: (string | number)[], max: number, issues: Issue[], required = true): string | null {
  const text = component.text;
  if (text === undefined && !required) return null;
  if (typeof text !== 'string' || text.trim().length === 0) {
    issues.push({ type: text === undefined ? 'missing' : 'string_type', loc: [...loc, 'text'], msg: 'text is required and must be a non-empty string', input: text ?? null });
    return null;
  }
  if (text.length > max) {
    issues.push({ type: 'string_too_long', loc: [...loc, 'text'], msg: `text must be at most ${max} characters (got ${text.length})`, input: text });
  }
  return text;
}

function checkButtons(component: Record<string, unknown>, loc: (string | number)[], issues: Issue[]): PlaceholderPlan['buttons'] {
  const buttons = component.buttons;
  if (!Array.isArray(buttons) || buttons.length === 0) {
    issues.push({ type: 'missing', loc: [...loc, 'buttons'], msg: 'BUTTONS needs a non-empty buttons array', input: buttons ?? null });
    return [];
  }
  if (buttons.length > LIMITS.buttons) {
    issues.push({ type: 'too_long', loc: [...loc, 'buttons'], msg: `at most ${LIMITS.buttons} buttons are allowed`, input: buttons.length });
  }
  const plan: PlaceholderPlan['buttons'] = [];
  const counts: Record<string, number> = {};
  buttons.forEach((button, index) => {
    const bLoc = [...loc, 'buttons', index];
    if (!isObject(button)) {
      issues.push({ type: 'object_type', loc: bLoc, msg: 'each button must be an object', input: button });
      return;
    }
    const type = button.type;
    if (typeof type !== 'string' || !(BUTTON_TYPES as readonly string[]).includes(type)) {
      issues.push({ type: 'enum', loc: [...bLoc, 'type'], input: type ?? null, msg: type === 'OTP'
        ? 'OTP buttons belong to AUTHENTICATION templates' : `button type must be one of ${BUTTON_TYPES.join(', ')}` });
      return;
    }
    counts[type] = (counts[type] ?? 0) + 1;
    const text = button.text;
    if (typeof text !== 'string' || text.trim().length === 0 || text.length > LIMITS.buttonText) {
      issues.push({ type: 'string_type', loc: [...bLoc, 'text'], msg: `button text is required, 1-${LIMITS.buttonText} characters`, input: text ?? null });
    } else if (/\{\{[^{}]*\}\}/.test(text)) {
      issues.push({ type: 'placeholder', loc: [...bLoc, 'text'], msg: 'button text cannot contain variables', input: text });
    }
    if (type === 'URL') {
      const url = button.url;
      if (typeof url !== 'string' || !/^https?:\/\/[^\s/$.?#][^\s]*$/i.test(url) || url.length > LIMITS.url) {
        issues.push({ type: 'url', loc: [...bLoc, 'url'], msg: `URL button needs url, an http(s) URL of at most ${LIMITS.url} characters`, input: url ?? null });
        return;
      }
      const before = issues.length;
      const variables = checkPlaceholders(url, [...bLoc, 'url'], issues);
      if (issues.length > before) return;
      if (variables > 1 || (variables === 1 && !url.endsWith('{{1}}'))) {
        issues.push({ type: 'placeholder', loc: [...bLoc, 'url'], msg: 'a URL button may have one variable, {{1}}, at the end of the url', input: url });
        return;
      }
      if (variables === 1 && !nonEmptyStrings(button.example, 1)) {
        issues.push({ type: 'example', loc: [...bLoc, 'example'], input: button.example ?? null,
          msg: 'BUTTONS: a URL button with a variable needs a sample for review: example ["<the full URL with a sample value>"]' });
      }
      plan.push({ index, type: 'url', variables });
    } else if (type === 'PHONE_NUMBER') {
      const phone = button.phone_number;
      if (typeof phone !== 'string' || !/^\+?[1-9]\d{6,18}$/.test(phone.replace(/[\s()-]/g, '')) || phone.length > LIMITS.phoneNumber) {
        issues.push({ type: 'phone', loc: [...bLoc, 'phone_number'], msg: 'PHONE_NUMBER button needs phone_number, an international number such as +15551234567', input: phone ?? null });
      }
      plan.push({ index, type: 'phone_number', variables: 0 });
    } else {
      plan.push({ index, type: 'quick_reply', variables: 0 });
    }
  });
  if ((counts.URL ?? 0) > LIMITS.urlButtons) {
    issues.push({ type: 'too_long', loc: [...loc, 'buttons'], msg: `at most ${LIMITS.urlButtons} URL buttons are allowed`, input: counts.URL });
  }
  if ((counts.PHONE_NUMBER ?? 0) > LIMITS.phoneButtons) {
    issues.push({ type: 'too_long', loc: [...loc, 'buttons'], msg: `at most ${LIMITS.phoneButtons} PHONE_NUMBER button is allowed`, input: counts.PHONE_NUMBER });
  }
  return plan;
}

/**
 * The upstream's fixed AUTHENTICATION shape (copy code, one tap, zero tap): a BODY without text
 * (the upstream's preset text holds the code; `add_security_recommendation` adds a warning), an
 * optional FOOTER with `code_expiration_minutes` only, and exactly one OTP button. No header.
 */
function validateAuthentication(components: unknown[], locPrefix: (string | number)[], issues: Issue[]): PlaceholderPlan {
  const seen = new Map<string, number>();
  let otpIndex = -1;
  components.forEach((component, i) => {
    const loc = [...locPrefix, i];
    if (!isObject(component)) return void issues.push({ type: 'object_type', loc, msg: 'each component must be an object', input: component });
    const type = component.type;
    if (type !== 'BODY' && type !== 'FOOTER' && type !== 'BUTTONS') {
      return void issues.push({ type: 'enum', loc: [...loc, 'type'], input: type ?? null, msg: 'AUTHENTICATION templates have BODY, FOOTER and BUTTONS components only (no HEADER)' });
    }
    if (seen.has(type)) return void issues.push({ type: 'duplicate', loc: [...loc, 'type'], msg: `only one ${type} component is allowed (also at index ${seen.get(type)})`, input: type });
    seen.set(type, i);
    if (type !== 'BUTTONS' && component.text !== undefined) {
      issues.push({ type: 'extra', loc: [...loc, 'text'], input: component.text,
        msg: `${type}: AUTHENTICATION templates use the upstream's preset text; set ${type === 'BODY' ? 'add_security_recommendation' : 'code_expiration_minutes'} instead` });
    }
    if (type === 'BODY' && component.add_security_recommendation !== undefined && typeof component.add_security_recommendation !== 'boolean') {
      issues.push({ type: 'bool_type', loc: [...loc, 'add_security_recommendation'], msg: 'BODY: add_security_recommendation must be true or false', input: component.add_security_recommendation });
    }
    if (type === 'FOOTER') {
      const minutes = component.code_expiration_minutes;
      if (typeof minutes !== 'number' || !Number.isInteger(minutes) || minutes < 1 || minutes > MAX_CODE_EXPIRATION_MINUTES) {
        issues.push({ type: 'int_range', loc: [...loc, 'code_expiration_minutes'], input: minutes ?? null,
          msg: `FOOTER: code_expiration_minutes must be an integer from 1 to ${MAX_CODE_EXPIRATION_MINUTES}` });
      }
    }
    if (type === 'BUTTONS') {
      const buttons = component.buttons;
      const button = Array.isArray(buttons) && buttons.length === 1 && isObject(buttons[0]) ? buttons[0] : null;
      if (!button || button.type !== 'OTP') {
        return void issues.push({ type: 'otp_button', loc: [...loc, 'buttons'], input: buttons ?? null, msg: 'BUTTONS: an AUTHENTICATION template has exactly one button, of type OTP' });
      }
      const otpType = typeof button.otp_type === 'string' ? button.otp_type.toUpperCase() : '';
      if (!(OTP_TYPES as readonly string[]).includes(otpType)) {
        issues.push({ type: 'enum', loc: [...loc, 'buttons', 0, 'otp_type'], input: button.otp_type ?? null, msg: `BUTTONS: otp_type must be one of ${OTP_TYPES.join(', ')}` });
      } else if (otpType !== 'COPY_CODE') {
        const apps = Array.isArray(button.supported_apps) ? button.supported_apps : [button];
        if (!apps.every((a) => isObject(a) && typeof a.package_name === 'string' && a.package_name !== '' && typeof a.signature_hash === 'string' && a.signature_hash !== '')) {
          issues.push({ type: 'missing', loc: [...loc, 'buttons', 0, 'supported_apps'], input: button.supported_apps ?? null,
            msg: `BUTTONS: a ${otpType} button needs the app's package_name and signature_hash (or supported_apps)` });
        }
      }
      if (button.text !== undefined && (typeof button.text !== 'string' || button.text.trim() === '' || button.text.length > LIMITS.buttonText)) {
        issues.push({ type: 'string_type', loc: [...loc, 'buttons', 0, 'text'], msg: `button text must be 1-${LIMITS.buttonText} characters`, input: button.text });
      }
      otpIndex = 0;
    }
  });
  if (!seen.has('BODY')) issues.push({ type: 'missing', loc: locPrefix, msg: 'a BODY component is required', input: null });
  if (!seen.has('BUTTONS')) issues.push({ type: 'missing', loc: locPrefix, msg: 'an AUTHENTICATION template needs a BUTTONS component with one OTP button', input: null });
  return { header: null, body: 1, buttons: otpIndex === 0 ? [{ index: 0, type: 'url', variables: 1, otp: true }] : [] };
}

/**
 * Validates template components. Returns the issues (empty when valid) with locations under
 * `locPrefix` (e.g. ['body', 'components']) and, when valid, what a send has to fill. An
 * AUTHENTICATION `category` selects the upstream's fixed authentication shape.
 */
export function validateComponents(components: unknown, locPrefix: (string | number)[] = ['body', 'components'], category?: string): { issues: ValidationDetail[]; plan: PlaceholderPlan | null } {
  const issues: Issue[] = [];
  if (!Array.isArray(components) || components.length === 0) {
    issues.push({ type: 'missing', loc: locPrefix, msg: 'components must be a non-empty array with one BODY component', input: components ?? null });
    return { issues, plan: null };
  }
  if (category === 'AUTHENTICATION') {
    const plan = validateAuthentication(components, locPrefix, issues);
    return issues.length === 0 ? { issues, plan } : { issues, plan: null };
  }
  const plan: PlaceholderPlan = { header: null, body: 0, buttons: [] };
  const seen = new Map<string, number>();
  components.forEach((component, i) => {
    const loc = [...locPrefix, i];
    if (!isObject(component)) {
      issues.push({ type: 'object_type', loc, msg: 'each component must be an object', input: component });
      return;
    }
    const type = component.type;
    if (typeof type !== 'string' || !['HEADER', 'BODY', 'FOOTER', 'BUTTONS'].includes(type)) {
      issues.push({ type: 'enum', loc: [...loc, 'type'], msg: 'component type must be one of HEADER, BODY, FOOTER, BUTTONS', input: type ?? null });
      return;
    }
    if (seen.has(type)) {
      issues.push({ type: 'duplicate', loc: [...loc, 'type'], msg: `only one ${type} component is allowed (also at index ${seen.get(type)})`, input: type });
      return;
    }
    seen.set(type, i);
    switch (type as ComponentType) {
      case 'HEADER': {
        const format = component.format;
        if (typeof format !== 'string' || !(HEADER_FORMATS as readonly string[]).includes(format)) {
          issues.push({ type: 'enum', loc: [...loc, 'format'], msg: `HEADER format must be one of ${HEADER_FORMATS.join(', ')}`, input: format ?? null });
          return;
        }
        if (format === 'TEXT') {
          const text = checkText(component, loc, LIMITS.headerText, issues);
          if (text === null) return;
          const before = issues.length;
          const variables = checkPlaceholders(text, [...loc, 'text'], issues);
          if (issues.length === before && variables > 1) {
            issues.push({ type: 'placeholder', loc: [...loc, 'text'], msg: 'a TEXT header may have at most one variable, {{1}}', input: text });
          } else if (issues.length === before) {
            checkExamples(component, loc, variables, 'HEADER', issues);
          }
          plan.header = { format, variables };
        } else {
          if (component.text !== undefined) {
            issues.push({ type: 'extra', loc: [...loc, 'text'], msg: `text is only allowed on a TEXT header, not ${format}`, input: component.text });
          }
          const handles = isObject(component.example) ? component.example.header_handle : undefined;
          if (format !== 'LOCATION' && !nonEmptyStrings(handles)) {
            issues.push({ type: 'example', loc: [...loc, 'example'], input: component.example ?? null,
              msg: `HEADER: a ${format} header needs a sample for review: example {"header_handle": ["<handle from the upstream's resumable upload>"]}` });
          }
          plan.header = { format: format as HeaderFormat, variables: 0 };
        }
        return;
      }
      case 'BODY': {
        const text = checkText(component, loc, LIMITS.bodyText, issues);
        if (text === null) return;
        const before = issues.length;
        plan.body = checkPlaceholders(text, [...loc, 'text'], issues);
        if (issues.length > before) return;
        const trimmed = text.trim();
        if (/^\{\{\d+\}\}/.test(trimmed) || /\{\{\d+\}\}$/.test(trimmed)) {
          issues.push({ type: 'placeholder', loc: [...loc, 'text'], input: text, msg: 'BODY: a variable cannot start or end the text; put words before and after it' });
        } else if (/\}\}\s*\{\{/.test(text)) {
          issues.push({ type: 'placeholder', loc: [...loc, 'text'], input: text, msg: 'BODY: two variables cannot stand side by side; put words between them' });
        } else {
          checkExamples(component, loc, plan.body, 'BODY', issues);
        }
        return;
      }
      case 'FOOTER': {
        const text = checkText(component, loc, LIMITS.footerText, issues);
        if (text !== null && text.match(PLACEHOLDER_LIKE)) {
          issues.push({ type: 'placeholder', loc: [...loc, 'text'], msg: 'FOOTER text cannot contain variables', input: text });
        }
        return;
      }
      case 'BUTTONS':
        plan.buttons = checkButtons(component, loc, issues);
        return;
    }
  });
  if (!seen.has('BODY') && issues.length === 0) {
    issues.push({ type: 'missing', loc: locPrefix, msg: 'a BODY component is required', input: null });
  }
  return issues.length === 0 ? { issues, plan } : { issues, plan: null };
}

/**
 * The placeholder plan of stored (already validated) components. Tolerant of lower-case types,
 * because templates synchronised from the upstream may be written either way. An OTP button (an
 * authentication template as created) takes the code, and so does the body's preset text.
 */
export function placeholderPlan(components: unknown[]): PlaceholderPlan {
  const plan: PlaceholderPlan = { header: null, body: 0, buttons: [] };
  let otp = false;
  for (const raw of components) {
    if (!isObject(raw)) continue;
    const type = String(raw.type ?? '').toUpperCase();
    const text = typeof raw.text === 'string' ? raw.text : '';
    if (type === 'HEADER') plan.header = { format: String(raw.format ?? 'TEXT').toUpperCase() as HeaderFormat, variables: variableCount(text) };
    else if (type === 'BODY') plan.body = variableCount(text);
    else if (type === 'BUTTONS' && Array.isArray(raw.buttons)) {
      plan.buttons = raw.buttons.map((b, index) => {
        const button = isObject(b) ? b : {};
        const bType = String(button.type ?? '').toLowerCase();
        if (bType === 'otp') {
          otp = true;
          return { index, type: 'url', variables: 1, otp: true };
        }
        return { index, type: bType, variables: bType === 'url' && typeof button.url === 'string' ? variableCount(button.url) : 0 };
      });
    }
  }
  if (otp) plan.body = Math.max(plan.body, 1);
  return plan;
}
