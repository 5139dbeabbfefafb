import type { BucketTable } from './bucket-table.js';
import { kthSmallest } from './kth-smallest.js';

/** Buckets freed at once when the store is full, as a share of `maxKeys`. */
const EVICT_SHARE = 0.01;

/**
 * Frees room in a table of at most `maxKeys` buckets for `added` new ones, and 1 % of `maxKeys`
 * at least so that the next inserts find room without another pass: every expired bucket first,
 * and only when they are not enough, the live buckets that will be full again soonest (the ones
 * whose clients lose least). The rows in `kept` (the request's own buckets) stay.
 */
export function makeRoom(
  table: BucketTable,
  maxKeys: number,
  added: number,
  kept: readonly (number | undefined)[],
  now: number,
): void {
  const evictable = (row: number) => table.isUsed(row) && !kept.includes(row);
  const goal = Math.min(maxKeys, Math.max(added, Math.ceil(maxKeys * EVICT_SHARE)));
  for (let row = 0; row < table.length; row++) {
    if (table.expiry(row) <= now && evictable(row)) table.free(row);
  }
  let excess = table.size + goal - maxKeys;
  if (excess <= 0) return;

  const expiries = new Float64Array(table.size);
  let count = 0;
  for (let row = 0; row < table.length; row++) if (evictable(row)) expiries[count++] = table.expiry(row);
  excess = Math.min(excess, count);
  if (excess === 0) return;
  const candidates = expiries.subarray(0, count);
  const threshold = kthSmallest(candidates, excess - 1);
  // the ones expiring before the threshold all go, and as many at it as make up the number
  let atThreshold = excess;
  for (let i = 0; i < excess; i++) if (candidates[i] < threshold) atThreshold--;
  for (let row = 0; row < table.length; row++) {
    const expiry = table.expiry(row);
    if (expiry > threshold || !evictable(row)) continue;
    if (expiry === threshold) {
      if (atThreshold === 0) continue;
      atThreshold--;
    }
    table.free(row);
  }
}
