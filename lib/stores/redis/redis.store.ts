import type { Cluster, Redis } from 'ioredis';
import { toDecision } from '../decision.js';
import type { RateLimitDecision, RateLimitRequest, RateLimitStore } from '../rate-limit-store.interface.js';
import { DECIDE_LUA, REPLY_WIDTH } from './decide.lua.js';

/** The name the script is defined under on the ioredis client. */
const COMMAND = 'nestjsRateLimitDecide';

/** Options of `RedisStore`. */
export interface RedisStoreOptions {
  /** An ioredis client. The store never closes it: whoever created it does. */
  client: Redis | Cluster;
  /**
   * Tests only: a clock (integer ms) sent with every call instead of using Redis `TIME`.
   * Keys still expire on Redis's own clock, at this clock's time plus their TTL, so a test
   * clock must not lie in the past. In production, leave it unset so every instance shares
   * Redis's one clock.
   */
  clock?: () => number;
}

type DecideCommand = (numKeys: number, ...args: string[]) => Promise<number[]>;

/**
 * Buckets in Redis, shared by every instance of the app: one atomic Lua script call per
 * request, covering all of its policies (EVALSHA through ioredis `defineCommand`, which
 * reloads the script after NOSCRIPT), with Redis `TIME` as the clock. Every key expires when its
 * bucket is full again (or its window has passed), no later.
 *
 * @example new RedisStore({ client: new Redis(process.env.REDIS_URL) })
 */
export class RedisStore implements RateLimitStore {
  readonly client: Redis | Cluster;
  private readonly clock?: () => number;
  private readonly decide: DecideCommand;

  constructor(options: RedisStoreOptions) {
    this.client = options.client;
    this.clock = options.clock;
    if (typeof (this.client as unknown as Record<string, unknown>)[COMMAND] !== 'function') {
      this.client.defineCommand(COMMAND, { lua: DECIDE_LUA });
    }
    const command = (this.client as unknown as Record<string, DecideCommand>)[COMMAND];
    this.decide = command.bind(this.client);
  }

  consume(requests: readonly RateLimitRequest[]): Promise<RateLimitDecision[]> {
    return this.call(requests, true);
  }

  peek(requests: readonly RateLimitRequest[]): Promise<RateLimitDecision[]> {
    return this.call(requests, false);
  }

  async reset(keys: readonly string[]): Promise<void> {
    if (keys.length > 0) await this.client.del(...keys);
  }

  private async call(requests: readonly RateLimitRequest[], charge: boolean): Promise<RateLimitDecision[]> {
    const args: string[] = [];
    for (const request of requests) args.push(request.key);
    args.push(this.clock ? String(this.clock()) : '', charge ? '1' : '0');
    for (const { limit, cost } of requests) {
      args.push(limit.algorithm, String(limit.rps), String(limit.burst), String(cost));
    }
    const reply = await this.decide(requests.length, ...args);
    return requests.map((request, i) => {
      const at = i * REPLY_WIDTH;
      return toDecision(request, {
        allowed: reply[at] === 1,
        remaining: reply[at + 1],
        retryMs: reply[at + 2],
        resetMs: reply[at + 3],
        nextMs: reply[at + 4],
        delayMs: reply[at + 5],
      });
    });
  }
}

