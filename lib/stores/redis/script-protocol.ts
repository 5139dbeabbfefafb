import type { Outcome } from '../../algorithms/algorithm.types.js';
import type { RateLimitRequest } from '../rate-limit-store.interface.js';

/**
 * How the store talks to its two scripts (`DECIDE_LUA` and `REFUND_LUA` in `decide.lua.ts`): what
 * a call's KEYS and ARGV carry, and what its reply holds. The scripts read exactly this; they
 * point back here.
 *
 * Every call: ARGV[1] is the clock, integer ms, or '' to use Redis `TIME` (the only clock outside
 * tests; see `RedisClock.scriptNow` and `clock` in `bucket-io.lua.ts`). `RedisScripts` puts it in
 * front of the arguments encoded here, which start at ARGV[2].
 *
 * Decide call (`appendRequest`, request after request):
 *
 * KEYS                 bucket keys of every request's policies, request after request
 * then per request, from b = 1 (then b moves past the request's arguments):
 * ARGV[b + 1]          n, its number of policies (its keys are the next n of KEYS)
 * ARGV[b + 2]          '1' to charge when every policy admits, '0' to only look (peek)
 * ARGV[b + 3]          deadline, integer ms on the script's clock: when the caller stops waiting
 *                      (see `RedisClock.deadline`); past it the request is not decided and
 *                      charges nothing; '' for none
 * ARGV[b + 4 + 6(i-1)] algorithm of policy i ('token_bucket', 'fixed_window', ...)
 * ARGV[b + 5 + 6(i-1)] rps, tokens per second, as a decimal string (may be fractional)
 * ARGV[b + 6 + 6(i-1)] burst, tokens
 * ARGV[b + 7 + 6(i-1)] block, integer ms a refusal blocks for; '0' for none
 * ARGV[b + 8 + 6(i-1)] a window's scaled limit (`Rule.limit`), tokens (may be fractional); '' for none
 * ARGV[b + 9 + 6(i-1)] cost, tokens (may be fractional)
 *
 * Its reply (`decodeDecideReply`): per request 0 when it was past its deadline, else 1 and then
 * `REPLY_WIDTH` integers per policy: allowed (0/1), remaining (tokens), retryMs (-1: never),
 * fullMs (until full), nextMs (until one more token), delayMs, blockedMs (until the block ends,
 * 0: none), at (ms, the time the state is as of: what a refund names). Then the script's now (ms).
 *
 * Refund call (`encodeRefund`), giving back what a decide call charged, policy after policy:
 *
 * KEYS[i]              bucket key of policy i
 * ARGV[2 + 7(i-1)]     algorithm of policy i
 * ARGV[3 + 7(i-1)]     rps, tokens per second
 * ARGV[4 + 7(i-1)]     burst, tokens
 * ARGV[5 + 7(i-1)]     block, integer ms a refusal blocks for; '0' for none
 * ARGV[6 + 7(i-1)]     a window's scaled limit, tokens; '' for none
 * ARGV[7 + 7(i-1)]     cost the charge took, tokens
 * ARGV[8 + 7(i-1)]     at of the charged state (from the decide reply), integer ms
 *
 * Its reply (`decodeAnswer`): `REPLY_WIDTH` integers per policy as a decide reply's, for the
 * buckets as they are after the refund (allowed 1, no delay); then the script's now.
 */

/** Numbers a reply holds per policy (see above). */
export const REPLY_WIDTH = 8;
/** Arguments a decide call takes per request before its policies': n, charge, deadline. */
export const DECIDE_HEAD = 3;
/** Arguments a decide call takes per policy, after its request's `DECIDE_HEAD`. */
export const DECIDE_ARGS = 6;
/** Arguments a refund call takes per policy. */
export const REFUND_ARGS = 7;

/** A script's answer for one request: per policy, an outcome and the time its state is as of. */
export interface Answer {
  outcomes: Outcome[];
  /** Per policy, ms on the script's clock: what a refund of its charge names. */
  at: number[];
}

/** A decide call's reply: each request's answer (`undefined`: past its deadline, not decided), and the script's clock. */
export interface DecideReply {
  answers: (Answer | undefined)[];
  /** The script's now, ms. */
  now: number;
}

/**
 * Appends a request to a decide call's `keys` and `args` (ARGV from 2 on). Returns where in
 * `args` its deadline goes, which is left '' (none) until the call is sent.
 */
export function appendRequest(
  keys: string[],
  args: string[],
  requests: readonly RateLimitRequest[],
  charge: boolean,
): number {
  const deadlineAt = args.length + 2;
  args.push(String(requests.length), charge ? '1' : '0', '');
  for (const { key, rule, cost } of requests) {
    keys.push(key);
    args.push(
      rule.algorithm,
      String(rule.rps),
      String(rule.burst),
      rule.blockMs === undefined ? '0' : String(rule.blockMs),
      rule.limit === undefined ? '' : String(rule.limit),
      String(cost),
    );
  }
  return deadlineAt;
}

/** A refund call's keys and arguments (ARGV from 2 on), for requests of one hash slot charged at `at` (from their decide reply). */
export function encodeRefund(
  requests: readonly RateLimitRequest[],
  at: readonly number[],
): { keys: string[]; args: string[] } {
  const keys: string[] = [];
  const args: string[] = [];
  requests.forEach(({ key, rule, cost }, i) => {
    keys.push(key);
    args.push(
      rule.algorithm,
      String(rule.rps),
      String(rule.burst),
      String(rule.blockMs ?? 0),
      rule.limit === undefined ? '' : String(rule.limit),
      String(cost),
      String(at[i]),
    );
  });
  return { keys, args };
}

/** `count` policies' outcomes from a script reply, `REPLY_WIDTH` numbers each from `start`. */
export function decodeAnswer(raw: readonly number[], start: number, count: number): Answer {
  const outcomes: Outcome[] = [];
  const at: number[] = [];
  for (let i = 0; i < count; i++) {
    const base = start + i * REPLY_WIDTH;
    outcomes.push({
      allowed: raw[base] === 1,
      remaining: raw[base + 1],
      retryMs: raw[base + 2],
      fullMs: raw[base + 3],
      nextMs: raw[base + 4],
      delayMs: raw[base + 5],
      blockedMs: raw[base + 6],
      at: raw[base + 7],
    });
    at.push(raw[base + 7]);
  }
  return { outcomes, at };
}

/** A decide call's reply, for requests of `counts[j]` policies each, in the order they were appended. */
export function decodeDecideReply(raw: readonly number[], counts: readonly number[]): DecideReply {
  const answers: (Answer | undefined)[] = new Array<Answer | undefined>(counts.length);
  let at = 0;
  for (let j = 0; j < counts.length; j++) {
    if (raw[at] === 0) {
      answers[j] = undefined;
      at += 1;
      continue;
    }
    answers[j] = decodeAnswer(raw, at + 1, counts[j]);
    at += 1 + counts[j] * REPLY_WIDTH;
  }
  return { answers, now: raw[raw.length - 1] };
}
