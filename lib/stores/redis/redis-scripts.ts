import { createHash } from 'node:crypto';
import { Logger } from '@nestjs/common';
import type { Cluster, Redis } from 'ioredis';
import { redisRefusesScripts, storeFailed } from '../../rate-limit.messages.js';
import { RateLimitStoreError } from '../rate-limit-store.error.js';
import type { RateLimitRequest } from '../rate-limit-store.interface.js';
import { DECIDE_LUA, LIBRARY, LIBRARY_LUA, REFUND_LUA } from './decide.lua.js';
import { FLAT_LUA } from './flat.lua.js';
import { isCluster, mastersOf } from './client-nodes.js';
import { warnIfEvicting } from './eviction-check.js';
import type { RedisClock } from './redis-clock.js';
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

/** A call as `run` sends it: its script, keys, and arguments (the clock first). */
interface Call {
  readonly script: Script;
  readonly keys: readonly string[];
  readonly args: readonly string[];
}

/**
 * A call that met a hash slot being moved from one master to another with its keys on both sides
 * (`TRYAGAIN`): no call on several of those keys can run until the move is over, while a call on
 * one key can, where the key is. Thrown by `RedisScripts` for `RedisStore` to decide the keys one
 * by one; never a store error.
 */
export class SlotMoving extends Error {
  override readonly name = 'SlotMoving';

  constructor() {
    super('the hash slot is being moved: its keys are on two masters');
  }
}

/** The Cluster client's connection to the node at `address` (`host:port`), if it has one. */
function nodeAt(cluster: Cluster, address: string): Redis | undefined {
  return cluster.nodes('all').find(({ options }) => `${options.host}:${options.port}` === address);
}

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
  /** The last load, settled once every master has answered it. */
  loading: Promise<void>;
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
  const scripts = nodes.flatMap((node) =>
    [DECIDE, FLAT, REFUND, PROBE].map(({ lua }) => node.script('LOAD', lua).catch(() => undefined)),
  );
  const loaded = nodes.map((node) =>
    node.function('LOAD', LIBRARY_LUA).then(
      () => true,
      (error: unknown) => error instanceof Error && LIBRARY_EXISTS.test(error.message),
    ),
  );
  loader.loading = Promise.all([...scripts, ...loaded]).then(async () => {
    if (nodes.length > 0 && (await Promise.all(loaded)).every(Boolean)) loader.functions = true;
  });
}

