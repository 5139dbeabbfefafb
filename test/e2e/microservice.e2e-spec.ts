import { randomUUID } from 'node:crypto';
import { Module } from '@nestjs/common';
import { firstValueFrom } from 'rxjs';
import { MemoryStore, RateLimitModule, type RateLimitStore, RedisStore } from '../../lib/index.js';
import { limitExceeded, storeUnavailable } from '../../lib/rate-limit.messages.js';
import { CASE_EPOCH } from '../cases/cases.js';
import {
  ErrorLog,
  FailingStore,
  HybridController,
  keyFunctionSaw,
  RawTcpClient,
  startHybrid,
  startMicroservice,
  type TestMicroservice,
  TenantsController,
  WatchedStore,
} from '../support/microservice-apps.js';
import { ttlsUnder, useTestRedis } from '../support/redis/test-redis.js';

/** A pinned clock: every refusal waits exactly 100 s (rps 0.01), and Redis keys outlive the test (see CASE_EPOCH). */
const T0 = CASE_EPOCH;

/** What a caller of a refused message receives: the error its `send` observable fails with. */
const refused = (policy: string) => ({
  status: 'error',
  statusCode: 429,
  message: limitExceeded(policy, 100),
  policy,
  retryAfter: 100,
});

const redis = useTestRedis();

/** The store under test, made fresh for each app: in memory, or on the test Redis under a prefix of its own. */
const STORES: Record<'memory' | 'redis', () => { store: RateLimitStore; prefix?: string }> = {
  memory: () => ({ store: new MemoryStore({ clock: () => T0 }) }),
  redis: () => ({ store: new RedisStore({ client: redis(), clock: () => T0 }), prefix: `rl-e2e-rpc-${randomUUID()}:` }),
};

