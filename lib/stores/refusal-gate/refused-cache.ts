import { type Outcome, RELEASED, type Rule, WINDOW_ALGORITHMS } from '../../algorithms/algorithm.types.js';
import { sameRule } from '../distinct-requests.js';
import type { RateLimitRequest } from '../rate-limit-store.interface.js';
import { waitForCost } from '../redis/wait-for-cost.js';

/** What the server last said of a request, as far as a request like it is certainly refused. */
interface Refusal {
  /** Local time the server decided, ms, at the earliest: what it reported is aged from here. */
  decidedAt: number;
  /** Local time until which a request like it is certainly refused, ms. */
  until: number;
  /** Every policy of the request, by bucket key: its rule, cost and outcome. */
  policies: Map<string, Policy>;
  /** Requests let through to the server together since this answer came (see `lookupTogether`). */
  letThrough: number;
}

/** One policy of a remembered request. */
interface Policy {
  /** Its rule as the request had it (a scaled window's limit included: see `sameAs`). */
  rule: Rule;
  cost: number;
  outcome: Outcome;
  /** Whether the cache knows how long the policy refuses a request like it: else only the server answers one. */
  timed: boolean;
}

const none = (): number => 0; // no call on the way behind one that lands

/** Most refused keys remembered; the oldest go first. */
const MAX_KEYS = 10_000;
/**
 * A wait rounds a fractional time up to whole ms (`ceil(43.000000001)` is 44), while the
 * admission test compares the unrounded amounts: the server may admit 1 ms before the reported wait.
 */
const ROUNDING_MS = 1;
/** How long a refusal that ran out still marks its key as contended, ms. */
const LINGER_MS = 1_000;
/** Longest a refusal is reused, ms, so the headers it answers with stay fresh. */
const MAX_AGE_MS = 5_000;

/**
 * What the server answered about buckets with no quota left, so that a flood from a client over its
 * limit costs no server call per refused request.
 *
 * Sound because quota only comes back with time: when the server says a request of `cost` fits in
 * `retryMs`, a request of the same cost on the same buckets cannot fit before then (what other
 * instances charge meanwhile only takes more), less the 1 ms a wait's rounding up may add. An
 * admitted request teaches as much: when it left fewer whole tokens than its cost, the next one
 * like it cannot fit before `cost` tokens are there, which its outcome times where it can (see
 * `waitForCost`); where it cannot, requests like it go to the server. The wait counts from
 * when the server decided, as the local clock saw it at the earliest (see `ServerAnswer`), so a refusal
 * is never reused for longer than the server would refuse. Only a `reset` brings quota back early: the
 * store forgets its own resets' keys; another instance's reset is seen once the cached refusal
 * has run out.
 *
 * A request is answered from here only when one of its keys is cached as refused and every
 * policy of the request, with the same rule and cost, was part of the request the server answered,
 * so the answer carries every policy's headers.
 *
 * A policy with a block (`Rule.blockMs`) starts it when the server refuses a request its bucket
 * refuses too, which a refusal answered here would skip: a request with such a policy is only
 * answered here while that policy's block, started by the server, holds (until it ends, even where a
 * bucket refuses for longer), even when another policy is what refuses it; never foreseen from
 * an admitted request's outcome or among requests let go together.
 */
export class RefusedCache {
  private readonly refusals = new Map<string, Refusal>();

  /** The outcomes for `requests` at local time `now` when the server would certainly refuse them, else `undefined`. */
  lookup(requests: readonly RateLimitRequest[], now: number): Outcome[] | undefined {
    for (const request of requests) {
      const refusal = this.refusals.get(request.key);
      if (refusal === undefined) continue;
      if (now >= refusal.until) {
        if (now >= refusal.until + LINGER_MS) this.refusals.delete(request.key);
        continue;
      }
      const outcomes = this.replay(refusal, requests, now - refusal.decidedAt);
      if (outcomes !== undefined) return outcomes;
    }
    return undefined;
  }

