import { Redis } from 'ioredis';
import { RateLimiterService } from '../../lib/rate-limiter.service.js';
import { resolveOptions } from '../../lib/rate-limit-options.js';
import { RateLimitStoreError } from '../../lib/stores/rate-limit-store.error.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { type RedisServer, startRedisServer, stopRedisServer } from '../support/redis/process.js';

const TIMEOUT_MS = 100;
const POLICY = { name: 'timing', rps: 0.001, burst: 1_000 }; // a token back every 1,000 s: none during a test
/**
 * Longest a decision may take past `timeout` once its call has left, ms, counted from a timer of
 * the same length started beside it: what is left is the event loop's step from that timer to
 * the check after the reads, and the call's wait for the next check phase to be sent.
 */
const PAST_TIMEOUT_MS = 30;

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
 * asked, and `lateMs` after a timer of `timeout` started beside it fired.
 */
async function timedDecision(limiter: RateLimiterService, identity: string): Promise<{ error: unknown; ms: number; lateMs: number }> {
  const asked = performance.now();
  const timer = new Promise<number>((resolve) => setTimeout(() => resolve(performance.now()), TIMEOUT_MS));
  const error = await rejection(limiter.consume(identity, POLICY));
  const ended = performance.now();
  const timerFired = await timer;
  return { error, ms: ended - asked, lateMs: ended - timerFired };
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
  let limiter: RateLimiterService;

  beforeEach(async () => {
    server = await startRedisServer();
    client = new Redis(server.url);
    client.on('error', () => undefined);
    limiter = new RateLimiterService(resolveOptions({ failMode: 'closed', timeout: TIMEOUT_MS }), new RedisStore({ client }));
    // the first reply teaches the store Redis's clock (the deadlines it sends with calls)
    await limiter.consume('ip:warm', POLICY);
  });
  afterEach(async () => {
    client.disconnect();
    await limiter.onApplicationShutdown();
    stopRedisServer(server.pid);
  });

  it.each([150, 300, 1_000])('a stall of %i ms right after a decision is asked for: every decision is Redis’s', async (stallMs) => {
    for (let trial = 0; trial < 4; trial++) {
      const decided = limiter.consume(`ip:before-${stallMs}`, POLICY);
      busyFor(stallMs); // before the call is sent: it leaves once the loop turns
      const [decision] = await decided;
      expect(decision).toMatchObject({ allowed: true, remaining: 999 - trial });
    }
    // the breaker stayed shut: a call now goes to Redis and is decided there
    expect(await limiter.consume(`ip:before-${stallMs}`, POLICY)).toMatchObject([{ allowed: true, remaining: 995 }]);
  });

  it.each([150, 300, 1_000])('a stall of %i ms while the reply waits to be read: every decision is Redis’s', async (stallMs) => {
    for (let trial = 0; trial < 4; trial++) {
      const decided = limiter.consume(`ip:after-${stallMs}`, POLICY);
      // after the call is sent (its batch goes out in this check phase, before this callback)
      await new Promise<void>((resolve) => setImmediate(() => (busyFor(stallMs), resolve())));
      const [decision] = await decided;
      expect(decision).toMatchObject({ allowed: true, remaining: 999 - trial });
    }
    expect(await limiter.consume(`ip:after-${stallMs}`, POLICY)).toMatchObject([{ allowed: true, remaining: 995 }]);
  });

  it('a frozen Redis (SIGSTOP): failMode within the timeout of each call leaving, then at once', async () => {
    process.kill(server.pid, 'SIGSTOP');
    const decisions = [];
    for (let trial = 0; trial < 4; trial++) decisions.push(await timedDecision(limiter, `ip:frozen-${trial}`));
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
    for (let trial = 0; trial < 4; trial++) decisions.push(await timedDecision(limiter, `ip:stopped-${trial}`));
    for (const { error, lateMs } of decisions.slice(0, 3)) {
      expect(error).toBeInstanceOf(RateLimitStoreError);
      expect(lateMs).toBeLessThan(PAST_TIMEOUT_MS);
    }
    expect((decisions[3].error as RateLimitStoreError).reason).toBe('breaker_open');
  });
});