/**
 * The store's calls (decide, flat, refund) on one ioredis client. They are loaded into Redis when
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
  private readonly cluster: boolean;

  constructor(
    private readonly client: Redis | Cluster,
    private readonly clock: RedisClock,
  ) {
    this.cluster = isCluster(client);
    let loader = loaders.get(client);
    if (loader === undefined) {
      const created: Loader = {
        stores: 0,
        load: () => {
          loadCalls(client, created);
          void warnIfEvicting(client, created.evictionRead, this.logger);
        },
        functions: false,
        loading: Promise.resolve(),
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

  /** Runs a decide call as `encodeDecide` made it (the flat call, or the general one; see `script-protocol.ts`) on the keys of `slot`: its raw reply. */
  runDecideCall({ keys, args, flat }: DecideCall, slot: number): Promise<unknown> {
    return this.run(flat ? FLAT : DECIDE, keys, args, slot);
  }

  /** Gives back what a decide call charged for requests of one hash slot (`at` from its reply). */
  async refund(requests: readonly RateLimitRequest[], at: readonly number[], slot: number): Promise<Answer> {
    const { keys, args } = encodeRefund(requests, at);
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
    this.client.off('ready', this.loader.load);
    loaders.delete(this.client);
  }

  /**
   * Runs a call (sent on the client's socket before this returns): its function where the library
   * is loaded, else its script by SHA, and the script whole when Redis has neither. A server that
   * lost the library (restarted, a new master) has the calls loaded again, and this one runs as a
   * script. On a Cluster the call goes straight to the master of `slot`, so that a slot being
   * moved is seen at once (see `redirected`). A failure is a `RateLimitStoreError`: `'unavailable'`
   * when Redis could not be reached, `'error'` when it answered one.
   *
   * @throws SlotMoving when the slot is being moved and the call's keys are on both sides
   */
  private async run(script: Script, keys: readonly string[], args: readonly string[], slot: number): Promise<unknown> {
    if (!this.started) this.start();
    if (!this.probed) this.probe ??= this.checkServer();
    const call: Call = { script, keys, args: [this.clock.scriptNow(), ...args] };
    const master = this.cluster ? this.masterOf(slot) : undefined;
    try {
      if (master === undefined) return await this.runOn(this.client, call);
      try {
        return await this.runOn(master, call);
      } catch (error) {
        return await this.redirected(error, call);
      }
    } catch (error) {
      if (error instanceof SlotMoving) throw error;
      // a reply error is Redis's answer; anything else (closed, not writable, refused) is Redis out of reach
      const reason = error instanceof Error && error.name === 'ReplyError' ? 'error' : 'unavailable';
      throw new RateLimitStoreError(storeFailed(error), { cause: error, reason });
    }
  }

  /** Runs a call on a server, or through the Cluster client's routing (see `run`). */
  private async runOn(on: Redis | Cluster, { script: { fn, lua, sha }, keys, args }: Call): Promise<unknown> {
    if (this.loader.functions) {
      try {
        return await on.fcall(fn, keys.length, ...keys, ...args);
      } catch (error) {
        if (!(error instanceof Error) || !FUNCTION_NOT_FOUND.test(error.message)) throw error;
        this.loader.functions = false;
        this.loader.load();
      }
    }
    try {
      return await on.evalsha(sha, keys.length, ...keys, ...args);
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
      return await on.eval(lua, keys.length, ...keys, ...args);
    }
  }

  /**
   * What a call sent straight to a slot's master does when it failed there: the slot has another
   * master (`MOVED`: the client learns the new owners, and the call goes through its routing), the
   * slot is being moved and the call's keys are no longer here (`ASK`: to the importing master,
   * after `ASKING`), or are on both sides (`TRYAGAIN`, also from the importing master: the caller
   * decides the keys one by one, see `RedisStore`); the connection closed under it (the client
   * dropped the node after a failover): through the client's routing, as the client itself would
   * send it again. ioredis's own handling of `TRYAGAIN` waits 100 ms a try, up to 16 tries.
   *
   * @throws SlotMoving on `TRYAGAIN`
   */
  private async redirected(error: unknown, call: Call): Promise<unknown> {
    const cluster = this.client as Cluster;
    if (!(error instanceof Error)) throw error;
    if (error.name !== 'ReplyError') return this.runOn(cluster, call);
    const [code, , address] = error.message.split(' ');
    if (code === 'TRYAGAIN') throw new SlotMoving();
    if (code === 'MOVED') {
      cluster.refreshSlotsCache();
      return this.runOn(cluster, call);
    }
    if (code !== 'ASK') throw error;
    const importing = nodeAt(cluster, address);
    if (importing === undefined) return this.runOn(cluster, call);
    // ASKING lets the next command on this connection in: the call's first command follows it at once
    importing.asking().catch(() => undefined);
    try {
      return await this.runOn(importing, call);
    } catch (asked) {
      if (asked instanceof Error && asked.message.startsWith('TRYAGAIN')) throw new SlotMoving();
      throw asked;
    }
  }

  /** The Cluster client's connection to the master of `slot`, as it last learned it; `undefined` before it knows. */
  private masterOf(slot: number): Redis | undefined {
    const address = (this.client as Cluster).slots[slot]?.[0];
    return address === undefined ? undefined : nodeAt(this.client as Cluster, address);
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
      return await this.client.evalsha(PROBE.sha, 0);
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
      return this.client.eval(PROBE.lua, 0);
    }
  }
}
