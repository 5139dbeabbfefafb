/**
 * What metrics cost the guard, without HTTP: `canActivate` of the module's own guard called in a
 * loop, in this process, on a memory store, with a limit nobody reaches (every request admitted
 * and charged). Three guards, each in an initialised app of its own, take turns:
 *
 * - `metrics off`: `metrics: false`;
 * - `metrics on, no SDK`: the default, `@opentelemetry/api` installed but no SDK registered;
 *   it should cost nothing, so its ratio to `metrics off` has a target (within noise);
 * - `metrics on, SDK`: an OpenTelemetry SDK registered (a meter provider aggregating in memory)
 *   before its app starts: what recording costs, for information.
 */
import { performance } from 'node:perf_hooks';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { type CanActivate, Controller, Get, type INestApplication, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExecutionContextHost } from '@nestjs/core/helpers/execution-context-host.js';
import { ExpressAdapter } from '@nestjs/platform-express';
import { metrics } from '@opentelemetry/api';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { RateLimit, RateLimitGuard, RateLimitModule, type RateLimitModuleOptions } from 'nestjs-ratelimit';
import type { BenchContext, ComparisonReport } from './comparison.js';
import {
  type Contender,
  markdownTable,
  medianRate,
  type RatioRow,
  ratioOfMedians,
  type Sample,
  summarize,
} from './stats.js';

/** Decisions between two looks at the clock (and a turn of the event loop, so timers still run). */
const BATCH = 1024;
/** Metrics on without an SDK over metrics off: within noise. */
const WITHIN_NOISE = { op: '>=', value: 0.95 } as const;

@Controller()
class BenchController {
  @RateLimit({ name: 'bench', rps: 1_000_000, burst: 1_000_000, key: 'ip' })
  @Get()
  find() {
    return 'ok';
  }
}

const RESPONSE = { set: () => undefined };

/**
 * The module's guard in an initialised app (not listening), on one route limited by
 * `@RateLimit` (rps and burst 1e6, keyed by IP): a limit nobody reaches. bench/in-process.ts
 * drives it too.
 */
export async function guardOf(
  options: RateLimitModuleOptions,
): Promise<{ guard: RateLimitGuard; app: INestApplication }> {
  @Module({ imports: [RateLimitModule.forRoot(options)], controllers: [BenchController] })
  class BenchModule {}
  const app = await NestFactory.create(BenchModule, new ExpressAdapter(), { logger: false });
  await app.init();
  return { guard: app.get(RateLimitGuard), app };
}

/**
 * Calls `guard.canActivate` for `seconds` on that route, in this process: a fresh request and
 * `ExecutionContextHost` each time, as each would be charged once, and a response object with
 * the `set` Express's adapter writes headers with. Any guard that writes through the HTTP
 * adapter can be driven (bench/in-process.ts drives the headers-only one of bench/server.ts).
 */
export async function loop(guard: CanActivate, seconds: number): Promise<Sample> {
  const handler = BenchController.prototype.find;
  let decisions = 0;
  let refused = 0;
  const started = performance.now();
  const end = started + seconds * 1000;
  while (performance.now() < end) {
    for (let i = 0; i < BATCH; i++) {
      const context = new ExecutionContextHost(
        [{ ip: '203.0.113.9', headers: {} }, RESPONSE],
        BenchController,
        handler,
      );
      if (!(await guard.canActivate(context))) refused++;
    }
    decisions += BATCH;
    await nextTurn();
  }
  return { perSecond: decisions / ((performance.now() - started) / 1000), counts: { refused } };
}

export async function guardMetrics(context: BenchContext): Promise<ComparisonReport> {
  const off = await guardOf({ metrics: false });
  const noSdk = await guardOf({});
  // an app's SDK is registered before the app starts: the ones above were made without one
  const provider = new MeterProvider({
    readers: [
      new PeriodicExportingMetricReader({
        exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE),
        exportIntervalMillis: 3_600_000,
      }),
    ],
  });
  metrics.setGlobalMeterProvider(provider);
  const withSdk = await guardOf({});
  const guards = { 'metrics off': off, 'metrics on, no SDK': noSdk, 'metrics on, SDK': withSdk };
  try {
    const contenders: Contender[] = Object.entries(guards).map(([name, { guard }]) => ({
      name,
      run: async () => {
        await loop(guard, context.warmupSeconds);
        return loop(guard, context.seconds);
      },
    }));
    const samples = await context.alternate(contenders);
    const rows = [...samples].map(([name, runs]) => {
      const { median, min, max } = summarize(runs.map((run) => 1e6 / run.perSecond));
      return [
        name,
        `${median.toFixed(3)} (${min.toFixed(3)}–${max.toFixed(3)})`,
        `${Math.round(medianRate(runs)).toLocaleString('en-US')}`,
      ];
    });
    const of = (name: keyof typeof guards) => samples.get(name)!;
    const ratios: RatioRow[] = [
      {
        comparison: 'guard-metrics',
        label: 'metrics on, no SDK / metrics off',
        value: ratioOfMedians(of('metrics on, no SDK'), of('metrics off')),
        target: WITHIN_NOISE,
      },
      {
        comparison: 'guard-metrics',
        label: 'metrics on, SDK / metrics off',
        value: ratioOfMedians(of('metrics on, SDK'), of('metrics off')),
      },
    ];
    const refused = [...samples].flatMap(([name, runs]) =>
      runs.some((run) => run.counts?.refused) ? [`${name}: some decisions refused`] : [],
    );
    const table = markdownTable(['contender', 'µs/decision: median (min–max)', 'decisions/s'], rows);
    return { table, ratios, notes: refused };
  } finally {
    await Promise.all(Object.values(guards).map(({ app }) => app.close()));
    metrics.disable();
    await provider.shutdown();
  }
}
