import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { setFlagsFromString } from 'node:v8';
import { ConfigError, loadConfig, type Config } from './config.ts';
import { openDatabase } from './db/database.ts';
import { startMetricsServer, type MetricsServer } from './metrics-server.ts';
import type { Sandbox } from './sandbox/sandbox.ts';

// V8 lets the old generation grow to up to four times what the last full collection kept before it
// collects again. At a thousand sends a second, work that waits a second for its send slot is
// promoted and dies there: the service's RSS rose from 150 MB to 300 MB between collections. Half
// again what was kept (factor 1.5) held the peak to about 180 MB in the same benchmark, with no CPU
// cost that runs on a loaded machine could tell apart.
setFlagsFromString('--heap-growing-percent=50');

let config: Config;
try {
  config = loadConfig();
} catch (err) {
  if (err instanceof ConfigError) {
    console.error(`configuration error: ${err.message}`);
    process.exit(1);
  }
  throw err;
}

// The database opens first: the embedded one compiles its WebAssembly and reads its files while the
// rest of the modules load (they are imported below, not above, for that reason).
const database = openDatabase(config);
database.catch(() => {}); // awaited (and so reported) by createDeps below
const [{ buildApp }, { migrate }, { afterFirstConnection, DatabaseStartError }, { createDeps }, { createLogger }, { createSandbox }, { demoBanner, findDemoTenant, locationsBanner, restartBanner, seedDemoTenant }, { startWorkers }] = await Promise.all([
  import('./app.ts'), import('./db/migrate.ts'), import('./db/first-connection.ts'), import('./deps.ts'), import('./logger.ts'), import('./sandbox/sandbox.ts'), import('./seed.ts'), import('./worker.ts'),
]);
const logger = createLogger(config.logLevel);
// No real upstream configured: the built-in sandbox stands in, in this process. A worker-only
// process leaves it to the API process (or `npm run sandbox`) and uses SANDBOX_PORT.
const sandbox: Sandbox | null = config.upstreamBaseUrl || config.role === 'worker' ? null : await createSandbox({
  port: config.sandboxPort,
  host: config.sandboxHost,
  reviewMs: config.sandboxReviewMs,
  appSecret: config.upstreamAppSecret,
  callbackUrl: config.port ? `http://127.0.0.1:${config.port}/upstream/webhook` : null,
  logger: logger.child({ component: 'sandbox' }),
  stateFile: join(config.dataDir, 'sandbox-state.json'),
}).catch((err) => exitIfUnbindable(err, 'SANDBOX_PORT', config.sandboxPort, 'the built-in upstream sandbox; default PORT+1'));
const deps = await createDeps(config, logger, { upstreamBaseUrl: sandbox?.baseUrl, database });
const log = deps.logger;
// The embedded database is still starting in its thread: the app is built meanwhile, and the
// migrations (a check of the applied list, once migrated) run as soon as it is open. A database
// server is first waited for (DATABASE_START_TIMEOUT_MS) if it cannot be reached yet.
const migrated = afterFirstConnection(deps.database, {
  url: config.databaseUrl ?? '',
  timeoutMs: config.databaseStartTimeoutMs,
  onWaiting: (msg) => log.warn(msg),
}, () => migrate(deps.database, (msg) => log.info(msg)));
migrated.catch(() => {}); // awaited (and so reported) below

// Installed before the listener opens: a signal that comes as soon as /healthz answers (while the
// rest of the start runs) still closes the database and exits 0 instead of killing the process.
let app: FastifyInstance | null = null;
let workers: ReturnType<typeof startWorkers> | null = null;
let metricsServer: MetricsServer | null = null;
let shuttingDown = false;
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));

