import { lookup as dnsLookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';

/**
 * SSRF guard for webhook destinations. Tenants choose the URL, so without this a tenant could make
 * the service POST into our own network (cloud metadata, databases, admin ports). The address is
 * checked after resolution, at every attempt, and the connection is pinned to the address checked
 * (see webhooks.sender.ts), so DNS rebinding between check and connect does not help.
 */
// Two lists: one BlockList matches IPv4 addresses against IPv6 rules through the mapped form, so a
// single list holding ::/3 would refuse every IPv4 address.
const blockedV4 = new BlockList();
const blockedV6 = new BlockList();
// IPv4 special-purpose registry (RFC 6890 and successors).
for (const [net, prefix] of [
  ['0.0.0.0', 8],        // "this network"
  ['10.0.0.0', 8],       // RFC 1918
  ['100.64.0.0', 10],    // CGNAT (RFC 6598)
  ['127.0.0.0', 8],      // loopback
  ['169.254.0.0', 16],   // link-local, includes the cloud metadata address 169.254.169.254
  ['172.16.0.0', 12],    // RFC 1918
  ['192.0.0.0', 24],     // IETF protocol assignments
  ['192.0.2.0', 24],     // TEST-NET-1
  ['192.31.196.0', 24],  // AS112
  ['192.52.193.0', 24],  // AMT
  ['192.88.99.0', 24],   // 6to4 relay anycast (deprecated)
  ['192.168.0.0', 16],   // RFC 1918
  ['192.175.48.0', 24],  // AS112 direct delegation
  ['198.18.0.0', 15],    // benchmarking
  ['198.51.100.0', 24],  // TEST-NET-2
  ['203.0.113.0', 24],   // TEST-NET-3
  ['224.0.0.0', 4],      // multicast
  ['240.0.0.0', 4],      // reserved, includes broadcast 255.255.255.255
] as const) blockedV4.addSubnet(net, prefix, 'ipv4');
// IPv6: everything outside global unicast 2000::/3 is refused, plus the special blocks inside it.
for (const [net, prefix] of [
  ['::', 3],             // unspecified, loopback, IPv4-mapped (::ffff:0:0/96), IPv4-compatible, NAT64 64:ff9b::/96, discard 100::/64
  ['4000::', 2],         // unassigned
  ['8000::', 1],         // unassigned, ULA fc00::/7, link-local fe80::/10, site-local, multicast ff00::/8
  ['2001::', 23],        // IETF protocol assignments (Teredo 2001::/32, benchmarking, ORCHID)
  ['2001:db8::', 32],    // documentation
  ['2002::', 16],        // 6to4: embeds an arbitrary IPv4 address
  ['3fff::', 20],        // documentation (RFC 9637)
  ['5f00::', 16],        // SRv6 SIDs
] as const) blockedV6.addSubnet(net, prefix, 'ipv6');

/** True when a literal IP address is not a public unicast destination. */
export function isBlockedAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return blockedV4.check(address, 'ipv4');
  // Every IPv4-mapped or -compatible form falls in ::/3 and is refused whatever IPv4 address it carries.
  if (family === 6) return blockedV6.check(address.toLowerCase(), 'ipv6');
  return true; // not an IP address at all: refuse rather than guess
}

export class DestinationRefusedError extends Error {
  readonly code = 'ERR_DESTINATION_REFUSED';
}

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/** Strips the brackets of an IPv6 URL host. */
export function hostOf(url: URL): string {
  return url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
}

/**
 * Resolves `host` and returns the addresses to connect to. When private networks are not allowed,
 * any non-public address in the answer refuses the whole destination (a name that resolves to one
 * public and one private address is still a way in).
 */
export async function resolveDestination(host: string, allowPrivate: boolean): Promise<ResolvedAddress[]> {
  const literal = isIP(host);
  const addresses: ResolvedAddress[] = literal
    ? [{ address: host, family: literal as 4 | 6 }]
    : (await dnsLookup(host, { all: true, verbatim: true })).map((a) => ({ address: a.address, family: a.family as 4 | 6 }));
  if (addresses.length === 0) throw new Error(`${host} did not resolve to any address`);
  if (!allowPrivate) {
    const bad = addresses.find((a) => isBlockedAddress(a.address));
    if (bad) throw new DestinationRefusedError(`destination ${host} resolves to a non-public address (${bad.address})`);
  }
  return addresses;
}
