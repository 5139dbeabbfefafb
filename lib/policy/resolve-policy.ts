import {
  ALGORITHMS,
  type Algorithm,
  type QuotaCalendar,
  type Rule,
  WINDOW_ALGORITHMS,
} from '../algorithms/algorithm.types.js';
import { invalidPolicy, invalidPolicyField, invalidPolicyValue } from '../rate-limit.messages.js';
import { isTimeZone, QUOTA_PERIODS, type QuotaPeriod } from './calendar-period.js';
import { factorAtLeast, MAX_REFILL_DAYS, MAX_RPS, refillTooSlow } from './policy-bounds.js';
import type {
  CostSource,
  KeySource,
  QuotaAnchor,
  RateLimitPolicy,
  ResolvedPolicy,
  ResolvedTiers,
  TierLimits,
} from './policy.types.js';
import { OUTCOME_FIELDS, resolveOutcomeFields } from './resolve-outcome-fields.js';
import { LIMIT_FIELDS, resolveTiers, TIER_FIELDS } from './resolve-tiers.js';

const FIELDS = new Set<string>([
  ...LIMIT_FIELDS,
  'cost',
  'defaultCost',
  'key',
  'scope',
  'name',
  ...TIER_FIELDS,
  'blockFor',
  ...OUTCOME_FIELDS,
]);
const WINDOW_UNITS: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86_400 };
const WINDOW_PATTERN = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?$/;
/** An RFC 9110 token: what an HTTP header name may be. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9a-z-]+$/i;
/** Visible ASCII without braces: fit for a header value and the bucket key (braces would make a Cluster hash tag). */
const NAME = /^[\x21-\x7a|~]+$/;

/**
 * Longest explicit policy name, characters. The name is in every bucket key, next to the prefix
 * and 24 characters of tag and digest, and twice in the RateLimit headers of every response:
 * 64 is room for any descriptive name, and anything longer is a value pasted by mistake.
 * Default names (`Controller.handler`) are never refused, however long.
 */
export const MAX_NAME_LENGTH = 64;
/** What an HTTP header name may hold, for messages. */
export const HEADER_NAME_CHARS = "letters, digits and !#$%&'*+-.^_`|~ only";

type Fail = (field: string, value: unknown, expected: string) => never;

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

/** Whether `name` is an HTTP header name (an RFC 9110 token). */
export function isHeaderName(name: unknown): name is string {
  return typeof name === 'string' && TOKEN.test(name);
}

/** Whether `source` is a key source the module understands. */
export function isKeySource(source: unknown): source is KeySource {
  return (
    typeof source === 'function' ||
    source === 'ip' ||
    source === 'user' ||
    source === 'api-key' ||
    (typeof source === 'string' && source.startsWith('header:') && isHeaderName(source.slice('header:'.length)))
  );
}

/**
 * Validates a key option (`key` of a policy or of the module) and returns it as a list. A bad
 * entry of a list is named by its index (`key[1]`).
 */
export function resolveKeySources(key: unknown, fail: Fail): readonly KeySource[] {
  const list: unknown[] = Array.isArray(key) ? key : [key];
  const bad = list.findIndex((source) => !isKeySource(source));
  if (list.length > 0 && bad === -1) return list as KeySource[];
  const [field, value] = bad === -1 ? ['key', key] : [Array.isArray(key) ? `key[${bad}]` : 'key', list[bad]];
  if (typeof value === 'string' && value.startsWith('header:')) {
    fail(
      field,
      value,
      `must be 'header:<name>' with an HTTP header name such as 'header:x-tenant-id': ${HEADER_NAME_CHARS}`,
    );
  }
  return fail(
    field,
    value,
    `must be 'ip', 'user', 'api-key', 'header:<name>', a function, or a non-empty list of those`,
  );
}

/**
 * A default name (`Controller.handler`, `Controller`) made fit for keys and headers, so that no
 * identifier can make start fail: what is not visible ASCII (a non-ASCII letter, a space or a
 * brace in a computed method name) is percent-encoded as UTF-8.
 */
