import { randomUUID } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { expect } from '@jest/globals';
import { Controller, Get, Module } from '@nestjs/common';
import { type Attributes, metrics } from '@opentelemetry/api';
import {
  AggregationTemporality,
  type DataPoint,
  type Histogram,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { Redis } from 'ioredis';
import {
  RateLimit,
  type RateLimitDecisionEvent,
  RateLimitModule,
  type RateLimitModuleOptions,
  RateLimitStoreError,
  type RateLimitStoreErrorEvent,
} from '../../lib/index.js';
import { startApp, type TestApp } from '../support/app.js';
import { type RedisServer, startRedisServer, stopRedisServer } from '../support/redis/process.js';
import { testRedisUrl } from '../support/redis/test-redis.js';

/**
 * What an operator sees: the OpenTelemetry SDK registered as an app registers it (a meter provider
 * with an in-memory exporter, before the app starts), a real Express app on the memory store and
 * on Redis, and subscribers of the module's diagnostics channels. The meter provider is
 * process-wide: each test registers its own and `metrics.disable()` removes it after.
 */

const API_KEY = `key-${randomUUID()}`;
const CLIENT_IP = '127.0.0.1';
const DECISION = 'nestjs-ratelimit:decision';
const STORE_ERROR = 'nestjs-ratelimit:store-error';

@Controller('orders')
class OrdersController {
  @RateLimit({ name: 'orders', limit: 5, window: '1h', key: 'api-key' })
  @Get()
  list() {
    return [];
  }
}

@Controller('exports')
class ExportsController {
  /** A queue: requests leave 500 ms apart. */
  @RateLimit({ name: 'exports', algorithm: 'leaky_bucket', rps: 2, burst: 5, key: 'api-key' })
  @Get()
  run() {
    return { queued: true };
  }
}

/** An app of `OrdersController` and `ExportsController` with these module options. */
async function start(options: RateLimitModuleOptions): Promise<TestApp> {
  @Module({ imports: [RateLimitModule.forRoot(options)], controllers: [OrdersController, ExportsController] })
  class AppModule {}
  return startApp(AppModule, 'express');
}

/** Statuses of `count` requests in a row from the one client. */
async function send(http: TestApp, count: number): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i < count; i++) {
    const response = await http.get('/orders', { 'x-api-key': API_KEY });
    await response.arrayBuffer();
    statuses.push(response.status);
  }
  return statuses;
}

/** The SDK as an app sets it up; `read()` collects what the module's meter recorded so far. */
class Sdk {
  private readonly exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  private readonly provider = new MeterProvider({
    readers: [new PeriodicExportingMetricReader({ exporter: this.exporter, exportIntervalMillis: 3_600_000 })],
  });

  constructor() {
    if (!metrics.setGlobalMeterProvider(this.provider))
      throw new Error('a meter provider is still registered: a test did not disable it');
  }

  /** Each instrument of the meter `nestjs-ratelimit` (name -> data points), as recorded until now. */
  async read(): Promise<Map<string, DataPoint<number | Histogram>[]>> {
    this.exporter.reset();
    await this.provider.forceFlush();
    const scopes = this.exporter.getMetrics().flatMap((resource) => resource.scopeMetrics);
    const ours = scopes.filter((scope) => scope.scope.name === 'nestjs-ratelimit').flatMap((scope) => scope.metrics);
    return new Map(
      ours.map((metric) => [metric.descriptor.name, metric.dataPoints as DataPoint<number | Histogram>[]]),
    );
  }

  async close(): Promise<void> {
    metrics.disable();
    await this.provider.shutdown();
  }
}

/** The value (a count; for a histogram, how many it recorded) of each data point, by the attributes named. */
function countsBy(
  points: readonly DataPoint<number | Histogram>[] | undefined,
  ...names: string[]
): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const { attributes, value } of points ?? []) {
    const key = names.map((name) => attributes[name]).join(' ');
    counts[key] = (counts[key] ?? 0) + (typeof value === 'number' ? value : value.count);
  }
  return counts;
}

/** Every attribute of every data point recorded. */
function allAttributes(recorded: Map<string, DataPoint<number | Histogram>[]>): Attributes[] {
  return [...recorded.values()].flatMap((points) => points.map((point) => point.attributes));
}

/** What a channel publishes while a test runs; `stop()` unsubscribes. */
function listen<T>(name: string): { messages: T[]; stop(): void } {
  const messages: T[] = [];
  const listener = (message: unknown) => messages.push(message as T);
  subscribe(name, listener);
  return { messages, stop: () => unsubscribe(name, listener) };
}

let http: TestApp | undefined;
let sdk: Sdk | undefined;
const listeners: { stop(): void }[] = [];
afterEach(async () => {
  await http?.close();
  await sdk?.close();
  for (const listener of listeners.splice(0)) listener.stop();
  http = sdk = undefined;
});

