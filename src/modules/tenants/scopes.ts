export const SCOPES = [
  'contacts:read', 'contacts:write',
  'templates:read', 'templates:write',
  'messages:send',
  'campaigns:read', 'campaigns:write', 'campaigns:send',
  'webhooks:read', 'webhooks:write',
  'media:read', 'media:write',
] as const;

export type Scope = (typeof SCOPES)[number];
export const WILDCARD = '*';

export const PRESETS: { name: string; scopes: string[] }[] = [
  { name: 'read_only', scopes: SCOPES.filter((s) => s.endsWith(':read')) },
  { name: 'campaigns', scopes: ['campaigns:read', 'campaigns:write', 'campaigns:send', 'templates:read', 'contacts:read', 'media:read'] },
  { name: 'messaging', scopes: ['messages:send', 'templates:read', 'contacts:read', 'media:read', 'media:write'] },
  { name: 'full_access', scopes: [WILDCARD] },
];

export function isKnownScope(scope: string): boolean {
  return scope === WILDCARD || (SCOPES as readonly string[]).includes(scope);
}

export function missingScopes(granted: string[], required: string[]): string[] {
  if (granted.includes(WILDCARD)) return [];
  return required.filter((scope) => !granted.includes(scope));
}
