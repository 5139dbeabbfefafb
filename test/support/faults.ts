import { Agent, request as httpRequest } from 'node:http';
import { Controller, type ExecutionContext, Get, Injectable, Module, UseGuards } from '@nestjs/common';
import {
  type LimitedCall,
  RateLimit,
  RateLimitGuard,
  RateLimitModule,
  type RateLimitModuleOptions,
  RateLimitStore,
  type RateLimitStoreError,
} from '../../lib/index.js';
import type { RateLimitStoreErrorReason } from '../../lib/stores/rate-limit-store.error.js';
import { bucketKey } from '../../lib/keys/bucket-key.js';
import { type AdapterName, startApp, type TestApp } from './app.js';
import { redisCommand } from './redis/client.js';
import { connectLimiterClient, type OpenClient, type OtherClient } from './redis/clients.js';
import { type RedisServer, startRedisServer, stopRedisServer } from './redis/process.js';
import { RunQueueWait } from './run-queue.js';

/**
 * The harness of `test/e2e/faults.e2e-spec.ts`: an app whose guard times itself (`TimedGuard`), a
 * steady load of requests over a keep-alive HTTP client (`Load`), what Redis counts against what
 * the clients were told (`ledger`), the time until limiting is correct again (`timeToCorrectLimiting`),
 * the figures every scenario prints (`report`), and a `Scenario` that owns its servers, app and
 * load and stops them all, also when a test fails.
 *
 * Time on a shared 2-core machine: the OS may keep the test's JS thread off the CPU for 100 ms
 * and more while other processes run. That time (the thread's run-queue wait, from
 * /proc/<pid>/task/<pid>/schedstat) is not the limiter's: `RunQueueWait` measures it, so that the
 * spec can check its bounds on the measured time minus it. Both figures are printed.
 */

/** The limiter's timeout, ms: the app gives up on a Redis call after this long. */
export const TIMEOUT = 100;
/** A request with no response within this long counts as hung. */
const HUNG_MS = 3_000;
/** Workers of the load, each sending one request at a time, at most one every PACE_MS. */
const WORKERS = 24;
const PACE_MS = 30;
/** Api keys per group of load keys. */
const LOAD_KEYS = 4;
/** The tight probe policy: PROBE_LIMIT admitted per key, ever (30-day window). */
export const PROBE_LIMIT = 3;
/** Probe requests beyond the limit, which Redis must refuse. */
export const PROBE_EXTRA = 2;
const PREFIX = 'rl-faults:';

export const runQueue = new RunQueueWait();

/**
 * A decision as `TimedGuard` timed it: `ms` from the guard's start to its verdict, `leftMs` of that
 * from when its store call left (the event loop's next check phase, where a batch is sent: before
 * it, the app's own work on other requests holds it, which `timeout` does not count), and the
 * OS's run-queue wait over each.
 *
 * `lateMs`: how late, after a timer set when the call left and due when its timeout is, the
 * check phase that follows it ran (0 until it does): where the store checks its deadlines, after
 * the reads that follow its timer (see `DeadlineQueue`), which also run the app's work on other
 * requests. The product's own timer waits on the same event loop: what held the loop then (a
 * collection whose helper threads wait for a CPU, the app's work on other requests) held both, and
 * the run-queue wait does not count it, as the JS thread was not runnable.
 */
export interface TimedDecision {
  ms: number;
  stolenMs: number;
  leftMs: number;
  leftStolenMs: number;
  lateMs: number;
}

/**
 * What the limiter added to a decision after its call left: `leftMs` less the time that was
 * not the limiter's, the larger of the run-queue wait and the event loop's lateness at the
 * timeout. Each is a part of the interval that was not the limiter's; they may be the same
 * stall, so only the larger is taken off: never more than was not the limiter's.
 */
export function limiterAddedMs({ leftMs, leftStolenMs, lateMs }: TimedDecision): number {
  return Math.max(0, leftMs - Math.max(leftStolenMs, lateMs));
}

/** canActivate's own time: what the limiter adds to a request, without HTTP noise. */
@Injectable()
export class TimedGuard extends RateLimitGuard {
  static samples: TimedDecision[] = [];
  /** The lateness timers not yet fired: cleared when the app stops. */
  static readonly probes = new Set<NodeJS.Timeout>();

