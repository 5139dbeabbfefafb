import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { bucketKey, digest, keyPrefix } from '../../../lib/keys/bucket-key.js';
import { hashSlot } from '../../../lib/stores/redis/hash-slot.js';

const KEY = /^rl:per-user:tb:\{([A-Za-z0-9_-]{16})\}$/;

describe('bucketKey', () => {
  it('makes a key of fixed shape and length from any identity, braces and separators included', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.string({ maxLength: 16 * 1024 }), fc.constantFrom('{x}', 'a}{b', ':', '}:{', '{}', 'user:{42}')),
        (identity) => {
          const key = bucketKey('rl:', 'per-user', 'token_bucket', identity);
          const match = KEY.exec(key);
          expect(match).not.toBeNull();
          expect(Buffer.byteLength(key)).toBe('rl:per-user:tb:{}'.length + 16);
          // the Cluster slot is the digest's alone: client bytes cannot pick it
          expect(hashSlot(key)).toBe(hashSlot(match![1]));
        },
      ),
      { numRuns: 2_000 },
    );
  });

  it('tags the keys of a rule with a block apart, so a block is never read under a rule without one', () => {
    const blocking = bucketKey('rl:', 'login', { algorithm: 'fixed_window', blockMs: 3_600_000 }, 'ip:1.2.3.4');
    expect(blocking).toMatch(/^rl:login:fw\.b:\{[A-Za-z0-9_-]{16}\}$/);
    expect(bucketKey('rl:', 'login', { algorithm: 'fixed_window' }, 'ip:1.2.3.4')).toBe(
      bucketKey('rl:', 'login', 'fixed_window', 'ip:1.2.3.4'),
    );
    // the block's length is the rule's, not the key's: changing it keeps the buckets (and their blocks)
    expect(bucketKey('rl:', 'login', { algorithm: 'fixed_window', blockMs: 60_000 }, 'ip:1.2.3.4')).toBe(blocking);
    expect(keyPrefix('rl:', 'api', { algorithm: 'gcra', blockMs: 1 }, 'pro')).toBe('rl:api:gcra.b:pro:{');
  });

  it("tags an anchored fixed window's keys apart, so no clock-aligned rule (nor an older build) reads its windows", () => {
    const anchored = { algorithm: 'fixed_window', anchor: 'first-request' } as const;
    expect(bucketKey('rl:', 'api', anchored, 'ip:1.2.3.4')).toMatch(/^rl:api:fw\.a:\{[A-Za-z0-9_-]{16}\}$/);
    expect(bucketKey('rl:', 'api', anchored, 'ip:1.2.3.4')).not.toBe(
      bucketKey('rl:', 'api', 'fixed_window', 'ip:1.2.3.4'),
    );
    expect(keyPrefix('rl:', 'login', { ...anchored, blockMs: 1_000 }, 'pro')).toBe('rl:login:fw.a.b:pro:{');
  });

  it('puts the route after the name for a policy scoped to the route, before the tag and the tier', () => {
    expect(keyPrefix('rl:', 'default', 'token_bucket', undefined, 'CatsController.find')).toBe(
      'rl:default@CatsController.find:tb:{',
    );
    expect(keyPrefix('rl:', 'api', 'gcra', 'pro', 'CatsController.find')).toBe('rl:api@CatsController.find:gcra:pro:{');
    expect(keyPrefix('rl:', 'api', 'gcra', 'pro', 'CatsController.find')).not.toBe(
      keyPrefix('rl:', 'api', 'gcra', 'pro', 'CatsController.findOne'),
    );
  });

  it('keeps the keys already stored: the digest is the first 12 bytes of SHA-256 over UTF-8, in base64url', () => {
    // keys that buckets live under in stores today: a digest that changed would lose every one of them
    expect(bucketKey('rl:', 'per-user', 'token_bucket', 'user:42')).toBe('rl:per-user:tb:{6j_UO-HlfWLhY9rh}');
    expect(bucketKey('rl:', 'api', 'gcra', 'ip:1.2.3.4')).toBe('rl:api:gcra:{QJ5MekuYg99R2K5Q}');
    expect(digest('ip:2001:db8:0:0::/64')).toBe('bGZlpEE774EvzvxZ');
    expect(digest('api-key:\u00e9\u{1F600}')).toBe('TSxzOCKY07GxoTgj');
    // a lone surrogate is hashed as U+FFFD, as Buffer.from would encode it
    expect(digest('\ud800x')).toBe('qHzkZ5PMZZt5vRh-');
    const reference = (identity: string) => createHash('sha256').update(identity).digest().toString('base64url', 0, 12);
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 600 }), (identity) => {
        expect(digest(identity)).toBe(reference(identity));
      }),
      { numRuns: 2_000 },
    );
  });

  it('remembers digests without mixing them up: identities that take each other’s cache slots get their own', () => {
    // more identities than the cache has slots, asked for twice in turn: many share a slot, each
    // evicting the other, and every answer, remembered or hashed again, is the identity's own
    const reference = (identity: string) => createHash('sha256').update(identity).digest().toString('base64url', 0, 12);
    const identities = Array.from({ length: 40_000 }, (_, i) => `ip:10.${i >> 8}.${i & 0xff}.1`);
    for (let round = 0; round < 2; round++)
      for (const identity of identities)
        if (digest(identity) !== reference(identity)) expect(digest(identity)).toBe(reference(identity));
    // the same text built anew is the same identity
    expect(digest(['user:', '42'].join(''))).toBe(digest('user:42'));
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
