import { randomUUID } from 'node:crypto';
import { type Cluster, Redis } from 'ioredis';
import { redisCommand } from '../support/redis/client.js';
import { stopRedisGroup } from '../support/redis/process.js';
import { type RedisSentinelGroup, startRedisSentinel } from '../support/redis/sentinel.js';
import { waitUntil } from '../support/wait.js';
import { connectTestCluster, testClusterNodes } from '../support/redis/test-redis.js';

/**
 * Smoke test of the Redis topologies the test infrastructure starts: it checks properties only a
 * real Redis Cluster and a real Sentinel group have, so that a stand-in (one plain server) fails.
 */

const SLOTS = 16384;

/** A direct connection to one node, no cluster logic: redirections come back as errors. */
function direct(port: number): Redis {
  return new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 1 });
}

describe('the Redis Cluster of the global setup', () => {
  const id = randomUUID();
  const keys: string[] = [];
  let cluster: Cluster;
  let nodes: Redis[];

  beforeAll(async () => {
    cluster = await connectTestCluster();
    nodes = testClusterNodes().map(({ port }) => direct(port));
    await Promise.all(nodes.map((node) => node.connect()));
  });
  afterAll(async () => {
    if (keys.length) await Promise.all(keys.map((key) => cluster.del(key)));
    cluster?.disconnect();
    nodes?.forEach((node) => node.disconnect());
  });

  /** Which node (`host:port`) owns each slot, from CLUSTER SLOTS. */
  async function owners(node: Redis): Promise<{ first: number; last: number; owner: string }[]> {
    const slots = (await node.call('CLUSTER', 'SLOTS')) as [number, number, [string, number, string]][];
    return slots
      .map(([first, last, [host, port]]) => ({ first, last, owner: `${host}:${port}` }))
      .sort((a, b) => a.first - b.first);
  }

  function ownerOf(ranges: { first: number; last: number; owner: string }[], slot: number): string {
    const range = ranges.find(({ first, last }) => first <= slot && slot <= last);
    if (!range) throw new Error(`slot ${slot} has no owner`);
    return range.owner;
  }

  it('has 3 masters, the started nodes, that each own slots and together cover all 16384 once', async () => {
    const expected = testClusterNodes()
      .map(({ host, port }) => `${host}:${port}`)
      .sort();
    for (const node of nodes) {
      expect(await node.call('CLUSTER', 'INFO')).toMatch(/cluster_state:ok\r\n/);
      const lines = String(await node.call('CLUSTER', 'NODES'))
        .trim()
        .split('\n');
      const masters = lines.map((line) => line.split(' ')).filter((fields) => fields[2].split(',').includes('master'));
      expect(masters.map((fields) => fields[1].split('@')[0]).sort()).toEqual(expected);
      const slotCounts = masters.map((fields) =>
        fields.slice(8).reduce((sum, range) => {
          const [first, last = first] = range.split('-').map(Number);
          return sum + last - first + 1;
        }, 0),
      );
      for (const count of slotCounts) expect(count).toBeGreaterThan(0);
      expect(slotCounts.reduce((a, b) => a + b, 0)).toBe(SLOTS);

      const ranges = await owners(node);
      expect(new Set(ranges.map(({ owner }) => owner)).size).toBe(3);
      let next = 0;
      for (const { first, last } of ranges) {
        expect(first).toBe(next); // no gap, no overlap
        next = last + 1;
      }
      expect(next).toBe(SLOTS);
    }
    expect(cluster.nodes('master')).toHaveLength(3);
  });

  it('hashes keys with the same hash tag to one slot, and spreads different tags over several masters', async () => {
    const [node] = nodes;
    const slotOf = async (key: string) => Number(await node.call('CLUSTER', 'KEYSLOT', key));
    expect(await slotOf(`${id}:a{x}`)).toBe(await slotOf(`${id}:b{x}`));
    expect(await slotOf('a{x}')).toBe(await slotOf('x'));

    const ranges = await owners(node);
    const tags = Array.from({ length: 12 }, (_, index) => `tag${index}`);
    const placed = await Promise.all(
      tags.map(async (tag) => {
        const key = `${id}:k{${tag}}`;
        keys.push(key);
        await cluster.set(key, tag);
        return { key, tag, owner: ownerOf(ranges, await slotOf(key)) };
      }),
    );
    expect(new Set(placed.map(({ owner }) => owner)).size).toBeGreaterThan(1);

    // Each key is stored on its slot's owner; any other node redirects with MOVED.
    const ports = testClusterNodes().map(({ port }) => port);
    for (const { key, tag, owner } of placed) {
      for (const [index, port] of ports.entries()) {
        if (`127.0.0.1:${port}` === owner) await expect(nodes[index].get(key)).resolves.toBe(tag);
        else await expect(nodes[index].get(key)).rejects.toThrow(new RegExp(`^MOVED \\d+ ${owner}$`));
      }
    }
  });

  it('rejects a multi-key command across slots with CROSSSLOT, and runs it within one slot', async () => {
    const [node] = nodes;
    const across = [`${id}:a{x}`, `${id}:a{y}`];
    expect(await node.call('CLUSTER', 'KEYSLOT', across[0])).not.toBe(await node.call('CLUSTER', 'KEYSLOT', across[1]));
    await expect(node.mget(...across)).rejects.toThrow(/^CROSSSLOT/);
    await expect(cluster.mget(...across)).rejects.toThrow(/^CROSSSLOT/);

    const within = [`${id}:a{x}`, `${id}:b{x}`];
    keys.push(...within);
    await cluster.set(within[0], '1');
    await expect(cluster.mget(...within)).resolves.toEqual(['1', null]);
  });
});

