import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export interface ServerProcess {
  child: ChildProcess;
  output(): string;
  /** What the process wrote to stderr alone (the human lines; stdout carries the JSON log). */
  stderr(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  waitForOutput(pattern: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
}

/**
 * Runs `node --import tsx src/server.ts` with exactly `env` (plus PATH/HOME), as `npm start` would.
 * `entry` runs another program (the sandbox's `src/sandbox/main.ts`); `wrapper` goes before node
 * (`ip netns exec <ns>` runs it on another host of a drill's network).
 */
export function startServer(env: Record<string, string>, options: { entry?: string; wrapper?: string[] } = {}): ServerProcess {
  const [command, ...args] = [...(options.wrapper ?? []), process.execPath, '--import', 'tsx', options.entry ?? 'src/server.ts'];
  const child = spawn(command, args, {
    // Webhook delivery and campaign dispatch off unless asked for: a deliverer (a dispatcher) claims
    // every tenant's deliveries (campaigns) in the shared test database, with this process's
    // SECRETS_KEY and timings, which would disturb other test files.
    // SANDBOX_PORT 0: the in-process sandbox takes any free port (PORT+1 may belong to another test's process).
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', WEBHOOK_DELIVERY_ENABLED: 'false', CAMPAIGN_DISPATCH_ENABLED: 'false', SANDBOX_PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return watchProcess(child);
}

/** A spawned service process (stdout and stderr piped) as a ServerProcess: its output kept, its exit awaited. */
export function watchProcess(child: ChildProcess): ServerProcess {
  let out = '';
  let err = '';
  child.stdout!.on('data', (chunk) => { out += chunk; });
  child.stderr!.on('data', (chunk) => { out += chunk; err += chunk; });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  return {
    child,
    output: () => out,
    stderr: () => err,
    exited,
    async waitForOutput(pattern, timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const match = out.match(pattern);
        if (match) return match;
        if (child.exitCode !== null) throw new Error(`server exited (${child.exitCode}) before printing ${pattern}:\n${out}`);
        if (Date.now() > deadline) throw new Error(`server did not print ${pattern} in time:\n${out}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
  };
}

/** Polls GET url until it answers 200. */
export async function waitForHttp(url: string, server: ServerProcess, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const res = await fetch(url);
      if (res.status === 200) return;
    } catch { /* not listening yet */ }
    if (server.child.exitCode !== null) throw new Error(`server exited (${server.child.exitCode}):\n${server.output()}`);
    if (Date.now() > deadline) throw new Error(`${url} not ready in time:\n${server.output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export async function stopServer(server: ServerProcess | undefined) {
  if (server && server.child.exitCode === null && server.child.signalCode === null) {
    server.child.kill('SIGKILL');
    await server.exited;
  }
}
