import { setTimeout as sleep } from 'node:timers/promises';
import { Option, type Command } from 'commander';
import cliProgress from 'cli-progress';
import type { components } from '../../../sdk/src/generated/schema.ts';
import { requireApiKey, type CliConfig } from '../config.ts';
import { EXIT } from '../exit-codes.ts';
import { Api, PUBLIC_PREFIX } from '../http.ts';
import { formatDuration } from '../import/progress.ts';
import { emit, renderRecord, renderTable, shortTime, UUID_WIDTH } from '../output.ts';
import { campaignCreateBody, type CreateFlags } from './campaigns.create.ts';
import { list, positiveInt, type Runner } from './shared.ts';

type Campaign = components['schemas']['Campaign'];
type CampaignDetail = components['schemas']['CampaignDetail'];
type ErrorsSummary = components['schemas']['CampaignErrorsSummary'];

/** Spec 3.1: the statuses a campaign never leaves. */
const TERMINAL = new Set(['COMPLETED', 'STOPPED', 'FAILED']);

const idempotencyKeyOption = () => new Option('--idempotency-key <key>', 'Idempotency-Key of the request, to repeat it safely from a script (default: a new UUID)');
const publicApi = (config: CliConfig) => new Api(config.url, PUBLIC_PREFIX, requireApiKey(config));

