import type { Cluster, Redis } from 'ioredis';
import type { Outcome } from '../../algorithms/algorithm.types.js';
import { invalidStoreOption, storeTimedOut } from '../../rate-limit.messages.js';
import { type Charge, chargeOf, toDecision } from '../decision.js';
import { distinctRequests, spreadDecisions } from '../distinct-requests.js';
import { RateLimitStoreError } from '../rate-limit-store.error.js';
import type { RateLimitDecision, RateLimitRequest, RateLimitStore } from '../rate-limit-store.interface.js';
import { DECIDE_LUA, REFUND_LUA, REPLY_WIDTH } from './decide.lua.js';
import { HASH_SLOTS, hashSlot } from './hash-slot.js';
import { RefusedCache } from './refused-cache.js';

/** The names the scripts are defined under on the ioredis client. */
const DECIDE = 'nestjsRateLimitDecide';
const REFUND = 'nestjsRateLimitRefund';

/** Options of `RedisStore`. */
export interface RedisStoreOptions {
  /** An ioredis client, `Redis` (single server or Sentinel) or `Cluster`. The store never closes it: whoever created it does. */
  client: Redis | Cluster;
  /**
   * Remember refusals, so a flood from a refused client is refused without a Redis call until
   * Redis would admit it again (never longer). Default `true`.
   */
  cacheRefusals?: boolean;
  /**
   * Tests only: a clock (integer ms) sent with every call instead of using Redis `TIME`.
   * Keys still expire on Redis's own clock, at this clock's time plus their TTL, so a test
   * clock must not lie in the past. In production, leave it unset so every instance shares
   * Redis's one clock.
   */
  clock?: () => number;
}

/** Every option there is: any other key is a typo, refused rather than ignored. */
const OPTIONS = new Set<string>(['client', 'cacheRefusals', 'clock']);

/** A call that runs this many timeouts after it was sent charges nothing. */
const STALE_AFTER_TIMEOUTS = 2;
/**
 * How long the smallest offset between Redis's clock and the local one is kept, ms: then the
 * next reply's is taken afresh, so that a clock that drifts or is stepped is followed.
 */
const OFFSET_KEPT_MS = 1_000;
/**
 * Most bucket keys one decide call carries; a batch that reaches it is sent at once. Bounds how
 * long one call holds Redis (a few µs per key) and how big its reply is.
 */
const MAX_BATCH_KEYS = 64;

type ScriptCommand = (numKeys: number, ...args: string[]) => Promise<number[]>;

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

/** A script's answer for one request: per policy, an outcome and the time its state is as of. */
interface Parsed {
  outcomes: Outcome[];
  at: number[];
}

/** The charging calls on one key that are on their way to Redis. */
interface Pending {
  calls: number;
  drained?: Promise<void>;
  drain?: () => void;
}

/** A decide call's answer for one request. */
interface Reply extends Parsed {
  /** When Redis decided, on the local clock, at the earliest (ms): Redis's time less the offset. */
  decidedAt: number;
}

/**
 * Buckets in Redis, shared by every instance of the app, with Redis `TIME` as the clock and
 * one atomic Lua script call per request covering all of its policies (EVALSHA through ioredis
 * `defineCommand`, which reloads the script after NOSCRIPT). Under load the requests that arrive
 * in one event-loop turn share a call, which decides them in turn (see `decide`). Every key expires when its bucket
 * is full again (or its window has passed), no later.
 *
 * On a Redis Cluster, the buckets of one identity share a hash slot. A request whose policies
 * key different identities spans slots: one call per slot runs in parallel, and when any slot
 * refuses, what the others charged is given back, so a refused request leaves no charge.
 *
 * A call that Redis only runs after the caller stopped waiting (`timeoutMs`, e.g. queued in a
 * frozen server) charges nothing.
 *
 * @example new RedisStore({ client: new Redis(process.env.REDIS_URL) })
 * @example new RedisStore({ client: new Cluster([{ host: 'redis-1', port: 6379 }]) })
 */