  /**
   * Like `lookup`, for requests that waited for the calls on their buckets and are let go together
   * when their answers came, so that those sent go to the server in one call and are decided in turn at
   * one instant: there, the requests after the first `room` of them like it cannot fit, whatever
   * the others do, where `room` is how many of them the buckets can hold by `now` at the most.
   * Each call that finds room counts as let through; the rest get refused outcomes.
   */
  lookupTogether(requests: readonly RateLimitRequest[], now: number): Outcome[] | undefined {
    const cached = this.lookup(requests, now);
    if (cached !== undefined) return cached;
    const refusal = this.refusals.get(requests[0].key);
    // a refusal answered here would not start a block that the server's own would, nor see a slot given back
    if (
      refusal === undefined ||
      requests.some(({ rule }) => rule.blockMs !== undefined || RELEASED.has(rule.algorithm))
    )
      return undefined;
    const elapsed = now - refusal.decidedAt;
    const rooms: number[] = [];
    for (const { key, rule, cost } of requests) {
      const policy = refusal.policies.get(key);
      if (policy === undefined || !sameAs(policy, rule, cost)) return undefined;
      rooms.push(room(policy, elapsed));
    }
    if (refusal.letThrough < Math.min(...rooms)) {
      refusal.letThrough++;
      return undefined;
    }
    return requests.map(({ key }, i) => {
      const outcome = agedOutcome(refusal.policies.get(key)!.outcome, elapsed);
      // how long is not known, only "not now": 1 ms, which a decision rounds up to its least, 1 s
      return rooms[i] > refusal.letThrough
        ? outcome
        : { ...outcome, allowed: false, retryMs: Math.max(1, outcome.retryMs) };
    });
  }

  /**
   * Learns from a charging request the server decided at local time `decidedAt` (at the earliest):
   * each of its keys that a request like it cannot pass for a while is remembered until then. A
   * key it passed (quota was there) is no longer refused, unless what is left would not cover
   * one more after the `behind(key)` calls still on their way on it: then it is remembered as
   * contended (a flood is about to run out), so that the requests that follow wait for those calls.
   * A key whose wait the outcome does not tell is remembered as contended only: requests on it go
   * to the server.
   */
  remember(
    requests: readonly RateLimitRequest[],
    outcomes: readonly Outcome[],
    decidedAt: number,
    behind: (key: string) => number = none,
  ): void {
    const charged = outcomes.every((outcome) => outcome.allowed);
    const waits = requests.map(({ rule, cost }, i) => waitAfter(outcomes[i], rule, cost, charged));
    // past the end of a block of the request, the server's refusal would start the next one
    let blocksEnd = MAX_AGE_MS;
    for (const { blockedMs } of outcomes) if (blockedMs > 0) blocksEnd = Math.min(blocksEnd, blockedMs);
    let policies: Refusal['policies'] | undefined;
    for (let i = 0; i < requests.length; i++) {
      const { key, cost } = requests[i];
      const wait = waits[i];
      if (wait === 0 && !(charged && (behind(key) + 1) * cost > outcomes[i].remaining)) {
        // quota was there: a refusal of this key is over (and its remaining stale); it lingers as a mark
        const refusal = this.refusals.get(key);
        if (refusal !== undefined) {
          refusal.until = Math.min(refusal.until, decidedAt);
          // refused by another policy, it took nothing here: those let through may not all take
          if (!charged) refusal.letThrough = 0;
        }
        continue;
      }
      policies ??= new Map(
        requests.map(({ key, rule, cost }, j) => [
          key,
          { rule, cost, outcome: asRefused(outcomes[j], waits[j]), timed: waits[j] !== undefined },
        ]),
      );
      // contended only (wait 0 or not known): refused by nothing here, but the next requests wait for the calls behind
      const until =
        decidedAt +
        (wait === undefined || wait === 0 ? 0 : wait < 0 ? blocksEnd : Math.min(wait - ROUNDING_MS, blocksEnd));
      this.refusals.delete(key); // re-inserted last: the Map's order is the eviction order
      this.refusals.set(key, { decidedAt, until, policies, letThrough: 0 });
      if (this.refusals.size > MAX_KEYS) this.refusals.delete(this.refusals.keys().next().value as string);
    }
  }

  /**
   * Whether a key of `requests` has been refused up to less than a second before local time
   * `now` (or still is), or was about to run out: a flood may be on it, so the calls on it in
   * flight are worth waiting for rather than sending another (see `RefusalGate`).
   */
  contended(requests: readonly RateLimitRequest[], now: number): boolean {
    for (const { key } of requests) {
      const refusal = this.refusals.get(key);
      if (refusal !== undefined && now < refusal.until + LINGER_MS) return true;
    }
    return false;
  }