describe('a Sentinel group: a primary, its replica and 3 sentinels', () => {
  let group: RedisSentinelGroup;
  let client: Redis;

  beforeAll(async () => {
    // Failing over by hand: a long down-after keeps a loaded machine from failing over by itself.
    group = await startRedisSentinel({ downAfterMs: 5_000 });
    client = new Redis({
      sentinels: group.sentinels,
      name: group.name,
      lazyConnect: true,
      maxRetriesPerRequest: 1,
      // Reconnect on the sentinels' +switch-master: without it the client stays on the old primary
      // until Sentinel demotes it (about 10 s later) and then gets READONLY replies.
      failoverDetector: true,
    });
    await client.connect();
  }, 30_000);
  afterAll(async () => {
    client?.disconnect();
    if (group) await stopRedisGroup(group);
  });

  it('connects ioredis to the primary through the sentinels, and a write reaches the replica', async () => {
    const role = (await client.call('ROLE')) as [string, ...unknown[]];
    expect(role[0]).toBe('master');
    expect(await client.config('GET', 'port')).toEqual(['port', String(group.primary.port)]);
    expect(((await redisCommand(group.replica.port, ['ROLE'])) as unknown[])[0]).toBe('slave');

    const key = `topology:${randomUUID()}`;
    await client.set(key, 'replicated');
    expect(await client.wait(1, 5_000)).toBe(1); // the replica acknowledged the write
    expect(await redisCommand(group.replica.port, ['GET', key])).toBe('replicated');
  });

  it('fails over on SENTINEL FAILOVER: ioredis writes then reach the old replica, now the primary', async () => {
    const [sentinel] = group.sentinels;
    const key = `topology:${randomUUID()}`;
    const started = Date.now();
    expect(await redisCommand(sentinel.port, ['SENTINEL', 'FAILOVER', group.name])).toBe('OK');

    let attempt = 0;
    await waitUntil('ioredis writes to reach the new primary', 15_000, async () => {
      const role = ((await redisCommand(group.replica.port, ['ROLE'])) as unknown[])[0];
      if (role !== 'master') return `the replica is still a ${String(role)}`;
      // The replica is a primary now, which replicates from nobody: a value written from here on
      // shows up on it only if ioredis wrote it there.
      const value = String(++attempt);
      await client.set(key, value);
      return (await redisCommand(group.replica.port, ['GET', key])) === value
        ? ''
        : 'the write went to the old primary';
    });
    const elapsed = Date.now() - started;
    console.log(`Sentinel failover: ioredis writes reached the new primary ${elapsed} ms after SENTINEL FAILOVER`);

    expect(((await redisCommand(group.replica.port, ['ROLE'])) as unknown[])[0]).toBe('master');
    expect(await client.config('GET', 'port')).toEqual(['port', String(group.replica.port)]);
    expect(await redisCommand(sentinel.port, ['SENTINEL', 'GET-MASTER-ADDR-BY-NAME', group.name])).toEqual([
      '127.0.0.1',
      String(group.replica.port),
    ]);
    expect(elapsed).toBeLessThan(15_000);
  }, 30_000);
});
