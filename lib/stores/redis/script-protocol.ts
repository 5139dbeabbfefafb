import type { AlgorithmDescriptor, Held, Outcome, Rule } from '../../algorithms/algorithm.types.js';
import { settle } from '../../algorithms/decide.js';
import { ALGORITHM_DESCRIPTORS } from '../../algorithms/registry.js';
import { storeReplyDisagrees } from '../../rate-limit.messages.js';
import { RateLimitStoreError } from '../rate-limit-store.error.js';
import type { RateLimitRequest } from '../rate-limit-store.interface.js';

/**
 * How the store talks to its calls (`decide_call` and `refund_call` in `decide.lua.ts`, `flat_call`
 * in `flat.lua.ts`, run as scripts or as the functions of a library): what a call's KEYS and ARGV
 * carry, and what its reply holds. The Lua reads exactly this; it points back here.
 *
 * Every call: ARGV[1] is the clock, integer ms, or '' to use Redis `TIME` (the only clock outside
 * tests; see `RedisClock.scriptNow` and `clock` in `bucket-io.lua.ts`). `RedisScripts` puts it in
 * front of the arguments encoded here, which start at ARGV[2].
 *
 * A rule takes `RULE_ARGS` arguments: its algorithm ('token_bucket', 'fixed_window', ...; a quota
 * names its period's start after it, `Rule.origin` in integer ms: 'quota@1767225600000'), rps
 * (tokens per second, a decimal string, may be fractional), burst (tokens), block (integer ms a
 * refusal blocks for, negated for a block whose end resets the bucket, `Rule.blockResets`: '-900000';
 * '0' for none), a window's scaled limit (`Rule.limit`, tokens, may be
 * fractional; '' for none), negated for a window anchored at a key's first request (`Rule.anchor`;
 * its limit then always given: '-10'; see `limitArg`), and the tokens a settle may take its bucket
 * past empty (`Rule.debt`, a whole number; '' for a rule that does not settle).
 *
 * Decide call (`encodeDecide`): a call names each key and each rule once, and each request only
 * what it does not share with the others.
 *
 * KEYS                 the bucket keys of the call, each once, in the order first named
 * ARGV[2]              R, the number of rules
 * ARGV[3]              '1' when each policy names its key (a key is named more than once in the
 *                      call), '0' when the policies take KEYS in order, one each
 * ARGV[4]              the call's deadline, integer ms on its clock: when the callers stop waiting
 *                      (see `RedisClock.deadline`); a request past its deadline is not decided and
 *                      charges nothing; '' for none
 * ARGV[5]              '1' when every request is plain: one policy, charged at cost 1, by the
 *                      call's deadline (no heads follow); else '0'
 * ARGV[6]              the number of requests
 * ARGV[7 + 6(r-1)] ... rule r, its `RULE_ARGS` arguments
 * then per request:
 *   head               (unless plain) n * 8 + 4 (its own deadline follows) + 2 (only looks: a
 *                      peek) + 1 (its policies' costs follow), n its number of policies
 *   deadline           (when the head says so) as the call's, for this request
 *   then per policy:   its key's index in KEYS (from 1; only when ARGV[3] is '1'), its rule's
 *                      index (from 1; only when R > 1), its cost (only when the head says so;
 *                      else 1)
 *
 * The flat call (`DecideCall.flat`): a call of plain requests of one rule without a block or a
 * debt (a rule that settles always takes the general call), of
 * an algorithm whose descriptor has `flatArgs` (those whose state is one string: all but the
 * sliding window log and `concurrency`), which `flat_call` (`flat.lua.ts`) decides, takes only
 * what such a call needs:
 *
 * KEYS                 the bucket keys of the call, each once, in the order first named
 * ARGV[2]              the call's deadline, as above
 * ARGV[3]              the rule's algorithm
 * ARGV[4], ARGV[5]     its rps and burst
 * then                 its `flatArgs`, in order: 'limit', its scaled limit, '' for none, negated
 *                      when anchored (as a rule's, see `limitArg`: the windows, fixed_window,
 *                      quota, sliding_window_counter); 'origin', its period's start,
 *                      `Rule.origin`, integer ms (a quota, whose algorithm, ARGV[3], is then
 *                      plain 'quota')
 * then                 when the call names a key more than once: each request's key index (from
 *                      1); else request i takes KEYS[i]
 *
 * Both replies (`decodeDecideReply`): `{ values..., answers..., now }`. values: each key's value as
 * the call read it when it started (nil: none), one per key. Then the answers: per request
 * 0 when it was past its deadline, else 2 when every policy admitted it (1 when one refused), then
 * for each of its policies whose algorithm has no `decodeStored` (the sliding window log)
 * `REPLY_WIDTH` integers: allowed (0/1), remaining (tokens; below 0, minus the debt: the whole
 * tokens the bucket of a rule that settles owes past empty, `Outcome.debt`, remaining then being
 * 0), retryMs (-1: never), fullMs (until full), nextMs (until one more token), delayMs, blockedMs (until the block ends, 0: none), at (ms,
 * the time the state is as of: what a refund names). Every other policy's figures the app derives from those
 * values as the script did (`settle`, request after request): Redis, which does not scale out,
 * only reads, checks and writes. Last, now: the call's clock, ms.
 *
 * Refund call (`encodeRefund`), giving back what a decide call charged, or settling a charge
 * (`RedisStore.settle`), policy after policy:
 *
 * KEYS[i]              bucket key of policy i
 * ARGV[2 + 8(i-1)] ... its rule's `RULE_ARGS` arguments, the amount (tokens, signed: what to give
 *                      back, for a refund the cost the charge took; below 0, what to take more,
 *                      past empty as far as the rule's debt: a settle above what was taken; '0'
 *                      for nothing), and the `at` of the charged state (from the decide reply, or
 *                      the settle's that last took more, integer ms)
 *
 * Its reply (`decodeAnswer`): `REPLY_WIDTH` integers per policy as a decide reply's, for the
 * buckets as they are after, as a peek of a request of cost 0 sees them (allowed 1 unless in debt
 * or blocked, no delay; what a refund of a request another hash slot refused answers keeps its
 * policies' own verdicts: see `RedisStore.across`); then the script's now.
 */

