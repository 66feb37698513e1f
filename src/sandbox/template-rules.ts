import { TEMPLATE_SUBCODES } from '../upstream/error-codes.ts';

/**
 * The checks Meta makes when a template is created (reference §5, subcodes §4): a template that
 * breaks one is refused with error 100 at once, never queued for review. Written from the
 * reference on purpose, apart from the service's own grammar (templates.grammar.ts), so that the
 * stand-in does not share the mistakes of the code it tests.
 *
 * Not modelled: the density rule beyond adjacent variables (Meta publishes no ratio), and which
 * content the reviewer rejects later (that is the review outcome, set through the control API).
 *
 * AUTHENTICATION templates are Meta's fixed shape (copy-code / one-tap / zero-tap OTP): a BODY
 * without text (preset text holding the code, optionally with a security recommendation), an
 * optional FOOTER with `code_expiration_minutes`, and one OTP button, which Meta stores as a URL
 * button whose URL ends with the code's variable. `authenticationComponents` returns them as
 * Meta's GET shows them, so a send fills the body's {{1}} and the URL button's {{1}}.
 */

export interface CreateProblem {
  code: 100;
  subcode?: number;
  details: string;
  userTitle?: string;
  userMessage?: string;
}

type Obj = Record<string, unknown>;
const isObject = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const nonEmpty = (v: unknown): v is string => typeof v === 'string' && v.trim().length > 0;

const LIMITS = { header: 60, body: 1024, footer: 60, buttonText: 25, buttons: 10, urlButtons: 2, phoneButtons: 1, url: 2000, copyCode: 15 };
const BUTTON_TYPES = new Set(['QUICK_REPLY', 'URL', 'PHONE_NUMBER', 'COPY_CODE', 'OTP', 'FLOW', 'CATALOG', 'MPM']);
const HEADER_FORMATS = new Set(['TEXT', 'IMAGE', 'VIDEO', 'DOCUMENT', 'LOCATION']);
const PLACEHOLDER = /\{\{([^{}]*)\}\}/g;
const NAMED = /^[a-z_][a-z0-9_]*$/;

const problem = (details: string, subcode?: number, userMessage?: string): CreateProblem =>
  ({ code: 100, subcode, details, userTitle: 'Invalid template', userMessage: userMessage ?? details });

/** The variables of a text in order of first appearance, or a problem with how they are written. */
function variables(text: string, named: boolean, where: string, subcode: number): string[] | CreateProblem {
  const names: string[] = [];
  for (const match of text.matchAll(PLACEHOLDER)) {
    const name = match[1];
    const ok = named ? NAMED.test(name) : /^[1-9]\d*$/.test(name);
    if (!ok) {
      return problem(`${where}: ${match[0]} is not a ${named ? 'named variable (lower-case letters, digits and underscores)' : 'positional variable ({{1}}, {{2}}, ...)'}.`, subcode);
    }
    if (!names.includes(name)) names.push(name);
  }
  if (!named) {
    const sorted = names.map(Number).sort((a, b) => a - b);
    if (sorted.some((n, i) => n !== i + 1)) return problem(`${where}: variables must be numbered {{1}} to {{${names.length}}} in sequence.`, subcode);
  }
  return names;
}

/** `example` of a header or body: positional values (`header_text` / `body_text: [[...]]`) or named ones. */
function checkExamples(example: unknown, names: string[], named: boolean, kind: 'header' | 'body'): CreateProblem | null {
  if (names.length === 0) return null;
  const where = kind.toUpperCase();
  const missing = problem(`${where}: every variable needs a sample value in example.${kind}_text${named ? '_named_params' : ''}.`, undefined,
    `Add sample values for the variables of the ${kind} so the template can be reviewed.`);
  if (!isObject(example)) return missing;
  if (named) {
    const given = example[`${kind}_text_named_params`];
    if (!Array.isArray(given)) return missing;
    const covered = new Set(given.filter((p) => isObject(p) && nonEmpty(p.example)).map((p) => (p as Obj).param_name));
    return names.every((n) => covered.has(n)) ? null : missing;
  }
  const given = kind === 'header' ? example.header_text : Array.isArray(example.body_text) ? example.body_text[0] : undefined;
  if (!Array.isArray(given) || given.length !== names.length || !given.every(nonEmpty)) return missing;
  return null;
}

