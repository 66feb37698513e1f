import { spawn, type ChildProcess } from 'node:child_process';

/** Whether a redis-server binary is installed (tests that start their own skip without it). */
export const hasRedisServer = await new Promise<boolean>((resolve) => {
  const probe = spawn('redis-server', ['--version']);
  probe.once('error', () => resolve(false));
  probe.once('exit', (code) => resolve(code === 0));
});

/** A private redis-server a test may stop, freeze or kill; the shared one stays untouched. `bind`: the address(es) it listens on. */
export async function startRedis(port: number, bind = '127.0.0.1'): Promise<ChildProcess> {
  const child = spawn('redis-server', ['--port', String(port), '--bind', bind, '--protected-mode', 'no', '--save', '', '--appendonly', 'no', '--daemonize', 'no'], { stdio: ['ignore', 'pipe', 'pipe'] });
  await new Promise<void>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`redis-server did not start: ${out}`)), 5000);
    child.stdout!.on('data', (chunk) => {
      out += chunk;
      if (/Ready to accept connections/i.test(out)) { clearTimeout(timer); resolve(); }
    });
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`redis-server exited with ${code}: ${out}`)); });
  });
  return child;
}

export async function stopRedis(child: ChildProcess | undefined) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
}
