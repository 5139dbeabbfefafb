/**
 * A request's end, whichever way it comes, gives back the `concurrency` slot its request took, or
 * it took none: one slot per client (`limit: 1`), on the memory store and a real Redis, and after
 * each way a request ends the next requests of the same client are admitted one after another.
 *
 * - HTTP (Express, Fastify): a client that hangs up while the guard still decides, its key
 *   function pending or Redis's answer held back (a gate between the app and Redis,
 *   `test/support/gate-proxy.ts`); a release that meets Redis cut off is tried again until Redis is
 *   back;
 * - TCP messages: one refused by a guard that runs after the module's, or answered by a global
 *   interceptor from its cache without its handler, takes no slot;
 * - GraphQL (Apollo): a field a later guard refuses gives its slot back with its response; a
 *   module-wide slot is held until the operation's response ends, not its first field's.
 *
 * The apps are in `test/support/request-end-apps.ts`. A test waits for events (a key asked, a
 * handler entered, a response closed, a release landed: `watchReleases`), never for time.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { request } from 'node:http';
import { Module } from '@nestjs/common';
import { Redis } from 'ioredis';
import { RateLimitModule, type RateLimitModuleOptions, RedisStore } from '../../lib/index.js';
import { ADAPTERS, read, startApp, type TestApp } from '../support/app.js';
import {
  type GraphqlAnswer,
  type GraphqlTestApp,
  holds,
  newId,
  settledCount,
  startGraphql,
  STORES,
  type StoreName,
  storeOptions,
  watchReleases,
} from '../support/concurrency-apps.js';
import { clientThrough, type GateProxy, startGateProxy } from '../support/gate-proxy.js';
import { nextFailedRelease } from '../support/release-events.js';
import { startMicroservice, type TestMicroservice } from '../support/microservice-apps.js';
import { testRedisUrl, useTestRedis } from '../support/redis/test-redis.js';
import {
  askedKeys,
  FastAndSlowResolver,
  GuardedResolver,
  oneSlot,
  OneSlotController,
  type WorkMessage,
  workModule,
} from '../support/request-end-apps.js';

const redis = useTestRedis();

/** A fresh client: a test's slot is its own. */
const newClient = (): string => `client-${randomUUID()}`;

/**
 * Sends `count` requests one after another with `send`, each once the slot of the one before is
 * back (an answer other than `admitted` took none): what each answered.
 */
async function oneByOne<T>(
  count: number,
  send: () => Promise<T>,
  admitted: T,
  releases: ReturnType<typeof watchReleases>,
): Promise<T[]> {
  const answers: T[] = [];
  let released = releases.count;
  for (let i = 0; i < count; i++) {
    const answer = await send();
    answers.push(answer);
    if (answer === admitted) await releases.released(++released);
  }
  return answers;
}

// ---------------------------------------------------------------------------------------------
// HTTP

/** A GET with `headers`, sent with node:http so that the test can hang up whenever it likes. */
function hangingGet(url: string, path: string, headers: Record<string, string>) {
  const { hostname, port } = new URL(url);
  const sent = request({ host: hostname, port, path, agent: false, headers });
  // the test hangs up on purpose: the error that follows is expected
  sent.on('error', () => undefined);
  sent.end();
  return sent;
}

/** The redis-server's port, for a gate in front of it. */
const redisPort = (): number => Number(new URL(testRedisUrl()).port);

