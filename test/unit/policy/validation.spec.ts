import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jest } from '@jest/globals';
import { Controller, Get, Injectable, Logger, type ModuleMetadata, type Type } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { ExecutionContextHost } from '@nestjs/core/helpers/execution-context-host.js';
import { Resolver, Subscription } from '@nestjs/graphql';
import { Test } from '@nestjs/testing';
import {
  MemoryStore,
  RateLimit,
  RateLimitMeter,
  RateLimitModule,
  type RateLimitModuleOptions,
  type RateLimitPolicy,
  RateLimiterService,
  RedisStore,
  SkipRateLimit,
} from '../../../lib/index.js';
import { controllerWith } from '../../support/bad-controller.js';
import { RoutePolicies } from '../../../lib/routes/route-policies.js';
import { resolveOptions } from '../../../lib/rate-limit-options.js';
import { StoreOwner } from '../../../lib/stores/store-owner.js';
import { parseCommandLine } from '../../../lib/simulator/simulate-args.js';
import { ManualClock } from '../../../lib/testing/index.js';
import { Meter } from '../../../lib/limiter/rate-limit-meter.js';
import { StandaloneLimiter } from '../../support/standalone-limiter.js';
import { RateLimitThrottlerStorage, ThrottlerGuard, ThrottlerStorageService } from '../../../lib/throttler/index.js';
import { ALGORITHMS } from '../../../lib/algorithms/algorithm.types.js';
import { ALGORITHM_DESCRIPTORS } from '../../../lib/algorithms/registry.js';
import { optionNotFor } from '../../../lib/rate-limit.messages.js';

/**
 * Every validation message, exactly: one row per bad input, with the whole message it must
 * produce. Policies go through the real decorators and module start, so the controller and
 * handler in the message are the ones Nest reports. The last test reads the sources and checks
 * that every message text there has a row here.
 */

const LIB = fileURLToPath(new URL('../../../lib/', import.meta.url));

/** What an HTTP header name may hold, as the messages say it. */
const TOKEN_CHARS = "letters, digits and !#$%&'*+-.^_`|~ only";
const KEY_SOURCES = `must be 'ip', 'user', 'api-key', 'header:<name>', a function, or a non-empty list of those`;
const WINDOW = `must be a positive number of seconds or a duration such as '10s', '1m', '1h', '1d'`;
const LEASE = `must be a duration of at least 1 ms: seconds, or a string such as '30s', '5m', '1h'`;
const BLOCK_FOR = `must be a duration of at least 1 ms: seconds, or a string such as '30s', '15m', '1h', '1d'`;
/** What a plain `blockFor` (not an object) that is not a duration is told. */
const BLOCK_FOR_PLAIN = `${BLOCK_FOR}, or { duration, then: 'keep' | 'reset' }`;
/** What a `limit` or `burst` past 2^53 - 1 is told. */
const COUNT_AT_MOST =
  'must be at most 9007199254740991 (Number.MAX_SAFE_INTEGER): above it a double cannot count by whole tokens';
const COST = `must be a positive number, 'header:<name>', 'query:<name>' or a function (0 too on a policy that settles)`;
const NAME = 'must be a string of 1 to 64 visible ASCII characters, without spaces or braces';
const TIMEOUT = 'must be a positive number of milliseconds, at most 2147483647 (the longest a timer can wait)';
const OPTIONS_OBJECT =
  'Invalid RateLimitModule options: they must be an object such as { policies: [{ rps: 10, burst: 20 }] } (does the forRootAsync factory return them?), got';

/** Message prefixes: where the failure is. */
const ON_HANDLER = 'Invalid @RateLimit policy on BadController.find:';
const ON_CLASS = 'Invalid @RateLimit policy on BadController (class):';
const ON_MODULE = 'Invalid @RateLimit policy on RateLimitModule policies[0]:';
const OPTION = 'Invalid RateLimitModule option';
const ASYNC = 'Invalid RateLimitModule.forRootAsync options:';

/** The message `act` throws or rejects with; the row fails when it does neither. */
/** A decision that admitted a request, for a meter. */
const ADMITTED = {
  allowed: true,
  policy: 'tpm',
  limit: 100,
  remaining: 99,
  resetAfter: 1,
  fullAfter: 1,
  retryAfter: 0,
  delay: 0,
};

