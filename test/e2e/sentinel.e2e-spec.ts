import { randomUUID } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { Controller, Get, Module } from '@nestjs/common';
import { RateLimit, RateLimitModule } from '../../lib/index.js';
import { bucketKey } from '../../lib/keys/bucket-key.js';
import { createSentinel } from 'redis';
import { redisCommand } from '../support/redis/client.js';
import { stopRedisGroup } from '../support/redis/process.js';
import { type RedisSentinelGroup, startRedisSentinel } from '../support/redis/sentinel.js';
import { waitUntil } from '../support/wait.js';
import { read, startApp, type TestApp } from '../support/app.js';

@Controller('quota')
class QuotaController {
  @RateLimit({ algorithm: 'fixed_window', limit: 5, window: '1h', key: 'api-key' })
  @Get()
  take() {
    return { ok: true };
  }
}

describe.each([
  ['the client the module creates (ioredis)', false],
  ['a node-redis createSentinel client', true],
])('through Sentinel (a primary, a replica, 3 sentinels), with %s', (_client, nodeRedis) => {
  let group: RedisSentinelGroup;
  let http: TestApp;
  let sentinel: ReturnType<typeof createSentinel> | undefined;
  /** The store's failures, ms from the start of beforeAll, and node-redis's trace (its resets and reconnects). */
  const storeErrors: string[] = [];
  const clientTrace: string[] = [];
  let since = Date.now();
  const storeError = (message: unknown) => {
    const { error } = message as { error: Error & { reason?: string } };
    storeErrors.push(`${Date.now() - since} ms: ${error.reason}: ${error.message}`);
  };

  beforeAll(async () => {
    since = Date.now();
    subscribe('nestjs-ratelimit:store-error', storeError);
    // failing over by hand: a long down-after keeps a loaded machine from failing over by itself
    group = await startRedisSentinel({ downAfterMs: 5_000 });
    if (nodeRedis) {
      sentinel = createSentinel({ name: group.name, sentinelRootNodes: group.sentinels });
      sentinel.on('error', () => undefined);
      await sentinel.connect();
      sentinel.setTracer(clientTrace);
    }
    @Module({
      imports: [
        RateLimitModule.forRoot({
          redis: sentinel ?? { sentinels: group.sentinels, name: group.name },
          failMode: 'closed',
          prefix: 'rl-sentinel:',
        }),
      ],
      controllers: [QuotaController],
    })
    class AppModule {}
    http = await startApp(AppModule, 'express');
    // longer than the group's own waits (20 s each), which say what did not happen: beside busy
    // processes the sentinels took past 30 s in all to see each other
  }, 60_000);
  afterAll(async () => {
    unsubscribe('nestjs-ratelimit:store-error', storeError);
    await http?.close();
    await sentinel?.destroy();
    if (group) await stopRedisGroup(group);
  });

  const bucketOf = (apiKey: string) =>
    bucketKey('rl-sentinel:', 'QuotaController.take', 'fixed_window', `api-key:${apiKey}`);

  /** Statuses of `n` requests one after another with this API key. */
  async function take(apiKey: string, n: number): Promise<number[]> {
    const statuses: number[] = [];
    for (let i = 0; i < n; i++) statuses.push((await read(await http.get('/quota', { 'x-api-key': apiKey }))).status);
    return statuses;
  }

  it('limits exactly on the primary, and again on the new primary after a failover', async () => {
    const before = await take(`before-${randomUUID()}`, 7);
    // a failMode answer before the failover says why, from what the store and the client reported
    if (before.includes(503)) {
      const traced = clientTrace.filter((line) => !line.startsWith('attemping to send')); // one per command
      console.log(
        `a 503 before the failover. Store errors:\n${storeErrors.join('\n')}\nnode-redis:\n${traced.join('\n')}`,
      );
    }
    expect(before).toEqual([200, 200, 200, 200, 200, 429, 429]);

    const started = Date.now();
    expect(await redisCommand(group.sentinels[0].port, ['SENTINEL', 'FAILOVER', group.name])).toBe('OK');
    // requests meanwhile get 503 (failMode closed) or a decision; wait for decisions on the new primary
    const outcomes = new Map<number, number>();
    // a bucket on the new primary and not on the old one (until Sentinel demotes it, the old one
    // replicates from nobody) was written to the new primary
    await waitUntil('limiting on the new primary', 15_000, async () => {
      const probe = `probe-${randomUUID()}`;
      const [status] = await take(probe, 1);
      outcomes.set(status, (outcomes.get(status) ?? 0) + 1);
      const role = (port: number) => redisCommand(port, ['ROLE']).then((reply) => (reply as unknown[])[0]);
      const holds = async (port: number) => (await redisCommand(port, ['GET', bucketOf(probe)])) !== null;
      const onNew = (await role(group.replica.port)) === 'master' && (await holds(group.replica.port));
      const onOld = (await role(group.primary.port)) === 'master' && (await holds(group.primary.port));
      return status === 200 && onNew && !onOld
        ? ''
        : `status ${status}, on the new primary ${onNew}, on the old ${onOld}`;
    });
    console.log(
      `Sentinel failover: limiting on the new primary ${Date.now() - started} ms after SENTINEL FAILOVER; statuses meanwhile ${JSON.stringify([...outcomes])}`,
    );
    expect([...outcomes.keys()].every((status) => status === 200 || status === 503)).toBe(true);

    const apiKey = `after-${randomUUID()}`;
    expect(await take(apiKey, 7)).toEqual([200, 200, 200, 200, 200, 429, 429]);
    // decided on the new primary: the bucket is there, holding the 5
    expect(String(await redisCommand(group.replica.port, ['GET', bucketOf(apiKey)]))).toMatch(/\|5$/);
  }, 40_000);
});
