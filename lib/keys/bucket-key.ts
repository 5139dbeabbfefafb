import { hash } from 'node:crypto';
import type { Algorithm, Rule } from '../algorithms/algorithm.types.js';
import { ALGORITHM_DESCRIPTORS } from '../algorithms/registry.js';

/**
 * The tag of a rule's buckets: its algorithm's (`AlgorithmDescriptor.tag`), then `.a` for a fixed
 * window anchored at a key's first request (`Rule.anchor`) and `.b` for a rule with a block, whose
 * state holds a block's end. A policy whose algorithm changes between deploys gets fresh keys
 * instead of reading another algorithm's state (or a sorted set as a string); adding or dropping
 * `blockFor` starts fresh buckets, so a block is only ever read under a rule that has one, and an
 * older deploy never rewrites (and loses) it. So does changing `anchor`: a clock-aligned rule (or
 * an older build) reading an anchored window, whose start is off its grid, would take it for over
 * and count afresh, admitting up to a whole limit more, on every read.
 */
function tagOf(rule: Algorithm | Pick<Rule, 'algorithm' | 'blockMs' | 'anchor'>): string {
  if (typeof rule === 'string') return ALGORITHM_DESCRIPTORS[rule].tag;
  const anchored = rule.anchor === undefined ? '' : '.a';
  return `${ALGORITHM_DESCRIPTORS[rule.algorithm].tag}${anchored}${rule.blockMs === undefined ? '' : '.b'}`;
}

/**
 * The store key of one policy's bucket for one identity:
 * `<prefix><policy name>:<algorithm tag>:{<digest>}` (the tag is `tagOf` the rule, given whole or
 * as its algorithm). The identity (`ip:1.2.3.4`, `user:42`, ...) is hashed,
 * so the key is short whatever a client sends, and its characters cannot reach the separators or
 * the `{...}` Redis Cluster hash tag, which keeps all the buckets of one identity in one hash slot.
 *
 * The key is built as one flat string: a memory store keeps it as its map key, and a string
 * concatenated piece by piece would keep every piece (about 300 bytes more per bucket).
 *
 * @example bucketKey('rl:', 'per-user', 'token_bucket', 'user:42')  // 'rl:per-user:tb:{6j_UO-HlfWLhY9rh}'
 */
export function bucketKey(
  prefix: string,
  policyName: string,
  rule: Algorithm | Pick<Rule, 'algorithm' | 'blockMs' | 'anchor'>,
  identity: string,
): string {
  return keyOf(keyPrefix(prefix, policyName, rule), identity);
}

/**
 * What every bucket key of one policy starts with, `<prefix><policy name>:<algorithm tag>:{`, and
 * for one tier of a tiered policy `<prefix><policy name>:<algorithm tag>:<tier>:{`: worked out
 * once per policy, so a request only adds its digest. A policy scoped to the route
 * (`scope: 'route'`) has the route after its name, `<prefix><policy name>@<route>:...`, so each
 * route has its own buckets (`route`: `Controller.handler`, fit for keys as a default policy name is).
 *
 * @example keyPrefix('rl:', 'default', 'token_bucket', undefined, 'CatsController.findAll') // 'rl:default@CatsController.findAll:tb:{'
 */
export function keyPrefix(
  prefix: string,
  policyName: string,
  rule: Algorithm | Pick<Rule, 'algorithm' | 'blockMs' | 'anchor'>,
  tier?: string,
  route?: string,
): string {
  const name = route === undefined ? policyName : `${policyName}@${route}`;
  return tier === undefined ? `${prefix}${name}:${tagOf(rule)}:{` : `${prefix}${name}:${tagOf(rule)}:${tier}:{`;
}

/** The bucket key of `identity` under a policy's `keyPrefix`. */
export function keyOf(keyPrefix: string, identity: string): string {
  return [keyPrefix, digest(identity), '}'].join('');
}

/** Base64url characters of SHA-256 kept: its first 12 bytes (96 bits), which 16 characters say exactly. */
const DIGEST_CHARACTERS = 16;

/**
 * Slots of the digest cache, a power of two: each remembers the last identity that fell in it
 * (by `slotOf`) and its digest.
 */
const DIGEST_SLOTS = 16_384;
/** Longest identity whose digest is remembered, characters: longer ones are hashed each time. */
const CACHED_IDENTITY_LENGTH = 256;
/** `undefined`: a slot no identity has taken (any string, '' too, may be one). */
const cachedIdentities = new Array<string | undefined>(DIGEST_SLOTS).fill(undefined);
const cachedDigests = new Array<string>(DIGEST_SLOTS).fill('');

/**
 * 16 base64url characters of SHA-256 (96 bits): no client can find an identity that lands on
 * another's key, and a chance collision stays below 10^-11 even among 10^9 keys.
 * The digests of recent identities are remembered (16,384 of up to 256 characters: about 2 MB of
 * IP addresses and user ids, 10 MB at the very most), so a client's next request, and the other
 * policies of the same request, skip the hash.
 * The cache is a fixed table with one identity per slot, a newer one taking the slot of an older:
 * an identity never seen costs its hash and two stores. (A `Map` emptied when full cost a new
 * identity 4 times its hash, in its growth and in garbage collection.) An identity is looked up
 * by its whole text, so a client who aims at another's slot only costs it a hash.
 */
export function digest(identity: string): string {
  if (identity.length > CACHED_IDENTITY_LENGTH) return sha256Digest(identity);
  const slot = slotOf(identity);
  if (cachedIdentities[slot] === identity) return cachedDigests[slot];
  const made = sha256Digest(identity);
  cachedIdentities[slot] = identity;
  cachedDigests[slot] = made;
  return made;
}

function sha256Digest(identity: string): string {
  // one call, no Hash object and no Buffer: a fifth of createHash's time for an identity not seen before
  return hash('sha256', identity, 'base64url').slice(0, DIGEST_CHARACTERS);
}

/** The cache slot of an identity: FNV-1a of its UTF-16 code units, cut to the table's size. */
function slotOf(identity: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < identity.length; i++) h = Math.imul(h ^ identity.charCodeAt(i), 0x01000193);
  return h & (DIGEST_SLOTS - 1);
}