  /** Forgets refusals of these keys (their buckets were reset). */
  forget(keys: readonly string[]): void {
    for (const key of keys) this.refusals.delete(key);
  }

  clear(): void {
    this.refusals.clear();
  }

  /**
   * The refusal's outcomes, `elapsed` ms on, when it covers exactly these requests, times every
   * policy, and every policy with a block is in it (charges since may have emptied its bucket).
   */
  private replay(refusal: Refusal, requests: readonly RateLimitRequest[], elapsed: number): Outcome[] | undefined {
    const outcomes: Outcome[] = [];
    for (const { key, rule, cost } of requests) {
      const policy = refusal.policies.get(key);
      if (policy === undefined || !policy.timed || !sameAs(policy, rule, cost)) return undefined;
      const outcome = agedOutcome(policy.outcome, elapsed);
      if (policy.rule.blockMs !== undefined && outcome.blockedMs === 0) return undefined;
      outcomes.push(outcome);
    }
    return outcomes;
  }
}

/**
 * Milliseconds from the decision until a request like this one (same cost) can pass the policy:
 * 0 when it could pass at once, -1 when it never can, `undefined` when the cache cannot tell. A
 * refused policy says so itself; after a charge, the charged outcome tells (`waitForCost`), but
 * not of a policy with a block: the refusal it foresees starts a block, which only the server can;
 * nor of a `concurrency` policy refused, whose slot a request may give back at any moment.
 */
function waitAfter(
  outcome: Outcome,
  rule: RateLimitRequest['rule'],
  cost: number,
  charged: boolean,
): number | undefined {
  // a slot may be given back at any moment: a refusal of it says nothing of the next request
  if (!outcome.allowed && RELEASED.has(rule.algorithm)) return undefined;
  if (!outcome.allowed) return outcome.retryMs;
  if (!charged) return 0;
  const wait = waitForCost(rule, cost, outcome);
  return wait !== 0 && rule.blockMs !== undefined ? undefined : wait;
}

/** The outcome a request like this one gets from the policy at the decision: refused for `wait` ms, if timed. */
function asRefused(outcome: Outcome, wait: number | undefined): Outcome {
  const retryMs = wait ?? 0;
  return { ...outcome, allowed: retryMs === 0, retryMs, delayMs: 0 };
}

/** Whether a remembered policy is the one a request has now (a factor that changed since makes it another). */
function sameAs(policy: Policy, rule: RateLimitRequest['rule'], cost: number): boolean {
  return sameRule(policy.rule, rule) && policy.cost === cost;
}

/**
 * How many requests of the policy's cost its bucket can hold `elapsed` ms after the decision, at
 * the most. Before `nextMs` (less the rounding) it holds fewer than `remaining + 1` tokens; then
 * a bucket that refills at `rps` gains no faster, and a window (`WINDOW_ALGORITHMS`) may be full.
 */
function room(
  { rule: { algorithm, rps, burst }, cost, outcome: { remaining, nextMs } }: Policy,
  elapsed: number,
): number {
  if (elapsed < nextMs - ROUNDING_MS) return Math.ceil((remaining + 1) / cost) - 1;
  const tokens = WINDOW_ALGORITHMS.has(algorithm)
    ? burst
    : Math.min(burst, remaining + 1 + ((elapsed - nextMs + ROUNDING_MS) * rps) / 1000);
  return Math.floor(tokens / cost);
}

/**
 * An outcome `elapsed` ms later, as far as time alone changes it: the wait less the time passed
 * and the rounding, so never longer than the server's own; remaining as it was.
 */
function agedOutcome(outcome: Outcome, elapsed: number): Outcome {
  const retryMs = outcome.retryMs <= 0 ? outcome.retryMs : Math.max(0, outcome.retryMs - ROUNDING_MS - elapsed);
  return {
    allowed: outcome.allowed || retryMs === 0,
    remaining: outcome.remaining,
    retryMs,
    fullMs: Math.max(0, outcome.fullMs - elapsed),
    nextMs: Math.max(0, outcome.nextMs - elapsed),
    delayMs: 0,
    blockedMs: Math.max(0, outcome.blockedMs - elapsed),
  };
}
