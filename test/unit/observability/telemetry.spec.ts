import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Controller, type ExecutionContext, Get, type INestApplication, Module } from '@nestjs/common';
import { ExecutionContextHost } from '@nestjs/core/helpers/execution-context-host.js';
import { ExpressAdapter } from '@nestjs/platform-express';
import { Test } from '@nestjs/testing';
import { metrics } from '@opentelemetry/api';
import {
  AggregationTemporality,
  type DataPoint,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import {
  type LimitedRequest,
  MemoryStore,
  RateLimit,
  type RateLimitDecisionEvent,
  RateLimitGuard,
  RateLimitModule,
  type RateLimitModuleOptions,
  type RateLimitStore,
  RateLimitStoreError,
} from '../../../lib/index.js';
import { publishDecision } from '../../../lib/observability/rate-limit-events.js';
import { RateLimitMetrics } from '../../../lib/observability/rate-limit-metrics.js';
import { RateLimitTelemetry } from '../../../lib/observability/rate-limit-telemetry.js';

/**
 * Each `ratelimit.result` the guard reports, with the OpenTelemetry SDK registered (an in-memory
 * exporter), through the module's own guard on an app that is initialised but not listening; and
 * what is built, or not, when nothing listens. The store's clock is pinned.
 */

const NOW = 1_767_225_600_000;
const LIB = fileURLToPath(new URL('../../../lib/', import.meta.url));

@Controller('report')
class ReportController {
  @RateLimit([
    { name: 'burst', limit: 1, window: '1h', key: 'ip' },
    {
      name: 'daily',
      limit: 100,
      window: '1d',
      key: 'ip',
      skipIf: (context: ExecutionContext) => context.getArgByIndex<LimitedRequest>(0).headers['x-internal'] === '1',
    },
  ])
  @Get()
  find() {
    return [];
  }
}

/** A store that cannot decide. */
const broken = (): RateLimitStore => {
  const down = () => Promise.reject(new RateLimitStoreError('down'));
  return { consume: down, peek: down, reset: async () => undefined };
};

let provider: MeterProvider;
let exporter: InMemoryMetricExporter;
let app: INestApplication | undefined;
beforeEach(() => {
  exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  provider = new MeterProvider({
    readers: [new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 })],
  });
  metrics.setGlobalMeterProvider(provider);
});
afterEach(async () => {
  await app?.close();
  app = undefined;
  metrics.disable();
  await provider.shutdown();
});

/** The module's guard in an initialised app (the SDK is registered first, as an app would). */
async function guardWith(options: RateLimitModuleOptions): Promise<RateLimitGuard> {
  @Module({
    imports: [RateLimitModule.forRoot({ store: new MemoryStore({ clock: () => NOW }), ...options })],
    controllers: [ReportController],
  })
  class AppModule {}
  const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
  app = moduleRef.createNestApplication(new ExpressAdapter(), { logger: false });
  await app.init();
  return app.get(RateLimitGuard);
}

/** The guard's verdict on a request to `ReportController.find` (a fresh request object each time: charged once each). */
async function check(guard: RateLimitGuard, headers: Record<string, string> = {}): Promise<boolean | 'thrown'> {
  const context = new ExecutionContextHost(
    [{ ip: '198.51.100.4', headers }, { set: () => undefined }],
    ReportController,
    ReportController.prototype.find,
  );
  return Promise.resolve(guard.canActivate(context)).catch(() => 'thrown' as const);
}

/** `ratelimit.requests` so far, as `policy result` -> count. */
async function requests(): Promise<Record<string, number>> {
  exporter.reset();
  await provider.forceFlush();
  const counts: Record<string, number> = {};
  for (const scope of exporter.getMetrics().flatMap((resource) => resource.scopeMetrics)) {
    for (const metric of scope.metrics.filter((m) => m.descriptor.name === 'ratelimit.requests')) {
      for (const { attributes, value } of metric.dataPoints as DataPoint<number>[]) {
        counts[`${String(attributes['ratelimit.policy'])} ${String(attributes['ratelimit.result'])}`] = value;
      }
    }
  }
  return counts;
}

/** Decision events while `act` runs. */
async function decisionsDuring(act: () => Promise<unknown>): Promise<RateLimitDecisionEvent[]> {
  const seen: RateLimitDecisionEvent[] = [];
  const listener = (message: unknown) => seen.push(message as RateLimitDecisionEvent);
  subscribe('nestjs-ratelimit:decision', listener);
  try {
    await act();
  } finally {
    unsubscribe('nestjs-ratelimit:decision', listener);
  }
  return seen;
}