/** Numbers a reply holds per policy the script reports itself (see above). */
export const REPLY_WIDTH = 8;
/** Arguments a rule takes. */
export const RULE_ARGS = 6;
/** Arguments a refund call takes per policy: its rule's, its amount and its charge's time. */
export const REFUND_ARGS = RULE_ARGS + 2;

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

/** One request of a decide call: its policies, whether it charges, its deadline ('' for none). */
export interface CallRequest {
  requests: readonly RateLimitRequest[];
  charge: boolean;
  deadline: string;
}

/** A decide call as it is sent, and where each policy's key is among its KEYS (request after request, from 0). */
export interface DecideCall {
  keys: string[];
  args: string[];
  keyIndexes: number[];
  /** Whether it is a flat call (see above), which `flat_call` decides, else `decide_call`. */
  flat: boolean;
}

/**
 * What a flat call takes after rps and burst, by the name of each algorithm it decides (see
 * `AlgorithmDescriptor.flatArgs`); a name not here (any string a caller gave) takes the general call.
 */
const FLAT_ARGS: ReadonlyMap<string, NonNullable<AlgorithmDescriptor['flatArgs']>> = new Map(
  Object.entries(ALGORITHM_DESCRIPTORS).flatMap(([algorithm, { flatArgs }]) =>
    flatArgs === undefined ? [] : [[algorithm, flatArgs] as const],
  ),
);

