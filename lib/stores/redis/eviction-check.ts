import type { Logger } from '@nestjs/common';
import { evictingRedis } from '../../rate-limit.messages.js';
import type { RedisPort } from './redis-port.js';

/**
 * The `maxmemory-policy` values under which a full Redis evicts keys of this store. Every key the
 * store writes has a TTL, so the `volatile-*` policies reach them as much as the `allkeys-*` ones;
 * only `noeviction` (refuse writes instead) leaves them.
 */
export const EVICTING_POLICIES: ReadonlySet<string> = new Set([
  'allkeys-lru',
  'allkeys-lfu',
  'allkeys-random',
  'volatile-lru',
  'volatile-lfu',
  'volatile-random',
  'volatile-ttl',
]);

/** What a server's `INFO memory` says of eviction. */
interface Eviction {
  policy: string;
  /** `maxmemory`, bytes; 0: none set (nothing is evicted until one is). */
  maxmemory: number;
}

/**
 * Reads the eviction policy of each server not yet in `read` (every master of a Cluster, by
 * address) and warns for one whose policy can evict this store's keys: an evicted key's limit
 * starts again from nothing. A server that answered joins `read`, so each is warned of once;
 * one out of reach (or a Cluster that knows no master yet) is read at the next `ready`. Read from
 * `INFO memory`, which answers where `CONFIG` is disabled (as on managed services). Never rejects.
 */
export async function warnIfEvicting(port: RedisPort, read: Set<string>, logger: Logger): Promise<void> {
  const { cluster } = port;
  await Promise.all(
    port.masters().map(async (node) => {
      const { address } = node;
      if (read.has(address)) return;
      let eviction: Eviction;
      try {
        eviction = evictionOf(String(await node.call(['INFO', 'memory'])));
      } catch {
        return; // out of reach: read at the next `ready`
      }
      if (read.has(address)) return; // read meanwhile, by the reading a `ready` started beside this one
      read.add(address);
      if (EVICTING_POLICIES.has(eviction.policy))
        logger.warn(evictingRedis(eviction.policy, eviction.maxmemory, cluster ? address : undefined));
    }),
  );
}

/** The policy and limit in an `INFO memory` reply; a server that names no policy evicts nothing. */
function evictionOf(info: string): Eviction {
  const field = (name: string): string | undefined => new RegExp(`^${name}:(\\S*)`, 'm').exec(info)?.[1];
  return { policy: field('maxmemory_policy') ?? 'noeviction', maxmemory: Number(field('maxmemory') ?? 0) };
}
