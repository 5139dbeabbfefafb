import { randomUUID } from 'node:crypto';
import type { EventEmitter } from 'node:events';
import type { IncomingMessage } from 'node:http';
import { expect, jest } from '@jest/globals';
import { Module, type Type, UseGuards } from '@nestjs/common';
import { type OnGatewayConnection, MessageBody, SubscribeMessage, WebSocketGateway } from '@nestjs/websockets';
import { Redis } from 'ioredis';
import {
  MemoryStore,
  RateLimit,
  RateLimitGuard,
  RateLimiterService,
  RateLimitModule,
  type RateLimitModuleOptions,
  type RateLimitPolicy,
  type RateLimitStore,
  RedisStore,
} from '../../lib/index.js';
import { RateLimitContexts } from '../../lib/contexts/rate-limit-contexts.js';
import { WsRateLimitContext } from '../../lib/contexts/ws.context.js';
import { ManualClock } from '../../lib/testing/manual-clock.js';
import {
  costExceedsBurst,
  gatewayForwardedFor,
  limitExceeded,
  storeUnavailable,
} from '../../lib/rate-limit.messages.js';
import { connectTestRedis } from '../support/redis/test-redis.js';
import { GATEWAY_ADAPTERS, type GatewayApp, type GatewayClient, startGatewayApp } from '../support/gateway-apps.js';
import { RateLimiter } from '../../lib/limiter/rate-limiter.js';

/** One token per 10 000 s: a bucket emptied in a test stays empty, and says so, for the rest of it. */
const TINY = 0.0001;
/** Seconds until an emptied bucket of rate `TINY` admits one more (within a test's first 10 s). */
const EMPTIED = 10_000;
const LIMITED: RateLimitPolicy = { name: 'limited', rps: TINY, burst: 2, key: ['user', 'api-key'] };
/** Four an hour, queued: the first passes at once, the second waits 15 minutes. */
const QUEUED: RateLimitPolicy = { name: 'queued', algorithm: 'leaky_bucket', limit: 4, window: '1h', key: 'ip' };

/** What a tenant-keyed message carries; a hostile client sends anything else. */
interface TenantMessage {
  tenant: { id: string };
  items: unknown[];
}

/** A connecting client as `signIn` sees it: a socket.io `Socket` (its handshake, its `data`), or a ws `WebSocket`. */
type ConnectingClient =
  | { handshake: { headers: IncomingMessage['headers'] }; data: { user?: { id: unknown } } }
  | { handshake?: undefined; user?: { id: unknown } };

/** A user as an app's own auth would set it at connection: socket.io's `client.data.user`, ws's `client.user`. */
function signIn(client: ConnectingClient, request: IncomingMessage | undefined): void {
  const id = (client.handshake?.headers ?? request?.headers)?.['x-user'];
  if (id === undefined) return;
  if (client.handshake !== undefined) client.data.user = { id };
  else client.user = { id };
}

/** Handlers that count their runs and answer `reply` with the count. */
@WebSocketGateway()
class LimitedGateway implements OnGatewayConnection<ConnectingClient> {
  readonly ran = { limited: 0, costly: 0, tenant: 0, queued: 0, free: 0 };

  handleConnection(client: ConnectingClient, request?: IncomingMessage): void {
    signIn(client, request);
  }

  @RateLimit(LIMITED)
  @SubscribeMessage('limited')
  limited() {
    return { event: 'reply', data: { handler: 'limited', count: ++this.ran.limited } };
  }

  // a constant cost over the burst is refused at validation: one read from the message is known only then
  @RateLimit({
    name: 'costly',
    rps: TINY,
    burst: 2,
    cost: (context) => context.switchToWs().getData<{ weight: number }>().weight,
  })
  @SubscribeMessage('costly')
  costly() {
    return { event: 'reply', data: { handler: 'costly', count: ++this.ran.costly } };
  }

  // key and cost read the payload: a payload without them makes both throw
  @RateLimit({
    name: 'tenant',
    rps: TINY,
    burst: 5,
    key: (context) => context.switchToWs().getData<TenantMessage>().tenant.id,
    cost: (context) => context.switchToWs().getData<TenantMessage>().items.length,
  })
  @SubscribeMessage('tenant')
  tenant() {
    return { event: 'reply', data: { handler: 'tenant', count: ++this.ran.tenant } };
  }

  @RateLimit(QUEUED)
  @SubscribeMessage('queued')
  queued() {
    return { event: 'reply', data: { handler: 'queued', count: ++this.ran.queued } };
  }

