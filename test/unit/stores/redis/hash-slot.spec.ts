import { groupBySlot, hashSlot } from '../../../../lib/stores/redis/hash-slot.js';

/**
 * Slots as Redis's own `CLUSTER KEYSLOT` gives them (Redis 7.0), from the Redis Cluster
 * specification's examples and its edge cases. The empty tag (`{}`) rows are where the
 * `cluster-key-slot` package (which ioredis 6 routes by) hashes `{x` and `{bar` instead of the
 * whole key: it is not used here for that reason.
 */
describe('hashSlot', () => {
  it.each<[string, number]>([
    ['123456789', 12739], // the specification's CRC16 check value, 0x31C3
    ['{user1000}.following', 3443], // one tag, one slot
    ['{user1000}.followers', 3443],
    ['foo{{bar}}zap', 4015], // the tag is '{bar', as for the key '{bar'
    ['foo{bar}{zap}', 5061], // the first tag only: 'bar'
    ['foo{}{bar}', 8363], // an empty first tag: the whole key
    ['{}{x}', 3257],
    ['a{}b', 13694],
    ['é{ü}', 9552], // UTF-8 bytes
    ['', 0],
    ['rl:per-user:tb:{6j_UO-HlfWLhY9rh}', 8921], // a bucket key: its digest's slot
  ])('puts %j in slot %i', (key, slot) => {
    expect(hashSlot(key)).toBe(slot);
  });
});

describe('groupBySlot', () => {
  it('groups the indexes of keys by slot on a Cluster, and all in slot 0 on a single Redis', () => {
    const keys = ['rl:a:tb:{6j_UO-HlfWLhY9rh}', 'rl:b:gcra:{6j_UO-HlfWLhY9rh}', '{user1000}.following'];
    expect(groupBySlot(keys, true)).toEqual(
      new Map([
        [8921, [0, 1]],
        [3443, [2]],
      ]),
    );
    expect(groupBySlot(keys, false)).toEqual(new Map([[0, [0, 1, 2]]]));
  });
});