async function thrown(act: () => unknown): Promise<string> {
  try {
    await act();
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error('nothing was thrown');
}

/** What is logged as a warning while `act` runs. */
async function warned(act: () => Promise<unknown>): Promise<string> {
  const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
  try {
    await act();
    return warn.mock.calls.map(([message]) => String(message)).join('\n');
  } finally {
    warn.mockRestore();
  }
}

/** Starts an app context (every route's policies are read in `init()`), and closes it. */
async function start(imports: ModuleMetadata['imports'], controllers: Type[] = []): Promise<void> {
  const moduleRef = await Test.createTestingModule({ imports, controllers }).compile();
  await moduleRef.init();
  await moduleRef.close();
}

/** A controller with a handler policy named 'per-ip' that skips `names`, on the handler or the class. */
function skipping(names: unknown[], on: 'handler' | 'class'): Type {
  const skip = SkipRateLimit(...(names as string[]));
  if (on === 'class') {
    @skip
    @Controller('skip')
    class SkipController {
      @RateLimit({ name: 'per-ip', rps: 1 })
      @Get()
      find() {
        return [];
      }
    }
    return SkipController;
  }
  @Controller('skip')
  class SkipController {
    @skip
    @RateLimit({ name: 'per-ip', rps: 1 })
    @Get()
    find() {
      return [];
    }
  }
  return SkipController;
}

/** A controller whose handler `chat`, under `policies`, takes the meter of `meter` (`undefined`: its only settling policy). */
function metering(policies: RateLimitPolicy[], meter: string | undefined): Type {
  @Controller('chat')
  class ChatController {
    @RateLimit(policies)
    @Get()
    chat(@RateLimitMeter(meter) counted: RateLimitMeter) {
      return counted.count;
    }
  }
  return ChatController;
}

/** A GraphQL resolver whose subscription `events` carries `policy`. */
function subscriptionWith(p: RateLimitPolicy): Type {
  @Resolver()
  class EventsResolver {
    @RateLimit(p)
    @Subscription(() => String)
    events() {
      return undefined;
    }
  }
  return EventsResolver;
}

/** Starts an app context with `provider` beside the module (a resolver's policies are read at start too), and closes it. */
async function startWith(provider: Type): Promise<void> {
  const moduleRef = await Test.createTestingModule({
    imports: [RateLimitModule.forRoot()],
    providers: [provider],
  }).compile();
  await moduleRef.init();
  await moduleRef.close();
}

/** The message a policy makes at start, on a handler (or on the class). */
const policy =
  (p: unknown, on: 'handler' | 'class' = 'handler') =>
  () =>
    thrown(() => start([RateLimitModule.forRoot()], [controllerWith(p, on)]));
/** The message a module option (or set of options) makes. */
const options = (o: unknown) => () => thrown(() => resolveOptions(o as RateLimitModuleOptions));
/** The message a store's options make. */
const store = (make: () => unknown) => () => thrown(make);

/** The message a `RateLimiterService` call makes (on a memory store). */
const limiter = (call: (service: RateLimiterService) => Promise<unknown>) => async () => {
  const service = new StandaloneLimiter(resolveOptions({}), new MemoryStore());
  try {
    return await thrown(() => call(service));
  } finally {
    await service.onApplicationShutdown();
  }
};
/** The message `setScale(name, factor)` makes on a service with the module's `policies`. */
const scaling = (options: RateLimitModuleOptions, name: string, factor: number) => async () => {
  const service = new StandaloneLimiter(resolveOptions(options), new MemoryStore());
  try {
    return await thrown(() => service.setScale(name, factor));
  } finally {
    await service.onApplicationShutdown();
  }
};
/** The message `setScale(name, factor)` makes once the app has started with `policy` on a handler. */
const scalingRoute = (policy: unknown, name: string, factor: number) => async () => {
  const moduleRef = await Test.createTestingModule({
    imports: [RateLimitModule.forRoot()],
    controllers: [controllerWith(policy)],
  }).compile();
  await moduleRef.init();
  try {
    return await thrown(() => moduleRef.get(RateLimiterService).setScale(name, factor));
  } finally {
    await moduleRef.close();
  }
};
/** The message a `MemoryStore` call makes. */
const memory = (call: (store: MemoryStore) => Promise<unknown>) => () => thrown(() => call(new MemoryStore()));
const TB = { algorithm: 'token_bucket', rps: 1, burst: 5 } as const;
/** A tiered policy that holds, for rows to spoil one field of. */
const TIERED = {
  tiers: { free: { rps: 1, burst: 2 }, pro: { rps: 5, burst: 10 } },
  tier: 'user:plan',
  defaultTier: 'free',
} as const;
const TIERS = 'must be an object of limits by tier name, such as { free: { rps: 10, burst: 20 } }';
const CALL_COST = 'must be a finite number > 0 (the tokens the request takes)';

/** Just enough of an ioredis client to pass for one. */
const fakeClient = { defineCommand: () => undefined };

@Injectable()
class RateLimitConfig {
  createRateLimitOptions(): RateLimitModuleOptions {
    return {};
  }
}

type Row = [what: string, produce: () => Promise<string>, message: string];

/** The message the simulator's command line `simulate ...args` fails with. */
const simulate =
  (...args: string[]): (() => Promise<string>) =>
  () =>
    thrown(() => parseCommandLine(['simulate', ...args]));
const SIMULATE = 'Invalid nestjs-ratelimit simulate argument';
const RATE = ['--rate', '60'];
const CONCURRENT = '{"algorithm":"concurrency","limit":2,"lease":"5m"}';

function simulatorRows(): Row[] {
  return [
    [
      'simulator: no command',
      () => thrown(() => parseCommandLine(['simulte'])),
      `${SIMULATE} <command>: must be 'simulate', got "simulte"`,
    ],
    [
      'simulator: no policy',
      simulate(...RATE),
      `${SIMULATE} --policy: or --compare is needed: a policy as JSON, or algorithms to compare`,
    ],
    [
      'simulator: a policy not JSON',
      simulate('--policy', '{rps:10}', ...RATE),
      `${SIMULATE} --policy: must be a policy as JSON, such as '{"rps":10,"burst":50}', got "{rps:10}"`,
    ],
    [
      'simulator: a bad policy',
      simulate('--policy', '{"rps":0}', ...RATE),
      'Invalid @RateLimit policy on --policy: "rps" must be a positive number (tokens per second), got 0',
    ],
    [
      'simulator: a bad second policy',
      simulate('--policy', '{"rps":1}', '--policy', '{"rps":1,"window":"1m"}', ...RATE),
      'Invalid @RateLimit policy on --policy [1]: both "rps" and "window" given; say it as rps + burst or as limit + window',
    ],
    [
      'simulator: two policies of one name',
      simulate('--policy', '{"name":"a","rps":1}', '--policy', '{"name":"a","rps":2}', ...RATE),
      'Invalid @RateLimit policy on --policy: two policies are named "a"; give each policy its own "name"',
    ],
    [
      'simulator: --rps with --policy',
      simulate('--policy', '{"rps":1}', '--rps', '5', ...RATE),
      `${SIMULATE} --rps: goes with --compare: a --policy gives its own numbers, got "5"`,
    ],
    [
      'simulator: --compare with --policy',
      simulate('--policy', '{"rps":1}', '--compare', 'all', ...RATE),
      `${SIMULATE} --compare: cannot go with --policy: give policies, or algorithms to compare with one set of --rps/--burst or --limit/--window, got "all"`,
    ],
    [
      'simulator: --compare naming none',
      simulate('--compare', ' , ', '--rps', '1', ...RATE),
      `${SIMULATE} --compare: must name algorithms: a comma-separated list such as 'token_bucket,gcra', or 'all', got " , "`,
    ],
    [
      'simulator: --compare an unknown algorithm',
      simulate('--compare', 'token_bucket,leaky', '--rps', '1', ...RATE),
      `Invalid @RateLimit policy on --compare leaky: "algorithm" must be one of 'token_bucket', 'leaky_bucket', 'fixed_window', 'sliding_window_log', 'sliding_window_counter', 'gcra', 'concurrency', 'quota', got "leaky"`,
    ],
    [
      'simulator: --compare with --rps not a number',
      simulate('--compare', 'gcra', '--rps', 'ten', ...RATE),
      'Invalid @RateLimit policy on --compare gcra: "rps" must be a positive number (tokens per second), got "ten"',
    ],
    [
      'simulator: --compare with --rps and --window',
      simulate('--compare', 'gcra', '--rps', '1', '--window', '1m', ...RATE),
      'Invalid @RateLimit policy on --compare gcra: both "rps" and "window" given; say it as rps + burst or as limit + window',
    ],
    [
      'simulator: no traffic',
      simulate('--policy', '{"rps":1}'),
      `${SIMULATE} --rate: or --trace is needed: evenly spaced requests, or a trace to replay`,
    ],
    [
      'simulator: --trace with --rate',
      simulate('--policy', '{"rps":1}', '--trace', 'a.log', ...RATE),
      `${SIMULATE} --trace: cannot go with --rate: replay a trace, or evenly spaced requests, got "a.log"`,
    ],
    [
      'simulator: --duration with --trace',
      simulate('--policy', '{"rps":1}', '--trace', 'a.log', '--duration', '1m'),
      `${SIMULATE} --duration: goes with --rate: a trace lasts as long as it lasts, got "1m"`,
    ],
    [
      'simulator: --rate 0',
      simulate('--policy', '{"rps":1}', '--rate', '0'),
      `${SIMULATE} --rate: must be a positive number of requests per second, got "0"`,
    ],
    [
      'simulator: --rate not a number',
      simulate('--policy', '{"rps":1}', '--rate', 'fast'),
      `${SIMULATE} --rate: must be a positive number of requests per second, got "fast"`,
    ],
    [
      'simulator: --duration unparsable',
      simulate('--policy', '{"rps":1}', ...RATE, '--duration', '10 minutes'),
      `${SIMULATE} --duration: must be a positive number of seconds or a duration such as '10s', '1m', '1h', got "10 minutes"`,
    ],
    [
      'simulator: --duration over a day',
      simulate('--policy', '{"rps":1}', '--rate', '0.001', '--duration', '2d'),
      `${SIMULATE} --duration: must be at most 1d (86400 s); replay a --trace for longer traffic, got "2d"`,
    ],
    [
      'simulator: --rate x --duration over the bound',
      simulate('--policy', '{"rps":1}', '--rate', '200', '--duration', '1d'),
      `${SIMULATE} --rate: times --duration 1d makes 17,280,000 requests; a run simulates at most 10,000,000: lower --rate or --duration, got "200"`,
    ],
    [
      'simulator: --top 0',
      simulate('--policy', '{"rps":1}', ...RATE, '--top', '0'),
      `${SIMULATE} --top: must be a whole number >= 1, got "0"`,
    ],
    [
      'simulator: a concurrency policy without --hold',
      simulate('--policy', CONCURRENT, ...RATE),
      `${SIMULATE} --hold: is needed with a "concurrency" policy: how long each admitted request holds its slot, such as '2s' (a slot comes back when its request ends)`,
    ],
    [
      'simulator: --hold without a concurrency policy',
      simulate('--policy', '{"rps":1}', ...RATE, '--hold', '2s'),
      `${SIMULATE} --hold: goes with a "concurrency" policy: only a slot in flight is held, got "2s"`,
    ],
    [
      'simulator: --hold not a duration',
      simulate('--policy', CONCURRENT, ...RATE, '--hold', 'a while'),
      `${SIMULATE} --hold: must be a duration of at least 1 ms: seconds, or a string such as '500ms', '2s', '1m', got "a while"`,
    ],
    [
      'simulator: an unknown flag',
      simulate('--policy', '{"rps":1}', ...RATE, '--svgg', 'x'),
      `Unknown option '--svgg' (nestjs-ratelimit simulate --help lists the options)`,
    ],
  ];
}

const ROWS: Row[] = [
  // policies, through @RateLimit and module start
  [
    'a number for a policy',
    policy(5),
    `${ON_HANDLER} a policy must be an object such as { rps: 10, burst: 20 }, got 5`,
  ],
  [
    '@RateLimit([])',
    policy([]),
    `${ON_HANDLER} @RateLimit([]) lists no policy; give at least one (@SkipRateLimit() exempts a route)`,
  ],
  [
    'a misspelt field',
    policy({ rps: 1, brust: 5 }),
    `${ON_HANDLER} "brust" is not a policy field (the fields are algorithm, rps, tokensPerSecond, burst, limit, window, anchor, lease, period, timeZone, cost, defaultCost, key, scope, name, tiers, tier, defaultTier, blockFor, count, skipIf, adaptive, settle, maxDebt, settleEvery, unit, shares), got 5`,
  ],
  [
    "anchor 'first'",
    policy({ algorithm: 'fixed_window', limit: 5, window: '1m', anchor: 'first' }),
    `${ON_HANDLER} "anchor" must be 'clock' (windows on the clock's grid) or 'first-request' (a window starts at a client's first request), got "first"`,
  ],
  [
    'anchor on a token bucket',
    policy({ limit: 5, window: '1m', anchor: 'first-request' }),
    `${ON_HANDLER} "anchor" applies to 'fixed_window' only, and the algorithm is 'token_bucket', got "first-request"`,
  ],
  [
    "anchor 'clock' on a sliding window counter, on the class",
    policy({ algorithm: 'sliding_window_counter', limit: 5, window: '1m', anchor: 'clock' }, 'class'),
    `${ON_CLASS} "anchor" applies to 'fixed_window' only, and the algorithm is 'sliding_window_counter', got "clock"`,
  ],
  [
    'anchor beside tiers',
    policy({ ...TIERED, anchor: 'first-request' }),
    `${ON_HANDLER} "anchor" is given beside "tiers"; give the limits in each tier`,
  ],
  [
    "a tier's anchor on a gcra",
    policy({ ...TIERED, tiers: { free: { rps: 1 }, pro: { algorithm: 'gcra', rps: 5, anchor: 'first-request' } } }),
    `${ON_HANDLER} "tiers.pro.anchor" applies to 'fixed_window' only, and the algorithm is 'gcra', got "first-request"`,
  ],
  // concurrency and quota: `limit` with a `lease` or a `period`
  [
    'concurrency without a lease',
    policy({ algorithm: 'concurrency', limit: 2 }),
    `${ON_HANDLER} "concurrency" needs a "lease", the longest a request holds its slot, such as '5m' (a slot held longer is reclaimed)`,
  ],
  [
    'concurrency with a lease not a duration',
    policy({ algorithm: 'concurrency', limit: 2, lease: 'soon' }),
    `${ON_HANDLER} "lease" ${LEASE}, got "soon"`,
  ],
  [
    'concurrency with a lease of 0',
    policy({ algorithm: 'concurrency', limit: 2, lease: 0 }),
    `${ON_HANDLER} "lease" ${LEASE}, got 0`,
  ],
  [
    'concurrency with a lease over a year',
    policy({ algorithm: 'concurrency', limit: 2, lease: '366d' }),
    `${ON_HANDLER} "lease" must be at most 365 days, got "366d"`,
  ],
  [
    'a lease on a token bucket',
    policy({ limit: 5, window: '1m', lease: '5m' }),
    `${ON_HANDLER} "lease" applies to 'concurrency' only, and the algorithm is 'token_bucket', got "5m"`,
  ],
  [
    'a lease on a quota',
    policy({ algorithm: 'quota', limit: 100, period: 'month', lease: '5m' }),
    `${ON_HANDLER} "lease" applies to 'concurrency' only, and the algorithm is 'quota', got "5m"`,
  ],
  [
    'a period on concurrency',
    policy({ algorithm: 'concurrency', limit: 2, lease: '5m', period: 'day' }),
    `${ON_HANDLER} "period" applies to 'quota' only, and the algorithm is 'concurrency', got "day"`,
  ],
  [
    'a time zone on a fixed window',
    policy({ algorithm: 'fixed_window', limit: 5, window: '1d', timeZone: 'Europe/Berlin' }),
    `${ON_HANDLER} "timeZone" applies to 'quota' only, and the algorithm is 'fixed_window', got "Europe/Berlin"`,
  ],
  [
    'a quota without a period',
    policy({ algorithm: 'quota', limit: 100 }),
    `${ON_HANDLER} "quota" needs a "period": 'day', 'week', 'month' or 'year'`,
  ],
  [
    "a quota's period 'fortnight'",
    policy({ algorithm: 'quota', limit: 100, period: 'fortnight' }),
    `${ON_HANDLER} "period" must be 'day', 'week', 'month' or 'year', got "fortnight"`,
  ],
  [
    "a quota's time zone 'Mars/Olympus'",
    policy({ algorithm: 'quota', limit: 100, period: 'month', timeZone: 'Mars/Olympus' }),
    `${ON_HANDLER} "timeZone" must be an IANA time zone such as 'UTC', 'Europe/Berlin' or 'America/New_York', got "Mars/Olympus"`,
  ],
  [
    'rps on concurrency',
    policy({ algorithm: 'concurrency', rps: 1, limit: 2, lease: '5m' }),
    `${ON_HANDLER} "rps" does not apply to "concurrency": say it as "limit" requests in flight, each for at most "lease", such as { limit: 2, lease: '5m' }`,
  ],
  [
    'burst on concurrency',
    policy({ algorithm: 'concurrency', burst: 2, lease: '5m' }),
    `${ON_HANDLER} "burst" does not apply to "concurrency": say it as "limit" requests in flight, each for at most "lease", such as { limit: 2, lease: '5m' }`,
  ],
  [
    'a window on a quota',
    policy({ algorithm: 'quota', limit: 100, window: '30d', period: 'month' }),
    `${ON_HANDLER} "window" does not apply to "quota": say it as "limit" per "period", such as { limit: 10000, period: 'month' }`,
  ],
  [
    'tokensPerSecond on a quota',
    policy({ algorithm: 'quota', tokensPerSecond: 1, limit: 100, period: 'month' }),
    `${ON_HANDLER} "tokensPerSecond" does not apply to "quota": say it as "limit" per "period", such as { limit: 10000, period: 'month' }`,
  ],
  [
    'concurrency without a limit',
    policy({ algorithm: 'concurrency', lease: '5m' }),
    `${ON_HANDLER} "concurrency" needs a "limit", the requests allowed in flight`,
  ],
  [
    'a quota without a limit',
    policy({ algorithm: 'quota', period: 'month' }),
    `${ON_HANDLER} "quota" needs a "limit", the requests allowed per period`,
  ],
  [
    'concurrency with a limit of 2.5',
    policy({ algorithm: 'concurrency', limit: 2.5, lease: '5m' }),
    `${ON_HANDLER} "limit" must be a whole number >= 1, got 2.5`,
  ],
  [
    'a quota with a limit of 1e300',
    policy({ algorithm: 'quota', limit: 1e300, period: 'month' }),
    `${ON_HANDLER} "limit" ${COUNT_AT_MOST}, got 1e+300`,
  ],
  [
    'concurrency with a limit of 2^53',
    policy({ algorithm: 'concurrency', limit: 2 ** 53, lease: '5m' }),
    `${ON_HANDLER} "limit" ${COUNT_AT_MOST}, got 9007199254740992`,
  ],
  [
    'a quota tier with a limit of 1e300',
    policy({ ...TIERED, tiers: { free: { rps: 1 }, pro: { algorithm: 'quota', limit: 1e300, period: 'day' } } }),
    `${ON_HANDLER} "tiers.pro.limit" ${COUNT_AT_MOST}, got 1e+300`,
  ],
  [
    'blockFor on concurrency',
    policy({ algorithm: 'concurrency', limit: 2, lease: '5m', blockFor: '1m' }),
    `${ON_HANDLER} "blockFor" does not apply to "concurrency": a slot comes back when a request ends, and a block would keep the client out with slots free`,
  ],
  [
    'blockFor on a quota',
    policy({ algorithm: 'quota', limit: 100, period: 'day', blockFor: '1h' }),
    `${ON_HANDLER} "blockFor" does not apply to "quota": its refusals hold until its period ends already`,
  ],
  [
    'a concurrency policy on a GraphQL subscription',
    () =>
      thrown(() => startWith(subscriptionWith({ name: 'streams', algorithm: 'concurrency', limit: 2, lease: '5m' }))),
    'Invalid @RateLimit policy on EventsResolver.events: policy "streams" holds a slot while a request is in flight, ' +
      'but this handler is a GraphQL subscription, which is limited at no point of its life (neither when it starts ' +
      'nor per event): it would hold nothing; limit the query or mutation that leads to it, or the gateway that ' +
      'carries its events',
  ],
  [
    'adaptive on concurrency',
    policy({ algorithm: 'concurrency', limit: 2, lease: '5m', adaptive: { latency: 250 } }),
    `${ON_HANDLER} "adaptive" does not apply to "concurrency": requests in flight are not a rate to scale`,
  ],
  [
    'settle on concurrency',
    policy({ algorithm: 'concurrency', limit: 2, lease: '5m', settle: () => 1 }),
    `${ON_HANDLER} "settle" does not apply to "concurrency": a request holds one slot while it runs, whatever it costs, and gives it back when it ends`,
  ],
  [
    'settle not a function',
    policy({ limit: 100, window: '1m', settle: 'usage.total_tokens' }),
    `${ON_HANDLER} "settle" must be a function of the handler's result (and the execution context) returning the real cost, a number >= 0, got "usage.total_tokens"`,
  ],
  [
    'shares true on a policy',
    policy({ limit: 100, window: '1m', shares: true as unknown as false }),
    `${ON_HANDLER} "shares" may only be false: a policy opts out of the module's shares, which the module's shares option turns on, got true`,
  ],
  [
    'maxDebt negative',
    policy({ limit: 100, window: '1m', maxDebt: -1 }),
    `${ON_HANDLER} "maxDebt" must be a whole number >= 0: how far past empty (cost units) a settle may take a bucket, got -1`,
  ],
  [
    'settleEvery under a second',
    policy({ limit: 100, window: '1m', settleEvery: '500ms' }),
    `${ON_HANDLER} "settleEvery" must be a duration of at least 1 s: seconds, or a string such as '10s', '1m', got "500ms"`,
  ],
  [
    'unit with a space',
    policy({ limit: 100, window: '1m', unit: 'output tokens' }),
    `${ON_HANDLER} "unit" must be a word of letters, digits and '-' (up to 32), such as 'requests' or 'tokens', got "output tokens"`,
  ],
  [
    'cost 0 on a policy that does not settle',
    policy({ limit: 100, window: '1m', cost: 0 }),
    `${ON_HANDLER} "cost" must be a positive number, 'header:<name>', 'query:<name>' or a function (0 too on a policy that settles), got 0`,
  ],
  [
    '@RateLimitMeter naming a policy that does not settle',
    async () =>
      thrown(() => start([RateLimitModule.forRoot()], [metering([{ name: 'rpm', limit: 20, window: '1m' }], 'rpm')])),
    `Invalid @RateLimit policy on ChatController.chat: @RateLimitMeter('rpm') names no policy of the route that settles (with settle, maxDebt or settleEvery)`,
  ],
  [
    '@RateLimitMeter without a name, on a route with two that settle',
    async () =>
      thrown(() =>
        start(
          [RateLimitModule.forRoot()],
          [
            metering(
              [
                { name: 'input', limit: 100, window: '1m', maxDebt: 0 },
                { name: 'output', limit: 100, window: '1m', maxDebt: 0 },
              ],
              undefined,
            ),
          ],
        ),
      ),
    `Invalid @RateLimit policy on ChatController.chat: @RateLimitMeter() must name one of the route's policies that settle: 'input', 'output'`,
  ],
  [
    '@RateLimitMeter without a name, on a route with none that settles',
    async () => thrown(() => start([RateLimitModule.forRoot()], [metering([{ name: 'rpm', rps: 1 }], undefined)])),
    `Invalid @RateLimit policy on ChatController.chat: @RateLimitMeter() needs a policy on the route that settles (with settle, maxDebt or settleEvery); it has none`,
  ],
  [
    'adaptive on a quota tier',
    policy({
      ...TIERED,
      tiers: { free: { algorithm: 'quota', limit: 100, period: 'month' }, pro: { rps: 5 } },
      adaptive: { latency: 250 },
    }),
    `${ON_HANDLER} tier "free": "adaptive" does not apply to "quota": a quota per period is not a rate to scale by latency`,
  ],
  [
    "count: 'failures' on concurrency",
    policy({ algorithm: 'concurrency', limit: 2, lease: '5m', count: 'failures' }),
    `${ON_HANDLER} "count: 'failures'" does not apply to "concurrency": every request gives its slot back when it ends`,
  ],
  [
    'an anchor function on a fixed window',
    policy({ algorithm: 'fixed_window', limit: 5, window: '1m', anchor: () => 0 }),
    `${ON_HANDLER} "anchor" can be a function for 'quota' only (a period's start), and the algorithm is 'fixed_window', got a function`,
  ],
  [
    'an anchor function on a quota tier',
    policy({
      ...TIERED,
      tiers: { free: { rps: 1 }, pro: { algorithm: 'quota', limit: 100, period: 'month', anchor: () => 0 } },
    }),
    `${ON_HANDLER} "tiers.pro.anchor" must be given on the policy, not a tier: one function gives every tier's period start, got a function`,
  ],
  [
    'an anchor function beside tiers none of which is a quota',
    policy({ ...TIERED, anchor: () => 0 }),
    `${ON_HANDLER} "anchor" can be a function for 'quota' only (a period's start), and no tier's algorithm is 'quota', got a function`,
  ],
  [
    "anchor 'first-request' on a quota",
    policy({ algorithm: 'quota', limit: 100, period: 'month', anchor: 'first-request' }),
    `${ON_HANDLER} "anchor" must be a function (ctx, request) => Date | number | undefined (or a promise of one): an identity's own period start, such as its billing date, got "first-request"`,
  ],
  [
    "scope 'handler'",
    policy({ rps: 1, scope: 'handler' }, 'class'),
    `${ON_CLASS} "scope" must be 'client' (one bucket per client across the routes it covers) or 'route' (one per client per route), got "handler"`,
  ],
  [
    'a module policy with scope true',
    options({ policies: [{ rps: 1, scope: true as never }] }),
    `${ON_MODULE} "scope" must be 'client' (one bucket per client across the routes it covers) or 'route' (one per client per route), got true`,
  ],
  [
    'count misspelt',
    policy({ rps: 1, count: 'failure' }),
    `${ON_HANDLER} "count" must be 'all' or 'failures', got "failure"`,
  ],
  [
    'skipIf a boolean',
    policy({ rps: 1, skipIf: true }),
    `${ON_HANDLER} "skipIf" must be a function of the execution context returning a boolean, got true`,
  ],
  [
    'adaptive a number',
    policy({ rps: 1, adaptive: 250 }),
    `${ON_HANDLER} "adaptive" must be an object such as { latency: 250, min: 0.1 }, got 250`,
  ],
  [
    'adaptive without a latency',
    policy({ rps: 1, adaptive: { min: 0.5 } }),
    `${ON_HANDLER} "adaptive.latency" must be a positive number of milliseconds, got undefined`,
  ],
  [
    'adaptive latency 0',
    policy({ rps: 1, adaptive: { latency: 0 } }),
    `${ON_HANDLER} "adaptive.latency" must be a positive number of milliseconds, got 0`,
  ],
  [
    'adaptive min 0',
    policy({ rps: 1, adaptive: { latency: 250, min: 0 } }),
    `${ON_HANDLER} "adaptive.min" must be a factor of rps above 0 and at most 1, got 0`,
  ],
  [
    'adaptive min above 1',
    policy({ rps: 1, adaptive: { latency: 250, min: 1.5 } }),
    `${ON_HANDLER} "adaptive.min" must be a factor of rps above 0 and at most 1, got 1.5`,
  ],
  [
    'adaptive min past 365 days to refill',
    policy({ rps: 1, burst: 10, adaptive: { latency: 250, min: 1e-7 } }),
    `${ON_HANDLER} "adaptive.min" must be at least 3.18e-7: below it the policy would take more than 365 days to refill, the longest a bucket may take, got 1e-7`,
  ],
  [
    'adaptive default min past 365 days to refill',
    policy({ limit: 1, window: '100d', adaptive: { latency: 250 } }),
    `${ON_HANDLER} "adaptive.min" must be at least 0.274: below it the policy would take more than 365 days to refill, the longest a bucket may take, got 0.1`,
  ],
  [
    'adaptive min past 365 days for a tier',
    policy({
      ...TIERED,
      tiers: { free: { limit: 1, window: '300d' }, pro: { rps: 5, burst: 10 } },
      adaptive: { latency: 250, min: 0.5 },
    }),
    `${ON_HANDLER} "adaptive.min" must be at least 0.822: below it tier "free" would take more than 365 days to refill, the longest a bucket may take, got 0.5`,
  ],
  [
    'algorithm in the wrong case',
    policy({ algorithm: 'Token_Bucket', rps: 1 }),
    `${ON_HANDLER} "algorithm" must be one of 'token_bucket', 'leaky_bucket', 'fixed_window', 'sliding_window_log', 'sliding_window_counter', 'gcra', 'concurrency', 'quota', got "Token_Bucket"`,
  ],
  [
    'algorithm null',
    policy({ algorithm: null, rps: 1 }),
    `${ON_HANDLER} "algorithm" must be one of 'token_bucket', 'leaky_bucket', 'fixed_window', 'sliding_window_log', 'sliding_window_counter', 'gcra', 'concurrency', 'quota', got null`,
  ],
  [
    'algorithm a number',
    policy({ algorithm: 1, rps: 1 }),
    `${ON_HANDLER} "algorithm" must be one of 'token_bucket', 'leaky_bucket', 'fixed_window', 'sliding_window_log', 'sliding_window_counter', 'gcra', 'concurrency', 'quota', got 1`,
  ],
  ['rps 0', policy({ rps: 0, burst: 5 }), `${ON_HANDLER} "rps" must be a positive number (tokens per second), got 0`],
  [
    'rps a string',
    policy({ rps: '10' }),
    `${ON_HANDLER} "rps" must be a positive number (tokens per second), got "10"`,
  ],
  ['rps NaN', policy({ rps: NaN }), `${ON_HANDLER} "rps" must be a positive number (tokens per second), got NaN`],
  [
    'rps Infinity',
    policy({ rps: Infinity }),
    `${ON_HANDLER} "rps" must be a positive number (tokens per second), got Infinity`,
  ],
  ['rps null', policy({ rps: null }), `${ON_HANDLER} "rps" must be a positive number (tokens per second), got null`],
  [
    'tokensPerSecond negative',
    policy({ tokensPerSecond: -1 }),
    `${ON_HANDLER} "tokensPerSecond" must be a positive number (tokens per second), got -1`,
  ],
  ['rps 1e308', policy({ rps: 1e308 }), `${ON_HANDLER} "rps" must be at most 1000000 (tokens per second), got 1e+308`],
  [
    'tokensPerSecond 2e6',
    policy({ tokensPerSecond: 2e6 }),
    `${ON_HANDLER} "tokensPerSecond" must be at most 1000000 (tokens per second), got 2000000`,
  ],
  ['burst 0', policy({ rps: 5, burst: 0 }), `${ON_HANDLER} "burst" must be a whole number >= 1, got 0`],
  [
    'burst a fraction, on the class',
    policy({ rps: 1, burst: 0.5 }, 'class'),
    `${ON_CLASS} "burst" must be a whole number >= 1, got 0.5`,
  ],
  ['burst a string', policy({ rps: 1, burst: '5' }), `${ON_HANDLER} "burst" must be a whole number >= 1, got "5"`],
  [
    'burst past 2^53 - 1',
    policy({ rps: 1, burst: 2 ** 53 }),
    `${ON_HANDLER} "burst" ${COUNT_AT_MOST}, got 9007199254740992`,
  ],
  [
    'a refill longer than a year',
    policy({ rps: 1e-8 }),
    `${ON_HANDLER} burst / rps = 1 / 1e-8 s is more than 365 days, the longest a bucket may take to refill; raise "rps" or lower "burst"`,
  ],
  ['no rate at all', policy({}), `${ON_HANDLER} give "rps" (and "burst") or "limit" and "window"`],
  [
    'burst with limit',
    policy({ limit: 5, window: '1m', burst: 5 }),
    `${ON_HANDLER} "burst" goes with "rps"; with "limit" and "window" the burst is the limit`,
  ],
  [
    'window without limit',
    policy({ window: '1m' }),
    `${ON_HANDLER} "window" needs a "limit", the requests allowed per window`,
  ],
  [
    'limit a fraction',
    policy({ limit: 1.5, window: 60 }),
    `${ON_HANDLER} "limit" must be a whole number >= 1, got 1.5`,
  ],
  [
    'limit past 2^53 - 1',
    policy({ limit: 2 ** 53, window: 60 }),
    `${ON_HANDLER} "limit" ${COUNT_AT_MOST}, got 9007199254740992`,
  ],
  ['limit without window', policy({ limit: 5 }), `${ON_HANDLER} "limit" needs a "window" such as '1m'`],
  ["window '0s'", policy({ limit: 5, window: '0s' }), `${ON_HANDLER} "window" ${WINDOW}, got "0s"`],
  ["window '-1m'", policy({ limit: 5, window: '-1m' }), `${ON_HANDLER} "window" ${WINDOW}, got "-1m"`],
  ["window '1.5.5s'", policy({ limit: 5, window: '1.5.5s' }), `${ON_HANDLER} "window" ${WINDOW}, got "1.5.5s"`],
  ["window '1M'", policy({ limit: 5, window: '1M' }), `${ON_HANDLER} "window" ${WINDOW}, got "1M"`],
  ['window 0', policy({ limit: 5, window: 0 }), `${ON_HANDLER} "window" ${WINDOW}, got 0`],
  [
    'window longer than a year',
    policy({ limit: 5, window: '366d' }),
    `${ON_HANDLER} "window" must be at most 365 days, got "366d"`,
  ],
  [
    "blockFor '1 hour'",
    policy({ limit: 5, window: '15m', blockFor: '1 hour' }),
    `${ON_HANDLER} "blockFor" ${BLOCK_FOR_PLAIN}, got "1 hour"`,
  ],
  [
    'blockFor 0',
    policy({ limit: 5, window: '15m', blockFor: 0 }),
    `${ON_HANDLER} "blockFor" ${BLOCK_FOR_PLAIN}, got 0`,
  ],
  [
    "blockFor '0.1ms'",
    policy({ limit: 5, window: '15m', blockFor: '0.1ms' }),
    `${ON_HANDLER} "blockFor" ${BLOCK_FOR_PLAIN}, got "0.1ms"`,
  ],
  [
    'blockFor null',
    policy({ limit: 5, window: '15m', blockFor: null }),
    `${ON_HANDLER} "blockFor" ${BLOCK_FOR_PLAIN}, got null`,
  ],
  [
    'blockFor longer than a year',
    policy({ limit: 5, window: '15m', blockFor: '366d' }),
    `${ON_HANDLER} "blockFor" must be at most 365 days, got "366d"`,
  ],
  [
    'blockFor on a class',
    policy({ rps: 1, blockFor: -60 }, 'class'),
    `${ON_CLASS} "blockFor" ${BLOCK_FOR_PLAIN}, got -60`,
  ],
  [
    'blockFor a list',
    policy({ limit: 5, window: '15m', blockFor: ['15m'] }),
    `${ON_HANDLER} "blockFor" ${BLOCK_FOR_PLAIN}, got ["15m"]`,
  ],
  [
    'blockFor without a duration',
    policy({ limit: 5, window: '15m', blockFor: { then: 'reset' } }),
    `${ON_HANDLER} "blockFor.duration" is required: seconds, or a string such as '30s', '15m', '1h', '1d', got undefined`,
  ],
  [
    "blockFor { duration: '1 hour' }",
    policy({ limit: 5, window: '15m', blockFor: { duration: '1 hour', then: 'reset' } }),
    `${ON_HANDLER} "blockFor.duration" ${BLOCK_FOR}, got "1 hour"`,
  ],
  [
    'blockFor { duration: null }',
    policy({ limit: 5, window: '15m', blockFor: { duration: null } }),
    `${ON_HANDLER} "blockFor.duration" ${BLOCK_FOR}, got null`,
  ],
  [
    'blockFor { duration } longer than a year',
    policy({ limit: 5, window: '15m', blockFor: { duration: '366d', then: 'keep' } }),
    `${ON_HANDLER} "blockFor.duration" must be at most 365 days, got "366d"`,
  ],
  [
    "blockFor { then: 'forget' }",
    policy({ limit: 5, window: '15m', blockFor: { duration: '15m', then: 'forget' } }),
    `${ON_HANDLER} "blockFor.then" must be 'keep' (the bucket as the refusals left it when the block ends) or 'reset' (full again), got "forget"`,
  ],
  [
    'blockFor { then: true }',
    policy({ limit: 5, window: '15m', blockFor: { duration: 60, then: true } }, 'class'),
    `${ON_CLASS} "blockFor.then" must be 'keep' (the bucket as the refusals left it when the block ends) or 'reset' (full again), got true`,
  ],
  [
    'blockFor with a misspelt field',
    policy({ limit: 5, window: '15m', blockFor: { duration: '15m', than: 'reset' } }),
    `${ON_HANDLER} "blockFor.than" is not a field of blockFor (the fields are duration, then), got "reset"`,
  ],
  [
    'limit per window past 1e6 rps',
    policy({ limit: 2_000_000, window: 1 }),
    `${ON_HANDLER} limit / window = 2000000 / 1 s is more than 1000000 tokens per second; lower "limit" or lengthen "window"`,
  ],
  [
    'rps and tokensPerSecond',
    policy({ rps: 1, tokensPerSecond: 2 }),
    `${ON_HANDLER} "rps" and "tokensPerSecond" are the same setting; give one`,
  ],
  [
    'rps and limit',
    policy({ rps: 1, limit: 10, window: '1m' }),
    `${ON_HANDLER} both "rps" and "limit" given; say it as rps + burst or as limit + window`,
  ],
  [
    'a window under 1 ms',
    policy({ algorithm: 'fixed_window', rps: 1e6, burst: 1 }),
    `${ON_HANDLER} "fixed_window" counts in windows of whole milliseconds, and burst / rps = 1 / 1000000 s is under 1 ms; lower "rps" or raise "burst"`,
  ],
  [
    'cost header with a space',
    policy({ rps: 1, cost: 'header:x weight' }),
    `${ON_HANDLER} "cost" must be 'header:<name>' with an HTTP header name such as 'header:x-request-weight': ${TOKEN_CHARS}, got "header:x weight"`,
  ],
  [
    'cost header without a name',
    policy({ rps: 1, cost: 'header:' }),
    `${ON_HANDLER} "cost" must be 'header:<name>' with an HTTP header name such as 'header:x-request-weight': ${TOKEN_CHARS}, got "header:"`,
  ],
  [
    'cost query without a name',
    policy({ rps: 1, cost: 'query:' }),
    `${ON_HANDLER} "cost" must be 'query:<name>' with a parameter name such as 'query:weight', got "query:"`,
  ],
  ['cost from the body', policy({ rps: 1, cost: 'body:weight' }), `${ON_HANDLER} "cost" ${COST}, got "body:weight"`],
  ['cost 0', policy({ rps: 1, cost: 0 }), `${ON_HANDLER} "cost" ${COST}, got 0`],
  ['cost null', policy({ rps: 1, cost: null }), `${ON_HANDLER} "cost" ${COST}, got null`],
  [
    'cost above burst',
    policy({ rps: 1, burst: 5, cost: 10 }),
    `${ON_HANDLER} "cost" 10 is more than "burst" 5, so no request could ever pass; lower "cost" or raise "burst"`,
  ],
  [
    'cost above limit',
    policy({ limit: 5, window: '1m', cost: 6 }),
    `${ON_HANDLER} "cost" 6 is more than "limit" 5, so no request could ever pass; lower "cost" or raise "limit"`,
  ],
  [
    'defaultCost negative',
    policy({ rps: 1, defaultCost: -2 }),
    `${ON_HANDLER} "defaultCost" must be a positive number, got -2`,
  ],
  [
    'defaultCost above burst',
    policy({ rps: 1, burst: 10, cost: 'header:x-weight', defaultCost: 20 }),
    `${ON_HANDLER} "defaultCost" 20 is more than "burst" 10, so every request without a usable cost would be refused; lower "defaultCost" or raise "burst"`,
  ],
  ['key unknown', policy({ rps: 1, key: 'cookie' }), `${ON_HANDLER} "key" ${KEY_SOURCES}, got "cookie"`],
  ['key an empty list', policy({ rps: 1, key: [] }), `${ON_HANDLER} "key" ${KEY_SOURCES}, got []`],
  ['key a number in a list', policy({ rps: 1, key: ['user', 5] }), `${ON_HANDLER} "key[1]" ${KEY_SOURCES}, got 5`],
  [
    'key header with a space',
    policy({ rps: 1, key: ['ip', 'header:x tenant'] }),
    `${ON_HANDLER} "key[1]" must be 'header:<name>' with an HTTP header name such as 'header:x-tenant-id': ${TOKEN_CHARS}, got "header:x tenant"`,
  ],
  [
    'key header without a name',
    policy({ rps: 1, key: 'header:' }),
    `${ON_HANDLER} "key" must be 'header:<name>' with an HTTP header name such as 'header:x-tenant-id': ${TOKEN_CHARS}, got "header:"`,
  ],
  ['name with braces', policy({ rps: 1, name: 'a{b}' }), `${ON_HANDLER} "name" ${NAME}, got "a{b}"`],
  ['name with a space', policy({ rps: 1, name: 'per ip' }), `${ON_HANDLER} "name" ${NAME}, got "per ip"`],
  ['name empty', policy({ rps: 1, name: '' }), `${ON_HANDLER} "name" ${NAME}, got ""`],
  [
    'name of 65 characters',
    policy({ rps: 1, name: 'n'.repeat(65) }),
    `${ON_HANDLER} "name" ${NAME}, got "${'n'.repeat(64)}…"`,
  ],
  ['name a number', policy({ rps: 1, name: 5 }), `${ON_HANDLER} "name" ${NAME}, got 5`],
  [
    'a bad policy in a list',
    policy([{ rps: 1 }, { limit: 0, window: 60 }]),
    'Invalid @RateLimit policy on BadController.find [1]: "limit" must be a whole number >= 1, got 0',
  ],
  [
    'two unnamed policies in a list',
    policy([{ rps: 1 }, { limit: 5, window: 60 }]),
    `${ON_HANDLER} two policies are named "BadController.find"; give each policy its own "name"`,
  ],

  // tiers
  [
    'tier without tiers',
    policy({ rps: 1, tier: 'user:plan' }),
    `${ON_HANDLER} "tier" goes with "tiers", the limits of each tier`,
  ],
  [
    'defaultTier without tiers',
    policy({ rps: 1, defaultTier: 'free' }),
    `${ON_HANDLER} "defaultTier" goes with "tiers", the limits of each tier`,
  ],
  [
    'tiers empty',
    policy({ tiers: {}, tier: 'user:plan', defaultTier: 'free' }),
    `${ON_HANDLER} "tiers" ${TIERS}, got {}`,
  ],
  [
    'tiers a list',
    policy({ tiers: [{ rps: 1 }], tier: 'user:plan', defaultTier: '0' }),
    `${ON_HANDLER} "tiers" ${TIERS}, got [{"rps":1}]`,
  ],
  [
    'limits beside tiers',
    policy({ rps: 5, ...TIERED }),
    `${ON_HANDLER} "rps" is given beside "tiers"; give the limits in each tier`,
  ],
  [
    'an algorithm beside tiers',
    policy({ algorithm: 'gcra', ...TIERED }),
    `${ON_HANDLER} "algorithm" is given beside "tiers"; give the limits in each tier`,
  ],
  [
    'tiers without tier',
    policy({ ...TIERED, tier: undefined }),
    `${ON_HANDLER} "tiers" needs a "tier": 'user:<field>' or a function naming a request's tier`,
  ],
  [
    'tier a bare field',
    policy({ ...TIERED, tier: 'plan' }),
    `${ON_HANDLER} "tier" must be 'user:<field>' or a function naming a request's tier, got "plan"`,
  ],
  [
    'tier without a field',
    policy({ ...TIERED, tier: 'user:' }),
    `${ON_HANDLER} "tier" must be 'user:<field>' or a function naming a request's tier, got "user:"`,
  ],
  [
    'defaultTier missing',
    policy({ ...TIERED, defaultTier: undefined }),
    `${ON_HANDLER} "defaultTier" must name one of the tiers (free, pro), got undefined`,
  ],
  [
    'defaultTier naming no tier',
    policy({ ...TIERED, defaultTier: 'basic' }),
    `${ON_HANDLER} "defaultTier" must name one of the tiers (free, pro), got "basic"`,
  ],
  [
    'defaultTier naming an Object method',
    policy({ ...TIERED, defaultTier: 'toString' }),
    `${ON_HANDLER} "defaultTier" must name one of the tiers (free, pro), got "toString"`,
  ],
  [
    'a tier named with a brace',
    policy({ ...TIERED, tiers: { 'a{b}': { rps: 1 } }, defaultTier: 'a{b}' }),
    `${ON_HANDLER} "tiers" must name each tier with 1 to 64 visible ASCII characters, without spaces or braces, got "a{b}"`,
  ],
  [
    'a tier named empty',
    policy({ ...TIERED, tiers: { '': { rps: 1 } }, defaultTier: '' }),
    `${ON_HANDLER} "tiers" must name each tier with 1 to 64 visible ASCII characters, without spaces or braces, got ""`,
  ],
  [
    'a tier a number',
    policy({ ...TIERED, tiers: { free: 10 } }),
    `${ON_HANDLER} "tiers.free" must be an object of limits such as { rps: 10, burst: 20 }, got 10`,
  ],
  [
    'a tier with a key',
    policy({ ...TIERED, tiers: { free: { rps: 1, key: 'ip' } } }),
    `${ON_HANDLER} "tiers.free.key" is not a tier field (the fields are algorithm, rps, tokensPerSecond, burst, limit, window, anchor, lease, period, timeZone), got "ip"`,
  ],
  [
    'a tier with burst 0, on the class',
    policy({ ...TIERED, tiers: { free: { rps: 1 }, pro: { rps: 5, burst: 0 } } }, 'class'),
    `${ON_CLASS} "tiers.pro.burst" must be a whole number >= 1, got 0`,
  ],
  [
    'a tier with an unknown algorithm',
    policy({ ...TIERED, tiers: { free: { algorithm: 'bucket', rps: 1 } } }),
    `${ON_HANDLER} "tiers.free.algorithm" must be one of 'token_bucket', 'leaky_bucket', 'fixed_window', 'sliding_window_log', 'sliding_window_counter', 'gcra', 'concurrency', 'quota', got "bucket"`,
  ],
  [
    'a tier with no rate',
    policy({ ...TIERED, tiers: { free: { rps: 1 }, pro: {} } }),
    `${ON_HANDLER} tier "pro": give "rps" (and "burst") or "limit" and "window"`,
  ],
  [
    'a tier with a bad window',
    policy({ ...TIERED, tiers: { free: { limit: 5, window: '1M' } } }),
    `${ON_HANDLER} "tiers.free.window" ${WINDOW}, got "1M"`,
  ],
  [
    "cost above a tier's limit",
    policy({ ...TIERED, cost: 6, tiers: { free: { limit: 5, window: '1m' }, pro: { rps: 10, burst: 50 } } }),
    `${ON_HANDLER} tier "free": "cost" 6 is more than "limit" 5, so no request could ever pass; lower "cost" or raise "limit"`,
  ],
  [
    'a module policy with a bad tier',
    options({ policies: [{ ...TIERED, tiers: { free: { rps: 0 } } }] }),
    `${ON_MODULE} "tiers.free.rps" must be a positive number (tokens per second), got 0`,
  ],

  // @SkipRateLimit
  [
    'a number skipped',
    () => thrown(() => start([RateLimitModule.forRoot()], [skipping([5], 'handler')])),
    'Invalid @SkipRateLimit on SkipController.find: policy names must be non-empty strings, got 5',
  ],
  [
    'an empty name skipped on the class',
    () => thrown(() => start([RateLimitModule.forRoot()], [skipping([''], 'class')])),
    'Invalid @SkipRateLimit on SkipController (class): policy names must be non-empty strings, got ""',
  ],
  [
    'an unknown name skipped (a warning)',
    () => warned(() => start([RateLimitModule.forRoot()], [skipping(['per_ip'], 'handler')])),
    '@SkipRateLimit("per_ip") on SkipController.find names no policy that applies there (policies: "per-ip"), so it skips nothing; check the name',
  ],
  [
    'an unknown name skipped on the class (a warning)',
    () => warned(() => start([RateLimitModule.forRoot()], [skipping(['per_ip'], 'class')])),
    '@SkipRateLimit("per_ip") on SkipController (class) names no policy that applies there (policies: "per-ip"), so it skips nothing; check the name',
  ],

  // module options, through resolveOptions
  ['options null', options(null), `${OPTIONS_OBJECT} null`],
  ['options a list', options([]), `${OPTIONS_OBJECT} []`],
  ['options a URL', options('redis://localhost:6379'), `${OPTIONS_OBJECT} "redis://localhost:6379"`],
  [
    'a misspelt option',
    options({ polices: [] }),
    `${OPTION} "polices": is not an option (the options are store, redis, prefix, policies, key, apiKeyHeader, ipv6Subnet, headers, failMode, timeout, mode, guard, runAs, contexts, skipIf, retryAfterJitter, metrics, errorFormat, exceptionFactory, shares), got []`,
  ],
  [
    'module skipIf a string',
    options({ skipIf: 'health' }),
    `${OPTION} "skipIf": must be a function of the execution context returning a boolean, got "health"`,
  ],
  [
    'shares.after 0',
    options({ shares: { after: 0 } }),
    `${OPTION} "shares.after": must be true, false or { after?: decisions a second (> 0), hold?: '10ms' to '60s' }, got 0`,
  ],
  [
    'shares.hold too long',
    options({ shares: { hold: '2m' } }),
    `${OPTION} "shares.hold": must be true, false or { after?: decisions a second (> 0), hold?: '10ms' to '60s' }, got "2m"`,
  ],
  [
    'shares a field misspelt',
    options({ shares: { hodl: '1s' } as never }),
    `${OPTION} "shares": must be true, false or { after?: decisions a second (> 0), hold?: '10ms' to '60s' }, got {"hodl":"1s"}`,
  ],
  [
    'retryAfterJitter above 1',
    options({ retryAfterJitter: 1.5 }),
    `${OPTION} "retryAfterJitter": must be a number from 0 to 1 (a share of the wait), got 1.5`,
  ],
  [
    'retryAfterJitter negative',
    options({ retryAfterJitter: -0.1 }),
    `${OPTION} "retryAfterJitter": must be a number from 0 to 1 (a share of the wait), got -0.1`,
  ],
  [
    'retryAfterJitter a string',
    options({ retryAfterJitter: '0.5' }),
    `${OPTION} "retryAfterJitter": must be a number from 0 to 1 (a share of the wait), got "0.5"`,
  ],
  [
    'errorFormat misspelt',
    options({ errorFormat: 'problem+json' }),
    `${OPTION} "errorFormat": must be 'nest' (Nest's error body) or 'problem' (RFC 9457, application/problem+json), got "problem+json"`,
  ],
  [
    'errorFormat null',
    options({ errorFormat: null }),
    `${OPTION} "errorFormat": must be 'nest' (Nest's error body) or 'problem' (RFC 9457, application/problem+json), got null`,
  ],
  [
    'exceptionFactory an error instance',
    options({ exceptionFactory: new Error('slow down') }),
    `${OPTION} "exceptionFactory": must be a function of the decision and the execution context returning an Error, got an instance of Error`,
  ],
  [
    'prefix with braces',
    options({ prefix: '{rl}:' }),
    `${OPTION} "prefix": must be a string of at most 64 characters, without braces, got "{rl}:"`,
  ],
  [
    'prefix a number',
    options({ prefix: 5 }),
    `${OPTION} "prefix": must be a string of at most 64 characters, without braces, got 5`,
  ],
  [
    'prefix of 65 characters',
    options({ prefix: 'p'.repeat(65) }),
    `${OPTION} "prefix": must be a string of at most 64 characters, without braces, got "${'p'.repeat(64)}…"`,
  ],
  [
    'apiKeyHeader with spaces',
    options({ apiKeyHeader: 'x api key' }),
    `${OPTION} "apiKeyHeader": must be an HTTP header name such as 'x-api-key': ${TOKEN_CHARS}, got "x api key"`,
  ],
  [
    'apiKeyHeader with a colon',
    options({ apiKeyHeader: 'x-api-key:' }),
    `${OPTION} "apiKeyHeader": must be an HTTP header name such as 'x-api-key': ${TOKEN_CHARS}, got "x-api-key:"`,
  ],
  [
    'apiKeyHeader empty',
    options({ apiKeyHeader: '' }),
    `${OPTION} "apiKeyHeader": must be an HTTP header name such as 'x-api-key': ${TOKEN_CHARS}, got ""`,
  ],
  [
    'ipv6Subnet 65',
    options({ ipv6Subnet: 65 }),
    `${OPTION} "ipv6Subnet": must be a whole number of bits from 32 to 64, got 65`,
  ],
  [
    'ipv6Subnet 31',
    options({ ipv6Subnet: 31 }),
    `${OPTION} "ipv6Subnet": must be a whole number of bits from 32 to 64, got 31`,
  ],
  [
    'ipv6Subnet a fraction',
    options({ ipv6Subnet: 48.5 }),
    `${OPTION} "ipv6Subnet": must be a whole number of bits from 32 to 64, got 48.5`,
  ],
  [
    'ipv6Subnet a string',
    options({ ipv6Subnet: '48' }),
    `${OPTION} "ipv6Subnet": must be a whole number of bits from 32 to 64, got "48"`,
  ],
  [
    'headers a string',
    options({ headers: 'ietf' }),
    `${OPTION} "headers": must be false or a list of 'ietf', 'legacy', 'x-ratelimit', 'dimensions', got "ietf"`,
  ],
  [
    'headers an unknown family',
    options({ headers: ['ietf', 'draft'] }),
    `${OPTION} "headers": must be false or a list of 'ietf', 'legacy', 'x-ratelimit', 'dimensions', got ["ietf","draft"]`,
  ],
  [
    'headers true',
    options({ headers: true }),
    `${OPTION} "headers": must be false or a list of 'ietf', 'legacy', 'x-ratelimit', 'dimensions', got true`,
  ],
  [
    'failMode in the wrong case',
    options({ failMode: 'Open' }),
    `${OPTION} "failMode": must be 'open', 'closed' or 'local', got "Open"`,
  ],
  ['timeout 0', options({ timeout: 0 }), `${OPTION} "timeout": ${TIMEOUT}, got 0`],
  ['timeout Infinity', options({ timeout: Infinity }), `${OPTION} "timeout": ${TIMEOUT}, got Infinity`],
  ['timeout past a timer', options({ timeout: 2 ** 31 }), `${OPTION} "timeout": ${TIMEOUT}, got 2147483648`],
  ['timeout a string', options({ timeout: '100' }), `${OPTION} "timeout": ${TIMEOUT}, got "100"`],
  [
    'mode in the wrong case',
    options({ mode: 'Shadow' }),
    `${OPTION} "mode": must be 'enforce' or 'shadow', got "Shadow"`,
  ],
  ['guard a string', options({ guard: 'false' }), `${OPTION} "guard": must be true or false, got "false"`],
  ['metrics a string', options({ metrics: 'on' }), `${OPTION} "metrics": must be true or false, got "on"`],
  [
    'runAs misspelt',
    options({ runAs: 'interceptors' }),
    `${OPTION} "runAs": must be 'guard' or 'interceptor', got "interceptors"`,
  ],
  [
    'contexts naming no kind',
    options({ contexts: ['http', 'grpc'] }),
    `${OPTION} "contexts": must be a list of 'http', 'graphql', 'ws', 'rpc', got ["http","grpc"]`,
  ],
  [
    'contexts a string',
    options({ contexts: 'http' }),
    `${OPTION} "contexts": must be a list of 'http', 'graphql', 'ws', 'rpc', got "http"`,
  ],
  [
    'policies not a list',
    options({ policies: { rps: 1 } }),
    `${OPTION} "policies": must be a list of policies, got {"rps":1}`,
  ],
  [
    'store and redis',
    options({ store: new MemoryStore(), redis: 'redis://localhost:6379' }),
    'Invalid RateLimitModule options: "store" and "redis" are both given; give one ("redis" is a shortcut that makes a RedisStore)',
  ],
  [
    'store an empty object',
    options({ store: {} }),
    `${OPTION} "store": must implement RateLimitStore (consume, peek, reset), got {}`,
  ],
  [
    'store of another kind',
    options({ store: new Map() }),
    `${OPTION} "store": must implement RateLimitStore (consume, peek, reset), got an instance of Map`,
  ],
  [
    'redis an empty URL',
    options({ redis: '' }),
    `${OPTION} "redis": must be a redis:// or rediss:// URL such as 'redis://localhost:6379', got ""`,
  ],
  [
    'redis host:port',
    options({ redis: 'localhost:6379' }),
    `${OPTION} "redis": must be a redis:// or rediss:// URL such as 'redis://localhost:6379', got "localhost:6379"`,
  ],
  [
    'redis a bad URL with a password',
    options({ redis: 'redis://:secret@bad host:6379' }),
    `${OPTION} "redis": must be a redis:// or rediss:// URL such as 'redis://localhost:6379', got "redis://***@bad host:6379"`,
  ],
  [
    'redis a port number',
    options({ redis: 6379 }),
    `${OPTION} "redis": must be a Redis client (ioredis, iovalkey, node-redis v5), a redis:// URL or ioredis options, got 6379`,
  ],
  [
    'redis a list',
    options({ redis: [] }),
    `${OPTION} "redis": must be a Redis client (ioredis, iovalkey, node-redis v5), a redis:// URL or ioredis options, got []`,
  ],
  [
    'redis a client of another library',
    options({ redis: new Map() }),
    `${OPTION} "redis": must be a Redis client (ioredis, iovalkey, node-redis v5), a redis:// URL or ioredis options, got an instance of Map`,
  ],
  [
    'two unnamed module policies',
    options({ policies: [{ rps: 1 }, { limit: 5, window: 60 }] }),
    'Invalid RateLimitModule options: policies[0] and policies[1] are both named "default"; give each policy its own "name"',
  ],
  [
    'a module policy not an object',
    options({ policies: ['x'] }),
    `${ON_MODULE} a policy must be an object such as { rps: 10, burst: 20 }, got "x"`,
  ],
  [
    'a module policy with a bad field',
    options({ policies: [{ rps: 1, window: '1m' }] }),
    `${ON_MODULE} both "rps" and "window" given; say it as rps + burst or as limit + window`,
  ],
  ['module key unknown', options({ key: 'cookie' }), `${OPTION} "key": ${KEY_SOURCES}, got "cookie"`],
  [
    'module key header without a name',
    options({ key: ['user', 'header:'] }),
    `${OPTION} "key[1]": must be 'header:<name>' with an HTTP header name such as 'header:x-tenant-id': ${TOKEN_CHARS}, got "header:"`,
  ],

  // forRootAsync: its own options when declared, and what the factory returns at start
  [
    'forRootAsync(null)',
    () => thrown(() => RateLimitModule.forRootAsync(null as never)),
    `${ASYNC} they must be an object such as { useFactory: () => ({}) }, got null`,
  ],
  [
    'forRootAsync without a factory',
    () => thrown(() => RateLimitModule.forRootAsync({})),
    `${ASYNC} give one of "useFactory" (a function returning the options), "useClass" or "useExisting" (a provider with createRateLimitOptions()), got {}`,
  ],
  [
    'forRootAsync with two ways',
    () => thrown(() => RateLimitModule.forRootAsync({ useFactory: () => ({}), useClass: RateLimitConfig })),
    `${ASYNC} give one of "useFactory" (a function returning the options), "useClass" or "useExisting" (a provider with createRateLimitOptions()), got {"useFactory":"(a function)","useClass":"(a function)"}`,
  ],
  [
    'forRootAsync useFactory an object',
    () => thrown(() => RateLimitModule.forRootAsync({ useFactory: { failMode: 'closed' } as never })),
    `${ASYNC} "useFactory" must be a function returning the options, got {"useFactory":{"failMode":"closed"}}`,
  ],
  [
    'forRootAsync useClass a string',
    () => thrown(() => RateLimitModule.forRootAsync({ useClass: 'RateLimitConfig' as never })),
    `${ASYNC} "useClass" must be a class with createRateLimitOptions(), got {"useClass":"RateLimitConfig"}`,
  ],
  [
    'forRootAsync inject not a list',
    () => thrown(() => RateLimitModule.forRootAsync({ useFactory: () => ({}), inject: RateLimitConfig as never })),
    `${ASYNC} "inject" must be a list of what useFactory takes, got {"useFactory":"(a function)","inject":"(a function)"}`,
  ],
  [
    'a forRootAsync factory returning a bad option',
    () =>
      thrown(() =>
        start([RateLimitModule.forRootAsync({ useFactory: async () => ({ failMode: 'Closed' as never }) })]),
      ),
    `${OPTION} "failMode": must be 'open', 'closed' or 'local', got "Closed"`,
  ],
  [
    'a forRootAsync factory returning nothing',
    () => thrown(() => start([RateLimitModule.forRootAsync({ useFactory: () => undefined as never })])),
    `${OPTIONS_OBJECT} undefined`,
  ],
  [
    'a forRootAsync factory returning a bad policy',
    () => thrown(() => start([RateLimitModule.forRootAsync({ useFactory: () => ({ policies: [{ rps: 0 }] }) })])),
    `${ON_MODULE} "rps" must be a positive number (tokens per second), got 0`,
  ],

  // @nestjs/throttler's storage on ours (nestjs-ratelimit/throttler)
  [
    'RateLimitThrottlerStorage prefix with braces',
    store(() => new RateLimitThrottlerStorage({ prefix: '{t}:' })),
    'Invalid RateLimitThrottlerStorage option "prefix": must be a string of at most 256 characters, without braces, got "{t}:"',
  ],
  [
    'RateLimitThrottlerStorage counting unknown',
    store(() => new RateLimitThrottlerStorage({ counting: 'fixed' as never })),
    `Invalid RateLimitThrottlerStorage option "counting": must be 'sliding-log' or 'anchored-window', got "fixed"`,
  ],
  [
    'RateLimitThrottlerStorage failMode unknown',
    store(() => new RateLimitThrottlerStorage({ failMode: 'shut' as never })),
    `Invalid RateLimitThrottlerStorage option "failMode": must be 'open', 'closed' or 'local', got "shut"`,
  ],
  [
    'RateLimitThrottlerStorage timeout of 0',
    store(() => new RateLimitThrottlerStorage({ timeout: 0 })),
    'Invalid RateLimitThrottlerStorage option "timeout": must be a positive number of milliseconds, got 0',
  ],
  [
    'a ThrottlerGuard limit function resolving to no number (at the request)',
    () =>
      thrown(async () => {
        class PingController {
          ping() {}
        }
        const throttlers = [{ ttl: 60_000, limit: () => 'many' as never }];
        const guard = new ThrottlerGuard(throttlers, new ThrottlerStorageService(), new Reflector());
        await guard.onModuleInit();
        const request = { ip: '127.0.0.1', headers: {} };
        await guard.canActivate(new ExecutionContextHost([request, {}], PingController, PingController.prototype.ping));
      }),
    'Invalid "limit" for the "default" throttler: expected a number, got "many".',
  ],

  // the stores' own options
  [
    'RedisStore without options',
    store(() => new RedisStore(undefined as never)),
    'Invalid RedisStore option "client": must be a Redis client (ioredis or iovalkey Redis or Cluster, node-redis v5), as in new RedisStore({ client: redis }), got undefined',
  ],
  [
    'RedisStore given the client itself',
    store(() => new RedisStore(fakeClient as never)),
    'Invalid RedisStore option "client": must be a Redis client (ioredis or iovalkey Redis or Cluster, node-redis v5), as in new RedisStore({ client: redis }), got undefined',
  ],
  [
    'RedisStore client not a client',
    store(() => new RedisStore({ client: {} as never })),
    'Invalid RedisStore option "client": must be a Redis client (ioredis or iovalkey Redis or Cluster, node-redis v5), as in new RedisStore({ client: redis }), got {}',
  ],
  [
    'RedisStore with a prefix',
    store(() => new RedisStore({ client: fakeClient, prefix: 'rl:' } as never)),
    'Invalid RedisStore option "prefix": is not an option (the options are client, cacheRefusals, clock), got "rl:"',
  ],
  [
    'RedisStore cacheRefusals a string',
    store(() => new RedisStore({ client: fakeClient, cacheRefusals: 'no' } as never)),
    'Invalid RedisStore option "cacheRefusals": must be true or false, got "no"',
  ],
  [
    'RedisStore clock a number',
    store(() => new RedisStore({ client: fakeClient, clock: 5 } as never)),
    `Invalid RedisStore option "clock": must be 'redis', 'app', { now() } or a function returning ms, got 5`,
  ],
  [
    'RedisStore clock an unknown name',
    store(() => new RedisStore({ client: fakeClient, clock: 'server' } as never)),
    `Invalid RedisStore option "clock": must be 'redis', 'app', { now() } or a function returning ms, got "server"`,
  ],
  [
    'RedisStore clock an object without now()',
    store(() => new RedisStore({ client: fakeClient, clock: { now: 5 } } as never)),
    `Invalid RedisStore option "clock": must be 'redis', 'app', { now() } or a function returning ms, got {"now":5}`,
  ],
  [
    'MemoryStore clock a number',
    store(() => new MemoryStore({ clock: 5 as never })),
    'Invalid MemoryStore option "clock": must be { now() } or a function returning ms, got 5',
  ],
  [
    'MemoryStore clock an object without now()',
    store(() => new MemoryStore({ clock: { now: 1_767_225_600_000 } as never })),
    'Invalid MemoryStore option "clock": must be { now() } or a function returning ms, got {"now":1767225600000}',
  ],
  [
    'MemoryStore maxKeys 0',
    store(() => new MemoryStore({ maxKeys: 0 })),
    'Invalid MemoryStore option "maxKeys": must be a whole number >= 1, got 0',
  ],

  // the testing kit's clock
  [
    'ManualClock starting before 1970',
    () => thrown(() => new ManualClock(-1)),
    'Invalid argument to new ManualClock: "startMs" must be a whole number of milliseconds >= 0, got -1',
  ],
  [
    'ManualClock.advance by a fraction of a ms',
    () => thrown(() => new ManualClock(0).advance(0.5)),
    'Invalid argument to ManualClock.advance: "by" must be a whole number of milliseconds >= 0, got 0.5',
  ],
  [
    'ManualClock.set to a string',
    () => thrown(() => new ManualClock(0).set('5' as never)),
    'Invalid argument to ManualClock.set: "ms" must be a whole number of milliseconds >= 0, got "5"',
  ],
  [
    'ManualClock.advance by an unknown unit',
    () => thrown(() => new ManualClock(0).advance('1w')),
    `Invalid argument to ManualClock.advance: "by" must be a duration of whole milliseconds such as '1s', '250ms', '15m', got "1w"`,
  ],
  [
    'ManualClock.advance by half a ms',
    () => thrown(() => new ManualClock(0).advance('0.5ms')),
    `Invalid argument to ManualClock.advance: "by" must be a duration of whole milliseconds such as '1s', '250ms', '15m', got "0.5ms"`,
  ],

  // calls: RateLimiterService and the stores reject bad arguments
  [
    'RateLimiterService: two unnamed policies',
    limiter((l) =>
      l.consume('user:1', [
        { limit: 5, window: '1m' },
        { limit: 100, window: '1d' },
      ]),
    ),
    'Invalid @RateLimit policy on RateLimiterService: two policies are named "default"; give each policy its own "name"',
  ],
  [
    'RateLimiterService: a policy scoped to the route',
    limiter((l) => l.consume('user:1', { rps: 1, scope: 'route' })),
    `Invalid @RateLimit policy on RateLimiterService: "scope" cannot be 'route' here: RateLimiterService has no route, only an identity; use 'client' (the default), got "route"`,
  ],
  [
    'RateLimiterService.usage: a list of policies',
    limiter((l) => l.usage('user:1', [{ rps: 1 }] as never)),
    'Invalid argument to RateLimiterService.usage: "policy" must be one policy: usage answers for one bucket, got [{"rps":1}]',
  ],
  [
    'RateLimiterService: a bad policy',
    limiter((l) => l.peek('user:1', { rps: 0 })),
    'Invalid @RateLimit policy on RateLimiterService: "rps" must be a positive number (tokens per second), got 0',
  ],
  [
    'RateLimiterService: cost NaN',
    limiter((l) => l.consume('user:1', { rps: 1 }, NaN)),
    `Invalid argument to RateLimiterService.consume: "cost" ${CALL_COST}, got NaN`,
  ],
  [
    'RateLimiterService: cost a string',
    limiter((l) => l.peek('user:1', { rps: 1 }, '2' as never)),
    `Invalid argument to RateLimiterService.peek: "cost" ${CALL_COST}, got "2"`,
  ],
  [
    'RateLimiterService: tier a number',
    limiter((l) => l.consume('user:1', TIERED, 1, 2 as never)),
    `Invalid argument to RateLimiterService.consume: "tier" must be a tier's name, a string, got 2`,
  ],
  [
    'RateLimiterService: setScale factor 0',
    limiter(async (l) => l.setScale('api', 0)),
    `Invalid argument to RateLimiterService.setScale: "factor" must be a number above 0 and at most 1, got 0`,
  ],
  [
    'RateLimiterService: setScale factor above 1',
    limiter(async (l) => l.setScale('api', 2)),
    `Invalid argument to RateLimiterService.setScale: "factor" must be a number above 0 and at most 1, got 2`,
  ],
  [
    'RateLimiterService: setScale factor a string',
    limiter(async (l) => l.setScale('api', '0.5' as never)),
    `Invalid argument to RateLimiterService.setScale: "factor" must be a number above 0 and at most 1, got "0.5"`,
  ],
  [
    'RateLimiterService: setScale name a number',
    limiter(async (l) => l.setScale(5 as never, 0.5)),
    `Invalid argument to RateLimiterService.setScale: "policyName" must be a policy's name or '*', got 5`,
  ],
  [
    'RateLimiterService: setScale factor 1e-17',
    limiter(async (l) => l.setScale('api', 1e-17)),
    `Invalid argument to RateLimiterService.setScale: "factor" must be at least 3.18e-14: below it every policy would take more than 365 days to refill, the longest a bucket may take, got 1e-17`,
  ],
  [
    'RateLimiterService: setScale factor the least double',
    limiter(async (l) => l.setScale('*', Number.MIN_VALUE)),
    `Invalid argument to RateLimiterService.setScale: "factor" must be at least 3.18e-14: below it every policy would take more than 365 days to refill, the longest a bucket may take, got 5e-324`,
  ],
  [
    'RateLimiterService: setScale past 365 days for a module policy',
    scaling({ policies: [{ name: 'api', rps: 10, burst: 5 }] }, 'api', 1e-10),
    `Invalid argument to RateLimiterService.setScale: "factor" must be at least 1.59e-8: below it policy "api" would take more than 365 days to refill, the longest a bucket may take, got 1e-10`,
  ],
  [
    'RateLimiterService: setScale * past 365 days for a route policy',
    scalingRoute({ name: 'yearly', limit: 1, window: '300d' }, '*', 0.5),
    `Invalid argument to RateLimiterService.setScale: "factor" must be at least 0.822: below it policy "yearly" would take more than 365 days to refill, the longest a bucket may take, got 0.5`,
  ],
  [
    'RateLimiterService: setScale past 365 days for a tier',
    scalingRoute(
      { ...TIERED, name: 'plans', tiers: { free: { limit: 1, window: '200d' }, pro: { rps: 5, burst: 10 } } },
      'plans',
      0.5,
    ),
    `Invalid argument to RateLimiterService.setScale: "factor" must be at least 0.548: below it policy "plans" (tier "free") would take more than 365 days to refill, the longest a bucket may take, got 0.5`,
  ],
  [
    'RateLimiterService: identity a number',
    limiter((l) => l.reset(42 as never, { rps: 1 })),
    `Invalid argument to RateLimiterService.reset: "identity" must be a string such as 'user:42', got 42`,
  ],
  [
    'RateLimitReservation.settle: actual negative',
    limiter(async (l) =>
      (await l.reserve('user:1', { name: 'tpm', limit: 100, window: '1m', maxDebt: 0 }, 5)).settle(-1),
    ),
    `Invalid argument to RateLimitReservation.settle: "actual" must be a finite number >= 0, got -1`,
  ],
  [
    'RateLimiterService.reserve: a concurrency policy',
    limiter((l) => l.reserve('user:1', { algorithm: 'concurrency', limit: 2, lease: '5m' })),
    'Invalid @RateLimit policy on RateLimiterService.reserve: "settle" does not apply to "concurrency": a request holds one slot while it runs, whatever it costs, and gives it back when it ends',
  ],
  [
    'RateLimitMeter.add: NaN',
    async () => thrown(() => new Meter('tpm', 1, ADMITTED).add(NaN)),
    'RateLimitMeter.add: the amount must be a finite number >= 0, got NaN',
  ],
  [
    'MemoryStore: requests not a list',
    memory((m) => m.consume({ key: 'k' } as never)),
    'Invalid argument to MemoryStore.consume: "requests" must be a list of requests, got {"key":"k"}',
  ],
  [
    'MemoryStore: a request null',
    memory((m) => m.peek([null as never])),
    'Invalid argument to MemoryStore.peek: "requests[0]" must be a request such as { key, policy, rule, cost }, got null',
  ],
  [
    'MemoryStore: a key a number',
    memory((m) => m.consume([{ key: 5 as never, policy: 'p', rule: TB, cost: 1 }])),
    'Invalid argument to MemoryStore.consume: "requests[0].key" must be a string, got 5',
  ],
  [
    'MemoryStore: cost negative',
    memory((m) => m.consume([{ key: 'k', policy: 'p', rule: TB, cost: -1 }])),
    `Invalid argument to MemoryStore.consume: "requests[0].cost" ${CALL_COST}, got -1`,
  ],
  [
    'MemoryStore: cost negative for a rule that settles',
    memory((m) => m.consume([{ key: 'k', policy: 'p', rule: { ...TB, debt: 5 }, cost: -1 }])),
    'Invalid argument to MemoryStore.consume: "requests[0].cost" must be a finite number >= 0 (the tokens the request reserves: one whose policy settles may reserve none), got -1',
  ],
  [
    'MemoryStore.settle: settles not a list',
    memory((m) => m.settle({} as never)),
    'Invalid argument to MemoryStore.settle: "settles" must be a list of settles such as { decision, actual }, got {}',
  ],
  [
    'MemoryStore.settle: a settle null',
    memory((m) => m.settle([null as never])),
    'Invalid argument to MemoryStore.settle: "settles[0]" must be a settle such as { decision, actual }, got null',
  ],
  [
    'MemoryStore.settle: actual negative',
    memory(async (m) =>
      m.settle([{ decision: (await m.consume([{ key: 'k', policy: 'p', rule: TB, cost: 1 }]))[0], actual: -1 }]),
    ),
    'Invalid argument to MemoryStore.settle: "settles[0].actual" must be a finite number >= 0 (the tokens the request costs in all), got -1',
  ],
  [
    'RateLimiterService.reserve: cost 0 under a policy that does not settle',
    limiter((l) => l.reserve('user:1', { rps: 1 }, 0)),
    `Invalid argument to RateLimiterService.reserve: "cost" ${CALL_COST}, got 0`,
  ],
  [
    'MemoryStore: a key twice with different rules',
    memory((m) =>
      m.consume([
        { key: 'k', policy: 'p', rule: TB, cost: 1 },
        { key: 'k', policy: 'q', rule: { ...TB, burst: 6 }, cost: 1 },
      ]),
    ),
    'Invalid argument to MemoryStore.consume: requests[0] and requests[1] are for the same key "k" with a different rule; a key is one bucket, decided once per call: give each key once',
  ],
  [
    'MemoryStore: a key twice with different costs',
    memory((m) =>
      m.peek([
        { key: 'k', policy: 'p', rule: TB, cost: 1 },
        { key: 'j', policy: 'p', rule: TB, cost: 1 },
        { key: 'k', policy: 'p', rule: TB, cost: 2 },
      ]),
    ),
    'Invalid argument to MemoryStore.peek: requests[0] and requests[2] are for the same key "k" with a different cost; a key is one bucket, decided once per call: give each key once',
  ],

  // the simulator's command line: its own flags, and policies validated as @RateLimit validates them
  ...simulatorRows(),

  // last: from here on, ioredis cannot be imported
  [
    'redis without the ioredis package',
    async () => {
      jest.unstable_mockModule('ioredis', () => {
        throw new Error("Cannot find package 'ioredis'");
      });
      return thrown(() => StoreOwner.open({ redis: 'redis://localhost:6379' }));
    },
    `${OPTION} "redis": needs the "ioredis" package: npm install ioredis, got "redis://localhost:6379"`,
  ],
];

describe('validation messages', () => {
  it.each(ROWS)('%s', async (_what, produce, message) => {
    expect(await produce()).toBe(message);
  });
});

describe('what validation lets through', () => {
  it('makes a default name fit for keys and headers instead of refusing it', async () => {
    @Controller('cats')
    class KätzchenController {
      @RateLimit({ rps: 1 })
      @Get()
      'find all'() {
        return [];
      }
    }
    const moduleRef = await Test.createTestingModule({
      imports: [RateLimitModule.forRoot()],
      controllers: [KätzchenController],
    }).compile();
    await moduleRef.init();
    const [route] = moduleRef.get(RoutePolicies).forRoute(KätzchenController, KätzchenController.prototype['find all']);
    expect(route.name).toBe('K%C3%A4tzchenController.find%20all');
    await moduleRef.close();
  });

  it('takes every limit at its bounds', async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [
        RateLimitModule.forRoot({
          prefix: 'p'.repeat(64),
          timeout: 2 ** 31 - 1,
          headers: [],
          policies: [
            { name: 'n'.repeat(64), rps: 1e6, burst: 1e6, cost: 1e6 },
            { name: 'yearly', limit: 1e6 * 365 * 86_400, window: '365d', cost: 'header:x-weight', defaultCost: 5 },
            { name: 'slow', rps: 1 / (364 * 86_400), key: ['header:x-tenant', 'ip'] },
          ],
        }),
      ],
    }).compile();
    await moduleRef.init();
    await moduleRef.close();
  });
});

