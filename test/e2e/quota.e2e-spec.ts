/**
 * Quotas over HTTP (Express), on the memory store and on a real Redis, the store's clock a
 * `ManualClock` set to the instants that matter: a month's end in Berlin, the two days a year
 * Berlin's clocks change (23 and 25 hours), a month anchored on the 31st across February, and one
 * instant that is March in Berlin and still February in New York. The headers give each request's
 * own period (`w` its length, `t` the seconds to its end, a refusal's `Retry-After` its end),
 * `RateLimiterService.usage` agrees with them without charging, a refund gives back only to the
 * period it was taken from, and the memory store warns once at start that its quotas die with it.
 */
import { randomUUID } from 'node:crypto';
import { jest } from '@jest/globals';
import { Controller, Get, Logger, Module } from '@nestjs/common';
import {
  MemoryStore,
  RateLimit,
  RateLimiterService,
  RateLimitModule,
  type RateLimitPolicy,
  type RateLimitStore,
  RedisStore,
} from '../../lib/index.js';
import { digest } from '../../lib/keys/bucket-key.js';
import type { LimitedRequest } from '../../lib/policy/policy.types.js';
import { ManualClock } from '../../lib/testing/index.js';
import { read, startApp, type TestApp } from '../support/app.js';
import { ttlsUnder, useTestRedis } from '../support/redis/test-redis.js';

const DAY_S = 86_400;

/** Three a month, in Berlin's months. */
const MONTHLY: RateLimitPolicy = {
  name: 'monthly',
  algorithm: 'quota',
  limit: 3,
  period: 'month',
  timeZone: 'Europe/Berlin',
  key: 'api-key',
};

/**
 * Three a month in Berlin, from the anchor `x-anchor` gives as a number: one no period can start
 * from in Berlin (`-1e300`, `1e308`; `8.64e15`, the last instant a `Date` holds, is past it there).
 */
const FAR_ANCHORED: RateLimitPolicy = {
  name: 'far-anchored',
  algorithm: 'quota',
  limit: 3,
  period: 'month',
  timeZone: 'Europe/Berlin',
  key: 'api-key',
  anchor: (_context, request) => Number(request.headers['x-anchor']),
};

/** A customer's billing date: its months start on the 31st, 10:00 UTC (the last day of shorter months). */
const BILLED_FROM = '2026-01-31T10:00:00Z';

/**
 * The anchor `x-anchor` asks for: the billing date as a `Date`, as Unix ms or as a promise of a
 * `Date`; or an anchor gone wrong (it throws, rejects, or answers something that is no instant).
 */
function anchorOf(_context: unknown, request: LimitedRequest): Date | number | undefined | Promise<Date | undefined> {
  switch (request.headers['x-anchor']) {
    case 'date':
      return new Date(BILLED_FROM);
    case 'number':
      return Date.parse(BILLED_FROM);
    case 'promise':
      return new Promise((resolve) => setImmediate(() => resolve(new Date(BILLED_FROM))));
    case 'throws':
      throw new Error('billing service down');
    case 'rejects':
      return Promise.reject(new Error('billing service down'));
    case 'invalid-date':
      return new Date('the 31st');
    case 'string':
      return BILLED_FROM as unknown as Date;
    case 'nan':
      return NaN;
    case 'object':
      return { day: 31 } as unknown as Date;
    default:
      return undefined;
  }
}

@Controller('quota')
class QuotaController {
  @RateLimit(MONTHLY)
  @Get('monthly')
  monthly() {
    return { ok: true };
  }

  @RateLimit({ name: 'daily', algorithm: 'quota', limit: 3, period: 'day', timeZone: 'Europe/Berlin', key: 'api-key' })
  @Get('daily')
  daily() {
    return { ok: true };
  }

  @RateLimit({ name: 'plan', algorithm: 'quota', limit: 2, period: 'month', anchor: anchorOf, key: 'api-key' })
  @Get('plan')
  plan() {
    return { ok: true };
  }

