import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { networkInterfaces } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, makeTempDir, removeTempDir } from './helpers/app.ts';
import { freePort } from './helpers/process.ts';

const ROOT = resolve(import.meta.dirname, '..');

interface Proc {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function run(command: string, args: string[], env: Record<string, string>): Proc {
  const child = spawn(command, args, {
    cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'],
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', WEBHOOK_DELIVERY_ENABLED: 'false', ...env },
  });
  let out = '';
  let err = '';
  child.stdout!.on('data', (chunk) => { out += chunk; });
  child.stderr!.on('data', (chunk) => { err += chunk; });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) => child.once('exit', (code, signal) => done({ code, signal })));
  return { child, stdout: () => out, stderr: () => err, exited };
}

async function waitForHealthz(base: string, proc: Proc, timeoutMs = 240_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if ((await fetch(`${base}/healthz`).then((r) => r.status, () => 0)) === 200) return;
    if (proc.child.exitCode !== null) throw new Error(`exited ${proc.child.exitCode}:\n${proc.stdout()}\n${proc.stderr()}`);
    if (Date.now() > deadline) throw new Error(`no /healthz in time:\n${proc.stdout()}\n${proc.stderr()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const refused = (url: string) => fetch(url).then(() => false, () => true);
const isAlive = (pid: number) => { try { process.kill(pid, 0); return true; } catch { return false; } };
/** The server's own pid, from its JSON log lines (npm's pid is the child's). */
const serverPid = (stdout: string) => Number(/"pid":(\d+)/.exec(stdout)?.[1]);
const nonLoopbackIPv4 = () => Object.values(networkInterfaces()).flat().find((a) => a && a.family === 'IPv4' && !a.internal)?.address;

function listenOn(port: number): Promise<Server> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once('error', fail);
    server.listen(port, '127.0.0.1', () => done(server));
  });
}

describe('the compiled package and its process', () => {
  const dirs: string[] = [];
  const tempDir = (prefix: string) => { const dir = makeTempDir(prefix); dirs.push(dir); return dir; };
  const running: Proc[] = [];
  beforeAll(() => {
    // What `npm start` runs first (the prestart step): builds dist/ when src/ is newer.
    const build = spawnSync(process.execPath, ['scripts/build.mjs', '--if-stale'], { cwd: ROOT, encoding: 'utf8' });
    if (build.status !== 0) throw new Error(`build failed:\n${build.stdout}\n${build.stderr}`);
  }, 300_000);
  afterAll(async () => {
    for (const proc of running) if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
    for (const dir of dirs) removeTempDir(dir);
  });

  it('`npm start` runs dist/, binds loopback by default, prints the banner on stderr, and stops gracefully on SIGTERM or SIGINT sent to npm', { timeout: 600_000 }, async () => {
    const port = await freePort();
    const env = { PORT: String(port), SANDBOX_PORT: String(await freePort()), DATA_DIR: tempDir('msvc-npm-'), LOG_LEVEL: 'info' };
    const base = `http://127.0.0.1:${port}`;

    for (const signal of ['SIGTERM', 'SIGINT'] as const) {
      // (On a working tree whose sources changed since the last build, prestart rebuilds first.)
      const npm = run('npm', ['start'], env);
      running.push(npm);
      await waitForHealthz(base, npm);
      const pid = serverPid(npm.stdout());
      expect(pid).toBeGreaterThan(0);
      expect(pid).not.toBe(npm.child.pid);
      // Compiled JavaScript, not tsx: one bundled file (the server's modules are not loaded one by one).
      expect(spawnSync('ps', ['-o', 'args=', '-p', String(pid)], { encoding: 'utf8' }).stdout.trim()).toBe('node dist/server.js');
      expect(readFileSync(join(ROOT, 'dist', 'server.js'), 'utf8')).not.toMatch(/["']\.\/(app|config|deps|worker|db\/database)\.js["']/);

      const lan = nonLoopbackIPv4();
      if (lan) expect(await refused(`http://${lan}:${port}/healthz`)).toBe(true);
      expect(npm.stdout()).toContain(`"msg":"listening on 127.0.0.1:${port}"`);
      // stdout: JSON log lines (and npm's own "> script" header); the human text is on stderr.
      const stdoutLines = npm.stdout().split('\n').filter((l) => l.trim() !== '' && !l.startsWith('> '));
      for (const line of stdoutLines) expect(() => JSON.parse(line), line).not.toThrow();
      if (signal === 'SIGTERM') {
        // The demo tenant is seeded once the listener is up, so the banner may follow /healthz.
        await eventually(async () => /Demo tenant created[\s\S]*API key:\s+svc_sk_live_/.test(npm.stderr()), 60_000);
        // The first start copied the build's migrated database template instead of initialising one.
        expect(npm.stdout()).not.toContain('applied migration');
      }

      npm.child.kill(signal);
      expect(await npm.exited).toEqual({ code: 0, signal: null });
      // npm returned only once the server had stopped: nothing is left serving.
      expect(isAlive(pid)).toBe(false);
      expect(await refused(`${base}/healthz`)).toBe(true);
      expect(npm.stdout()).toContain('shutting down: no new requests');
    }
  });

  it('a port already taken is one line naming the variable to change, not a stack trace', { timeout: 300_000 }, async () => {
    for (const variable of ['SANDBOX_PORT', 'PORT', 'METRICS_PORT'] as const) {
      const ports = { PORT: await freePort(), SANDBOX_PORT: await freePort(), METRICS_PORT: await freePort() };
      const taken = ports[variable];
      const blocker = await listenOn(taken);
      try {
        const proc = run(process.execPath, ['dist/server.js'], {
          PORT: String(ports.PORT), SANDBOX_PORT: String(ports.SANDBOX_PORT), METRICS_PORT: String(ports.METRICS_PORT), DATA_DIR: tempDir('msvc-port-'), LOG_LEVEL: 'warn',
        });
        running.push(proc);
        expect(await proc.exited).toEqual({ code: 1, signal: null });
        const lines = proc.stderr().trim().split('\n');
        expect(lines).toHaveLength(1);
        expect(lines[0]).toMatch(new RegExp(`^port ${taken} \\(${variable}, [^)]+\\) is already in use: stop what listens there or set ${variable} to a free port$`));
        expect(proc.stdout()).not.toMatch(/EADDRINUSE|\n\s+at /);
      } finally {
        await new Promise((r) => blocker.close(r));
      }
    }
  });

  it('HOST widens the embedded default', { timeout: 300_000 }, async () => {
    const lan = nonLoopbackIPv4();
    const port = await freePort();
    const proc = run(process.execPath, ['dist/server.js'], { HOST: '0.0.0.0', PORT: String(port), SANDBOX_PORT: String(await freePort()), DATA_DIR: tempDir('msvc-host-'), LOG_LEVEL: 'info' });
    running.push(proc);
    await waitForHealthz(`http://127.0.0.1:${port}`, proc);
    expect(proc.stdout()).toContain(`"msg":"listening on 0.0.0.0:${port}"`);
    if (lan) expect((await fetch(`http://${lan}:${port}/healthz`)).status).toBe(200);
    proc.child.kill('SIGTERM');
    expect(await proc.exited).toEqual({ code: 0, signal: null });
  });

  it('`import { verifyWebhookSignature } from "messaging-service"` works from plain node and from TypeScript in another project', { timeout: 120_000 }, async () => {
    const project = tempDir('msvc-consumer-');
    mkdirSync(join(project, 'node_modules'));
    symlinkSync(ROOT, join(project, 'node_modules', 'messaging-service'), 'dir');
    writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
    const timestamp = String(Math.floor(Date.now() / 1000));
    const body = '{"type":"contact.created"}';
    const signature = `sha256=${createHmac('sha256', 'whsec_test').update(`${timestamp}.${body}`).digest('hex')}`;
    writeFileSync(join(project, 'check.mjs'), `
      import { verifyWebhookSignature } from 'messaging-service';
      const headers = { 'X-Service-Timestamp': '${timestamp}', 'X-Service-Signature': '${signature}' };
      console.log(verifyWebhookSignature({ secret: 'whsec_test', headers, rawBody: '${body}' }), verifyWebhookSignature({ secret: 'whsec_other', headers, rawBody: '${body}' }));
    `);
    const node = spawnSync(process.execPath, ['check.mjs'], { cwd: project, encoding: 'utf8' });
    expect(node.stderr).toBe('');
    expect(node.stdout.trim()).toBe('true false');

    // The declarations: a typed call checks, a call missing `secret` does not.
    writeFileSync(join(project, 'check.ts'), `
      import { verifyWebhookSignature, type VerifyWebhookSignatureInput } from 'messaging-service';
      const input: VerifyWebhookSignatureInput = { secret: 'whsec_x', headers: {}, rawBody: new Uint8Array() };
      const ok: boolean = verifyWebhookSignature(input);
      // @ts-expect-error secret is required
      verifyWebhookSignature({ headers: {}, rawBody: '' });
      export { ok };
    `);
    writeFileSync(join(project, 'tsconfig.json'), JSON.stringify({ compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, noEmit: true, types: [] }, files: ['check.ts'] }));
    const tsc = spawnSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', project], { cwd: project, encoding: 'utf8' });
    expect(tsc.stdout + tsc.stderr).toBe('');
    expect(tsc.status).toBe(0);
  });
});
