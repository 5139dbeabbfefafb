import type { Logger } from '@nestjs/common';
import type { ReleaseOutcome } from '../observability/rate-limit-events.js';
import { releasesFailing, releasesSettled } from '../rate-limit.messages.js';
import type { RateLimitDecision, RateLimitSettle } from '../stores/rate-limit-store.interface.js';
import { WakeQueue } from '../utils/wake-queue.js';

/** The first wait before a failed release is tried again, ms; each next wait doubles, up to `LAST_WAIT_MS`. */
const FIRST_WAIT_MS = 100;
const LAST_WAIT_MS = 2_000;

/** What a release or a settle asks of the store; each rejects when the store failed to. */
export interface StoreGiving {
  /** Gives back what decisions took (see `StoreCalls.release`). */
  release(decisions: readonly RateLimitDecision[]): Promise<void>;
  /** Charges decisions their real costs, and answers how their buckets stand after (see `StoreCalls.settle`). */
  settle(settles: readonly RateLimitSettle[]): Promise<(RateLimitDecision | undefined)[]>;
}

/** What hears of the releases that fail (for metrics and events). */
export type ReleaseWatcher = (
  outcome: ReleaseOutcome,
  decisions: readonly RateLimitDecision[],
  error?: unknown,
) => void;

/**
 * Gives a request's slots back when it ends, and charges a request its real cost (a settle), and
 * tries again, with a wait that doubles from 100 ms to 2 s, what the store failed (Redis cut off
 * for a moment): until it lands, or the lease has ended (the store then lets the slots go itself,
 * and a charge no longer counts). A slot whose release met an outage is so free again about when
 * the store is back, not a lease later. The waits share one `unref()`'d timer; shutdown ends them.
 *
 * @param store what a release and a settle ask of the store
 */
export class ReleaseRetries {
  private readonly waits = new WakeQueue();
  /** Releases being tried again, and how the last ones ended, for the log. */
  private retrying = 0;
  private landed = 0;
  private lapsed = 0;

  constructor(
    private readonly store: StoreGiving,
    private readonly watch: ReleaseWatcher,
    private readonly logger: Logger,
  ) {}

  /**
   * Gives back what `decisions` took, trying again for up to `leaseMs` when the store fails.
   * Resolves once given back, or given up; never rejects.
   */
  release(decisions: readonly RateLimitDecision[], leaseMs: number): Promise<void> {
    const give = () => this.store.release(decisions);
    return give().catch(async (error: unknown) => {
      await this.retry(give, decisions, performance.now() + leaseMs, error);
    });
  }

  /**
   * Charges `settles` their real costs, trying again for up to `leaseMs` when the store fails
   * (`failed` hears the first failure). Resolves with how their buckets stand after, or
   * `undefined` when given up; never rejects.
   */
  settle(
    settles: readonly RateLimitSettle[],
    leaseMs: number,
    failed?: () => void,
  ): Promise<(RateLimitDecision | undefined)[] | undefined> {
    const charge = () => this.store.settle(settles);
    return charge().catch((error: unknown) => {
      failed?.();
      const decisions = settles.map(({ decision }) => decision);
      return this.retry(charge, decisions, performance.now() + leaseMs, error);
    });
  }

  /** Ends every wait: nothing is tried again after shutdown. */
  close(): void {
    this.waits.close();
  }

  private async retry<T>(
    attempt: () => Promise<T>,
    decisions: readonly RateLimitDecision[],
    until: number,
    error: unknown,
  ): Promise<T | undefined> {
    let answer: T | undefined;
    if (this.retrying++ === 0)
      this.logger.warn(releasesFailing(error instanceof Error ? error.message : String(error)));
    let outcome: ReleaseOutcome = 'lapsed';
    for (let wait = FIRST_WAIT_MS; performance.now() + wait < until; wait = Math.min(2 * wait, LAST_WAIT_MS)) {
      this.watch('failed', decisions, error);
      if (!(await this.waits.wait(wait))) break;
      try {
        answer = await attempt();
        outcome = 'landed';
        break;
      } catch (failure) {
        error = failure;
      }
    }
    this.watch(outcome, decisions, outcome === 'lapsed' ? error : undefined);
    if (outcome === 'landed') this.landed++;
    else this.lapsed++;
    if (--this.retrying === 0) {
      this.logger.log(releasesSettled(this.landed, this.lapsed));
      this.landed = this.lapsed = 0;
    }
    return answer;
  }
}
