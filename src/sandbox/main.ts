import { join } from 'node:path';
import { loadConfig } from '../config.ts';
import { createLogger } from '../logger.ts';
import { createSandbox } from './sandbox.ts';

/** `npm run sandbox`: the WhatsApp Cloud API stand-in on its own, for a service started with UPSTREAM_BASE_URL. */
const config = loadConfig();
const logger = createLogger(config.logLevel).child({ component: 'sandbox' });
const sandbox = await createSandbox({
  port: config.sandboxPort,
  host: config.sandboxHost,
  reviewMs: config.sandboxReviewMs,
  appSecret: config.upstreamAppSecret,
  callbackUrl: config.sandboxCallbackUrl ?? `http://127.0.0.1:${config.port}/upstream/webhook`,
  logger,
  stateFile: join(config.dataDir, 'sandbox-state.json'),
});
logger.info({ baseUrl: sandbox.baseUrl, callbackUrl: sandbox.state.config.callback_url }, `sandbox listening; set UPSTREAM_BASE_URL=${sandbox.baseUrl}`);

async function shutdown() {
  setTimeout(() => process.exit(1), 5000).unref();
  await sandbox.close();
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown());
process.on('SIGINT', () => void shutdown());