export function defaultPolicyName(name: string): string {
  const encoded = name.replace(/[^\x21-\x7a|~]/gu, (char) =>
    Buffer.from(char).toString('hex').toUpperCase().replace(/../g, '%$&'),
  );
  return encoded === '' ? 'anonymous' : encoded;
}

/**
 * Validates a policy and fills in its defaults. `where` names its place for error messages
 * (`CatsController.findAll`, `CatsController (class)`, `RateLimitModule policies[0]`) and
 * `defaultName` is the name an unnamed policy gets there.
 *
 * @throws InvalidPolicyError naming `where` and the field
 */
export function resolvePolicy(policy: RateLimitPolicy, where: string, defaultName: string): ResolvedPolicy {
  const fail: Fail = (field, value, expected) => {
    throw new InvalidPolicyError(invalidPolicyField(where, field, value, expected));
  };
  const conflict = (problem: string): never => {
    throw new InvalidPolicyError(invalidPolicy(where, problem));
  };

  if (typeof policy !== 'object' || policy === null || Array.isArray(policy)) {
    throw new InvalidPolicyError(invalidPolicyValue(where, policy));
  }
  for (const field of Object.keys(policy)) {
    if (!FIELDS.has(field)) {
      fail(
        field,
        (policy as Record<string, unknown>)[field],
        `is not a policy field (the fields are ${[...FIELDS].join(', ')})`,
      );
    }
  }

  const cost = policy.cost === undefined ? 1 : policy.cost;
  if (typeof cost === 'string' && cost.startsWith('header:') && !isHeaderName(cost.slice('header:'.length))) {
    fail(
      'cost',
      cost,
      `must be 'header:<name>' with an HTTP header name such as 'header:x-request-weight': ${HEADER_NAME_CHARS}`,
    );
  }
  if (cost === 'query:') fail('cost', cost, `must be 'query:<name>' with a parameter name such as 'query:weight'`);
  if (!(
    isPositive(cost) ||
    typeof cost === 'function' ||
    (typeof cost === 'string' && /^(header|query):/.test(cost))
  )) {
    fail('cost', cost, `must be a positive number, 'header:<name>', 'query:<name>' or a function`);
  }
  const defaultCost = policy.defaultCost === undefined ? 1 : policy.defaultCost;
  if (!isPositive(defaultCost)) fail('defaultCost', defaultCost, 'must be a positive number');

  // a block applies to every tier's rule alike
  const block = resolveBlock(policy.blockFor, fail);
  // a tiered policy has a rule per tier, each checked as a policy's own, in messages that name the tier
  const tiered = resolveTiers(policy, fail, conflict);
  const tiers: ResolvedTiers | undefined = tiered && {
    rules: new Map(
      tiered.limits.map(([tier, limits]) => {
        const failIn: Fail = (field, value, expected) => fail(`tiers.${tier}.${field}`, value, expected);
        return [
          tier,
          resolveRule(limits, cost, defaultCost, block, failIn, (problem) => conflict(`tier "${tier}": ${problem}`)),
        ];
      }),
    ),
    source: tiered.source,
    defaultTier: tiered.defaultTier,
  };
  const rule =
    tiers === undefined
      ? resolveRule(policy, cost, defaultCost, block, fail, conflict)
      : tiers.rules.get(tiers.defaultTier)!;

  const key = policy.key === undefined ? undefined : resolveKeySources(policy.key, fail);
  const scope = policy.scope === undefined ? 'client' : policy.scope;
  if (scope !== 'client' && scope !== 'route')
    fail(
      'scope',
      scope,
      `must be 'client' (one bucket per client across the routes it covers) or 'route' (one per client per route)`,
    );

  if (
    policy.name !== undefined &&
    (typeof policy.name !== 'string' || !NAME.test(policy.name) || policy.name.length > MAX_NAME_LENGTH)
  ) {
    fail(
      'name',
      policy.name,
      `must be a string of 1 to ${MAX_NAME_LENGTH} visible ASCII characters, without spaces or braces`,
    );
  }
  const name = policy.name === undefined ? defaultPolicyName(defaultName) : policy.name;

  const outcome = resolveOutcomeFields(policy, fail);
  const rules = tiers === undefined ? [rule] : [...tiers.rules.values()];
  const quotaAnchor = quotaAnchorOf(policy, rules, fail);
  if (rules.some((each) => each.algorithm === 'concurrency')) {
    if (outcome.adaptive !== undefined)
      conflict(`"adaptive" does not apply to "concurrency": requests in flight are not a rate to scale`);
    if (outcome.count === 'failures')
      conflict(`"count: 'failures'" does not apply to "concurrency": every request gives its slot back when it ends`);
  }
  if (outcome.adaptive !== undefined && rules.some((each) => each.algorithm === 'quota'))
    conflict(`"adaptive" does not apply to a quota: a quota per period is not a rate to scale by latency`);
  // the adaptive factor scales every tier's rate: none may pass the bound on refilling
  const min = outcome.adaptive?.min ?? 1;
  for (const [tier, each] of tiers === undefined ? [[undefined, rule] as const] : tiers.rules) {
    if (refillTooSlow(each, min))
      fail('adaptive.min', min, factorAtLeast(each, tier === undefined ? 'the policy' : `tier "${tier}"`));
  }
  const resolved: ResolvedPolicy =
    tiers === undefined
      ? { name, rule, cost, defaultCost, key, scope, ...outcome }
      : { name, rule, cost, defaultCost, key, scope, tiers, ...outcome };
  if (quotaAnchor !== undefined) resolved.quotaAnchor = quotaAnchor;
  return resolved;
}

