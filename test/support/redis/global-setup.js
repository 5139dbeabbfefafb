// @ts-check
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { startRedisCluster } from './cluster.js';
import { requireRedisServer, startRedisServer, stopRedisGroup } from './process.js';

/**
 * Starts the Redis the suites share: one redis-server and one Redis Cluster of 3 masters, side by
 * side (the cluster takes about 2 s: a fresh master waits 2 s before it declares the cluster ok).
 * They reach the test workers through the environment:
 * - TEST_REDIS_URL: the single server, `redis://127.0.0.1:<port>`;
 * - TEST_REDIS_CLUSTER: the cluster's nodes, `127.0.0.1:<port>,127.0.0.1:<port>,...`;
 * - TEST_PACK_DIR: an empty temp dir where the first spec that needs the packed package builds
 *   and packs it for all (test/support/processes/packed-app.ts);
 * - TEST_REDIS_PIDS: every process started, comma-separated, and TEST_REDIS_DIRS: every temp dir,
 *   separated by path.delimiter; the global teardown stops and removes them.
 */
export default async function globalSetup() {
  requireRedisServer();
  const [server, cluster] = await Promise.allSettled([startRedisServer(), startRedisCluster()]);
  if (server.status === 'rejected' || cluster.status === 'rejected') {
    if (server.status === 'fulfilled') await stopRedisGroup({ pids: [server.value.pid] });
    if (cluster.status === 'fulfilled') await stopRedisGroup(cluster.value);
    throw server.status === 'rejected' ? server.reason : /** @type {PromiseRejectedResult} */ (cluster).reason;
  }
  process.env.TEST_REDIS_URL = server.value.url;
  process.env.TEST_REDIS_CLUSTER = cluster.value.nodes.map(({ host, port }) => `${host}:${port}`).join(',');
  process.env.TEST_REDIS_PIDS = [server.value.pid, ...cluster.value.pids].join(',');
  process.env.TEST_PACK_DIR = await mkdtemp(join(tmpdir(), 'rl-pack-'));
  process.env.TEST_REDIS_DIRS = [cluster.value.dir, process.env.TEST_PACK_DIR].join(delimiter);
}
