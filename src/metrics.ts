import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { statementsIssued } from './db/statement-count.ts';
import { campaignRegistry } from './modules/campaigns/campaigns.metrics.ts';

/** Seconds; from a fast local call to the upstream and webhook timeouts (10 s). */
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

let processRegistry: Registry | undefined;

/** CPU, memory, event-loop lag and GC: their collectors are process-wide, so they are registered once per process. */
function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
  }
  return processRegistry;
}

export interface WebhookBacklog {
  due: number;
  oldestDueSeconds: number;
}

/** How long a scrape waits for a database read before reporting its gauges NaN. */
export const SCRAPE_READ_MS = 2000;

/**
 * The service's Prometheus metrics, served in the text format by `GET /admin/v1/metrics` and, with
 * METRICS_PORT, by `GET /metrics` in every role. Labels are bounded (route patterns, operation
 * names, outcome classes, statuses), never tenant ids or URLs; every series carries the process's
 * `role` (api, worker, all), since processes of every role report the shared queues.
 */
export class Metrics {
  readonly registry = new Registry();
  /** Taken at construction: CPU is reported from when its collector was registered. */
  private readonly processRegistry = processMetrics();

  constructor(private readonly options: { role?: string } = {}) {}

  readonly httpRequests = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP requests served, by method, route pattern and status code',
    labelNames: ['method', 'route', 'status_code'] as const,
    buckets: DURATION_BUCKETS,
    registers: [this.registry],
  });

  readonly upstreamRequests = new Histogram({
    name: 'upstream_request_duration_seconds',
    help: 'Calls to the WhatsApp Cloud API, by operation and result (http_2xx, http_4xx, http_5xx, timeout, network)',
    labelNames: ['operation', 'result'] as const,
    buckets: DURATION_BUCKETS,
    registers: [this.registry],
  });

  readonly webhookAttempts = new Histogram({
    name: 'webhook_attempt_duration_seconds',
    help: 'Webhook delivery attempts by this process, by result (success or the failure class)',
    labelNames: ['result'] as const,
    buckets: DURATION_BUCKETS,
    registers: [this.registry],
  });

  readonly uncountedRequests = new Counter({
    name: 'rate_limit_uncounted_requests_total',
    help: 'Public API requests allowed without counting because the rate counter (Redis) did not answer',
    registers: [this.registry],
  });

  readonly databaseStatements = new Counter({
    name: 'db_statements_total',
    help: 'Statements this process has sent to the database',
    registers: [this.registry],
    collect() {
      this.reset();
      this.inc(statementsIssued());
    },
  });

  /**
   * The shared delivery queue's health, read from the database at scrape time: every process
   * reports it, wherever the deliverers run.
   */
  watchWebhookBacklog(read: () => Promise<WebhookBacklog>): void {
    this.readBacklog = read;
    const backlogOfThisScrape = () => this.backlog ?? Promise.resolve(null);
    const gauge = (name: string, help: string, pick: (b: WebhookBacklog) => number) => new Gauge({
      name, help, registers: [this.registry],
      async collect() {
        const value = await backlogOfThisScrape();
        // Database unreachable: NaN (unknown), never a reassuring 0.
        this.set(value ? pick(value) : Number.NaN);
      },
    });
    gauge('webhook_deliveries_due', 'Webhook deliveries due now and not yet delivered (pending or retrying); NaN when the database does not answer', (b) => b.due);
    gauge('webhook_oldest_due_seconds', 'How long the oldest due webhook delivery has waited past its due time; NaN when the database does not answer', (b) => b.oldestDueSeconds);
  }

  /**
   * Recipients of running campaigns waiting on the dispatcher or the upstream, by status (pending,
   * sending, held, deferred, ...), read from the database at scrape time. A failed or slow read
   * reports NaN for the statuses of the last good read.
   */
  watchCampaignQueue(read: () => Promise<Map<string, number>>): void {
    let statuses = ['pending', 'sending'];
    new Gauge({
      name: 'campaign_recipients_queued',
      help: 'Recipients of running campaigns not yet settled, by status (sent, delivered, read, failed and skipped are not counted); NaN when the database does not answer',
      labelNames: ['status'] as const,
      registers: [this.registry],
      async collect() {
        const depth = await read().catch(() => null);
        this.reset();
        if (depth) statuses = [...depth.keys()];
        for (const status of statuses) this.set({ status }, depth ? depth.get(status)! : Number.NaN);
      },
    });
  }

  private readBacklog: (() => Promise<WebhookBacklog>) | null = null;
  /** The backlog read of the scrape in progress: both gauges share one query. */
  private backlog: Promise<WebhookBacklog | null> | null = null;

  async render(): Promise<{ contentType: string; body: string }> {
    this.backlog = this.readBacklog ? this.readBacklog().catch(() => null) : null;
    const merged = Registry.merge([this.processRegistry, this.registry, campaignRegistry]);
    if (this.options.role) merged.setDefaultLabels({ role: this.options.role });
    return { contentType: merged.contentType, body: await merged.metrics() };
  }
}
