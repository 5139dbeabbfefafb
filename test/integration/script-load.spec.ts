import { createHash, randomUUID } from 'node:crypto';
import { Cluster, Redis } from 'ioredis';
import { bucketKey } from '../../lib/keys/bucket-key.js';
import type { RateLimitRequest } from '../../lib/stores/rate-limit-store.interface.js';
import { DECIDE_LUA, LIBRARY, REFUND_LUA } from '../../lib/stores/redis/decide.lua.js';
import { FLAT_LUA } from '../../lib/stores/redis/flat.lua.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { ruleOf } from '../cases/index.js';
import { parseInfo, redisCommand } from '../support/redis/client.js';
import { startRedisCluster } from '../support/redis/cluster.js';
import { type RedisServer, startRedisServer, stopRedisGroup, stopRedisServer } from '../support/redis/process.js';
import { waitUntil } from '../support/wait.js';

const sha = (lua: string) => createHash('sha1').update(lua).digest('hex');
const SCRIPTS = [sha(DECIDE_LUA), sha(FLAT_LUA), sha(REFUND_LUA)];

const request = (): RateLimitRequest => {
  const rule = ruleOf('token_bucket', 1, 5);
  return { key: bucketKey('rl-load:', 'load', rule, `ip:${randomUUID()}`), policy: 'load', rule, cost: 1 };
};

/** How often the server ran a command (`eval`, `evalsha`, `fcall`, `script|load`) and answered an error (`NOSCRIPT`). */
async function stats(client: Redis): Promise<{ calls: (command: string) => number; errors: (code: string) => number }> {
  const commands = parseInfo(await client.info('commandstats'));
  const errors = parseInfo(await client.info('errorstats'));
  const count = (value: string | undefined, field: string) =>
    Number(new RegExp(`${field}=(\\d+)`).exec(value ?? '')?.[1] ?? 0);
  return {
    calls: (command) => count(commands[`cmdstat_${command}`], 'calls'),
    errors: (code) => count(errors[`errorstat_${code}`], 'count'),
  };
}

/** Once what `client` was sent before has been answered (replies come in order), and what reads those answers has run. */
const answered = async (client: Redis) => {
  await client.ping();
  await new Promise((resolve) => setImmediate(resolve));
};

/** Whether the server has the library of the store's calls. */
const hasLibrary = async (client: Redis) => (await client.function('LIST', 'LIBRARYNAME', LIBRARY.name)).length === 1;

/** The calls a server ran and the errors it answered, as `[fcall, evalsha, eval, NOSCRIPT]`. */
async function callCounts(client: Redis): Promise<number[]> {
  const { calls, errors } = await stats(client);
  return [calls('fcall'), calls('evalsha'), calls('eval'), errors('NOSCRIPT')];
}

/**
 * The calls are loaded into Redis when the store starts (every master of a Cluster) and when its
 * client is ready again after a reconnect, so that no decision pays for sending and compiling them:
 * as a library of functions (Redis 7.0 on), each call an FCALL, and as scripts, for a server
 * without functions (or while the library is on its way), each call an EVALSHA that finds its
 * script. A Redis that lost them anyway (SCRIPT FLUSH, FUNCTION FLUSH) is still served: by the
 * script, sent whole if need be (see stores.spec.ts).
 */