describe.each(ADAPTERS)('request ends on %s', (adapter) => {
  /** Starts `OneSlotController` under the store of `options`; a key function or Redis may keep the guard 10 s. */
  async function startHttp(options: RateLimitModuleOptions) {
    @Module({ imports: [RateLimitModule.forRoot({ ...options, timeout: 10_000 })], controllers: [OneSlotController] })
    class AppModule {}
    const http = await startApp(AppModule, adapter);
    return { http, releases: watchReleases(http.app) };
  }

  /** The client's next `count` requests, one by one: their statuses. */
  const nextRequests = (http: TestApp, releases: ReturnType<typeof watchReleases>, client: string, count: number) =>
    oneByOne(count, async () => (await read(await http.get('/exports', { 'x-client': client }))).status, 200, releases);

  /**
   * Sends a request of `client` (its key answered by the test when `later`), and hangs up once
   * the guard has asked its key; resolves once its server has seen it close, with what the guard
   * asked. What the test holds (the key function's answer, Redis's) keeps the verdict until then.
   */
  async function hangUpWhileDeciding(http: TestApp, client: string, later: boolean) {
    const id = newId();
    const headers = { 'x-client': client, 'x-id': id, ...(later ? { 'x-key': 'later' } : {}) };
    const sent = hangingGet(http.url, '/exports', headers);
    const asked = await askedKeys.asked(id);
    sent.destroy();
    if (!asked.response.destroyed) await once(asked.response, 'close');
    return asked;
  }

  describe.each(STORES)('%s store', (storeName: StoreName) => {
    let http: TestApp;
    let releases: ReturnType<typeof watchReleases>;

    beforeAll(async () => ({ http, releases } = await startHttp(storeOptions(storeName, redis))));
    afterAll(() => http.close());

    it('a client that hangs up while its key function is pending gives its slot back once decided: the next 3 requests are admitted', async () => {
      const client = newClient();
      const released = releases.count;
      const asked = await hangUpWhileDeciding(http, client, true);
      asked.answer(client);
      await releases.released(released + 1);
      expect(await nextRequests(http, releases, client, 3)).toEqual([200, 200, 200]);
    });
  });

  describe('Redis behind a gate', () => {
    let gate: GateProxy;
    let client: Redis;
    let http: TestApp;
    let releases: ReturnType<typeof watchReleases>;

    beforeAll(async () => {
      gate = await startGateProxy(redisPort());
      client = await clientThrough(gate);
      ({ http, releases } = await startHttp({
        store: new RedisStore({ client }),
        prefix: `rl-e2e-ends-${randomUUID()}:`,
      }));
    });
    afterAll(async () => {
      await http.close();
      client.disconnect();
      await gate.close();
    });

    it("a client that hangs up while Redis's answer is held back gives its slot back once it comes: the next 3 requests are admitted", async () => {
      const key = newClient();
      const released = releases.count;
      gate.hold();
      await hangUpWhileDeciding(http, key, false);
      gate.open();
      await releases.released(released + 1);
      expect(await nextRequests(http, releases, key, 3)).toEqual([200, 200, 200]);
    });

    it('a release that meets Redis cut off is tried again until Redis is back: the slot is free then, and the next 3 requests are admitted', async () => {
      const key = newClient();
      const id = newId();
      const released = releases.count;
      const answer = http.get(`/exports/held?id=${id}`, { 'x-client': key });
      await holds.entered(id);
      gate.cut();
      const failed = nextFailedRelease();
      holds.end(id);
      expect((await answer).status).toBe(200);
      expect(await failed).toMatchObject({ policies: ['exports'], outcome: 'failed' });
      gate.open();
      await releases.released(released + 1);
      expect(await nextRequests(http, releases, key, 3)).toEqual([200, 200, 200]);
    });
  });
});

// ---------------------------------------------------------------------------------------------
// TCP

