import { spawn, spawnSync } from 'node:child_process';
import { createServer, connect } from 'node:net';

/**
 * Real `redis-server` processes for the integration and e2e suites: started on free loopback
 * ports, never on a shared port such as 6379, and stopped by the global teardown.
 */

const INSTALL_HINT =
  'redis-server is not installed. On Debian or Ubuntu: `sudo apt-get install -y redis-server` ' +
  '(the test command installs it by itself when run as root).';

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

/** @type {import('node:child_process').ChildProcess[]} */
const children = [];
process.once('exit', () => children.forEach((child) => child.kill('SIGKILL')));

/**
 * Starts a redis-server on a free loopback port and waits until it answers PING.
 * @param {string[]} extraArgs
 * @returns {Promise<RedisServer>}
 */
export async function startRedisServer(extraArgs = []) {
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort();
    const child = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no',
        '--loglevel', 'warning', ...extraArgs],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    children.push(child);
    if (await answersPing(port, child)) return { port, pid: /** @type {number} */ (child.pid), url: `redis://127.0.0.1:${port}` };
    child.kill('SIGKILL');
  }
  throw new Error('could not start redis-server on a free port after 5 attempts');
}

/**
 * Stops a server started here (SIGKILL of a process that is already gone is fine).
 * @param {number} pid
 */
export function stopRedisServer(pid) {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

/** @returns {Promise<number>} */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = /** @type {import('node:net').AddressInfo} */ (server.address());
      server.close(() => resolve(port));
    });
  });
}

/**
 * @param {number} port
 * @param {import('node:child_process').ChildProcess} child
 */
async function answersPing(port, child) {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline && child.exitCode === null) {
    const pong = await new Promise((resolve) => {
      const socket = connect(port, '127.0.0.1', () => socket.write('PING\r\n'));
      socket.setTimeout(500, () => socket.destroy());
      socket.once('data', (data) => {
        socket.destroy();
        resolve(data.toString().startsWith('+PONG'));
      });
      socket.once('error', () => resolve(false));
      socket.once('close', () => resolve(false));
    });
    if (pong) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return false;
}
