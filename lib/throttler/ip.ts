import { isIP } from 'node:net';

/** The IPv6 prefix length the default tracker groups clients by (`ipv6SubnetPrefix`). */
export const DEFAULT_IPV6_SUBNET_PREFIX = 64;

/**
 * The tracker of an IP address as @nestjs/throttler 6.7 makes it: IPv4 as is, an IPv6 zone id
 * dropped, IPv4-mapped IPv6 folded to IPv4, the loopback `::1`, and any other IPv6 address
 * masked to its first `ipv6SubnetPrefix` bits (0 to 128, default 64) and written compressed with
 * the prefix (`2001:db8:1:2::/64`), so a client cannot rotate through its /64 for fresh counts.
 * Anything that is not an address comes back unchanged (`undefined` included).
 *
 * @example normalizeIp('::ffff:10.0.0.1')             // '10.0.0.1'
 * @example normalizeIp('2001:db8:1:2:3:4:5:6')        // '2001:db8:1:2::/64'
 * @example normalizeIp('2001:db8:1:2:3:4:5:6', 48)    // '2001:db8:1::/48'
 */
export function normalizeIp(ip: string, ipv6SubnetPrefix: number = DEFAULT_IPV6_SUBNET_PREFIX): string {
  if (typeof ip !== 'string' || ip.length === 0) return ip;
  const zone = ip.indexOf('%');
  const bare = zone === -1 ? ip : ip.slice(0, zone);
  const version = isIP(bare);
  if (version === 4) return bare;
  if (version !== 6) return ip;
  const groups = groupsOf(bare.toLowerCase());
  if (groups === undefined) return ip;
  if (groups[7] === 1 && groups.slice(0, 7).every((group) => group === 0)) return '::1';
  if (groups.slice(0, 5).every((group) => group === 0) && groups[5] === 0xffff) {
    return [groups[6] >> 8, groups[6] & 0xff, groups[7] >> 8, groups[7] & 0xff].join('.');
  }
  const prefix = Number.isFinite(ipv6SubnetPrefix)
    ? Math.min(128, Math.max(0, Math.trunc(ipv6SubnetPrefix)))
    : DEFAULT_IPV6_SUBNET_PREFIX;
  const masked = groups.map((group, index) => {
    const kept = Math.min(16, Math.max(0, prefix - 16 * index));
    return group & (0xffff << (16 - kept)) & 0xffff;
  });
  return `${compressed(masked)}/${prefix}`;
}

/** The eight 16-bit groups of an IPv6 address `isIP` accepted, a dotted IPv4 tail included. */
function groupsOf(address: string): number[] | undefined {
  let text = address;
  const lastColon = text.lastIndexOf(':');
  const tail = text.slice(lastColon + 1);
  if (tail.includes('.')) {
    const octets = tail.split('.').map(Number);
    if (octets.length !== 4 || octets.some((octet) => !Number.isInteger(octet) || octet < 0 || octet > 255)) {
      return undefined;
    }
    const high = ((octets[0] << 8) | octets[1]).toString(16);
    const low = ((octets[2] << 8) | octets[3]).toString(16);
    text = `${text.slice(0, lastColon + 1)}${high}:${low}`;
  }
  const halves = text.split('::');
  if (halves.length > 2) return undefined;
  const left = halves[0] === '' ? [] : halves[0].split(':');
  const right = halves.length === 2 && halves[1] !== '' ? halves[1].split(':') : [];
  const zeros = halves.length === 2 ? 8 - left.length - right.length : 0;
  if (zeros < 0 || left.length + zeros + right.length !== 8) return undefined;
  const groups = [...left, ...new Array<string>(zeros).fill('0'), ...right].map((group) => parseInt(group, 16));
  return groups.every((group) => Number.isInteger(group) && group >= 0 && group <= 0xffff) ? groups : undefined;
}

/** Eight groups in hex, the first longest run of two or more zero groups written `::`. */
function compressed(groups: readonly number[]): string {
  let bestStart = -1;
  let bestLength = 0;
  for (let start = 0; start < groups.length; start++) {
    let length = 0;
    while (start + length < groups.length && groups[start + length] === 0) length++;
    if (length > bestLength) {
      bestStart = start;
      bestLength = length;
    }
  }
  const hex = groups.map((group) => group.toString(16));
  if (bestLength < 2) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLength).join(':')}`;
}