/**
 * A quota's anchor function, given on the policy (not a tier, where a function would be one per
 * tier of one identity's dates): `undefined` when none is, or the policy has no quota.
 */
function quotaAnchorOf(policy: RateLimitPolicy, rules: readonly Rule[], fail: Fail): QuotaAnchor | undefined {
  if (policy.tiers !== undefined && typeof policy.tiers === 'object' && policy.tiers !== null) {
    for (const [tier, limits] of Object.entries(policy.tiers)) {
      if (typeof limits?.anchor === 'function')
        fail(
          `tiers.${tier}.anchor`,
          limits.anchor,
          `must be given on the policy, not a tier: one function gives every tier's period start`,
        );
    }
  }
  if (typeof policy.anchor !== 'function') return undefined;
  if (!rules.some((rule) => rule.algorithm === 'quota'))
    fail('anchor', policy.anchor, `can be a function for 'quota' only (a period's start), and no tier is a quota`);
  return policy.anchor;
}

/**
 * A policy's (or a tier's) limits as a rule, checked against its cost, with the policy's block.
 *
 * @throws InvalidPolicyError through `fail` or `conflict`
 */
function resolveRule(
  limits: TierLimits,
  cost: CostSource,
  defaultCost: number,
  block: Pick<Rule, 'blockMs' | 'blockResets'> | undefined,
  fail: Fail,
  conflict: (problem: string) => never,
): Rule {
  // A field set to null is a value, and refused as one: only a field left out takes its default.
  const algorithm: Algorithm = limits.algorithm === undefined ? 'token_bucket' : limits.algorithm;
  if (!ALGORITHMS.includes(algorithm)) {
    fail('algorithm', algorithm, `must be one of ${ALGORITHMS.map((a) => `'${a}'`).join(', ')}`);
  }

  const counted = resolveCounted(limits, algorithm, fail, conflict);
  const { rps, burst, capacity } = counted ?? resolveRate(limits, fail, conflict);
  if (WINDOW_ALGORITHMS.has(algorithm) && (burst * 1000) / rps < 1) {
    conflict(
      `"${algorithm}" counts in windows of whole milliseconds, and burst / rps = ${burst} / ${rps} s is under 1 ms; lower "rps" or raise "burst"`,
    );
  }
  // A cost above the capacity is refused on every request, forever: surely not what was meant.
  if (typeof cost === 'number' && cost > burst) {
    conflict(
      `"cost" ${cost} is more than "${capacity}" ${burst}, so no request could ever pass; lower "cost" or raise "${capacity}"`,
    );
  }
  if (typeof cost !== 'number' && defaultCost > burst) {
    conflict(
      `"defaultCost" ${defaultCost} is more than "${capacity}" ${burst}, so every request without a usable cost would be refused; lower "defaultCost" or raise "${capacity}"`,
    );
  }
  if (block !== undefined && counted !== undefined)
    conflict(
      algorithm === 'quota'
        ? `"blockFor" does not apply to a quota: its refusals hold until its period ends already`
        : `"blockFor" does not apply to "concurrency": a slot comes back when a request ends, and a block would keep the client out with slots free`,
    );
  const anchor = resolveAnchor(limits.anchor, algorithm, fail);
  const rule: Rule = block === undefined ? { algorithm, rps, burst } : { algorithm, rps, burst, ...block };
  if (counted?.calendar !== undefined) return { ...rule, calendar: counted.calendar };
  return anchor === undefined ? rule : { ...rule, anchor };
}

