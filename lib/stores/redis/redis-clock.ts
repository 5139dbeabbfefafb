/**
 * How long the smallest offset between Redis's clock and the local one is kept, ms: then the
 * next reply's is taken afresh, so that a clock that drifts or is stepped is followed.
 */
const OFFSET_KEPT_MS = 1_000;

/** A call that runs this many timeouts after it was sent charges nothing. */
export const STALE_AFTER_TIMEOUTS = 2;

/**
 * The clocks a `RedisStore` works with: the local one (a test clock, else `performance.now()`),
 * the script's (Redis `TIME`, unless a clock is given: the app's or a test's, sent with every
 * call), and Redis's, per hash slot (each Cluster node has its own), as far as the replies show
 * it. The local estimate of the script's clock only dates answers (see `RefusedCache`) and sets
 * deadlines.
 */
export class RedisClock {
  /**
   * Per hash slot, Redis's clock minus the local one, ms, at least: the smallest a reply showed
   * within `OFFSET_KEPT_MS` (NaN: no reply yet). A reply shows Redis's clock when it decided
   * against the local clock before the call was sent, which is never more than Redis's own.
   */
  private readonly offsets: Float64Array;
  /** Per hash slot, when `offsets` was last taken afresh (local ms). */
  private readonly offsetsTakenAt: Float64Array;

  /** The clock (integer ms) sent with every call instead of Redis `TIME`, if any. */
  private given: (() => number) | undefined;

  /**
   * @param given the clock (integer ms) sent with every call instead of Redis `TIME`, if any
   * @param test a test's clock, the local one too (then `given` as well), if any
   * @param slots hash slots whose offsets are kept: 16384 on a Cluster, else 1
   */
  constructor(
    given: (() => number) | undefined,
    private readonly test: (() => number) | undefined,
    slots: number,
  ) {
    this.given = given;
    this.offsets = new Float64Array(slots).fill(NaN);
    this.offsetsTakenAt = new Float64Array(slots);
  }

  /** Local time, ms. */
  localNow(): number {
    return this.test ? this.test() : performance.now();
  }

  /** A script's ARGV[1]: the given clock's time, or '' for Redis `TIME`. */
  scriptNow(): string {
    return this.given ? String(this.given()) : '';
  }

  /** Whether the scripts read Redis `TIME`. */
  get redisTime(): boolean {
    return this.given === undefined;
  }

  /** From now on, sends the app's clock (`Date.now()`) instead of using Redis `TIME`. */
  useAppClock(): void {
    this.given = Date.now;
  }

  /**
   * Takes in Redis's clock minus the local one as a reply from `slot` showed it (`sample`, at
   * local time `now`), and returns the offset to use: the smallest of the last `OFFSET_KEPT_MS`.
   * Each sample is at least the true offset (Redis decided after the call was sent), so the
   * smallest is the closest, and never less than it while the two clocks keep their pace.
   */
  learn(slot: number, sample: number, now: number): number {
    if (!(this.offsets[slot] <= sample) || now - this.offsetsTakenAt[slot] >= OFFSET_KEPT_MS) {
      this.offsets[slot] = sample;
      this.offsetsTakenAt[slot] = now;
    }
    return this.offsets[slot];
  }

  /**
   * The time on Redis's clock after which a call sent at `sentAt` is surely of no use: its
   * caller stopped waiting `timeoutMs` after sending, and a busy event loop may notice that
   * late, so the deadline is `STALE_AFTER_TIMEOUTS` times that. Redis's clock is estimated from
   * the replies: the offset they show is never less than Redis's own, so the deadline is never
   * early, however late a reply is read. A call run between the two charges for a request that
   * got its failMode outcome: fewer admissions, never more. '' before a reply, or with a given
   * clock (the script then knows only when the call was sent, not when it runs).
   */
  deadline(slot: number, sentAt: number, timeoutMs: number | undefined): string {
    const offset = this.offsets[slot];
    if (timeoutMs === undefined || this.given || Number.isNaN(offset)) return '';
    return String(Math.ceil(sentAt + offset + STALE_AFTER_TIMEOUTS * timeoutMs));
  }
}
