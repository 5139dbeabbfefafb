// @ts-check
import { join } from 'node:path';
import { waitUntil } from '../wait.js';
import { HOST, parseInfo, withRedis } from './client.js';
import { launch, makeTempDir, startOnFreePorts, stopRedisGroup } from './process.js';

/**
 * @typedef {{ nodes: import('./process.js').RedisNode[], pids: number[], dir: string, members: { port: number, pid: number }[] }} RedisCluster
 * a running Redis Cluster; `members` lists every node's port and pid (the masters first, then their
 * replicas, in the order of their masters); `dir` holds the nodes' cluster config files
 */

const CLUSTER_SLOTS = 16384;

/**
 * Starts a Redis Cluster of `masters` masters and `replicas` replicas of each, each node on its own
 * free port with its cluster bus on another free port, and waits until every node reports
 * `cluster_state:ok`, all nodes agree on the owner of all 16384 slots (about 2 s: a fresh master
 * waits 2 s before it declares the cluster ok) and every replica is in sync with its master.
 * `nodeTimeoutMs` is the nodes' `cluster-node-timeout`: how long a master may be unreachable before
 * its replica takes over; `config` more options of every node (`['--cluster-require-full-coverage', 'no']`).
 * The caller stops it with `stopRedisGroup`.
 * @param {{ masters?: number, replicas?: number, nodeTimeoutMs?: number, config?: string[], timeoutMs?: number }} [options]
 * @returns {Promise<RedisCluster>}
 */
export async function startRedisCluster({
  masters = 3,
  replicas = 0,
  nodeTimeoutMs,
  config = [],
  timeoutMs = 20_000,
} = {}) {
  const dir = await makeTempDir('ratelimit-cluster-');
  /** @type {number[]} */
  const pids = [];
  const extra = [...(nodeTimeoutMs === undefined ? [] : ['--cluster-node-timeout', String(nodeTimeoutMs)]), ...config];
  try {
    const started = await Promise.allSettled(
      Array.from({ length: masters * (1 + replicas) }, (_, index) => startClusterNode(dir, index, extra)),
    );
    const nodes = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
    pids.push(...nodes.map(({ pid }) => pid));
    const failed = started.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
    await Promise.all(
      nodes.slice(0, masters).map(({ port }, index) =>
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
    if (replicas > 0) await startReplicating(nodes, masters, timeoutMs);
    return {
      nodes: nodes.map(({ port }) => ({ host: HOST, port })),
      pids,
      dir,
      members: nodes.map(({ port, pid }) => ({ port, pid })),
    };
  } catch (error) {
    await stopRedisGroup({ pids, dir });
    throw error;
  }
}

/**
 * Makes every node after the first `masters` a replica of master `index % masters`, and waits until
 * each is in sync with it (`master_link_status:up`).
 * @param {{ port: number }[]} nodes
 * @param {number} masters
 * @param {number} timeoutMs
 */
async function startReplicating(nodes, masters, timeoutMs) {
  const ids = await Promise.all(
    nodes.slice(0, masters).map(({ port }) => withRedis(port, (client) => client.call('CLUSTER', 'MYID'))),
  );
  for (const [index, { port }] of nodes.slice(masters).entries())
    await withRedis(port, (client) => client.call('CLUSTER', 'REPLICATE', String(ids[index % masters])));
  await waitUntil('the replicas in sync', timeoutMs, async () => {
    for (const { port } of nodes.slice(masters)) {
      const info = parseInfo(await withRedis(port, (client) => client.info('replication')));
      if (info.master_link_status !== 'up') return `replica ${port}: master_link_status:${info.master_link_status}`;
    }
    return '';
  });
}

/**
 * @param {string} dir
 * @param {number} index
 * @param {string[]} extra more options of the node
 * @returns {Promise<import('./process.js').RedisServer & { busPort: number }>}
 */
function startClusterNode(dir, index, extra) {
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
      // a replica's first sync starts at once, not after Redis's 5 s wait for more replicas
      '--repl-diskless-sync-delay',
      '0',
      ...extra,
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
