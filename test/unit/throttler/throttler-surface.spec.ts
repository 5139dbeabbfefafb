/**
 * The surface of `nestjs-ratelimit/throttler` against the real @nestjs/throttler 6.x: every name
 * NT exports (and the ones its users deep-import from its `dist/`), the metadata its decorators
 * write (the same keys and values, so either package's decorators work with either guard while an
 * app switches file by file), the exception, the tokens and the time helpers.
 */
import 'reflect-metadata';
import { HttpException } from '@nestjs/common';
import { loadNt, loadOurs, type OursApi, type ThrottlerApi } from '../../support/throttler/implementations.js';

let nt: ThrottlerApi;
let ours: OursApi;

beforeAll(async () => {
  nt = await loadNt();
  ours = await loadOurs();
});

/** NT's `dist/throttler.constants` values, which its users and storages deep-import. */
const CONSTANTS = {
  THROTTLER_LIMIT: 'THROTTLER:LIMIT',
  THROTTLER_TTL: 'THROTTLER:TTL',
  THROTTLER_TRACKER: 'THROTTLER:TRACKER',
  THROTTLER_BLOCK_DURATION: 'THROTTLER:BLOCK_DURATION',
  THROTTLER_KEY_GENERATOR: 'THROTTLER:KEY_GENERATOR',
  THROTTLER_OPTIONS: 'THROTTLER:MODULE_OPTIONS',
  THROTTLER_SKIP: 'THROTTLER:SKIP',
};

/** Every metadata key and value on `target` (a class or a method), sorted by key. */
function metadataOf(target: object): Array<[string, unknown]> {
  return (Reflect.getMetadataKeys(target) as string[])
    .filter((key) => key.startsWith('THROTTLER:'))
    .sort()
    .map((key) => [key, Reflect.getMetadata(key, target)]);
}

describe('nestjs-ratelimit/throttler exports', () => {
  it("the names of the public surface (lib/throttler/README.md), of the same kinds as NT's", () => {
    const names = [
      'ThrottlerModule',
      'ThrottlerGuard',
      'Throttle',
      'SkipThrottle',
      'InjectThrottlerOptions',
      'InjectThrottlerStorage',
      'ThrottlerException',
      'throttlerMessage',
      'ThrottlerStorage',
      'ThrottlerStorageService',
      'getOptionsToken',
      'getStorageToken',
      'seconds',
      'minutes',
      'hours',
      'days',
      'weeks',
    ] as const;
    expect(Object.fromEntries(names.map((name) => [name, typeof ours[name]]))).toEqual(
      Object.fromEntries(names.map((name) => [name, typeof nt[name]])),
    );
    expect(typeof ours.RateLimitThrottlerStorage).toBe('function');
  });

  it("every runtime name NT 6.x's index exports", () => {
    // Jest's view of a CommonJS module adds these three
    const interop = new Set(['__esModule', 'default', 'module.exports']);
    expect(Object.keys(nt).filter((name) => !interop.has(name) && !(name in ours))).toEqual([]);
  });

  it("the THROTTLER_* constants NT's users deep-import, with NT's values; ThrottlerStorageRecord and ThrottlerStorageOptions", () => {
    const exported = ours as unknown as Record<string, unknown>;
    expect(Object.fromEntries(Object.keys(CONSTANTS).map((name) => [name, exported[name]]))).toEqual(CONSTANTS);
    expect(exported).toHaveProperty('ThrottlerStorageRecord');
    expect(exported).toHaveProperty('ThrottlerStorageOptions');
  });

  it('time helpers return milliseconds, as NT', () => {
    for (const helper of ['seconds', 'minutes', 'hours', 'days', 'weeks'] as const) {
      expect([1, 2.5, 7].map(ours[helper])).toEqual([1, 2.5, 7].map(nt[helper]));
    }
    expect(ours.seconds(5)).toBe(5_000);
    expect(ours.weeks(1)).toBe(604_800_000);
  });

  it('ThrottlerException: an HttpException, 429, its response the message (Nest makes the body of it)', () => {
    expect(ours.throttlerMessage).toBe('ThrottlerException: Too Many Requests');
    const shape = (api: ThrottlerApi, message?: string) => {
      const exception = new api.ThrottlerException(message);
      return {
        isHttpException: exception instanceof HttpException,
        status: exception.getStatus(),
        response: exception.getResponse(),
        message: exception.message,
      };
    };
    expect(shape(ours)).toEqual(shape(nt));
    expect(shape(ours, 'slow down')).toEqual(shape(nt, 'slow down'));
    expect(shape(ours)).toMatchObject({ status: 429, response: 'ThrottlerException: Too Many Requests' });
  });

  it("the tokens: getOptionsToken() is NT's options key; getStorageToken() is the ThrottlerStorage token", () => {
    expect(ours.getOptionsToken()).toBe(nt.getOptionsToken());
    expect(ours.getStorageToken()).toBe(ours.ThrottlerStorage);
  });

  it('ThrottlerStorageService is constructible without arguments and counts as NT', async () => {
    const theirs = new nt.ThrottlerStorageService();
    const mine = new ours.ThrottlerStorageService();
    const run = async (storage: InstanceType<ThrottlerApi['ThrottlerStorageService']>) => {
      const records = [];
      for (let i = 0; i < 4; i++) records.push(await storage.increment('k', 60_000, 2, 30_000, 'default'));
      // NT's timeToBlockExpire when not blocked is a meaningless negative number (its block ends at 0 ms)
      return records.map(({ timeToBlockExpire, ...record }) => ({
        ...record,
        timeToBlockExpire: record.isBlocked ? timeToBlockExpire : 'not blocked',
      }));
    };
    try {
      expect(await run(mine)).toEqual(await run(theirs));
    } finally {
      theirs.onApplicationShutdown();
      await (mine as { onApplicationShutdown?: () => unknown }).onApplicationShutdown?.();
    }
  });
});