  @RateLimit(FAR_ANCHORED)
  @Get('far-anchored')
  farAnchored() {
    return { ok: true };
  }

  @RateLimit({
    name: 'berlin',
    algorithm: 'quota',
    limit: 2,
    period: 'month',
    timeZone: 'Europe/Berlin',
    key: 'api-key',
  })
  @Get('berlin')
  berlin() {
    return { ok: true };
  }

  @RateLimit({
    name: 'new-york',
    algorithm: 'quota',
    limit: 2,
    period: 'month',
    timeZone: 'America/New_York',
    key: 'api-key',
  })
  @Get('new-york')
  newYork() {
    return { ok: true };
  }
}

/** A rate only: no quota on this app. */
@Controller('rate')
class RateController {
  @RateLimit({ name: 'rate', rps: 1, burst: 2, key: 'api-key' })
  @Get()
  rate() {
    return { ok: true };
  }
}

const redis = useTestRedis();

/** The stores under test, each on the clock the test sets. */
const STORES: Array<[string, (clock: ManualClock) => RateLimitStore]> = [
  ['MemoryStore', (clock) => new MemoryStore({ clock })],
  ['RedisStore', (clock) => new RedisStore({ client: redis(), clock })],
];

/** The quota warnings logged while `start` runs (Nest's `Logger`, as the module logs). */
async function quotaWarningsWhile<T>(start: () => Promise<T>): Promise<{ started: T; warnings: string[] }> {
  const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
  try {
    const started = await start();
    const warnings = warn.mock.calls.map(([message]) => String(message)).filter((message) => /quota/i.test(message));
    return { started, warnings };
  } finally {
    warn.mockRestore();
  }
}