  override async canActivate(context: ExecutionContext): Promise<boolean> {
    const started = performance.now();
    const waited = runQueue.ms();
    let left = { at: started, waited };
    const sample: TimedDecision = { ms: 0, stolenMs: 0, leftMs: 0, leftStolenMs: 0, lateMs: 0 };
    try {
      const verdict = super.canActivate(context);
      // set after the store's batch was (in the guard's synchronous part): runs right after it is sent
      setImmediate(() => {
        left = { at: performance.now(), waited: runQueue.ms() };
        const due = left.at + TIMEOUT;
        const probe = setTimeout(() => {
          TimedGuard.probes.delete(probe);
          setImmediate(() => (sample.lateMs = Math.max(0, performance.now() - due)));
        }, TIMEOUT);
        TimedGuard.probes.add(probe);
      });
      return await verdict;
    } finally {
      const ended = performance.now();
      sample.ms = ended - started;
      sample.stolenMs = runQueue.ms() - waited;
      sample.leftMs = Math.max(0, ended - left.at);
      sample.leftStolenMs = sample.leftMs === 0 ? 0 : runQueue.ms() - left.waited;
      TimedGuard.samples.push(sample);
      const seam = this.contexts.for('http')!;
      seam.setHeader(context, 'x-limiter-ms', sample.ms.toFixed(1));
      // the app runs in the test's process: its clock is the client's
      seam.setHeader(context, 'x-limiter-left', left.at.toFixed(1));
    }
  }

  /** Tells the client why failMode decided ('closed' and 'open'; 'local' decides without failing). */
  protected override onStoreFailure(call: LimitedCall, error: RateLimitStoreError): boolean {
    call.seam.setHeader(call.context, 'x-limiter-failure-reason', error.reason);
    // the message is for the report only: checks read the reason
    call.seam.setHeader(call.context, 'x-limiter-failure', error.message.replace(/[^\x20-\x7e]/g, '?').slice(0, 200));
    return super.onStoreFailure(call, error);
  }
}

/** Calls the script dropped as late (`stale`) although their reply came back within the timeout. */
export function droppedInTime(outcomes: readonly Outcome[]): Outcome[] {
  return outcomes.filter((o) => o.reason === 'stale' && o.limiterMs < TIMEOUT);
}

/**
 * Whether the call behind a failure may have run in Redis (and charged): not when the breaker
 * stopped it, the script found it past its deadline, or the client could not send it. `unavailable`
 * covers both a call never sent and one whose connection closed after it was sent: only ioredis's
 * own message (offline queue off, stream not writeable) tells the first apart.
 */
function mayHaveRun({ reason, failure }: Outcome): boolean {
  if (reason === 'breaker_open' || reason === 'stale') return false;
  return !(reason === 'unavailable' && /writeable|enableOfflineQueue/.test(failure ?? ''));
}

@Controller()
@UseGuards(TimedGuard)
class FaultController {
  /** The load: a limit never reached, so Redis admits it and its count is the number it admitted. */
  @RateLimit({ name: 'load', algorithm: 'fixed_window', limit: 1_000_000, window: '30d', key: 'api-key' })
  @Get('load')
  load() {
    return { ok: true };
  }

  @RateLimit({ name: 'probe', algorithm: 'fixed_window', limit: PROBE_LIMIT, window: '30d', key: 'api-key' })
  @Get('probe')
  probe() {
    return { ok: true };
  }
}

async function startFaultApp(adapter: AdapterName, options: RateLimitModuleOptions): Promise<TestApp> {
  @Module({
    imports: [RateLimitModule.forRoot({ timeout: TIMEOUT, prefix: PREFIX, guard: false, ...options })],
    controllers: [FaultController],
  })
  class FaultAppModule {}
  return startApp(FaultAppModule, adapter);
}

/** One response as the client saw it. status 0: no response within HUNG_MS; -1: connection error. */
export interface Outcome {
  key: string;
  status: number;
  retryAfter: string | undefined;
  /** The response carries rate-limit headers: a store (Redis, or 'local' in memory) decided it. */
  decided: boolean;
  /** The guard's time, ms, from its header. */
  limiterMs: number;
  /** When its store call left the app (`performance.now()` of this process, which runs the app), from its header. */
  leftAt: number;
  /** Why the store could not decide, when failMode did: the store error's reason. */
  reason: RateLimitStoreErrorReason | undefined;
  /** That error's message, for the report. */
  failure: string | undefined;
  started: number;
  ended: number;
}

/** HTTP/1.1 keep-alive client: lighter than fetch, so the load leaves the CPU to what it measures. */
export class HttpClient {
  private readonly agent = new Agent({ keepAlive: true, maxSockets: WORKERS + PROBE_LIMIT + PROBE_EXTRA + 8 });

