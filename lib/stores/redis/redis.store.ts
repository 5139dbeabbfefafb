import { Logger } from '@nestjs/common';
import type { Cluster, Redis } from 'ioredis';
import type { Outcome } from '../../algorithms/algorithm.types.js';
import { clientCommandTimeout } from '../../rate-limit.messages.js';
import { Deadlines } from '../../utils/deadline-queue.js';
import { type Charge, takeCharge, toDecision } from '../decision.js';
import { distinctRequests, spreadDecisions } from '../distinct-requests.js';
import { storeTimeout } from '../rate-limit-store.error.js';
import type { RateLimitDecision, RateLimitRequest, RateLimitStore } from '../rate-limit-store.interface.js';
import { type StoreClock, storeClock } from '../store-clock.js';
import { groupBySlot, HASH_SLOTS } from './hash-slot.js';
import { PendingCalls } from './pending-calls.js';
import { RefusedCache } from './refused-cache.js';
import { RedisClock } from './redis-clock.js';
import { RedisScripts } from './redis-scripts.js';
import { checkRedisStoreOptions, commandTimeoutOf, givenClock, type RedisStoreOptions } from './redis-store-options.js';
import { SlotBatches } from './slot-batches.js';
import { unlinkUnder } from './unlink-under.js';

export type { RedisStoreClock, RedisStoreOptions } from './redis-store-options.js';

/**
 * Buckets in Redis, shared by every instance of the app, with Redis `TIME` as the clock and
 * one atomic Lua script call per request covering all of its policies (an EVALSHA of a script
 * loaded when the store starts; see `RedisScripts`). Under load the requests that arrive
 * in one event-loop turn share a call, which decides them in turn (see `SlotBatches`). Every key
 * expires when its bucket is full again (or its window has passed), no later.
 *
 * On a Redis Cluster, the buckets of one identity share a hash slot. A request whose policies
 * key different identities spans slots: one call per slot runs in parallel, and when any slot
 * refuses, what the others charged is given back, so a refused request leaves no charge.
 *
 * Each call is bounded by the caller's `timeoutMs` from when it is sent (see `timesCalls`): a
 * stall of the app's own event loop before it leaves, or while its reply waits to be read, is not
 * taken for a slow Redis. A call that Redis only runs after its caller stopped waiting (queued in
 * a frozen server, say) charges nothing.
 *
 * On a Redis-compatible server whose scripts cannot read `TIME`, the store warns once and
 * decides on the app's clock (see `RedisStoreOptions.clock`; `clock: 'app'` says so up front).
 *
 * @example new RedisStore({ client: new Redis(process.env.REDIS_URL) })
 * @example new RedisStore({ client: new Cluster([{ host: 'redis-1', port: 6379 }]) })
 * @example new RedisStore({ client: new Redis(process.env.DRAGONFLY_URL), clock: 'app' })
 */
export class RedisStore implements RateLimitStore {
  /** Every call is bounded by its `timeoutMs` from when it leaves the process (see `SlotBatches`). */
  readonly timesCalls = true;
  readonly kind = 'redis';
  readonly client: Redis | Cluster;
  /** The clock given in the options (`{ now() }` or a function), if any (see `RateLimitStore.clock`). */
  readonly clock: StoreClock | undefined;
  private readonly cluster: boolean;
  private readonly clocks: RedisClock;
  private readonly scripts: RedisScripts;
  private readonly batches: SlotBatches;
  /** The timers of calls on their way, one per timeout. */
  private readonly deadlines = new Deadlines();
  private readonly refused: RefusedCache | undefined;
  /** Charging calls on their way, by key: only kept while `refused` is on. */
  private readonly pending = new PendingCalls();

  constructor(options: RedisStoreOptions) {
    checkRedisStoreOptions(options);
    this.client = options.client;
    this.cluster = (this.client as Cluster).isCluster === true;
    const given = givenClock(options.clock);
    this.clock = storeClock(options.clock);
    this.clocks = new RedisClock(given, options.clock === 'app' ? undefined : given, this.cluster ? HASH_SLOTS : 1);
    this.scripts = new RedisScripts(this.client, this.clocks);
    this.batches = new SlotBatches(this.scripts, this.clocks, this.deadlines);
    this.refused = options.cacheRefusals === false ? undefined : new RefusedCache();
    const commandTimeout = commandTimeoutOf(this.client);
    if (commandTimeout !== undefined) new Logger('RedisStore').warn(clientCommandTimeout(commandTimeout));
  }

  consume(requests: readonly RateLimitRequest[], timeoutMs?: number): Promise<RateLimitDecision[]> {
    return this.call(requests, true, timeoutMs);
  }

  peek(requests: readonly RateLimitRequest[], timeoutMs?: number): Promise<RateLimitDecision[]> {
    return this.call(requests, false, timeoutMs);
  }

  async reset(keys: readonly string[]): Promise<void> {
    this.refused?.forget(keys);
    const groups = groupBySlot(keys, this.cluster);
    await Promise.all([...groups.values()].map((group) => this.client.del(...group.map((i) => keys[i]))));
  }

  /**
   * Forgets every bucket under `prefix` (see `RateLimitStore.resetAll`): SCAN and UNLINK in
   * batches, on every master of a Cluster (see `unlinkUnder`), and every remembered refusal.
   */
  async resetAll(prefix: string): Promise<void> {
    this.refused?.clear();
    await unlinkUnder(this.client, prefix);
    // a refusal remembered from a call answered meanwhile is of a bucket now gone
    this.refused?.clear();
  }

