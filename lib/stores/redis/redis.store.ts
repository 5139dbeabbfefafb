import type { Cluster, Redis } from 'ioredis';
import type { Outcome } from '../../algorithms/algorithm.types.js';
import { invalidStoreOption } from '../../rate-limit.errors.js';
import { type Charge, chargeOf, toDecision } from '../decision.js';
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
interface Reply {
  outcomes: Outcome[];
  at: number[];
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
  /** Calls in flight on contended keys (see `RefusedCache.contended`), by key. */
  private readonly gates = new Map<string, Promise<void>>();
  /** Per hash slot, Redis's clock minus the local one, ms, at least, from the last reply (NaN: none yet). */
  private readonly offsets: Float64Array;
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

  private async call(requests: readonly RateLimitRequest[], charge: boolean, timeoutMs?: number): Promise<RateLimitDecision[]> {
    if (requests.length === 0) return [];
    const cache = charge ? this.refused : undefined;
    let gate: { key: string; open: () => void } | undefined;
    while (cache) {
      const cached = cache.lookup(requests, this.localNow());
      if (cached !== undefined) return requests.map((request, i) => toDecision(request, cached[i]));
      // a key whose refusal just ran out: one call at a time, the others wait and look again
      const key = cache.contended(requests, this.localNow());
      if (key === undefined) break;
      const busy = this.gates.get(key);
      if (busy === undefined) {
        let open!: () => void;
        this.gates.set(key, new Promise<void>((resolve) => (open = resolve)));
        gate = { key, open };
        break;
      }
      await busy;
    }
    try {
      const sentAt = this.localNow();
      // a single Redis (or Sentinel) takes every key in one call: no slots to work out
      const groups = this.cluster ? this.bySlot(requests.map((request) => request.key)) : undefined;
      const outcomes =
        groups === undefined || groups.size === 1
          ? (await this.decide(requests, charge, groups?.keys().next().value ?? 0, sentAt, timeoutMs)).outcomes
          : await this.acrossSlots(requests, groups, charge, sentAt, timeoutMs);
      cache?.remember(requests, outcomes, sentAt);
      return requests.map((request, i) => toDecision(request, outcomes[i]));
    } finally {
      if (gate) {
        this.gates.delete(gate.key);
        gate.open();
      }
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
    sentAt: number,
    timeoutMs?: number,
  ): Promise<Outcome[]> {
    const slots = [...groups];
    const settled = await Promise.allSettled(
      slots.map(([slot, group]) => this.decide(group.map((i) => requests[i]), charge, slot, sentAt, timeoutMs)),
    );
    const outcomes: Outcome[] = new Array(requests.length);
    let allowed = true;
    settled.forEach((result, k) => {
      if (result.status === 'rejected') return void (allowed = false);
      slots[k][1].forEach((i, j) => (outcomes[i] = result.value.outcomes[j]));
      allowed &&= result.value.outcomes.every((outcome) => outcome.allowed);
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
    return outcomes;
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
    // Redis ran the script after sending it, so this is at least Redis's clock minus ours
    this.offsets[slot] = raw[raw.length - 1] - sentAt;
    let at = 0;
    for (const { count, resolve } of batch.waiting) {
      if (raw[at] === 0) {
        resolve(undefined);
        at += 1;
      } else {
        resolve(parse(raw, at + 1, count));
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
  private async refundSlot(requests: readonly RateLimitRequest[], at: readonly number[]): Promise<Reply> {
    const args: string[] = [this.clock ? String(this.clock()) : ''];
    requests.forEach(({ limit, cost }, i) => {
      args.push(limit.algorithm, String(limit.rps), String(limit.burst), String(cost), String(at[i]));
    });
    const keys = requests.map((request) => request.key);
    return parse(await this.run(this.refundScript, REFUND_LUA, keys, args), 0, requests.length);
  }

  /**
   * The time on Redis's clock after which a call sent at `sentAt` is surely of no use: its
   * caller stopped waiting `timeoutMs` after sending, and a busy event loop may notice that
   * late, so the deadline is twice that. Redis's clock is estimated from the last reply: its time
   * against when that call was sent, which is never behind Redis's own, so the deadline is never
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
function parse(raw: readonly number[], start: number, count: number): Reply {
  const outcomes: Outcome[] = [];
  const at: number[] = [];
  for (let i = 0; i < count; i++) {
    const base = start + i * REPLY_WIDTH;
    outcomes.push({
      allowed: raw[base] === 1,
      remaining: raw[base + 1],
      retryMs: raw[base + 2],
      resetMs: raw[base + 3],
      nextMs: raw[base + 4],
      delayMs: raw[base + 5],
      at: raw[base + 6],
    });
    at.push(raw[base + 6]);
  }
  return { outcomes, at };
}