describe("normalizeIp, NT 6.7's default tracker", () => {
  /** Inputs where the two notations of an address differ, and non-addresses NT hands back. */
  const EDGES = [
    '1.2.3.4',
    '::ffff:1.2.3.4',
    '::FFFF:0102:0304',
    '::1',
    '::',
    '::2',
    '0:0:0:0:0:0:0:1',
    'fe80::1%eth0',
    'fe80::1%' + 'z'.repeat(80),
    '1.2.3.4%eth0',
    '2001:db8::1',
    '2001:DB8:0:0:1::',
    '2001:0:0:1:0:0:0:1',
    '64:ff9b::1.2.3.4',
    'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff',
    '',
    'unknown',
    '1.2.3',
    '::ffff:999.1.1.1',
    'x'.repeat(100),
    undefined,
  ];
  const PREFIXES = [0, 1, 15, 16, 17, 32, 48, 56, 63, 64, 65, 96, 127, 128, 129, -5, 48.9, NaN, Infinity];

  it('writes what NT writes, for every prefix, on edges and on 2,000 random addresses', () => {
    let seed = 7;
    const next = () => (seed = (seed * 1103515245 + 12345) % 2147483648);
    // a third of the groups 0: runs of zeros of every length and place, for the shortest form
    const group = () => (next() % 3 === 0 ? 0 : (next() >> 8) & 0xffff);
    const random = Array.from({ length: 2_000 }, () => Array.from({ length: 8 }, () => group().toString(16)).join(':'));
    const rows = [...EDGES, ...random].flatMap((ip) => PREFIXES.map((prefix) => [ip, prefix] as const));
    const differing = rows.filter(
      ([ip, prefix]) => ours.normalizeIp(ip as string, prefix) !== nt.normalizeIp(ip as string, prefix),
    );
    expect(differing).toEqual([]);
    expect(ours.DEFAULT_IPV6_SUBNET_PREFIX).toBe(nt.DEFAULT_IPV6_SUBNET_PREFIX);
  });
});

describe('decorator metadata, as NT writes it', () => {
  it('@Throttle on a class and on a handler', () => {
    const options = {
      default: { limit: 3, ttl: 60_000 },
      short: { limit: 1, ttl: 1_000, blockDuration: 5_000, getTracker: () => 't', generateKey: () => 'k' },
    };
    const written = (api: ThrottlerApi) => {
      @api.Throttle(options)
      class Target {
        @api.Throttle({ default: { limit: () => 5 } })
        handler() {}
      }
      return { onClass: metadataOf(Target), onHandler: metadataOf(Target.prototype.handler) };
    };
    const mine = written(ours);
    const theirs = written(nt);
    expect(mine.onClass).toEqual(theirs.onClass);
    expect(mine.onHandler.map(([key, value]) => [key, typeof value])).toEqual(
      theirs.onHandler.map(([key, value]) => [key, typeof value]),
    );
  });

  it('@SkipThrottle() means { default: true }; with names, each its own key', () => {
    const written = (api: ThrottlerApi) => {
      @api.SkipThrottle()
      class Target {
        @api.SkipThrottle({ default: false, long: true })
        handler() {}
      }
      return { onClass: metadataOf(Target), onHandler: metadataOf(Target.prototype.handler) };
    };
    expect(written(ours)).toEqual(written(nt));
    expect(written(ours).onClass).toEqual([['THROTTLER:SKIPdefault', true]]);
  });
});
