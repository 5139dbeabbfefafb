import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Controller, Get, Module } from '@nestjs/common';
import {
  MemoryStore,
  RateLimit,
  RateLimitModule,
  RateLimiterService,
  type RateLimitStore,
  RedisStore,
} from '../../lib/index.js';
import { type AdapterName, startApp, type TestApp } from '../support/app.js';
import { useTestRedis } from '../support/redis/test-redis.js';

/**
 * An adaptive policy under real load: a client offers 16 requests a second (evenly spaced, not
 * waiting for answers) to a route of 20 rps whose target p99 is 100 ms. The handler's latency is
 * raised to 300 ms for 5 s, then dropped back to 10 ms for 10 s. The admitted rate must fall to at
 * most half within the 5 s, and be back to the full rate (all 16) within the 10 s. The test prints
 * the factor the module steered to, and what was admitted, every half second.
 */

const OFFERED_PER_S = 16;
const TARGET_MS = 100;
const SLOW_MS = 300;
const FAST_MS = 10;

/** The handler's latency, ms, as the test sets it. */
const latency = { ms: FAST_MS };

@Controller('adaptive')
class SlowingController {
  @RateLimit({ name: 'adaptive', rps: 20, burst: 4, key: 'ip', adaptive: { latency: TARGET_MS, min: 0.1 } })
  @Get()
  async handle() {
    await sleep(latency.ms);
    return { ok: true };
  }

  /** The same path through the limiter, without the adaptive policy: warms the app up. */
  @RateLimit({ name: 'warm-up', rps: 1_000, burst: 1_000, key: 'ip' })
  @Get('warm-up')
  async warmUp() {
    await sleep(FAST_MS);
    return { ok: true };
  }
}

const redis = useTestRedis();

const RUNS: Array<[string, AdapterName, () => { store: RateLimitStore; prefix?: string }]> = [
  ['memory', 'express', () => ({ store: new MemoryStore() })],
  [
    'redis',
    'fastify',
    () => ({ store: new RedisStore({ client: redis() }), prefix: `rl-e2e-adaptive-${randomUUID()}:` }),
  ],
];

describe.each(RUNS)('an adaptive policy on the %s store, %s', (_store, adapter, storeOptions) => {
  let http: TestApp;
  afterAll(() => http?.close());

  it('halves the admitted rate within 5 s of the latency rising, and is back to the full rate within 10 s of it dropping', async () => {
    @Module({ imports: [RateLimitModule.forRoot(storeOptions())], controllers: [SlowingController] })
    class AppModule {}
    http = await startApp(AppModule, adapter);
    const limiter = http.app.get(RateLimiterService);
    latency.ms = FAST_MS;
    // a running app is warm (its code compiled, its connections open): its first requests are
    // not slower than the rest, as those of a fresh one are
    for (let round = 0; round < 10; round++) {
      await Promise.all(
        Array.from({ length: 8 }, () => http.get('/adaptive/warm-up').then((response) => response.text())),
      );
    }

    /** Each request's send time (ms since start) and whether it was admitted. */
    const sent: Array<{ at: number; admitted: Promise<boolean> }> = [];
    const started = performance.now();
    const elapsed = () => performance.now() - started;
    const admittedIn = (from: number, to: number) =>
      Promise.all(sent.filter(({ at }) => at >= from && at < to).map(({ admitted }) => admitted));
    const trace: string[] = [];
    /** The factor every 500 ms, for the checks (`trace` prints it). */
    const factors: { at: number; factor: number }[] = [];
    /** Requests admitted after the latency dropped that the client saw take the target or longer. */
    let slow = 0;

    /** Offers requests evenly until `until` ms, noting the factor every 500 ms. */
    async function offer(until: number): Promise<void> {
      let next = sent.length === 0 ? 0 : sent.at(-1)!.at + 1000 / OFFERED_PER_S;
      let noted = Math.floor(elapsed() / 500) * 500;
      while (next < until) {
        const wait = next - elapsed();
        if (wait > 0) await sleep(wait);
        const [at, leftAt] = [next, performance.now()];
        sent.push({
          at,
          admitted: http.get('/adaptive').then(async (response) => {
            await response.text();
            // what the client waited is at least what the limiter measured, from admission to the answer
            const admitted = response.status === 200;
            if (admitted && at >= 7_000 && performance.now() - leftAt >= TARGET_MS) slow++;
            return admitted;
          }),
        });
        next += 1000 / OFFERED_PER_S;
        if (elapsed() >= noted + 500) {
          noted += 500;
          const factor = limiter.getScale('adaptive');
          factors.push({ at: noted, factor });
          trace.push(`t=${(noted / 1000).toFixed(1)}s latency=${latency.ms}ms factor=${factor.toFixed(2)}`);
        }
      }
    }

    const count = async (from: number, to: number) => (await admittedIn(from, to)).filter(Boolean).length;

    await offer(2_000);
    latency.ms = SLOW_MS;
    await offer(7_000);
    latency.ms = FAST_MS;
    await offer(17_000);
    await Promise.all(sent.map(({ admitted }) => admitted));

    const perSecond: number[] = [];
    for (let second = 0; second < 17; second++) perSecond.push(await count(second * 1000, (second + 1) * 1000));
    console.log(
      `adaptive on ${_store}/${adapter}: factor over time\n${trace.join('\n')}\nadmitted per second (offered ${OFFERED_PER_S}): ${perSecond.join(' ')}; requests at or past the target after the drop: ${slow}`,
    );

    // full rate before: every request offered in the second second was admitted, unless the
    // factor had already fallen: a loaded machine's event loop can hold a 10 ms handler past the
    // 100 ms target (seen beside two busy processes), and then the limiter is right to slow down
    if (factors.filter(({ at }) => at <= 2_000).every(({ factor }) => factor === 1))
      expect(perSecond[1]).toBeGreaterThanOrEqual(OFFERED_PER_S - 1);
    // at most half in some second of the 5 s of high latency (seconds 2..6)
    expect(Math.min(...perSecond.slice(2, 7))).toBeLessThanOrEqual(OFFERED_PER_S / 2);
    // the full rate again in some second of the 10 s after it dropped (seconds 7..16), and the
    // factor itself back at 1 (later it may dip again), unless the app itself was slow then: a
    // machine busy with the suite's builds held a 10 ms handler past the target, as the client
    // saw too, and the limiter rightly stayed slow (two slow answers make a window's p99)
    if (slow < 2) {
      expect(Math.max(...perSecond.slice(7, 17))).toBeGreaterThanOrEqual(OFFERED_PER_S - 1);
      expect(Math.max(...factors.filter(({ at }) => at > 7_000).map(({ factor }) => factor))).toBe(1);
    }
  }, 40_000);
});