  @SubscribeMessage('free')
  free(@MessageBody() data: unknown) {
    return { event: 'reply', data: { handler: 'free', count: ++this.ran.free, echo: data } };
  }
}

/** The same handler on a gateway that also names the guard itself (as NestJS 11 needs). */
@UseGuards(RateLimitGuard)
@WebSocketGateway()
class GuardedGateway {
  readonly ran = { limited: 0 };

  @RateLimit(LIMITED)
  @SubscribeMessage('limited')
  limited() {
    return { event: 'reply', data: { handler: 'limited', count: ++this.ran.limited } };
  }
}

let redis: Redis;
beforeAll(async () => {
  redis = await connectTestRedis();
});
afterAll(async () => {
  await redis.quit();
});

const suitePrefix = `rl-e2e-gateway-${randomUUID()}:`;
const STORES: Array<[string, () => RateLimitStore]> = [
  ['memory store', () => new MemoryStore()],
  ['Redis store', () => new RedisStore({ client: redis })],
];
const apiKey = () => `key-${randomUUID()}`;
/** Apps started so far: each has a prefix of its own, since ws clients on loopback all share one address. */
let apps = 0;

/** A reply of `handler`, its `count`-th run. */
const reply = (handler: string, count: number) => ({
  event: 'reply',
  data: expect.objectContaining({ handler, count }),
});
/** The `exception` event of a refusal by `policy` that frees up in `retryAfter` seconds. */
const refused = (policy: string, retryAfter: number) => ({
  event: 'exception',
  data: { status: 'error', statusCode: 429, message: limitExceeded(policy, retryAfter), policy, retryAfter },
});

/** Sends `event` `count` times, one after the other, and returns what each got. */
async function askTimes(client: GatewayClient, event: string, count: number, data?: unknown) {
  const answers = [];
  for (let i = 0; i < count; i++) answers.push(await client.ask(event, data));
  return answers;
}