export class RedisStore implements RateLimitStore {
  readonly client: Redis | Cluster;
  private readonly clock?: () => number;
  private readonly decideScript: ScriptCommand;
  private readonly refundScript: ScriptCommand;
  private readonly cluster: boolean;
  private readonly refused: RefusedCache | undefined;
  /**
   * Charging calls on their way to Redis, by key, while the refused-key cache is on: how many,
   * and, once a caller waits for them, a promise that settles when the last has landed (its
   * answer remembered).
   */
  private readonly pending = new Map<string, Pending>();
  /**
   * Per hash slot, Redis's clock minus the local one, ms, at least: the smallest a reply showed
   * within `OFFSET_KEPT_MS` (NaN: no reply yet). A reply shows Redis's clock when it decided
   * against the local clock before the call was sent, which is never more than Redis's own.
   */
  private readonly offsets: Float64Array;
  /** Per hash slot, when `offsets` was last taken afresh (local ms). */
  private readonly offsetsTakenAt: Float64Array;
  /** Requests not yet sent, by hash slot (0 on a single Redis). */
  private readonly batches = new Map<number, Batch>();

  constructor(options: RedisStoreOptions) {
    const fail = (option: string, value: unknown, expected: string): never => {
      throw new Error(invalidStoreOption('RedisStore', option, value, expected));
    };
    // an ioredis client given as the options themselves has no `client`: the same message says how
    if (typeof (options?.client as Redis | undefined)?.defineCommand !== 'function') {
      fail('client', options?.client, 'must be an ioredis Redis or Cluster client, as in new RedisStore({ client: redis })');
    }
    for (const option of Object.keys(options)) {
      if (!OPTIONS.has(option)) {
        fail(option, (options as unknown as Record<string, unknown>)[option], `is not an option (the options are ${[...OPTIONS].join(', ')})`);
      }
    }
    if (options.cacheRefusals !== undefined && typeof options.cacheRefusals !== 'boolean') {
      fail('cacheRefusals', options.cacheRefusals, 'must be true or false');
    }
    if (options.clock !== undefined && typeof options.clock !== 'function') fail('clock', options.clock, 'must be a function returning ms');
    this.client = options.client;
    this.clock = options.clock;
    this.cluster = (this.client as Cluster).isCluster === true;
    this.refused = options.cacheRefusals === false ? undefined : new RefusedCache();
    this.offsets = new Float64Array(this.cluster ? HASH_SLOTS : 1).fill(NaN);
    this.offsetsTakenAt = new Float64Array(this.offsets.length);
    this.decideScript = this.script(DECIDE, DECIDE_LUA);
    this.refundScript = this.script(REFUND, REFUND_LUA);
  }

  consume(requests: readonly RateLimitRequest[], timeoutMs?: number): Promise<RateLimitDecision[]> {
    return this.call(requests, true, timeoutMs);
  }

  peek(requests: readonly RateLimitRequest[], timeoutMs?: number): Promise<RateLimitDecision[]> {
    return this.call(requests, false, timeoutMs);
  }

  async reset(keys: readonly string[]): Promise<void> {
    this.refused?.forget(keys);
    const groups = this.bySlot(keys);
    await Promise.all([...groups.values()].map((group) => this.client.del(...group.map((i) => keys[i]))));
  }

  async close(): Promise<void> {
    this.refused?.clear();
  }

  /**
   * The decisions for a charge that Redis would certainly refuse, from what it answered before
   * (see `RefusedCache`), without a call; `undefined` when a call is needed. The module asks this
   * before `consume`: such an answer takes no time and says nothing of Redis's health.
   */
  cached(requests: readonly RateLimitRequest[]): RateLimitDecision[] | undefined {
    const outcomes = this.refused?.lookup(requests, this.localNow());
    return outcomes === undefined ? undefined : requests.map((request, i) => toDecision(request, outcomes[i]));
  }

