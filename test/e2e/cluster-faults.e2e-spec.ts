import { randomUUID } from 'node:crypto';
import { jest } from '@jest/globals';
import { Logger } from '@nestjs/common';
import { Cluster } from 'ioredis';
import { Cluster as ValkeyCluster } from 'iovalkey';
import { createCluster } from 'redis';
import type { RedisClient } from '../../lib/stores/redis/redis-clients.js';
import { OTHER_CLIENTS, type OtherClient } from '../support/redis/clients.js';
import type { Rule } from '../../lib/algorithms/algorithm.types.js';
import { RateLimitStoreError } from '../../lib/stores/rate-limit-store.error.js';
import { hashSlot } from '../../lib/stores/redis/hash-slot.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { StoreCalls } from '../../lib/stores/store-calls.js';
import { type RedisCluster, startRedisCluster } from '../support/redis/cluster.js';
import { parseInfo, redisCommand } from '../support/redis/client.js';
import { stopRedisGroup } from '../support/redis/process.js';
import { delay, waitUntil } from '../support/wait.js';

/**
 * A Redis Cluster of 3 masters and 3 replicas, started here (one per client package: ioredis,
 * node-redis, iovalkey), and two app instances (two Cluster
 * clients, each with its store and its module's calls: breakers, timeout, `failMode: 'closed'`)
 * sending a steady load over identities on every master. A master killed outright gives
 * `failMode` to its own keys until its replica takes over, and to no other key: the breakers are
 * per master (see `NodeBreakers`). A graceful failover gives no `failMode` answer at all, on a
 * client as the README sets one up (`retryDelayOnFailover: 10`: with ioredis's 100 ms, a call
 * that meets the failover waits past the timeout before it is sent again). A slot moved to another
 * master under load (at once, and key by key with an identity's three buckets split over both
 * masters for a while) is decided by Redis throughout, and what Redis holds at the end is exactly
 * what the instances were told it took (see `SlotMoving`).
 */

type ClientKind = 'ioredis' | OtherClient;

/** The module's timeout, ms. */
const TIMEOUT = 100;
/** The nodes' cluster-node-timeout, ms: a replica takes over about twice this after its master dies. */
const NODE_TIMEOUT_MS = 1_000;
/** Each identity's limit: 40 an hour, so that none refills during the test. */
const LIMIT = 40;
const RULE: Rule = { algorithm: 'token_bucket', rps: LIMIT / 3600, burst: LIMIT };
/** Identities per master. */
const PER_MASTER = 12;
/** Requests in flight per instance, each sent as the last one's answer comes. */
const WORKERS = 6;

/** One decision as an instance saw it: when its call started and ended (ms, performance.now), on which master's keys, and its answer. */
interface Seen {
  start: number;
  end: number;
  master: string;
  identity: string;
  answer: 'admitted' | 'refused' | 'failMode';
}

let cluster: RedisCluster;

beforeEach(() => {
  jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
  jest.spyOn(Logger.prototype, 'log').mockImplementation(() => undefined);
  jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
});
afterEach(() => jest.restoreAllMocks());

/** The client package of the describe block under way. */
let kind: ClientKind = 'ioredis';

/** An app instance's client of the test cluster, of the package under test, as the README configures one, ready. */
async function connect(): Promise<ClusterClient> {
  if (kind === 'node-redis') {
    const client = createCluster({
      rootNodes: cluster.nodes.map(({ host, port }) => ({ url: `redis://${host}:${port}` })),
      defaults: { disableOfflineQueue: true },
    });
    client.on('error', () => undefined);
    await client.connect();
    return { client, masterOf: (slot) => client.getSlotMaster(slot).address, close: () => client.destroy() };
  }
  const Client = kind === 'iovalkey' ? ValkeyCluster : Cluster;
  const client = new Client(cluster.nodes, {
    enableOfflineQueue: false,
    redisOptions: { maxRetriesPerRequest: 0, autoResendUnfulfilledCommands: false },
    retryDelayOnFailover: 10,
  });
  client.on('error', () => undefined);
  await new Promise((resolve) => client.once('ready', resolve));
  return { client, masterOf: (slot) => client.slots[slot][0], close: () => client.disconnect() };
}

