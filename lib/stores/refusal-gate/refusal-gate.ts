import type { Outcome } from '../../algorithms/algorithm.types.js';
import { toDecision } from '../decision.js';
import type { RateLimitDecision, RateLimitRequest } from '../rate-limit-store.interface.js';
import { PendingCalls } from './pending-calls.js';
import { RefusedCache } from './refused-cache.js';

/** What a remote store's server answered for a charge, as the gate learns from it. */
export interface ServerAnswer {
  /** Each request's outcome, in the order of the requests sent. */
  readonly outcomes: readonly Outcome[];
  /**
   * When the server decided, ms on the gate's clock, at the earliest (the time the call was sent,
   * or later when the server's own clock tells so): a wait it reported is aged from here, so a
   * refusal is never reused for longer than the server would refuse.
   */
  readonly decidedAt: number;
}

/**
 * What a remote store puts in front of its server so that a flood from a client over its limit
 * costs no server call per refused request: remembered refusals, charging calls in flight by key,
 * and waiting for those calls in a flood. It knows requests, keys, outcomes and the local clock,
 * nothing of the server.
 *
 * A charge is looked up once; when it has no answer, `charge` sends it past the gate (or lets it
 * wait for the calls already on its buckets) and remembers what the server said. The module looks
 * it up itself (`answer`, through `RateLimitStore.cached`) before its circuit breaker, then calls
 * `consume` with the same array, which `charge` does not look up again. An answer from here is
 * taken while the server is down, and says nothing of its health. Looks (`peek`) go straight to
 * the server. Resets and refunds forget what is remembered of their keys (`forgetting`).
 *
 * @example
 * const gate = new RefusalGate(() => performance.now());
 * const cached = (requests) => gate.answer(requests);
 * const consume = (requests) => gate.charge(requests, () => server.decide(requests)); // looks up, unless `cached` just did
 */
export class RefusalGate {
  private readonly refused = new RefusedCache();
  /** Charging calls on their way, by key. */
  private readonly pending = new PendingCalls();
  /**
   * The requests `answer` last had no answer for: `charge` of that very array (the module's
   * `consume` right after its `cached`) does not look them up again, and a charge of any other
   * array does. A caller that handed the same array to `charge` later, without `answer` first,
   * would only miss a lookup: its charge goes to the server, which decides it as well.
   */
  private unanswered: readonly RateLimitRequest[] | undefined;

  /** @param now the local clock, ms; `performance.now` will do (only its differences count) */
  constructor(private readonly now: () => number) {}

  /**
   * The decisions for a charge that the server would certainly refuse, from what it answered
   * before; `undefined` when the charge must go past the gate (`charge`, which then does not look
   * up this very array again). Charges nothing.
   */
  answer(requests: readonly RateLimitRequest[]): RateLimitDecision[] | undefined {
    const known = this.lookup(requests);
    if (known === undefined) this.unanswered = requests;
    return known;
  }

  /**
   * A charge on distinct keys: answered from here when the server would certainly refuse it (not
   * looked up again when `answer` just had no answer for this very array), else sent past the
   * gate. In a flood on its buckets (a key refused up to a second ago, or about to run out, and
   * calls on it on their way), it waits for those calls once rather than sending its own: their
   * answers come sooner than its own would, and usually leave nothing for it. Then it looks again
   * with the others that waited: those the buckets can hold go to the server together, the rest
   * are refused here. What `send` answers is remembered.
   *
   * @param send the call to the server; the gate calls it at most once, right away or after the wait
   * @throws what `send` fails with; after a wait, what a call it waited for failed with (the server
   * is slow or gone: a call of its own would add its timeout to theirs)
   */
  async charge(requests: readonly RateLimitRequest[], send: () => Promise<ServerAnswer>): Promise<RateLimitDecision[]> {
    if (requests === this.unanswered) this.unanswered = undefined;
    else {
      const known = this.lookup(requests);
      if (known !== undefined) return known;
    }
    const calls = this.refused.contended(requests, this.now()) ? this.pending.drained(requests) : undefined;
    if (calls !== undefined) {
      const failure = await calls;
      // passed on as it was thrown, whatever it is (`!== undefined` narrows it to `{} | null`)
      if (failure !== undefined) throw failure as unknown;
      const outcomes = this.refused.lookupTogether(requests, this.now());
      if (outcomes !== undefined) return decisionsOf(requests, outcomes);
    }
    this.pending.depart(requests);
    let failure: unknown;
    try {
      const { outcomes, decidedAt } = await send();
      this.refused.remember(requests, outcomes, decidedAt, this.pending.behind);
      return decisionsOf(requests, outcomes);
    } catch (error) {
      failure = error;
      throw error;
    } finally {
      this.pending.land(requests, failure);
    }
  }

  /**
   * Runs `work`, a reset or a refund of `keys` (`undefined`: of every key), and forgets what is
   * remembered of them both before it and after it: those buckets now admit sooner than the server
   * said. Before, so that a charge that comes meanwhile goes to the server, behind the work; after,
   * for what an answer read meanwhile taught of buckets as they were.
   */
  async forgetting<T>(keys: readonly string[] | undefined, work: () => Promise<T>): Promise<T> {
    this.forget(keys);
    try {
      return await work();
    } finally {
      this.forget(keys);
    }
  }

  /** Forgets everything remembered; calls in flight still land. */
  clear(): void {
    this.refused.clear();
  }

  private lookup(requests: readonly RateLimitRequest[]): RateLimitDecision[] | undefined {
    const outcomes = this.refused.lookup(requests, this.now());
    return outcomes === undefined ? undefined : decisionsOf(requests, outcomes);
  }

  private forget(keys: readonly string[] | undefined): void {
    if (keys === undefined) this.refused.clear();
    else this.refused.forget(keys);
  }
}

function decisionsOf(requests: readonly RateLimitRequest[], outcomes: readonly Outcome[]): RateLimitDecision[] {
  const decisions: RateLimitDecision[] = new Array<RateLimitDecision>(requests.length);
  for (let i = 0; i < requests.length; i++) decisions[i] = toDecision(requests[i], outcomes[i]);
  return decisions;
}
