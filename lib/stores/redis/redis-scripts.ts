import { createHash } from 'node:crypto';
import { Logger } from '@nestjs/common';
import { redisRefusesScripts, storeFailed } from '../../rate-limit.messages.js';
import { RateLimitStoreError } from '../rate-limit-store.error.js';
import type { RateLimitRequest } from '../rate-limit-store.interface.js';
import { DECIDE_LUA, LIBRARY, LIBRARY_LUA, REFUND_LUA } from './decide.lua.js';
import { FLAT_LUA } from './flat.lua.js';
import { warnIfEvicting } from './eviction-check.js';
import type { RedisClock } from './redis-clock.js';
import { type RedisClient, redisPortOf } from './redis-clients.js';
import { type RedisPort, SlotMoving } from './redis-port.js';
import { type Answer, type DecideCall, decodeAnswer, encodeRefund } from './script-protocol.js';
import { redisTimeUnusable, TIME_PROBE, TIME_PROBE_LUA, type TimeProbeResult, timeUnusable } from './time-probe.js';

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
const PROBE = script('', TIME_PROBE_LUA);

/** How long start waits for the store's first talk with a Redis it can reach, ms (see `RedisScripts.ready`). */
const START_CHECK_MS = 2_000;

type ScriptCommand = (numKeys: number, ...args: string[]) => Promise<unknown>;

/**
 * Per client: the one `ready` listener that loads the calls again after a reconnect (and reads the
 * eviction policy of a server not read yet), the port keeping its servers connected (see
 * `RedisPort.keepConnected`), how many open stores use them (a client that many stores
 * share, one per test say, gets one), and whether the library is loaded on every master the client
 * knows, so that calls can be `FCALL`s.
 */
interface Loader {
  stores: number;
  load: () => void;
  /** Stops `load` being called on the client's `ready`, and the port keeping its servers connected. */
  off: () => void;
  functions: boolean;
  /** The last load, settled once every master has answered it. */
  loading: Promise<void>;
  /** The servers whose eviction policy has been read, by address (see `warnIfEvicting`). */
  evictionRead: Set<string>;
  /** Whether a store of the client has loaded the calls: the next store made on it leaves that to `ready`. */
  started: boolean;
}

const loaders = new WeakMap<RedisClient, Loader>();

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
function loadCalls(port: RedisPort, loader: Loader): void {
  const nodes = port.masters();
  const scripts = nodes.flatMap((node) =>
    [DECIDE, FLAT, REFUND, PROBE].map(({ lua }) => node.call(['SCRIPT', 'LOAD', lua]).catch(() => undefined)),
  );
  const loaded = nodes.map((node) =>
    node.call(['FUNCTION', 'LOAD', LIBRARY_LUA]).then(
      () => true,
      (error: unknown) => error instanceof Error && LIBRARY_EXISTS.test(error.message),
    ),
  );
  loader.loading = Promise.all([...scripts, ...loaded]).then(async () => {
    if (nodes.length > 0 && (await Promise.all(loaded)).every(Boolean)) loader.functions = true;
  });
}

/**
 * The store's calls (decide, flat, refund) on one Redis client (through its port: see `RedisPort`). They are loaded into Redis when
 * the store starts (on every master of a Cluster) and again whenever the client is ready after a
 * reconnect, so no decision pays for sending and compiling them; each call is an `FCALL` of the
 * library, or an `EVALSHA` (see `loadCalls` and `run`).
 * Every call's ARGV[1] is the clock (see `RedisClock.scriptNow`); with Redis `TIME`, a probe that
 * it works inside a script starts with the store, and no call waits for it (see `checkServer`).
 */
export class RedisScripts {
  /** Whether the server has answered the probe (see `checkServer`). */
  private probed = false;
  /** The probe under way, if any. */
  private probe: Promise<void> | undefined;
  /** What the server answered when it refused to run a script for this client (see `ready`). */
  private refusal: string | undefined;
  /** Whether `ready` is waiting: a refusal found meanwhile is its error, else it is logged. */
  private starting = false;
  /** Whether the store has started talking to Redis (a lazyConnect client is left alone until its first call). */
  private started = false;
  private closed = false;
  private readonly loader: Loader;
  private readonly logger = new Logger('RedisStore');
  private readonly port: RedisPort;

  constructor(
    private readonly client: RedisClient,
    private readonly clock: RedisClock,
  ) {
    const port = (this.port = redisPortOf(client)!);
    let loader = loaders.get(client);
    if (loader === undefined) {
      const created: Loader = {
        stores: 0,
        load: () => {
          loadCalls(port, created);
          void warnIfEvicting(port, created.evictionRead, this.logger);
        },
        off: () => undefined,
        functions: false,
        loading: Promise.resolve(),
        evictionRead: new Set(),
        started: false,
      };
      loaders.set(client, (loader = created));
      const offReady = port.onReady(created.load);
      const offNodes = port.keepConnected();
      created.off = () => {
        offReady();
        offNodes();
      };
    }
    this.loader = loader;
    loader.stores++;
    // a client that is to connect only when used (lazyConnect) is left alone until then
    if (!port.waiting()) this.start();
  }

  /** Runs a decide call as `encodeDecide` made it (the flat call, or the general one; see `script-protocol.ts`) on the keys of `slot`: its raw reply. */
  runDecideCall({ keys, args, flat }: DecideCall, slot: number): Promise<unknown> {
    return this.run(flat ? FLAT : DECIDE, keys, args, slot);
  }

