import { setTimeout as sleep } from 'node:timers/promises';
import type { Command } from 'commander';
import cliProgress from 'cli-progress';
import { requireApiKey } from '../config.ts';
import { EXIT } from '../exit-codes.ts';
import { Api, PUBLIC_PREFIX } from '../http.ts';
import { emit, renderTable } from '../output.ts';
import { positiveInt, type Runner } from './shared.ts';

interface Stats { total: number; sent: number; delivered: number; read: number; failed: number; pending: number }
interface Campaign { id: string; name: string; status: string; stats: Stats; failure_reason?: string | null }
interface ErrorsSummary { total_failed: number; by_code: { code: string; title: string; fix: string; count: number; sample_message: string }[] }

/** Spec 3.1: the statuses a campaign never leaves. */
const TERMINAL = new Set(['COMPLETED', 'STOPPED', 'FAILED']);

export function registerCampaignCommands(program: Command, run: Runner): void {
  const campaigns = program.command('campaigns').description('campaigns of the tenant of the API key (public API)');
  campaigns.command('watch').description('live progress of a campaign (sent, delivered, read, failed, pending) until it ends, then its errors by code')
    .argument('<campaign-id>')
    .option('--interval <ms>', 'poll period', positiveInt, 1000)
    .action(run(async (config, opts: { interval: number }, id: string) => {
      const api = new Api(config.url, PUBLIC_PREFIX, requireApiKey(config));
      const path = `/campaigns/${encodeURIComponent(id)}`;
      const bar = !config.json && process.stderr.isTTY
        ? new cliProgress.SingleBar({
          stream: process.stderr, fps: 5,
          format: ' {status} {bar} {value}/{total} | sent {sent} delivered {delivered} read {read} failed {failed} pending {pending}',
        }, cliProgress.Presets.shades_classic)
        : undefined;
      let last = '';
      let campaign: Campaign;
      try {
        for (;;) {
          campaign = await api.call<Campaign>('GET', path, { retryServerErrors: true });
          const s = campaign.stats;
          const processed = s.total - s.pending;
          if (bar) {
            if (!bar.isActive) bar.start(Math.max(s.total, 1), processed, { status: campaign.status, ...s });
            bar.setTotal(Math.max(s.total, 1));
            bar.update(processed, { status: campaign.status, ...s });
          } else {
            // Without a terminal: one line (JSON with --json) whenever something changed.
            const now = JSON.stringify({ status: campaign.status, stats: s });
            if (now !== last) {
              process.stdout.write(config.json
                ? `${JSON.stringify({ at: new Date().toISOString(), id: campaign.id, status: campaign.status, stats: s })}\n`
                : `${new Date().toISOString()}  ${campaign.status}  sent ${s.sent}  delivered ${s.delivered}  read ${s.read}  failed ${s.failed}  pending ${s.pending}  of ${s.total}\n`);
              last = now;
            }
          }
          if (TERMINAL.has(campaign.status)) break;
          await sleep(opts.interval);
        }
        bar?.stop();
        const errors = await api.call<ErrorsSummary>('GET', `${path}/errors`, { retryServerErrors: true });
        // With --json the whole output is JSON lines: the progress lines, then this one.
        if (config.json) process.stdout.write(`${JSON.stringify({ campaign, errors })}\n`);
        else emit(false, { campaign, errors }, () => [
          `Campaign ${campaign.name} (${campaign.id}) ended ${campaign.status}${campaign.failure_reason ? `: ${campaign.failure_reason}` : ''}.`,
          errors.total_failed === 0 ? 'No failed recipients.' : `${errors.total_failed} failed recipients:\n${renderTable(errors.by_code, [
            { header: 'code', value: (e) => e.code }, { header: 'title', value: (e) => e.title }, { header: 'count', value: (e) => e.count },
            { header: 'fix', value: (e) => e.fix }, { header: 'sample', value: (e) => e.sample_message },
          ])}`,
        ].join('\n'));
        process.exitCode = campaign.status === 'COMPLETED' ? EXIT.OK : EXIT.CAMPAIGN_NOT_COMPLETED;
      } finally {
        bar?.stop();
        await api.close();
      }
    }));
}