/** Seconds a `period` lasts at the most (a month of 31 days, a leap year): a quota's rule's window until a request names its period. */
const PERIOD_SECONDS: Record<QuotaPeriod, number> = {
  day: 86_400,
  week: 7 * 86_400,
  month: 31 * 86_400,
  year: 366 * 86_400,
};

/**
 * The limits of a `concurrency` or `quota` policy (or tier), which say them as `limit` with a
 * `lease` or a `period`, as a rule's rate and capacity; `undefined` for any other algorithm, which
 * may give neither `lease` nor `period` nor `timeZone`. A concurrency rule's window is its lease;
 * a quota's, the longest its period can be, until a request names its period (see `quotaRule`).
 */
function resolveCounted(
  limits: TierLimits,
  algorithm: Algorithm,
  fail: Fail,
  conflict: (problem: string) => never,
): { rps: number; burst: number; capacity: 'limit'; calendar?: QuotaCalendar } | undefined {
  if (algorithm !== 'concurrency' && algorithm !== 'quota') {
    if (limits.lease !== undefined)
      fail('lease', limits.lease, `applies to 'concurrency' only, and the algorithm is '${algorithm}'`);
    for (const field of ['period', 'timeZone'] as const)
      if (limits[field] !== undefined)
        fail(field, limits[field], `applies to 'quota' only, and the algorithm is '${algorithm}'`);
    return undefined;
  }
  for (const field of ['rps', 'tokensPerSecond', 'burst', 'window'] as const) {
    if (limits[field] !== undefined)
      conflict(
        algorithm === 'quota'
          ? `"${field}" does not apply to a quota: say it as "limit" per "period", such as { limit: 10000, period: 'month' }`
          : `"${field}" does not apply to "concurrency": say it as "limit" requests in flight, each for at most "lease", such as { limit: 2, lease: '5m' }`,
      );
  }
  if (limits.limit === undefined)
    conflict(
      `"${algorithm}" needs a "limit", the ${algorithm === 'quota' ? 'requests allowed per period' : 'requests allowed in flight'}`,
    );
  if (!isWholeAtLeastOne(limits.limit)) fail('limit', limits.limit, 'must be a whole number >= 1');
  const limit = limits.limit;
  if (algorithm === 'concurrency') {
    for (const field of ['period', 'timeZone'] as const)
      if (limits[field] !== undefined)
        fail(field, limits[field], `applies to 'quota' only, and the algorithm is 'concurrency'`);
    if (limits.lease === undefined)
      conflict(
        `"concurrency" needs a "lease", the longest a request holds its slot, such as '5m' (a slot held longer is reclaimed)`,
      );
    const seconds =
      typeof limits.lease === 'number' || typeof limits.lease === 'string' ? parseWindow(limits.lease) : undefined;
    if (seconds === undefined || seconds * 1000 < 1)
      fail(
        'lease',
        limits.lease,
        `must be a duration of at least 1 ms: seconds, or a string such as '30s', '5m', '1h'`,
      );
    if (seconds > MAX_REFILL_DAYS * 86_400) fail('lease', limits.lease, `must be at most ${MAX_REFILL_DAYS} days`);
    return { rps: limit / seconds, burst: limit, capacity: 'limit' };
  }
  if (limits.lease !== undefined)
    fail('lease', limits.lease, `applies to 'concurrency' only, and the algorithm is 'quota'`);
  if (limits.period === undefined) conflict(`"quota" needs a "period": 'day', 'week', 'month' or 'year'`);
  if (!QUOTA_PERIODS.includes(limits.period)) fail('period', limits.period, `must be 'day', 'week', 'month' or 'year'`);
  const timeZone = limits.timeZone === undefined ? 'UTC' : limits.timeZone;
  if (!isTimeZone(timeZone))
    fail('timeZone', timeZone, `must be an IANA time zone such as 'UTC', 'Europe/Berlin' or 'America/New_York'`);
  return {
    rps: limit / PERIOD_SECONDS[limits.period],
    burst: limit,
    capacity: 'limit',
    calendar: { period: limits.period, timeZone },
  };
}

