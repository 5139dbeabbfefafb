import fc from 'fast-check';
import { bucketKey } from '../../lib/keys/bucket-key.js';
import { hashSlot } from '../../lib/stores/redis/hash-slot.js';

const KEY = /^rl:per-user:tb:\{([A-Za-z0-9_-]{16})\}$/;

describe('bucketKey', () => {
  it('makes a key of fixed shape and length from any identity, braces and separators included', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ maxLength: 16 * 1024 }), fc.constantFrom('{x}', 'a}{b', ':', '}:{', '{}', 'user:{42}')), (identity) => {
        const key = bucketKey('rl:', 'per-user', 'token_bucket', identity);
        const match = KEY.exec(key);
        expect(match).not.toBeNull();
        expect(Buffer.byteLength(key)).toBe('rl:per-user:tb:{}'.length + 16);
        // the Cluster slot is the digest's alone: client bytes cannot pick it
        expect(hashSlot(key)).toBe(hashSlot(match![1]));
      }),
      { numRuns: 2_000 },
    );
  });

  it('gives distinct identities distinct keys', () => {
    fc.assert(
      fc.property(fc.uniqueArray(fc.string(), { minLength: 2, maxLength: 200 }), (identities) => {
        const keys = new Set(identities.map((identity) => bucketKey('rl:', 'p', 'gcra', identity)));
        expect(keys.size).toBe(identities.length);
      }),
    );
    // sources are told apart before hashing: the same value from two sources is two clients
    expect(bucketKey('rl:', 'p', 'gcra', 'api-key:42')).not.toBe(bucketKey('rl:', 'p', 'gcra', 'user:42'));
  });
});