describe.each(STORES)('quotas on Express, %s', (storeName, makeStore) => {
  const clock = new ManualClock(Date.UTC(2026, 0, 1));
  const prefix = `rl-quota-${randomUUID()}:`;
  let http: TestApp;
  let limiter: RateLimiterService;
  let warnings: string[];

  beforeAll(async () => {
    @Module({
      imports: [RateLimitModule.forRoot({ store: makeStore(clock), prefix })],
      controllers: [QuotaController],
    })
    class AppModule {}
    ({ started: http, warnings } = await quotaWarningsWhile(() => startApp(AppModule, 'express')));
    limiter = http.app.get(RateLimiterService);
  });
  afterAll(() => http.close());

  /** Sets the store's clock to an instant given in ISO 8601. */
  const at = (instant: string) => clock.set(Date.parse(instant));
  const get = async (path: string, apiKey: string, headers: Record<string, string> = {}) =>
    read(await http.get(`/quota/${path}`, { 'x-api-key': apiKey, ...headers }));
  /** Status, `Retry-After`, `RateLimit-Policy` and `RateLimit` of one request. */
  const request = async (path: string, apiKey: string, headers: Record<string, string> = {}) => {
    const { status, headers: got } = await get(path, apiKey, headers);
    return [status, got['retry-after'], got['ratelimit-policy'], got.ratelimit];
  };
  const statuses = async (path: string, apiKey: string, count: number, headers: Record<string, string> = {}) => {
    const got: number[] = [];
    for (let i = 0; i < count; i++) got.push((await get(path, apiKey, headers)).status);
    return got;
  };
  const newKey = () => `key-${randomUUID()}`;

  it(
    storeName === 'MemoryStore'
      ? 'warns once at start that its quotas do not outlive the process, naming them'
      : 'does not warn about quotas: Redis keeps them',
    () => {
      if (storeName === 'RedisStore') {
        expect(warnings).toEqual([]);
        return;
      }
      expect(warnings).toHaveLength(1);
      for (const name of ['monthly', 'daily', 'plan', 'far-anchored', 'berlin', 'new-york'])
        expect(warnings[0]).toContain(`"${name}"`);
    },
  );

  it("spends a month's quota at 23:59 on Jan 31 in Berlin, and has it back at midnight, Feb 1", async () => {
    const apiKey = newKey();
    at('2026-01-31T22:59:00Z'); // 23:59 in Berlin
    // January's 31 days as w; a minute to its end
    expect(await request('monthly', apiKey)).toEqual([200, undefined, '"monthly";q=3;w=2678400', '"monthly";r=2;t=60']);
    expect(await statuses('monthly', apiKey, 2)).toEqual([200, 200]);
    expect(await request('monthly', apiKey)).toEqual([429, '60', '"monthly";q=3;w=2678400', '"monthly";r=0;t=60']);

    // the last millisecond of January in Berlin: still January's quota (UTC's January has an hour left)
    at('2026-01-31T22:59:59.999Z');
    expect((await request('monthly', apiKey)).slice(0, 2)).toEqual([429, '1']);

    // Feb 1, 00:00 in Berlin: a new period, February's 28 days long
    at('2026-01-31T23:00:00Z');
    expect(await request('monthly', apiKey)).toEqual([
      200,
      undefined,
      `"monthly";q=3;w=${28 * DAY_S}`,
      `"monthly";r=2;t=${28 * DAY_S}`,
    ]);
  });

  it("counts a day as Berlin's clocks have it: 23 hours on 2026-03-29, 25 on 2026-10-25, each ending at local midnight", async () => {
    const spring = newKey();
    // Mar 29, 00:00 CET is 23:00 UTC the day before: a new day of 23 hours
    at('2026-03-28T22:59:59Z');
    expect(await request('daily', spring)).toEqual([200, undefined, `"daily";q=3;w=${DAY_S}`, '"daily";r=2;t=1']);
    at('2026-03-28T23:00:00Z');
    expect(await request('daily', spring)).toEqual([200, undefined, '"daily";q=3;w=82800', '"daily";r=2;t=82800']);
    // 10:00 CEST: 14 hours to midnight, which is 22:00 UTC
    at('2026-03-29T08:00:00Z');
    expect(await request('daily', spring)).toEqual([200, undefined, '"daily";q=3;w=82800', '"daily";r=1;t=50400']);
    expect(await statuses('daily', spring, 1)).toEqual([200]);
    expect(await request('daily', spring)).toEqual([429, '50400', '"daily";q=3;w=82800', '"daily";r=0;t=50400']);
    at('2026-03-29T21:59:59Z');
    expect((await request('daily', spring)).slice(0, 2)).toEqual([429, '1']);
    at('2026-03-29T22:00:00Z');
    expect(await request('daily', spring)).toEqual([
      200,
      undefined,
      `"daily";q=3;w=${DAY_S}`,
      `"daily";r=2;t=${DAY_S}`,
    ]);

    const autumn = newKey();
    // Oct 25, 00:00 CEST is 22:00 UTC the day before; the day ends at Oct 26, 00:00 CET, 23:00 UTC
    at('2026-10-24T22:00:00Z');
    expect(await request('daily', autumn)).toEqual([200, undefined, '"daily";q=3;w=90000', '"daily";r=2;t=90000']);
    expect(await statuses('daily', autumn, 3)).toEqual([200, 200, 429]);
    at('2026-10-25T12:00:00Z');
    expect(await request('daily', autumn)).toEqual([429, '39600', '"daily";q=3;w=90000', '"daily";r=0;t=39600']);
    at('2026-10-25T22:59:59Z');
    expect((await request('daily', autumn)).slice(0, 2)).toEqual([429, '1']);
    at('2026-10-25T23:00:00Z');
    expect(await request('daily', autumn)).toEqual([
      200,
      undefined,
      `"daily";q=3;w=${DAY_S}`,
      `"daily";r=2;t=${DAY_S}`,
    ]);
  });

  it.each(['date', 'number', 'promise'])(
    'counts months from an anchor on the 31st (%s): Jan 31 to Feb 28, then Feb 28 to Mar 31, 10:00 UTC',
    async (anchor) => {
      const apiKey = newKey();
      const as = { 'x-anchor': anchor };
      // before the anchor's hour on Jan 31: the period from Dec 31, 10:00
      at('2026-01-31T09:59:59Z');
      expect(await request('plan', apiKey, as)).toEqual([
        200,
        undefined,
        `"plan";q=2;w=${31 * DAY_S}`,
        '"plan";r=1;t=1',
      ]);

      // Feb 15 is in the period from Jan 31, 10:00 to Feb 28, 10:00: 28 days, 13 days 10 hours left
      at('2026-02-15T00:00:00Z');
      expect(await request('plan', apiKey, as)).toEqual([
        200,
        undefined,
        `"plan";q=2;w=${28 * DAY_S}`,
        '"plan";r=1;t=1159200',
      ]);
      expect(await request('plan', apiKey, as)).toEqual([
        200,
        undefined,
        `"plan";q=2;w=${28 * DAY_S}`,
        '"plan";r=0;t=1159200',
      ]);
      expect(await request('plan', apiKey, as)).toEqual([
        429,
        '1159200',
        `"plan";q=2;w=${28 * DAY_S}`,
        '"plan";r=0;t=1159200',
      ]);
      at('2026-02-28T09:59:59Z');
      expect((await request('plan', apiKey, as)).slice(0, 2)).toEqual([429, '1']);

      // Feb 28, 10:00 to Mar 31, 10:00: 31 days
      at('2026-02-28T10:00:00Z');
      expect(await request('plan', apiKey, as)).toEqual([
        200,
        undefined,
        `"plan";q=2;w=${31 * DAY_S}`,
        `"plan";r=1;t=${31 * DAY_S}`,
      ]);
      expect(await statuses('plan', apiKey, 2, as)).toEqual([200, 429]);
      at('2026-03-31T09:59:59Z');
      expect((await request('plan', apiKey, as)).slice(0, 2)).toEqual([429, '1']);

      // Mar 31, 10:00 to Apr 30, 10:00: 30 days
      at('2026-03-31T10:00:00Z');
      expect(await request('plan', apiKey, as)).toEqual([
        200,
        undefined,
        `"plan";q=2;w=${30 * DAY_S}`,
        `"plan";r=1;t=${30 * DAY_S}`,
      ]);
    },
  );

  it.each(['throws', 'rejects', 'invalid-date', 'string', 'nan', 'object', 'none'])(
    'counts calendar months (from the 1st) when the anchor %s, and never answers 500',
    async (anchor) => {
      const apiKey = newKey();
      const as = { 'x-anchor': anchor };
      // Feb 15 in February, Feb 1 to Mar 1 UTC: 14 days left (the anchor would have said 13 days 10 hours)
      at('2026-02-15T00:00:00Z');
      expect(await request('plan', apiKey, as)).toEqual([
        200,
        undefined,
        `"plan";q=2;w=${28 * DAY_S}`,
        `"plan";r=1;t=${14 * DAY_S}`,
      ]);
      expect(await statuses('plan', apiKey, 2, as)).toEqual([200, 429]);
      at('2026-02-28T10:00:00Z');
      expect((await request('plan', apiKey, as)).slice(0, 2)).toEqual([429, String(14 * 3600)]);
      at('2026-03-01T00:00:00Z');
      expect(await request('plan', apiKey, as)).toEqual([
        200,
        undefined,
        `"plan";q=2;w=${31 * DAY_S}`,
        `"plan";r=1;t=${31 * DAY_S}`,
      ]);
    },
  );

  it.each(['-1e300', '1e308', '8.64e15'])(
    "counts Berlin's calendar months when the anchor is %s, from which no period starts there: 3 a month, headers without NaN, and usage() agrees",
    async (anchor) => {
      const apiKey = newKey();
      const as = { 'x-anchor': anchor };
      // February in Berlin: Jan 31, 23:00 to Feb 28, 23:00 UTC, 13 days 23 hours of it left
      at('2026-02-15T00:00:00Z');
      const policy = `"far-anchored";q=3;w=${28 * DAY_S}`;
      const left = 13 * DAY_S + 23 * 3600;
      expect(await request('far-anchored', apiKey, as)).toEqual([
        200,
        undefined,
        policy,
        `"far-anchored";r=2;t=${left}`,
      ]);
      expect(await statuses('far-anchored', apiKey, 2, as)).toEqual([200, 200]);
      expect(await request('far-anchored', apiKey, as)).toEqual([
        429,
        String(left),
        policy,
        `"far-anchored";r=0;t=${left}`,
      ]);
      expect(await statuses('far-anchored', apiKey, 1, as)).toEqual([429]);
      expect(await limiter.usage(`api-key:${apiKey}`, { ...FAR_ANCHORED, anchor: () => Number(anchor) })).toEqual({
        used: 3,
        limit: 3,
        remaining: 0,
        resetsAt: new Date('2026-02-28T23:00:00Z'),
        source: 'store',
      });
    },
  );

  it('at 00:30 on Mar 1 in Berlin, 18:30 on Feb 28 in New York: the Berlin quota is back, the New York one is not', async () => {
    const apiKey = newKey();
    at('2026-02-28T12:00:00Z');
    // February is 28 days in both; Berlin's ends at 23:00 UTC, New York's at 05:00 UTC on Mar 1
    expect(await request('berlin', apiKey)).toEqual([
      200,
      undefined,
      `"berlin";q=2;w=${28 * DAY_S}`,
      '"berlin";r=1;t=39600',
    ]);
    expect(await request('new-york', apiKey)).toEqual([
      200,
      undefined,
      `"new-york";q=2;w=${28 * DAY_S}`,
      '"new-york";r=1;t=61200',
    ]);
    expect(await statuses('berlin', apiKey, 2)).toEqual([200, 429]);
    expect(await statuses('new-york', apiKey, 2)).toEqual([200, 429]);

    at('2026-02-28T23:30:00Z');
    // Berlin's March: 31 days less the hour its clocks skip on Mar 29
    expect(await request('berlin', apiKey)).toEqual([
      200,
      undefined,
      `"berlin";q=2;w=${31 * DAY_S - 3600}`,
      `"berlin";r=1;t=${31 * DAY_S - 3600 - 1800}`,
    ]);
    // New York's February has five and a half hours to go
    expect(await request('new-york', apiKey)).toEqual([
      429,
      '19800',
      `"new-york";q=2;w=${28 * DAY_S}`,
      '"new-york";r=0;t=19800',
    ]);
    at('2026-03-01T05:00:00Z');
    expect(await statuses('new-york', apiKey, 3)).toEqual([200, 200, 429]);
  });

  it('answers usage() as the headers do, without charging', async () => {
    const apiKey = newKey();
    const identity = `api-key:${apiKey}`;
    at('2026-01-10T12:00:00Z');
    const fresh = await limiter.usage(identity, MONTHLY);
    expect(fresh).toEqual({
      used: 0,
      limit: 3,
      remaining: 3,
      resetsAt: new Date('2026-01-31T23:00:00Z'),
      source: 'store',
    });

    const [, , , rateLimit] = await request('monthly', apiKey);
    // 21 days 11 hours to Feb 1, 00:00 in Berlin
    expect(rateLimit).toBe('"monthly";r=2;t=1854000');
    const used = await limiter.usage(identity, MONTHLY);
    expect(used).toEqual({
      used: 1,
      limit: 3,
      remaining: 2,
      resetsAt: new Date('2026-01-31T23:00:00Z'),
      source: 'store',
    });
    expect(used.resetsAt.getTime() - clock.now()).toBe(1_854_000 * 1000);
    // asked again: the same answer, and the next request still finds 2 left
    expect(await limiter.usage(identity, MONTHLY)).toEqual(used);
    expect((await request('monthly', apiKey))[3]).toBe('"monthly";r=1;t=1854000');
    expect((await request('monthly', apiKey))[3]).toBe('"monthly";r=0;t=1854000');
    expect(await limiter.usage(identity, MONTHLY)).toEqual({ ...used, used: 3, remaining: 0 });

    // a new period: all of it back, to the end of February in Berlin
    at('2026-01-31T23:00:00Z');
    expect(await limiter.usage(identity, MONTHLY)).toEqual({
      used: 0,
      limit: 3,
      remaining: 3,
      resetsAt: new Date('2026-02-28T23:00:00Z'),
      source: 'store',
    });
  });

  it.each([
    ['a Date', () => new Date(BILLED_FROM)],
    ['a promise', () => Promise.resolve(new Date(BILLED_FROM))],
  ])(
    "answers usage() of an anchored quota given in code, its anchor answering %s, as the route's headers",
    async (_, anchor) => {
      const apiKey = newKey();
      const plan: RateLimitPolicy = {
        name: 'plan',
        algorithm: 'quota',
        limit: 2,
        period: 'month',
        anchor,
        key: 'api-key',
      };
      at('2026-02-15T00:00:00Z');
      expect((await request('plan', apiKey, { 'x-anchor': 'date' }))[3]).toBe('"plan";r=1;t=1159200');
      const used = await limiter.usage(`api-key:${apiKey}`, plan);
      expect(used).toEqual({
        used: 1,
        limit: 2,
        remaining: 1,
        resetsAt: new Date('2026-02-28T10:00:00Z'),
        source: 'store',
      });
      expect(used.resetsAt.getTime() - clock.now()).toBe(1_159_200 * 1000);
      expect(await limiter.usage(`api-key:${apiKey}`, plan)).toEqual(used);
    },
  );

  it('gives a refund back to the period it was taken from, and never to the next one', async () => {
    const apiKey = newKey();
    const identity = `api-key:${apiKey}`;
    const usedNow = async () => (await limiter.usage(identity, MONTHLY)).used;

    // February in Berlin (28 days): a refund in the period gives back, once
    at('2026-02-10T12:00:00Z');
    const [refunded] = await limiter.consume(identity, MONTHLY);
    expect(await usedNow()).toBe(1);
    await limiter.refund([refunded]);
    expect(await usedNow()).toBe(0);
    await limiter.refund([refunded]);
    expect(await usedNow()).toBe(0);

    const [early] = await limiter.consume(identity, MONTHLY);
    const [late] = await limiter.consume(identity, MONTHLY);
    expect(await usedNow()).toBe(2);

    // March: two taken; February's refunds give nothing to it, early in the month or late
    at('2026-03-02T12:00:00Z');
    expect(await statuses('monthly', apiKey, 2)).toEqual([200, 200]);
    await limiter.refund([early]);
    expect(await usedNow()).toBe(2);
    if (storeName === 'RedisStore') {
      // the key still lives to March's end in Berlin (its TTL counts on Redis's clock from the call)
      const ttls = [...(await ttlsUnder(redis(), prefix))].filter(([key]) => key.includes(digest(identity)));
      const toEnd = Date.parse('2026-03-31T22:00:00Z') - clock.now();
      expect(ttls).toHaveLength(1);
      expect(ttls[0][1] <= toEnd && ttls[0][1] > toEnd - 60_000).toBe(true);
    }
    // past Mar 29, 00:00: February's start plus two of its lengths (28 days), where March is not
    at('2026-03-30T12:00:00Z');
    expect(await usedNow()).toBe(2);
    await limiter.refund([late]);
    expect(await usedNow()).toBe(2);
    expect(await statuses('monthly', apiKey, 2)).toEqual([200, 429]);
  });
});

describe('a quota-free app on the memory store', () => {
  it('logs no quota warning at start', async () => {
    @Module({
      imports: [RateLimitModule.forRoot({ store: new MemoryStore({ clock: new ManualClock(0) }) })],
      controllers: [RateController],
    })
    class AppModule {}
    const { started, warnings } = await quotaWarningsWhile(() => startApp(AppModule, 'express'));
    try {
      expect(warnings).toEqual([]);
      expect((await started.get('/rate')).status).toBe(200);
    } finally {
      await started.close();
    }
  });
});
