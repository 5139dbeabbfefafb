import { createHash } from 'node:crypto';
import { Logger } from '@nestjs/common';
import type { Cluster, Redis } from 'ioredis';
import { storeFailed } from '../../rate-limit.messages.js';
import { RateLimitStoreError } from '../rate-limit-store.error.js';
import type { RateLimitRequest } from '../rate-limit-store.interface.js';
import { DECIDE_LUA, REFUND_LUA } from './decide.lua.js';
import type { RedisClock } from './redis-clock.js';
import { type Answer, decodeAnswer, encodeRefund } from './script-protocol.js';
import { redisTimeUnusable, TIME_PROBE, TIME_PROBE_LUA, timeUnusable } from './time-probe.js';

/** A script as the store runs it: its text, and the SHA-1 that EVALSHA names it by. */
interface Script {
  readonly lua: string;
  readonly sha: string;
}

function script(lua: string): Script {
  return { lua, sha: createHash('sha1').update(lua).digest('hex') };
}

const DECIDE = script(DECIDE_LUA);
const REFUND = script(REFUND_LUA);

type ScriptCommand = (numKeys: number, ...args: string[]) => Promise<unknown>;

/**
 * Per client, the one `ready` listener that loads the scripts again after a reconnect, and how
 * many open stores use it: a client that many stores share (one per test, say) gets one.
 */
const reloaders = new WeakMap<Redis | Cluster, { stores: number; load: () => void }>();

/**
 * Loads both scripts into Redis (on a Cluster, into every master it knows), so that calls find
 * them. Nothing waits for it; where it fails (Redis down, the Cluster not ready yet), the next
 * `ready` loads them, and until then a call that meets `NOSCRIPT` sends its script whole.
 */
function loadScripts(client: Redis | Cluster): void {
  const nodes: (Redis | Cluster)[] =
    (client as Cluster).isCluster === true ? (client as Cluster).nodes('master') : [client];
  for (const node of nodes) {
    for (const { lua } of [DECIDE, REFUND]) node.script('LOAD', lua).catch(() => undefined);
  }
}

/**
 * The decide and refund scripts on one ioredis client. They are loaded into Redis when the store
 * starts (`SCRIPT LOAD`, on every master of a Cluster) and again whenever the client is ready after
 * a reconnect, so no decision pays for sending and compiling them; each call is an `EVALSHA`, and
 * one that meets a Redis without them (`NOSCRIPT`: restarted, flushed, failed over) is sent whole.
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
  private readonly logger = new Logger('RedisStore');

  constructor(
    private readonly client: Redis | Cluster,
    private readonly clock: RedisClock,
  ) {
    this.timeChecked = !clock.redisTime;
    let reloader = reloaders.get(client);
    if (reloader === undefined) {
      reloaders.set(client, (reloader = { stores: 0, load: () => loadScripts(client) }));
      client.on('ready', reloader.load);
    }
    reloader.stores++;
    // a client that is to connect only when used (lazyConnect) is left alone until then
    if (client.status !== 'wait') this.start();
  }

  /** Runs `DECIDE_LUA` on `keys`, with `args` after its clock (ARGV[2] on; see `script-protocol.ts`): its raw reply. */
  decide(keys: readonly string[], args: readonly string[]): Promise<number[]> {
    return this.run(DECIDE, keys, args);
  }

  /** Gives back what a decide call charged for requests of one hash slot (`at` from its reply). */
  async refund(requests: readonly RateLimitRequest[], at: readonly number[]): Promise<Answer> {
    const { keys, args } = encodeRefund(requests, at);
    return decodeAnswer(await this.run(REFUND, keys, args), 0, requests.length);
  }

  /** The store is closed: the last store of its client stops reloading the scripts on its reconnections. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    const reloader = reloaders.get(this.client);
    if (reloader === undefined || --reloader.stores > 0) return;
    this.client.off('ready', reloader.load);
    reloaders.delete(this.client);
  }

  /**
   * Runs a script by its SHA (sent on the client's socket before this returns), and whole when
   * Redis does not have it. A failure is a `RateLimitStoreError`: `'unavailable'` when Redis could
   * not be reached, `'error'` when it answered one.
   */
  private async run({ lua, sha }: Script, keys: readonly string[], args: readonly string[]): Promise<number[]> {
    if (!this.started) this.start();
    if (!this.timeChecked) this.timeCheck ??= this.checkTime();
    const now = this.clock.scriptNow();
    try {
      try {
        return (await this.client.evalsha(sha, keys.length, ...keys, now, ...args)) as number[];
      } catch (error) {
        if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
        return (await this.client.eval(lua, keys.length, ...keys, now, ...args)) as number[];
      }
    } catch (error) {
      // a reply error is Redis's answer; anything else (closed, not writable, refused) is Redis out of reach
      const reason = error instanceof Error && error.name === 'ReplyError' ? 'error' : 'unavailable';
      throw new RateLimitStoreError(storeFailed(error), { cause: error, reason });
    }
  }

  /** The store's first talk with Redis: the scripts loaded, and `TIME` probed unless a clock is given. */
  private start(): void {
    this.started = true;
    loadScripts(this.client);
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
