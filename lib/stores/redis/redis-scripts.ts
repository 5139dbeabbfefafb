import { Logger } from '@nestjs/common';
import type { Cluster, Redis } from 'ioredis';
import type { RateLimitRequest } from '../rate-limit-store.interface.js';
import { DECIDE_LUA, REFUND_LUA } from './decide.lua.js';
import type { RedisClock } from './redis-clock.js';
import { type Answer, parseAnswer } from './script-reply.js';
import { redisTimeUnusable, TIME_PROBE, TIME_PROBE_LUA, timeUnusable } from './time-probe.js';

/** The names the scripts are defined under on the ioredis client. */
const DECIDE = 'nestjsRateLimitDecide';
const REFUND = 'nestjsRateLimitRefund';

type ScriptCommand = (numKeys: number, ...args: string[]) => Promise<number[]>;

/**
 * The decide and refund scripts on one ioredis client, defined on it once as commands
 * (`defineCommand`: a call is an EVALSHA, the script is sent whole only when Redis does not have
 * it). Every call's ARGV[1] is the clock (see `RedisClock.scriptNow`); with Redis `TIME`, a probe
 * that it works inside a script starts with the store, and no call waits for it (see `checkTime`).
 */
export class RedisScripts {
  private readonly decideCommand: ScriptCommand;
  private readonly refundCommand: ScriptCommand;
  /** Whether the scripts' clock is settled: a given one, or Redis `TIME` probed (see `checkTime`). */
  private timeChecked: boolean;
  /** The `TIME` probe under way, if any. */
  private timeCheck: Promise<void> | undefined;
  private readonly logger = new Logger('RedisStore');

  constructor(
    private readonly client: Redis | Cluster,
    private readonly clock: RedisClock,
  ) {
    this.decideCommand = this.define(DECIDE, DECIDE_LUA);
    this.refundCommand = this.define(REFUND, REFUND_LUA);
    this.timeChecked = !clock.redisTime;
    // a client that is to connect only when used (lazyConnect) is left alone until then
    if (!this.timeChecked && client.status !== 'wait') this.timeCheck = this.checkTime();
  }

  /** Runs `DECIDE_LUA` on `keys`, with `args` after its clock (ARGV[2] on): its raw reply. */
  decide(keys: readonly string[], args: readonly string[]): Promise<number[]> {
    return this.run(this.decideCommand, DECIDE_LUA, keys, args);
  }

  /** Gives back what a decide call charged for requests of one hash slot (`at` from its reply). */
  async refund(requests: readonly RateLimitRequest[], at: readonly number[]): Promise<Answer> {
    const args: string[] = [];
    requests.forEach(({ rule, cost }, i) => {
      args.push(rule.algorithm, String(rule.rps), String(rule.burst), String(rule.blockMs ?? 0), rule.limit === undefined ? '' : String(rule.limit), String(cost), String(at[i]));
    });
    const keys = requests.map((request) => request.key);
    return parseAnswer(await this.run(this.refundCommand, REFUND_LUA, keys, args), 0, requests.length);
  }

  /**
   * Runs a script by its SHA. ioredis sends it whole after a NOSCRIPT reply, but only once per
   * connection until the next flush: calls that got NOSCRIPT together with a `SCRIPT FLUSH` between
   * them would fail, so those are sent whole here.
   */
  private async run(command: ScriptCommand, lua: string, keys: readonly string[], args: readonly string[]): Promise<number[]> {
    if (!this.timeChecked) this.timeCheck ??= this.checkTime();
    const now = this.clock.scriptNow();
    try {
      return await command(keys.length, ...keys, now, ...args);
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
      return (await this.client.eval(lua, keys.length, ...keys, now, ...args)) as number[];
    }
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