/**
 * Index just past the string literal or template that opens at `i` (expressions in a template,
 * with their own literals, skipped).
 */
function skipLiteral(text: string, i: number): number {
  const quote = text[i];
  for (let j = i + 1; j < text.length; j++) {
    if (text[j] === '\\') j++;
    else if (text[j] === quote) return j + 1;
    else if (quote === '`' && text.startsWith('${', j)) j = skipCode(text, j + 2) - 1;
  }
  throw new Error(`unterminated literal at ${i}`);
}

/** Index just past the `}` that closes code opening at `i`. */
function skipCode(text: string, i: number): number {
  let depth = 0;
  for (let j = i; j < text.length; j++) {
    const c = text[j];
    if (c === "'" || c === '"' || c === '`') j = skipLiteral(text, j) - 1;
    else if ('([{'.includes(c)) depth++;
    else if (c === '}' && depth === 0) return j + 1;
    else if (')]}'.includes(c)) depth--;
  }
  throw new Error(`unclosed code at ${i}`);
}

/** The last non-empty argument of the call whose arguments open at `i`. */
function lastArgument(text: string, i: number): string {
  const args: string[] = [];
  let from = i;
  let depth = 0;
  for (let j = i; j < text.length; j++) {
    const c = text[j];
    if (c === "'" || c === '"' || c === '`') j = skipLiteral(text, j) - 1;
    else if ('([{'.includes(c)) depth++;
    else if (depth === 0 && (c === ',' || c === ')')) {
      args.push(text.slice(from, j).trim());
      from = j + 1;
      if (c === ')') return args.filter(Boolean).at(-1) ?? '';
    } else if (')]}'.includes(c)) depth--;
  }
  throw new Error(`unclosed call at ${i}`);
}

