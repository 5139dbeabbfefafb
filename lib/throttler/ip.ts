import { DEFAULT_IPV6_SUBNET, normalizeIp as normalizeAddress } from '../keys/ip.js';

/** The IPv6 prefix length the default tracker groups clients by (`ipv6SubnetPrefix`), @nestjs/throttler's name. */
export const DEFAULT_IPV6_SUBNET_PREFIX = DEFAULT_IPV6_SUBNET;

/**
 * The tracker of an IP address as @nestjs/throttler 6.7 writes it: IPv4 as is, an IPv6 zone id
 * dropped, IPv4-mapped IPv6 folded to IPv4, the loopback `::1`, and any other IPv6 address
 * masked to its first `ipv6SubnetPrefix` bits (0 to 128, default 64) and written in its shortest
 * form with the prefix, so a client cannot rotate through its /64 for fresh counts. Anything that
 * is not an address comes back unchanged (`undefined` included).
 *
 * @example normalizeIp('::ffff:10.0.0.1')             // '10.0.0.1'
 * @example normalizeIp('2001:db8:1:2:3:4:5:6')        // '2001:db8:1:2::/64'
 * @example normalizeIp('2001:db8:1:2:3:4:5:6', 48)    // '2001:db8:1::/48'
 */
export function normalizeIp(ip: string, ipv6SubnetPrefix: number = DEFAULT_IPV6_SUBNET_PREFIX): string {
  return normalizeAddress(ip, ipv6SubnetPrefix, 'throttler') ?? ip;
}
