/** Redis Cluster's number of hash slots. */
export const HASH_SLOTS = 16_384;

/** CRC16-CCITT (XMODEM) by byte, the checksum Redis Cluster hashes keys with. */
const CRC16_TABLE = (() => {
  const table = new Uint16Array(256);
  for (let byte = 0; byte < 256; byte++) {
    let crc = byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
    table[byte] = crc & 0xffff;
  }
  return table;
})();

/**
 * The Redis Cluster hash slot of a key: CRC16 of its hash tag (what lies between the first `{`
 * and the next `}`, when that is not empty) or else of the whole key, modulo 16384. Bucket keys
 * end in `{<digest of the identity>}`, so every bucket of one identity shares a slot. Not the
 * `cluster-key-slot` package that ioredis 6 routes by: after an empty tag (`foo{}{bar}`) it hashes
 * up to the next `}` (`{bar`), where Redis hashes the whole key, and would put keys that Redis
 * puts in two slots in one script call.
 *
 * @example hashSlot('rl:per-user:tb:{6j_UO-HlfWLhY9rh}') === hashSlot('{6j_UO-HlfWLhY9rh}')
 */
export function hashSlot(key: string): number {
  const bytes = Buffer.from(key);
  let start = 0;
  let end = bytes.length;
  const open = bytes.indexOf(0x7b); // {
  if (open >= 0) {
    const close = bytes.indexOf(0x7d, open + 1); // }
    if (close > open + 1) {
      start = open + 1;
      end = close;
    }
  }
  let crc = 0;
  for (let i = start; i < end; i++) crc = ((crc << 8) ^ CRC16_TABLE[((crc >> 8) ^ bytes[i]) & 0xff]) & 0xffff;
  return crc % HASH_SLOTS;
}

/** Indexes of `keys` by hash slot: a single group, slot 0, on a single Redis (`cluster` false). */
export function groupBySlot(keys: readonly string[], cluster: boolean): Map<number, number[]> {
  const groups = new Map<number, number[]>();
  keys.forEach((key, i) => {
    const slot = cluster ? hashSlot(key) : 0;
    const group = groups.get(slot);
    if (group) group.push(i);
    else groups.set(slot, [i]);
  });
  return groups;
}
