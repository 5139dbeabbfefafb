// @ts-check
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { waitUntil } from '../wait.js';
import { HOST, parseInfo, withRedis } from './client.js';
import { launch, makeTempDir, startOnFreePorts, startRedisServer, stopRedisGroup } from './process.js';

/** @typedef {import('./process.js').RedisServer} RedisServer */
/**
 * @typedef {{
 *   name: string,
 *   sentinels: import('./process.js').RedisNode[],
 *   primary: RedisServer,
 *   replica: RedisServer,
 *   pids: number[],
 *   dir: string,
 * }} RedisSentinelGroup a primary, its replica and the sentinels that monitor them under `name`
 */

/**
 * Starts a primary, one replica of it and `sentinels` sentinels (`redis-server <conf> --sentinel`,
 * each conf in a temp dir since a sentinel rewrites it) monitoring the primary as `name` with
 * quorum 2, then waits until every sentinel sees the primary, the replica (its link up) and all
 * the other sentinels. The caller stops it with `stopRedisGroup`.
 * @param {{ name?: string, sentinels?: number, downAfterMs?: number, failoverTimeoutMs?: number, timeoutMs?: number }} [options]
 * @returns {Promise<RedisSentinelGroup>}
 */
export async function startRedisSentinel({
  name = 'ratelimit-primary',
  sentinels: sentinelCount = 3,
  downAfterMs = 1_000,
  failoverTimeoutMs = 5_000,
  timeoutMs = 20_000,
} = {}) {
  const dir = await makeTempDir('ratelimit-sentinel-');
  /** @type {number[]} */
  const pids = [];
  try {
    // Own dirs: a replica stores the primary's snapshot as dump.rdb; no delay before a full sync.
    const dataArgs = async (/** @type {string} */ sub) => {
      await mkdir(join(dir, sub));
      return ['--dir', join(dir, sub), '--repl-diskless-sync-delay', '0'];
    };
    const primary = await startRedisServer(await dataArgs('primary'));
    pids.push(primary.pid);
    const replica = await startRedisServer([...(await dataArgs('replica')), '--replicaof', HOST, String(primary.port)]);
    pids.push(replica.pid);
    // The sentinels learn the replica from the primary's INFO, fetched at once and then every 10 s:
    // they start once the replica is online, so that the first INFO already lists it.
    await waitUntil('the replica to sync with the primary', timeoutMs, async () => {
      const replication = parseInfo(await withRedis(replica.port, (client) => client.info('replication')));
      if (replication.master_link_status !== 'up') return `replica link ${replication.master_link_status}`;
      const primaryReplication = await withRedis(primary.port, (client) => client.info('replication'));
      return primaryReplication.includes(`port=${replica.port},state=online`)
        ? ''
        : 'replica not online at the primary';
    });

    /** @type {import('./process.js').RedisNode[]} */
    const sentinels = [];
    for (let index = 0; index < sentinelCount; index++) {
      const sentinel = await startSentinel(dir, index, [
        'sentinel resolve-hostnames no',
        'sentinel announce-hostnames no',
        `sentinel monitor ${name} ${HOST} ${primary.port} 2`,
        `sentinel down-after-milliseconds ${name} ${downAfterMs}`,
        `sentinel failover-timeout ${name} ${failoverTimeoutMs}`,
        `sentinel parallel-syncs ${name} 1`,
      ]);
      pids.push(sentinel.pid);
      sentinels.push({ host: HOST, port: sentinel.port });
    }
    await waitUntil(`${sentinelCount} sentinels to see ${name}, its replica and each other`, timeoutMs, async () => {
      for (const { port } of sentinels) {
        const problem = await sentinelProblem(port, name, primary, replica, sentinelCount - 1);
        if (problem) return `sentinel ${port}: ${problem}`;
      }
      return '';
    });
    return { name, sentinels, primary, replica, pids, dir };
  } catch (error) {
    await stopRedisGroup({ pids, dir });
    throw error;
  }
}

/**
 * @param {string} dir
 * @param {number} index
 * @param {string[]} monitorLines
 * @returns {Promise<RedisServer>}
 */
function startSentinel(dir, index, monitorLines) {
  return startOnFreePorts(`sentinel ${index}`, 1, async ([port]) => {
    const conf = join(dir, `sentinel-${index}-${port}.conf`);
    await writeFile(conf, [`port ${port}`, `bind ${HOST}`, `dir ${dir}`, ...monitorLines, ''].join('\n'));
    return launch(port, [], [conf, '--sentinel']);
  });
}

/**
 * What the sentinel on `port` does not see yet, or '' when it sees everything.
 * @param {number} port
 * @param {string} name
 * @param {RedisServer} primary
 * @param {RedisServer} replica
 * @param {number} otherSentinels
 */
function sentinelProblem(port, name, primary, replica, otherSentinels) {
  return withRedis(port, async (client) => {
    const master = pairs(await client.call('SENTINEL', 'MASTER', name));
    if (master.flags !== 'master') return `primary flags ${master.flags}`;
    if (master.port !== String(primary.port)) return `primary is ${master.ip}:${master.port}`;
    const replicas = /** @type {unknown[]} */ (await client.call('SENTINEL', 'REPLICAS', name)).map(pairs);
    if (replicas.length !== 1 || replicas[0].port !== String(replica.port)) {
      return `replicas ${replicas.map((r) => `${r.ip}:${r.port}`).join(',') || 'none'}`;
    }
    if (replicas[0].flags !== 'slave') return `replica flags ${replicas[0].flags}`;
    if (replicas[0]['master-link-status'] !== 'ok') return `replica link ${replicas[0]['master-link-status']}`;
    const others = /** @type {unknown[]} */ (await client.call('SENTINEL', 'SENTINELS', name)).map(pairs);
    if (others.length !== otherSentinels) return `sees ${others.length} of ${otherSentinels} other sentinels`;
    const down = others.find((other) => other.flags !== 'sentinel');
    if (down) return `sentinel ${down.port} flags ${down.flags}`;
    return '';
  });
}

/**
 * A flat `[field, value, ...]` reply (SENTINEL MASTER and friends) as a record.
 * @param {unknown} reply
 * @returns {Record<string, string>}
 */
function pairs(reply) {
  /** @type {Record<string, string>} */
  const record = {};
  const items = Array.isArray(reply) ? reply : [];
  for (let index = 0; index + 1 < items.length; index += 2) record[String(items[index])] = String(items[index + 1]);
  return record;
}
