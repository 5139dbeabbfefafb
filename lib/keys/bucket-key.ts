import { createHash } from 'node:crypto';
import type { Algorithm } from '../algorithms/algorithm.types.js';

/**
 * A short tag per algorithm in the key: a policy whose algorithm changes between deploys gets
 * fresh keys instead of reading another algorithm's state (or a sorted set as a string).
 */
const ALGORITHM_TAGS: Record<Algorithm, string> = {
  token_bucket: 'tb',
  leaky_bucket: 'lb',
  fixed_window: 'fw',
  sliding_window_log: 'swl',
  sliding_window_counter: 'swc',
  gcra: 'gcra',
};

/**
 * The store key of one policy's bucket for one identity:
 * `<prefix><policy name>:<algorithm tag>:{<digest>}`. The identity (`ip:1.2.3.4`, `user:42`, ...) is hashed,
 * so the key is short whatever a client sends, and its characters cannot reach the separators or
 * the `{...}` Redis Cluster hash tag, which keeps all the buckets of one identity in one hash slot.
 *
 * The key is built as one flat string: a memory store keeps it as its map key, and a string
 * concatenated piece by piece would keep every piece (about 300 bytes more per bucket).
 *
 * @example bucketKey('rl:', 'per-user', 'token_bucket', 'user:42')  // 'rl:per-user:tb:{6j_UO-HlfWLhY9rh}'
 */
export function bucketKey(prefix: string, policyName: string, algorithm: Algorithm, identity: string): string {
  return keyOf(keyPrefix(prefix, policyName, algorithm), identity);
}

/**
 * What every bucket key of one policy starts with, `<prefix><policy name>:<algorithm tag>:{`:
 * worked out once per policy, so a request only adds its digest.
 */
export function keyPrefix(prefix: string, policyName: string, algorithm: Algorithm): string {
  return `${prefix}${policyName}:${ALGORITHM_TAGS[algorithm]}:{`;
}

/** The bucket key of `identity` under a policy's `keyPrefix`. */
export function keyOf(keyPrefix: string, identity: string): string {
  return [keyPrefix, digest(identity), '}'].join('');
}

/** Bytes of SHA-256 kept: 96 bits, 16 base64url characters. */
const DIGEST_BYTES = 12;

let lastIdentity: string | undefined;
let lastDigest = '';

/**
 * 16 base64url characters of SHA-256 (96 bits): no client can find an identity that lands on
 * another's key, and a chance collision stays below 10^-11 even among 10^9 keys.
 * A request's policies usually share one identity, so the last digest is kept: the guard
 * hashes once per request, not once per policy.
 */
export function digest(identity: string): string {
  if (identity !== lastIdentity) {
    lastDigest = createHash('sha256').update(identity).digest().toString('base64url', 0, DIGEST_BYTES);
    lastIdentity = identity;
  }
  return lastDigest;
}