  async close(): Promise<void> {
    this.refused?.clear();
    this.deadlines.close();
    this.scripts.close();
  }

  /**
   * The decisions for a charge that Redis would certainly refuse, from what it answered before
   * (see `RefusedCache`), without a call; `undefined` when a call is needed. The module asks this
   * before `consume`: such an answer takes no time and says nothing of Redis's health.
   */
  cached(requests: readonly RateLimitRequest[]): RateLimitDecision[] | undefined {
    const outcomes = this.refused?.lookup(requests, this.clocks.localNow());
    return outcomes === undefined ? undefined : requests.map((request, i) => toDecision(request, outcomes[i]));
  }

  /**
   * Gives back what `consume` took for these decisions (see `RateLimitStore.refund`): one refund
   * script call per hash slot, in parallel. Refusals remembered for those keys are forgotten at
   * once and again afterwards: the buckets now admit sooner than they said.
   */
  async refund(decisions: readonly RateLimitDecision[]): Promise<void> {
    // a request some policy refused took nothing (what another hash slot charged went back then)
    if (!decisions.every((decision) => decision.allowed)) return;
    const charges = decisions.map(takeCharge).filter((charge): charge is Charge => charge !== undefined);
    if (charges.length === 0) return;
    const keys = charges.map((charge) => charge.request.key);
    // forgotten now too: a request on these keys that comes before the reply then goes to Redis,
    // behind the refund, rather than being refused from what was true before it
    this.refused?.forget(keys);
    const groups = groupBySlot(keys, this.cluster);
    await Promise.all(
      [...groups.values()].map((group) => this.scripts.refund(group.map((i) => charges[i].request), group.map((i) => charges[i].at))),
    );
    this.refused?.forget(keys);
  }

  private async call(requests: readonly RateLimitRequest[], charge: boolean, timeoutMs?: number): Promise<RateLimitDecision[]> {
    // a bad request rejects this call alone, before it can join (and fail) a batch; a key given twice is decided once
    const distinct = distinctRequests(requests, charge ? 'RedisStore.consume' : 'RedisStore.peek');
    if (distinct.positions) return spreadDecisions(await this.call(distinct.requests, charge, timeoutMs), requests, distinct.positions);
    if (requests.length === 0) return [];
    const cache = charge ? this.refused : undefined;
    if (cache !== undefined) {
      const known = this.cached(requests);
      if (known !== undefined) return known;
      const calls = cache.contended(requests, this.clocks.localNow()) ? this.pending.drained(requests) : undefined;
      if (calls !== undefined) {
        // A flood on these buckets: calls on them are on their way, and they most likely leave
        // nothing for this request. Their answers come sooner than a call of our own would, so
        // wait for them (once) and look again, with the others that waited: those the buckets
        // can hold go to Redis together, the rest are refused here.
        const failure = await calls;
        // Redis is slow or gone: a call of our own would add its timeout to theirs
        if (failure !== undefined) throw failure;
        const outcomes = cache.lookupTogether(requests, this.clocks.localNow());
        if (outcomes !== undefined) return requests.map((request, i) => toDecision(request, outcomes[i]));
      }
      this.pending.depart(requests);
    }
    let failure: unknown;
    try {
      // a single Redis (or Sentinel) takes every key in one call: no slots to work out
      const groups = this.cluster ? groupBySlot(requests.map((request) => request.key), true) : undefined;
      const { outcomes, decidedAt } =
        groups === undefined || groups.size === 1
          ? await this.batches.decide(requests, charge, groups?.keys().next().value ?? 0, timeoutMs)
          : await this.acrossSlots(requests, groups, charge, timeoutMs);
      cache?.remember(requests, outcomes, decidedAt, this.pending.behind);
      return requests.map((request, i) => toDecision(request, outcomes[i]));
    } catch (error) {
      failure = error;
      throw error;
    } finally {
      if (cache !== undefined) this.pending.land(requests, failure);
    }
  }

  /**
   * Decides a request whose policies live in several hash slots: one call per slot, in
   * parallel. When a slot refuses (or fails), what the others charged is given back.
   */
  private async acrossSlots(
    requests: readonly RateLimitRequest[],
    groups: Map<number, number[]>,
    charge: boolean,
    timeoutMs: number | undefined,
  ): Promise<{ outcomes: Outcome[]; decidedAt: number }> {
    const slots = [...groups];
    const settled = await Promise.allSettled(slots.map(([slot, group]) => this.batches.decide(group.map((i) => requests[i]), charge, slot, timeoutMs)));
    const outcomes: Outcome[] = new Array(requests.length);
    let allowed = true;
    let decidedAt = Infinity;
    settled.forEach((result, k) => {
      if (result.status === 'rejected') return void (allowed = false);
      slots[k][1].forEach((i, j) => (outcomes[i] = result.value.outcomes[j]));
      allowed &&= result.value.outcomes.every((outcome) => outcome.allowed);
      decidedAt = Math.min(decidedAt, result.value.decidedAt);
    });
    if (charge && !allowed) {
      await Promise.all(
        settled.map(async (result, k) => {
          if (result.status === 'rejected' || !result.value.outcomes.every((outcome) => outcome.allowed)) return;
          const group = slots[k][1];
          const refund = this.scripts.refund(group.map((i) => requests[i]), result.value.at);
          const refunded = timeoutMs === undefined ? await refund : await this.deadlines.race(refund, timeoutMs, () => storeTimeout(timeoutMs));
          group.forEach((i, j) => (outcomes[i] = refunded.outcomes[j]));
        }),
      );
    }
    const failed = settled.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
    return { outcomes, decidedAt };
  }
}
