import { isIPv6 } from 'node:net';

/** The IPv6 prefix length clients are grouped by when none is given. */
export const DEFAULT_IPV6_SUBNET = 64;

/** Character codes of `.` and `0`. */
const DOT = 0x2e;
const ZERO = 0x30;

/**
 * How `normalizeIp` writes an IPv6 client's group.
 *
 * - `'bucket'`, the module's identities (bucket keys hash them, so it never changes): the first
 *   four groups in full, then `::/<prefix>` (`2001:db8:0:0::/64`, the loopback `0:0:0:0::/64`).
 * - `'throttler'`, @nestjs/throttler 6.7's trackers: the masked address in its shortest form
 *   (`2001:db8::/64`), the loopback kept as `::1`.
 */
export type IpNotation = 'bucket' | 'throttler';

/**
 * The rate-limit identity of an IP address: IPv4 as is, IPv4-mapped IPv6 (`::ffff:1.2.3.4`)
 * folded to IPv4 so a dual-stack server keys a client once, an IPv6 zone id dropped, and IPv6
 * grouped by its first `ipv6Subnet` bits (default /64; the module takes 32 to 64, `'throttler'`
 * any from 0 to 128), because one subscriber usually holds a whole /64 (or a /56, /48) and could
 * otherwise rotate addresses for fresh buckets. Returns `undefined` for anything that is not an
 * address (in `'bucket'` notation, for any string longer than 64 characters too).
 *
 * @example normalizeIp('::ffff:10.0.0.1')                          // '10.0.0.1'
 * @example normalizeIp('2001:db8:1:2:3:4:5:6')                     // '2001:db8:1:2::/64'
 * @example normalizeIp('2001:db8:1:2:3:4:5:6', 48)                 // '2001:db8:1:0::/48'
 * @example normalizeIp('2001:db8:1:2:3:4:5:6', 48, 'throttler')    // '2001:db8:1::/48'
 */
export function normalizeIp(
  ip: unknown,
  ipv6Subnet = DEFAULT_IPV6_SUBNET,
  notation: IpNotation = 'bucket',
): string | undefined {
  if (typeof ip !== 'string' || ip.length === 0) return undefined;
  // the module's identities parse no more of what a client sends than an address takes
  if (notation === 'bucket' && ip.length > 64) return undefined;
  // drop an IPv6 zone id (fe80::1%eth0); an address without one is taken as it is, with no array made
  const zone = ip.indexOf('%');
  const address = zone === -1 ? ip : ip.slice(0, zone);
  if (isDottedQuad(address)) return address;
  if (!isIPv6(address)) return undefined;
  const groups = expandIPv6(address);
  if (groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff) {
    return [groups[6] >> 8, groups[6] & 0xff, groups[7] >> 8, groups[7] & 0xff].join('.');
  }
  if (notation === 'throttler' && groups[7] === 1 && groups.slice(0, 7).every((g) => g === 0)) return '::1';
  const prefix = Number.isFinite(ipv6Subnet) ? Math.min(128, Math.max(0, Math.trunc(ipv6Subnet))) : DEFAULT_IPV6_SUBNET;
  const masked = groups.map((g, i) => g & ~(0xffff >> Math.min(16, Math.max(0, prefix - 16 * i))) & 0xffff);
  if (notation === 'throttler') return `${shortestForm(masked)}/${prefix}`;
  // the module's prefix is at most 64 bits: the last four groups are 0
  const kept = masked.slice(0, 4).map((g) => g.toString(16));
  return `${kept.join(':')}::/${prefix}`;
}

/**
 * Whether `text` is an IPv4 address in dotted decimal, as `net.isIPv4` has it (four numbers from
 * 0 to 255, none with a leading zero): one pass over its characters, no regular expression.
 */
export function isDottedQuad(text: string): boolean {
  if (text.length < 7 || text.length > 15) return false;
  let dots = 0;
  let digits = 0;
  let value = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code === DOT) {
      if (digits === 0 || ++dots > 3) return false;
      digits = 0;
      value = 0;
    } else if (code >= ZERO && code <= ZERO + 9) {
      // a number's second digit after a 0 is a leading zero
      if (digits > 0 && value === 0) return false;
      value = value * 10 + code - ZERO;
      if (value > 255) return false;
      digits++;
    } else return false;
  }
  return dots === 3 && digits > 0;
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

/** Eight groups in hex, the first of the longest runs of two or more zero groups written `::` (RFC 5952). */
function shortestForm(groups: readonly number[]): string {
  let start = -1;
  let length = 1;
  let i = 0;
  while (i < groups.length) {
    let end = i;
    while (end < groups.length && groups[end] === 0) end++;
    if (end - i > length) [start, length] = [i, end - i];
    i = end > i ? end : i + 1;
  }
  const hex = groups.map((g) => g.toString(16));
  if (start === -1) return hex.join(':');
  return `${hex.slice(0, start).join(':')}::${hex.slice(start + length).join(':')}`;
}
