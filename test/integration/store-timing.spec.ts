import { connect, createServer, type Server } from 'node:net';
import { Redis } from 'ioredis';
import { RateLimiterService } from '../../lib/rate-limiter.service.js';
import { resolveOptions } from '../../lib/rate-limit-options.js';
import { RateLimitStoreError } from '../../lib/stores/rate-limit-store.error.js';
import type { RateLimitRequest } from '../../lib/stores/rate-limit-store.interface.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { type RedisServer, startRedisServer, stopRedisServer } from '../support/redis/process.js';
import { RunQueueWait } from '../support/run-queue.js';
import { StandaloneLimiter } from '../support/standalone-limiter.js';

const TIMEOUT_MS = 100;
const POLICY = { name: 'timing', rps: 0.001, burst: 1_000 }; // a token back every 1,000 s: none during a test
/**
 * Longest a decision may take past `timeout` once its call has left, ms, counted from a timer of
 * the same length started as the call left, less the time the OS kept this process's thread
 * waiting for a CPU meanwhile: what is left is the event loop's step from that timer to the check
 * after the reads.
 */
const PAST_TIMEOUT_MS = 30;
const runQueue = new RunQueueWait();
afterAll(() => runQueue.close());

/** Keeps the event loop busy for `ms`, as a CPU-bound request or a collection pause does. */
function busyFor(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

/** The error a promise rejects with, or `undefined` when it resolves. */
async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  return undefined;
}

/**
 * A decision asked for now, and how it ended: its error (none: Redis decided), `ms` after it was
 * asked, and `lateMs` after a timer of `timeout` fired that started as its call left the process
 * (was handed to the client as an FCALL or EVALSHA, when the batch it joined was sent; NaN for a call
 * that never left), less the OS's run-queue wait meanwhile.
 */
async function timedDecision(
  limiter: RateLimiterService,
  client: Redis,
  identity: string,
): Promise<{ error: unknown; ms: number; lateMs: number }> {
  const asked = performance.now();
  let timer: Promise<{ at: number; waited: number }> | undefined;
  const restore = onLeaving(client, () => {
    timer ??= new Promise((resolve) =>
      setTimeout(() => resolve({ at: performance.now(), waited: runQueue.ms() }), TIMEOUT_MS),
    );
  });
  try {
    const error = await rejection(limiter.consume(identity, POLICY));
    const ended = performance.now();
    const waited = runQueue.ms();
    // NaN for a call the open breaker held back: it never left
    const fired = timer === undefined ? { at: NaN, waited } : await timer;
    return { error, ms: ended - asked, lateMs: ended - fired.at - (waited - fired.waited) };
  } finally {
    restore();
  }
}

/**
 * Runs `leaving` as each store call leaves, right after it is handed to the client (an FCALL, the
 * library loaded, or an EVALSHA); the function it returns stops that.
 */
function onLeaving(client: Redis, leaving: (reply: Promise<unknown>) => void): () => void {
  const { call } = client;
  client.call = (command: string, ...args: unknown[]) => {
    const reply = (call as (...all: unknown[]) => Promise<unknown>).call(client, command, ...args);
    if (command === 'FCALL' || command === 'EVALSHA') leaving(reply);
    return reply;
  };
  return () => {
    client.call = call;
  };
}

/**
 * Watches the next store call to leave: the function it returns says when its reply was read,
 * after the call left, and how long this process and Redis waited for a CPU meanwhile.
 */
function watchCall(client: Redis, redisRunQueue: RunQueueWait): () => Promise<string> {
  const at = () => ({ time: performance.now(), own: runQueue.ms(), redis: redisRunQueue.ms() });
  let left: ReturnType<typeof at> | undefined;
  let read: Promise<ReturnType<typeof at>> | undefined;
  const restore = onLeaving(client, (reply) => {
    restore();
    left = at();
    read = reply.then(at, at);
  });
  return async () => {
    if (left === undefined || read === undefined) return 'no call left';
    const { time, own, redis } = await read;
    return (
      `its reply was read ${(time - left.time).toFixed(1)} ms after the call left; meanwhile this process waited ` +
      `${(own - left.own).toFixed(1)} ms for a CPU and Redis ${(redis - left.redis).toFixed(1)} ms`
    );
  };
}

