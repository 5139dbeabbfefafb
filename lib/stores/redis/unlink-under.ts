import { groupBySlot } from './hash-slot.js';
import type { RedisPort, RedisServer } from './redis-port.js';

/** Keys SCAN looks at per step (its COUNT): each step's matches go in one UNLINK per hash slot. */
const SCAN_COUNT = 1_000;

/** `text` matched literally in a Redis glob pattern (`SCAN MATCH`): `*`, `?`, `[`, `]` and `\` escaped. */
export function globLiteral(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}

/**
 * Unlinks every key that starts with `prefix`: on a single Redis (or Sentinel's primary), and on
 * every master of a Cluster (each master SCANs only its own keys). A SCAN step's matches go in
 * UNLINKs sent together, one per hash slot on a Cluster (a node refuses a command whose keys
 * span slots). UNLINK frees the memory in the background, so a large bucket never blocks Redis.
 * A key written while this runs may be left; one that exists throughout is always found (SCAN's
 * guarantee). A Cluster's slot migrating meanwhile may leave keys it moves.
 *
 * @returns how many keys were unlinked
 */
export async function unlinkUnder(port: RedisPort, prefix: string): Promise<number> {
  const unlinked = await Promise.all(
    port.masters().map((node) => unlinkOnNode(node, `${globLiteral(prefix)}*`, port.cluster)),
  );
  return unlinked.reduce((sum, n) => sum + n, 0);
}

async function unlinkOnNode(node: RedisServer, match: string, cluster: boolean): Promise<number> {
  let unlinked = 0;
  let cursor = '0';
  do {
    const [next, keys] = (await node.call(['SCAN', cursor, 'MATCH', match, 'COUNT', SCAN_COUNT])) as [string, string[]];
    cursor = String(next);
    if (keys.length === 0) continue;
    const groups = [...groupBySlot(keys, cluster).values()];
    const counts = await Promise.all(groups.map((group) => node.call(['UNLINK', ...group.map((i) => keys[i])])));
    for (const count of counts) unlinked += Number(count);
  } while (cursor !== '0');
  return unlinked;
}
