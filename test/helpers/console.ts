import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { makeTempDir, removeTempDir } from './app.ts';
import { freePort, stopServer, waitForHttp, watchProcess, type ServerProcess } from './process.ts';

// What the console's browser tests share (test/console.e2e.test.ts in Chromium, test/console.firefox.test.ts
// in Firefox): the built service started as `npm start` runs it, and axe-core run in the page.
export const ROOT = resolve(import.meta.dirname, '..', '..');
export const SHOTS = join(ROOT, 'test-results', 'console');
const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

/** `node dist/server.js`, as `npm start` runs it, with exactly `env` (plus PATH and HOME). */
function startBuiltServer(env: Record<string, string>): ServerProcess {
  return watchProcess(spawn(process.execPath, ['dist/server.js'], { cwd: ROOT, env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', ...env }, stdio: ['ignore', 'pipe', 'pipe'] }));
}

export interface ConsoleServer {
  server: ServerProcess;
  /** http://127.0.0.1:PORT */
  base: string;
  /** The in-process sandbox's control API (docs/sandbox.md). */
  sandbox: string;
  /** The first-start tenant, its API key and the operator token, from the start banner. */
  tenant: string;
  key: string;
  admin: string;
  stop(): Promise<void>;
  /** A call to the public API with `bearer` (the tenant's key unless given). */
  api(method: string, path: string, body?: unknown, bearer?: string): Promise<{ status: number; body: any }>;
}

/**
 * The built service on the embedded default in a fresh data directory, with its first-start tenant. The
 * tests click through pages faster than a person, so the tenant's minute limit is lifted (a 429 is
 * tested by interception); the sandbox approves a submitted template after 50 ms.
 */
export async function startConsoleServer(): Promise<ConsoleServer> {
  const dataDir = makeTempDir('msvc-console-');
  const [port, sandboxPort] = [await freePort(), await freePort()];
  const base = `http://127.0.0.1:${port}`;
  const server = startBuiltServer({ DATA_DIR: dataDir, PORT: String(port), SANDBOX_PORT: String(sandboxPort), SANDBOX_REVIEW_MS: '50', RATE_LIMIT_PER_MINUTE: '100000', WEBHOOK_DELIVERY_ENABLED: 'false', WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', LOG_LEVEL: 'warn' });
  const stop = async () => { await stopServer(server); removeTempDir(dataDir); };
  try {
    await waitForHttp(`${base}/healthz`, server, 60_000);
    const banner = await server.waitForOutput(/tenant id:\s+(\S+)\n\s+API key:\s+(\S+)\n\s+admin token:\s+(\S+)/, 60_000);
    const [tenant, key, admin] = [banner[1], banner[2], banner[3]];
    const api = async (method: string, path: string, body?: unknown, bearer = key) => {
      const res = await fetch(`${base}/api/v1/public${path}`, {
        method, headers: { authorization: `Bearer ${bearer}`, ...(body ? { 'content-type': 'application/json' } : {}) }, body: body ? JSON.stringify(body) : undefined,
      });
      return { status: res.status, body: await res.json() as any };
    };
    return { server, base, sandbox: `http://127.0.0.1:${sandboxPort}/__sandbox`, tenant, key, admin, stop, api };
  } catch (e) {
    await stop();
    throw e;
  }
}

/**
 * Axe-core on the page as it is: its serious and critical violations, one line each. Takes a
 * playwright-core or a puppeteer-core page (both evaluate a script given as a string).
 */
export async function seriousViolations(page: { evaluate(script: string): Promise<unknown> }): Promise<string[]> {
  if (!await page.evaluate('typeof axe !== "undefined"')) await page.evaluate(AXE);
  return await page.evaluate(`axe.run(document, { resultTypes: ['violations'] }).then((result) => result.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => v.id + ': ' + v.help + ' (' + v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join('; ') + ')'))`) as string[];
}