/** A rule's arguments (see `RULE_ARGS`). */
function ruleArgs(rule: Rule): string[] {
  return [
    rule.origin === undefined ? rule.algorithm : `${rule.algorithm}@${rule.origin}`,
    String(rule.rps),
    String(rule.burst),
    rule.blockMs === undefined ? '0' : rule.blockResets === true ? `-${rule.blockMs}` : String(rule.blockMs),
    limitArg(rule),
    rule.debt === undefined ? '' : String(rule.debt),
  ];
}

/**
 * A rule's window limit argument: its scaled limit (`Rule.limit`), '' for none; for a window
 * anchored at a key's first request (`Rule.anchor`), minus its limit (`burst` when unscaled), so a
 * clock-aligned rule, the common one, passes and reads what it did before (a limit is never below 0).
 */
function limitArg(rule: Rule): string {
  if (rule.anchor !== undefined) return `-${rule.limit ?? rule.burst}`;
  return rule.limit === undefined ? '' : String(rule.limit);
}

/** The keys and arguments (ARGV from 2 on) of a decide call for `calls`, request after request. */
export function encodeDecide(calls: readonly CallRequest[]): DecideCall {
  const keys: string[] = [];
  const keyIndex = new Map<string, number>();
  const keyIndexes: number[] = [];
  const rules = new Map<Rule, number>();
  const rulesArgs: string[] = [];
  for (const { requests } of calls) {
    for (const { key, rule } of requests) {
      let k = keyIndex.get(key);
      if (k === undefined) keyIndex.set(key, (k = keys.push(key) - 1));
      keyIndexes.push(k);
      if (!rules.has(rule)) {
        rules.set(rule, rules.size + 1);
        rulesArgs.push(...ruleArgs(rule));
      }
    }
  }
  const keyed = keyIndexes.length > keys.length;
  const deadline = calls.length === 0 ? '' : calls[0].deadline;
  const plain = calls.every(
    (call) => call.charge && call.deadline === deadline && call.requests.length === 1 && call.requests[0].cost === 1,
  );
  const [rule] = rules.keys();
  // a rule that settles (a debt) takes the general call: the flat call's clamps know no debt
  const flatArgs =
    plain && rules.size === 1 && rule.blockMs === undefined && rule.debt === undefined
      ? FLAT_ARGS.get(rule.algorithm)
      : undefined;
  if (flatArgs !== undefined) {
    const args = [deadline, rule.algorithm, String(rule.rps), String(rule.burst)];
    // 'origin' even for a rule without one (`quota.ts` takes none as 0): the call reads it before any key index
    for (const arg of flatArgs) args.push(arg === 'limit' ? limitArg(rule) : String(rule.origin ?? 0));
    if (keyed) for (const k of keyIndexes) args.push(String(k + 1));
    return { keys, args, keyIndexes, flat: true };
  }
  const args = [String(rules.size), keyed ? '1' : '0', deadline, plain ? '1' : '0', String(calls.length), ...rulesArgs];
  let p = 0;
  for (const call of calls) {
    const { requests } = call;
    const costs = requests.some((request) => request.cost !== 1);
    const ownDeadline = call.deadline !== deadline;
    if (!plain)
      args.push(String(requests.length * 8 + (ownDeadline ? 4 : 0) + (call.charge ? 0 : 2) + (costs ? 1 : 0)));
    if (ownDeadline) args.push(call.deadline);
    for (const { rule, cost } of requests) {
      if (keyed) args.push(String(keyIndexes[p] + 1));
      if (rules.size > 1) args.push(String(rules.get(rule)));
      if (costs) args.push(String(cost));
      p++;
    }
  }
  return { keys, args, keyIndexes, flat: false };
}

/**
 * A refund call's keys and arguments (ARGV from 2 on), for requests of one hash slot charged at
 * `at` (from their decide reply): each `amounts[i]` tokens given back, or taken more when below 0.
 */