/** A literal as a pattern: its text, any `${...}` standing for anything. */
function toPattern(literal: string): RegExp {
  const parts: string[] = [];
  let text = '';
  for (let j = 1; j < literal.length - 1; j++) {
    if (literal[j] === '\\') text += literal[++j];
    else if (literal[0] === '`' && literal.startsWith('${', j)) {
      parts.push(text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), '[\\s\\S]*?');
      text = '';
      j = skipCode(literal, j + 2) - 1;
    } else text += literal[j];
  }
  parts.push(text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  return new RegExp(parts.join(''));
}

/** Every literal passed last to a validation call: `fail(...)`, `conflict(...)`, `invalid*(...)`. */
function passedLiterals(source: string): string[] {
  const literals: string[] = [];
  for (const call of source.matchAll(/\b(?:fail|conflict|invalid\w*)\(/g)) {
    const last = lastArgument(source, call.index + call[0].length);
    if (/^['"`]/.test(last) && skipLiteral(last, 0) === last.length) literals.push(last);
  }
  return literals;
}

describe('the table above', () => {
  const messages = ROWS.map(([, , message]) => message);
  const uncovered = (literals: string[]) =>
    literals.filter((literal) => !messages.some((m) => toPattern(literal).test(m)));

  it('has a row for every message text passed to a validation call in lib/', () => {
    const files = readdirSync(LIB, { recursive: true, encoding: 'utf8' }).filter((file) => file.endsWith('.ts'));
    const literals = files.flatMap((file) => passedLiterals(readFileSync(join(LIB, file), 'utf8')));
    // a scanner that stopped finding calls would pass everything
    expect(literals.length).toBeGreaterThan(50);
    expect(uncovered(literals)).toEqual([]);
  });

  it('has a row for every validation message factory (invalid*, unknown*) in rate-limit.messages.ts', () => {
    const source = readFileSync(join(LIB, 'rate-limit.messages.ts'), 'utf8');
    const factories = [...source.matchAll(/^export function ((?:invalid|unknown)\w*)\([\s\S]*?\n\}/gm)];
    expect(factories.length).toBeGreaterThanOrEqual(9);
    for (const [body, name] of factories) {
      const returned = /return (`)/.exec(body);
      const literals = [
        ...passedLiterals(body),
        ...(returned ? [body.slice(returned.index + 7, skipLiteral(body, returned.index + 7))] : []),
      ];
      expect({ name, found: literals.length > 0 }).toEqual({ name, found: true });
      expect({ name, uncovered: uncovered(literals) }).toEqual({ name, uncovered: [] });
    }
  });

  it("has a row for every text of rate-limit.messages.ts's policy section", () => {
    const source = readFileSync(join(LIB, 'rate-limit.messages.ts'), 'utf8');
    // from its heading to the next one (a comment at the start of a line, after an empty one)
    const start = source.indexOf('\n// Policies');
    const section = source.slice(start, source.indexOf('\n\n// ', start));
    const factories = [...section.matchAll(/^export function (\w+)\([\s\S]*?\n\}/gm)];
    // a section that lost its marker, or factories that moved out of it, would pass everything
    expect(factories.length).toBeGreaterThan(50);
    for (const [body, name] of factories) {
      const literals = literalsIn(body.slice(body.indexOf('{')));
      expect({ name, found: literals.length > 0 }).toEqual({ name, found: true });
      expect({ name, uncovered: uncovered(literals) }).toEqual({ name, uncovered: [] });
    }
  });

  it('has a row for every policy option an algorithm refuses, saying why', () => {
    const refusals = ALGORITHMS.flatMap((algorithm) =>
      Object.entries(ALGORITHM_DESCRIPTORS[algorithm].refuses ?? {}).map(([option, why]) =>
        optionNotFor(option, algorithm, why),
      ),
    );
    expect(refusals.length).toBeGreaterThan(0);
    expect(refusals.filter((refusal) => !messages.some((m) => m.endsWith(refusal)))).toEqual([]);
  });
});

/** Every string and template literal of `code` (a template's own, not those in its expressions). */
function literalsIn(code: string): string[] {
  const literals: string[] = [];
  for (let i = 0; i < code.length; i++) {
    if (code[i] !== "'" && code[i] !== '"' && code[i] !== '`') continue;
    const end = skipLiteral(code, i);
    literals.push(code.slice(i, end));
    i = end - 1;
  }
  return literals;
}