/**
 * `timeout` bounds the store's time once a call has left the process. A stall of the app's own
 * event loop (a heavy request, a collection pause) before the call is sent, or while its reply
 * waits to be read, is the app's: Redis on loopback answers in well under a millisecond, and those
 * decisions are Redis's, with the breaker shut. A Redis that is frozen or stopped still gets
 * `failMode` within `timeout` of the call leaving.
 */
describe('what `timeout` bounds (own redis-server, timeout 100 ms)', () => {
  let server: RedisServer;
  let client: Redis;
  let limiter: StandaloneLimiter;

  beforeEach(async () => {
    server = await startRedisServer();
    client = new Redis(server.url);
    client.on('error', () => undefined);
    limiter = new StandaloneLimiter(
      resolveOptions({ failMode: 'closed', timeout: TIMEOUT_MS }),
      new RedisStore({ client }),
    );
    // the first reply teaches the store Redis's clock (the deadlines it sends with calls)
    await limiter.consume('ip:warm', POLICY);
  });
  afterEach(async () => {
    client.disconnect();
    await limiter.onApplicationShutdown();
    stopRedisServer(server.pid);
  });

  it.each([150, 300, 1_000])(
    'a stall of %i ms right after a decision is asked for: every decision is Redis’s',
    async (stallMs) => {
      const redisRunQueue = new RunQueueWait(server.pid);
      try {
        for (let trial = 0; trial < 4; trial++) {
          const decided = limiter.consume(`ip:before-${stallMs}`, POLICY);
          const call = watchCall(client, redisRunQueue);
          busyFor(stallMs); // before the call is sent: it leaves once the loop turns
          const error = await rejection(decided);
          // what a failure under load needs to tell whose the time was
          if (error !== undefined) throw new Error(`trial ${trial}: ${(error as Error).message}; ${await call()}`);
          const [decision] = await decided;
          expect(decision).toMatchObject({ allowed: true, remaining: 999 - trial });
        }
      } finally {
        redisRunQueue.close();
      }
      // the breaker stayed shut: a call now goes to Redis and is decided there
      expect(await limiter.consume(`ip:before-${stallMs}`, POLICY)).toMatchObject([{ allowed: true, remaining: 995 }]);
    },
  );

  it.each([150, 300, 1_000])(
    'a stall of %i ms while the reply waits to be read: every decision is Redis’s',
    async (stallMs) => {
      // the loop held once the call is on the socket and its timeout counts (in the microtasks
      // after the store sends it): its reply comes back meanwhile
      const restore = onLeaving(client, () => queueMicrotask(() => busyFor(stallMs)));
      try {
        for (let trial = 0; trial < 4; trial++) {
          const [decision] = await limiter.consume(`ip:after-${stallMs}`, POLICY);
          expect(decision).toMatchObject({ allowed: true, remaining: 999 - trial });
        }
      } finally {
        restore();
      }
      expect(await limiter.consume(`ip:after-${stallMs}`, POLICY)).toMatchObject([{ allowed: true, remaining: 995 }]);
    },
  );

  it('a frozen Redis (SIGSTOP): failMode within the timeout of each call leaving, then at once', async () => {
    process.kill(server.pid, 'SIGSTOP');
    const decisions = [];
    for (let trial = 0; trial < 4; trial++) decisions.push(await timedDecision(limiter, client, `ip:frozen-${trial}`));
    for (const { error, ms, lateMs } of decisions.slice(0, 3)) {
      expect(error).toBeInstanceOf(RateLimitStoreError);
      expect((error as RateLimitStoreError).reason).toBe('timeout');
      expect(ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 1);
      expect(lateMs).toBeLessThan(PAST_TIMEOUT_MS);
    }
    // three failures in a row opened the breaker: the fourth is answered at once
    expect((decisions[3].error as RateLimitStoreError).reason).toBe('breaker_open');
    expect(decisions[3].ms).toBeLessThan(TIMEOUT_MS);
  });

  it('a stopped Redis, with an ioredis client on its defaults (offline queue, retries): failMode within the timeout', async () => {
    const closed = new Promise((resolve) => client.once('close', resolve));
    stopRedisServer(server.pid);
    await closed;
    const decisions = [];
    for (let trial = 0; trial < 4; trial++) decisions.push(await timedDecision(limiter, client, `ip:stopped-${trial}`));
    for (const { error, lateMs } of decisions.slice(0, 3)) {
      expect(error).toBeInstanceOf(RateLimitStoreError);
      expect(lateMs).toBeLessThan(PAST_TIMEOUT_MS);
    }
    expect((decisions[3].error as RateLimitStoreError).reason).toBe('breaker_open');
  });
});