app = config.role === 'worker' ? null : await buildApp(deps);
try {
  await migrated;
} catch (err) {
  // A signal while the database was awaited: shutdown() closed it and ends the process.
  if (shuttingDown) await new Promise(() => {});
  if (!(err instanceof DatabaseStartError)) throw err;
  // One line naming DATABASE_URL, as for a port that cannot be bound.
  console.error(err.message);
  await sandbox?.close();
  await deps.close();
  process.exit(1);
}
if (app) {
  try {
    await app.listen({ port: config.port, host: config.host });
  } catch (err) {
    await sandbox?.close();
    await deps.close();
    exitIfUnbindable(err, 'PORT', config.port, 'the API');
  }
  log.info({ role: config.role, database: deps.database.kind, redis: config.redisUrl ? 'redis' : 'memory' }, `listening on ${config.host}:${config.port}`);
}
if (config.metricsPort !== undefined && !shuttingDown) {
  try {
    metricsServer = await startMetricsServer(deps.metrics, { port: config.metricsPort, host: config.host });
  } catch (err) {
    await app?.close();
    await sandbox?.close();
    await deps.close();
    exitIfUnbindable(err, 'METRICS_PORT', config.metricsPort, 'the Prometheus metrics');
  }
  log.info({ role: config.role }, `metrics on http://${config.host}:${metricsServer.port}/metrics`);
}
if (sandbox) {
  const address = app?.server.address();
  const port = address && typeof address === 'object' ? address.port : config.port;
  sandbox.state.config.callback_url = `http://127.0.0.1:${port}/upstream/webhook`;
  log.info({ baseUrl: sandbox.baseUrl }, 'upstream sandbox running in process (UPSTREAM_BASE_URL is unset)');
}
// Seeded once the listener is up, so a first start that cannot bind leaves the next one to print the key.
const seeded = config.seedDemo && !shuttingDown ? await unlessStopping(seedDemoTenant(deps)) : null;
// Not after a signal: shutdown() has stopped (or is stopping) whatever ran, and must not race new loops.
if (!shuttingDown) workers = config.role === 'api' ? null : startWorkers(deps);
if (workers) log.info({ role: config.role }, 'workers started');

// Plain text for the person at the terminal, on stderr: stdout carries only the JSON log lines.
const baseUrl = `http://${config.host === '0.0.0.0' || config.host === '::' ? '127.0.0.1' : config.host}:${config.port}`;
if (seeded) console.error(demoBanner(baseUrl, config.adminToken, seeded));
const demoTenant = config.seedDemo && !seeded && app && !shuttingDown ? await unlessStopping(findDemoTenant(deps)) : null;
if (demoTenant) console.error(restartBanner(baseUrl, demoTenant, process.env.ADMIN_TOKEN ? { env: true } : { dataDir: config.dataDir }));
if (seeded || demoTenant) console.error(locationsBanner(baseUrl, { docs: Boolean(app) && config.openapiEnabled, sandboxUrl: sandbox?.url ?? (config.upstreamBaseUrl ? null : `http://127.0.0.1:${config.sandboxPort}`), upstreamBaseUrl: config.upstreamBaseUrl ?? null }));

/** A start-up step that a signal overtook fails as the database closes: shutdown() ends the process. */
function unlessStopping<T>(step: Promise<T>): Promise<T | null> {
  return step.catch((err) => {
    if (shuttingDown) return null;
    throw err;
  });
}

/** A listener that cannot bind ends the process with one line naming the variable to change. */
function exitIfUnbindable(err: unknown, variable: string, port: number, what: string): never {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'EADDRINUSE') console.error(`port ${port} (${variable}, ${what}) is already in use: stop what listens there or set ${variable} to a free port`);
  else if (code === 'EACCES') console.error(`port ${port} (${variable}, ${what}) may not be bound by this user: set ${variable} to a port above 1023`);
  else if (code === 'EADDRNOTAVAIL') console.error(`${variable === 'SANDBOX_PORT' ? 'SANDBOX_HOST' : 'HOST'} is not an address of this machine: ${(err as Error).message}`);
  else throw err;
  process.exit(1);
}

async function shutdown(signal: string) {
  if (shuttingDown) return;
  shuttingDown = true;
  log.info({ signal }, 'shutting down: no new requests, finishing in-flight work');
  const force = setTimeout(() => {
    log.error('shutdown took too long; exiting');
    process.exit(1);
  }, 25_000);
  force.unref();
  // app.close() stops accepting and waits for in-flight requests, but a keep-alive connection whose
  // request finishes after close() began would stay open until its keep-alive timeout (and the 25 s
  // guard above would exit 1): close connections as soon as they become idle.
  const listening = app;
  const idleSweep = listening ? setInterval(() => listening.server.closeIdleConnections(), 100) : null;
  await listening?.close();
  if (idleSweep) clearInterval(idleSweep);
  await workers?.stop();
  // Scraped until the workers have drained.
  await metricsServer?.close();
  await sandbox?.close();
  await deps.close();
  process.exit(0);
}
