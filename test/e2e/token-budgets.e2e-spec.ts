/**
 * Token budgets (issue 40) over HTTP, on Express and Fastify, with a `MemoryStore` and a
 * `RedisStore` (the test Redis), both on a `ManualClock`: a policy reserves its `cost` up front
 * and is charged the request's real cost when it ends, however it ends: from a JSON handler's
 * result (`settle`), from what a stream counted on its meter (`@RateLimitMeter()`: SSE, a
 * `StreamableFile`, a stream written through `@Res()`), for a client gone mid-stream what was
 * produced until then (gone before anything was counted: its reservation), for a handler error
 * what it added (a handler settling from its result keeps its reservation); a long stream's
 * interval settles (`settleEvery`, woken by moving the clock) show in other requests' headers
 * while it runs; a settle past the limit is debt, refused with a
 * `Retry-After` of the time the rate takes to pay it back. Also `RateLimiterService.reserve`, the
 * per-dimension headers, and the start errors of a meter without a settling policy and of a
 * `concurrency` policy that settles.
 *
 * A test waits for the settles a request's end makes (`SettleWatch`), never for time: the clock
 * moves only when a test moves it.
 */
import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { jest } from '@jest/globals';
import {
  Body,
  Controller,
  Get,
  Logger,
  Module,
  Post,
  Query,
  Res,
  Sse,
  StreamableFile,
  type Type,
} from '@nestjs/common';
import { ExpressAdapter } from '@nestjs/platform-express';
import { Test } from '@nestjs/testing';
import type { Redis } from 'ioredis';
import { interval, map, type Observable, take } from 'rxjs';
import {
  MemoryStore,
  RateLimit,
  RateLimiterService,
  RateLimitMeter,
  RateLimitModule,
  type RateLimitPolicy,
  RedisStore,
} from '../../lib/index.js';
import { ManualClock } from '../../lib/testing/index.js';
import { CASE_EPOCH } from '../cases/cases.js';
import { ADAPTERS, type AdapterName, read, startApp, type TestApp } from '../support/app.js';
import { connectTestRedis } from '../support/redis/test-redis.js';
import { Feeds, newKey, resetSeconds, SettleWatch, SseReader } from '../support/token-budget-apps.js';

/** What the JSON handlers answer, as an LLM API does: the tokens the request used. */
interface Completion {
  usage: { total_tokens: number };
}

const completion = (tokens: number): Completion => ({ usage: { total_tokens: tokens } });

/**
 * 1,000 tokens an hour per API key, 100 reserved up front, the real cost settled from the result.
 * An hour: a Redis key lives until its bucket is full again, as real time counts it, which must
 * outlast a test on a loaded machine (the clock stands still meanwhile).
 */
const TPM = {
  name: 'tpm',
  limit: 1_000,
  window: '1h',
  key: 'api-key',
  unit: 'tokens',
  cost: 100,
  maxDebt: 1_000,
  settle: (result: Completion) => result.usage.total_tokens,
} satisfies RateLimitPolicy;
/** Tokens per second of `TPM`. */
const TPM_RATE = 1_000 / 3600;
/** The same bucket, asked with a reservation of nothing: the headers say what it holds, and no settle follows. */
const TPM_PEEK = { ...TPM, cost: 0, settle: undefined } satisfies RateLimitPolicy;

/** 1,000 tokens an hour in a fixed window from the key's first request (nothing comes back while a test moves the clock by seconds), settled every second. */
const TPH = {
  name: 'tph',
  algorithm: 'fixed_window',
  limit: 1_000,
  window: '1h',
  anchor: 'first-request',
  key: 'api-key',
  unit: 'tokens',
  cost: 100,
  maxDebt: 1_000,
  settleEvery: '1s',
} satisfies RateLimitPolicy;
const TPH_PEEK = { ...TPH, cost: 0, settleEvery: undefined } satisfies RateLimitPolicy;

/** 20 requests an hour per API key: the request dimension beside `TPM`'s tokens. */
const RPM = { name: 'rpm', limit: 20, window: '1h', key: 'api-key' } satisfies RateLimitPolicy;
const RPM_RATE = 20 / 3600;

@Controller()
class ChatController {
  constructor(private readonly feeds: Feeds) {}

  @RateLimit(TPM)
  @Post('json')
  json(@Body() body: { tokens: number }): Completion {
    return completion(body.tokens);
  }

  @RateLimit(TPM_PEEK)
  @Get('peek')
  peek() {
    return { ok: true };
  }

