/**
 * A request's life, randomized, end to end: runs of requests under a `concurrency` policy (2 in
 * flight per client; a 10-minute lease, so no slot comes back by its lease here), some sent at
 * once, each ending in a way drawn at random, on every transport, on the memory store and on
 * Redis. After every run:
 * 1. in flight, as the handlers count themselves (from when one starts its work until it stops:
 *    when it ends, or as soon as its client goes), never went past 2 at any moment;
 * 2. once every request has ended and every release has landed (`RateLimiter.release`'s promise,
 *    retries included), the store holds no slot of the run's client: on Redis, every sorted set
 *    its requests were decided on is empty or gone; on both stores, `RateLimiterService.usage()`
 *    says 0 used (and once every run passed, no sorted set under the app's prefix holds a slot);
 * and, on the way, each admitted request's slot was given back once, a refused one's never, and
 * each client got the answer its way gives.
 *
 * The ways a request ends, and where they apply:
 * - `finish`: the handler answers. Everywhere.
 * - `abort-before`: the client goes while the decision waits (on a key function the test holds),
 *   then the decision comes. HTTP, GraphQL: the connection closes; socket.io: the client
 *   disconnects. Not TCP: a Nest client sends every message on one connection and cannot give up
 *   one; closing the connection tells its handler nothing.
 * - `abort-after`: the client goes while the handler works; the handler stops. As `abort-before`.
 * - `later-guard`: a guard after the module's global one refuses (`@UseGuards` on the handler).
 *   Everywhere. HTTP and GraphQL are charged by then and give the slot back with the response;
 *   socket.io and TCP are decided after every guard, so are never charged.
 * - `interceptor`: a global interceptor answers without the handler. Everywhere, as `later-guard`.
 * - `handler-error`: the handler fails. Everywhere.
 * - `stream-error`: a streamed answer fails after its first chunk reached the client. HTTP (a
 *   `StreamableFile`), socket.io and TCP (a handler's observable). Not GraphQL: a query's answer is
 *   one document.
 * - `redis-cut`: a proxy between the app and Redis drops every connection and refuses new ones
 *   while the request's release happens; once the release has failed, it lets them through, and
 *   the release's retry lands. Everywhere, on Redis. Nothing else reaches Redis meanwhile: the
 *   test waits for every earlier release first, and no decision is under way (one held at its key
 *   function has not reached Redis yet).
 *
 * The test waits for what the app reports (a key function asked, a decision, a handler entered
 * or stopped, a release landed or failed), never for time; a wait longer than `STUCK_MS` fails the
 * run as stuck. Runs per app: `DEFAULT_RUNS`, or `RATE_LIMIT_PROPERTY_RUNS`; the first meets
 * every way of the app, one request at a time. A failure prints the shrunk run, what happened in
 * it, and the command that replays it alone (`RATE_LIMIT_LIFE_RUN`, its steps); fast-check's seed,
 * given as `RATE_LIMIT_PROPERTY_SEED`, draws the same runs again.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { MemoryStore, type RateLimitModuleOptions, RedisStore } from '../../lib/index.js';
import { connectThrough, cutUnder, RedisCut } from '../support/redis-cut.js';
import { type Ask, type Decided, EngineWatch } from '../support/request-life.js';
import {
  type Answer,
  askOf,
  identityOf,
  life,
  LIMIT,
  type LifeApp,
  lifePolicy,
  type Sent,
  startLifeApp,
  TRANSPORTS,
  type TransportName,
} from '../support/request-life-apps.js';
import { testRedisUrl, useTestRedis } from '../support/redis/test-redis.js';

const redis = useTestRedis();

/** How a request ends. */
type Way =
  | 'finish'
  | 'abort-before'
  | 'abort-after'
  | 'later-guard'
  | 'interceptor'
  | 'handler-error'
  | 'stream-error'
  | 'redis-cut';