  constructor(private readonly base: string) {}

  send(path: string, apiKey: string): Promise<Outcome> {
    const started = performance.now();
    return new Promise((resolve) => {
      let settled = false;
      const finish = (status: number, headers: Record<string, string | string[] | undefined> = {}) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve({
          key: apiKey,
          status,
          retryAfter: headers['retry-after'] as string | undefined,
          decided: headers['x-ratelimit-remaining'] !== undefined,
          limiterMs: Number(headers['x-limiter-ms'] ?? NaN),
          leftAt: Number(headers['x-limiter-left'] ?? NaN),
          reason: headers['x-limiter-failure-reason'] as RateLimitStoreErrorReason | undefined,
          failure: headers['x-limiter-failure'] as string | undefined,
          started,
          ended: performance.now(),
        });
      };
      const req = httpRequest(`${this.base}${path}`, { agent: this.agent, headers: { 'x-api-key': apiKey } }, (res) => {
        res.resume();
        res.once('end', () => finish(res.statusCode ?? -1, res.headers));
        res.once('error', () => finish(-1));
      });
      const timer = setTimeout(() => {
        finish(0);
        req.destroy();
      }, HUNG_MS);
      req.once('error', () => finish(-1));
      req.end();
    });
  }

  close(): void {
    this.agent.destroy();
  }
}

/** A steady stream: WORKERS requests at most in flight, each worker at most one per PACE_MS. */
export class Load {
  readonly outcomes: Outcome[] = [];
  private running = true;
  private readonly workers: Promise<void>[];

  /** @param keys the api keys spread over; assign another group to move the load to it */
  constructor(
    private readonly client: HttpClient,
    public keys: readonly string[],
  ) {
    this.workers = Array.from({ length: WORKERS }, (_, i) => this.work(i));
  }

  private async work(worker: number): Promise<void> {
    for (let n = worker; this.running; n += WORKERS) {
      const outcome = await this.client.send('/load', this.keys[n % this.keys.length]);
      this.outcomes.push(outcome);
      const wait = outcome.started + PACE_MS - performance.now();
      if (wait > 0 && this.running) await pause(wait);
    }
  }

  /** Resolves once `count` responses that a store admitted have come back. */
  async warm(count = 100): Promise<void> {
    const deadline = performance.now() + 5_000;
    while (this.outcomes.filter((o) => o.status === 200 && o.decided).length < count) {
      if (performance.now() > deadline) throw new Error(`load did not warm up: ${tally(this.outcomes)}`);
      await pause(10);
    }
  }

  /** Stops the workers and waits for every request in flight to come back. */
  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.workers);
  }
}

export function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}

export function keyGroup(group: string): string[] {
  return Array.from({ length: LOAD_KEYS }, (_, i) => `load-${group}-${i}`);
}

/** What Redis counts in a fixed_window key of a policy (0 when it does not exist). */
export async function storedCount(server: RedisServer, policy: 'load' | 'probe', apiKey: string): Promise<number> {
  const raw = await redisCommand(
    server.port,
    ['GET', bucketKey(PREFIX, policy, 'fixed_window', `api-key:${apiKey}`)],
    1_000,
  );
  // GET replies with a bulk string, or null for a missing key
  return raw === null ? 0 : Number((raw as string).split('|')[1]);
}

export async function storedTotal(server: RedisServer, apiKeys: readonly string[]): Promise<number> {
  let total = 0;
  for (const apiKey of apiKeys) total += await storedCount(server, 'load', apiKey);
  return total;
}

/**
 * What Redis counts for a group of load keys ('closed' or 'open') against what the app told
 * clients. Every request Redis admitted was charged (counted >= admitted). A call the app gave
 * up on (its timeout) may still have run in Redis within the script's deadline (2 x timeout) and
 * charged: at most those (`late`) may be counted beyond what was admitted.
 */
export async function ledger(server: RedisServer, outcomes: readonly Outcome[], apiKeys: readonly string[]) {
  const mine = outcomes.filter((o) => apiKeys.includes(o.key));
  const admitted = mine.filter((o) => o.status === 200 && o.reason === undefined).length;
  const late = mine.filter((o) => o.reason !== undefined && mayHaveRun(o)).length;
  const counted = await storedTotal(server, apiKeys);
  return { requests: mine.length, admitted, late, counted };
}