function checkHeader(component: Obj, named: boolean): CreateProblem | null {
  const format = String(component.format ?? '').toUpperCase();
  if (!HEADER_FORMATS.has(format)) return problem('HEADER: format must be TEXT, IMAGE, VIDEO, DOCUMENT or LOCATION.', TEMPLATE_SUBCODES.headerFormat);
  if (format === 'LOCATION') return null;
  if (format !== 'TEXT') {
    const handles = isObject(component.example) ? component.example.header_handle : undefined;
    return Array.isArray(handles) && handles.length > 0 && handles.every(nonEmpty) ? null
      : problem(`HEADER: a ${format} header needs example.header_handle, a handle from the Resumable Upload API.`, TEMPLATE_SUBCODES.headerFormat);
  }
  if (!nonEmpty(component.text)) return problem('HEADER: a TEXT header needs text.', TEMPLATE_SUBCODES.headerFormat);
  if (component.text.length > LIMITS.header) return problem(`HEADER: text is longer than ${LIMITS.header} characters.`, TEMPLATE_SUBCODES.characterLimit);
  const names = variables(component.text, named, 'HEADER', TEMPLATE_SUBCODES.headerFormat);
  if (!Array.isArray(names)) return names;
  if (names.length > 1) return problem('HEADER: a TEXT header may have one variable.', TEMPLATE_SUBCODES.headerFormat);
  return checkExamples(component.example, names, named, 'header');
}

function checkBody(component: Obj, named: boolean): CreateProblem | null {
  if (!nonEmpty(component.text)) return problem('BODY: text is required.', TEMPLATE_SUBCODES.bodyFormat);
  const text = component.text;
  if (text.length > LIMITS.body) return problem(`BODY: text is longer than ${LIMITS.body} characters.`, TEMPLATE_SUBCODES.characterLimit);
  const names = variables(text, named, 'BODY', TEMPLATE_SUBCODES.bodyFormat);
  if (!Array.isArray(names)) return names;
  const trimmed = text.trim();
  if (/^\{\{[^{}]*\}\}/.test(trimmed) || /\{\{[^{}]*\}\}$/.test(trimmed)) {
    return problem('BODY: variables can\'t be at the start or end of the template.', TEMPLATE_SUBCODES.variableAtEdge);
  }
  if (/\}\}\s*\{\{/.test(text)) return problem('BODY: the template has too many variables for its length (two variables side by side).', TEMPLATE_SUBCODES.tooManyVariables);
  return checkExamples(component.example, names, named, 'body');
}

function checkFooter(component: Obj): CreateProblem | null {
  if (!nonEmpty(component.text)) return problem('FOOTER: text is required.', TEMPLATE_SUBCODES.footerFormat);
  if (component.text.length > LIMITS.footer) return problem(`FOOTER: text is longer than ${LIMITS.footer} characters.`, TEMPLATE_SUBCODES.characterLimit);
  if (/\{\{[^{}]*\}\}/.test(component.text)) return problem('FOOTER: the footer cannot contain variables.', TEMPLATE_SUBCODES.footerFormat);
  return null;
}

