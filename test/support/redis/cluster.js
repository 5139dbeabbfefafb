// @ts-check
import { join } from 'node:path';
import { waitUntil } from '../wait.js';
import { HOST, parseInfo, withRedis } from './client.js';
import { launch, makeTempDir, startOnFreePorts, stopRedisGroup } from './process.js';

/**
 * @typedef {{ nodes: import('./process.js').RedisNode[], pids: number[], dir: string }} RedisCluster
 * a running Redis Cluster of masters only; `dir` holds the nodes' cluster config files
 */

const CLUSTER_SLOTS = 16384;

/**
 * Starts a Redis Cluster of `masters` masters and no replicas, each node on its own free port with
 * its cluster bus on another free port, and waits until every node reports `cluster_state:ok` and
 * all nodes agree on the owner of all 16384 slots (about 2 s: a fresh master waits 2 s before it
 * declares the cluster ok). The caller stops it with `stopRedisGroup`.
 * @param {{ masters?: number, timeoutMs?: number }} [options]
 * @returns {Promise<RedisCluster>}
 */
export async function startRedisCluster({ masters = 3, timeoutMs = 20_000 } = {}) {
  const dir = await makeTempDir('ratelimit-cluster-');
  /** @type {number[]} */
  const pids = [];
  try {
    const started = await Promise.allSettled(
      Array.from({ length: masters }, (_, index) => startClusterNode(dir, index)),
    );
    const nodes = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
    pids.push(...nodes.map(({ pid }) => pid));
    const failed = started.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
    await Promise.all(
      nodes.map(({ port }, index) =>
        withRedis(port, async (client) => {
          const first = Math.floor((CLUSTER_SLOTS * index) / masters);
          const last = Math.floor((CLUSTER_SLOTS * (index + 1)) / masters) - 1;
          await client.call('CLUSTER', 'ADDSLOTSRANGE', first, last);
          await client.call('CLUSTER', 'SET-CONFIG-EPOCH', index + 1);
        }),
      ),
    );
    // Every pair meets directly rather than through gossip: the cluster forms sooner.
    for (const [index, node] of nodes.entries()) {
      await withRedis(node.port, async (client) => {
        for (const other of nodes.slice(index + 1))
          await client.call('CLUSTER', 'MEET', HOST, other.port, other.busPort);
      });
    }
    await waitUntil(`a Redis Cluster of ${masters} masters`, timeoutMs, () => clusterProblem(nodes));
    return { nodes: nodes.map(({ port }) => ({ host: HOST, port })), pids, dir };
  } catch (error) {
    await stopRedisGroup({ pids, dir });
    throw error;
  }
}

/**
 * @param {string} dir
 * @param {number} index
 * @returns {Promise<import('./process.js').RedisServer & { busPort: number }>}
 */
function startClusterNode(dir, index) {
  return startOnFreePorts(`cluster node ${index}`, 2, async ([port, busPort]) => {
    const started = await launch(port, [
      '--dir',
      dir,
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      join(dir, `nodes-${index}-${port}.conf`),
      '--cluster-port',
      String(busPort),
      '--cluster-announce-ip',
      HOST,
    ]);
    return 'pid' in started ? { ...started, busPort } : started;
  });
}

/**
 * What keeps the cluster from being ready, or '' when every node is ok and sees the same owners.
 * @param {{ port: number }[]} nodes
 */
async function clusterProblem(nodes) {
  /** @type {string[]} */
  const views = [];
  for (const { port } of nodes) {
    const problem = await withRedis(port, async (client) => {
      const info = parseInfo(await client.call('CLUSTER', 'INFO'));
      if (info.cluster_state !== 'ok') return `node ${port}: cluster_state:${info.cluster_state}`;
      if (info.cluster_known_nodes !== String(nodes.length)) {
        return `node ${port} knows ${info.cluster_known_nodes} of ${nodes.length} nodes`;
      }
      const slots = /** @type {[number, number, [string, number]][]} */ (await client.call('CLUSTER', 'SLOTS'));
      const ranges = slots
        .map(([first, last, [host, ownerPort]]) => ({
          first: Number(first),
          last: Number(last),
          owner: `${host}:${ownerPort}`,
        }))
        .sort((a, b) => a.first - b.first);
      const covered = ranges.reduce((sum, { first, last }) => sum + last - first + 1, 0);
      if (covered !== CLUSTER_SLOTS) return `node ${port} sees ${covered} of ${CLUSTER_SLOTS} slots served`;
      views.push(JSON.stringify(ranges));
      return '';
    });
    if (problem) return problem;
  }
  if (new Set(views).size !== 1) return `the nodes disagree on the slot owners: ${views.join(' / ')}`;
  return '';
}
