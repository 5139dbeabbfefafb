import { createHash } from 'node:crypto';
import { Logger } from '@nestjs/common';
import type { Cluster, Redis } from 'ioredis';
import { storeFailed } from '../../rate-limit.messages.js';
import { RateLimitStoreError } from '../rate-limit-store.error.js';
import type { RateLimitRequest } from '../rate-limit-store.interface.js';
import { DECIDE_LUA, LIBRARY, LIBRARY_LUA, REFUND_LUA } from './decide.lua.js';
import { FLAT_LUA } from './flat.lua.js';
import { mastersOf } from './client-nodes.js';
import { warnIfEvicting } from './eviction-check.js';
import type { RedisClock } from './redis-clock.js';
import { type Answer, type DecideCall, decodeAnswer, encodeRefund } from './script-protocol.js';
import { redisTimeUnusable, TIME_PROBE, TIME_PROBE_LUA, timeUnusable } from './time-probe.js';

/**
 * A call as the store runs it: its function in the library (what FCALL names), and the same call
 * as a script, its text and the SHA-1 that EVALSHA names it by.
 */
interface Script {
  readonly fn: string;
  readonly lua: string;
  readonly sha: string;
}

function script(fn: string, lua: string): Script {
  return { fn, lua, sha: createHash('sha1').update(lua).digest('hex') };
}

const DECIDE = script(LIBRARY.decide, DECIDE_LUA);
const REFUND = script(LIBRARY.refund, REFUND_LUA);
const FLAT = script(LIBRARY.flat, FLAT_LUA);

type ScriptCommand = (numKeys: number, ...args: string[]) => Promise<unknown>;

/**
 * Per client: the one `ready` listener that loads the calls again after a reconnect (and reads the
 * eviction policy of a server not read yet), how many open stores use it (a client that many stores
 * share, one per test say, gets one), and whether the library is loaded on every master the client
 * knows, so that calls can be `FCALL`s.
 */
interface Loader {
  stores: number;
  load: () => void;
  functions: boolean;
  /** The servers whose eviction policy has been read, by address (see `warnIfEvicting`). */
  evictionRead: Set<string>;
  /** Whether a store of the client has loaded the calls: the next store made on it leaves that to `ready`. */
  started: boolean;
}

const loaders = new WeakMap<Redis | Cluster, Loader>();

/** How a server that has the library already answers `FUNCTION LOAD` of it (Redis 7.0 on). */
const LIBRARY_EXISTS = /^ERR Library '[^']*' already exists/;
/** How a server that lacks a called function answers `FCALL` (restarted without it, a new master). */
const FUNCTION_NOT_FOUND = /^ERR Function not found/;

/**
 * Loads the calls into Redis (on a Cluster, into every master it knows) so that no call sends or
 * compiles them: both scripts, and the library where the server has Redis Functions (7.0 on). Once
 * every master has the library, calls are `FCALL`s; until then, and on servers without functions
 * (6.x, or a compatible server without them), `EVALSHA`s. Nothing waits for it; where it fails
 * (Redis down, the Cluster not ready yet), the next `ready` loads them again, and until then a call
 * that meets `NOSCRIPT` sends its script whole.
 */
function loadCalls(client: Redis | Cluster, loader: Loader): void {
  const nodes = mastersOf(client);
  for (const node of nodes) {
    for (const { lua } of [DECIDE, FLAT, REFUND]) node.script('LOAD', lua).catch(() => undefined);
  }
  const loaded = nodes.map((node) =>
    node.function('LOAD', LIBRARY_LUA).then(
      () => true,
      (error: unknown) => error instanceof Error && LIBRARY_EXISTS.test(error.message),
    ),
  );
  void Promise.all(loaded).then((all) => {
    if (nodes.length > 0 && all.every(Boolean)) loader.functions = true;
  });
}

/**
 * The store's calls (decide, flat, refund) on one ioredis client. They are loaded into Redis when
 * the store starts (on every master of a Cluster) and again whenever the client is ready after a
 * reconnect, so no decision pays for sending and compiling them; each call is an `FCALL` of the
 * library, or an `EVALSHA` (see `loadCalls` and `run`).
 * Every call's ARGV[1] is the clock (see `RedisClock.scriptNow`); with Redis `TIME`, a probe that
 * it works inside a script starts with the store, and no call waits for it (see `checkTime`).
 */
export class RedisScripts {
  /** Whether the scripts' clock is settled: a given one, or Redis `TIME` probed (see `checkTime`). */
  private timeChecked: boolean;
  /** The `TIME` probe under way, if any. */
  private timeCheck: Promise<void> | undefined;
  /** Whether the store has started talking to Redis (a lazyConnect client is left alone until its first call). */
  private started = false;
  private closed = false;
  private readonly loader: Loader;
  private readonly logger = new Logger('RedisStore');