describe.each(GATEWAY_ADAPTERS)('a gateway on %s', (adapter) => {
  describe.each(STORES)('with the %s', (_storeName, makeStore) => {
    let running: GatewayApp | undefined;

    /** An app with `gateway` and a prefix of its own. */
    async function start(gateway: Type, options: RateLimitModuleOptions = {}): Promise<GatewayApp> {
      @Module({
        imports: [RateLimitModule.forRoot({ store: makeStore(), prefix: `${suitePrefix}${++apps}:`, ...options })],
        providers: [gateway],
      })
      class AppModule {}
      running = await startGatewayApp(AppModule, adapter);
      return running;
    }
    afterEach(async () => {
      await running?.close();
      running = undefined;
    });

    it('refuses the third message of a burst of 2 under the global guard alone; the connection stays open', async () => {
      const gateway = await start(LimitedGateway);
      const client = await gateway.connect({ headers: { 'x-api-key': apiKey() } });
      // the gateway seam is imported on the first message
      const contexts = gateway.app.get(RateLimitContexts);
      expect(contexts.for('ws')).toBeUndefined();

      expect(await askTimes(client, 'limited', 3)).toEqual([
        reply('limited', 1),
        reply('limited', 2),
        refused('limited', EMPTIED),
      ]);
      expect(gateway.app.get(LimitedGateway).ran.limited).toBe(2);
      expect(contexts.for('ws')).toBeInstanceOf(WsRateLimitContext);

      // the connection answers afterwards: another handler runs, the limited one stays refused
      expect(client.open).toBe(true);
      expect(await client.ask('free')).toEqual(reply('free', 1));
      expect(await client.ask('limited')).toEqual(refused('limited', EMPTIED));
      expect(gateway.app.get(LimitedGateway).ran.limited).toBe(2);
      // a refusal is an answer, not an error: Nest logs nothing for it
      expect(gateway.logged.error).toEqual([]);
    });

    it('limits nothing without the global guard (guard: false): it was the global guard that refused', async () => {
      const gateway = await start(LimitedGateway, { guard: false });
      const client = await gateway.connect({ headers: { 'x-api-key': apiKey() } });
      expect(await askTimes(client, 'limited', 3)).toEqual([
        reply('limited', 1),
        reply('limited', 2),
        reply('limited', 3),
      ]);
    });

    it('charges a message once with the global guard and @UseGuards(RateLimitGuard) on the gateway together', async () => {
      const gateway = await start(GuardedGateway);
      const client = await gateway.connect({ headers: { 'x-api-key': apiKey() } });
      expect(await askTimes(client, 'limited', 3)).toEqual([
        reply('limited', 1),
        reply('limited', 2),
        refused('limited', EMPTIED),
      ]);
      expect(gateway.app.get(GuardedGateway).ran.limited).toBe(2);
      expect(gateway.logged.error).toEqual([]);
    });

    it('limits with @UseGuards(RateLimitGuard) alone (guard: false), as on NestJS 11', async () => {
      const gateway = await start(GuardedGateway, { guard: false });
      const client = await gateway.connect({ headers: { 'x-api-key': apiKey() } });
      expect(await askTimes(client, 'limited', 3)).toEqual([
        reply('limited', 1),
        reply('limited', 2),
        refused('limited', EMPTIED),
      ]);
    });

    it('limits with runAs: interceptor', async () => {
      const gateway = await start(LimitedGateway, { runAs: 'interceptor' });
      const client = await gateway.connect({ headers: { 'x-api-key': apiKey() } });
      expect(await askTimes(client, 'limited', 3)).toEqual([
        reply('limited', 1),
        reply('limited', 2),
        refused('limited', EMPTIED),
      ]);
      expect(gateway.app.get(LimitedGateway).ran.limited).toBe(2);
    });

    it('gives each user its own bucket: client.data.user (socket.io) or client.user (ws), set at connection', async () => {
      const gateway = await start(LimitedGateway);
      const ann = await gateway.connect({ headers: { 'x-user': 'ann' } });
      const bob = await gateway.connect({ headers: { 'x-user': 'bob' } });
      expect(await askTimes(ann, 'limited', 3)).toEqual([
        reply('limited', 1),
        reply('limited', 2),
        refused('limited', EMPTIED),
      ]);
      expect(await askTimes(bob, 'limited', 2)).toEqual([reply('limited', 3), reply('limited', 4)]);
      // a second connection of the same user shares its bucket
      const annAgain = await gateway.connect({ headers: { 'x-user': 'ann' } });
      expect(await annAgain.ask('limited')).toEqual(refused('limited', EMPTIED));
    });

    it('limits a client that gives no user or key by its remote address', async () => {
      const gateway = await start(LimitedGateway);
      const client = await gateway.connect();
      expect(await askTimes(client, 'limited', 2)).toEqual([reply('limited', 1), reply('limited', 2)]);
      const [byAddress] = await gateway.app.get(RateLimiterService).peek('ip:127.0.0.1', LIMITED);
      expect(byAddress.remaining).toBe(0);
    });

    if (adapter === 'socket.io') {
      it('gives each API key in the handshake headers its own bucket', async () => {
        const gateway = await start(LimitedGateway);
        const first = await gateway.connect({ headers: { 'x-api-key': apiKey() } });
        const second = await gateway.connect({ headers: { 'x-api-key': apiKey() } });
        expect(await askTimes(first, 'limited', 3)).toEqual([
          reply('limited', 1),
          reply('limited', 2),
          refused('limited', EMPTIED),
        ]);
        expect(await askTimes(second, 'limited', 2)).toEqual([reply('limited', 3), reply('limited', 4)]);
      });

      it('keys by the connection address, not X-Forwarded-For, and warns once that the header was ignored', async () => {
        const gateway = await start(LimitedGateway);
        const client = await gateway.connect({ headers: { 'x-forwarded-for': '203.0.113.9' } });
        expect(await askTimes(client, 'limited', 2)).toEqual([reply('limited', 1), reply('limited', 2)]);
        const [byAddress] = await gateway.app.get(RateLimiterService).peek('ip:127.0.0.1', LIMITED);
        expect(byAddress.remaining).toBe(0);
        expect(gateway.logged.warn).toEqual([gatewayForwardedFor('127.0.0.1')]);
      });
    } else {
      it('reads no API key (ws keeps no handshake headers): clients on one address share its bucket', async () => {
        const gateway = await start(LimitedGateway);
        const first = await gateway.connect({ headers: { 'x-api-key': apiKey() } });
        const second = await gateway.connect({ headers: { 'x-api-key': apiKey() } });
        expect(await askTimes(first, 'limited', 2)).toEqual([reply('limited', 1), reply('limited', 2)]);
        expect(await second.ask('limited')).toEqual(refused('limited', EMPTIED));
      });
    }

    it('refuses a message whose cost exceeds the burst with retryAfter: null, and never runs it', async () => {
      const gateway = await start(LimitedGateway);
      const client = await gateway.connect();
      expect(await client.ask('costly', { weight: 3 })).toEqual({
        event: 'exception',
        data: {
          status: 'error',
          statusCode: 429,
          message: costExceedsBurst('costly', 3, 2),
          policy: 'costly',
          retryAfter: null,
        },
      });
      expect(gateway.app.get(LimitedGateway).ran.costly).toBe(0);
      expect(await client.ask('costly', { weight: 2 })).toEqual(reply('costly', 1));
    });

    it('survives hostile messages: the connection stays open, refused or failed messages never run their handler', async () => {
      const gateway = await start(LimitedGateway);
      const client = await gateway.connect();
      const ran = gateway.app.get(LimitedGateway).ran;

      // no answer to what no handler takes (ws: not JSON, not a message, an unknown event): the next
      // thing the client reads is the answer to the message after them
      for (const frame of [
        'not json{',
        '"a string"',
        'null',
        '[1,2]',
        '{"event":"nope","data":1}',
        '{"event":{"toString":1}}',
      ]) {
        client.sendFrame(frame);
      }
      client.send('constructor', { a: 1 });
      expect(await client.ask('free', 'after')).toEqual(reply('free', 1));

      // a payload that makes the policy's key function or cost function throw: Nest's error answer,
      // the handler does not run
      const failed = {
        event: 'exception',
        data: expect.objectContaining({ status: 'error', message: 'Internal server error' }),
      };
      for (const data of [
        null,
        42,
        'x',
        { tenant: null },
        { tenant: { id: 'acme' } },
        { tenant: { id: 'acme' }, items: null },
      ]) {
        expect(await client.ask('tenant', data)).toEqual(failed);
      }
      expect(ran.tenant).toBe(0);
      // each is the app's key or cost function failing: Nest logs it, as it would for HTTP (a 500)
      expect(gateway.logged.error).toEqual(Array(6).fill(expect.any(TypeError)));

      // a large payload (512 KiB) is limited like any other
      const large = {
        tenant: { id: 'x'.repeat(256 * 1024) },
        items: Array.from({ length: 2 }, () => 'y'.repeat(128 * 1024)),
      };
      expect(await askTimes(client, 'tenant', 3, large)).toEqual([
        reply('tenant', 1),
        reply('tenant', 2),
        { event: 'exception', data: expect.objectContaining({ statusCode: 429, policy: 'tenant' }) },
      ]);
      expect(ran.tenant).toBe(2);

      expect(client.open).toBe(true);
      expect(await client.ask('free')).toEqual(reply('free', 2));
      const another = await gateway.connect();
      expect(await another.ask('free')).toEqual(reply('free', 3));
    });

    it('gives back the turn of a leaky_bucket message whose client disconnects while it waits', async () => {
      const gateway = await start(LimitedGateway);
      const limiter = gateway.app.get(RateLimiterService);
      const waits = watchWaits(gateway.app.get(RateLimiter));
      const client = await gateway.connect();

      // the first passes at once; the second waits its turn, 15 minutes away, and its client leaves
      expect(await client.ask('queued')).toEqual(reply('queued', 1));
      client.send('queued');
      const { waiting } = await waits.next();
      const [queuedTwo] = await limiter.peek('ip:127.0.0.1', QUEUED);
      expect(queuedTwo.remaining).toBe(2);
      await client.close();

      // the wait ends with the connection, its charge given back: the queue holds the first only
      await expect(waiting).rejects.toBeDefined();
      const [queuedOne] = await limiter.peek('ip:127.0.0.1', QUEUED);
      expect(queuedOne.remaining).toBe(3);
      expect(gateway.app.get(LimitedGateway).ran.queued).toBe(1);
      expect(gateway.logged.error).toEqual([]);
    });
  });
});

