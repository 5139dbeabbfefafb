import { isIPv4 } from 'node:net';
import type { ExecutionContext } from '@nestjs/common';
import fc from 'fast-check';
import type { Rule } from '../../../lib/algorithms/algorithm.types.js';
import type { KeySource } from '../../../lib/policy/policy.types.js';
import { bucketKey } from '../../../lib/keys/bucket-key.js';
import { type LimitedRequest, resolveIdentity } from '../../../lib/keys/identity.js';
import { isDottedQuad, normalizeIp } from '../../../lib/keys/ip.js';
import { MemoryStore } from '../../../lib/stores/memory/memory.store.js';

describe('normalizeIp', () => {
  it.each([
    ['1.2.3.4', '1.2.3.4'],
    ['::ffff:1.2.3.4', '1.2.3.4'],
    ['::FFFF:10.0.0.1', '10.0.0.1'],
    ['::ffff:0102:0304', '1.2.3.4'],
    ['2001:db8:1:2:3:4:5:6', '2001:db8:1:2::/64'],
    ['2001:db8:1:2:ffff:ffff:ffff:ffff', '2001:db8:1:2::/64'],
    ['2001:db8::1', '2001:db8:0:0::/64'],
    ['2001:DB8:0:0:1::', '2001:db8:0:0::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
    ['::1', '0:0:0:0::/64'],
    ['64:ff9b::1.2.3.4', '64:ff9b:0:0::/64'],
  ])('%s is keyed as %s', (ip, expected) => {
    expect(normalizeIp(ip)).toBe(expected);
  });

  it.each([undefined, null, '', 'unknown', '1.2.3', '1.2.3.4.5', '::ffff:999.1.1.1', 'x'.repeat(100), 42])(
    'finds no address in %p',
    (value) => {
      expect(normalizeIp(value)).toBeUndefined();
    },
  );

  it('puts a whole /64 in one bucket and separate /64s in separate ones', () => {
    const same = new Set(
      Array.from({ length: 1000 }, (_, i) => normalizeIp(`2001:db8:aa:bb:${i.toString(16)}::${i.toString(16)}`)),
    );
    expect(same.size).toBe(1);
    const apart = new Set(Array.from({ length: 1000 }, (_, i) => normalizeIp(`2001:db8:aa:${i.toString(16)}::1`)));
    expect(apart.size).toBe(1000);
  });
});

describe('normalizeIp with an ipv6Subnet', () => {
  it.each([
    [32, '2001:db8:0:0::/32'],
    [48, '2001:db8:1234:0::/48'],
    [56, '2001:db8:1234:5600::/56'],
    [60, '2001:db8:1234:5670::/60'],
    [64, '2001:db8:1234:5678::/64'],
  ])('/%i keeps only those leading bits', (subnet, expected) => {
    expect(normalizeIp('2001:db8:1234:5678:9abc::1', subnet)).toBe(expected);
  });

  it('leaves IPv4 and IPv4-mapped addresses whole', () => {
    expect(normalizeIp('1.2.3.4', 32)).toBe('1.2.3.4');
    expect(normalizeIp('::ffff:1.2.3.4', 48)).toBe('1.2.3.4');
  });
});

describe('IP buckets, from req.ip to the store', () => {
  const context = {} as ExecutionContext;
  const options = { apiKeyHeader: 'x-api-key', ipv6Subnet: 64, timeout: 100, failMode: 'open' as const };
  // no key function here: nothing is ever awaited
  const identityOf = (sources: KeySource[], request: LimitedRequest, keyOptions = options) =>
    resolveIdentity(sources, request, context, keyOptions) as string;
  const rule: Rule = { algorithm: 'token_bucket', rps: 0.001, burst: 5 };
  const keyOf = (ip: string | undefined, keyOptions = options) =>
    bucketKey('rl:', 'per-ip', 'token_bucket', identityOf(['ip'], { ip, headers: {} }, keyOptions));
  /** Sends one request per address through a store; returns how many were admitted. */
  const admitted = (ips: readonly (string | undefined)[]) => {
    const store = new MemoryStore({ clock: () => 1_000 });
    return ips.filter((ip) => store.decideSync([{ key: keyOf(ip), policy: 'per-ip', rule, cost: 1 }], true)[0].allowed)
      .length;
  };

  it('puts 10,000 addresses of one /64 in one bucket', () => {
    const ips = Array.from(
      { length: 10_000 },
      (_, i) => `2001:db8:aa:bb:${(i * 7919).toString(16).slice(-4)}:${i.toString(16)}::${(i % 65536).toString(16)}`,
    );
    expect(new Set(ips).size).toBe(10_000);
    expect(new Set(ips.map((ip) => keyOf(ip))).size).toBe(1);
    expect(admitted(ips)).toBe(5);
  });

  it('with ipv6Subnet 48, puts every /64 of a /48 in one bucket', () => {
    const ips = Array.from({ length: 1_000 }, (_, i) => `2001:db8:aa:${i.toString(16)}::1`);
    expect(new Set(ips.map((ip) => keyOf(ip, { ...options, ipv6Subnet: 48 }))).size).toBe(1);
    expect(new Set(ips.map((ip) => keyOf(ip))).size).toBe(1_000);
  });

  it('keys ::ffff:1.2.3.4 and 1.2.3.4 as one client', () => {
    expect(keyOf('::ffff:1.2.3.4')).toBe(keyOf('1.2.3.4'));
    expect(admitted(['1.2.3.4', '::ffff:1.2.3.4', '::ffff:0102:0304', '1.2.3.4', '::FFFF:1.2.3.4', '1.2.3.4'])).toBe(5);
  });

  it('gives 1,000 IPv4 clients 1,000 buckets', () => {
    const ips = Array.from({ length: 1_000 }, (_, i) => `198.51.${i >> 8}.${i & 255}`);
    expect(new Set(ips.map((ip) => keyOf(ip))).size).toBe(1_000);
    expect(admitted(ips)).toBe(1_000);
  });

  it('keys a request without a usable IP as ip:unknown, apart from every address', () => {
    const unknown = identityOf(['ip'], { ip: undefined, headers: {} });
    expect(unknown).toBe('ip:unknown');
    expect(identityOf(['ip'], { ip: 'not an ip', headers: {} })).toBe('ip:unknown');
    expect(identityOf(['user', 'api-key'], { headers: {} })).toBe('ip:unknown');
    expect(keyOf(undefined)).not.toBe(keyOf('0.0.0.0'));
  });
});

describe('isDottedQuad', () => {
  it('agrees with net.isIPv4 on anything made of digits and dots', () => {
    const text = fc.stringMatching(/^[0-9.]{0,17}$/);
    const quad = fc.tuple(...Array.from({ length: 4 }, () => fc.nat(300))).map((numbers) => numbers.join('.'));
    const padded = quad.map((address) => address.replace(/(^|\.)(\d)/, '$10$2'));
    fc.assert(
      fc.property(fc.oneof(text, quad, padded, fc.string()), (candidate) => {
        expect(isDottedQuad(candidate)).toBe(isIPv4(candidate));
      }),
      { numRuns: 20_000 },
    );
  });
});