  /**
   * Gives back what a decide call charged for requests of one hash slot (`at` from its reply, or a
   * settle's since), `amounts[i]` tokens each, or takes that much more where it is below 0 (a settle).
   */
  async refund(
    requests: readonly RateLimitRequest[],
    amounts: readonly number[],
    at: readonly number[],
    slot: number,
  ): Promise<Answer> {
    const { keys, args } = encodeRefund(requests, amounts, at);
    return decodeAnswer((await this.run(REFUND, keys, args, slot)) as number[], 0, requests.length);
  }

  /**
   * Resolves once the store's first talk with Redis is over (the calls loaded on every master, the
   * server's scripts and `TIME` checked), so that the first decision pays for none of it; at once
   * for a client that connects when first used (lazyConnect), and after `START_CHECK_MS` at the
   * most: a Redis that is down or slow does not keep the app from starting.
   *
   * @throws Error when the server refuses to run scripts for this client (an ACL without
   * `@scripting`, the commands renamed away): no decision could ever be made
   */
  async ready(): Promise<void> {
    if (!this.started) return;
    this.starting = true;
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<void>((resolve) => (timer = setTimeout(resolve, START_CHECK_MS)));
    await Promise.race([(this.probe ?? Promise.resolve()).then(() => this.loader.loading), waited]);
    clearTimeout(timer);
    this.starting = false;
    if (this.refusal !== undefined) throw new Error(redisRefusesScripts(this.refusal));
  }

  /** The store is closed: the last store of its client stops reloading the scripts on its reconnections. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (--this.loader.stores > 0) return;
    this.loader.off();
    loaders.delete(this.client);
  }

  /**
   * Runs a call (sent on the client's socket before this returns, on ioredis): its function where
   * the library is loaded, else its script by SHA, and the script whole when Redis has neither. A
   * server that lost the library (restarted, a new master) has the calls loaded again, and this
   * one runs as a script. On a Cluster the call goes to the master of `slot` (see
   * `RedisPort.script`). A failure is a `RateLimitStoreError`: `'unavailable'` when Redis could not
   * be reached, `'error'` when it answered one.
   *
   * @throws SlotMoving when the slot is being moved and the call's keys are on both masters
   */
  private async run(
    { fn, lua, sha }: Script,
    keys: readonly string[],
    args: readonly string[],
    slot: number,
  ): Promise<unknown> {
    if (!this.started) this.start();
    if (!this.probed) this.probe ??= this.checkServer();
    const tail = [keys.length, ...keys, this.clock.scriptNow(), ...args];
    try {
      if (this.loader.functions) {
        try {
          return await this.port.script(slot, ['FCALL', fn, ...tail]);
        } catch (error) {
          if (!(error instanceof Error) || !FUNCTION_NOT_FOUND.test(error.message)) throw error;
          this.loader.functions = false;
          this.loader.load();
        }
      }
      try {
        return await this.port.script(slot, ['EVALSHA', sha, ...tail]);
      } catch (error) {
        if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
        return await this.port.script(slot, ['EVAL', lua, ...tail]);
      }
    } catch (error) {
      if (error instanceof SlotMoving) throw error;
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
    if (!this.probed) this.probe ??= this.checkServer();
  }

  /**
   * Checks, once the calls are loaded, that the server runs scripts for this client and, unless a
   * clock is given, that Redis `TIME` works inside them: one probe script (`EVALSHA`, or the script
   * whole when the server has not kept it). No call waits for it: those sent before its answer
   * read `TIME` (on a server where it does not work, they decide at the epoch or fail, for that
   * one round trip). When `TIME` does not work, warns once and sends the app's clock from then
   * on. A server that refuses scripts (and has not taken the library either, whose `FCALL`s would
   * do) is told by `ready`, or logged when start is over. When Redis did not run the probe (down,
   * loading), nothing is known: the next call starts it again, without waiting for it either.
   */
  private async checkServer(): Promise<void> {
    try {
      await this.loader.loading;
      const found = await timeUnusable(this.probeTime());
      this.probed = true;
      this.found(found);
    } catch {
      // not run: probed again by the next call
    } finally {
      this.probe = undefined;
    }
  }

  /** Takes in what the probe found (see `checkServer`). */
  private found(found: TimeProbeResult): void {
    if (found === undefined) return;
    if ('refused' in found) {
      // the library's FCALLs run where EVAL and SCRIPT are renamed away
      if (this.loader.functions) return;
      this.refusal = found.refused;
      if (!this.starting) this.logger.error(redisRefusesScripts(found.refused));
      return;
    }
    if (!this.clock.redisTime) return;
    this.clock.useAppClock();
    this.logger.warn(redisTimeUnusable(found.unusable));
  }

  /** Runs the `TIME` probe: the client's own command of that name if it has one (a test's), else the loaded script. */
  private async probeTime(): Promise<unknown> {
    const own = (this.client as unknown as Record<string, ScriptCommand | undefined>)[TIME_PROBE];
    if (typeof own === 'function') return own.call(this.client, 0);
    try {
      return await this.port.anyServer(['EVALSHA', PROBE.sha, 0]);
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
      return this.port.anyServer(['EVAL', PROBE.lua, 0]);
    }
  }
}
