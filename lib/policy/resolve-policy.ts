import { ALGORITHMS, type Algorithm } from '../algorithms/algorithm.types.js';
import { invalidPolicy, invalidPolicyField } from '../rate-limit.errors.js';
import type { KeySource, RateLimitPolicy, ResolvedPolicy } from './policy.types.js';

const FIELDS = new Set<string>([
  'algorithm', 'rps', 'tokensPerSecond', 'burst', 'limit', 'window', 'cost', 'defaultCost', 'key', 'name',
]);
const WINDOW_ALGORITHMS = new Set<Algorithm>(['fixed_window', 'sliding_window_log', 'sliding_window_counter']);
const WINDOW_UNITS: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86_400 };
const WINDOW_PATTERN = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?$/;

/** The reason a policy is refused at start. */
export class InvalidPolicyError extends Error {
  override readonly name = 'InvalidPolicyError';
}

const isPositive = (value: unknown): value is number =>
  typeof value === 'number' && Number.isFinite(value) && value > 0;
const isWholeAtLeastOne = (value: unknown): value is number =>
  typeof value === 'number' && Number.isInteger(value) && value >= 1;

/**
 * Parses a window: seconds as a number, or a string such as `'10s'`, `'1m'`, `'1h'`, `'1d'`
 * (a bare number string is seconds). Returns seconds, or `undefined` when it cannot.
 */
export function parseWindow(window: number | string): number | undefined {
  if (typeof window === 'number') return isPositive(window) ? window : undefined;
  if (typeof window !== 'string') return undefined;
  const match = WINDOW_PATTERN.exec(window.trim());
  if (!match) return undefined;
  const seconds = Number(match[1]) * WINDOW_UNITS[match[2] ?? 's'];
  return isPositive(seconds) ? seconds : undefined;
}

/** Whether `source` is a key source the module understands. */
export function isKeySource(source: unknown): source is KeySource {
  return (
    typeof source === 'function' ||
    source === 'ip' ||
    source === 'user' ||
    source === 'api-key' ||
    (typeof source === 'string' && /^header:[!#$%&'*+.^_`|~0-9a-z-]+$/i.test(source))
  );
}

/** Validates a key option (`key` of a policy or of the module) and returns it as a list. */
export function resolveKeySources(key: unknown, fail: (expected: string) => never): readonly KeySource[] {
  const list = Array.isArray(key) ? key : [key];
  if (list.length === 0 || !list.every(isKeySource)) {
    fail(`must be 'ip', 'user', 'api-key', 'header:<name>', a function, or a non-empty list of those`);
  }
  return list as KeySource[];
}

/**
 * Validates a policy and fills in its defaults. `where` names its place for error messages
 * (`CatsController.findAll`, `CatsController (class)`, `RateLimitModule policies[0]`) and
 * `defaultName` is the name an unnamed policy gets there.
 *
 * @throws InvalidPolicyError naming `where` and the field
 */
export function resolvePolicy(policy: RateLimitPolicy, where: string, defaultName: string): ResolvedPolicy {
  const fail = (field: string, value: unknown, expected: string): never => {
    throw new InvalidPolicyError(invalidPolicyField(where, field, value, expected));
  };
  const conflict = (problem: string): never => {
    throw new InvalidPolicyError(invalidPolicy(where, problem));
  };

  if (typeof policy !== 'object' || policy === null || Array.isArray(policy)) {
    return conflict(`a policy must be an object such as { rps: 10, burst: 20 }, got ${String(policy)}`);
  }
  for (const field of Object.keys(policy)) {
    if (!FIELDS.has(field)) fail(field, (policy as Record<string, unknown>)[field], `is not a policy field`);
  }

  const algorithm: Algorithm = policy.algorithm ?? 'token_bucket';
  if (!ALGORITHMS.includes(algorithm)) {
    fail('algorithm', algorithm, `must be one of ${ALGORITHMS.map((a) => `'${a}'`).join(', ')}`);
  }

  const { rps, burst, windowSeconds } = resolveRate(policy, fail, conflict);
  if (WINDOW_ALGORITHMS.has(algorithm) && (burst * 1000) / rps < 1) {
    conflict(`"${algorithm}" counts in windows of whole milliseconds, and burst / rps = ${burst} / ${rps} s is under 1 ms; lower "rps" or raise "burst"`);
  }

  const cost = policy.cost ?? 1;
  if (
    !(isPositive(cost) ||
      typeof cost === 'function' ||
      (typeof cost === 'string' && /^(header|query):.+$/.test(cost)))
  ) {
    fail('cost', cost, `must be a positive number, 'header:<name>', 'query:<name>' or a function`);
  }
  const defaultCost = policy.defaultCost ?? 1;
  if (!isPositive(defaultCost)) fail('defaultCost', defaultCost, 'must be a positive number');

  const key =
    policy.key === undefined ? undefined : resolveKeySources(policy.key, (expected) => fail('key', policy.key, expected));

  const name = policy.name ?? defaultName;
  if (typeof name !== 'string' || !/^[\x21-\x7a|~]+$/.test(name)) {
    fail('name', name, 'must be a non-empty string of visible ASCII characters, without braces');
  }

  return { name, limit: { algorithm, rps, burst }, windowSeconds, cost, defaultCost, key };
}

function resolveRate(
  policy: RateLimitPolicy,
  fail: (field: string, value: unknown, expected: string) => never,
  conflict: (problem: string) => never,
): { rps: number; burst: number; windowSeconds: number } {
  if (policy.rps !== undefined && policy.tokensPerSecond !== undefined && policy.rps !== policy.tokensPerSecond) {
    conflict(`"rps" and "tokensPerSecond" are the same setting; give one`);
  }
  const rate = policy.rps ?? policy.tokensPerSecond;
  const rateField = policy.rps !== undefined ? 'rps' : 'tokensPerSecond';

  if (rate !== undefined && (policy.limit !== undefined || policy.window !== undefined)) {
    conflict(`both "${rateField}" and "${policy.limit !== undefined ? 'limit' : 'window'}" given; say it as rps + burst or as limit + window`);
  }

  if (rate !== undefined) {
    if (!isPositive(rate)) fail(rateField, rate, 'must be a positive number (tokens per second)');
    const burst = policy.burst ?? Math.max(1, Math.ceil(rate));
    if (!isWholeAtLeastOne(burst)) fail('burst', policy.burst, 'must be a whole number >= 1');
    return { rps: rate, burst, windowSeconds: Math.max(1, Math.ceil(burst / rate)) };
  }

  if (policy.limit === undefined && policy.window === undefined) {
    conflict('give "rps" (and "burst") or "limit" and "window"');
  }
  if (policy.burst !== undefined) conflict(`"burst" goes with "rps"; with "limit" and "window" the burst is the limit`);
  if (!isWholeAtLeastOne(policy.limit)) fail('limit', policy.limit, 'must be a whole number >= 1');
  if (policy.window === undefined) conflict(`"limit" needs a "window" such as '1m'`);
  const seconds = parseWindow(policy.window!);
  if (seconds === undefined) {
    fail('window', policy.window, `must be a positive number of seconds or a duration such as '10s', '1m', '1h', '1d'`);
  }
  const limit = policy.limit!;
  return { rps: limit / seconds!, burst: limit, windowSeconds: Math.max(1, Math.ceil(seconds!)) };
}