function checkButtons(component: Obj, category: string): CreateProblem | null {
  const buttons = component.buttons;
  if (!Array.isArray(buttons) || buttons.length === 0) return problem('BUTTONS: buttons must be a non-empty array.');
  if (buttons.length > LIMITS.buttons) return problem(`BUTTONS: at most ${LIMITS.buttons} buttons.`);
  const counts: Record<string, number> = {};
  for (const [index, button] of buttons.entries()) {
    const where = `BUTTONS: button ${index}`;
    if (!isObject(button)) return problem(`${where} must be an object.`);
    const type = String(button.type ?? '').toUpperCase();
    if (!BUTTON_TYPES.has(type)) return problem(`${where}: unknown type ${String(button.type)}.`);
    if (type === 'OTP' && category !== 'AUTHENTICATION') return problem(`${where}: OTP buttons belong to AUTHENTICATION templates.`);
    counts[type] = (counts[type] ?? 0) + 1;
    const textOptional = type === 'COPY_CODE' || type === 'OTP';
    if (!(textOptional && button.text === undefined) && (!nonEmpty(button.text) || button.text.length > LIMITS.buttonText)) {
      return problem(`${where}: text is required, at most ${LIMITS.buttonText} characters.`);
    }
    if (type === 'URL') {
      const url = button.url;
      if (!nonEmpty(url) || url.length > LIMITS.url || !/^https?:\/\/\S+$/i.test(url)) return problem(`${where}: url must be an http(s) URL.`);
      const names = [...url.matchAll(PLACEHOLDER)];
      if (names.length > 1 || (names.length === 1 && (names[0][0] !== '{{1}}' || !url.endsWith('{{1}}')))) return problem(`${where}: a URL may end with one variable, {{1}}.`);
      const example = button.example;
      if (names.length === 1 && !(Array.isArray(example) ? nonEmpty(example[0]) : nonEmpty(example))) {
        return problem(`${where}: a URL with a variable needs example, the full URL with a sample value.`, undefined, 'Add a sample URL for the button\'s variable.');
      }
    } else if (type === 'PHONE_NUMBER') {
      if (!nonEmpty(button.phone_number)) return problem(`${where}: phone_number is required.`);
    } else if (type === 'COPY_CODE') {
      const example = Array.isArray(button.example) ? button.example[0] : button.example;
      if (!nonEmpty(example) || example.length > LIMITS.copyCode) return problem(`${where}: a copy-code button needs example, a sample code of at most ${LIMITS.copyCode} characters.`);
    }
  }
  if ((counts.URL ?? 0) > LIMITS.urlButtons) return problem(`BUTTONS: at most ${LIMITS.urlButtons} URL buttons.`);
  if ((counts.PHONE_NUMBER ?? 0) > LIMITS.phoneButtons) return problem(`BUTTONS: at most ${LIMITS.phoneButtons} PHONE_NUMBER button.`);
  return null;
}

/** Meta's creation checks of a template's components; null when the template can go to review. */
export function checkTemplateComponents(components: unknown, category: string, parameterFormat: string): CreateProblem | null {
  if (parameterFormat !== 'POSITIONAL' && parameterFormat !== 'NAMED') return problem('parameter_format must be POSITIONAL or NAMED.');
  if (!Array.isArray(components)) return problem('components must be an array.', TEMPLATE_SUBCODES.bodyFormat);
  const named = parameterFormat === 'NAMED';
  const seen = new Set<string>();
  for (const component of components) {
    if (!isObject(component)) return problem('components: each component must be an object.');
    const type = String(component.type ?? '').toUpperCase();
    if (seen.has(type)) return problem(`components: only one ${type} component is allowed.`);
    seen.add(type);
    let found: CreateProblem | null;
    switch (type) {
      case 'HEADER': found = checkHeader(component, named); break;
      case 'BODY': found = checkBody(component, named); break;
      case 'FOOTER': found = checkFooter(component); break;
      case 'BUTTONS': found = checkButtons(component, category); break;
      default: found = problem(`components: unknown component type ${String(component.type)}.`);
    }
    if (found) return found;
  }
  if (!seen.has('BODY')) return problem('components: a BODY component is required.', TEMPLATE_SUBCODES.bodyFormat);
  return null;
}

const OTP_TYPES = new Set(['COPY_CODE', 'ONE_TAP', 'ZERO_TAP']);
const MAX_CODE_EXPIRATION_MINUTES = 90;

