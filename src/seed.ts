import type { Deps } from './deps.ts';

export const DEMO_WABA_ID = '100000000000001';
export const DEMO_PHONE_NUMBER_ID = '100000000000002';

/** On an empty database outside production: a demo tenant with a sandbox business account and a full-access key. */
export async function seedDemoTenant(deps: Deps): Promise<{ tenantId: string; apiKey: string } | null> {
  const existing = await deps.db.selectFrom('tenants').select('id').limit(1).executeTakeFirst();
  if (existing) return null;
  const tenant = await deps.admin.createTenant('Demo tenant', 'business');
  await deps.admin.connectBusinessAccount(tenant.id, {
    waba_id: DEMO_WABA_ID, phone_number_id: DEMO_PHONE_NUMBER_ID, access_token: 'sandbox-demo-token', display_phone_number: '+15550100000',
  });
  const key = await deps.admin.createApiKey(tenant.id, { name: 'Demo full-access key', preset: 'full_access' });
  return { tenantId: tenant.id, apiKey: key.key };
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
