import { setTimeout as sleep } from 'node:timers/promises';
import type { Command } from 'commander';
import { requireApiKey } from '../config.ts';
import { Api, PUBLIC_PREFIX } from '../http.ts';
import { integerAtLeast, positiveInt, type Runner } from './shared.ts';

interface Delivery {
  id: string; webhook_endpoint_id: string; event_id: string; event_type: string; request_url: string; status: string;
  attempt_number: number; response_status_code: number | null; response_time_ms: number | null; error_message: string | null;
  next_retry_at: string | null; created_at: string; completed_at: string | null;
}

/** The page size of one poll: a busier log than this per poll period shows only its newest rows. */
const PAGE = 100;

export function registerDeliveryCommands(program: Command, run: Runner): void {
  const deliveries = program.command('deliveries').description('the webhook delivery log of the tenant of the API key (public API)');
  deliveries.command('tail').description('follow the delivery log: a line for every new delivery and every change of one (attempt, status), until Ctrl-C')
    .option('--endpoint <id>', 'only this endpoint\'s deliveries')
    .option('--status <status>', 'only pending, success, failed, retrying or abandoned')
    .option('--last <n>', 'deliveries shown from before the start', integerAtLeast(0), 10)
    .option('--interval <ms>', 'poll period (each poll is one request of the minute budget)', positiveInt, 2000)
    .action(run(async (config, opts: { endpoint?: string; status?: string; last: number; interval: number }) => {
      const api = new Api(config.url, PUBLIC_PREFIX, requireApiKey(config));
      const path = opts.endpoint ? `/webhooks/${encodeURIComponent(opts.endpoint)}/deliveries` : '/webhooks/deliveries';
      const seen = new Map<string, string>();
      let stop = false;
      const onSignal = () => { stop = true; };
      process.on('SIGINT', onSignal);
      process.on('SIGTERM', onSignal);
      const print = (d: Delivery) => process.stdout.write(config.json ? `${JSON.stringify(d)}\n` : `${[
        d.created_at, d.status.padEnd(9), d.event_type.padEnd(27), `attempt ${d.attempt_number}`,
        d.response_status_code === null ? '-' : `HTTP ${d.response_status_code}`,
        d.response_time_ms === null ? '' : `${d.response_time_ms} ms`, d.id, d.error_message ?? '',
      ].join('  ').trimEnd()}\n`);
      try {
        for (let first = true; !stop; first = false) {
          const page = await api.call<{ data: Delivery[] }>('GET', path, { query: { status: opts.status, limit: PAGE, page: 1 }, retryServerErrors: true });
          // Newest first from the service; printed oldest first, as a log reads.
          const fresh = page.data.filter((d) => seen.get(d.id) !== `${d.status}/${d.attempt_number}`).reverse();
          fresh.forEach((d, i) => {
            seen.set(d.id, `${d.status}/${d.attempt_number}`);
            if (!first || i >= fresh.length - opts.last) print(d);
          });
          const until = Date.now() + opts.interval;
          while (!stop && Date.now() < until) await sleep(Math.min(100, until - Date.now()));
        }
      } finally {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
        await api.close();
      }
    }));
}
