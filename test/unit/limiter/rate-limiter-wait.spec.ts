import { jest } from '@jest/globals';
import { Logger } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { RateLimiter } from '../../../lib/limiter/rate-limiter.js';
import {
  MemoryStore,
  type RateLimitDecision,
  RateLimiterService,
  RateLimitModule,
  type RateLimitModuleOptions,
  type RateLimitPolicy,
  type RateLimitStore,
} from '../../../lib/index.js';
import { RateLimitUnavailableException } from '../../../lib/rate-limit.exception.js';
import { ManualClock } from '../../../lib/testing/manual-clock.js';

/** A queue of 3 leaving one a second: the first passes at once, the next wait 1 s and 2 s. */
const QUEUE: RateLimitPolicy = { name: 'queue', algorithm: 'leaky_bucket', rps: 1, burst: 3 };
const CLOCK = 1_000_000;

async function service(options: RateLimitModuleOptions) {
  const moduleRef = await Test.createTestingModule({
    imports: [RateLimitModule.forRoot({ guard: false, ...options })],
  }).compile();
  return { moduleRef, limiter: moduleRef.get(RateLimiterService) };
}

const remaining = async (limiter: RateLimiterService) => (await limiter.peek('user:1', QUEUE))[0].remaining;

describe('RateLimiterService.wait (no sleeps: the clock is pinned and waits end early)', () => {
  it('gives the charge back and rejects with the reason when the signal aborts', async () => {
    const { moduleRef, limiter } = await service({ store: new MemoryStore({ clock: () => CLOCK }) });
    await limiter.consume('user:1', QUEUE);
    const queued = await limiter.consume('user:1', QUEUE);
    expect(queued[0].delay).toBe(1);
    expect(await remaining(limiter)).toBe(1);

    const leaving = new AbortController();
    const waiting = limiter.wait(queued, leaving.signal);
    leaving.abort(new Error('client gone'));
    await expect(waiting).rejects.toThrow('client gone');
    expect(await remaining(limiter)).toBe(2);
    await moduleRef.close();
  });

  it('ends every wait at shutdown with a 503, their charges given back before the store closes', async () => {
    const store = new MemoryStore({ clock: () => CLOCK });
    const { moduleRef, limiter } = await service({ store });
    await limiter.consume('user:1', QUEUE);
    const waits = [await limiter.consume('user:1', QUEUE), await limiter.consume('user:1', QUEUE)].map((d) =>
      limiter.wait(d),
    );
    expect(await remaining(limiter)).toBe(0);

    await moduleRef.get(RateLimiter).beforeApplicationShutdown();
    for (const waiting of waits) await expect(waiting).rejects.toBeInstanceOf(RateLimitUnavailableException);
    expect(await remaining(limiter)).toBe(2);
    // a request admitted during shutdown does not wait either
    await expect(limiter.wait(await limiter.consume('user:1', QUEUE))).rejects.toBeInstanceOf(
      RateLimitUnavailableException,
    );
    expect(await remaining(limiter)).toBe(2);
    await moduleRef.close();
  });

  it("with failMode 'local', gives a charge back to the local limiter that took it, not to the failing store", async () => {
    const refund = jest.fn(async (_decisions: readonly RateLimitDecision[]) => undefined);
    const down = async (): Promise<RateLimitDecision[]> => {
      throw new Error('connection refused');
    };
    const failing: RateLimitStore = { consume: down, peek: down, reset: async () => undefined, refund };
    const logged = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    const { moduleRef, limiter } = await service({ store: failing, failMode: 'local' });
    await limiter.consume('user:1', QUEUE);
    const queued = await limiter.consume('user:1', QUEUE);
    expect(queued[0].delay).toBeGreaterThan(0.9);
    const before = await remaining(limiter);

    const leaving = new AbortController();
    leaving.abort();
    await expect(limiter.wait(queued, leaving.signal)).rejects.toThrow(/aborted/i);
    expect(await remaining(limiter)).toBe(before + 1);
    expect(refund).not.toHaveBeenCalled();
    await moduleRef.close();
    logged.mockRestore();
  });
});

describe("RateLimiterService.wait on the store's clock", () => {
  /** Lets every wait that has ended run on. */
  const settled = () => new Promise((resolve) => setImmediate(resolve));

  it('ends each wait when the ManualClock is moved past its turn, not on real time', async () => {
    const clock = new ManualClock(CLOCK);
    const { moduleRef, limiter } = await service({ store: new MemoryStore({ clock }) });
    await limiter.consume('user:1', QUEUE);
    const ended: number[] = [];
    for (const n of [1, 2]) void limiter.wait(await limiter.consume('user:1', QUEUE)).then(() => ended.push(n));
    await settled();
    expect(ended).toEqual([]);
    clock.advance('1s');
    await settled();
    expect(ended).toEqual([1]);
    clock.set(CLOCK + 5_000);
    await settled();
    expect(ended).toEqual([1, 2]);
    await moduleRef.close();
  });

  it("tells the time as the store's clock does (X-RateLimit-Reset counts from it), and real time without one", async () => {
    const clock = new ManualClock(CLOCK);
    const manual = await service({ store: new MemoryStore({ clock }) });
    expect(manual.limiter.now()).toBe(CLOCK);
    clock.advance('1h');
    expect(manual.limiter.now()).toBe(CLOCK + 3_600_000);
    const pinned = await service({ store: new MemoryStore({ clock: () => CLOCK }) });
    expect(pinned.limiter.now()).toBe(CLOCK);
    const real = await service({});
    const before = Date.now();
    const now = real.limiter.now();
    expect(now).toBeGreaterThanOrEqual(before);
    expect(now).toBeLessThanOrEqual(Date.now());
    await Promise.all([manual.moduleRef.close(), pinned.moduleRef.close(), real.moduleRef.close()]);
  });

  it("with failMode 'local', decides and waits on the clock of the store that failed", async () => {
    const clock = new ManualClock(CLOCK);
    const down = async (): Promise<RateLimitDecision[]> => {
      throw new Error('connection refused');
    };
    const failing: RateLimitStore = { clock, consume: down, peek: down, reset: async () => undefined };
    const logged = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    const { moduleRef, limiter } = await service({ store: failing, failMode: 'local' });
    await limiter.consume('user:1', QUEUE);
    const queued = await limiter.consume('user:1', QUEUE);
    expect(queued[0].delay).toBe(1);
    let ended = false;
    void limiter.wait(queued).then(() => (ended = true));
    clock.advance(999);
    await settled();
    expect(ended).toBe(false);
    clock.advance(1);
    await settled();
    expect(ended).toBe(true);
    await moduleRef.close();
    logged.mockRestore();
  });
});