  private async call(requests: readonly RateLimitRequest[], charge: boolean, timeoutMs?: number): Promise<RateLimitDecision[]> {
    // a bad request rejects this call alone, before it can join (and fail) a batch; a key given twice is decided once
    const distinct = distinctRequests(requests, charge ? 'RedisStore.consume' : 'RedisStore.peek');
    if (distinct.positions) return spreadDecisions(await this.call(distinct.requests, charge, timeoutMs), requests, distinct.positions);
    if (requests.length === 0) return [];
    // the caller's timeout counts from here, and so does the deadline Redis gets
    const askedAt = this.localNow();
    const cache = charge ? this.refused : undefined;
    if (cache !== undefined) {
      const known = this.cached(requests);
      if (known !== undefined) return known;
      const calls = cache.contended(requests, askedAt) ? this.drained(requests) : undefined;
      if (calls !== undefined) {
        // A flood on these buckets: calls on them are on their way, and they most likely leave
        // nothing for this request. Their answers come sooner than a call of our own would, so
        // wait for them (once) and look again, with the others that waited: those the buckets
        // can hold go to Redis together, the rest are refused here.
        await calls;
        const now = this.localNow();
        const outcomes = cache.lookupTogether(requests, now);
        if (outcomes !== undefined) return requests.map((request, i) => toDecision(request, outcomes[i]));
        // the caller has had its failMode answer: sending now would charge a request already answered
        if (timeoutMs !== undefined && now - askedAt >= timeoutMs) throw new RateLimitStoreError(storeTimedOut(timeoutMs));
      }
      this.depart(requests);
    }
    try {
      // a single Redis (or Sentinel) takes every key in one call: no slots to work out
      const groups = this.cluster ? this.bySlot(requests.map((request) => request.key)) : undefined;
      const { outcomes, decidedAt } =
        groups === undefined || groups.size === 1
          ? await this.decide(requests, charge, groups?.keys().next().value ?? 0, askedAt, timeoutMs)
          : await this.acrossSlots(requests, groups, charge, askedAt, timeoutMs);
      cache?.remember(requests, outcomes, decidedAt, this.behind);
      return requests.map((request, i) => toDecision(request, outcomes[i]));
    } finally {
      if (cache !== undefined) this.land(requests);
    }
  }

  /** Counts a charging call on these keys as on its way. */
  private depart(requests: readonly RateLimitRequest[]): void {
    for (const { key } of requests) {
      const pending = this.pending.get(key);
      if (pending === undefined) this.pending.set(key, { calls: 1 });
      else pending.calls++;
    }
  }

  /** Counts a charging call on these keys as landed; the last one to land lets those waiting go on. */
  private land(requests: readonly RateLimitRequest[]): void {
    for (const { key } of requests) {
      const pending = this.pending.get(key)!;
      if (--pending.calls > 0) continue;
      this.pending.delete(key);
      pending.drain?.();
    }
  }

  /** When the calls on their way on the first of these keys that has any have all landed; `undefined`: there are none. */
  private drained(requests: readonly RateLimitRequest[]): Promise<void> | undefined {
    for (const { key } of requests) {
      const pending = this.pending.get(key);
      if (pending !== undefined) return (pending.drained ??= new Promise<void>((resolve) => (pending.drain = resolve)));
    }
    return undefined;
  }

  /** Charging calls on `key` still on their way behind the one landing now. */
  private readonly behind = (key: string): number => (this.pending.get(key)?.calls ?? 1) - 1;