describe.each(['memory', 'redis'] as const)('metrics and decision events on the %s store', (store) => {
  let redis: Redis | undefined;
  beforeAll(async () => {
    if (store === 'redis') redis = new Redis(testRedisUrl(), { lazyConnect: true });
    await redis?.connect();
  });
  afterAll(async () => {
    await redis?.quit();
  });

  it('5 allowed and 3 refused: counted per policy and result, store calls timed, 8 decision events, no identity anywhere', async () => {
    sdk = new Sdk();
    const decisions = listen<RateLimitDecisionEvent>(DECISION);
    listeners.push(decisions);
    const prefix = `rl-otel-${randomUUID()}:`;
    http = await start({ prefix, ...(redis === undefined ? {} : { redis }) });

    expect(await send(http, 8)).toEqual([200, 200, 200, 200, 200, 429, 429, 429]);

    const recorded = await sdk.read();
    expect(
      countsBy(recorded.get('ratelimit.requests'), 'ratelimit.policy', 'ratelimit.result', 'ratelimit.context'),
    ).toEqual({
      'orders allowed http': 5,
      'orders refused http': 3,
    });
    // every decision timed; on Redis, refusals it foresaw are answered from the refused-key cache
    const calls = countsBy(recorded.get('ratelimit.store.duration'), 'ratelimit.store', 'ratelimit.store.outcome');
    expect(Object.values(calls).reduce((sum, count) => sum + count, 0)).toBe(8);
    expect(calls[`${store} ok`]).toBeGreaterThanOrEqual(5);
    expect(Object.keys(calls).every((key) => [`${store} ok`, `${store} cached`].includes(key))).toBe(true);
    const durations = recorded.get('ratelimit.store.duration')!.map((point) => point.value as Histogram);
    expect(durations.reduce((sum, { sum: seconds = 0 }) => sum + seconds, 0)).toBeGreaterThan(0);

    // nothing of the client in any attribute: its API key, its address, its bucket's store key
    const keys = redis === undefined ? [] : await redis.keys(`${prefix}*`);
    expect(redis === undefined || keys.length > 0).toBe(true);
    const identities = [API_KEY, CLIENT_IP, ...keys, ...keys.map((key) => key.slice(prefix.length))];
    const attributes = allAttributes(recorded);
    expect(attributes.length).toBeGreaterThan(0);
    for (const set of attributes) {
      for (const value of Object.values(set))
        for (const identity of identities) expect(String(value)).not.toContain(identity);
    }

    expect(decisions.messages).toHaveLength(8);
    expect(decisions.messages.map(({ result }) => result)).toEqual([
      ...Array<string>(5).fill('allowed'),
      ...Array<string>(3).fill('refused'),
    ]);
    for (const message of decisions.messages) {
      expect(message).toMatchObject({ context: 'http', route: 'OrdersController.list' });
      expect(message.decisions).toEqual([expect.objectContaining({ policy: 'orders', limit: 5 })]);
    }
  });
});

describe('leaky_bucket waits', () => {
  it('each admitted request that waited its turn is timed in ratelimit.queue.duration, under its policy', async () => {
    sdk = new Sdk();
    http = await start({ prefix: `rl-otel-${randomUUID()}:` });
    const started = performance.now();
    const responses = await Promise.all([0, 1, 2].map(() => http!.get('/exports', { 'x-api-key': API_KEY })));
    const seconds = (performance.now() - started) / 1000;
    expect(responses.map(({ status }) => status)).toEqual([200, 200, 200]);

    // the first left at once (no wait to time); the others 500 and 1000 ms after the first came
    const [queued, ...others] = (await sdk.read()).get('ratelimit.queue.duration')!;
    expect(others).toEqual([]);
    expect(queued.attributes).toEqual({ 'ratelimit.policy': 'exports' });
    const { count, min, max } = queued.value as Histogram;
    expect(count).toBe(2);
    expect(min).toBeGreaterThan(0.25);
    expect(max).toBeGreaterThan(0.75);
    expect(max).toBeLessThanOrEqual(seconds);
  });
});

describe('without the SDK', () => {
  it('limits as ever and still publishes decisions; an SDK registered after start sees nothing of the module', async () => {
    expect(metrics.getMeterProvider().constructor.name).toBe('NoopMeterProvider');
    const decisions = listen<RateLimitDecisionEvent>(DECISION);
    listeners.push(decisions);
    http = await start({ prefix: `rl-otel-${randomUUID()}:` });

    expect(await send(http, 3)).toEqual([200, 200, 200]);
    sdk = new Sdk();
    expect(await send(http, 5)).toEqual([200, 200, 429, 429, 429]);

    expect(decisions.messages.map(({ result }) => result)).toEqual([
      'allowed',
      'allowed',
      'allowed',
      'allowed',
      'allowed',
      'refused',
      'refused',
      'refused',
    ]);
    // OpenTelemetry's meters are no-ops unless an SDK is registered first: the module made none
    expect(await sdk.read()).toEqual(new Map());
  });

  it('metrics: false records nothing even with an SDK', async () => {
    sdk = new Sdk();
    http = await start({ prefix: `rl-otel-${randomUUID()}:`, metrics: false });
    expect(await send(http, 6)).toEqual([200, 200, 200, 200, 200, 429]);
    expect(await sdk.read()).toEqual(new Map());
  });
});