/** What `ledger` finds for a group of keys. */
export type Ledger = Awaited<ReturnType<typeof ledger>>;

export function showLedger(name: string, { requests, admitted, late, counted }: Ledger): string {
  return (
    `${name}: ${requests} requests, Redis admitted ${admitted}, Redis counts ${counted} ` +
    `(failMode answers whose call may have run: ${late})`
  );
}

/** `timeToCorrectLimiting` gives up this long after Redis answered again (three times the spec's bound). */
const RECOVERY_GIVE_UP_MS = 3_000;

export interface Recovery {
  /** From Redis answering again to the end of the first correctly limited probe round, ms. */
  ms: number;
  /** Of that, the time the OS kept the JS thread waiting for a CPU, ms. */
  stolenMs: number;
  rounds: number;
}

/**
 * Rounds of PROBE_LIMIT + PROBE_EXTRA concurrent probe requests on a fresh key until one is
 * limited correctly and by Redis: exactly PROBE_LIMIT admitted, the rest 429, and Redis holding
 * that count for the key. Measured from `since`, when Redis answered again.
 */
export async function timeToCorrectLimiting(
  client: HttpClient,
  server: RedisServer,
  since: number,
  tag: string,
): Promise<Recovery> {
  const waited = runQueue.ms();
  for (let round = 1; ; round++) {
    const key = `probe-${tag}-${round}`;
    const statuses = await probeStatuses(client, key);
    const at = performance.now();
    const stolenMs = runQueue.ms() - waited;
    if (statuses.join() === CORRECT_PROBE.join()) {
      const stored = await storedCount(server, 'probe', key).catch(() => -1);
      if (stored === PROBE_LIMIT) return { ms: at - since, stolenMs, rounds: round };
    }
    if (at - since > RECOVERY_GIVE_UP_MS) return { ms: Infinity, stolenMs: 0, rounds: round };
    await pause(10);
  }
}

export const CORRECT_PROBE = [...Array<number>(PROBE_LIMIT).fill(200), ...Array<number>(PROBE_EXTRA).fill(429)];

/** Probe requests sent together on one key, statuses in ascending order. */
export async function probeStatuses(client: HttpClient, key: string): Promise<number[]> {
  const outcomes = await Promise.all(
    Array.from({ length: PROBE_LIMIT + PROBE_EXTRA }, () => client.send('/probe', key)),
  );
  return outcomes.map((o) => o.status).sort((a, b) => a - b);
}

export function showRecovery({ ms, stolenMs, rounds }: Recovery): string {
  return `${ms.toFixed(0)} ms (${(ms - stolenMs).toFixed(0)} ms less the OS's run-queue wait; ${rounds} probe rounds)`;
}

