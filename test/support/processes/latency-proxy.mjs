// @ts-check
// A TCP proxy that delays every chunk, each way, by minMs to maxMs (uniformly drawn per chunk),
// as a network hop between an app and its Redis does. Bytes keep their order: a chunk never
// leaves before the one read before it. A process of its own, so that the hop keeps its time
// while the process of the app it serves is busy (a hop inside that process would stall with it).
//
//   node latency-proxy.mjs <target port> <minMs> <maxMs>   prints the port it listens on, then runs until killed
import { connect, createServer } from 'node:net';

const [targetPort, minMs, maxMs] = process.argv.slice(2).map(Number);

/** @typedef {{ at: number; chunk: Buffer }} Held a chunk read, and when it is to leave */

/**
 * Forwards what `from` sends to `to`, each chunk `minMs` to `maxMs` later, in order.
 * @param {import('node:net').Socket} from
 * @param {import('node:net').Socket} to
 */
function delayed(from, to) {
  // one queue and one timer per direction, so chunks leave in the order they came
  /** @type {Held[]} */
  const queue = [];
  /** @type {NodeJS.Timeout | undefined} */
  let timer;
  let ended = false;
  const pump = () => {
    timer = undefined;
    while (queue.length > 0 && queue[0].at <= performance.now()) {
      const { chunk } = /** @type {Held} */ (queue.shift());
      if (to.writable) to.write(chunk);
    }
    if (queue.length > 0) timer = setTimeout(pump, Math.max(0, queue[0].at - performance.now()));
    else if (ended) to.destroy();
  };
  from.on('data', (/** @type {Buffer} */ chunk) => {
    const last = queue.length > 0 ? queue[queue.length - 1].at : 0;
    queue.push({ at: Math.max(last, performance.now() + minMs + Math.random() * (maxMs - minMs)), chunk });
    timer ??= setTimeout(pump, Math.max(0, queue[0].at - performance.now()));
  });
  from.on('close', () => {
    ended = true;
    if (timer === undefined) to.destroy();
  });
}

const server = createServer((client) => {
  const upstream = connect(targetPort, '127.0.0.1');
  for (const socket of [client, upstream]) {
    socket.setNoDelay(true);
    socket.on('error', () => socket.destroy());
  }
  delayed(client, upstream);
  delayed(upstream, client);
});
server.listen(0, '127.0.0.1', () => console.log(/** @type {import('node:net').AddressInfo} */ (server.address()).port));
// the test that started it is gone: so is the proxy
process.on('disconnect', () => process.exit(0));
