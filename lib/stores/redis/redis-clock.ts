/**
 * How much a kept sample of Redis's clock loses per ms of its age, ms: a newer sample replaces it
 * once its round trip is shorter than the kept one's plus this much per ms since (1 ms a second,
 * ten times what two clocks drift apart at worst). A sample read after a stall of the app (a long
 * round trip) so never replaces a good one, and a good one is taken afresh often enough to follow
 * the clocks' drift.
 */
const AGING_PER_MS = 0.001;

/**
 * The clocks a `RedisStore` works with: the local one (a test clock, else `performance.now()`),
 * the script's (Redis `TIME`, unless a clock is given: the app's or a test's, sent with every
 * call), and Redis's, per hash slot (each Cluster node has its own), as far as the replies show
 * it. The local estimate of the script's clock only dates answers (see `RefusedCache`) and sets
 * deadlines.
 *
 * A reply shows Redis's clock minus the local one within bounds: Redis decided after the call was
 * sent and before its reply was read, so the offset lies between Redis's time less the read time
 * (`low`) and Redis's time less the send time (`high`). Of the replies, the one with the
 * narrowest bounds is kept (see `AGING_PER_MS`); one whose bounds do not meet the kept ones' says
 * that a clock was stepped, and is taken at once.
 */
export class RedisClock {
  /** Per hash slot, the kept offset's lower bound, ms (NaN: no reply yet). */
  private readonly low: Float64Array;
  /** Per hash slot, the kept offset's upper bound, ms. */
  private readonly high: Float64Array;
  /** Per hash slot, when the kept sample's reply was read (local ms). */
  private readonly takenAt: Float64Array;

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
    this.low = new Float64Array(slots).fill(NaN);
    this.high = new Float64Array(slots);
    this.takenAt = new Float64Array(slots);
  }

  /** Local time, ms. */
  localNow(): number {
    return this.test ? this.test() : performance.now();
  }

  /**
   * A script's ARGV[1]: '' for Redis `TIME`; else the given clock's time, and when that is ahead of
   * this process's real time (`Date.now()`: a test clock pinned in the future), that real time
   * after a space, for the keys' TTLs to count from (see `ttl_ms` in `BUCKET_IO_LUA`).
   */
  scriptNow(): string {
    if (this.given === undefined) return '';
    const now = this.given();
    const real = Date.now();
    return now > real ? `${now} ${real}` : String(now);
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
   * Takes in a reply from `slot`: Redis's clock read `redisNow` in a call sent at local time
   * `sentAt` whose reply was read at `readAt`. Returns the earliest local time Redis can have
   * decided at, by the kept bounds: `redisNow` less the offset's upper bound.
   */
  learn(slot: number, redisNow: number, sentAt: number, readAt: number): number {
    const low = redisNow - readAt;
    const high = redisNow - sentAt;
    const kept = this.low[slot];
    const stepped = high < kept || low > this.high[slot];
    const narrower = high - low <= this.high[slot] - kept + (readAt - this.takenAt[slot]) * AGING_PER_MS;
    if (Number.isNaN(kept) || stepped || narrower) {
      this.low[slot] = low;
      this.high[slot] = high;
      this.takenAt[slot] = readAt;
    }
    return redisNow - this.high[slot];
  }

  /**
   * How long ago, at the least, Redis decided a call from `slot` whose reply shows the script's
   * clock at `redisNow`, read at local time `readAt` (after `learn` took the reply in). On a given
   * clock the script decided at that clock's `redisNow`: the time the clock has moved since. On
   * Redis `TIME`, `readAt` less the latest local time the kept bounds allow; 0 when they cannot
   * tell the decision from the read.
   */
  sinceDecided(slot: number, redisNow: number, readAt: number): number {
    if (this.given !== undefined) return Math.max(0, this.given() - redisNow);
    return Math.max(0, readAt - (redisNow - this.low[slot]));
  }

  /**
   * The time on Redis's clock after which a call sent now, at local time `sentAt`, is of no use:
   * its caller stops waiting `timeoutMs` after sending it (see `RedisStore`). Set by the offset's
   * lower bound, it is never later than that moment, so a call Redis runs after it charges
   * nothing, and nothing is charged once a caller has had its `failMode` answer. '' (none) before
   * a reply, when the kept bounds are wider than `timeoutMs` (they would say too little), and with
   * a given clock (the script then knows when the call was sent, not when it runs).
   */
  deadline(slot: number, sentAt: number, timeoutMs: number | undefined): string {
    const low = this.low[slot];
    if (timeoutMs === undefined || this.given !== undefined || !(this.high[slot] - low <= timeoutMs)) return '';
    return String(Math.floor(sentAt + low + timeoutMs));
  }
}