describe.each(GATEWAY_ADAPTERS)('a gateway on %s with a bad policy', (adapter) => {
  it('fails start, naming the gateway and the handler', async () => {
    @WebSocketGateway()
    class BadGateway {
      @RateLimit({ rps: 1, burst: 2, cost: 3 })
      @SubscribeMessage('take')
      take() {
        return 'taken';
      }
    }
    @Module({ imports: [RateLimitModule.forRoot()], providers: [BadGateway] })
    class AppModule {}
    await expect(startGatewayApp(AppModule, adapter)).rejects.toThrow(
      /^Invalid @RateLimit policy on BadGateway\.take: "cost" 3 is more than "burst" 2/,
    );
  });
});

describe.each(GATEWAY_ADAPTERS)('a gateway on %s whose store fails', (adapter) => {
  // a real Redis client with nowhere to connect: every command fails at once
  const broken = new Redis({
    host: '127.0.0.1',
    port: 1,
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  let running: GatewayApp | undefined;
  afterAll(async () => {
    await running?.close();
    // refused and not retried, it has ended; disconnect() would arm a 2 s timer for a socket long closed
    if (broken.status !== 'end') broken.disconnect();
  });

  it.each([
    [
      'closed',
      { event: 'exception', data: { status: 'error', statusCode: 503, message: storeUnavailable, retryAfter: 1 } },
    ],
    ['open', reply('limited', 1)],
  ] as const)('answers under failMode: %s', async (failMode, answer) => {
    @Module({ imports: [RateLimitModule.forRoot({ redis: broken, failMode })], providers: [LimitedGateway] })
    class AppModule {}
    await running?.close();
    running = await startGatewayApp(AppModule, adapter);
    const client = await running.connect();
    expect(await client.ask('limited')).toEqual(answer);
    expect(client.open).toBe(true);
  });
});

/** Twenty an hour, queued: the first passes at once, the next wait 3 minutes apart. */
const BACKLOG: RateLimitPolicy = { name: 'backlog', algorithm: 'leaky_bucket', limit: 20, window: '1h', key: 'ip' };

/** A queued handler on a gateway that keeps its connections, to count the listeners on them. */
@WebSocketGateway()
class BacklogGateway implements OnGatewayConnection {
  readonly connections: EventEmitter[] = [];
  ran = 0;

  handleConnection(client: EventEmitter): void {
    this.connections.push(client);
  }

  @RateLimit(BACKLOG)
  @SubscribeMessage('backlog')
  backlog() {
    return { event: 'reply', data: { handler: 'backlog', count: ++this.ran } };
  }
}

describe.each(GATEWAY_ADAPTERS)(
  'a gateway on %s with many messages of one connection in a leaky_bucket queue',
  (adapter) => {
    it('watches the connection with one listener however many wait, and with none once they are done', async () => {
      const warnings: string[] = [];
      const warned = (warning: Error) => void warnings.push(`${warning.name}: ${warning.message}`);
      process.on('warning', warned);
      const clock = new ManualClock();
      @Module({
        imports: [RateLimitModule.forRoot({ store: new MemoryStore({ clock }) })],
        providers: [BacklogGateway],
      })
      class AppModule {}
      const gateway = await startGatewayApp(AppModule, adapter);
      try {
        const waits = watchWaits(gateway.app.get(RateLimiter));
        const client = await gateway.connect();
        expect(await client.ask('backlog')).toEqual(reply('backlog', 1));
        const [connection] = gateway.app.get(BacklogGateway).connections;
        const event = adapter === 'ws' ? 'close' : 'disconnect';
        const unwatched = connection.listenerCount(event);

        // 15 wait their turns, 3 to 45 minutes away: one listener watches the connection for them all
        for (let i = 0; i < 15; i++) client.send('backlog');
        for (let i = 0; i < 15; i++) await waits.next();
        expect(connection.listenerCount(event)).toBe(unwatched + 1);
        /** The next `count` replies' counts, in order. */
        const replies = async (count: number) => {
          const counts = [];
          for (let i = 0; i < count; i++) counts.push(((await client.next()).data as { count: number }).count);
          return counts.sort((a, b) => a - b);
        };

        // five leave the queue: the connection stays watched for the ten left, and by one listener
        clock.advance('15m');
        expect(await replies(5)).toEqual([2, 3, 4, 5, 6]);
        expect(connection.listenerCount(event)).toBe(unwatched + 1);
        // the last leave: nothing waits, nothing watches
        clock.advance('30m');
        expect(await replies(10)).toEqual([7, 8, 9, 10, 11, 12, 13, 14, 15, 16]);
        expect(connection.listenerCount(event)).toBe(unwatched);
        await new Promise((resolve) => setImmediate(resolve));
        expect(warnings).toEqual([]);
      } finally {
        process.off('warning', warned);
        await gateway.close();
      }
    });
  },
);

/** Watches the engine's waits (`RateLimiter.wait`, as the guard asks it), calling through: resolves each call's promise as it is made. */
function watchWaits(limiter: RateLimiter) {
  const original = limiter.wait.bind(limiter);
  const made: Promise<void>[] = [];
  const readers: Array<(waiting: Promise<void>) => void> = [];
  jest.spyOn(limiter, 'wait').mockImplementation((...args: Parameters<RateLimiter['wait']>) => {
    const waiting = original(...args);
    const reader = readers.shift();
    if (reader === undefined) made.push(waiting);
    else reader(waiting);
    return waiting;
  });
  return {
    /** The next call's promise (wrapped, so that a rejection is the test's to read). */
    next: (): Promise<{ waiting: Promise<void> }> =>
      new Promise((resolve) => {
        const waiting = made.shift();
        if (waiting !== undefined) resolve({ waiting });
        else readers.push((next) => resolve({ waiting: next }));
      }),
  };
}