describe.each(['memory', 'redis'] as const)('TCP microservice on the %s store', (storeName) => {
  const started: TestMicroservice[] = [];
  afterEach(async () => {
    await Promise.all(started.splice(0).map((service) => service.close()));
    keyFunctionSaw.length = 0;
  });

  /** A microservice of `TenantsController` under `RateLimitModule.forRoot` (its global guard), on a fresh store. */
  async function start(logger: ErrorLog | false = false) {
    const { store, prefix } = STORES[storeName]();
    const watched = new WatchedStore(store);
    @Module({ imports: [RateLimitModule.forRoot({ store: watched, prefix })], controllers: [TenantsController] })
    class MicroserviceModule {}
    const service = await startMicroservice(MicroserviceModule, logger);
    started.push(service);
    return { service, store: watched, prefix };
  }

  it('refuses the third message of a burst of 2: the caller gets the error object, not an Error', async () => {
    const { service } = await start();
    expect(await service.send('shared', {})).toEqual({ ok: true });
    expect(await service.send('shared', {})).toEqual({ ok: true });
    const error = await service.send('shared', {}).catch((error: unknown) => error);
    expect(error).toEqual(refused('shared'));
    expect(error).not.toBeInstanceOf(Error);
  });

  it('shares the bucket among all callers when no key function yields', async () => {
    const { service } = await start();
    const other = await service.connectClient();
    await service.send('shared', {});
    await service.send('shared', {});
    await expect(firstValueFrom(other.send('shared', {}))).rejects.toEqual(refused('shared'));
    // the tenant policy without a tenant in the payload: one bucket for all such callers too
    await service.send('tenant', {});
    await service.send('tenant', { tenant: 42 });
    await expect(firstValueFrom(other.send('tenant', { tenant: '' }))).rejects.toEqual(refused('tenant'));
  });

  it('keys by the tenant in the payload: another tenant passes while one is refused', async () => {
    const { service, prefix } = await start();
    await service.send('tenant', { tenant: 'acme' });
    await service.send('tenant', { tenant: 'acme' });
    await expect(service.send('tenant', { tenant: 'acme' })).rejects.toEqual(refused('tenant'));
    expect(await service.send('tenant', { tenant: 'globex' })).toEqual({ ok: true, payload: 'object' });
    expect(keyFunctionSaw).toEqual([1, 2, 3, 4].map((n) => ({ tenant: n < 4 ? 'acme' : 'globex' })));
    if (prefix !== undefined) expect((await ttlsUnder(redis(), prefix)).size).toBe(2);
  });

  it('drops a refused event: its handler does not run, and nothing is logged for it', async () => {
    const log = new ErrorLog();
    const { service, store } = await start(log);
    for (const n of [1, 2, 3]) await service.emit('audit', { n });
    // the limiter has answered all three, then a whole round trip: a third run would have happened by now
    await store.answered('audit', 3);
    expect(await service.send('audited', {})).toEqual([{ n: 1 }, { n: 2 }]);
    expect(log.errors).toEqual([]);
  });

  it('never crashes on hostile payloads: the key function gets them, and what is not a string yields nothing', async () => {
    const { service } = await start();
    const raw = await RawTcpClient.connect(service.port);
    try {
      const plain: unknown[] = [
        'a string',
        null,
        42,
        true,
        [{ tenant: 'in-an-array' }],
        { tenant: 7 },
        { tenant: ['acme'] },
        { tenant: { name: 'acme' } },
        { tenant: null },
        { tenant: '' },
        { blob: 'x'.repeat(4_000_000) },
      ];
      const hostile = [
        ...plain.map((payload) => JSON.stringify(payload)),
        '{"__proto__": {"tenant": "acme"}}',
        // nested deeper than JSON.stringify or a recursive walk survives
        `${'{"deep":'.repeat(100_000)}{"tenant":"deep"}${'}'.repeat(100_000)}`,
      ];
      const replies = [];
      for (const payload of hostile) replies.push(await raw.send('tenant', payload));
      // none names a tenant: they share one bucket, of which the first two took the burst
      expect(replies.slice(0, 2)).toEqual([
        { id: '1', response: { ok: true, payload: 'string' } },
        { id: '2', response: { ok: true, payload: 'null' } },
      ]);
      for (const reply of replies.slice(2)) expect(reply.err).toEqual(refused('tenant'));
      expect(keyFunctionSaw).toHaveLength(hostile.length);
      expect(keyFunctionSaw.slice(0, plain.length)).toEqual(plain);
      // a huge tenant name is a tenant of its own; the microservice still answers on both connections
      expect((await raw.send('tenant', JSON.stringify({ tenant: 't'.repeat(1_000_000) }))).response).toEqual({
        ok: true,
        payload: 'object',
      });
      expect(await service.send('tenant', { tenant: 'acme' })).toEqual({ ok: true, payload: 'object' });
    } finally {
      await raw.close();
    }
  });

  describe('in a hybrid app (Express and a TCP microservice)', () => {
    async function startWith(inheritAppConfig: boolean) {
      const { store, prefix } = STORES[storeName]();
      @Module({ imports: [RateLimitModule.forRoot({ store, prefix })], controllers: [HybridController] })
      class HybridModule {}
      const hybrid = await startHybrid(HybridModule, { inheritAppConfig });
      started.push(hybrid);
      return hybrid;
    }
    const httpStatuses = async (url: string) => {
      const statuses = [];
      for (let n = 0; n < 3; n++) statuses.push((await fetch(`${url}/hybrid/ping`)).status);
      return statuses;
    };

    it('with inheritAppConfig, the global guard limits the microservice handlers too, once per message', async () => {
      const hybrid = await startWith(true);
      await hybrid.send('ping', {});
      await hybrid.send('ping', {});
      await expect(hybrid.send('ping', {})).rejects.toEqual(refused('rpc-ping'));
      // the global guard and @UseGuards(RateLimitGuard) both run on it: charged once, refused third
      await hybrid.send('guarded', {});
      await hybrid.send('guarded', {});
      await expect(hybrid.send('guarded', {})).rejects.toEqual(refused('rpc-guarded'));
      expect(await httpStatuses(hybrid.url)).toEqual([200, 200, 429]);
    });

    it('without inheritAppConfig, the global guard stays with HTTP: only @UseGuards limits a message', async () => {
      const hybrid = await startWith(false);
      for (let n = 0; n < 3; n++) expect(await hybrid.send('ping', {})).toBe('pong');
      await hybrid.send('guarded', {});
      await hybrid.send('guarded', {});
      await expect(hybrid.send('guarded', {})).rejects.toEqual(refused('rpc-guarded'));
      expect(await httpStatuses(hybrid.url)).toEqual([200, 200, 429]);
    });
  });
});

describe("failMode 'closed' on a TCP microservice", () => {
  it('answers 503 when the store fails, and drops events then too', async () => {
    const log = new ErrorLog();
    const store = new WatchedStore(new FailingStore());
    @Module({ imports: [RateLimitModule.forRoot({ store, failMode: 'closed' })], controllers: [TenantsController] })
    class FailClosedModule {}
    const service = await startMicroservice(FailClosedModule, log);
    try {
      await expect(service.send('shared', {})).rejects.toEqual({
        status: 'error',
        statusCode: 503,
        message: storeUnavailable,
        retryAfter: 1,
      });
      await service.emit('audit', { n: 1 });
      await store.answered('audit', 1);
      expect(await service.send('audited', {})).toEqual([]);
      expect(log.errors).toEqual([]);
    } finally {
      await service.close();
    }
  });
});