/** A TCP hop to a redis-server that hands its replies on `holdMs` late (in order) while that is set. */
async function replyHolder(port: number): Promise<{ holdMs: number; url: string; server: Server }> {
  const holder = { holdMs: 0, url: '', server: createServer() };
  holder.server.on('connection', (app) => {
    const redis = connect(port, '127.0.0.1');
    for (const socket of [app, redis]) socket.on('error', () => socket.destroy());
    app.pipe(redis);
    let lastAt = 0;
    redis.on('data', (chunk) => {
      const at = Math.max(lastAt, performance.now() + holder.holdMs);
      lastAt = at;
      setTimeout(() => app.writable && app.write(chunk), at - performance.now());
    });
    redis.on('close', () => app.destroy());
  });
  await new Promise<void>((resolve) => holder.server.listen(0, '127.0.0.1', resolve));
  holder.url = `redis://127.0.0.1:${(holder.server.address() as { port: number }).port}`;
  return holder;
}

/**
 * A `leaky_bucket` admits a request for its turn, `delay` after Redis decided. What the answer then
 * took to be read (Redis held up before writing it, the app busy) is not added to the wait: the
 * requests of one queue keep their spacing whichever of their calls is read late.
 */
describe('a leaky_bucket turn on Redis (rps 10: one turn every 100 ms)', () => {
  let server: RedisServer;
  let holder: Awaited<ReturnType<typeof replyHolder>>;
  let client: Redis;
  let store: RedisStore;
  const queued = (key: string): RateLimitRequest => ({
    key,
    policy: 'queue',
    rule: { algorithm: 'leaky_bucket', rps: 10, burst: 5 },
    cost: 1,
  });

  beforeAll(async () => {
    server = await startRedisServer();
    holder = await replyHolder(server.port);
    client = new Redis(holder.url);
    store = new RedisStore({ client });
    // replies read as they come: the store's bounds on Redis's clock are narrow
    for (let i = 0; i < 5; i++) await store.consume([queued(`warm-${i}`)]);
  });
  afterAll(async () => {
    await store.close();
    client.disconnect();
    holder.server.close();
    stopRedisServer(server.pid);
  });

  it('an answer held 150 ms after Redis decided comes with its turn, 100 ms after the first, passed: no wait', async () => {
    const asked = performance.now();
    const [first] = await store.consume([queued('held')]);
    expect(first).toMatchObject({ allowed: true, delay: 0 });
    holder.holdMs = 150;
    const [second] = await store.consume([queued('held')]);
    holder.holdMs = 0;
    expect(second).toMatchObject({ allowed: true, delay: 0 });
    expect(performance.now() - asked).toBeGreaterThanOrEqual(100);
  });

  it('an answer read at once waits for its turn: never before 100 ms after the first was asked for', async () => {
    const asked = performance.now();
    const [first] = await store.consume([queued('prompt')]);
    expect(first).toMatchObject({ allowed: true, delay: 0 });
    const [second] = await store.consume([queued('prompt')]);
    expect(second.allowed).toBe(true);
    // less 2 ms: Redis's clock is read in whole ms, for the turn and for the bounds on it
    expect(performance.now() + second.delay * 1_000).toBeGreaterThanOrEqual(asked + 100 - 2);
  });
});