describe('loading the scripts (own redis-server)', () => {
  let server: RedisServer;
  let client: Redis;

  beforeEach(async () => {
    server = await startRedisServer();
    client = new Redis(server.url);
    client.on('error', () => undefined);
    await new Promise((resolve) => client.once('ready', resolve));
  });
  afterEach(() => {
    client.disconnect();
    stopRedisServer(server.pid);
  });

  it('loads them when the store is made: the first decision is one FCALL, never an EVAL', async () => {
    const store = new RedisStore({ client, clock: 'app' });
    await store.ready();
    expect(await client.script('EXISTS', ...SCRIPTS)).toEqual([1, 1, 1]);
    expect(await hasLibrary(client)).toBe(true);
    expect(await store.consume([request()])).toMatchObject([{ allowed: true, remaining: 4 }]);
    // the decision's FCALL; the EVALSHA is the start's probe that the server runs scripts (loaded too)
    expect(await callCounts(client)).toEqual([1, 1, 0, 0]);
    await store.close();
  });

  it('runs a call as its script where the library is gone, and loads the library again', async () => {
    const store = new RedisStore({ client, clock: 'app' });
    await store.ready();
    await client.function('FLUSH');
    expect(await store.consume([request()])).toMatchObject([{ allowed: true, remaining: 4 }]);
    await answered(client);
    expect(await hasLibrary(client)).toBe(true);
    expect(await store.consume([request()])).toMatchObject([{ allowed: true, remaining: 4 }]);
    // the FCALL that found no function, then its EVALSHA; then an FCALL again (and the start's probe)
    expect(await callCounts(client)).toEqual([2, 2, 0, 0]);
    await store.close();
  });

  it('loads them again when its client is ready after Redis restarted', async () => {
    const store = new RedisStore({ client, clock: 'app' });
    // the start's probe answered before the restart: the new server sees the decision alone
    await store.ready();
    const { port } = server;
    stopRedisServer(server.pid);
    // listened for before the new server starts: the client may be ready again before that start returns
    const readyAgain = new Promise((resolve) => client.once('ready', resolve));
    server = await startRedisServer([], { port });
    await readyAgain;
    await answered(client);
    expect(await client.script('EXISTS', ...SCRIPTS)).toEqual([1, 1, 1]);
    expect(await hasLibrary(client)).toBe(true);
    expect(await store.consume([request()])).toMatchObject([{ allowed: true, remaining: 4 }]);
    expect(await callCounts(client)).toEqual([1, 0, 0, 0]);
    await store.close();
  });

  it('leaves a lazyConnect client alone until its first call, and loads them ahead of it', async () => {
    const lazy = new Redis(server.url, { lazyConnect: true });
    const store = new RedisStore({ client: lazy, clock: 'app' });
    expect(lazy.status).toBe('wait');
    expect(await store.consume([request()])).toMatchObject([{ allowed: true, remaining: 4 }]);
    await store.ready();
    // sent right behind the loads, before the library's answer: the script (and the probe, after the loads)
    expect(await callCounts(client)).toEqual([0, 2, 0, 0]);
    await store.close();
    lazy.disconnect();
  });
});

describe('a Redis without functions (own redis-server, FUNCTION renamed away)', () => {
  it('runs every call as its script', async () => {
    const server = await startRedisServer(['--rename-command', 'FUNCTION', '']);
    const client = new Redis(server.url);
    try {
      const store = new RedisStore({ client, clock: 'app' });
      await store.ready();
      expect(await client.script('EXISTS', ...SCRIPTS)).toEqual([1, 1, 1]);
      for (let i = 0; i < 3; i++)
        expect(await store.consume([request()])).toMatchObject([{ allowed: true, remaining: 4 }]);
      // and the start's probe
      expect(await callCounts(client)).toEqual([0, 4, 0, 0]);
      await store.close();
    } finally {
      client.disconnect();
      stopRedisServer(server.pid);
    }
  });
});

describe('loading the scripts on a Redis Cluster (own cluster)', () => {
  it('loads them into every master when the store is made', async () => {
    const started = await startRedisCluster();
    const cluster = new Cluster(started.nodes, { lazyConnect: true });
    try {
      await cluster.connect();
      const store = new RedisStore({ client: cluster, clock: 'app' });
      const masters = cluster.nodes('master');
      expect(masters).toHaveLength(3);
      for (const master of masters) {
        await answered(master);
        expect(await master.script('EXISTS', ...SCRIPTS)).toEqual([1, 1, 1]);
        expect(await hasLibrary(master)).toBe(true);
      }
      expect(await store.consume([request()])).toMatchObject([{ allowed: true, remaining: 4 }]);
      await store.close();
    } finally {
      cluster.disconnect();
      await stopRedisGroup(started);
    }
  });
});

