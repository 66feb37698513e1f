/**
 * What a send must supply for a template, derived once when the template is created, and the
 * check of a send's components against it (Meta's 132000 / 132012 / 131008 / 131009 rules).
 */

type HeaderExpectation =
  | { kind: 'none' }
  | { kind: 'text'; count: number }
  | { kind: 'media'; format: 'image' | 'video' | 'document' }
  | { kind: 'location' };

interface ButtonExpectation {
  subType: string;  // url, quick_reply, copy_code, flow, phone_number, ...
  /** Parameters a send must give for this button: 1 for a URL with a variable or a copy code. */
  required: number;
}

export interface ExpectedParams {
  named: boolean;
  header: HeaderExpectation;
  body: { count: number; names: Set<string> };
  buttons: ButtonExpectation[];
}

export interface SendProblem {
  code: number;
  details: string;
}

const PLACEHOLDER = /\{\{\s*([A-Za-z0-9_]+)\s*\}\}/g;

function placeholders(text: unknown): Set<string> {
  const names = new Set<string>();
  if (typeof text !== 'string') return names;
  for (const match of text.matchAll(PLACEHOLDER)) names.add(match[1]);
  return names;
}

type Obj = Record<string, unknown>;
const isObject = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

export function expectedParams(components: unknown[], parameterFormat: string): ExpectedParams {
  const expected: ExpectedParams = { named: parameterFormat === 'NAMED', header: { kind: 'none' }, body: { count: 0, names: new Set() }, buttons: [] };
  for (const component of components) {
    if (!isObject(component)) continue;
    const type = String(component.type ?? '').toUpperCase();
    if (type === 'HEADER') {
      const format = String(component.format ?? 'TEXT').toUpperCase();
      if (format === 'TEXT') {
        const count = placeholders(component.text).size;
        expected.header = count > 0 ? { kind: 'text', count } : { kind: 'none' };
      } else if (format === 'IMAGE' || format === 'VIDEO' || format === 'DOCUMENT') {
        expected.header = { kind: 'media', format: format.toLowerCase() as 'image' };
      } else if (format === 'LOCATION') {
        expected.header = { kind: 'location' };
      }
    } else if (type === 'BODY') {
      const names = placeholders(component.text);
      expected.body = { count: names.size, names };
    } else if (type === 'BUTTONS' && Array.isArray(component.buttons)) {
      for (const button of component.buttons) {
        const buttonType = isObject(button) ? String(button.type ?? '').toLowerCase() : '';
        const required = buttonType === 'url' ? Math.min(placeholders((button as Obj).url).size, 1)
          : buttonType === 'copy_code' ? 1 : 0;
        expected.buttons.push({ subType: buttonType, required });
      }
    }
  }
  return expected;
}

const BODY_TYPES = new Set(['text', 'currency', 'date_time']);

function checkParameter(where: string, param: unknown): SendProblem | null {
  if (!isObject(param) || typeof param.type !== 'string') return { code: 131008, details: `${where}: parameter type is required` };
  const value = param[param.type];
  switch (param.type) {
    case 'text':
      return typeof param.text === 'string' && param.text.length > 0 ? null : { code: 131008, details: `${where}: parameter text is required` };
    case 'currency':
      return isObject(value) && typeof value.fallback_value === 'string' && typeof value.code === 'string' && Number.isInteger(value.amount_1000)
        ? null : { code: 131008, details: `${where}: currency needs fallback_value, code and an integer amount_1000` };
    case 'date_time':
      return isObject(value) && typeof value.fallback_value === 'string' ? null : { code: 131008, details: `${where}: date_time needs fallback_value` };
    case 'image': case 'video': case 'document':
      return isObject(value) && (typeof value.id === 'string' || typeof value.link === 'string')
        ? null : { code: 131008, details: `${where}: ${param.type} needs an id or a link` };
    case 'payload':
      return typeof param.payload === 'string' ? null : { code: 131008, details: `${where}: payload is required` };
    case 'coupon_code':
      return typeof param.coupon_code === 'string' ? null : { code: 131008, details: `${where}: coupon_code is required` };
    default:
      return null;
  }
}

function countMismatch(where: string, given: number, expected: number): SendProblem {
  return { code: 132000, details: `${where}: number of localizable_params (${given}) does not match the expected number of params (${expected})` };
}

/** Checks a send's `template.components` against the template; null when it would be accepted. */
export function checkSendComponents(expected: ExpectedParams, components: unknown): SendProblem | null {
  if (components !== undefined && !Array.isArray(components)) return { code: 100, details: 'template.components must be an array' };
  let header: unknown[] | null = null;
  let body: unknown[] | null = null;
  const buttons = new Map<number, Obj>();
  for (const component of (components as unknown[] | undefined) ?? []) {
    if (!isObject(component)) return { code: 100, details: 'template.components entries must be objects' };
    const parameters = component.parameters ?? [];
    if (!Array.isArray(parameters)) return { code: 100, details: `${String(component.type)}: parameters must be an array` };
    const type = String(component.type ?? '').toLowerCase();
    if (type === 'header') header = parameters;
    else if (type === 'body') body = parameters;
    else if (type === 'button') {
      const index = Number(component.index);
      if (!Number.isInteger(index) || index < 0) return { code: 131008, details: 'button: index is required' };
      buttons.set(index, component);
    } else {
      return { code: 100, details: `Invalid parameter: component type '${String(component.type)}'` };
    }
  }

  const headerProblem = checkHeader(expected.header, header ?? []);
  if (headerProblem) return headerProblem;

  const bodyParams = body ?? [];
  if (bodyParams.length !== expected.body.count) return countMismatch('body', bodyParams.length, expected.body.count);
  for (const param of bodyParams) {
    const problem = checkParameter('body', param);
    if (problem) return problem;
    if (!BODY_TYPES.has((param as Obj).type as string)) return { code: 132012, details: `body: parameter type ${(param as Obj).type} does not match the template's text variables` };
    if (expected.named) {
      const name = (param as Obj).parameter_name;
      if (typeof name !== 'string' || !expected.body.names.has(name)) return { code: 132000, details: `body: parameter_name ${String(name)} is not a variable of the template` };
    }
  }

  for (const [index, button] of expected.buttons.entries()) {
    const given = buttons.get(index);
    const params = (given?.parameters as unknown[] | undefined) ?? [];
    if (button.required > 0 && params.length !== button.required) return countMismatch(`button ${index}`, params.length, button.required);
    if (given && typeof given.sub_type === 'string' && given.sub_type.toLowerCase() !== button.subType) {
      return { code: 132012, details: `button ${index}: sub_type ${given.sub_type} does not match the template's ${button.subType} button` };
    }
    for (const param of params) {
      const problem = checkParameter(`button ${index}`, param);
      if (problem) return problem;
    }
  }
  for (const index of buttons.keys()) {
    if (index >= expected.buttons.length) return { code: 131009, details: `button: the template has no button at index ${index}` };
  }
  return null;
}

function checkHeader(expected: HeaderExpectation, params: unknown[]): SendProblem | null {
  const want = expected.kind === 'none' ? 0 : expected.kind === 'text' ? expected.count : 1;
  if (params.length !== want) return countMismatch('header', params.length, want);
  for (const param of params) {
    const problem = checkParameter('header', param);
    if (problem) return problem;
    const type = (param as Obj).type;
    const wantType = expected.kind === 'media' ? expected.format : expected.kind;
    if (type !== wantType) return { code: 132012, details: `header: parameter type ${String(type)} does not match the template's ${wantType} header` };
  }
  return null;
}
