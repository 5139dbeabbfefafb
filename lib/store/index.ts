/**
 * `nestjs-ratelimit/store`: what a store of your own needs to decide exactly as `MemoryStore` and
 * `RedisStore` do. An entry of its own, so the package root never loads it.
 *
 * A store keeps each bucket's state wherever it likes and, per call, does the same four things:
 * 1. check the call: `distinctRequests` (each key once; a bad cost is the caller's error);
 * 2. read every key's state and `decideAll(entries, now, charge)`: every policy at once,
 *    all-or-nothing, on the store's own clock (integer ms);
 * 3. write `verdict.next` back when `verdict.allowed && charge`, or only where `verdict.blocks`
 *    says a refusal starts a block; each written key may be dropped at
 *    `expiryAfter(state.at, outcome.fullMs)` (then it is the same as an absent key), and one whose
 *    `outcome.fullMs` is 0 (full: a reservation of 0 that found nothing taken) is dropped at once;
 * 4. answer `toDecision(request, outcome)` per request (`spreadDecisions` for repeated keys).
 * A refund is `takeCharge(decision)` and the model's `refund` of `chargedCost(charge)`
 * (`restoreCharge` when it failed, so that refunding again tries again). A settle (a request charged
 * its real cost when it ends, `RateLimitStore.settle`) is `checkSettles`, then per settle
 * `takeCharge(decision)`, `settleState(state, now, rule, chargedCost(charge), actual, charge.at)`
 * (write `next` when `changed`), and `settledCharge(charge, actual, outcome)`: the charge to
 * `restoreCharge` on the decision and the decision to answer. A store that cannot decide throws
 * `RateLimitStoreError`, never for "limited". The shared case tables hold such a store to it.
 *
 * @example
 * const { requests, positions } = distinctRequests(given, 'MyStore.consume');
 * const now = this.clock.now();
 * const states = await this.read(requests.map((request) => request.key));
 * const verdict = decideAll(requests.map(({ rule, cost }, i) => ({ state: states[i], rule, cost })), now, true);
 * // every next state when admitted; after a refusal, those `verdict.blocks` marks
 * if (verdict.allowed || verdict.blocks) await this.write(requests, verdict);
 * const decisions = requests.map((request, i) => toDecision(request, verdict.outcomes[i]));
 * return positions === undefined ? decisions : spreadDecisions(decisions, given, positions);
 */

/**
 * What a store implements (`RateLimitStore`, also the module's injection token), what it is
 * given (`RateLimitRequest`: a bucket key, a policy name, a `Rule`, a cost in tokens; per
 * call, `RateLimitCallOptions`: how long its caller waits; to `settle`, `RateLimitSettle`: an
 * admitted decision and what its request cost in all) and what it answers (`RateLimitDecision`,
 * seconds, made by `toDecision`).
 */
export {
  type RateLimitCallOptions,
  type RateLimitDecision,
  type RateLimitRequest,
  type RateLimitSettle,
  RateLimitStore,
} from '../stores/rate-limit-store.interface.js';

/**
 * The rule a bucket follows (`rps` tokens per second, `burst` tokens, optional `limit`, `blockMs`
 * and `blockResets`, which `decideAll` applies: a store only stores what it returns), the algorithm names, and what `decideAll` reports per policy (`Outcome`, integer
 * ms). A store keeps the rule with a bucket only if it needs it to read the state back.
 */
export {
  type Algorithm,
  ALGORITHMS,
  type AlgorithmModel,
  type Held,
  type Outcome,
  type Rule,
} from '../algorithms/algorithm.types.js';

/**
 * The decision core, pure (no I/O, `now` in integer ms passed in): `decideAll` decides one call's
 * requests against their stored states, all-or-nothing, and says which states to write
 * (`Verdict.next`, `Verdict.blocks`). `expiryAfter(at, fullMs)` is when a written state may be
 * dropped, ms on the store's clock; `expiresAt` works it out from a state alone (after a refund).
 * `modelOf(rule)` is the rule's algorithm, for `current` and `refund` outside `decideAll`;
 * `settleState` what a settle does to a bucket (its `debit` or `refund`) and reports of it.
 */
export {
  decideAll,
  type Entry,
  expiresAt,
  expiryAfter,
  modelOf,
  settleState,
  type Verdict,
} from '../algorithms/decide.js';

/**
 * Each algorithm's pure functions and the shape of its state: a store that stores states as
 * they are (JSON, say) never needs these; one that packs them into its own encoding (as Redis
 * strings or a table of numbers) reads their fields here.
 */
export { fixedWindow, type FixedWindowState } from '../algorithms/fixed-window.js';
export { gcra, type GcraState } from '../algorithms/gcra.js';
export { leakyBucket, type LeakyBucketState } from '../algorithms/leaky-bucket.js';
export { slidingWindowCounter, type SlidingWindowCounterState } from '../algorithms/sliding-window-counter.js';
export { slidingWindowLog, type SlidingWindowLogState } from '../algorithms/sliding-window-log.js';
export { tokenBucket, type TokenBucketState } from '../algorithms/token-bucket.js';

/**
 * `toDecision(request, outcome)` turns an outcome into the public decision, the same for every
 * store, and records on an admitted one what it charged and when (`outcome.at`, the store's
 * clock). `takeCharge(decision)` hands that record (`Charge`) to the store's `refund`, once;
 * `restoreCharge(decision, charge)` puts it back when that refund failed, so the next one tries
 * again. `chargedCost(charge)` is what the charge holds (what a refund gives back, what a settle
 * starts from); `settledCharge(charge, actual, outcome)` the charge a settle leaves and the decision
 * it answers. `limitOf(rule)` is the `limit` a decision shows.
 */
export {
  type Charge,
  chargedCost,
  limitOf,
  restoreCharge,
  settledCharge,
  takeCharge,
  toDecision,
} from '../stores/decision.js';

/**
 * The checks every store runs on a call before it reads anything: `distinctRequests` rejects a
 * bad cost or a key repeated with another rule or cost (`TypeError` / `RangeError`, never
 * `RateLimitStoreError`) and gives each key once; `spreadDecisions` gives each request as given
 * its decision back. `checkCost` and `sameRule` are the single checks they are made of.
 * `checkSettles` checks a `settle` call's settles the same way.
 */
export {
  checkCost,
  checkSettles,
  type DistinctRequests,
  distinctRequests,
  sameRule,
  spreadDecisions,
} from '../stores/distinct-requests.js';

/**
 * The store's clock: any `{ now() }` in integer ms (`ManualClock` from `nestjs-ratelimit/testing`
 * in tests). A store that takes a `clock` option reads it with `clockReader` and exposes it as
 * `RateLimitStore.clock` with `storeClock`, so the module's waits and headers follow it.
 */
export { clockReader, type StoreClock, storeClock } from '../stores/store-clock.js';

/**
 * What a store throws when it cannot decide (its server down or too slow): the module answers it
 * with its `failMode`. `storeTimeout(ms)` is the error of a call past its `timeoutMs`.
 */
export { RateLimitStoreError, type RateLimitStoreErrorReason, storeTimeout } from '../stores/rate-limit-store.error.js';

/**
 * What a remote store puts in front of its server so a flood of refused requests costs no server
 * call each: `answer(requests)` from what the server refused before (expose it as the store's
 * `cached`), `charge(requests, send)` past it (as the store's `consume`: it does not look up
 * again the array `answer` just had no answer for), `forgetting(keys, work)` around resets and
 * refunds.
 */
export { RefusalGate, type ServerAnswer } from '../stores/refusal-gate/index.js';