  /** `n` events, 10 tokens each, one a millisecond. */
  @RateLimit(TPM)
  @Sse('stream')
  stream(@Query('n') n: string, @RateLimitMeter('tpm') meter: RateLimitMeter): Observable<MessageEvent> {
    return interval(1).pipe(
      take(Number(n)),
      map((i) => {
        meter.add(10);
        return { data: { i } } as MessageEvent;
      }),
    );
  }

  /** Events the test sends one by one (see `Feeds`). */
  @RateLimit(TPM)
  @Sse('held')
  held(@Query('id') id: string, @RateLimitMeter('tpm') meter: RateLimitMeter): Observable<MessageEvent> {
    return this.feeds.open(id, meter).stream;
  }

  @RateLimit(TPH)
  @Sse('long')
  long(@Query('id') id: string, @RateLimitMeter() meter: RateLimitMeter): Observable<MessageEvent> {
    return this.feeds.open(id, meter).stream;
  }

  @RateLimit(TPH_PEEK)
  @Get('long/peek')
  longPeek() {
    return { ok: true };
  }

  @RateLimit(TPM)
  @Post('fail-metered')
  failMetered(@Body() body: { tokens: number }, @RateLimitMeter() meter: RateLimitMeter): Completion {
    meter.add(body.tokens);
    throw new Error('the model failed mid-answer');
  }

  @RateLimit(TPM)
  @Post('fail-result')
  failResult(): Completion {
    throw new Error('the model failed before it answered');
  }

  /** A file of `n` chunks of 8 bytes, each counted (8 tokens) as the response reads it. */
  @RateLimit(TPM)
  @Get('file')
  file(@Query('n') n: string, @RateLimitMeter() meter: RateLimitMeter): StreamableFile {
    const chunks = Number(n);
    return new StreamableFile(
      Readable.from(
        (function* () {
          for (let i = 0; i < chunks; i++) {
            meter.add(8);
            yield Buffer.from(`${String(i).padStart(7, '0')}\n`);
          }
        })(),
      ),
    );
  }

  /** `n` lines of 6 bytes written through the Node response itself, 6 tokens each. */
  @RateLimit(TPM)
  @Get('raw')
  raw(
    @Query('n') n: string,
    @RateLimitMeter() meter: RateLimitMeter,
    @Res() response: { hijack?: () => void; raw?: NodeJS.WritableStream },
  ): void {
    // Fastify: the app writes the reply itself
    response.hijack?.();
    const out = (response.raw ?? response) as NodeJS.WritableStream & { writeHead(status: number): void };
    out.writeHead(200);
    let written = 0;
    const write = (): void => {
      if (written++ === Number(n)) return void out.end();
      meter.add(6);
      out.write('line.\n');
      setImmediate(write);
    };
    write();
  }

  @RateLimit([RPM, TPM])
  @Post('chat')
  chat(@Body() body: { tokens: number }): Completion {
    return completion(body.tokens);
  }
}

const STORES = ['memory', 'redis'] as const;
type StoreName = (typeof STORES)[number];
const SUITES = ADAPTERS.flatMap((adapter) => STORES.map((store) => [adapter, store] as const));