/** A connected client of the test cluster, and the master it knows for a slot. */
interface ClusterClient {
  client: RedisClient;
  masterOf(slot: number): string;
  close(): void;
}

const keyOf = (prefix: string, identity: string) => `${prefix}tb:{${identity}}`;

/** `PER_MASTER` identities on each master, by the master's address. */
function identitiesByMaster(client: ClusterClient, prefix: string): Map<string, string[]> {
  const byMaster = new Map<string, string[]>();
  while ([...byMaster.values()].reduce((n, ids) => n + Math.min(ids.length, PER_MASTER), 0) < 3 * PER_MASTER) {
    const identity = randomUUID().slice(0, 8);
    const master = client.masterOf(hashSlot(keyOf(prefix, identity)));
    const ids = byMaster.get(master) ?? [];
    if (ids.length < PER_MASTER) byMaster.set(master, [...ids, identity]);
  }
  return byMaster;
}

/** Load from one instance until `stop()`: every decision it saw. */
function load(calls: StoreCalls, prefix: string, identities: { identity: string; master: string }[]) {
  const seen: Seen[] = [];
  let running = true;
  const worker = async (offset: number) => {
    for (let i = offset; running; i += WORKERS) {
      const { identity, master } = identities[i % identities.length];
      const start = performance.now();
      let answer: Seen['answer'];
      try {
        const [decision] = await calls.consume([{ key: keyOf(prefix, identity), policy: 'p', rule: RULE, cost: 1 }]);
        answer = decision.allowed ? 'admitted' : 'refused';
      } catch (error) {
        if (!(error instanceof RateLimitStoreError)) throw error;
        answer = 'failMode';
      }
      seen.push({ start, end: performance.now(), master, identity, answer });
      await delay(5);
    }
  };
  const workers = Array.from({ length: WORKERS }, (_, k) => worker(k));
  return {
    seen,
    stop: async () => {
      running = false;
      await Promise.all(workers);
    },
  };
}

/** Two app instances on the cluster, each with its load, until `close()`. */
async function instances(prefix: string) {
  const clients = [await connect(), await connect()];
  const calls = clients.map(
    ({ client }) => new StoreCalls(new RedisStore({ client }), { timeout: TIMEOUT, failMode: 'closed' }),
  );
  const byMaster = identitiesByMaster(clients[0], prefix);
  const identities = [...byMaster].flatMap(([master, ids]) => ids.map((identity) => ({ identity, master })));
  const loads = calls.map((each) => load(each, prefix, identities));
  return {
    byMaster,
    /** Stops the loads: every decision they saw. */
    stop: async () => (await Promise.all(loads.map(async ({ seen, stop }) => (await stop(), seen)))).flat(),
    close: async () => {
      await Promise.all(loads.map(({ stop }) => stop()));
      for (const each of calls) await each.close();
      for (const client of clients) client.close();
    },
  };
}

