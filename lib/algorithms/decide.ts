import type { Algorithm, AlgorithmModel, Held, Outcome, Rule } from './algorithm.types.js';
import { ALGORITHM_DESCRIPTORS, ALGORITHMS } from './registry.js';

/**
 * The pure model of each algorithm, by name (its descriptor's): a plain object of a handful of
 * fixed keys, so the lookup per decision costs a property read.
 */
export const MODELS: { readonly [A in Algorithm]: AlgorithmModel<any> } = Object.fromEntries(
  ALGORITHMS.map((algorithm) => [algorithm, ALGORITHM_DESCRIPTORS[algorithm].model]),
) as { [A in Algorithm]: AlgorithmModel<any> };

/** The algorithm's model; policies are validated at start, so an unknown name is a bug. */
export function modelOf(rule: Rule): AlgorithmModel<Held> {
  return MODELS[rule.algorithm] as AlgorithmModel<Held>;
}

/** One policy's part of a request: its stored state, its rule and the cost. */
export interface Entry<State extends Held = Held> {
  state: State | undefined;
  rule: Rule;
  cost: number;
}

/** What a request does to every policy's state, and what each policy reports. */
export interface Verdict<State extends Held = Held> {
  /** True when every policy admits the request. */
  allowed: boolean;
  outcomes: Outcome[];
  /**
   * Each policy's state after the request: charged when `allowed` and charging, else as read,
   * except where a block starts. All are stored when `allowed` and charging.
   */
  next: State[];
  /**
   * For a refused request that is charging, which policies start a block with it (their `next`
   * states are stored, the others are not); `undefined` when none does.
   */
  blocks: boolean[] | undefined;
}

/**
 * Decides one request against several policies of any algorithms, all-or-nothing: the request
 * is admitted only when every policy admits it, and only then is any bucket charged. With
 * `charge` false it only looks (peek). The Redis store's script (`stores/redis/decide.lua.ts`)
 * runs the same two passes in one atomic call.
 *
 * A refused request takes no tokens, but a policy with a block (`Rule.blockMs`) that refuses it
 * itself starts its block then: not one that admitted it while another refused (its client did
 * nothing it forbids), nor one already blocking (retrying does not lengthen a block), nor for a
 * cost above burst (refused as never admittable, not as too many), nor on a peek.
 */
export function decideAll(entries: readonly Entry[], now: number, charge: boolean): Verdict {
  const n = entries.length;
  const current: Held[] = new Array<Held>(n);
  const admits: boolean[] = new Array<boolean>(n);
  let allowed = true;
  for (let i = 0; i < n; i++) {
    const { state, rule, cost } = entries[i];
    const model = modelOf(rule);
    current[i] = currentOf(model, state, now, rule);
    admits[i] = admitted(model, current[i], rule, cost);
    allowed &&= admits[i];
  }
  const charged = allowed && charge;
  let next: Held[] = charged ? new Array<Held>(n) : current;
  let blocks: boolean[] | undefined;
  const outcomes: Outcome[] = new Array<Outcome>(n);
  for (let i = 0; i < n; i++) {
    const entry = entries[i];
    const model = modelOf(entry.rule);
    const delayMs = allowed ? (model.delayMs?.(current[i], entry.rule) ?? 0) : 0;
    if (charged) next[i] = model.charge(current[i], entry.rule, entry.cost);
    else if (charge && startsBlock(current[i], entry, admits[i])) {
      if (next === current) next = current.slice();
      next[i] = block(current[i], entry.rule);
      (blocks ??= new Array<boolean>(n).fill(false))[i] = true;
    }
    outcomes[i] = report(model, next[i], entry, admits[i], delayMs);
  }
  return { allowed, outcomes, next, blocks };
}

/** What `settle` works out for one policy: whether it admits the request, what it stores, what it reports. */
export interface Settled {
  admits: boolean;
  /** The state to store; `undefined`: nothing, as for a refusal without a block. */
  next: Held | undefined;
  outcome: Outcome;
}

/**
 * What `settle` works in when its caller lends it this, so that a decision makes no object: it
 * then answers with this object itself, its `current` and `charged` states (of the algorithm the
 * scratch was made for, by `settleScratch`) and its `outcome` overwritten. A store reads what it
 * needs of the answer before it decides again (the memory store keeps one per algorithm). A state
 * read from the store into `current` may be the entry's `state`: `current` brings it up to date in place.
 */
export interface SettleScratch extends Settled {
  /** An entry for the caller to write its request in and hand `settle` with this scratch. */
  readonly entry: Entry;
  /** Where the state as of now is written (`currentOf`). */
  readonly current: Held;
  /** Where the state after a charge is written (the model's `charge`). */
  readonly charged: Held;
}