/** The ways that apply on each transport (see above); `redis-cut` is added on Redis. */
const WAYS_ON: Record<TransportName, readonly Way[]> = {
  express: ['finish', 'abort-before', 'abort-after', 'later-guard', 'interceptor', 'handler-error', 'stream-error'],
  fastify: ['finish', 'abort-before', 'abort-after', 'later-guard', 'interceptor', 'handler-error', 'stream-error'],
  graphql: ['finish', 'abort-before', 'abort-after', 'later-guard', 'interceptor', 'handler-error'],
  'socket.io': ['finish', 'abort-before', 'abort-after', 'later-guard', 'interceptor', 'handler-error', 'stream-error'],
  tcp: ['finish', 'later-guard', 'interceptor', 'handler-error', 'stream-error'],
};

const STORES = ['memory', 'redis'] as const;
type StoreName = (typeof STORES)[number];

const waysOf = (transport: TransportName, store: StoreName): readonly Way[] =>
  store === 'redis' ? [...WAYS_ON[transport], 'redis-cut'] : WAYS_ON[transport];

/**
 * A step of a run: send requests at once, each to end its way (it goes as far as its way lets it
 * before its end: its key function asked, its handler working, or answered); end the open request
 * at `end` (modulo how many are open: in the order they were sent); or wait until every request
 * that has ended has its slot back.
 */
type Step = { send: Way[] } | { end: number } | { settle: true };

const DEFAULT_RUNS = 40;
const RUNS = Number(process.env.RATE_LIMIT_PROPERTY_RUNS ?? DEFAULT_RUNS);
const SEED =
  process.env.RATE_LIMIT_PROPERTY_SEED === undefined ? undefined : Number(process.env.RATE_LIMIT_PROPERTY_SEED);
/** One run to replay, alone, as a failure prints it (pick its app with `-t`). */
const REPLAY =
  process.env.RATE_LIMIT_LIFE_RUN === undefined ? undefined : (JSON.parse(process.env.RATE_LIMIT_LIFE_RUN) as Step[]);

/** A wait this long fails the run as stuck: not a bound on any result, only so a hang reports what it waited for. */
const STUCK_MS = 5_000;
/** The module's `timeout`: a key function the test holds never times out. */
const DECISION_TIMEOUT_MS = 60_000;

function runArbitrary(ways: readonly Way[]): fc.Arbitrary<Step[]> {
  // a cut takes a release's first retry (100 ms): rarer than the others
  const way = fc.oneof(...ways.map((each) => ({ weight: each === 'redis-cut' ? 1 : 4, arbitrary: fc.constant(each) })));
  const step: fc.Arbitrary<Step> = fc.oneof(
    { weight: 4, arbitrary: fc.record({ send: fc.array(way, { minLength: 1, maxLength: 3 }) }) },
    { weight: 4, arbitrary: fc.record({ end: fc.nat({ max: 5 }) }) },
    { weight: 1, arbitrary: fc.constant({ settle: true as const }) },
  );
  return fc.array(step, { minLength: 1, maxLength: 10 });
}

/** A run that meets every way: each request alone, its slot back before the next. */
const tour = (ways: readonly Way[]): Step[] => ways.flatMap((way) => [{ send: [way] }, { end: 0 }, { settle: true }]);

/** An app under test, with its engine's watch and, on Redis, the proxy it reaches Redis through. */
interface Target {
  /** As the test names it: `socket.io, memory store`. */
  label: string;
  app: LifeApp;
  watch: EngineWatch;
  redis?: { proxy: RedisCut; client: Redis; prefix: string };
  /** The ways requests met, each counted when the engine admitted the request (or, never charged, ended before any decision). */
  met: Map<Way, number>;
}

/** A request of a run. */
interface Request {
  /** Its place in the run, for the log: `#0`, `#1`, ... */
  name: string;
  way: Way;
  ask: Ask;
  sent: Sent;
  /** `waiting`: its decision waits on its key function; `open`: sent, not ended; `done`: ended, answered. */
  state: 'waiting' | 'open' | 'done';
  answer?: Answer;
}

/** Resolves as `promise` does; rejects, naming what was awaited, after `STUCK_MS`. */
async function waitFor<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const stuck = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`stuck: waited ${STUCK_MS} ms for ${what}`)), STUCK_MS);
  });
  try {
    return await Promise.race([promise, stuck]);
  } finally {
    clearTimeout(timer);
  }
}

