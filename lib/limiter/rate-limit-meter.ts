import { meterAmount } from '../rate-limit.messages.js';
import type { RateLimitDecision } from '../stores/rate-limit-store.interface.js';

/**
 * A request's count of its real cost under a policy that settles, handed to its handler by
 * `@RateLimitMeter()`: what the handler adds is what the request is charged when it ends, however
 * it ends (the stream finished, the client gone, an error), and at the policy's `settleEvery`
 * while it runs.
 *
 * @example
 * for await (const chunk of model.stream(body, { signal: meter.signal })) {
 *   meter.add(chunk.tokens);
 *   send(chunk);
 * }
 */
export interface RateLimitMeter {
  /** Counts `n` more (cost units, a finite number >= 0). */
  add(n: number): void;
  /** Sets the count to `n` (a finite number >= 0): the cost so far, as a model's usage reports it. */
  set(n: number): void;
  /** What has been counted so far. */
  readonly count: number;
  /** What the store has been charged for the request so far: the reservation, then each settle's count. */
  readonly charged: number;
  /**
   * Whether the identity's budget is spent: what was counted beyond the charge has used up what
   * the bucket held when it was last asked (at admission, then at each settle).
   */
  readonly exhausted: boolean;
  /** Aborted when the budget is spent (see `exhausted`), for the work that produces the cost to stop. */
  readonly signal: AbortSignal;
}

/** Why a meter's signal aborts. */
export class RateLimitBudgetSpent extends Error {
  constructor(readonly policy: string) {
    super(`the budget of policy '${policy}' is spent`);
    this.name = 'RateLimitBudgetSpent';
  }
}

/** The engine's side of a request's meter: what it was charged, and what the bucket held since. */
export class Meter implements RateLimitMeter {
  private counted = 0;
  /** Whether the handler counted anything (`add` or `set`): its count is then the real cost. */
  touched = false;
  /** The interval settle on its way, if any: the end's settle comes after it. */
  idle: Promise<void> = Promise.resolve();
  private settled: number;
  /** Whole tokens the bucket held beyond `settled` when last asked. */
  private left: number;
  private spent = false;
  private controller: AbortController | undefined;

  /** @param decision the policy's decision that admitted the request, its cost the reservation */
  constructor(
    private readonly policy: string,
    reserved: number,
    decision: RateLimitDecision,
  ) {
    this.settled = reserved;
    this.left = decision.remaining;
  }

  add(n: number): void {
    checkAmount('add', n);
    this.counted += n;
    this.touched = true;
    this.check();
  }

  set(n: number): void {
    checkAmount('set', n);
    this.counted = n;
    this.touched = true;
    this.check();
  }

  get count(): number {
    return this.counted;
  }

  get charged(): number {
    return this.settled;
  }

  get exhausted(): boolean {
    return this.spent;
  }

  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      if (this.spent) this.controller.abort(new RateLimitBudgetSpent(this.policy));
    }
    return this.controller.signal;
  }

  /** The store was charged `actual` in all, and its bucket is now as `after` says (`undefined`: not known). */
  settledAt(actual: number, after: RateLimitDecision | undefined): void {
    this.settled = actual;
    if (after === undefined) return;
    this.left = after.remaining;
    if (!after.allowed) this.spend();
    else this.check();
  }

  private check(): void {
    if (!this.spent && this.counted - this.settled >= this.left) this.spend();
  }

  private spend(): void {
    this.spent = true;
    this.controller?.abort(new RateLimitBudgetSpent(this.policy));
  }
}

/** A meter's amount: a finite number >= 0, else a `RangeError` naming the call. */
function checkAmount(call: 'add' | 'set', n: number): void {
  if (!(typeof n === 'number' && n >= 0 && n < Infinity)) throw new RangeError(meterAmount(call, n));
}
