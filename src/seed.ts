import { join } from 'node:path';
import type { Deps } from './deps.ts';

export const DEMO_WABA_ID = '100000000000001';
export const DEMO_PHONE_NUMBER_ID = '100000000000002';
const DEMO_NAME = 'Demo tenant';

/** On an empty database outside production: a demo tenant with a sandbox business account and a full-access key. */
export async function seedDemoTenant(deps: Deps): Promise<{ tenantId: string; apiKey: string } | null> {
  const existing = await deps.db.selectFrom('tenants').select('id').limit(1).executeTakeFirst();
  if (existing) return null;
  const tenant = await deps.admin.createTenant(DEMO_NAME, 'business');
  await deps.admin.connectBusinessAccount(tenant.id, {
    waba_id: DEMO_WABA_ID, phone_number_id: DEMO_PHONE_NUMBER_ID, access_token: 'sandbox-demo-token', display_phone_number: '+15550100000',
  });
  const key = await deps.admin.createApiKey(tenant.id, { name: 'Demo full-access key', preset: 'full_access' });
  return { tenantId: tenant.id, apiKey: key.key };
}

/** The demo tenant a first start created, if it is still there. */
export async function findDemoTenant(deps: Deps): Promise<string | null> {
  const row = await deps.db.selectFrom('tenants').select('id').where('name', '=', DEMO_NAME).where('deleted_at', 'is', null)
    .orderBy('created_at').limit(1).executeTakeFirst();
  return row?.id ?? null;
}

/**
 * On a restart the demo key cannot be shown again (only its hash is stored): where the admin token
 * is, and the one command that mints a new key for the demo tenant.
 */
export function restartBanner(baseUrl: string, tenantId: string, adminTokenFrom: { env: true } | { dataDir: string }): string {
  const file = 'dataDir' in adminTokenFrom ? join(adminTokenFrom.dataDir, 'dev-secrets.json') : null;
  const token = file ? `$(node -p 'require(process.argv[1]).ADMIN_TOKEN' ${JSON.stringify(file)})` : '$ADMIN_TOKEN';
  return [
    '',
    `  Demo tenant ${tenantId}: its API key was shown at the first start only.`,
    `    admin token: ${file ? `ADMIN_TOKEN in ${file}` : 'the ADMIN_TOKEN this process was given'}`,
    '  A new full-access key for the demo tenant (printed once):',
    `    curl -s -X POST ${baseUrl}/admin/v1/tenants/${tenantId}/api-keys -H "Authorization: Bearer ${token}" \\`,
    `      -H "Content-Type: application/json" -d '{"name":"Demo key","preset":"full_access"}'`,
    '',
  ].join('\n');
}

export function demoBanner(baseUrl: string, adminToken: string, seeded: { tenantId: string; apiKey: string }): string {
  const api = `${baseUrl}/api/v1/public`;
  return [
    '',
    '  Demo tenant created (shown once; keep the key, it is stored only as a hash):',
    `    tenant id:   ${seeded.tenantId}`,
    `    API key:     ${seeded.apiKey}`,
    `    admin token: ${adminToken}`,
    '',
    '  Try it:',
    `    curl -s ${api}/contacts -H "Authorization: Bearer ${seeded.apiKey}"`,
    `    curl -s -X POST ${api}/contacts -H "Authorization: Bearer ${seeded.apiKey}" -H "Content-Type: application/json" \\`,
    `      -d '{"first_name":"Ada","phone":"+14155552671","email":"ada@example.com","tags":["vip"]}'`,
    `    curl -s ${baseUrl}/admin/v1/scopes -H "Authorization: Bearer ${adminToken}"`,
    '',
  ].join('\n');
}

/**
 * Where the rest is, under either banner: the API explorer (when OPENAPI_ENABLED) and the upstream
 * the service sends to: the built-in sandbox (`sandboxUrl`, its listener root) or UPSTREAM_BASE_URL.
 */
export function locationsBanner(baseUrl: string, where: { docs: boolean; sandboxUrl: string | null; upstreamBaseUrl: string | null }): string {
  return [
    where.docs
      ? `  API docs:  ${baseUrl}/docs (API explorer; OpenAPI at ${baseUrl}/openapi.json, operator API at ${baseUrl}/admin/v1/openapi.json)`
      : '  API docs:  off (OPENAPI_ENABLED=false)',
    where.sandboxUrl
      ? `  Sandbox:   ${where.sandboxUrl} (SANDBOX_PORT; the built-in WhatsApp stand-in every send goes to, its control API under ${where.sandboxUrl}/__sandbox/)`
      : `  Upstream:  ${where.upstreamBaseUrl} (UPSTREAM_BASE_URL)`,
    '',
  ].join('\n');
}