/** One run on one app: its client is fresh. */
class Run {
  readonly client = `client-${randomUUID()}`;
  readonly requests: Request[] = [];
  readonly log: string[];

  constructor(
    private readonly target: Target,
    steps: readonly Step[],
  ) {
    const replay = `RATE_LIMIT_LIFE_RUN='${JSON.stringify(steps)}'`;
    this.log = [`replay: ${replay} npx jest test/e2e/request-life.e2e-spec.ts -t '${target.label}'`];
  }

  private get watch(): EngineWatch {
    return this.target.watch;
  }

  /** The requests not ended yet, in the order they were sent. */
  get open(): Request[] {
    return this.requests.filter((request) => request.state !== 'done');
  }

  async step(step: Step): Promise<void> {
    if ('send' in step) {
      const sent = step.send.map((way) => this.send(way));
      await Promise.all(sent.map((request) => this.arrive(request)));
    } else if ('end' in step) {
      const open = this.open;
      if (open.length > 0) await this.end(open[step.end % open.length]);
    } else {
      await this.settle();
    }
  }

  /**
   * Ends every open request, in order, and waits until every slot is back; a release that never
   * comes is left for `check` to report with the rest.
   */
  async finish(): Promise<void> {
    for (const request of this.open) await this.end(request);
    await this.settle().catch((error: Error) => this.log.push(error.message));
  }

  /** Waits until every request that has ended and was admitted has its slot back (its release landed). */
  async settle(): Promise<void> {
    for (const request of this.requests) {
      if (request.state === 'done' && this.watch.decidedNow(request.ask.id) === 'admitted')
        await waitFor(this.watch.released(request.ask.id), `the release of ${request.name}'s slot`);
    }
  }

  /** The properties, and what each request's end should have been; throws with the run's log. */
  async check(): Promise<void> {
    const problems: string[] = [];
    const nameOf = (id: string) => this.requests.find((request) => request.ask.id === id)?.name ?? id;
    for (const { id, inFlight } of life.breachesOf(this.client))
      problems.push(`more than ${LIMIT} in flight: ${nameOf(id)} started with ${inFlight - 1} others in flight`);
    for (const request of this.requests) {
      const { id } = request.ask;
      const decided = this.watch.decidedNow(id);
      const releases = this.watch.releaseCalls(id);
      const owed = decided === 'admitted' ? 1 : 0;
      if (releases !== owed)
        problems.push(`${request.name} (${request.way}, ${decided ?? 'never decided'}): ${releases} releases`);
      const expected = expectedAnswer(request.way, decided);
      if (request.answer !== expected)
        problems.push(
          `${request.name} (${request.way}, ${decided ?? 'never decided'}): answered ${request.answer}, not ${expected}`,
        );
    }
    for (const stray of this.watch.strays)
      problems.push(`a release of a slot no request of the run was admitted to: ${stray}`);
    for (const held of await this.heldSlots()) problems.push(`a slot is still held: ${held}`);
    if (problems.length > 0) throw new Error(`${problems.join('\n')}\nthe run:\n${this.log.join('\n')}`);
  }

  /** Counts the ways met, once the run passed. */
  count(): void {
    for (const request of this.requests) {
      const decided = this.watch.decidedNow(request.ask.id);
      const ended = decided === 'admitted' || (decided === undefined && request.answer !== 'aborted');
      if (ended) this.target.met.set(request.way, (this.target.met.get(request.way) ?? 0) + 1);
    }
  }

  /** Lets every request still open end, whatever the run left, so the next run starts clean; then forgets the run. */
  async drain(): Promise<void> {
    this.target.redis?.proxy.restore();
    const open = this.open;
    for (const { ask, sent } of open) {
      life.letKeyGo(ask.id);
      life.end(ask.id, 'ok');
      sent.abort?.();
    }
    await waitFor(Promise.all(open.map(({ sent }) => sent.answer)), 'the requests left open to end').catch(
      () => undefined,
    );
    const ids = this.requests.map(({ ask }) => ask.id);
    life.forget(ids, this.client);
    this.watch.forget(ids);
  }

