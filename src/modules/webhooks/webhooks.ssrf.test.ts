import { describe, expect, it } from 'vitest';
import { guardedLookup } from './webhooks.sender.ts';
import { DestinationRefusedError, isBlockedAddress, resolveDestination } from './webhooks.ssrf.ts';

describe('SSRF guard', () => {
  it.each([
    '127.0.0.1', '127.255.0.9', '10.0.0.1', '172.16.0.1', '172.31.255.254', '192.168.1.1', '169.254.169.254', '169.254.0.1',
    '100.64.0.1', '100.127.255.255', '0.0.0.0', '224.0.0.1', '239.255.255.250', '255.255.255.255', '240.0.0.1', '192.0.2.1',
    '198.18.0.1', '198.51.100.7', '203.0.113.9',
    '::', '::1', '::ffff:127.0.0.1', '::ffff:10.0.0.1', '::ffff:8.8.8.8', '::ffff:169.254.169.254', '64:ff9b::a00:1', 'fc00::1', 'fd12:3456::1',
    'fe80::1', 'ff02::1', '2001:db8::1', '2002:c0a8:101::1', '2001::1', 'not-an-ip',
  ])('refuses %s', (address) => {
    expect(isBlockedAddress(address)).toBe(true);
  });

  it.each(['8.8.8.8', '1.1.1.1', '93.184.215.14', '172.32.0.1', '100.128.0.1', '2606:4700:4700::1111', '2a00:1450:4001::200e'])('allows public %s', (address) => {
    expect(isBlockedAddress(address)).toBe(false);
  });

  it('refuses literal and resolved private destinations unless private networks are allowed', async () => {
    await expect(resolveDestination('169.254.169.254', false)).rejects.toBeInstanceOf(DestinationRefusedError);
    await expect(resolveDestination('::ffff:127.0.0.1', false)).rejects.toBeInstanceOf(DestinationRefusedError);
    await expect(resolveDestination('localhost', false)).rejects.toBeInstanceOf(DestinationRefusedError);
    await expect(resolveDestination('127.0.0.1', true)).resolves.toEqual([{ address: '127.0.0.1', family: 4 }]);
    await expect(resolveDestination('93.184.215.14', false)).resolves.toEqual([{ address: '93.184.215.14', family: 4 }]);
  });
});

describe('connection pinning (the Agent lookup)', () => {
  const lookup = (host: string, options: { all?: boolean; family?: number }) => new Promise<{ err: Error | null; address: unknown }>((resolve) => {
    guardedLookup(host, options, (err, address) => resolve({ err, address }));
  });

  it('refuses a host that resolves to a private address at connect time', async () => {
    const { err } = await lookup('localhost', { all: true });
    expect(err).toBeInstanceOf(DestinationRefusedError);
  });

  it('returns exactly the checked public address', async () => {
    expect(await lookup('93.184.215.14', { all: true })).toEqual({ err: null, address: [{ address: '93.184.215.14', family: 4 }] });
    expect(await lookup('93.184.215.14', {})).toEqual({ err: null, address: '93.184.215.14' });
  });
});