describe.each(STORES)('TCP messages on the %s store', (storeName: StoreName) => {
  let service: TestMicroservice;
  let releases: ReturnType<typeof watchReleases>;

  beforeAll(async () => {
    service = await startMicroservice(workModule(storeOptions(storeName, redis)));
    releases = watchReleases({ get: (type: never) => service.get(type) } as unknown as Parameters<
      typeof watchReleases
    >[0]);
  });
  afterAll(() => service.close());

  /** A message's answer: the handler's, the cache's, 429, or another error. */
  const send = (message: WorkMessage): Promise<unknown> =>
    service
      .send('work', message)
      .catch((error: { statusCode?: number }) => (error?.statusCode === 429 ? 429 : 'error'));

  it.each([
    ['refused by a guard after the module’s', { refuse: true }, 'error'],
    ['answered from a global interceptor’s cache, without its handler', { cached: true }, 'cached'],
  ])('a message %s takes no slot: the next 3 messages are admitted', async (_, flags, first) => {
    const client = newClient();
    expect(await send({ client, ...flags })).toBe(first);
    expect(await oneByOne(3, () => send({ client }), 'done', releases)).toEqual(['done', 'done', 'done']);
  });
});

// ---------------------------------------------------------------------------------------------
// GraphQL

/** The code of an answer's first error, or `'ok'` when it has none. */
const outcomeOf = ({ body }: { body: GraphqlAnswer }): unknown => body.errors?.[0]?.extensions?.code ?? 'ok';

describe.each(STORES)('GraphQL (Apollo) on the %s store', (storeName: StoreName) => {
  let guarded: GraphqlTestApp;
  let operations: GraphqlTestApp;
  let guardedReleases: ReturnType<typeof watchReleases>;
  let operationReleases: ReturnType<typeof watchReleases>;
  /** Held `slow` fields, ended after each test whatever it found. */
  const started: string[] = [];

  beforeAll(async () => {
    guarded = await startGraphql(storeOptions(storeName, redis), [GuardedResolver]);
    operations = await startGraphql(
      { ...storeOptions(storeName, redis), policies: [{ ...oneSlot('header:x-client'), name: 'operations' }] },
      [FastAndSlowResolver],
    );
    guardedReleases = watchReleases(guarded.app);
    operationReleases = watchReleases(operations.app);
  });
  afterEach(() => {
    for (const id of started.splice(0)) holds.end(id);
  });
  afterAll(async () => {
    await guarded.close();
    await operations.close();
  });

  it('a field a guard after the module’s refuses gives its slot back with the response: the next 3 operations are answered', async () => {
    const client = newClient();
    const released = guardedReleases.count;
    expect(outcomeOf(await guarded.post('{ guarded }', { 'x-client': client, 'x-refuse': 'yes' }))).toBe('FORBIDDEN');
    await guardedReleases.released(released + 1);
    const next = () => guarded.post('{ guarded }', { 'x-client': client }).then(outcomeOf);
    expect(await oneByOne(3, next, 'ok', guardedReleases)).toEqual(['ok', 'ok', 'ok']);
  });

  it('a module-wide slot is held until the operation’s response ends: of 5 `{ fast slow }` at once, 1 is answered, 4 refused, 1 slow field in flight', async () => {
    const client = newClient();
    holds.resetMax();
    const released = operationReleases.count;
    const ids = Array.from({ length: 5 }, newId);
    started.push(...ids);
    const answers = ids.map((id) => operations.post(`{ fast slow(id: "${id}") }`, { 'x-client': client }));
    const entered = ids.map((id) => holds.entered(id));
    // 4 refusals answered, or a second slow field running: whichever comes first
    await Promise.race([settledCount(answers, 4), settledCount(entered, 2)]);
    const settled = await Promise.all(answers.map((answer) => Promise.race([answer, Promise.resolve(undefined)])));
    const held = ids.filter((_, i) => settled[i] === undefined);
    expect(held).toHaveLength(1);
    expect(settled.filter((answer) => answer !== undefined).map(outcomeOf)).toEqual(Array(4).fill('RATE_LIMITED'));
    await holds.entered(held[0]);
    expect([holds.inFlight, holds.max]).toEqual([1, 1]);

    holds.end(held[0]);
    expect((await answers[ids.indexOf(held[0])]).body.data).toEqual({ fast: 'fast', slow: held[0] });
    await operationReleases.released(released + 1);
    expect(holds.max).toBe(1);
  });
});
