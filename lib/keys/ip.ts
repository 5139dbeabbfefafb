import { isIPv4, isIPv6 } from 'node:net';

/** The IPv6 prefix length clients are grouped by when none is given. */
export const DEFAULT_IPV6_SUBNET = 64;

/**
 * The rate-limit identity of an IP address: IPv4 as is, IPv4-mapped IPv6 (`::ffff:1.2.3.4`)
 * folded to IPv4 so a dual-stack server keys a client once, and IPv6 grouped by its first
 * `ipv6Subnet` bits (32 to 64, default /64), because one subscriber usually holds a whole /64
 * (or a /56, /48) and could otherwise rotate addresses for fresh buckets. Returns `undefined`
 * for anything that is not an address.
 *
 * @example normalizeIp('::ffff:10.0.0.1')              // '10.0.0.1'
 * @example normalizeIp('2001:db8:1:2:3:4:5:6')         // '2001:db8:1:2::/64'
 * @example normalizeIp('2001:db8:1:2:3:4:5:6', 48)     // '2001:db8:1:0::/48'
 */
export function normalizeIp(ip: unknown, ipv6Subnet = DEFAULT_IPV6_SUBNET): string | undefined {
  if (typeof ip !== 'string' || ip.length === 0 || ip.length > 64) return undefined;
  const address = ip.split('%', 1)[0]; // drop an IPv6 zone id (fe80::1%eth0)
  if (isIPv4(address)) return address;
  if (!isIPv6(address)) return undefined;
  const groups = expandIPv6(address);
  if (groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff) {
    return [groups[6] >> 8, groups[6] & 0xff, groups[7] >> 8, groups[7] & 0xff].join('.');
  }
  // the first four groups, with the bits past the prefix cleared
  const prefix = groups.slice(0, 4).map((g, i) => {
    const kept = Math.min(16, Math.max(0, ipv6Subnet - 16 * i));
    return g & ~(0xffff >> kept) & 0xffff;
  });
  return `${prefix.map((g) => g.toString(16)).join(':')}::/${ipv6Subnet}`;
}

/** The eight 16-bit groups of a valid IPv6 address (checked by `isIPv6` before). */
function expandIPv6(address: string): number[] {
  let text = address.toLowerCase();
  const lastColon = text.lastIndexOf(':');
  const tail = text.slice(lastColon + 1);
  if (tail.includes('.')) {
    const [a, b, c, d] = tail.split('.').map(Number);
    text = `${text.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, rest] = text.split('::');
  const parse = (part: string | undefined) => (part ? part.split(':').map((g) => parseInt(g, 16)) : []);
  const left = parse(head);
  const right = parse(rest);
  if (rest === undefined) return left;
  return [...left, ...new Array<number>(8 - left.length - right.length).fill(0), ...right];
}
