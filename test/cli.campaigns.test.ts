import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call } from './helpers/app.ts';
import { createCampaign } from './helpers/campaigns-api.ts';
import { CAMPAIGN_ENV, createContacts, runCampaignWorkers, someContacts, uniqueTag } from './helpers/campaigns.ts';
import { listenOnLoopback, runCli, spawnCli } from './helpers/cli.ts';
import { createApprovedTemplate, createConnectedTenant, sandboxControl, startUpstreamApp, type UpstreamTestApp } from './helpers/upstream.ts';

const jsonLines = (text: string) => text.split('\n').filter(Boolean).map((l) => JSON.parse(l));

// Each msvc is a process of its own (node, tsx, the CLI): seconds to start on a loaded machine.
describe('msvc campaigns watch against a real service, sandbox and dispatcher', { timeout: 120_000 }, () => {
  let t: UpstreamTestApp;
  let url: string;
  // The watch polls through the API; the minute budget is not what this is about.
  beforeAll(async () => {
    t = await startUpstreamApp({ ...CAMPAIGN_ENV, RATE_LIMIT_PER_MINUTE: '100000' });
    url = await listenOnLoopback(t.app);
  });
  afterAll(async () => { await t?.close(); });

  it('follows a small campaign from DRAFT to COMPLETED, then shows its errors by code (exit 0)', async () => {
    const tenant = await createConnectedTenant(t.app);
    const env = { MSVC_URL: url, MSVC_API_KEY: tenant.key };
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    const contacts = await createContacts(t, tenant, someContacts(8, { tags: [tag] }));
    for (const contact of contacts.slice(0, 2)) {
      await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: contact.phone, outcome: 'reject', error_code: 131026 });
    }
    const campaign = await createCampaign(t, tenant, template.id, { audience: { groups: [tag] }, batch_size: 3 });

    const watch = spawnCli(['campaigns', 'watch', campaign.id, '--interval', '100', '--json'], env);
    await watch.waitFor(/"status":"DRAFT"/);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      expect((await call(t.app, tenant, 'POST', `/campaigns/${campaign.id}/send`)).statusCode).toBe(200);
      expect(await watch.exited).toBe(0);
    } finally {
      await workers.stop();
    }
    const lines = jsonLines(watch.stdout());
    const progress = lines.slice(0, -1);
    expect(progress[0]).toMatchObject({ id: campaign.id, status: 'DRAFT' });
    expect(progress.map((l) => l.status)).toContain('RUNNING');
    expect(progress.at(-1)).toMatchObject({ status: 'COMPLETED', stats: { total: 8, failed: 2, pending: 0, sent: 6 } });
    const { campaign: ended, errors } = lines.at(-1);
    expect(ended).toMatchObject({ id: campaign.id, status: 'COMPLETED' });
    expect(errors).toMatchObject({ total_failed: 2, by_code: [{ code: '131026', count: 2 }] });

    // Readable: the errors summary as a table.
    const table = await runCli(['campaigns', 'watch', campaign.id], env);
    expect(table.code).toBe(0);
    expect(table.stdout).toContain('ended COMPLETED');
    expect(table.stdout).toMatch(/131026.*│\s*2\s*│/);
  });

  it('ends with exit 6 when the campaign is stopped, and 3 for an unknown campaign', async () => {
    const tenant = await createConnectedTenant(t.app);
    const env = { MSVC_URL: url, MSVC_API_KEY: tenant.key };
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    await createContacts(t, tenant, someContacts(3, { tags: [tag] }));
    const campaign = await createCampaign(t, tenant, template.id, { audience: { groups: [tag] } });
    // No dispatcher for this tenant: it stays RUNNING with everyone pending until stopped.
    expect((await call(t.app, tenant, 'POST', `/campaigns/${campaign.id}/send`)).statusCode).toBe(200);
    const watch = spawnCli(['campaigns', 'watch', campaign.id, '--interval', '100', '--json'], env);
    await watch.waitFor(/"status":"RUNNING"/);
    expect((await call(t.app, tenant, 'POST', `/campaigns/${campaign.id}/stop`)).statusCode).toBe(200);
    expect(await watch.exited).toBe(6);
    expect(jsonLines(watch.stdout()).at(-1)).toMatchObject({ campaign: { status: 'STOPPED', stats: { pending: 3 } }, errors: { total_failed: 0 } });

    const unknown = await runCli(['campaigns', 'watch', '00000000-0000-4000-8000-000000000000'], env);
    expect(unknown.code).toBe(3);
    expect(unknown.stderr).toContain('NOT_FOUND');
  });
});
