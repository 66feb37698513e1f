import { createSandbox } from '../src/sandbox/sandbox.ts';

/**
 * The sandbox in a process of its own for benchmarks, as Meta is a system of its own: its event
 * loop (sends, their logging, signed callbacks) shares nothing with the load generator's.
 */
const env = process.env;
const sandbox = await createSandbox({
  port: Number(env.SANDBOX_PORT),
  appSecret: env.UPSTREAM_APP_SECRET!,
  reviewMs: 50,
  callbackUrl: env.SANDBOX_CALLBACK_URL!,
  sendsLogCapacity: Number(env.SANDBOX_SENDS_LOG_CAPACITY ?? 200_000),
});
process.on('SIGTERM', () => void sandbox.close().then(() => process.exit(0)));
