import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';

/**
 * Hosts on a real network for drills: Linux network namespaces, each joined to a bridge in the
 * test's own namespace by a veth pair, with `tc netem` latency where the kernel has it. Needs root
 * and iproute2 (`ip`, `tc`). Names carry the creating process's pid, so a run that crashed leaves
 * nothing the next run trips over, and the next run removes it (`sweepStale`).
 */

const PREFIX = 'msvc-drill';

/** iproute2's `ip` by its full path: `ip netns exec` is spawned with the service's own PATH. */
const IP = spawnSync('sh', ['-c', 'command -v ip'], { encoding: 'utf8' }).stdout?.trim() || 'ip';

function run(args: string[], command = IP): string {
  return execFileSync(command, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function tryRun(args: string[], command = IP): { ok: boolean; output: string } {
  const result = spawnSync(command, args, { encoding: 'utf8' });
  if (result.error) return { ok: false, output: result.error.message };
  return { ok: result.status === 0, output: `${result.stdout}${result.stderr}`.trim() };
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
};

export interface NetnsSupport {
  /** Namespaces, veth pairs and a bridge can be made; else `reason` says why not. */
  namespaces: boolean;
  /** `tc netem` works in a namespace; else `netemReason` says why not. */
  netem: boolean;
  reason?: string;
  netemReason?: string;
}

/** Probes (as the drill will use them) what this machine offers: a throwaway namespace, then netem on its loopback. */
export function probeNetns(): NetnsSupport {
  if (process.platform !== 'linux') return { namespaces: false, netem: false, reason: `not Linux (${process.platform})` };
  if (process.getuid?.() !== 0) return { namespaces: false, netem: false, reason: 'not root (network namespaces need CAP_NET_ADMIN)' };
  const version = tryRun(['-V']);
  if (!version.ok) return { namespaces: false, netem: false, reason: `no iproute2 \`ip\` (${version.output})` };
  sweepStale();
  const name = `${PREFIX}-${process.pid}-probe${randomBytes(2).toString('hex')}`;
  const made = tryRun(['netns', 'add', name]);
  if (!made.ok) return { namespaces: false, netem: false, reason: `ip netns add failed: ${made.output}` };
  try {
    const steps = [['-n', name, 'link', 'set', 'lo', 'up'], ['-n', name, 'link', 'add', 'pa', 'type', 'veth', 'peer', 'name', 'pb'], ['-n', name, 'link', 'add', 'pbr', 'type', 'bridge']];
    for (const step of steps) {
      const done = tryRun(step);
      if (!done.ok) return { namespaces: false, netem: false, reason: `ip ${step.slice(2).join(' ')} failed: ${done.output}` };
    }
    const netem = tryRun(['-n', name, 'qdisc', 'add', 'dev', 'lo', 'root', 'netem', 'delay', '1ms'], 'tc');
    return netem.ok ? { namespaces: true, netem: true } : { namespaces: true, netem: false, netemReason: `tc netem unavailable: ${netem.output || 'tc failed'}` };
  } finally {
    tryRun(['netns', 'delete', name]);
  }
}

/** Removes namespaces and bridges that runs no longer alive left behind (a crash, a SIGKILLed vitest). */
export function sweepStale(): void {
  for (const line of tryRun(['netns', 'list']).output.split('\n')) {
    const match = new RegExp(`^(${PREFIX}-(\\d+)-\\S+)`).exec(line);
    if (!match || alive(Number(match[2]))) continue;
    killNamespaceProcesses(match[1]);
    tryRun(['netns', 'delete', match[1]]);
  }
  const links = tryRun(['-j', '-d', 'link', 'show', 'type', 'bridge']);
  if (!links.ok) return;
  for (const link of JSON.parse(links.output || '[]') as { ifname: string; ifalias?: string }[]) {
    const match = new RegExp(`^${PREFIX} pid=(\\d+)$`).exec(link.ifalias ?? '');
    if (match && !alive(Number(match[1]))) tryRun(['link', 'delete', link.ifname]);
  }
}

function killNamespaceProcesses(ns: string): void {
  for (const pid of tryRun(['netns', 'pids', ns]).output.split(/\s+/).filter(Boolean).map(Number)) {
    try { process.kill(pid, 'SIGKILL'); } catch { /* gone already */ }
  }
}

export interface NetnsHost {
  name: string;
  /** The namespace (for `ip netns exec`). */
  ns: string;
  address: string;
  /** The veth end in the test's namespace (on the bridge): set down to cut this host off. */
  hostLink: string;
}

export interface DrillNetwork {
  /** The test's own address on the bridge: servers the hosts reach listen here. */
  hubAddress: string;
  cidr: string;
  hosts: Map<string, NetnsHost>;
  /** What netem does on each link, or why there is none. */
  netem: string;
  /** The command prefix that runs a program inside a host's namespace. */
  exec(host: string): string[];
  cut(host: string): void;
  restore(host: string): void;
  /** Kills what still runs in the namespaces, deletes them (and with them their veth ends), then the bridge. */
  destroy(): void;
}

/**
 * A bridge in the test's namespace with `hubAddress`, and one namespace per host name joined to it
 * by a veth pair, each with its own address on one /24. With `netem`, every link delays both ways
 * by `delayMs` ± `jitterMs`.
 */
export function createDrillNetwork(hostNames: string[], options: { netem: boolean; netemReason?: string; delayMs?: number; jitterMs?: number }): DrillNetwork {
  const run4 = randomBytes(2).toString('hex');
  const bridge = `msd${run4}br`;
  const subnet = freeSubnet();
  const hosts = new Map<string, NetnsHost>();
  const delay = `${options.delayMs ?? 2}ms`;
  const jitter = `${options.jitterMs ?? 1}ms`;
  const network: DrillNetwork = {
    hubAddress: `${subnet}.1`,
    cidr: `${subnet}.0/24`,
    hosts,
    netem: options.netem ? `netem delay ${delay} ${jitter} each way on every link` : `no netem (${options.netemReason ?? 'not offered'}): links without added latency`,
    exec: (host) => [IP, 'netns', 'exec', hosts.get(host)!.ns],
    cut: (host) => { run(['link', 'set', hosts.get(host)!.hostLink, 'down']); },
    restore: (host) => { run(['link', 'set', hosts.get(host)!.hostLink, 'up']); },
    destroy() {
      for (const host of hosts.values()) killNamespaceProcesses(host.ns);
      for (const host of hosts.values()) {
        tryRun(['netns', 'delete', host.ns]);
        tryRun(['link', 'delete', host.hostLink]);
      }
      tryRun(['link', 'delete', bridge]);
    },
  };
  try {
    run(['link', 'add', bridge, 'type', 'bridge']);
    run(['link', 'set', bridge, 'alias', `${PREFIX} pid=${process.pid}`]);
    run(['addr', 'add', `${network.hubAddress}/24`, 'dev', bridge]);
    run(['link', 'set', bridge, 'up']);
    hostNames.forEach((name, i) => {
      const host: NetnsHost = { name, ns: `${PREFIX}-${process.pid}-${run4}-${name}`, address: `${subnet}.${10 + i}`, hostLink: `msd${run4}h${i}` };
      const inner = `msd${run4}n${i}`;
      run(['netns', 'add', host.ns]);
      hosts.set(name, host);
      run(['link', 'add', host.hostLink, 'type', 'veth', 'peer', 'name', inner]);
      run(['link', 'set', inner, 'netns', host.ns]);
      run(['link', 'set', host.hostLink, 'master', bridge]);
      run(['link', 'set', host.hostLink, 'up']);
      run(['-n', host.ns, 'link', 'set', 'lo', 'up']);
      run(['-n', host.ns, 'addr', 'add', `${host.address}/24`, 'dev', inner]);
      run(['-n', host.ns, 'link', 'set', inner, 'up']);
      if (options.netem) {
        run(['qdisc', 'add', 'dev', host.hostLink, 'root', 'netem', 'delay', delay, jitter], 'tc');
        run(['-n', host.ns, 'qdisc', 'add', 'dev', inner, 'root', 'netem', 'delay', delay, jitter], 'tc');
      }
    });
  } catch (err) {
    network.destroy();
    throw err;
  }
  return network;
}

/** A 10.x.y.0/24 no interface of this namespace uses (the bridge's routes must not shadow another). */
function freeSubnet(): string {
  const used = tryRun(['-4', '-o', 'addr', 'show']).output;
  for (;;) {
    const subnet = `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 250)}`;
    if (!used.includes(` ${subnet}.`)) return subnet;
  }
}