/** The components of an AUTHENTICATION template as Meta stores them, or why Meta refuses them. */
export function authenticationComponents(components: unknown): { components: unknown[] } | CreateProblem {
  if (!Array.isArray(components)) return problem('components must be an array.', TEMPLATE_SUBCODES.bodyFormat);
  const byType = new Map<string, Obj>();
  for (const component of components) {
    if (!isObject(component)) return problem('components: each component must be an object.');
    const type = String(component.type ?? '').toUpperCase();
    if (type !== 'BODY' && type !== 'FOOTER' && type !== 'BUTTONS') return problem(`AUTHENTICATION templates have no ${type || 'untyped'} component; only BODY, FOOTER and BUTTONS.`);
    if (byType.has(type)) return problem(`components: only one ${type} component is allowed.`);
    byType.set(type, component);
  }
  const body = byType.get('BODY');
  if (!body) return problem('components: a BODY component is required.', TEMPLATE_SUBCODES.bodyFormat);
  if (body.text !== undefined) return problem('BODY: AUTHENTICATION templates use preset text; set add_security_recommendation instead of text.', TEMPLATE_SUBCODES.bodyFormat);
  const security = body.add_security_recommendation;
  if (security !== undefined && typeof security !== 'boolean') return problem('BODY: add_security_recommendation must be true or false.');

  const footer = byType.get('FOOTER');
  const minutes = footer?.code_expiration_minutes;
  if (footer && footer.text !== undefined) return problem('FOOTER: AUTHENTICATION templates use preset text; set code_expiration_minutes instead of text.', TEMPLATE_SUBCODES.footerFormat);
  if (footer && (typeof minutes !== 'number' || !Number.isInteger(minutes) || minutes < 1 || minutes > MAX_CODE_EXPIRATION_MINUTES)) {
    return problem(`FOOTER: code_expiration_minutes must be an integer from 1 to ${MAX_CODE_EXPIRATION_MINUTES}.`, TEMPLATE_SUBCODES.footerFormat);
  }

  const buttons = byType.get('BUTTONS')?.buttons;
  if (!Array.isArray(buttons) || buttons.length !== 1 || !isObject(buttons[0]) || String(buttons[0].type ?? '').toUpperCase() !== 'OTP') {
    return problem('BUTTONS: an AUTHENTICATION template needs exactly one OTP button.');
  }
  const button = buttons[0];
  const otpType = String(button.otp_type ?? '').toUpperCase();
  if (!OTP_TYPES.has(otpType)) return problem('BUTTONS: otp_type must be COPY_CODE, ONE_TAP or ZERO_TAP.');
  if (button.text !== undefined && (!nonEmpty(button.text) || button.text.length > LIMITS.buttonText)) {
    return problem(`BUTTONS: the OTP button text must be at most ${LIMITS.buttonText} characters.`);
  }
  if (otpType !== 'COPY_CODE') {
    const apps = Array.isArray(button.supported_apps) ? button.supported_apps : [button];
    if (!apps.every((a) => isObject(a) && nonEmpty(a.package_name) && nonEmpty(a.signature_hash))) {
      return problem(`BUTTONS: a ${otpType} button needs the app's package_name and signature_hash (or supported_apps).`);
    }
  }

  const stored: unknown[] = [{
    type: 'BODY', text: `*{{1}}* is your verification code.${security ? ' For your security, do not share this code.' : ''}`, add_security_recommendation: security === true,
  }];
  if (footer) stored.push({ type: 'FOOTER', text: `This code expires in ${minutes as number} minutes.`, code_expiration_minutes: minutes });
  stored.push({ type: 'BUTTONS', buttons: [{
    type: 'URL', text: nonEmpty(button.text) ? button.text : 'Copy code', url: `https://www.whatsapp.com/otp/code/?otp_type=${otpType}&code=otp{{1}}`,
  }] });
  return { components: stored };
}