function quantile(sorted: readonly number[], q: number): number {
  return sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

export function latency(values: readonly number[]): string {
  const sorted = [...values].sort((a, b) => a - b);
  const [p50, p99, max] = [quantile(sorted, 0.5), quantile(sorted, 0.99), sorted.at(-1) ?? NaN];
  return `p50 ${p50.toFixed(1)} / p99 ${p99.toFixed(1)} / max ${max.toFixed(1)} ms`;
}

/** Failures counted by reason; an `error` or `unavailable` one with its message, which says more. */
function reasons(outcomes: readonly Outcome[]): string {
  const counts = new Map<string, number>();
  for (const { reason, failure } of outcomes) {
    if (reason === undefined) continue;
    const label = reason === 'error' || reason === 'unavailable' ? `${reason} (${failure})` : reason;
    counts.set(label, (counts.get(label) ?? 0) + 1);
  }
  return [...counts].map(([reason, n]) => `${reason}: ${n}`).join('; ') || 'none';
}

export function tally(outcomes: readonly Outcome[]): string {
  const counts = new Map<string, number>();
  for (const { status } of outcomes) {
    const label = status === 0 ? 'hung' : status === -1 ? 'connection error' : String(status);
    counts.set(label, (counts.get(label) ?? 0) + 1);
  }
  return (
    [...counts]
      .sort()
      .map(([label, n]) => `${label}: ${n}`)
      .join(', ') || 'none'
  );
}

/**
 * The real process, for unhandled rejections: Jest's sandbox gives tests their own `process`
 * object, whose listeners never hear the real one; a function of the outer realm reaches it.
 */
const hostProcess = ((Buffer.constructor as FunctionConstructor)('return process') as () => NodeJS.Process)();

/** One scenario's servers, app, client and load, all stopped by `close()`, also on failure. */
export class Scenario {
  readonly servers: RedisServer[] = [];
  /** The client the scenario made for the app (`redisOf`), closed with the app. */
  private own: OpenClient | undefined;
  readonly rejections: unknown[] = [];
  http: TestApp | undefined;
  client: HttpClient | undefined;
  load: Load | undefined;
  private readonly frozen = new Set<number>();
  private readonly onRejection = (reason: unknown) => this.rejections.push(reason);

  /** @param kind the app's Redis client: the module's own from the URL, or one of the others the scenario makes */
  constructor(private readonly kind: 'url' | OtherClient = 'url') {
    hostProcess.on('unhandledRejection', this.onRejection);
    TimedGuard.samples = [];
  }

  /** The module's `redis` option for the server at `url`: the URL, or a client of the scenario's kind. */
  async redisOf(url: string): Promise<RateLimitModuleOptions['redis']> {
    if (this.kind === 'url') return url;
    this.own = await connectLimiterClient(this.kind, url);
    return this.own.client;
  }

  async startServer(port?: number): Promise<RedisServer> {
    const server = await startRedisServer([], port === undefined ? {} : { port });
    this.servers.push(server);
    return server;
  }

  async startApp(adapter: AdapterName, options: RateLimitModuleOptions): Promise<HttpClient> {
    this.http = await startFaultApp(adapter, options);
    return (this.client = new HttpClient(this.http.url));
  }

  freeze(server: RedisServer): void {
    this.frozen.add(server.pid);
    process.kill(server.pid, 'SIGSTOP');
  }

  thaw(server: RedisServer): void {
    process.kill(server.pid, 'SIGCONT');
    this.frozen.delete(server.pid);
  }

  /**
   * Waits until every command the app's own client has written has run: a PING on that
   * connection is answered after them. (A client that is not connected has nothing in flight.)
   */
  async quiesce(): Promise<void> {
    const store = this.http?.app.get(RateLimitStore, { strict: false }) as { client?: { ping(): Promise<unknown> } };
    await store?.client?.ping().catch(() => undefined);
  }

  /** Stops load, client and app (idempotent). */
  async stopApp(): Promise<void> {
    await this.load?.stop();
    this.load = undefined;
    this.client?.close();
    this.client = undefined;
    const http = this.http;
    this.http = undefined;
    await http?.close();
    await this.own?.close().catch(() => undefined);
    this.own = undefined;
    for (const probe of TimedGuard.probes) clearTimeout(probe);
    TimedGuard.probes.clear();
  }

  async close(): Promise<void> {
    try {
      await this.stopApp();
    } finally {
      for (const pid of this.frozen) {
        try {
          process.kill(pid, 'SIGCONT');
        } catch {
          // gone
        }
      }
      for (const server of this.servers) stopRedisServer(server.pid);
      hostProcess.off('unhandledRejection', this.onRejection);
    }
  }
}

/** Prints the figures every scenario has, then its own lines. */
export function report(name: string, scenario: Scenario, outcomes: readonly Outcome[], lines: string[]) {
  const samples = TimedGuard.samples;
  const stolen = samples.map((s) => s.stolenMs);
  console.log(
    [
      name,
      `  requests ${outcomes.length}: ${tally(outcomes)}; unhandled rejections ${scenario.rejections.length}`,
      `  limiter-added latency (guard, ${samples.length} decisions): ${latency(samples.map((s) => s.ms))}`,
      runQueue.available
        ? `  same, less the time the OS kept the JS thread waiting for a CPU: ${latency(samples.map((s) => s.ms - s.stolenMs))}` +
          ` (that wait: max ${Math.max(0, ...stolen).toFixed(1)} ms)`
        : '  (run-queue wait not readable here: the raw latency is checked)',
      `  of it from when the store call left, less that wait: ${latency(samples.map((s) => s.leftMs - s.leftStolenMs))}`,
      `  same, less the larger of that wait and the event loop's lateness at the timeout: ${latency(samples.map(limiterAddedMs))}` +
        ` (that lateness: max ${Math.max(0, ...samples.map((s) => s.lateMs)).toFixed(1)} ms)`,
      `  client latency: ${latency(outcomes.filter((o) => o.status > 0).map((o) => o.ended - o.started))}`,
      `  why failMode decided: ${reasons(outcomes)}`,
      `  dropped as late although answered within the timeout: ${droppedInTime(outcomes).length}`,
      ...lines.map((line) => `  ${line}`),
    ].join('\n'),
  );
}