export function encodeRefund(
  requests: readonly RateLimitRequest[],
  amounts: readonly number[],
  at: readonly number[],
): { keys: string[]; args: string[] } {
  const keys: string[] = [];
  const args: string[] = [];
  requests.forEach(({ key, rule }, i) => {
    keys.push(key);
    args.push(...ruleArgs(rule), String(amounts[i]), String(at[i]));
  });
  return { keys, args };
}

/**
 * The outcome of `REPLY_WIDTH` numbers of a reply from `start`. A remaining below 0 is a debt, minus
 * itself (see above): remaining 0, and `debt` the tokens owed; absent otherwise, as `report` leaves it.
 */
function outcomeAt(raw: readonly number[], start: number): Outcome {
  const owed = raw[start + 1];
  const outcome: Outcome = {
    allowed: raw[start] === 1,
    remaining: owed < 0 ? 0 : owed,
    retryMs: raw[start + 2],
    fullMs: raw[start + 3],
    nextMs: raw[start + 4],
    delayMs: raw[start + 5],
    blockedMs: raw[start + 6],
    at: raw[start + 7],
  };
  if (owed < 0) outcome.debt = -owed;
  return outcome;
}

/** `count` policies' outcomes from a script reply, `REPLY_WIDTH` numbers each from `start`. */
export function decodeAnswer(raw: readonly number[], start: number, count: number): Answer {
  const outcomes: Outcome[] = [];
  const at: number[] = [];
  for (let i = 0; i < count; i++) {
    const outcome = outcomeAt(raw, start + i * REPLY_WIDTH);
    outcomes.push(outcome);
    at.push(outcome.at!);
  }
  return { outcomes, at };
}

/**
 * A decide call's reply (`[values..., answers..., now]`, see above) for the call `encodeDecide` made of
 * `calls`: each request's verdict as Redis gave it, its figures derived here from the values the
 * call read, request after request, as the script went (a state a request stored is what the next
 * one on its key reads).
 *
 * @throws RateLimitStoreError when a verdict is not the one the values give (a bug of the script)
 */
export function decodeDecideReply(raw: unknown, calls: readonly CallRequest[], call: DecideCall): DecideReply {
  const codes = raw as number[];
  const values = raw as (string | null)[];
  const now = codes[codes.length - 1];
  /** What the call stored by key index so far (`null`: deleted); a key not here reads its value. */
  const stored = new Map<number, Held | null>();
  const answers: (Answer | undefined)[] = new Array<Answer | undefined>(calls.length);
  let c = call.keys.length;
  let p = 0;
  calls.forEach(({ requests, charge }, j) => {
    const code = codes[c++];
    if (code === 0) {
      p += requests.length;
      return;
    }
    const allowed = code === 2;
    const outcomes: Outcome[] = new Array<Outcome>(requests.length);
    const at: number[] = new Array<number>(requests.length);
    let admitsAll = true;
    requests.forEach((request, i) => {
      const k = call.keyIndexes[p++];
      const decode: ((raw: string) => Held) | undefined = ALGORITHM_DESCRIPTORS[request.rule.algorithm].decodeStored;
      if (decode === undefined) {
        outcomes[i] = outcomeAt(codes, c);
        c += REPLY_WIDTH;
      } else {
        const before = stored.get(k);
        const value = values[k];
        const state = before === undefined ? (value === null ? undefined : decode(value)) : (before ?? undefined);
        const settled = settle({ state, rule: request.rule, cost: request.cost }, now, allowed, charge);
        if (settled.next !== undefined) stored.set(k, settled.outcome.fullMs === 0 ? null : settled.next);
        outcomes[i] = settled.outcome;
      }
      admitsAll &&= outcomes[i].allowed;
      at[i] = outcomes[i].at!;
    });
    if (allowed !== admitsAll) {
      const message = storeReplyDisagrees(
        requests.map((request) => request.policy),
        allowed,
      );
      throw new RateLimitStoreError(message, { reason: 'error' });
    }
    answers[j] = { outcomes, at };
  });
  return { answers, now };
}
