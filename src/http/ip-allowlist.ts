import { BlockList, isIPv4, isIPv6 } from 'node:net';

const MAPPED_V4 = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i;

/** ::ffff:10.0.0.1 (an IPv4 client on a dual-stack socket) is the IPv4 address 10.0.0.1. */
export function normaliseIp(ip: string): string {
  const mapped = MAPPED_V4.exec(ip);
  return mapped ? mapped[1] : ip;
}

/** Parses "1.2.3.4", "10.0.0.0/8", "2001:db8::1", "2001:db8::/32"; returns null for anything else. */
export function parseAllowlistEntry(entry: string): { address: string; prefix: number; family: 'ipv4' | 'ipv6' } | null {
  const [rawAddress, rawPrefix, extra] = entry.trim().split('/');
  if (extra !== undefined || !rawAddress) return null;
  const address = normaliseIp(rawAddress);
  const family = isIPv4(address) ? 'ipv4' : isIPv6(address) ? 'ipv6' : null;
  if (!family) return null;
  const max = family === 'ipv4' ? 32 : 128;
  const prefix = rawPrefix === undefined ? max : Number(rawPrefix);
  if (!/^\d+$/.test(rawPrefix ?? String(max)) || prefix > max) return null;
  return { address, prefix, family };
}

export function buildAllowlist(entries: string[]): BlockList | null {
  if (entries.length === 0) return null;
  const list = new BlockList();
  for (const entry of entries) {
    const parsed = parseAllowlistEntry(entry);
    if (parsed) list.addSubnet(parsed.address, parsed.prefix, parsed.family);
  }
  return list;
}

export function ipAllowed(list: BlockList | null, ip: string): boolean {
  if (!list) return true;
  const address = normaliseIp(ip);
  return list.check(address, isIPv4(address) ? 'ipv4' : 'ipv6');
}