describe("a Cluster's replica, and the master it becomes (own cluster: a master and its replica)", () => {
  let started: Awaited<ReturnType<typeof startRedisCluster>>;
  beforeAll(async () => {
    started = await startRedisCluster({ masters: 1, replicas: 1, nodeTimeoutMs: 1_000 });
  });
  afterAll(() => stopRedisGroup(started));

  /** The ports of the servers CLUSTER SLOTS lists for the slots, from the server at `port`. */
  const listed = async (port: number) => {
    const [[, , ...servers]] = (await redisCommand(port, ['CLUSTER', 'SLOTS'])) as [
      [number, number, ...[string, number][]],
    ];
    return servers.map(([, listedPort]) => listedPort);
  };
  const moved = async (port: number) =>
    Number(
      /count=(\d+)/.exec(
        parseInfo(String(await redisCommand(port, ['INFO', 'errorstats']))).errorstat_MOVED ?? '',
      )?.[1] ?? 0,
    );
  /** The master and its replica as the tests before left them, once CLUSTER SLOTS lists the replica. */
  const listedPair = async () => {
    const roles = await Promise.all(
      started.nodes.map(async ({ port }) => ((await redisCommand(port, ['ROLE'])) as [string])[0]),
    );
    const master = started.nodes[roles.indexOf('master')];
    const replica = started.nodes.find(({ port }) => port !== master.port)!;
    // Redis lists a replica for its slots once it has replicated something
    await redisCommand(master.port, ['SET', 'replicated', '1']);
    await waitUntil('CLUSTER SLOTS to list the replica', 5_000, async () => {
      const servers = await listed(master.port);
      return servers.length === 2 ? '' : `${servers.length} listed`;
    });
    return { master, replica };
  };

  it('a failover to a master the client has not met: the call meets MOVED once, and waits for the client to learn the slots', async () => {
    const [master, replica] = started.nodes;
    // Redis leaves out a replica that has replicated nothing yet: the client knows the master alone
    expect(await listed(master.port)).toEqual([master.port]);
    const cluster = new Cluster([master], { slotsRefreshInterval: 60_000 });
    try {
      await new Promise((resolve) => cluster.once('ready', resolve));
      expect(cluster.nodes('all').map(({ options }) => options.port)).toEqual([master.port]);
      const store = new RedisStore({ client: cluster, clock: 'app' });
      await store.ready();
      // TAKEOVER: no other master to vote for a graceful one
      await redisCommand(replica.port, ['CLUSTER', 'FAILOVER', 'TAKEOVER']);
      await waitUntil('the replica to take over', 10_000, async () => {
        const [role] = (await redisCommand(replica.port, ['ROLE'])) as [string];
        return role === 'master' && (await listed(master.port))[0] === replica.port ? '' : `the replica is a ${role}`;
      });
      await redisCommand(master.port, ['CONFIG', 'RESETSTAT']);
      expect(await store.consume([request()])).toMatchObject([{ allowed: true, remaining: 4 }]);
      // sent through the client's routing meanwhile, it would have met MOVED twice
      expect(await moved(master.port)).toBe(1);
      await store.close();
    } finally {
      cluster.disconnect();
    }
  });

  it('a replica is kept connected while a store uses the client, so that a failover finds its new master connected', async () => {
    const { master, replica } = await listedPair();
    // from the master alone, and no refresh of the slots meanwhile: nothing the client does itself would send to the replica
    const cluster = new Cluster([master], { slotsRefreshInterval: 60_000 });
    try {
      await new Promise((resolve) => cluster.once('ready', resolve));
      const listeners = cluster.listenerCount('+node');
      const store = new RedisStore({ client: cluster, clock: 'app' });
      expect(cluster.nodes('slave').map(({ options }) => options.port)).toEqual([replica.port]);
      // ioredis itself connects to a node when it first sends to it: to a replica, never
      await waitUntil('every node connected', 5_000, async () => {
        const waiting = cluster.nodes('all').filter(({ status }) => status !== 'ready');
        return waiting.map(({ options, status }) => `${options.port} ${status}`).join(', ');
      });
      await store.close();
      expect(cluster.listenerCount('+node')).toBe(listeners);
    } finally {
      cluster.disconnect();
    }
  });

  it('a replica the client does not know, when the store starts or dropped later, is learned again and connected', async () => {
    const { master, replica } = await listedPair();
    // no refresh of the slots meanwhile: nothing the client does itself learns them again
    const cluster = new Cluster([master], { slotsRefreshInterval: 60_000 });
    /** The client drops a node whose connection ended (it never reconnects one), as one that CLUSTER SLOTS leaves out. */
    const drop = async () => {
      const dropped = new Promise((resolve) => cluster.once('-node', resolve));
      await redisCommand(replica.port, ['CLIENT', 'KILL', 'TYPE', 'normal']);
      await dropped;
      expect(cluster.nodes('slave')).toEqual([]);
    };
    const connected = () =>
      waitUntil('the replica known and connected again', 5_000, async () =>
        cluster.nodes('slave').some(({ status }) => status === 'ready') ? '' : 'not yet',
      );
    try {
      await new Promise((resolve) => cluster.once('ready', resolve));
      await cluster.nodes('slave')[0].connect();
      const listeners = cluster.listenerCount('-node');
      await drop();
      const store = new RedisStore({ client: cluster, clock: 'app' });
      await connected();
      await drop();
      await connected();
      await store.close();
      expect(cluster.listenerCount('-node')).toBe(listeners);
    } finally {
      cluster.disconnect();
    }
  });
});

describe('the stores of one client (own redis-server)', () => {
  it('add one listener to it however many there are, and take it away when the last is closed', async () => {
    const server = await startRedisServer();
    const client = new Redis(server.url);
    try {
      await new Promise((resolve) => client.once('ready', resolve));
      const before = client.listenerCount('ready');
      const stores = Array.from({ length: 20 }, () => new RedisStore({ client, clock: 'app' }));
      expect(client.listenerCount('ready')).toBe(before + 1);
      for (const store of stores) await store.close();
      expect(client.listenerCount('ready')).toBe(before);
    } finally {
      client.disconnect();
      stopRedisServer(server.pid);
    }
  });
});