  private send(way: Way): Request {
    const ask: Ask = { id: randomUUID(), client: this.client };
    if (way === 'abort-before') ask.hold = true;
    if (way === 'later-guard') ask.refuse = true;
    if (way === 'interceptor') ask.cached = true;
    if (way === 'stream-error') ask.stream = true;
    const request: Request = {
      name: `#${this.requests.length}`,
      way,
      ask,
      sent: this.target.app.send(ask),
      state: 'open',
    };
    this.requests.push(request);
    this.log.push(`${request.name} ${way}: sent`);
    return request;
  }

  /** A request sent goes as far as its way lets it before its end. */
  private async arrive(request: Request): Promise<void> {
    const { id } = request.ask;
    if (request.way === 'abort-before') {
      await waitFor(life.keyAsked(id), `the key function of ${request.name}`);
      request.state = 'waiting';
      return;
    }
    if (request.way === 'later-guard' || request.way === 'interceptor') return this.answered(request);
    const decided = await waitFor(this.watch.decision(id), `the decision on ${request.name}`);
    if (decided !== 'admitted') return this.answered(request);
    await waitFor(life.entered(id), `the handler of ${request.name} to start`);
    this.log.push(`${request.name}: admitted, working`);
  }

  private async end(request: Request): Promise<void> {
    const { id } = request.ask;
    const { name } = request;
    switch (request.way) {
      case 'abort-before': {
        request.sent.abort!();
        await waitFor(life.gone(id), `the server to see ${name}'s client go`);
        life.letKeyGo(id);
        // its handler, if it is called at all, finds its client gone and does nothing
        const decided = await waitFor(this.watch.decision(id), `the decision on ${name}`);
        this.log.push(`${name}: its client gone, then ${decided}`);
        break;
      }
      case 'abort-after':
        request.sent.abort!();
        await waitFor(life.exited(id), `the handler of ${name} to stop`);
        break;
      case 'finish':
      case 'handler-error':
        life.end(id, request.way === 'finish' ? 'ok' : 'error');
        break;
      case 'stream-error':
        await waitFor(request.sent.firstChunk, `the first chunk of ${name}`);
        life.end(id, 'error');
        break;
      case 'redis-cut':
        await this.cutDuringRelease(request);
        break;
      default:
        throw new Error(`${name} (${request.way}) is ended when it is sent`);
    }
    await this.answered(request);
  }

  /** Ends the request while Redis is cut off, and lets Redis back once its release has failed. */
  private async cutDuringRelease(request: Request): Promise<void> {
    const { proxy, client } = this.target.redis!;
    // no other release on its way: the cut meets this request's alone
    await this.settle();
    const retriesBefore = this.watch.retries.length;
    await cutUnder(proxy, client);
    try {
      const failed = this.watch.nextReleaseFailure();
      life.end(request.ask.id, 'ok');
      await waitFor(failed, `the release of ${request.name} to fail`);
      this.log.push(`${request.name}: its release failed while Redis was cut off`);
    } finally {
      proxy.restore();
    }
    await waitFor(this.watch.released(request.ask.id), `the release of ${request.name} to land`);
    const outcomes = this.watch.retries.slice(retriesBefore).map(({ outcome }) => outcome);
    this.log.push(`${request.name}: Redis back; the release's retries: ${outcomes.join(', ')}`);
  }

  private async answered(request: Request): Promise<void> {
    request.answer = await waitFor(request.sent.answer, `the answer to ${request.name}`);
    request.state = 'done';
    const decided = this.watch.decidedNow(request.ask.id) ?? 'never decided';
    this.log.push(`${request.name}: ${decided}, answered ${request.answer}`);
  }

