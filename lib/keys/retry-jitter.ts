/** Base64url digits, by character: what a bucket key's digest is written in (see `digest`). */
const DIGITS = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
/** Digest characters read for the fraction: 8 x 6 = 48 bits, exact in a double. */
const FRACTION_CHARS = 8;

/**
 * A number in [0, 1) taken from the identity's digest in a bucket key (its `{<digest>}` hash tag,
 * see `keyOf`): the same for every request of one identity, spread evenly across identities.
 */
export function identityFraction(key: string): number {
  const start = key.lastIndexOf('{') + 1;
  let value = 0;
  for (let i = 0; i < FRACTION_CHARS; i++) value = value * 64 + Math.max(0, DIGITS.indexOf(key[start + i]));
  return value / 64 ** FRACTION_CHARS;
}

/**
 * `retryAfter` (whole seconds) stretched by up to `jitter` of itself, by an offset fixed per
 * identity: `ceil(retryAfter * (1 + jitter * u))`, `u` the identity's fraction. Refused clients
 * then come back spread out rather than at one instant, each never earlier than its exact wait.
 * A wait of `Infinity` (never admittable) stays so.
 *
 * @example jitteredRetryAfter(10, 0.5, key)  // 10 to 15, always the same for this key's identity
 */
export function jitteredRetryAfter(retryAfter: number, jitter: number, key: string): number {
  if (!Number.isFinite(retryAfter)) return retryAfter;
  return Math.ceil(retryAfter * (1 + jitter * identityFraction(key)));
}

/** Refused decisions with their `retryAfter` jittered (see `jitteredRetryAfter`), by the key of each one's request. */
export function withJitter<D extends { allowed: boolean; retryAfter: number }>(
  decisions: D[],
  requests: readonly { key: string }[],
  jitter: number,
): D[] {
  return decisions.map((d, i) =>
    d.allowed ? d : { ...d, retryAfter: jitteredRetryAfter(d.retryAfter, jitter, requests[i].key) },
  );
}