/** `anchor` as a rule's (`undefined`: the clock's windows), for `fixed_window` only; a quota's function is the policy's (see `quotaAnchorOf`). */
function resolveAnchor(anchor: unknown, algorithm: Algorithm, fail: Fail): 'first-request' | undefined {
  if (anchor === undefined) return undefined;
  if (algorithm === 'quota') {
    if (typeof anchor !== 'function')
      fail(
        'anchor',
        anchor,
        `must be a function (ctx, request) => Date | number | undefined (or a promise of one): an identity's own period start, such as its billing date`,
      );
    return undefined;
  }
  if (typeof anchor === 'function')
    fail(
      'anchor',
      anchor,
      `can be a function for 'quota' only (a period's start), and the algorithm is '${algorithm}'`,
    );
  if (anchor !== 'clock' && anchor !== 'first-request')
    fail(
      'anchor',
      anchor,
      `must be 'clock' (windows on the clock's grid) or 'first-request' (a window starts at a client's first request)`,
    );
  if (algorithm !== 'fixed_window')
    fail('anchor', anchor, `applies to 'fixed_window' only, and the algorithm is '${algorithm}'`);
  return anchor === 'first-request' ? anchor : undefined;
}

/** The fields of `blockFor` as an object (`BlockFor`). */
const BLOCK_FIELDS = ['duration', 'then'];

/**
 * `blockFor` as a rule's fields: `blockMs` in whole milliseconds, parsed as a window is and bounded
 * alike, and `blockResets` for `then: 'reset'` (`undefined`: no block).
 */
function resolveBlock(
  blockFor: RateLimitPolicy['blockFor'],
  fail: Fail,
): Pick<Rule, 'blockMs' | 'blockResets'> | undefined {
  if (blockFor === undefined) return undefined;
  if (typeof blockFor !== 'object' || blockFor === null || Array.isArray(blockFor))
    return { blockMs: resolveBlockMs('blockFor', blockFor, fail) };
  for (const field of Object.keys(blockFor)) {
    if (!BLOCK_FIELDS.includes(field))
      fail(
        `blockFor.${field}`,
        (blockFor as unknown as Record<string, unknown>)[field],
        `is not a field of blockFor (the fields are ${BLOCK_FIELDS.join(', ')})`,
      );
  }
  const { duration, then = 'keep' } = blockFor;
  if (duration === undefined)
    fail('blockFor.duration', duration, `is required: seconds, or a string such as '30s', '15m', '1h', '1d'`);
  const blockMs = resolveBlockMs('blockFor.duration', duration, fail);
  if (then !== 'keep' && then !== 'reset')
    fail(
      'blockFor.then',
      then,
      `must be 'keep' (the bucket as the refusals left it when the block ends) or 'reset' (full again)`,
    );
  return then === 'reset' ? { blockMs, blockResets: true } : { blockMs };
}