describe('store failures', () => {
  let server: RedisServer;
  let client: Redis;
  beforeEach(async () => {
    server = await startRedisServer();
    client = new Redis(server.url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, lazyConnect: true });
    await client.connect();
  });
  afterEach(() => {
    client.disconnect();
    stopRedisServer(server.pid);
  });

  it('a stopped Redis: each failed call published with the failMode, counted failed_closed; the breaker opens once', async () => {
    sdk = new Sdk();
    const errors = listen<RateLimitStoreErrorEvent>(STORE_ERROR);
    const decisions = listen<RateLimitDecisionEvent>(DECISION);
    listeners.push(errors, decisions);
    http = await start({ redis: client, prefix: `rl-otel-${randomUUID()}:`, failMode: 'closed' });
    expect(await send(http, 1)).toEqual([200]);

    stopRedisServer(server.pid);
    await new Promise((resolve) => client.once('close', resolve));
    // three failures open the breaker; the fourth request is not sent to Redis
    expect(await send(http, 4)).toEqual([503, 503, 503, 503]);

    expect(errors.messages).toHaveLength(3);
    for (const { error, failMode } of errors.messages) {
      expect(error).toBeInstanceOf(RateLimitStoreError);
      expect(failMode).toBe('closed');
    }
    expect(decisions.messages.map(({ result }) => result)).toEqual([
      'allowed',
      ...Array<string>(4).fill('failed_closed'),
    ]);
    expect(decisions.messages[1].decisions).toEqual([]);
    const recorded = await sdk.read();
    expect(countsBy(recorded.get('ratelimit.requests'), 'ratelimit.result')).toEqual({ allowed: 1, failed_closed: 4 });
    expect(countsBy(recorded.get('ratelimit.store.duration'), 'ratelimit.store.outcome')).toEqual({
      ok: 1,
      error: 3,
      breaker_open: 1,
    });
    expect(
      countsBy(recorded.get('ratelimit.breaker.transitions'), 'ratelimit.store', 'ratelimit.breaker.state'),
    ).toEqual({ 'redis open': 1 });
  });

  it('a frozen Redis: calls time out, failed_open; once it answers again a probe closes the breaker', async () => {
    sdk = new Sdk();
    const errors = listen<RateLimitStoreErrorEvent>(STORE_ERROR);
    listeners.push(errors);
    // 300 ms: the first call (which loads the script on this fresh server) must not time out on a loaded machine
    http = await start({ redis: client, prefix: `rl-otel-${randomUUID()}:`, failMode: 'open', timeout: 300 });
    expect(await send(http, 1)).toEqual([200]);

    process.kill(server.pid, 'SIGSTOP');
    try {
      expect(await send(http, 4)).toEqual([200, 200, 200, 200]);
    } finally {
      process.kill(server.pid, 'SIGCONT');
    }
    expect(errors.messages.map(({ failMode }) => failMode)).toEqual(['open', 'open', 'open']);

    // the breaker lets a probe through 250 ms after it opened: requests until one has closed it
    let closed = 0;
    for (let attempt = 0; attempt < 40 && closed === 0; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      await send(http, 1);
      closed = countsBy((await sdk.read()).get('ratelimit.breaker.transitions'), 'ratelimit.breaker.state').closed ?? 0;
    }
    const recorded = await sdk.read();
    expect(countsBy(recorded.get('ratelimit.breaker.transitions'), 'ratelimit.breaker.state')).toEqual({
      open: 1,
      closed: 1,
    });
    const outcomes = countsBy(recorded.get('ratelimit.store.duration'), 'ratelimit.store.outcome');
    expect(outcomes).toMatchObject({ timeout: 3, breaker_open: expect.any(Number) });
    expect(outcomes.ok).toBeGreaterThanOrEqual(2);
    const results = countsBy(recorded.get('ratelimit.requests'), 'ratelimit.result');
    expect(results.failed_open).toBe(outcomes.timeout + outcomes.breaker_open);
    // the timed-out calls took the timeout at least
    const timeouts = recorded
      .get('ratelimit.store.duration')!
      .find((point) => point.attributes['ratelimit.store.outcome'] === 'timeout')!;
    expect((timeouts.value as Histogram).min).toBeGreaterThanOrEqual(0.3);
  });
});
