// @ts-check
import { spawn, spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * Real `redis-server` processes for the integration and e2e suites: single servers, a Redis
 * Cluster and a Sentinel group, all on free loopback ports picked at runtime (never on a shared
 * port such as 6379). Whatever is started here is stopped by its owner (the global teardown or
 * the spec that started it), and also killed when the process that started it exits: by an
 * 'exit' handler, and, where util-linux `setpriv` exists, by the kernel (parent-death signal)
 * should that process be killed outright.
 */

const INSTALL_HINT =
  'redis-server is not installed. On Debian or Ubuntu: `sudo apt-get install -y redis-server` ' +
  '(the test command installs it by itself when run as root).';

const HOST = '127.0.0.1';
const CLUSTER_SLOTS = 16384;

/** Makes sure `redis-server` is on PATH: installs Debian's package when missing and root. */
export function ensureRedisServer() {
  if (onPath('redis-server')) return;
  if (process.getuid?.() !== 0 || !onPath('apt-get')) throw new Error(INSTALL_HINT);
  console.log('redis-server is missing: installing Debian package redis-server');
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  for (const args of [['update', '-qq'], ['install', '-y', '-qq', '--no-install-recommends', 'redis-server']]) {
    const result = spawnSync('apt-get', args, { stdio: 'inherit', env });
    if (result.status !== 0) throw new Error(`apt-get ${args.join(' ')} failed. ${INSTALL_HINT}`);
  }
  if (!onPath('redis-server')) throw new Error(INSTALL_HINT);
}

/** @param {string} command */
function onPath(command) {
  return spawnSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' }).status === 0;
}

/** @typedef {{ port: number, pid: number, url: string }} RedisServer a running redis-server of the tests */
/** @typedef {{ host: string, port: number }} RedisNode a host and port, as ioredis takes them */
/**
 * @typedef {{ nodes: RedisNode[], pids: number[], dir: string }} RedisCluster
 * a running Redis Cluster of masters only; `dir` holds the nodes' cluster config files
 */
/**
 * @typedef {{
 *   name: string,
 *   sentinels: RedisNode[],
 *   primary: RedisServer,
 *   replica: RedisServer,
 *   pids: number[],
 *   dir: string,
 * }} RedisSentinelGroup a primary, its replica and the sentinels that monitor them under `name`
 */

/** @type {Map<number, import('node:child_process').ChildProcess>} */
const children = new Map();
/** @type {Set<string>} */
const tempDirs = new Set();
process.once('exit', () => {
  for (const child of children.values()) child.kill('SIGKILL');
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

/**
 * Spawning through `setpriv --pdeathsig KILL` (it execs, so the pid stays redis-server's) has the
 * kernel kill the server if the process that started it dies without running its 'exit' handlers.
 */
const SETPRIV = onPath('setpriv') && spawnSync('setpriv', ['--pdeathsig', 'KILL', 'true']).status === 0;

/**
 * Starts a redis-server on a free loopback port, or on `port` when given, and waits until it
 * answers. A given port may still be held by a server that was just killed: the start is retried
 * on that port for a few seconds.
 * @param {string[]} [extraArgs] more redis-server options, e.g. `['--maxmemory', '1mb']`
 * @param {{ port?: number }} [options]
 * @returns {Promise<RedisServer>}
 */
export async function startRedisServer(extraArgs = [], { port } = {}) {
  if (port !== undefined) {
    const deadline = Date.now() + 5_000;
    let failure = '';
    do {
      const started = await launch(port, extraArgs);
      if ('pid' in started) return started;
      failure = started.failure;
      await delay(100);
    } while (Date.now() < deadline);
    throw new Error(`could not start redis-server on port ${port} within 5 s: ${failure}`);
  }
  let failure = '';
  for (let attempt = 0; attempt < 5; attempt++) {
    const started = await launch(await freePort(), extraArgs);
    if ('pid' in started) return started;
    failure = started.failure;
  }
  throw new Error(`could not start redis-server on a free port after 5 attempts: ${failure}`);
}

/**
 * Stops a server started here (SIGKILL of a process that is already gone is fine). It returns at
 * once; the port may stay bound a few ms longer (`startRedisServer` on that port retries).
 * @param {number} pid
 */
export function stopRedisServer(pid) {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

/**
 * Kills every process and waits (up to 2 s) until they are gone.
 * @param {readonly number[]} pids
 * @returns {Promise<void>}
 */
export async function stopRedisProcesses(pids) {
  pids.forEach(stopRedisServer);
  const deadline = Date.now() + 2_000;
  while (Date.now() < deadline && pids.some(isAlive)) await delay(10);
}

/**
 * Stops a cluster or a sentinel group: kills all its processes, then removes its temp dir.
 * @param {{ pids: readonly number[], dir?: string }} group
 * @returns {Promise<void>}
 */
export async function stopRedisGroup({ pids, dir }) {
  await stopRedisProcesses(pids);
  if (dir) await removeTempDir(dir);
}

/**
 * Removes a temp dir made here (a missing one is fine).
 * @param {string} dir
 */
export async function removeTempDir(dir) {
  await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 50 });
  tempDirs.delete(dir);
}

/** @param {number} pid */
function isAlive(pid) {
  const child = children.get(pid);
  if (child) return child.exitCode === null && child.signalCode === null;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Starts a Redis Cluster of `masters` masters and no replicas, each node on its own free port with
 * its cluster bus on another free port, and waits until every node reports `cluster_state:ok` and
 * all nodes agree on the owner of all 16384 slots (about 2 s: a fresh master waits 2 s before it
 * declares the cluster ok).
 * @param {{ masters?: number, timeoutMs?: number }} [options]
 * @returns {Promise<RedisCluster>}
 */
export async function startRedisCluster({ masters = 3, timeoutMs = 20_000 } = {}) {
  const dir = await makeTempDir('ratelimit-cluster-');
  /** @type {number[]} */
  const pids = [];
  try {
    const started = await Promise.allSettled(Array.from({ length: masters }, (_, index) => startClusterNode(dir, index)));
    const nodes = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
    pids.push(...nodes.map(({ pid }) => pid));
    const failed = started.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
    await Promise.all(
      nodes.map(async ({ port }, index) => {
        const first = Math.floor((CLUSTER_SLOTS * index) / masters);
        const last = Math.floor((CLUSTER_SLOTS * (index + 1)) / masters) - 1;
        await redisCommand(port, ['CLUSTER', 'ADDSLOTSRANGE', first, last]);
        await redisCommand(port, ['CLUSTER', 'SET-CONFIG-EPOCH', index + 1]);
      }),
    );
    // Every pair meets directly rather than through gossip: the cluster forms sooner.
    for (const [index, node] of nodes.entries()) {
      for (const other of nodes.slice(index + 1)) {
        await redisCommand(node.port, ['CLUSTER', 'MEET', HOST, other.port, other.busPort]);
      }
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
 * @returns {Promise<RedisServer & { busPort: number }>}
 */
async function startClusterNode(dir, index) {
  let failure = '';
  for (let attempt = 0; attempt < 5; attempt++) {
    const [port, busPort] = await freePorts(2);
    const started = await launch(port, [
      '--dir', dir,
      '--cluster-enabled', 'yes',
      '--cluster-config-file', join(dir, `nodes-${index}-${port}.conf`),
      '--cluster-port', String(busPort),
      '--cluster-announce-ip', HOST,
    ]);
    if ('pid' in started) return { ...started, busPort };
    failure = started.failure;
  }
  throw new Error(`could not start cluster node ${index} on free ports after 5 attempts: ${failure}`);
}

/**
 * What keeps the cluster from being ready, or '' when every node is ok and sees the same owners.
 * @param {{ port: number }[]} nodes
 */
async function clusterProblem(nodes) {
  const views = [];
  for (const { port } of nodes) {
    const info = parseInfo(String(await redisCommand(port, ['CLUSTER', 'INFO'])));
    if (info.cluster_state !== 'ok') return `node ${port}: cluster_state:${info.cluster_state}`;
    if (info.cluster_known_nodes !== String(nodes.length)) {
      return `node ${port} knows ${info.cluster_known_nodes} of ${nodes.length} nodes`;
    }
    const slots = /** @type {RespReply[][]} */ (await redisCommand(port, ['CLUSTER', 'SLOTS']));
    const ranges = slots
      .map(([first, last, owner]) => {
        const [host, ownerPort] = /** @type {[string, number]} */ (owner);
        return { first: Number(first), last: Number(last), owner: `${host}:${ownerPort}` };
      })
      .sort((a, b) => a.first - b.first);
    const covered = ranges.reduce((sum, { first, last }) => sum + last - first + 1, 0);
    if (covered !== CLUSTER_SLOTS) return `node ${port} sees ${covered} of ${CLUSTER_SLOTS} slots served`;
    views.push(JSON.stringify(ranges));
  }
  if (new Set(views).size !== 1) return `the nodes disagree on the slot owners: ${views.join(' / ')}`;
  return '';
}

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
      const replication = parseInfo(String(await redisCommand(replica.port, ['INFO', 'replication'])));
      if (replication.master_link_status !== 'up') return `replica link ${replication.master_link_status}`;
      const primaryReplication = String(await redisCommand(primary.port, ['INFO', 'replication']));
      return primaryReplication.includes(`port=${replica.port},state=online`) ? '' : 'replica not online at the primary';
    });

    /** @type {RedisNode[]} */
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
async function startSentinel(dir, index, monitorLines) {
  let failure = '';
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort();
    const conf = join(dir, `sentinel-${index}-${port}.conf`);
    await writeFile(conf, [`port ${port}`, `bind ${HOST}`, `dir ${dir}`, ...monitorLines, ''].join('\n'));
    const started = await launch(port, [], [conf, '--sentinel']);
    if ('pid' in started) return started;
    failure = started.failure;
  }
  throw new Error(`could not start sentinel ${index} on a free port after 5 attempts: ${failure}`);
}

/**
 * What the sentinel on `port` does not see yet, or '' when it sees everything.
 * @param {number} port
 * @param {string} name
 * @param {RedisServer} primary
 * @param {RedisServer} replica
 * @param {number} otherSentinels
 */
async function sentinelProblem(port, name, primary, replica, otherSentinels) {
  const master = pairs(/** @type {RespReply[]} */ (await redisCommand(port, ['SENTINEL', 'MASTER', name])));
  if (master.flags !== 'master') return `primary flags ${master.flags}`;
  if (master.port !== String(primary.port)) return `primary is ${master.ip}:${master.port}`;
  const replicas = /** @type {RespReply[][]} */ (await redisCommand(port, ['SENTINEL', 'REPLICAS', name])).map(pairs);
  if (replicas.length !== 1 || replicas[0].port !== String(replica.port)) {
    return `replicas ${replicas.map((r) => `${r.ip}:${r.port}`).join(',') || 'none'}`;
  }
  if (replicas[0].flags !== 'slave') return `replica flags ${replicas[0].flags}`;
  if (replicas[0]['master-link-status'] !== 'ok') return `replica link ${replicas[0]['master-link-status']}`;
  const others = /** @type {RespReply[][]} */ (await redisCommand(port, ['SENTINEL', 'SENTINELS', name])).map(pairs);
  if (others.length !== otherSentinels) return `sees ${others.length} of ${otherSentinels} other sentinels`;
  const down = others.find((other) => other.flags !== 'sentinel');
  if (down) return `sentinel ${down.port} flags ${down.flags}`;
  return '';
}

/**
 * A free loopback port: free when it was picked, not reserved. Never one handed out before by this
 * process.
 * @returns {Promise<number>}
 */
export async function freePort() {
  return (await freePorts(1))[0];
}

/** @type {Set<number>} */
const handedOut = new Set();

/**
 * Distinct free loopback ports (their listeners are open at the same time).
 * @param {number} count
 * @returns {Promise<number[]>}
 */
async function freePorts(count) {
  /** @type {import('node:net').Server[]} */
  const servers = [];
  try {
    /** @type {number[]} */
    const ports = [];
    while (ports.length < count) {
      const server = createServer();
      servers.push(server);
      const port = await new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(0, HOST, () => resolve(/** @type {import('node:net').AddressInfo} */ (server.address()).port));
      });
      if (!handedOut.has(port)) ports.push(port);
    }
    ports.forEach((port) => handedOut.add(port));
    return ports;
  } finally {
    await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
  }
}

/**
 * Spawns redis-server on `port` and waits until that very process answers there.
 * @param {number} port
 * @param {string[]} extraArgs
 * @param {string[]} [leadingArgs] before the options: a config file, `--sentinel`
 * @returns {Promise<RedisServer | { failure: string }>}
 */
async function launch(port, extraArgs, leadingArgs = []) {
  const args = [
    ...leadingArgs,
    '--port', String(port), '--bind', HOST, '--save', '', '--appendonly', 'no', '--daemonize', 'no',
    '--loglevel', 'warning', ...extraArgs,
  ];
  const child = SETPRIV
    ? spawn('setpriv', ['--pdeathsig', 'KILL', '--', 'redis-server', ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
    : spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const keep = (/** @type {Buffer} */ chunk) => {
    output = (output + chunk.toString()).slice(-2_000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  child.once('error', (error) => keep(Buffer.from(String(error))));
  const pid = child.pid;
  if (pid === undefined) return { failure: `spawn failed: ${output}` };
  children.set(pid, child);
  child.once('exit', () => children.delete(pid));
  if (await answers(port, child)) return { port, pid, url: `redis://${HOST}:${port}` };
  child.kill('SIGKILL');
  return { failure: `redis-server ${args.join(' ')} did not answer on port ${port}. Its output: ${output.trim()}` };
}

/**
 * Whether the child answers INFO on `port` within 10 s (checking its pid: another process may
 * hold the port).
 * @param {number} port
 * @param {import('node:child_process').ChildProcess} child
 */
async function answers(port, child) {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline && child.exitCode === null && child.signalCode === null) {
    try {
      const info = String(await redisCommand(port, ['INFO', 'server'], 1_000));
      if (parseInfo(info).process_id === String(child.pid)) return true;
    } catch {
      // not listening yet
    }
    await delay(20);
  }
  return false;
}

/** @typedef {string | number | null | Error | unknown[]} RespReply a RESP2 reply (arrays hold replies); an error inside an array stays an Error */

/**
 * Sends one command to the server on `port` over a fresh connection and returns its reply, RESP2
 * decoded (bulk strings as UTF-8). An error reply rejects.
 * @param {number} port
 * @param {(string | number)[]} args
 * @param {number} [timeoutMs]
 * @returns {Promise<RespReply>}
 */
export function redisCommand(port, args, timeoutMs = 5_000) {
  return new Promise((resolve, reject) => {
    let buffer = Buffer.alloc(0);
    const socket = connect(port, HOST);
    const timer = setTimeout(() => fail(new Error(`${args[0]} to port ${port} timed out after ${timeoutMs} ms`)), timeoutMs);
    /** @param {Error} error */
    function fail(error) {
      clearTimeout(timer);
      socket.destroy();
      reject(error);
    }
    socket.once('connect', () => {
      const parts = args.map(String);
      socket.write(`*${parts.length}\r\n${parts.map((part) => `$${Buffer.byteLength(part)}\r\n${part}\r\n`).join('')}`);
    });
    socket.on('data', (chunk) => {
      buffer = Buffer.concat([buffer, chunk]);
      let parsed;
      try {
        parsed = parseReply(buffer, 0);
      } catch (error) {
        fail(/** @type {Error} */ (error));
        return;
      }
      if (!parsed) return;
      clearTimeout(timer);
      socket.destroy();
      if (parsed.value instanceof Error) reject(parsed.value);
      else resolve(parsed.value);
    });
    socket.once('error', fail);
    socket.once('close', () => fail(new Error(`port ${port} closed the connection before replying to ${args[0]}`)));
  });
}

/**
 * @param {Buffer} buffer
 * @param {number} start
 * @returns {{ value: RespReply, next: number } | undefined} undefined while incomplete
 */
function parseReply(buffer, start) {
  const end = buffer.indexOf('\r\n', start);
  if (end < 0) return undefined;
  const line = buffer.toString('utf8', start + 1, end);
  const next = end + 2;
  switch (String.fromCharCode(buffer[start])) {
    case '+':
      return { value: line, next };
    case '-':
      return { value: new Error(line), next };
    case ':':
      return { value: Number(line), next };
    case '$': {
      const length = Number(line);
      if (length < 0) return { value: null, next };
      if (buffer.length < next + length + 2) return undefined;
      return { value: buffer.toString('utf8', next, next + length), next: next + length + 2 };
    }
    case '*': {
      const count = Number(line);
      if (count < 0) return { value: null, next };
      /** @type {RespReply[]} */
      const items = [];
      let position = next;
      for (let index = 0; index < count; index++) {
        const item = parseReply(buffer, position);
        if (!item) return undefined;
        items.push(item.value);
        position = item.next;
      }
      return { value: items, next: position };
    }
    default:
      throw new Error(`unexpected RESP reply: ${JSON.stringify(buffer.toString('utf8', start, end))}`);
  }
}

/**
 * `field:value` lines of INFO or CLUSTER INFO.
 * @param {string} text
 * @returns {Record<string, string>}
 */
function parseInfo(text) {
  /** @type {Record<string, string>} */
  const fields = {};
  for (const line of text.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon > 0 && !line.startsWith('#')) fields[line.slice(0, colon)] = line.slice(colon + 1);
  }
  return fields;
}

/**
 * A flat `[field, value, ...]` reply (SENTINEL MASTER and friends) as a record.
 * @param {RespReply} reply
 * @returns {Record<string, string>}
 */
function pairs(reply) {
  /** @type {Record<string, string>} */
  const record = {};
  const items = Array.isArray(reply) ? reply : [];
  for (let index = 0; index + 1 < items.length; index += 2) record[String(items[index])] = String(items[index + 1]);
  return record;
}

/**
 * Polls `problem` every 50 ms until it returns '', and rejects with the last problem once
 * `timeoutMs` have passed. A rejection of `problem` (a connection error) counts as a problem.
 * @param {string} what what is awaited, for the error message
 * @param {number} timeoutMs
 * @param {() => Promise<string>} problem '' when ready, else what is still missing
 * @returns {Promise<void>}
 */
export async function waitUntil(what, timeoutMs, problem) {
  const started = Date.now();
  let last = 'not checked yet';
  while (Date.now() - started < timeoutMs) {
    try {
      last = await problem();
      if (!last) return;
    } catch (error) {
      last = error instanceof Error ? error.message : String(error);
    }
    await delay(50);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}: ${last}`);
}

/**
 * A fresh temp dir, removed at exit if its owner has not removed it before.
 * @param {string} prefix
 */
async function makeTempDir(prefix) {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  tempDirs.add(dir);
  return dir;
}

/** @param {number} ms */
function delay(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