/** A block's duration in whole milliseconds, parsed as a window is and bounded alike. */
function resolveBlockMs(field: string, duration: unknown, fail: Fail): number {
  const seconds = typeof duration === 'number' || typeof duration === 'string' ? parseWindow(duration) : undefined;
  const blockMs = seconds === undefined ? 0 : Math.round(seconds * 1000);
  if (blockMs < 1)
    fail(
      field,
      duration,
      `must be a duration of at least 1 ms: seconds, or a string such as '30s', '15m', '1h', '1d'${field === 'blockFor' ? `, or { duration, then: 'keep' | 'reset' }` : ''}`,
    );
  if (blockMs > MAX_REFILL_DAYS * 86_400_000) fail(field, duration, `must be at most ${MAX_REFILL_DAYS} days`);
  return blockMs;
}

function resolveRate(
  policy: TierLimits,
  fail: Fail,
  conflict: (problem: string) => never,
): { rps: number; burst: number; capacity: 'burst' | 'limit' } {
  if (policy.rps !== undefined && policy.tokensPerSecond !== undefined && policy.rps !== policy.tokensPerSecond) {
    conflict(`"rps" and "tokensPerSecond" are the same setting; give one`);
  }
  const rateField = policy.rps !== undefined ? 'rps' : 'tokensPerSecond';
  const rate = policy[rateField];

  if (rate !== undefined && (policy.limit !== undefined || policy.window !== undefined)) {
    conflict(
      `both "${rateField}" and "${policy.limit !== undefined ? 'limit' : 'window'}" given; say it as rps + burst or as limit + window`,
    );
  }

  if (rate !== undefined) {
    if (!isPositive(rate)) fail(rateField, rate, 'must be a positive number (tokens per second)');
    if (rate > MAX_RPS) fail(rateField, rate, `must be at most ${MAX_RPS} (tokens per second)`);
    const burst = policy.burst === undefined ? Math.max(1, Math.ceil(rate)) : policy.burst;
    if (!isWholeAtLeastOne(burst)) fail('burst', policy.burst, 'must be a whole number >= 1');
    if (burst / rate > MAX_REFILL_DAYS * 86_400) {
      conflict(
        `burst / rps = ${burst} / ${rate} s is more than ${MAX_REFILL_DAYS} days, the longest a bucket may take to refill; raise "${rateField}" or lower "burst"`,
      );
    }
    return { rps: rate, burst, capacity: 'burst' };
  }

  if (policy.limit === undefined && policy.window === undefined) {
    conflict('give "rps" (and "burst") or "limit" and "window"');
  }
  if (policy.burst !== undefined) conflict(`"burst" goes with "rps"; with "limit" and "window" the burst is the limit`);
  if (policy.limit === undefined) conflict(`"window" needs a "limit", the requests allowed per window`);
  if (!isWholeAtLeastOne(policy.limit)) fail('limit', policy.limit, 'must be a whole number >= 1');
  if (policy.window === undefined) conflict(`"limit" needs a "window" such as '1m'`);
  const seconds = parseWindow(policy.window);
  if (seconds === undefined) {
    fail('window', policy.window, `must be a positive number of seconds or a duration such as '10s', '1m', '1h', '1d'`);
  }
  if (seconds > MAX_REFILL_DAYS * 86_400) fail('window', policy.window, `must be at most ${MAX_REFILL_DAYS} days`);
  const limit = policy.limit;
  if (limit / seconds > MAX_RPS) {
    conflict(
      `limit / window = ${limit} / ${seconds} s is more than ${MAX_RPS} tokens per second; lower "limit" or lengthen "window"`,
    );
  }
  return { rps: limit / seconds, burst: limit, capacity: 'limit' };
}
