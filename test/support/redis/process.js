// @ts-check
import { spawn, spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { delay } from '../wait.js';
import { HOST, parseInfo, withRedis } from './client.js';

/**
 * Real `redis-server` processes for the integration and e2e suites, on free loopback ports picked
 * at runtime (never on a shared port such as 6379). Whatever is started here is stopped by its
 * owner (the global teardown or the spec that started it), and also killed when the process that
 * started it exits: by an 'exit' handler, and, where util-linux `setpriv` exists, by the kernel
 * (parent-death signal) should that process be killed outright. A Redis Cluster (`cluster.js`)
 * and a Sentinel group (`sentinel.js`) are made of these processes.
 */

/** The one command that installs what the tests need; `.ci/run` runs it when `redis-server` is missing. */
const INSTALL_COMMAND = 'apt-get update && apt-get install -y redis-server';

/**
 * Fails at once, naming the command that installs it, when `redis-server` is not on PATH. Installing
 * is left to the machine's owner (`.ci/run` does it on CI): a test run changes no system packages.
 */
export function requireRedisServer() {
  if (onPath('redis-server')) return;
  throw new Error(
    'redis-server is not installed: the Redis tests and benchmarks start their own redis-server processes. ' +
      `On Debian or Ubuntu, install it with \`${INSTALL_COMMAND}\` (as root, or with sudo), or run .ci/run, which does.`,
  );
}

/** @param {string} command */
function onPath(command) {
  return spawnSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' }).status === 0;
}

/** @typedef {{ port: number, pid: number, url: string }} RedisServer a running redis-server of the tests */
/** @typedef {{ host: string, port: number }} RedisNode a host and port, as ioredis takes them */

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
  if (port === undefined) return startOnFreePorts('redis-server', 1, ([free]) => launch(free, extraArgs));
  const deadline = Date.now() + 5_000;
  let failure;
  do {
    const started = await launch(port, extraArgs);
    if ('pid' in started) return started;
    failure = started.failure;
    await delay(100);
  } while (Date.now() < deadline);
  throw new Error(`could not start redis-server on port ${port} within 5 s: ${failure}`);
}

/**
 * Runs `start` on `count` fresh free ports until it starts a server, at most 5 times: a port free
 * when picked may be taken before the server binds it.
 * @template {RedisServer} T
 * @param {string} what what is started, for the error message
 * @param {number} count
 * @param {(ports: number[]) => Promise<T | { failure: string }>} start
 * @returns {Promise<T>}
 */
export async function startOnFreePorts(what, count, start) {
  let failure = '';
  for (let attempt = 0; attempt < 5; attempt++) {
    const started = await start(await freePorts(count));
    if ('pid' in started) return started;
    failure = started.failure;
  }
  throw new Error(`could not start ${what} on free ports after 5 attempts: ${failure}`);
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
 * Stops a server started here as Redis stops when asked (`SHUTDOWN SAVE`: its data saved in its
 * `--dir` first), and waits until its process has exited. `startRedisServer` with the same
 * `--dir` on its port then starts it again with that data.
 * @param {RedisServer} server
 * @returns {Promise<void>}
 */
export async function shutdownRedisServer({ port, pid }) {
  // the server closes the connection once it has saved, with no reply
  await withRedis(port, (client) => client.call('SHUTDOWN', 'SAVE')).catch(() => undefined);
  const deadline = Date.now() + 5_000;
  while (isAlive(pid)) {
    if (Date.now() > deadline) throw new Error(`redis-server ${pid} on port ${port} still runs 5 s after SHUTDOWN`);
    await delay(5);
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
 * A fresh temp dir, removed at exit if its owner has not removed it before (`removeTempDir`).
 * @param {string} prefix
 */
export async function makeTempDir(prefix) {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  tempDirs.add(dir);
  return dir;
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
      /** @type {number} */
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
export async function launch(port, extraArgs, leadingArgs = []) {
  const args = [
    ...leadingArgs,
    '--port',
    String(port),
    '--bind',
    HOST,
    '--save',
    '',
    '--appendonly',
    'no',
    '--daemonize',
    'no',
    '--loglevel',
    'warning',
    ...extraArgs,
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
      const info = await withRedis(port, (client) => client.info('server'), 1_000);
      if (parseInfo(info).process_id === String(child.pid)) return true;
    } catch {
      // not listening yet
    }
    await delay(20);
  }
  return false;
}