export function registerCampaignCommands(program: Command, run: Runner): void {
  const campaigns = program.command('campaigns').description('campaigns of the tenant of the API key (public API)');

  campaigns.command('list').description('all campaigns, newest first')
    .action(run(async (config) => {
      const page = await publicApi(config).call<{ data: Campaign[] }>('GET', '/campaigns', { retryServerErrors: true });
      emit(config.json, page, () => page.data.length === 0 ? 'No campaigns.' : renderTable(page.data, [
        { header: 'id', value: (c) => c.id, minWidth: UUID_WIDTH },
        { header: 'name', value: (c) => c.name },
        { header: 'status', value: (c) => c.status },
        { header: 'sent/total', value: (c) => `${c.stats.sent}/${c.stats.total}` },
        { header: 'failed', value: (c) => c.stats.failed },
        { header: 'template', value: (c) => c.template_name && `${c.template_name} (${c.template_language})` },
        { header: 'scheduled', value: (c) => shortTime(c.scheduled_at) },
        { header: 'created', value: (c) => shortTime(c.created_at) },
      ], config.width));
    }));

  campaigns.command('create').description('create a campaign (DRAFT, or SCHEDULED with --scheduled-at) from flags, a JSON body file, or both (flags win)')
    .option('--file <body.json>', 'the whole create body as JSON (spec 4.1: name, template_id, audience, variable_mapping, ...)')
    .option('--name <name>', 'campaign name (1-120 characters)')
    .option('--template <id>', 'template: its id or its upstream id (approved)')
    .option('--description <text>', 'description (at most 500 characters)')
    .option('--groups <list>', 'audience: comma-separated contact tags', list)
    .option('--sources <list>', 'audience: comma-separated contact sources', list)
    .option('--mapping <json>', 'variable_mapping as JSON, or @file')
    .option('--body-fields <list>', 'short mapping: the body placeholders {{1}}, {{2}}, ... from these contact fields (e.g. first_name,custom_fields.order)', list)
    .option('--batch-size <n>', 'recipients queued per batch (1-1000, default 50)', positiveInt)
    .option('--scheduled-at <iso>', 'start at this time (ISO-8601 UTC) instead of on `send`')
    .addOption(idempotencyKeyOption())
    .action(run(async (config, opts: CreateFlags & { idempotencyKey?: string }) => {
      const body = campaignCreateBody(opts);
      const campaign = await publicApi(config).call<Campaign>('POST', '/campaigns', { body, headers: idempotencyHeader(opts.idempotencyKey) });
      emit(config.json, campaign, () => `${renderRecord(campaignRecord(campaign), config.width)}\n${campaign.status === 'DRAFT'
        ? `Send it with: msvc campaigns send ${campaign.id}`
        : `It starts at ${campaign.scheduled_at}.`}`);
    }));

  for (const [action, description] of [
    ['send', 'start dispatch now (DRAFT or SCHEDULED); shows the pre-flight: audience size against the messaging tier, estimated duration, warnings'],
    ['pause', 'pause a RUNNING or SCHEDULED campaign (messages in flight still go)'],
    ['resume', 'resume a PAUSED campaign'],
    ['stop', 'stop a RUNNING campaign for good (undispatched recipients stay pending)'],
  ] as const) {
    campaigns.command(action).description(description).argument('<campaign-id>')
      .addOption(idempotencyKeyOption())
      .action(run(async (config, opts: { idempotencyKey?: string }, id: string) => {
        const detail = await publicApi(config).call<CampaignDetail>('POST', `/campaigns/${encodeURIComponent(id)}/${action}`, { headers: idempotencyHeader(opts.idempotencyKey) });
        const starts = action === 'send' || action === 'resume';
        emit(config.json, detail, () => renderRecord({ ...campaignRecord(detail), ...(starts ? preflightRecord(detail.preflight) : {}) }, config.width));
      }));
  }
  campaigns.command('watch').description('live progress of a campaign (sent, delivered, read, failed, pending) until it ends, then its errors by code')
    .argument('<campaign-id>')
    .option('--interval <ms>', 'poll period', positiveInt, 1000)
    .action(run(async (config, opts: { interval: number }, id: string) => {
      const api = publicApi(config);
      const path = `/campaigns/${encodeURIComponent(id)}`;
      const bar = !config.json && process.stderr.isTTY
        ? new cliProgress.SingleBar({
          stream: process.stderr, fps: 5,
          format: ' {status} {bar} {value}/{total} | sent {sent} delivered {delivered} read {read} failed {failed} pending {pending}',
        }, cliProgress.Presets.shades_classic)
        : undefined;
      let last = '';
      let campaign: CampaignDetail;
      try {
        for (;;) {
          campaign = await api.call<CampaignDetail>('GET', path, { retryServerErrors: true });
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
          ], config.width)}`,
        ].join('\n'));
        process.exitCode = campaign.status === 'COMPLETED' ? EXIT.OK : EXIT.CAMPAIGN_NOT_COMPLETED;
      } finally {
        bar?.stop();
        await api.close();
      }
    }));
}

const idempotencyHeader = (key: string | undefined): Record<string, string> | undefined => key ? { 'idempotency-key': key } : undefined;

function campaignRecord(c: Campaign): Record<string, unknown> {
  const s = c.stats;
  return {
    id: c.id, name: c.name, status: c.status,
    template: c.template_name ? `${c.template_name} (${c.template_language}, ${c.template_category})` : c.template_id,
    ...(c.scheduled_at ? { scheduled: c.scheduled_at } : {}),
    ...(s.total > 0 ? { recipients: `${s.total}: sent ${s.sent}, delivered ${s.delivered}, read ${s.read}, failed ${s.failed}, pending ${s.pending}` } : {}),
    ...(c.failure_reason ? { 'failure reason': c.failure_reason } : {}),
  };
}

/** The pre-flight of a campaign that starts (audience size against the portfolio's messaging limit, how long dispatch takes). */
function preflightRecord(p: CampaignDetail['preflight']): Record<string, unknown> {
  return {
    audience: p.audience_size,
    'messaging limit': p.messaging_tier === null ? 'no active business account'
      : p.tier_limit === null ? 'unlimited'
      : `${p.tier_limit} unique users a day, ${p.messaging_limit_available ?? 0} left now: ${p.within_tier ? 'within it' : `the rest wait until about ${p.messaging_limit_wait_until}`}`,
    ...(p.messages_per_second === null ? {} : { pace: `${p.messages_per_second} messages/s` }),
    ...(p.estimated_duration_seconds === null ? {} : { 'estimated duration': formatDuration(p.estimated_duration_seconds) }),
    ...Object.fromEntries(p.warnings.map((w, i) => [p.warnings.length === 1 ? 'warning' : `warning ${i + 1}`, w])),
  };
}
