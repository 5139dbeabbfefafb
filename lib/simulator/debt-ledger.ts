import type { AlgorithmModel, Held, Rule } from '../algorithms/algorithm.types.js';

/** How close `balanceOf` comes to a balance, tokens, before it rounds it to a millionth. */
const BALANCE_PRECISION = 1e-7;
/** Most halvings `balanceOf` makes (a range of 2^64 times its precision: any a rule has). */
const MAX_HALVINGS = 64;

/** `n` to a millionth of a token: what bisection finds of a whole or decimal balance comes out as that number. */
const millionths = (n: number): number => Math.round(n * 1e6) / 1e6;

/**
 * Tokens free in `state` under `rule`, fractional: from `burst` (full) down to 0 (empty), and below
 * 0 for a bucket in debt (minus the tokens it owes, at most `rule.debt`). No model says it as a
 * number (`remaining` is whole, and 0 in debt), so it is read from `waitMs`, which every model
 * answers by comparing what its bucket holds with `burst - need`: the balance is the most a
 * request could take now (`waitMs` of it 0), and for a bucket `d` tokens past empty, a "request"
 * of `-d` tokens is that most. Found by halving `[-debt, burst]` to `BALANCE_PRECISION`, then
 * rounded to a millionth of a token (a balance of whole tokens comes out whole).
 *
 * @example balanceOf(model, { tokens: -1.5, at, blockedUntil: 0 }, { ...rule, debt: 4 }) // -1.5 (a token bucket)
 */
export function balanceOf(model: AlgorithmModel<Held>, state: Held, rule: Rule): number {
  // in debt or not, which one call tells, halves the range to search
  const inDebt = model.waitMs(state, rule, 0) > 0;
  let lo = inDebt ? -(rule.debt ?? 0) : 0;
  let hi = inDebt ? 0 : rule.burst;
  if (!inDebt && model.waitMs(state, rule, hi) === 0) return hi;
  if (inDebt && model.waitMs(state, rule, lo) > 0) return lo;
  for (let i = 0; i < MAX_HALVINGS && hi - lo > BALANCE_PRECISION; i++) {
    const mid = (lo + hi) / 2;
    if (model.waitMs(state, rule, mid) === 0) lo = mid;
    else hi = mid;
  }
  return millionths(lo);
}

/** What settling did to one policy's buckets over a run: the debt figures the report shows. */
export interface DebtCounts {
  /** Admitted requests whose trace line gave their actual cost, each settled when it ended. */
  settled: number;
  /** Tokens the admitted requests reserved under this policy (their costs), settled or not. */
  reserved: number;
  /** Tokens they cost in the end: their `actual` where the trace gives it, else what they reserved. */
  actual: number;
  /**
   * Tokens the buckets were charged for them in the end: what they reserved, with what their
   * settles took more or gave back. Less than `actual` where a settle stopped at `maxDebt`; more
   * where it had nothing to give back (the bucket was full again, or the window ended).
   */
  charged: number;
  /** The most tokens past empty a bucket went (0: none went into debt). */
  deepest: number;
  /** When a bucket went deepest, ms on the traffic's clock, and the key it was of. */
  deepestAt: number | undefined;
  deepestKey: string | undefined;
  /** Milliseconds the buckets spent in debt, summed over keys (one key alone: the time it owed). */
  inDebtMs: number;
  /** Requests refused while this policy's bucket of their key was in debt (it refused them too). */
  refusedInDebt: number;
  /** Per second of the clock (`floor(ms / 1000)`): the most tokens past empty a bucket was seen at, at a settle or a request. */
  seconds: Map<number, number>;
}

/** A bucket's time in debt not yet counted: since when, and until when it is paid back if nothing changes. */
interface DebtSpan {
  since: number;
  until: number;
}

/**
 * One settling policy's debt over a run, from what the lane tells it: each admitted request's
 * reservation and actual cost, and each bucket it sees after a settle or at a refusal. A bucket
 * is in debt from a settle that takes it past empty until time pays the debt back (`waitMs` of 0
 * tokens, as of the last look), or until a later settle gives back enough: its span is counted
 * once it ends, and those still open when the run ends (`close`) up to when they would.
 */
export class DebtLedger {
  readonly counts: DebtCounts = {
    settled: 0,
    reserved: 0,
    actual: 0,
    charged: 0,
    deepest: 0,
    deepestAt: undefined,
    deepestKey: undefined,
    inDebtMs: 0,
    refusedInDebt: 0,
    seconds: new Map(),
  };
  /** The buckets in debt as last seen, by key: at most one per key. */
  private readonly open = new Map<string, DebtSpan>();

  /** @param maxDebt the rule's `debt`: tokens a settle may take a bucket past empty */
  constructor(readonly maxDebt: number) {}

  /** An admitted request reserved `reserved` tokens; `actual` is what it costs in the end, when its trace line says. */
  admitted(reserved: number, actual: number | undefined): void {
    const { counts } = this;
    counts.reserved += reserved;
    counts.charged += reserved;
    counts.actual += actual ?? reserved;
    if (actual !== undefined) counts.settled++;
  }

  /** A settle at `time` took `key`'s bucket from `before` to `after`, both as of `time`: what it took or gave is charged. */
  settled(key: string, time: number, model: AlgorithmModel<Held>, before: Held, after: Held, rule: Rule): void {
    const { counts } = this;
    counts.charged = millionths(counts.charged + balanceOf(model, before, rule) - balanceOf(model, after, rule));
    this.saw(key, time, model, after, rule);
  }

  /**
   * `key`'s bucket is `state` at `time` (after a settle, or as a refused request found it):
   * opens, moves or ends its span in debt. Returns its debt, tokens past empty (0: none).
   */
  saw(key: string, time: number, model: AlgorithmModel<Held>, state: Held, rule: Rule): number {
    // a trace that goes back in time finds the bucket as of its own later time, which a span counts from
    time = Math.max(time, state.at);
    const waitMs = model.waitMs(state, rule, 0);
    let span = this.open.get(key);
    if (span !== undefined && span.until <= time) {
      // paid back by time since the last look
      this.counts.inDebtMs += span.until - span.since;
      this.open.delete(key);
      span = undefined;
    }
    if (waitMs === 0) {
      // a settle gave back enough
      if (span !== undefined) {
        this.counts.inDebtMs += Math.max(0, time - span.since);
        this.open.delete(key);
      }
      return 0;
    }
    if (span === undefined) this.open.set(key, { since: time, until: time + waitMs });
    else span.until = time + waitMs;
    const debt = -balanceOf(model, state, rule);
    const { counts } = this;
    if (debt > counts.deepest) {
      counts.deepest = debt;
      counts.deepestAt = time;
      counts.deepestKey = key;
    }
    const second = Math.floor(time / 1000);
    if (debt > (counts.seconds.get(second) ?? 0)) counts.seconds.set(second, debt);
    return debt;
  }

  /** A request refused while its key's bucket of this policy was in debt. */
  refusedInDebt(): void {
    this.counts.refusedInDebt++;
  }

  /** The run has ended: every span still open counts up to when time would pay it back. */
  close(): void {
    for (const { since, until } of this.open.values()) this.counts.inDebtMs += until - since;
    this.open.clear();
  }
}