  /**
   * Decides a request whose policies live in several hash slots: one call per slot, in
   * parallel. When a slot refuses (or fails), what the others charged is given back.
   */
  private async acrossSlots(
    requests: readonly RateLimitRequest[],
    groups: Map<number, number[]>,
    charge: boolean,
    sentAt: number,
    timeoutMs?: number,
  ): Promise<{ outcomes: Outcome[]; decidedAt: number }> {
    const slots = [...groups];
    const settled = await Promise.allSettled(
      slots.map(([slot, group]) => this.decide(group.map((i) => requests[i]), charge, slot, sentAt, timeoutMs)),
    );
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
          const refunded = await this.refundSlot(group.map((i) => requests[i]), result.value.at);
          group.forEach((i, j) => (outcomes[i] = refunded.outcomes[j]));
        }),
      );
    }
    const failed = settled.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
    return { outcomes, decidedAt };
  }

  /**
   * Decides requests of one hash slot. They join the slot's batch: every request that arrives
   * before the event loop's next check phase (or until the batch is full) goes in the same
   * decide call, so a busy instance makes one Redis call for many requests and an idle one
   * sends each at once. Each request stays atomic and exact: the script decides them in turn.
   */
  private async decide(
    requests: readonly RateLimitRequest[],
    charge: boolean,
    slot: number,
    sentAt: number,
    timeoutMs?: number,
  ): Promise<Reply> {
    let batch = this.batches.get(slot);
    if (batch === undefined) {
      const opened: Batch = (batch = { keys: [], args: [], waiting: [] });
      this.batches.set(slot, opened);
      setImmediate(() => this.send(slot, opened));
    }
    batch.args.push(String(requests.length), charge ? '1' : '0', this.deadline(slot, sentAt, timeoutMs));
    for (const { key, limit, cost } of requests) {
      batch.keys.push(key);
      batch.args.push(limit.algorithm, String(limit.rps), String(limit.burst), String(cost));
    }
    const reply = new Promise<Reply | undefined>((resolve, reject) => batch.waiting.push({ count: requests.length, resolve, reject }));
    if (batch.keys.length >= MAX_BATCH_KEYS) this.send(slot, batch);
    const decided = await reply;
    if (decided === undefined) {
      throw new RateLimitStoreError(`Redis ran the call more than ${STALE_AFTER_TIMEOUTS} x ${timeoutMs} ms after it was sent; it was dropped`);
    }
    return decided;
  }

  /** Sends a slot's batch in one decide call (unless it went already) and answers each request. */
  private async send(slot: number, batch: Batch): Promise<void> {
    if (this.batches.get(slot) !== batch) return;
    this.batches.delete(slot);
    const sentAt = this.localNow();
    let raw: number[];
    try {
      raw = await this.run(this.decideScript, DECIDE_LUA, batch.keys, [this.clock ? String(this.clock()) : '', ...batch.args]);
    } catch (error) {
      for (const { reject } of batch.waiting) reject(error);
      return;
    }
    const redisNow = raw[raw.length - 1];
    const decidedAt = redisNow - this.learnOffset(slot, redisNow - sentAt, sentAt);
    let at = 0;
    for (const { count, resolve } of batch.waiting) {
      if (raw[at] === 0) {
        resolve(undefined);
        at += 1;
      } else {
        resolve({ ...parse(raw, at + 1, count), decidedAt });
        at += 1 + count * REPLY_WIDTH;
      }
    }
  }

  /**
   * Gives back what `consume` took for these decisions (see `RateLimitStore.refund`): one refund
   * script call per hash slot, in parallel. Refusals remembered for those keys are forgotten
   * afterwards: the buckets now admit sooner than they said.
   */
  async refund(decisions: readonly RateLimitDecision[]): Promise<void> {
    // a request some policy refused took nothing (what another hash slot charged went back then)
    if (!decisions.every((decision) => decision.allowed)) return;
    const charges = decisions.map(chargeOf).filter((charge): charge is Charge => charge !== undefined);
    if (charges.length === 0) return;
    const keys = charges.map((charge) => charge.request.key);
    const groups = this.bySlot(keys);
    await Promise.all(
      [...groups.values()].map((group) => this.refundSlot(group.map((i) => charges[i].request), group.map((i) => charges[i].at))),
    );
    this.refused?.forget(keys);
  }

  /** Gives back what a decide call charged for requests of one hash slot (`at` from its reply). */
  private async refundSlot(requests: readonly RateLimitRequest[], at: readonly number[]): Promise<Parsed> {
    const args: string[] = [this.clock ? String(this.clock()) : ''];
    requests.forEach(({ limit, cost }, i) => {
      args.push(limit.algorithm, String(limit.rps), String(limit.burst), String(cost), String(at[i]));
    });
    const keys = requests.map((request) => request.key);
    return parse(await this.run(this.refundScript, REFUND_LUA, keys, args), 0, requests.length);
  }

  /**
   * Takes in Redis's clock minus the local one as a reply from `slot` showed it (`sample`, at
   * local time `now`), and returns the offset to use: the smallest of the last `OFFSET_KEPT_MS`.
   * Each sample is at least the true offset (Redis decided after the call was sent), so the
   * smallest is the closest, and never less than it while the two clocks keep their pace.
   */
  private learnOffset(slot: number, sample: number, now: number): number {
    if (!(this.offsets[slot] <= sample) || now - this.offsetsTakenAt[slot] >= OFFSET_KEPT_MS) {
      this.offsets[slot] = sample;
      this.offsetsTakenAt[slot] = now;
    }
    return this.offsets[slot];
  }

  /**
   * The time on Redis's clock after which a call sent at `sentAt` is surely of no use: its
   * caller stopped waiting `timeoutMs` after sending, and a busy event loop may notice that
   * late, so the deadline is twice that. Redis's clock is estimated from the replies: the offset
   * they show is never less than Redis's own, so the deadline is never
   * early, however late a reply is read. A call run between the two charges for a request that
   * got its failMode outcome: fewer admissions, never more. '' before a reply, or with a test clock.
   */
  private deadline(slot: number, sentAt: number, timeoutMs: number | undefined): string {
    const offset = this.offsets[slot];
    if (timeoutMs === undefined || this.clock || Number.isNaN(offset)) return '';
    return String(Math.ceil(sentAt + offset + STALE_AFTER_TIMEOUTS * timeoutMs));
  }

  /** Indexes of `keys` by hash slot (a single group on a single Redis). */
  private bySlot(keys: readonly string[]): Map<number, number[]> {
    const groups = new Map<number, number[]>();
    keys.forEach((key, i) => {
      const slot = this.cluster ? hashSlot(key) : 0;
      const group = groups.get(slot);
      if (group) group.push(i);
      else groups.set(slot, [i]);
    });
    return groups;
  }

  private localNow(): number {
    return this.clock ? this.clock() : performance.now();
  }

  /**
   * Runs a script by its SHA. ioredis sends it whole after a NOSCRIPT reply, but only once per
   * connection until the next flush: calls that got NOSCRIPT together with a `SCRIPT FLUSH` between
   * them would fail, so those are sent whole here.
   */
  private async run(command: ScriptCommand, lua: string, keys: string[], args: string[]): Promise<number[]> {
    try {
      return await command(keys.length, ...keys, ...args);
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
      return (await this.client.eval(lua, keys.length, ...keys, ...args)) as number[];
    }
  }

  private script(name: string, lua: string): ScriptCommand {
    const client = this.client as unknown as Record<string, ScriptCommand>;
    if (typeof client[name] !== 'function') this.client.defineCommand(name, { lua });
    return client[name].bind(this.client);
  }
}

/** `count` policies' outcomes from a script reply, `REPLY_WIDTH` numbers each from `start`. */
function parse(raw: readonly number[], start: number, count: number): Parsed {
  const outcomes: Outcome[] = [];
  const at: number[] = [];
  for (let i = 0; i < count; i++) {
    const base = start + i * REPLY_WIDTH;
    outcomes.push({
      allowed: raw[base] === 1,
      remaining: raw[base + 1],
      retryMs: raw[base + 2],
      fullMs: raw[base + 3],
      nextMs: raw[base + 4],
      delayMs: raw[base + 5],
      at: raw[base + 6],
    });
    at.push(raw[base + 6]);
  }
  return { outcomes, at };
}
