import type { Logger } from '@nestjs/common';
import type { ReleaseOutcome } from '../observability/rate-limit-events.js';
import { releasesFailing, releasesSettled } from '../rate-limit.messages.js';
import type { RateLimitDecision } from '../stores/rate-limit-store.interface.js';
import { WakeQueue } from '../utils/wake-queue.js';

/** The first wait before a failed release is tried again, ms; each next wait doubles, up to `LAST_WAIT_MS`. */
const FIRST_WAIT_MS = 100;
const LAST_WAIT_MS = 2_000;

/** What hears of the releases that fail (for metrics and events). */
export type ReleaseWatcher = (
  outcome: ReleaseOutcome,
  decisions: readonly RateLimitDecision[],
  error?: unknown,
) => void;

/**
 * Gives a request's slots back when it ends, and tries again, with a wait that doubles from
 * 100 ms to 2 s, a release the store failed (Redis cut off for a moment): until it lands, or its
 * slots' lease has ended (the store then lets them go itself, and a release gives nothing). A
 * slot whose release met an outage is so free again about when the store is back, not a lease
 * later. The waits share one `unref()`'d timer; shutdown ends them.
 *
 * @param give gives back what decisions took; rejects when the store failed to (see `StoreCalls.release`)
 */
export class ReleaseRetries {
  private readonly waits = new WakeQueue();
  /** Releases being tried again, and how the last ones ended, for the log. */
  private retrying = 0;
  private landed = 0;
  private lapsed = 0;

  constructor(
    private readonly give: (decisions: readonly RateLimitDecision[]) => Promise<void>,
    private readonly watch: ReleaseWatcher,
    private readonly logger: Logger,
  ) {}

  /**
   * Gives back what `decisions` took, trying again for up to `leaseMs` when the store fails.
   * Resolves once given back, or given up; never rejects.
   */
  release(decisions: readonly RateLimitDecision[], leaseMs: number): Promise<void> {
    return this.give(decisions).catch((error: unknown) => this.retry(decisions, performance.now() + leaseMs, error));
  }

  /** Ends every wait: nothing is tried again after shutdown. */
  close(): void {
    this.waits.close();
  }

  private async retry(decisions: readonly RateLimitDecision[], until: number, error: unknown): Promise<void> {
    if (this.retrying++ === 0)
      this.logger.warn(releasesFailing(error instanceof Error ? error.message : String(error)));
    let outcome: ReleaseOutcome = 'lapsed';
    for (let wait = FIRST_WAIT_MS; performance.now() + wait < until; wait = Math.min(2 * wait, LAST_WAIT_MS)) {
      this.watch('failed', decisions, error);
      if (!(await this.waits.wait(wait))) break;
      try {
        await this.give(decisions);
        outcome = 'landed';
        break;
      } catch (failure) {
        error = failure;
      }
    }
    this.watch(outcome, decisions, outcome === 'lapsed' ? error : undefined);
    if (outcome === 'landed') this.landed++;
    else this.lapsed++;
    if (--this.retrying > 0) return;
    this.logger.log(releasesSettled(this.landed, this.lapsed));
    this.landed = this.lapsed = 0;
  }
}