  /**
   * The slots the store still holds for the run's client, described: `usage()`, and on Redis the
   * sorted sets its requests were decided on (another run's leak is not this one's).
   */
  private async heldSlots(): Promise<string[]> {
    const held: string[] = [];
    const usage = await this.target.app.service.usage(identityOf(this.client), lifePolicy);
    if (usage.used !== 0) held.push(`usage() of the run's client: ${usage.used} used`);
    if (this.target.redis === undefined) return held;
    const keys = new Set(this.requests.flatMap(({ ask }) => this.watch.keysOf(ask.id)));
    for (const key of keys) {
      const type = await redis().type(key);
      if (type === 'none') continue;
      const slots = type === 'zset' ? await redis().zcard(key) : undefined;
      if (slots !== 0) held.push(`${key}: ${slots === undefined ? `a ${type}` : `${slots} slots`}`);
    }
    return held;
  }
}

/** The sorted sets under `prefix` that hold slots, with how many; any other key with -1. */
async function slotsUnder(prefix: string): Promise<Map<string, number>> {
  const held = new Map<string, number>();
  let cursor = '0';
  do {
    const [next, keys] = await redis().scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    for (const key of keys) {
      const type = await redis().type(key);
      const slots = type === 'zset' ? await redis().zcard(key) : type === 'none' ? 0 : -1;
      if (slots !== 0) held.set(key, slots);
    }
  } while (cursor !== '0');
  return held;
}

/** What the client of a request that ended `way` hears, given how the engine decided it. */
function expectedAnswer(way: Way, decided: Decided | undefined): Answer {
  if (way === 'abort-before' || (way === 'abort-after' && decided === 'admitted')) return 'aborted';
  if (decided === 'refused') return 'refused';
  if (decided === 'failed') return 'unavailable';
  switch (way) {
    case 'later-guard':
      return 'forbidden';
    case 'interceptor':
      return 'cached';
    case 'handler-error':
      return 'error';
    case 'stream-error':
      return 'stream-error';
    default:
      return 'ok';
  }
}

/** Plays a run on an app, and checks it. */
async function play(target: Target, steps: readonly Step[]): Promise<void> {
  const run = new Run(target, steps);
  try {
    for (const step of steps) await run.step(step);
    await run.finish();
    await run.check();
    run.count();
  } catch (error) {
    if (error instanceof Error && error.message.startsWith('stuck'))
      error.message += `\nthe run:\n${run.log.join('\n')}`;
    throw error;
  } finally {
    await run.drain();
  }
}

const SUITES = TRANSPORTS.flatMap((transport) => STORES.map((store) => [transport, store] as const));

describe.each(SUITES)('a request life on %s, %s store', (transport, store) => {
  const ways = waysOf(transport, store);
  let target: Target;

  beforeAll(async () => {
    const options: RateLimitModuleOptions = { failMode: 'closed', timeout: DECISION_TIMEOUT_MS };
    let onRedis: Target['redis'];
    if (store === 'redis') {
      const proxy = await RedisCut.start(Number(new URL(testRedisUrl()).port));
      const client = await connectThrough(proxy);
      onRedis = { proxy, client, prefix: `rl-e2e-life-${randomUUID()}:` };
      options.store = new RedisStore({ client });
      options.prefix = onRedis.prefix;
    } else {
      options.store = new MemoryStore();
    }
    const app = await startLifeApp(transport, options);
    const watch = new EngineWatch(app.limiter, (context) => askOf(context)!.id);
    target = { label: `${transport}, ${store} store`, app, watch, redis: onRedis, met: new Map() };
  });

  afterAll(async () => {
    target.watch.close();
    await target.app.close();
    target.redis?.client.disconnect();
    await target.redis?.proxy.close();
  });

  it(
    `never has more than ${LIMIT} in flight, and gives every slot back, however requests end (${ways.join(', ')})`,
    async () => {
      const property = fc.asyncProperty(runArbitrary(ways), (steps) => play(target, steps));
      if (REPLAY !== undefined) return void (await fc.assert(property, { numRuns: 1, examples: [[REPLAY]] }));
      await fc.assert(property, { numRuns: RUNS, seed: SEED, examples: [[tour(ways)]] });
      expect(ways.filter((way) => !target.met.has(way))).toEqual([]);
      // every run's slots back: under the app's prefix, no sorted set holds one
      if (target.redis !== undefined) expect(await slotsUnder(target.redis.prefix)).toEqual(new Map());
    },
    Math.max(60_000, RUNS * 5_000),
  );
});
