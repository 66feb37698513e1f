import type { Command } from 'commander';
import { requireAdminToken, type CliConfig } from '../config.ts';
import { ADMIN_PREFIX, Api } from '../http.ts';
import { emit, renderRecord, renderTable, UUID_WIDTH } from '../output.ts';
import { integerAtLeast, list, positiveInt, type Runner } from './shared.ts';

interface Tenant { id: string; name: string; plan: string; api_requests_daily: number; created_at: string }
interface TenantPage { data: Tenant[]; pagination: { page: number; total_pages: number; total_items: number } }
interface ApiKey { id: string; name: string; prefix: string; scopes: string[]; mode: string; expires_at: string | null; ip_allowlist: string[]; created_at: string; key?: string }

const PLANS = 'free, starter, growth or business';

/** The operator API (/admin/v1): tenants, API keys, business accounts, scopes. */
export function registerAdminCommands(program: Command, run: Runner): void {
  const admin = (config: CliConfig) => new Api(config.url, ADMIN_PREFIX, requireAdminToken(config));

  const tenants = program.command('tenants').description('tenants (operator API)');
  tenants.command('list').description('list tenants, newest first')
    .option('--name <text>', 'only names containing this text (case-insensitive)')
    .option('--page <n>', 'page', positiveInt, 1)
    .option('--limit <n>', 'tenants per page (1-100)', positiveInt, 20)
    .action(run(async (config, opts: { name?: string; page: number; limit: number }) => {
      const page = await admin(config).call<TenantPage>('GET', '/tenants', { query: { name: opts.name, page: opts.page, limit: opts.limit } });
      emit(config.json, page, () => `${renderTable(page.data, [
        { header: 'id', value: (t) => t.id, minWidth: UUID_WIDTH }, { header: 'name', value: (t) => t.name }, { header: 'plan', value: (t) => t.plan },
        { header: 'daily quota', value: (t) => t.api_requests_daily }, { header: 'created', value: (t) => t.created_at },
      ], config.width)}\npage ${page.pagination.page} of ${page.pagination.total_pages} (${page.pagination.total_items} tenants)`);
    }));
  tenants.command('create').description('create a tenant')
    .requiredOption('--name <name>', 'tenant name')
    .requiredOption('--plan <plan>', `plan: ${PLANS}`)
    .action(run(async (config, opts: { name: string; plan: string }) => {
      const tenant = await admin(config).call<Tenant>('POST', '/tenants', { body: { name: opts.name, plan: opts.plan } });
      emit(config.json, tenant, () => renderRecord({ ...tenant }, config.width));
    }));
  tenants.command('show').description('show a tenant').argument('<tenant-id>')
    .action(run(async (config, _opts, id: string) => {
      const tenant = await admin(config).call<Tenant>('GET', `/tenants/${encodeURIComponent(id)}`);
      emit(config.json, tenant, () => renderRecord({ ...tenant }, config.width));
    }));
  tenants.command('update').description('change a tenant\'s name, plan or daily request quota').argument('<tenant-id>')
    .option('--name <name>', 'new name')
    .option('--plan <plan>', `new plan: ${PLANS}`)
    .option('--daily-quota <n>', 'API requests a day (-1: unlimited)', integerAtLeast(-1))
    .action(run(async (config, opts: { name?: string; plan?: string; dailyQuota?: number }, id: string) => {
      const tenant = await admin(config).call<Tenant>('PATCH', `/tenants/${encodeURIComponent(id)}`, {
        body: { name: opts.name, plan: opts.plan, api_requests_daily: opts.dailyQuota },
      });
      emit(config.json, tenant, () => renderRecord({ ...tenant }, config.width));
    }));
  tenants.command('delete').description('delete a tenant (its keys stop working)').argument('<tenant-id>')
    .action(run(async (config, _opts, id: string) => {
      const result = await admin(config).call<{ message: string }>('DELETE', `/tenants/${encodeURIComponent(id)}`);
      emit(config.json, result, () => result.message);
    }));

  const keys = program.command('keys').description('API keys of a tenant (operator API)');
  keys.command('create').description('create an API key; the secret is shown only here').argument('<tenant-id>')
    .requiredOption('--name <name>', 'key name')
    .option('--scopes <list>', 'comma-separated scopes (see `msvc scopes`)', list)
    .option('--preset <name>', 'a scope preset: read_only, campaigns, messaging, full_access')
    .option('--mode <mode>', 'live or test')
    .option('--expires-at <iso>', 'expiry (ISO-8601)')
    .option('--ip-allowlist <list>', 'comma-separated IPs or CIDRs', list)
    .action(run(async (config, opts: { name: string; scopes?: string[]; preset?: string; mode?: string; expiresAt?: string; ipAllowlist?: string[] }, tenantId: string) => {
      const key = await admin(config).call<ApiKey>('POST', `/tenants/${encodeURIComponent(tenantId)}/api-keys`, {
        body: { name: opts.name, scopes: opts.scopes, preset: opts.preset, mode: opts.mode, expires_at: opts.expiresAt, ip_allowlist: opts.ipAllowlist },
      });
      // The secret on a line of its own, never cut to the width: it is shown only here.
      const { key: secret, ...shown } = key;
      emit(config.json, key, () => `${renderRecord(shown, config.width)}\nkey: ${secret}\nKeep the key now: it is not shown again.`);
    }));
  keys.command('list').description('list a tenant\'s API keys (without secrets)').argument('<tenant-id>')
    .action(run(async (config, _opts, tenantId: string) => {
      const page = await admin(config).call<{ data: ApiKey[] }>('GET', `/tenants/${encodeURIComponent(tenantId)}/api-keys`);
      emit(config.json, page, () => renderTable(page.data, [
        { header: 'id', value: (k) => k.id, minWidth: UUID_WIDTH }, { header: 'name', value: (k) => k.name }, { header: 'prefix', value: (k) => k.prefix },
        { header: 'mode', value: (k) => k.mode }, { header: 'scopes', value: (k) => k.scopes }, { header: 'expires', value: (k) => k.expires_at },
        { header: 'created', value: (k) => k.created_at },
      ], config.width));
    }));
  keys.command('revoke').description('revoke an API key at once').argument('<tenant-id>').argument('<key-id>')
    .action(run(async (config, _opts, tenantId: string, keyId: string) => {
      const result = await admin(config).call<{ message: string }>('DELETE', `/tenants/${encodeURIComponent(tenantId)}/api-keys/${encodeURIComponent(keyId)}`);
      emit(config.json, result, () => result.message);
    }));

  const account = program.command('business-account').description('a tenant\'s WhatsApp business account (operator API)');
  account.command('connect').description('connect (or replace) the business account').argument('<tenant-id>')
    .requiredOption('--waba-id <id>', 'WhatsApp Business Account id')
    .requiredOption('--phone-number-id <id>', 'phone-number id')
    .requiredOption('--access-token <token>', 'upstream access token (stored encrypted)')
    .option('--display-phone-number <number>', 'the number as shown')
    .option('--messages-per-second <n>', 'campaign pacing (1-1000, default 80)', positiveInt)
    .option('--messaging-tier <tier>', '250, 1K, 10K, 100K or unlimited')
    .action(run(async (config, opts: { wabaId: string; phoneNumberId: string; accessToken: string; displayPhoneNumber?: string; messagesPerSecond?: number; messagingTier?: string }, tenantId: string) => {
      const result = await admin(config).call<Record<string, unknown>>('PUT', `/tenants/${encodeURIComponent(tenantId)}/business-account`, {
        body: {
          waba_id: opts.wabaId, phone_number_id: opts.phoneNumberId, access_token: opts.accessToken, display_phone_number: opts.displayPhoneNumber,
          messages_per_second: opts.messagesPerSecond, messaging_tier: opts.messagingTier,
        },
      });
      emit(config.json, result, () => renderRecord(result, config.width));
    }));
  account.command('disconnect').description('disconnect the business account').argument('<tenant-id>')
    .action(run(async (config, _opts, tenantId: string) => {
      const result = await admin(config).call<Record<string, unknown>>('DELETE', `/tenants/${encodeURIComponent(tenantId)}/business-account`);
      emit(config.json, result, () => renderRecord(result, config.width));
    }));

  program.command('scopes').description('the scope vocabulary and presets for API keys')
    .action(run(async (config) => {
      const vocabulary = await admin(config).call<{ scopes: string[]; wildcard: string; presets: { name: string; scopes: string[] }[] }>('GET', '/scopes');
      emit(config.json, vocabulary, () => `scopes: ${vocabulary.scopes.join(', ')}\nwildcard: ${vocabulary.wildcard}\n${renderTable(vocabulary.presets, [
        { header: 'preset', value: (p) => p.name }, { header: 'scopes', value: (p) => p.scopes },
      ], config.width)}`);
    }));
}
