import { createHmac, timingSafeEqual } from 'node:crypto';
import type { ValidationDetail } from '../../http/errors.ts';
import type { SendComponent } from '../../upstream/types.ts';
import { parameterText, type MappedContact, type MappingParameter, type VariableMapping } from '../campaigns/campaigns.mapping.ts';

/**
 * Link clicks of campaigns (issue 25 §2). A template's URL button `<PUBLIC_BASE_URL>/r/{{1}}` is
 * sent with a per-recipient token as its parameter; the mapping's parameter of that button is the
 * destination. A token is the recipient's id and a MAC of it: unguessable without SECRETS_KEY, and
 * nothing to store per recipient (a million-recipient campaign is materialised in one statement).
 */

const UUID_BYTES = 16;
const MAC_BYTES = 8;
/** base64url of 24 bytes. */
export const TOKEN_LENGTH = 32;
export const MAX_DESTINATION = 2048;

const clickKeys = new WeakMap<Buffer, Buffer>();
/** A key of its own for click tokens, derived from SECRETS_KEY. */
function clickKey(secretsKey: Buffer): Buffer {
  let key = clickKeys.get(secretsKey);
  if (!key) clickKeys.set(secretsKey, key = createHmac('sha256', secretsKey).update('campaign-click-token-v1').digest());
  return key;
}

const mac = (key: Buffer, id: Buffer) => createHmac('sha256', key).update(id).digest().subarray(0, MAC_BYTES);

export function clickToken(secretsKey: Buffer, recipientId: string): string {
  const id = Buffer.from(recipientId.replace(/-/g, ''), 'hex');
  return Buffer.concat([id, mac(clickKey(secretsKey), id)]).toString('base64url');
}

/** The recipient id a token names, or null when it is not a token of ours. */
export function recipientOfToken(secretsKey: Buffer, token: string): string | null {
  if (token.length !== TOKEN_LENGTH || !/^[A-Za-z0-9_-]+$/.test(token)) return null;
  const bytes = Buffer.from(token, 'base64url');
  if (bytes.length !== UUID_BYTES + MAC_BYTES) return null;
  const id = bytes.subarray(0, UUID_BYTES);
  if (!timingSafeEqual(bytes.subarray(UUID_BYTES), mac(clickKey(secretsKey), id))) return null;
  const hex = id.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Whether a destination may be redirected to: an absolute https URL of reasonable length. */
export function isHttpsDestination(value: string): boolean {
  if (value.length === 0 || value.length > MAX_DESTINATION) return false;
  try {
    const url = new URL(value);
    return url.protocol === 'https:' && url.hostname.length > 0 && !url.username && !url.password;
  } catch {
    return false;
  }
}

/** A button component of a stored mapping marked as the tracked one (set by the service, never taken from input). */
type TrackedComponent = VariableMapping['components'][number] & { track_clicks?: boolean };

export function trackedComponent(mapping: VariableMapping | null): TrackedComponent | undefined {
  return (mapping?.components as TrackedComponent[] | undefined)?.find((c) => c.type === 'button' && c.track_clicks === true);
}

/** The template's URL buttons that point at this service's redirect, by index. */
export function redirectButtons(templateComponents: unknown[], publicBaseUrl: string): number[] {
  const target = `${publicBaseUrl}/r/{{1}}`;
  const buttons = templateComponents.flatMap((c) => {
    const comp = c as { type?: unknown; buttons?: unknown };
    return String(comp?.type ?? '').toUpperCase() === 'BUTTONS' && Array.isArray(comp.buttons) ? comp.buttons as { type?: unknown; url?: unknown }[] : [];
  });
  return buttons.flatMap((b, index) => (String(b?.type ?? '').toUpperCase() === 'URL' && b.url === target ? [index] : []));
}

/**
 * At create with track_clicks: the template must have exactly one redirect button, and the
 * mapping's parameter of that button must be an https destination (static, or a contact field
 * whose fallback, if any, is one). Returns the mapping with that button marked, or the issues.
 */
export function markTrackedButton(mapping: VariableMapping | null, templateComponents: unknown[], publicBaseUrl: string): { mapping: VariableMapping | null; issues: ValidationDetail[] } {
  const redirects = redirectButtons(templateComponents, publicBaseUrl);
  if (redirects.length !== 1) {
    const msg = redirects.length === 0
      ? `track_clicks needs a template with a URL button whose URL is ${publicBaseUrl}/r/{{1}} (a dynamic suffix on this service's redirect)`
      : 'track_clicks needs exactly one URL button on this service\'s redirect; the template has several';
    return { mapping, issues: [{ type: 'value_error', loc: ['body', 'track_clicks'], msg, input: true }] };
  }
  const index = redirects[0];
  const at = mapping?.components.findIndex((c) => c.type === 'button' && c.index === index) ?? -1;
  const component = at >= 0 ? mapping!.components[at] : undefined;
  const loc = ['body', 'variable_mapping', 'components', at, 'parameters', 0];
  const parameter: MappingParameter | undefined = component?.parameters[0];
  if (!component || !parameter) {
    return { mapping, issues: [{ type: 'missing', loc: ['body', 'variable_mapping', 'components'], msg: `map button ${index} to the link's destination (an https URL)`, input: null }] };
  }
  if (parameter.kind === 'static' && !isHttpsDestination(parameter.value)) {
    return { mapping, issues: [{ type: 'value_error', loc: [...loc, 'value'], msg: 'the tracked link\'s destination must be a full https URL', input: parameter.value }] };
  }
  if (parameter.kind === 'contact_field' && parameter.fallback !== undefined && !isHttpsDestination(parameter.fallback)) {
    return { mapping, issues: [{ type: 'value_error', loc: [...loc, 'fallback'], msg: 'the tracked link\'s fallback destination must be a full https URL', input: parameter.fallback }] };
  }
  const components = mapping!.components.map((c, i) => (i === at ? { ...c, track_clicks: true } : c));
  return { mapping: { components }, issues: [] };
}

/** A recipient's send components with the tracked button's parameter replaced by its token. */
export function withClickToken(components: SendComponent[], mapping: VariableMapping | null, recipientId: string, secretsKey: Buffer): SendComponent[] {
  const tracked = trackedComponent(mapping);
  if (!tracked) return components;
  return components.map((c) => (c.type === 'button' && c.index === String(tracked.index)
    ? { ...c, parameters: [{ type: 'text', text: clickToken(secretsKey, recipientId) }] }
    : c));
}

/** The destination of a recipient's click, or null when it resolves to no https URL. */
export function destinationFor(mapping: VariableMapping | null, contact: MappedContact): string | null {
  const parameter = trackedComponent(mapping)?.parameters[0];
  if (!parameter) return null;
  const value = parameterText(parameter, contact).trim();
  if (isHttpsDestination(value)) return value;
  // A contact field that holds no https URL: the fallback, when there is one.
  const fallback = parameter.kind === 'contact_field' ? parameter.fallback?.trim() : undefined;
  return fallback && isHttpsDestination(fallback) ? fallback : null;
}