/** A `SettleScratch` for the decisions of `rule`'s algorithm. */
export function settleScratch(rule: Rule): SettleScratch {
  const model = modelOf(rule);
  return {
    admits: false,
    next: undefined,
    outcome: blankOutcome(),
    entry: { state: undefined, rule, cost: 0 },
    current: model.current(undefined, 0, rule),
    charged: model.current(undefined, 0, rule),
  };
}

/**
 * One policy's part of a request another decided (a Redis call, which answers whether every
 * policy admitted it): what `decideAll` works out for this policy from its stored state, given
 * whether the request was `allowed`. `next` is what the policy stores (`undefined`: nothing, as
 * for a refusal without a block).
 *
 * With `allowed` undefined, the request has no other policy: this one's verdict is the
 * request's, and the result is `decideAll` of this entry alone, without its arrays (what the
 * memory store runs for a request of one policy, most of them). With a `scratch`, the answer is
 * the scratch, written in place (see `SettleScratch`).
 */
export function settle(
  entry: Entry,
  now: number,
  allowed: boolean | undefined,
  charge: boolean,
  scratch?: SettleScratch,
): Settled {
  const { rule, cost } = entry;
  const model = modelOf(rule);
  const current = currentOf(model, entry.state, now, rule, scratch?.current);
  const admits = admitted(model, current, rule, cost);
  allowed ??= admits;
  const delayMs = allowed ? (model.delayMs?.(current, rule) ?? 0) : 0;
  let next: Held | undefined;
  if (allowed && charge) next = model.charge(current, rule, cost, scratch?.charged);
  else if (charge && startsBlock(current, entry, admits)) next = block(current, rule);
  const outcome = report(model, next ?? current, entry, admits, delayMs, scratch?.outcome);
  if (scratch === undefined) return { admits, next, outcome };
  scratch.admits = admits;
  scratch.next = next;
  return scratch;
}

/**
 * What settling one charge does to its bucket (`RateLimitStore.settle`): the state as of `now`, as
 * a decision reads it (`currentOf`), with `actual - taken` tokens more taken (the model's
 * `debit`: past empty, down to `rule.debt` past it) or, for less, given back as a refund of the
 * difference charged at `chargedAt` gives it (`refund`: never past full, never into another window
 * than the charge's). `changed` is false when nothing moved (the charge was right, a window that has
 * ended keeps what it took, a debt at its cap, an algorithm without `debit`): the stored state and
 * its expiry then stand. Otherwise a store writes `next`, to expire at
 * `expiryAfter(next.at, outcome.fullMs)`, or drops its key when `outcome.fullMs` is 0 (full again).
 * `outcome` is the bucket after, as a peek of a request of cost 0 reports it: not `allowed` while it
 * is in debt (or blocked). Lua: `refund_call` in `stores/redis/decide.lua.ts`.
 *
 * @example settleState(state, now, rule, 100, 340, charge.at) // 240 tokens more taken
 */
export function settleState(
  state: Held | undefined,
  now: number,
  rule: Rule,
  taken: number,
  actual: number,
  chargedAt: number,
): { next: Held; changed: boolean; outcome: Outcome } {
  const model = modelOf(rule);
  // a block that has ended and resets the bucket leaves a fresh one, as for a decision
  const current = currentOf(model, state, now, rule);
  let next = current;
  if (actual > taken) next = model.debit?.(current, rule, actual - taken) ?? current;
  else if (actual < taken) next = model.refund(current, rule, taken - actual, chargedAt);
  const entry = { state: next, rule, cost: 0 };
  return { next, changed: next !== current, outcome: report(model, next, entry, admitted(model, next, rule, 0), 0) };
}

/**
 * The state as of `now` (the model's `current`), or, for a rule whose block's end resets the
 * bucket (`Rule.blockResets`) and a state whose block has ended, a fresh one: as if the key had
 * never been seen. A block ends at the state's own time (`at`, which a clock that went back keeps).
 * Lua: `after_block` (the sliding window log's mirror then deletes its set when it charges).
 * Written in `into` when given (see `AlgorithmModel`).
 */
export function currentOf<S extends Held>(
  model: AlgorithmModel<S>,
  state: S | undefined,
  now: number,
  rule: Rule,
  into?: S,
): S {
  const current = model.current(state, now, rule, into);
  if (rule.blockResets === true && current.blockedUntil > 0 && current.blockedUntil <= current.at)
    return model.current(undefined, now, rule, into);
  return current;
}

/** Whether `cost` fits in `state` now: never during a block, nor for a cost above burst. */
function admitted<S extends Held>(model: AlgorithmModel<S>, state: S, rule: Rule, cost: number): boolean {
  return cost <= rule.burst && blockLeftMs(state, rule) === 0 && model.waitMs(state, rule, cost) === 0;
}

/**
 * Milliseconds until the block `state` holds ends, 0 when none holds. Only a rule with a block
 * reads one (its keys are the only ones that hold one).
 */
export function blockLeftMs(state: Held, rule: Rule): number {
  return rule.blockMs === undefined ? 0 : Math.max(0, state.blockedUntil - state.at);
}