describe.each(['ioredis', ...OTHER_CLIENTS] as const)('on %s clients', (client) => {
  // a cluster of its own: the last test kills one of its masters
  beforeAll(async () => {
    kind = client;
    cluster = await startRedisCluster({ masters: 3, replicas: 1, nodeTimeoutMs: NODE_TIMEOUT_MS });
  }, 60_000);
  afterAll(async () => {
    await stopRedisGroup(cluster);
  });

  it('a graceful failover (CLUSTER FAILOVER), 5 times in turn on each master: no failMode answer', async () => {
    const run = await instances(`rl-graceful-${randomUUID().slice(0, 8)}:`);
    const pairs = [0, 1, 2].map((k) => [cluster.members[k].port, cluster.members[k + 3].port]);
    try {
      const took: number[] = [];
      for (let k = 0; k < 5; k++) {
        // a master votes for one failover of a given master's slots per 2 node timeouts: each pair in turn
        const pair = pairs[k % 3];
        const [first] = (await redisCommand(pair[0], ['ROLE'])) as [string];
        const [from, to] = first === 'master' ? pair : [pair[1], pair[0]];
        await delay((2 * NODE_TIMEOUT_MS) / 3);
        const started = performance.now();
        await redisCommand(to, ['CLUSTER', 'FAILOVER']);
        await waitUntil('the replica to take over, and the old master to follow it', 10_000, async () => {
          const [role] = (await redisCommand(to, ['ROLE'])) as [string];
          const link = parseInfo(String(await redisCommand(from, ['INFO', 'replication']))).master_link_status;
          return role === 'master' && link === 'up' ? '' : `${to} is a ${role}, ${from}'s link to a master is ${link}`;
        });
        took.push(Math.round(performance.now() - started));
      }
      await delay(300);
      const seen = await run.stop();
      const failMode = seen.filter((s) => s.answer === 'failMode');
      const slowest = Math.max(...seen.map((s) => s.end - s.start));
      console.log(
        `5 failovers (${took.join(', ')} ms each, the old master a replica again included): ` +
          `${seen.length} decisions, ${failMode.length} failMode, the slowest ${Math.round(slowest)} ms`,
      );
      expect(failMode.length).toBe(0);
    } finally {
      await run.close();
    }
  }, 60_000);

  /**
   * The policies of an identity on the slot being moved: three buckets in one slot, decided all or
   * none, refilling a token a day, so that what Redis holds at the end tells exactly what it took.
   */
  const MOVING_RULES: Record<string, Rule[]> = {
    // refuses soon: its refusals after the move starts are decided key by key too
    hot: [300, 250, 200].map((burst) => ({ algorithm: 'token_bucket', rps: 1 / 86_400, burst })),
    // admits throughout
    busy: [1e5, 1e5, 1e5].map((burst) => ({ algorithm: 'token_bucket', rps: 1 / 86_400, burst })),
  };

  /** One request as an instance saw it while a slot moved: when, on the moving slot or not, and its answer. */
  interface Moved {
    start: number;
    end: number;
    moving: boolean;
    identity: string;
    answer: 'admitted' | 'refused' | 'failMode';
  }

  /**
   * Moves `slot` from the master at `from` to the one at `to` as `redis-cli --cluster reshard` does
   * (IMPORTING, MIGRATING, MIGRATE, NODE on every master), its keys in one MIGRATE (`perKey` false)
   * or one by one `gapMs` apart, `holdMs` after MIGRATING and before NODE: the time it took, ms.
   */
  async function moveSlot(slot: number, from: number, to: number, perKey: boolean, gapMs: number, holdMs: number) {
    const started = performance.now();
    const [fromId, toId] = await Promise.all([from, to].map((port) => redisCommand(port, ['CLUSTER', 'MYID'])));
    await redisCommand(to, ['CLUSTER', 'SETSLOT', slot, 'IMPORTING', String(fromId)]);
    await redisCommand(from, ['CLUSTER', 'SETSLOT', slot, 'MIGRATING', String(toId)]);
    await delay(holdMs);
    for (let round = 0; round < 2; round++) {
      // the second round: keys made on `from` meanwhile (none expected: a missing key is asked for on `to`)
      const keys = (await redisCommand(from, ['CLUSTER', 'GETKEYSINSLOT', slot, 1_000])) as string[];
      for (const batch of perKey ? keys.map((key) => [key]) : keys.length > 0 ? [keys] : []) {
        await redisCommand(from, ['MIGRATE', '127.0.0.1', to, '', 0, 5_000, 'KEYS', ...batch]);
        await delay(gapMs);
      }
    }
    await delay(holdMs);
    const masters = cluster.members.slice(0, 3).map(({ port }) => port);
    for (const port of [to, from, ...masters.filter((port) => port !== to && port !== from)])
      await redisCommand(port, ['CLUSTER', 'SETSLOT', slot, 'NODE', String(toId)]).catch(() => undefined);
    return Math.round(performance.now() - started);
  }

  describe('a hot slot moved to another master under load', () => {
    it.each([
      ['fast: its keys in one MIGRATE', false, 0, 0],
      ['slow: its keys one by one, 50 ms apart', true, 50, 300],
    ])(
      '%s: decided by Redis throughout, none wrong',
      async (_move, perKey, gapMs, holdMs) => {
        const prefix = `rl-reshard-${randomUUID().slice(0, 8)}:`;
        const clients = [await connect(), await connect()];
        const stores = clients.map(({ client }) => new RedisStore({ client }));
        const instances = stores.map((store) => new StoreCalls(store, { timeout: TIMEOUT, failMode: 'closed' }));
        const requestsOf = (identity: string, rules: Rule[]) =>
          rules.map((rule, k) => ({ key: `${prefix}p${k}:{${identity}}`, policy: `p${k}`, rule, cost: 1 }));
        // the hot identity, 5 busy ones in its slot, and 30 others each with one policy, on any slot
        const hot = randomUUID().slice(0, 8);
        const slot = hashSlot(`{${hot}}`);
        const sameSlot: string[] = [];
        for (let i = 0; sameSlot.length < 5; i++) if (hashSlot(`{${hot}-${i}}`) === slot) sameSlot.push(`${hot}-${i}`);
        const others = Array.from({ length: 30 }, () => randomUUID().slice(0, 8)).filter(
          (id) => hashSlot(`{${id}}`) !== slot,
        );
        const picks = [
          ...[hot, ...sameSlot].map((identity, k) => ({
            identity,
            moving: true,
            requests: requestsOf(identity, k === 0 ? MOVING_RULES.hot : MOVING_RULES.busy),
          })),
          ...others.map((identity) => ({
            identity,
            moving: false,
            requests: requestsOf(identity, [MOVING_RULES.busy[0]]),
          })),
        ];
        const seen: Moved[] = [];
        let running = true;
        const worker = async (calls: StoreCalls, offset: number) => {
          for (let i = offset; running; i += 1) {
            // every other request on the moving slot, the hot identity one in four
            const pick =
              i % 2 === 0 ? picks[0] : picks[i % 4 === 1 ? 1 + ((i >> 2) % 5) : 6 + ((i >> 1) % others.length)];
            const start = performance.now();
            let answer: Moved['answer'];
            try {
              const decisions = await calls.consume(pick.requests);
              answer = decisions.every((decision) => decision.allowed) ? 'admitted' : 'refused';
            } catch (error) {
              if (!(error instanceof RateLimitStoreError)) throw error;
              answer = 'failMode';
            }
            seen.push({ start, end: performance.now(), moving: pick.moving, identity: pick.identity, answer });
            await delay(2);
          }
        };
        const workers = instances.flatMap((calls) => Array.from({ length: WORKERS }, (_, k) => worker(calls, k)));
        try {
          await delay(300);
          const from = Number(clients[0].masterOf(slot).split(':')[1]);
          const to = cluster.members.slice(0, 3).find(({ port }) => port !== from)!.port;
          const movedAt = performance.now();
          const took = await moveSlot(slot, from, to, perKey, gapMs, holdMs);
          const doneAt = performance.now();
          await delay(300);
          running = false;
          await Promise.all(workers);

          const during = seen.filter((s) => s.start >= movedAt && s.start <= doneAt + TIMEOUT);
          const moving = during.filter((s) => s.moving);
          const other = during.filter((s) => !s.moving);
          const share = (list: Moved[]) => list.filter((s) => s.answer !== 'failMode').length / list.length;
          // what Redis holds of each identity on the moving slot against what the instances were told
          const wrong: string[] = [];
          for (const pick of picks.slice(0, 6)) {
            const admitted = seen.filter((s) => s.identity === pick.identity && s.answer === 'admitted').length;
            const left = await stores[0].peek(pick.requests);
            pick.requests.forEach(({ rule, policy }, k) => {
              if (left[k].remaining !== rule.burst - admitted)
                wrong.push(
                  `${pick.identity} ${policy}: ${left[k].remaining} left of ${rule.burst} after ${admitted} admitted`,
                );
            });
          }
          console.log(
            `moved slot ${slot} (${perKey ? 'key by key' : 'at once'}) in ${took} ms: ` +
              `${moving.length} decisions on it meanwhile, ${(share(moving) * 100).toFixed(1)} % by Redis; ` +
              `${other.length} on other slots, ${(share(other) * 100).toFixed(1)} %; wrong: ${wrong.length}`,
          );
          expect(clients[0].masterOf(slot)).toBe(`127.0.0.1:${to}`);
          expect(moving.length).toBeGreaterThan(0);
          expect(other.filter((s) => s.answer === 'failMode')).toEqual([]);
          expect(share(moving)).toBeGreaterThanOrEqual(0.95);
          expect(wrong).toEqual([]);
        } finally {
          running = false;
          await Promise.all(workers);
          for (const calls of instances) await calls.close();
          for (const client of clients) client.close();
        }
      },
      60_000,
    );
  });

  it('a master killed: its keys get failMode until its replica takes over, no other key does, none is over-admitted', async () => {
    const prefix = `rl-failover-${randomUUID().slice(0, 8)}:`;
    const clients = [await connect(), await connect()];
    const instances = clients.map(
      ({ client }) => new StoreCalls(new RedisStore({ client }), { timeout: TIMEOUT, failMode: 'closed' }),
    );
    const byMaster = identitiesByMaster(clients[0], prefix);
    const identities = [...byMaster].flatMap(([master, ids]) => ids.map((identity) => ({ identity, master })));
    const [dead] = [...byMaster.keys()];
    const deadPort = Number(dead.split(':')[1]);
    const deadMember = cluster.members.findIndex(({ port }) => port === deadPort);
    const [, , [[, replica]]] = (await redisCommand(deadPort, ['ROLE'])) as [string, number, [string, string][]];
    const replicaPort = Number(replica);
    const loads = instances.map((calls) => load(calls, prefix, identities));
    try {
      await delay(500);
      const killedAt = performance.now();
      process.kill(cluster.members[deadMember].pid, 'SIGKILL');
      await waitUntil('the replica to take over', 15_000, async () => {
        const [role] = (await redisCommand(replicaPort, ['ROLE'])) as [string];
        return role === 'master' ? '' : `replica ${replicaPort} is still a ${role}`;
      });
      const promotedAt = performance.now();
      await delay(1_500);
      const seen = (await Promise.all(loads.map(async ({ seen, stop }) => (await stop(), seen)))).flat();

      const healthyFailMode = seen.filter(
        (s) => s.master !== dead && s.start > killedAt + TIMEOUT && s.answer === 'failMode',
      );
      const deadKeys = seen.filter((s) => s.master === dead && s.start > killedAt);
      const backAt = deadKeys.find((s) => s.start > promotedAt && s.answer !== 'failMode')?.end ?? Infinity;
      const admitted = new Map<string, number>();
      for (const s of seen) if (s.answer === 'admitted') admitted.set(s.identity, (admitted.get(s.identity) ?? 0) + 1);
      console.log(
        `killed ${dead}: promoted ${Math.round(promotedAt - killedAt)} ms after; ` +
          `${seen.length} decisions, ${healthyFailMode.length} failMode for healthy keys, ` +
          `${deadKeys.filter((s) => s.answer === 'failMode').length} for the dead master's; ` +
          `its keys decided by Redis again ${Math.round(backAt - promotedAt)} ms after the promotion was seen`,
      );
      expect(healthyFailMode.length).toBe(0);
      expect(deadKeys.some((s) => s.answer === 'failMode')).toBe(true);
      expect(backAt - promotedAt).toBeLessThan(1_000);
      expect(Math.max(...admitted.values())).toBeLessThanOrEqual(LIMIT);
    } finally {
      await Promise.all(loads.map(({ stop }) => stop()));
      for (const calls of instances) await calls.close();
      for (const client of clients) client.close();
    }
  }, 60_000);
});
