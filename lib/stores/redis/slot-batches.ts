import { staleStoreCall } from '../../rate-limit.messages.js';
import { RateLimitStoreError } from '../rate-limit-store.error.js';
import type { RateLimitRequest } from '../rate-limit-store.interface.js';
import { REPLY_WIDTH } from './decide.lua.js';
import { type RedisClock, STALE_AFTER_TIMEOUTS } from './redis-clock.js';
import type { RedisScripts } from './redis-scripts.js';
import { parseAnswer, type Reply } from './script-reply.js';

/**
 * Most bucket keys one decide call carries; a batch that reaches it is sent at once. Bounds how
 * long one call holds Redis (a few µs per key) and how big its reply is.
 */
export const MAX_BATCH_KEYS = 64;

/**
 * Requests of one hash slot waiting to go to Redis in one decide call: their keys, and the
 * script's arguments after its clock.
 */
interface Batch {
  keys: string[];
  args: string[];
  /** Per request: its number of policies, and its caller (`undefined`: Redis ran it too late). */
  waiting: { count: number; resolve: (reply: Reply | undefined) => void; reject: (error: unknown) => void }[];
}

/**
 * Requests on their way to Redis, one batch per hash slot (slot 0 on a single Redis): every
 * request that arrives before the event loop's next check phase (or until the batch is full)
 * goes in the same decide call, so a busy instance makes one Redis call for many requests and
 * an idle one sends each at once. Each request stays atomic and exact: the script decides them
 * in turn (see `DECIDE_LUA`).
 */
export class SlotBatches {
  /** Requests not yet sent, by hash slot. */
  private readonly batches = new Map<number, Batch>();

  constructor(
    private readonly scripts: RedisScripts,
    private readonly clock: RedisClock,
  ) {}

  /**
   * Decides requests of one hash slot, sent at local time `sentAt`, in the slot's batch.
   *
   * @throws RateLimitStoreError when Redis ran the call after its deadline (see `RedisClock.deadline`)
   */
  async decide(requests: readonly RateLimitRequest[], charge: boolean, slot: number, sentAt: number, timeoutMs?: number): Promise<Reply> {
    let batch = this.batches.get(slot);
    if (batch === undefined) {
      const opened: Batch = (batch = { keys: [], args: [], waiting: [] });
      this.batches.set(slot, opened);
      setImmediate(() => this.send(slot, opened));
    }
    batch.args.push(String(requests.length), charge ? '1' : '0', this.clock.deadline(slot, sentAt, timeoutMs));
    for (const { key, rule, cost } of requests) {
      batch.keys.push(key);
      batch.args.push(rule.algorithm, String(rule.rps), String(rule.burst), rule.blockMs === undefined ? '0' : String(rule.blockMs), rule.limit === undefined ? '' : String(rule.limit), String(cost));
    }
    const reply = new Promise<Reply | undefined>((resolve, reject) => batch.waiting.push({ count: requests.length, resolve, reject }));
    if (batch.keys.length >= MAX_BATCH_KEYS) this.send(slot, batch);
    const decided = await reply;
    if (decided === undefined) throw new RateLimitStoreError(staleStoreCall(STALE_AFTER_TIMEOUTS, timeoutMs!));
    return decided;
  }

  /** Sends a slot's batch in one decide call (unless it went already) and answers each request. */
  private async send(slot: number, batch: Batch): Promise<void> {
    if (this.batches.get(slot) !== batch) return;
    this.batches.delete(slot);
    const sentAt = this.clock.localNow();
    let raw: number[];
    try {
      raw = await this.scripts.decide(batch.keys, batch.args);
    } catch (error) {
      for (const { reject } of batch.waiting) reject(error);
      return;
    }
    // per request: 0 (past its deadline), or 1 and its policies' outcomes; then Redis's clock
    const redisNow = raw[raw.length - 1];
    const decidedAt = redisNow - this.clock.learn(slot, redisNow - sentAt, sentAt);
    let at = 0;
    for (const { count, resolve } of batch.waiting) {
      if (raw[at] === 0) {
        resolve(undefined);
        at += 1;
      } else {
        resolve({ ...parseAnswer(raw, at + 1, count), decidedAt });
        at += 1 + count * REPLY_WIDTH;
      }
    }
  }
}