/** Whether a refusal by this policy starts its block (see `decideAll`). */
function startsBlock(state: Held, { rule, cost }: Entry, admits: boolean): boolean {
  return !admits && rule.blockMs !== undefined && cost <= rule.burst && blockLeftMs(state, rule) === 0;
}

/** `state` blocked for the rule's `blockMs` from its time on. Lua: `block`. */
function block<S extends Held>(state: S, rule: Rule): S {
  return { ...state, blockedUntil: state.at + rule.blockMs! };
}

/**
 * Whether `state`'s bucket is full and no block holds: the same as no key at all, which a store
 * then drops (only a refund leaves a bucket so). Lua: `full_ms == 0` in `save` (`bucket-io.lua.ts`).
 *
 * @example isFull(model, refunded, rule) // true: the request given back was all the key held
 */
export function isFull<S extends Held>(model: AlgorithmModel<S>, state: S, rule: Rule): boolean {
  return fullMsOf(model, state, rule, blockLeftMs(state, rule)) === 0;
}

/**
 * Milliseconds until `state`'s bucket is full again and no block holds (the time a key must live):
 * the later of `waitMs(burst)` and the block's end; the block's end itself for a rule whose block
 * resets the bucket (`Rule.blockResets`), which is full the moment it ends. Lua: `full_ms`.
 */
function fullMsOf<S extends Held>(model: AlgorithmModel<S>, state: S, rule: Rule, blockMs: number): number {
  if (blockMs > 0 && rule.blockResets === true) return blockMs;
  return Math.max(blockMs, model.waitMs(state, rule, rule.burst));
}

/**
 * The verdict `state` (charged or not) gives, every time derived from `waitMs`. During a block
 * nothing is left, and every time is at least the block's: a request is admitted, another token
 * comes, and the bucket is full (so the key lives) no sooner than the block ends; for a rule whose
 * block resets the bucket, exactly when it ends (all of it comes back then). A rule that settles
 * (`Rule.debt`) reports what its bucket owes past empty (the model's `debt`) when it owes some: only
 * a settle takes a bucket there, and a rule that never settles reports none (its window's count
 * past a factor's scaled limit is the factor's doing, not a debt). Lua: `report` in
 * `stores/redis/decide.lua.ts`. Written in `into` when given (a `SettleScratch`'s).
 */
function report<S extends Held>(
  model: AlgorithmModel<S>,
  state: S,
  { rule, cost }: Entry,
  admits: boolean,
  delayMs: number,
  into?: Outcome,
): Outcome {
  const blockMs = blockLeftMs(state, rule);
  const remaining = blockMs > 0 ? 0 : model.remaining(state, rule);
  const resets = blockMs > 0 && rule.blockResets === true;
  const outcome = into ?? blankOutcome();
  outcome.allowed = admits;
  outcome.remaining = remaining;
  outcome.retryMs = admits
    ? 0
    : cost > rule.burst
      ? -1
      : resets
        ? blockMs
        : Math.max(blockMs, model.waitMs(state, rule, cost));
  outcome.fullMs = fullMsOf(model, state, rule, blockMs);
  outcome.nextMs =
    remaining >= rule.burst ? 0 : resets ? blockMs : Math.max(blockMs, model.waitMs(state, rule, remaining + 1));
  outcome.delayMs = delayMs;
  outcome.blockedMs = blockMs;
  outcome.at = state.at;
  // absent unless above 0, so an outcome without one keeps its shape; a lent one that had one is left undefined
  const debt = rule.debt === undefined || model.debt === undefined ? 0 : model.debt(state, rule);
  if (debt > 0) outcome.debt = debt;
  else if (outcome.debt !== undefined) outcome.debt = undefined;
  return outcome;
}

/** An outcome of the shape `report` gives, its figures to be written. */
function blankOutcome(): Outcome {
  return { allowed: false, remaining: 0, retryMs: 0, fullMs: 0, nextMs: 0, delayMs: 0, blockedMs: 0, at: 0 };
}

/**
 * When a charged state can be dropped, ms on the clock: once the bucket is full again and no
 * block holds, when it is the same as an absent key, counted from the state's own time (later
 * than `now` when the clock went back, so such a key does not expire early). Never later, so
 * every key's TTL stays within the later of the time from empty to full and the block's end.
 */
export function expiresAt<S extends Held>(model: AlgorithmModel<S>, state: S, rule: Rule): number {
  return expiryAfter(state.at, fullMsOf(model, state, rule, blockLeftMs(state, rule)));
}

/**
 * `expiresAt` from a time until full already worked out (a report's `fullMs`), as a store has it
 * after a decision; at least 1 ms after the state's time. Lua: `expires_at`, the same expression.
 */
export function expiryAfter(at: number, fullMs: number): number {
  return at + Math.max(1, fullMs);
}