  constructor(
    private readonly client: Redis | Cluster,
    private readonly clock: RedisClock,
  ) {
    this.timeChecked = !clock.redisTime;
    let loader = loaders.get(client);
    if (loader === undefined) {
      const created: Loader = {
        stores: 0,
        load: () => {
          loadCalls(client, created);
          void warnIfEvicting(client, created.evictionRead, this.logger);
        },
        functions: false,
        evictionRead: new Set(),
        started: false,
      };
      loaders.set(client, (loader = created));
      client.on('ready', loader.load);
    }
    this.loader = loader;
    loader.stores++;
    // a client that is to connect only when used (lazyConnect) is left alone until then
    if (client.status !== 'wait') this.start();
  }

  /** Runs a decide call as `encodeDecide` made it (the flat call, or the general one; see `script-protocol.ts`): its raw reply. */
  runDecideCall({ keys, args, flat }: DecideCall): Promise<unknown> {
    return this.run(flat ? FLAT : DECIDE, keys, args);
  }

  /** Gives back what a decide call charged for requests of one hash slot (`at` from its reply). */
  async refund(requests: readonly RateLimitRequest[], at: readonly number[]): Promise<Answer> {
    const { keys, args } = encodeRefund(requests, at);
    return decodeAnswer((await this.run(REFUND, keys, args)) as number[], 0, requests.length);
  }

  /** The store is closed: the last store of its client stops reloading the scripts on its reconnections. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (--this.loader.stores > 0) return;
    this.client.off('ready', this.loader.load);
    loaders.delete(this.client);
  }

  /**
   * Runs a call (sent on the client's socket before this returns): its function where the library
   * is loaded, else its script by SHA, and the script whole when Redis has neither. A server that
   * lost the library (restarted, a new master) has the calls loaded again, and this one runs as a
   * script. A failure is a `RateLimitStoreError`: `'unavailable'` when Redis could not be reached,
   * `'error'` when it answered one.
   */
  private async run({ fn, lua, sha }: Script, keys: readonly string[], args: readonly string[]): Promise<unknown> {
    if (!this.started) this.start();
    if (!this.timeChecked) this.timeCheck ??= this.checkTime();
    const now = this.clock.scriptNow();
    try {
      if (this.loader.functions) {
        try {
          return await this.client.fcall(fn, keys.length, ...keys, now, ...args);
        } catch (error) {
          if (!(error instanceof Error) || !FUNCTION_NOT_FOUND.test(error.message)) throw error;
          this.loader.functions = false;
          this.loader.load();
        }
      }
      try {
        return await this.client.evalsha(sha, keys.length, ...keys, now, ...args);
      } catch (error) {
        if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
        return await this.client.eval(lua, keys.length, ...keys, now, ...args);
      }
    } catch (error) {
      // a reply error is Redis's answer; anything else (closed, not writable, refused) is Redis out of reach
      const reason = error instanceof Error && error.name === 'ReplyError' ? 'error' : 'unavailable';
      throw new RateLimitStoreError(storeFailed(error), { cause: error, reason });
    }
  }

  /**
   * The store's first talk with Redis: the calls loaded (by the first store of its client: a store
   * made later on the same client finds them there, or loaded again by the client's `ready`), and
   * `TIME` probed unless a clock is given.
   */
  private start(): void {
    this.started = true;
    if (!this.loader.started) {
      this.loader.started = true;
      this.loader.load();
    }
    if (!this.timeChecked) this.timeCheck ??= this.checkTime();
  }

  /**
   * Probes Redis `TIME` inside a script: one EVAL (ioredis sends a defined command's first call
   * on a connection whole), sent when the store is made (on a lazyConnect client not yet used:
   * with the first call, ahead of it on the connection). No call waits for it: those sent before
   * its answer read `TIME` (on a server where it does not work, they decide at the epoch or
   * fail, for that one round trip). When `TIME` does not work, warns once and sends the app's
   * clock from then on. When Redis did not run the probe (down, loading), nothing is known: the
   * next call starts it again, without waiting for it either.
   */
  private async checkTime(): Promise<void> {
    try {
      const why = await timeUnusable(this.define(TIME_PROBE, TIME_PROBE_LUA)(0));
      if (why !== undefined) {
        this.clock.useAppClock();
        this.logger.warn(redisTimeUnusable(why));
      }
      this.timeChecked = true;
    } catch {
      // not run: probed again by the next call
    } finally {
      this.timeCheck = undefined;
    }
  }

  private define(name: string, lua: string): ScriptCommand {
    const client = this.client as unknown as Record<string, ScriptCommand>;
    if (typeof client[name] !== 'function') this.client.defineCommand(name, { lua });
    return client[name].bind(this.client);
  }
}