describe.each(SUITES)('token budgets on %s, %s store', (adapter: AdapterName, storeName: StoreName) => {
  const clock = new ManualClock(CASE_EPOCH);
  let app: TestApp;
  let redis: Redis | undefined;
  let store: MemoryStore | RedisStore;
  let settles: SettleWatch;
  let feeds: Feeds;

  beforeAll(async () => {
    if (storeName === 'redis') redis = await connectTestRedis();
    store = redis === undefined ? new MemoryStore({ clock }) : new RedisStore({ client: redis, clock });
    settles = new SettleWatch(store);
    @Module({
      imports: [
        RateLimitModule.forRoot({ store, prefix: `rl-e2e-tb-${randomUUID()}:`, headers: ['ietf', 'dimensions'] }),
      ],
      controllers: [ChatController],
      providers: [Feeds],
    })
    class AppModule {}
    app = await startApp(AppModule, adapter);
    feeds = app.app.get(Feeds);
  });
  afterAll(async () => {
    feeds?.endAll();
    await app?.close();
    await store?.close?.();
    await redis?.quit();
  });

  const post = (path: string, body: unknown, key: string) =>
    fetch(`${app.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': key },
      body: JSON.stringify(body),
    });
  /** What `TPM`'s bucket of `key` holds, as a reservation of nothing sees it. */
  const remaining = async (key: string) => {
    const { status, headers } = await read(await app.get('/peek', { 'x-api-key': key }));
    expect(status).toBe(200);
    return Number(headers['x-ratelimit-remaining-tokens']);
  };
  const usage = (key: string, policy: RateLimitPolicy = TPM) =>
    app.app.get(RateLimiterService).usage(`api-key:${key}`, policy);

  it('settles a JSON handler from its result: what it used past the reservation taken, what it did not given back', async () => {
    const key = newKey();
    const first = await settles.after(1, async () => read(await post('/json', { tokens: 400 }, key)));
    expect(first.status).toBe(201);
    // the headers are written before the settle: they show the reservation
    expect(first.headers['x-ratelimit-remaining-tokens']).toBe('900');
    expect(first.headers['ratelimit-policy']).toBe('"tpm";q=1000;w=3600;qu="tokens"');
    expect(await remaining(key)).toBe(600);

    const second = await settles.after(1, async () => read(await post('/json', { tokens: 30 }, key)));
    expect(second.headers['x-ratelimit-remaining-tokens']).toBe('500');
    expect(await remaining(key)).toBe(570);
    expect(await usage(key)).toMatchObject({ used: 430, remaining: 570, limit: 1_000 });
  });

  it('settles an SSE stream by what its meter counted', async () => {
    const key = newKey();
    const events = await settles.after(1, async () => {
      const response = await app.get('/stream?n=5', { 'x-api-key': key });
      expect(response.status).toBe(200);
      expect(response.headers.get('x-ratelimit-remaining-tokens')).toBe('900');
      return new SseReader(response).rest();
    });
    expect(events).toHaveLength(5);
    // 50 counted, the reservation of 100 made up to it
    expect(await remaining(key)).toBe(950);
  });

  it('charges a client gone mid-stream what its meter had counted when the response closed', async () => {
    const key = newKey();
    const id = randomUUID();
    const abort = new AbortController();
    const landed = settles.landed;
    const answer = fetch(`${app.url}/held?id=${id}`, { headers: { 'x-api-key': key }, signal: abort.signal });
    const feed = await feeds.opened(id);
    for (const tokens of [10, 20, 5]) feed.push(tokens);
    const events = new SseReader(await answer);
    expect(await events.next(3)).toEqual([
      { tokens: 10, total: 10 },
      { tokens: 20, total: 30 },
      { tokens: 5, total: 35 },
    ]);
    abort.abort();
    // the client gone, the server tears its stream down and settles what was counted
    await feed.closed;
    await settles.until(landed + 1);
    expect(feed.meter.count).toBe(35);
    expect(feed.meter.charged).toBe(35);
    expect(await remaining(key)).toBe(1_000 - 35);

    // gone before anything was counted: the work may have gone on, the reservation stands
    const early = randomUUID();
    const gone = new AbortController();
    const second = fetch(`${app.url}/held?id=${early}`, { headers: { 'x-api-key': key }, signal: gone.signal });
    const idle = await feeds.opened(early);
    gone.abort();
    await second.catch(() => undefined);
    await idle.closed;
    // no settle for it: the next request's settle landing shows its end has come and gone
    await settles.after(1, async () => read(await post('/json', { tokens: 100 }, key)));
    expect(idle.meter.charged).toBe(100);
    expect(await remaining(key)).toBe(1_000 - 35 - 100 - 100);
  });

  it('keeps the reservation of a request whose settle gives no usable cost, and warns of it once', async () => {
    const warned = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
    try {
      const heard = () =>
        new Promise<void>((resolve) => {
          const poll = () => (warned.mock.calls.length > 0 ? resolve() : setTimeout(poll, 5));
          poll();
        });
      const key = newKey();
      expect((await post('/json', { tokens: 'lots' }, key)).status).toBe(201);
      await heard();
      expect(await remaining(key)).toBe(900);
      expect(await post('/json', { tokens: -1 }, key).then((response) => response.status)).toBe(201);
      expect(await remaining(key)).toBe(800);
      expect(warned.mock.calls.map(([message]) => String(message))).toEqual([
        `The settle of policy 'tpm' returned "lots": the request keeps its reservation. Warned once per policy.`,
      ]);
    } finally {
      warned.mockRestore();
    }
  });

  it('charges a metered handler that throws what it added; one settling from its result keeps its reservation', async () => {
    const metered = newKey();
    const failed = await settles.after(1, async () => read(await post('/fail-metered', { tokens: 70 }, metered)));
    expect(failed.status).toBe(500);
    expect(await remaining(metered)).toBe(930);

    const fromResult = newKey();
    expect((await read(await post('/fail-result', {}, fromResult))).status).toBe(500);
    // no settle for it: the next request's settle landing shows the first's end has come and gone
    await settles.after(1, async () => read(await post('/json', { tokens: 100 }, fromResult)));
    expect(await remaining(fromResult)).toBe(1_000 - 100 - 100);
  });

  it("settles a long stream every second while it runs, seen in other requests' headers", async () => {
    const key = newKey();
    const id = randomUUID();
    const landed = settles.landed;
    const answer = fetch(`${app.url}/long?id=${id}`, { headers: { 'x-api-key': key } });
    const feed = await feeds.opened(id);
    feed.push(30);
    const events = new SseReader(await answer);
    await events.next();
    const peek = async () => read(await app.get('/long/peek', { 'x-api-key': key }));
    // reserved 100, nothing settled yet
    expect((await peek()).headers['x-ratelimit-remaining-tokens']).toBe('900');

    clock.advance('1s');
    await settles.until(landed + 1);
    expect(feed.meter.charged).toBe(30);
    expect((await peek()).headers['x-ratelimit-remaining-tokens']).toBe('970');

    feed.push(250);
    feed.push(20);
    await events.next(2);
    clock.advance('1s');
    await settles.until(landed + 2);
    expect(feed.meter.charged).toBe(300);
    expect((await peek()).headers['x-ratelimit-remaining-tokens']).toBe('700');

    // a second with nothing new counted settles nothing (its check runs in the microtasks after the move)
    clock.advance('1s');
    await new Promise((resolve) => setImmediate(resolve));
    // the stream's end settles the rest
    feed.push(1);
    feed.end();
    expect(await events.rest()).toEqual([{ tokens: 1, total: 301 }]);
    await settles.until(landed + 3);
    expect(feed.meter.charged).toBe(301);
    expect((await peek()).headers['x-ratelimit-remaining-tokens']).toBe('699');
    expect(await usage(key, TPH)).toMatchObject({ used: 301, limit: 1_000 });
    expect(settles.landed).toBe(landed + 3);
  });

  it('refuses while in debt, with a Retry-After of the time the rate takes to pay it back', async () => {
    const key = newKey();
    // 100 reserved, then 1,800 settled: 800 past empty
    await settles.after(1, async () => read(await post('/json', { tokens: 1_800 }, key)));
    const debt = 800;

    const refused = await read(await app.get('/peek', { 'x-api-key': key }));
    expect(refused.status).toBe(429);
    // a reservation of nothing waits for the debt to be paid
    expectAbout(Number(refused.headers['retry-after']), debt / TPM_RATE);
    // a reservation of 100, for the debt and then 100 more
    const json = await read(await post('/json', { tokens: 1 }, key));
    expect(json.status).toBe(429);
    expectAbout(Number(json.headers['retry-after']), (debt + TPM.cost) / TPM_RATE);
    expect(await usage(key)).toMatchObject({ remaining: 0, limit: 1_000 });

    // time pays it back: a second after the debt's time, a reservation of nothing passes, one of 100 not yet
    const paidBack = Math.ceil(debt / TPM_RATE) + 1;
    clock.advance(paidBack * 1000);
    expect((await read(await app.get('/peek', { 'x-api-key': key }))).status).toBe(200);
    const early = await read(await post('/json', { tokens: 1 }, key));
    expect(early.status).toBe(429);
    expectAbout(Number(early.headers['retry-after']), (debt + TPM.cost) / TPM_RATE - paidBack);

    // a settle takes the bucket no further past empty than maxDebt
    const deep = newKey();
    await settles.after(1, async () => read(await post('/json', { tokens: 50_000 }, deep)));
    const capped = await read(await app.get('/peek', { 'x-api-key': deep }));
    expect(capped.status).toBe(429);
    expectAbout(Number(capped.headers['retry-after']), TPM.maxDebt / TPM_RATE);
  });

  it('settles a StreamableFile by what its meter counted as the response read it', async () => {
    const key = newKey();
    const body = await settles.after(1, async () => {
      const response = await app.get('/file?n=12', { 'x-api-key': key });
      expect(response.status).toBe(200);
      return response.text();
    });
    expect(body).toHaveLength(12 * 8);
    expect(await remaining(key)).toBe(1_000 - 12 * 8);
  });

  it('settles a stream written through @Res() by what its meter counted', async () => {
    const key = newKey();
    const body = await settles.after(1, async () => (await app.get('/raw?n=9', { 'x-api-key': key })).text());
    expect(body).toBe('line.\n'.repeat(9));
    expect(await remaining(key)).toBe(1_000 - 9 * 6);
  });

  it('sends the per-dimension headers of a route limited in requests and in tokens', async () => {
    const key = newKey();
    const first = await settles.after(1, async () => read(await post('/chat', { tokens: 400 }, key)));
    expect(first.status).toBe(201);
    expect(first.headers).toMatchObject({
      'x-ratelimit-limit-requests': '20',
      'x-ratelimit-remaining-requests': '19',
      'x-ratelimit-limit-tokens': '1000',
      'x-ratelimit-remaining-tokens': '900',
      'ratelimit-policy': '"rpm";q=20;w=3600, "tpm";q=1000;w=3600;qu="tokens"',
    });
    expectAbout(resetSeconds(first.headers['x-ratelimit-reset-requests']), 1 / RPM_RATE);
    expectAbout(resetSeconds(first.headers['x-ratelimit-reset-tokens']), 100 / TPM_RATE);

    const second = await settles.after(1, async () => read(await post('/chat', { tokens: 10 }, key)));
    expect(second.headers).toMatchObject({
      'x-ratelimit-remaining-requests': '18',
      // 400 settled, then 100 reserved
      'x-ratelimit-remaining-tokens': '500',
    });
    expectAbout(resetSeconds(second.headers['x-ratelimit-reset-requests']), 2 / RPM_RATE);
    expectAbout(resetSeconds(second.headers['x-ratelimit-reset-tokens']), 500 / TPM_RATE);
    expect(await remaining(key)).toBe(1_000 - 410);
  });
});

/** Within a second of `seconds` (headers carry whole seconds). */
function expectAbout(actual: number, seconds: number): void {
  expect(Math.abs(actual - seconds)).toBeLessThanOrEqual(1);
}

describe.each(STORES)('RateLimiterService.reserve, %s store', (storeName: StoreName) => {
  const clock = new ManualClock(CASE_EPOCH);
  let redis: Redis | undefined;
  let store: MemoryStore | RedisStore;
  let app: Awaited<ReturnType<typeof startLimiter>>;
  /** 1,000 an hour in a token bucket (a test's second refills nothing), at most 1,000 past empty. */
  const JOBS = { name: 'jobs', limit: 1_000, window: '1h', maxDebt: 1_000 } satisfies RateLimitPolicy;
  const JOBS_RATE = 1_000 / 3600;

  async function startLimiter() {
    const moduleRef = await Test.createTestingModule({
      imports: [RateLimitModule.forRoot({ store, prefix: `rl-e2e-tb-reserve-${randomUUID()}:` })],
    }).compile();
    const nest = moduleRef.createNestApplication(new ExpressAdapter(), { logger: false });
    await nest.init();
    return { nest, limiter: nest.get(RateLimiterService) };
  }

  beforeAll(async () => {
    if (storeName === 'redis') redis = await connectTestRedis();
    store = redis === undefined ? new MemoryStore({ clock }) : new RedisStore({ client: redis, clock });
    app = await startLimiter();
  });
  afterAll(async () => {
    await app?.nest.close();
    await store?.close?.();
    await redis?.quit();
  });

  const used = async (identity: string) => (await app.limiter.usage(identity, JOBS)).used;

  it('settles up and down to the real cost', async () => {
    const up = `tenant:${randomUUID()}`;
    const job = await app.limiter.reserve(up, JOBS, 100);
    expect(job.allowed).toBe(true);
    expect(job.decision.remaining).toBe(900);
    expect(await used(up)).toBe(100);
    await job.settle(250);
    expect(await used(up)).toBe(250);

    const down = `tenant:${randomUUID()}`;
    const small = await app.limiter.reserve(down, JOBS, 100);
    await small.settle(40);
    expect(await used(down)).toBe(40);
  });

  it('cancel gives the whole reservation back', async () => {
    const identity = `tenant:${randomUUID()}`;
    const job = await app.limiter.reserve(identity, JOBS, 300);
    expect(await used(identity)).toBe(300);
    await job.cancel();
    expect(await used(identity)).toBe(0);
  });

  it('the first of settle and cancel acts; later calls do nothing', async () => {
    const settled = `tenant:${randomUUID()}`;
    const first = await app.limiter.reserve(settled, JOBS, 100);
    await Promise.all([first.settle(300), first.cancel(), first.settle(600)]);
    await first.cancel();
    expect(await used(settled)).toBe(300);

    const cancelled = `tenant:${randomUUID()}`;
    const second = await app.limiter.reserve(cancelled, JOBS, 100);
    await second.cancel();
    await second.settle(500);
    expect(await used(cancelled)).toBe(0);

    await expect(second.settle(-1)).rejects.toThrow(RangeError);
    await expect(second.settle(Number.NaN)).rejects.toThrow(RangeError);
  });

  it('refuses a reservation of nothing while in debt, admits it (charging nothing) otherwise', async () => {
    const identity = `tenant:${randomUUID()}`;
    const job = await app.limiter.reserve(identity, JOBS, 100);
    await job.settle(1_500);
    const debt = 500;
    const usage = await app.limiter.usage(identity, JOBS);
    expect(usage).toMatchObject({ remaining: 0, limit: 1_000 });

    const waiting = await app.limiter.reserve(identity, JOBS, 0);
    expect(waiting.allowed).toBe(false);
    expect(Math.abs(waiting.decision.retryAfter - debt / JOBS_RATE)).toBeLessThanOrEqual(1);
    // a refused reservation has nothing to settle or give back
    await waiting.settle(50);
    await waiting.cancel();
    const again = await app.limiter.reserve(identity, JOBS, 0);
    expect(again.decision.retryAfter).toBe(waiting.decision.retryAfter);

    const clear = `tenant:${randomUUID()}`;
    const free = await app.limiter.reserve(clear, JOBS, 0);
    expect(free.allowed).toBe(true);
    expect(free.decision.remaining).toBe(1_000);
    expect(await used(clear)).toBe(0);
    await free.settle(30);
    expect(await used(clear)).toBe(30);
  });

  // CONTRACT.md: "usage() reports `used` above `limit` (and `remaining` 0) until time pays it back"
  it('reports a settle past the limit as used above the limit until time pays it back', async () => {
    const identity = `tenant:${randomUUID()}`;
    const job = await app.limiter.reserve(identity, JOBS, 100);
    await job.settle(1_500);
    expect(await app.limiter.usage(identity, JOBS)).toMatchObject({ used: 1_500, remaining: 0, limit: 1_000 });
  });
});

describe('token budget start errors', () => {
  /** Starts `controller` under the module on Express: rejects as `app.init()` does. */
  async function start(controller: Type, options: Parameters<typeof RateLimitModule.forRoot>[0] = {}) {
    @Module({ imports: [RateLimitModule.forRoot(options)], controllers: [controller] })
    class AppModule {}
    const app = await startApp(AppModule, 'express');
    await app.close();
  }

  it("@RateLimitMeter('nope') on a route whose policy does not settle fails start, naming the handler", async () => {
    @Controller()
    class MeterController {
      @RateLimit({ name: 'plain', limit: 10, window: '1m' })
      @Post('chat')
      chat(@RateLimitMeter('nope') meter: RateLimitMeter) {
        return meter.count;
      }
    }
    await expect(start(MeterController)).rejects.toThrow(/MeterController\.chat.*'nope'/s);

    @Controller()
    class UnnamedController {
      @RateLimit({ name: 'plain', limit: 10, window: '1m' })
      @Post('chat')
      chat(@RateLimitMeter() meter: RateLimitMeter) {
        return meter.count;
      }
    }
    await expect(start(UnnamedController)).rejects.toThrow(/UnnamedController\.chat.*@RateLimitMeter\(\)/s);
  });

  it('a concurrency policy that settles fails start, naming the field', async () => {
    @Controller()
    class SlotController {
      @RateLimit({ name: 'slots', algorithm: 'concurrency', limit: 2, lease: '1m', settle: () => 1 })
      @Post('chat')
      chat() {
        return 'ok';
      }
    }
    await expect(start(SlotController)).rejects.toThrow(/SlotController\.chat.*"settle"/s);

    @Controller()
    class PlainController {
      @Get('ok')
      ok() {
        return 'ok';
      }
    }
    // a field that makes a policy settle (maxDebt) is refused as settling is
    await expect(
      start(PlainController, {
        policies: [{ name: 'slots', algorithm: 'concurrency', limit: 2, lease: '1m', maxDebt: 10 }],
      }),
    ).rejects.toThrow(/RateLimitModule policies\[0\]: "settle" does not apply to "concurrency"/);
  });
});