describe('ratelimit.result, per policy', () => {
  it("allowed and refused are each policy's own verdict: a request refused by one is allowed by the other", async () => {
    const guard = await guardWith({});
    expect([await check(guard), await check(guard)]).toEqual([true, 'thrown']);
    expect(await requests()).toEqual({ 'burst allowed': 1, 'burst refused': 1, 'daily allowed': 2 });
  });

  it('shadow_refused in shadow mode, where the request passes', async () => {
    const guard = await guardWith({ mode: 'shadow' });
    const events = await decisionsDuring(async () =>
      expect([await check(guard), await check(guard)]).toEqual([true, true]),
    );
    expect(await requests()).toEqual({ 'burst allowed': 1, 'burst shadow_refused': 1, 'daily allowed': 2 });
    expect(events.map(({ result }) => result)).toEqual(['allowed', 'shadow_refused']);
  });

  it('skipped for what a skipIf lets pass: one policy, or every one (a decision of its own, with no store decision)', async () => {
    const guard = await guardWith({
      skipIf: (context) => context.getArgByIndex<LimitedRequest>(0).headers['x-health'] === '1',
    });
    const events = await decisionsDuring(async () => {
      expect(await check(guard, { 'x-internal': '1' })).toBe(true);
      expect(await check(guard, { 'x-health': '1' })).toBe(true);
    });
    expect(await requests()).toEqual({ 'burst allowed': 1, 'daily skipped': 2, 'burst skipped': 1 });
    expect(events).toEqual([
      expect.objectContaining({ result: 'allowed', decisions: [expect.objectContaining({ policy: 'burst' })] }),
      { context: 'http', route: 'ReportController.find', decisions: [], result: 'skipped' },
    ]);
  });

  it.each([
    ['open', true, 'failed_open'],
    ['closed', 'thrown', 'failed_closed'],
    ['local', true, 'local'],
  ] as const)("failMode '%s' on a broken store: %s, %s", async (failMode, verdict, result) => {
    const guard = await guardWith({ store: broken(), failMode });
    const events = await decisionsDuring(async () => expect(await check(guard)).toBe(verdict));
    expect(await requests()).toEqual({ [`burst ${result}`]: 1, [`daily ${result}`]: 1 });
    expect(events.map((event) => event.result)).toEqual([result]);
  });
});

describe('with nothing listening', () => {
  /** An execution context that fails the test if anything of it is read. */
  const untouchable = new Proxy({} as ExecutionContext, {
    get: (_target, property) => {
      throw new Error(`read ${String(property)}`);
    },
  });

  it('a decision event is not built without a subscriber, and is with one', async () => {
    expect(() => publishDecision(untouchable, [], 'allowed')).not.toThrow();
    expect(
      await decisionsDuring(async () =>
        expect(() => publishDecision(untouchable, [], 'allowed')).toThrow('read getType'),
      ),
    ).toEqual([]);
  });

  it('the telemetry of a module without metrics reads nothing of a decided request', () => {
    const telemetry = new RateLimitTelemetry(null, { mode: 'enforce', failMode: 'local' }, () => {
      throw new Error('asked whether the decision was local');
    });
    expect(() => telemetry.decided(untouchable, [], true)).not.toThrow();
  });

  it('RateLimitMetrics.load makes no instruments without an SDK (the API would only give no-ops)', async () => {
    expect(await RateLimitMetrics.load()).toBeInstanceOf(RateLimitMetrics);
    metrics.disable();
    expect(await RateLimitMetrics.load()).toBeNull();
  });

  it('no lib file imports @opentelemetry/api but by a dynamic import (types aside)', () => {
    const sources = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
        entry.isDirectory()
          ? sources(join(dir, entry.name))
          : entry.name.endsWith('.ts')
            ? [join(dir, entry.name)]
            : [],
      );
    const importing = sources(LIB).filter((file) =>
      /^\s*(import|export)\s+(?!type\b)[^;]*from\s+'@opentelemetry\//m.test(readFileSync(file, 'utf8')),
    );
    expect(importing).toEqual([]);
    const loading = sources(LIB).filter((file) =>
      readFileSync(file, 'utf8').includes("await import('@opentelemetry/api')"),
    );
    expect(loading.map((file) => file.slice(LIB.length))).toEqual(['observability/rate-limit-metrics.ts']);
  });
});
